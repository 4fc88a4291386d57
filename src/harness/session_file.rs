//! The session's OpenClaw-format transcript file (`sessionFile`, docs/architecture.md#method-parameters-and-results): created with the
//! session's transcript so far, appended each turn, rewritten after a transcript rewrite. The
//! store stays the source of truth: a file that cannot be written is logged and skipped, never
//! a failed turn. The formatting is [`crate::host::session_file`].

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Harness;
use crate::contract::AgentMessage;
use crate::host::session_file::{
    file_name, header_timestamp, last_entry_id, message_lines, render_file,
};
use crate::store::{StateStore, TranscriptEntry};
use crate::util::{iso_timestamp, now_ms};

fn pairs(entries: &[TranscriptEntry]) -> Vec<(String, AgentMessage)> {
    entries
        .iter()
        .map(|e| (e.entry_id.clone(), e.message.clone()))
        .collect()
}

/// Rewrites `path` from the store's transcript of `session_id`, keeping the header's creation
/// time when the file has one.
pub(crate) fn rewrite_session_file(
    path: &Path,
    store: &dyn StateStore,
    session_id: &str,
    cwd: &str,
) {
    let result = (|| -> Result<(), String> {
        let transcript = store
            .load_transcript(session_id)
            .map_err(|e| e.to_string())?;
        let created = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| header_timestamp(&t))
            .unwrap_or_else(|| iso_timestamp(now_ms()));
        let text = render_file(session_id, &created, cwd, &pairs(&transcript), now_ms());
        let tmp = path.with_extension("jsonl.tmp");
        std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, path).map_err(|e| e.to_string())
    })();
    if let Err(error) = result {
        tracing::warn!(path = %path.display(), %error, "cannot rewrite the session file");
    }
}

impl Harness {
    /// The session file of `session_id`, when session files are kept.
    pub(crate) fn session_file_path(&self, session_id: &str) -> Option<PathBuf> {
        self.cfg
            .session_dir
            .as_ref()
            .map(|dir| dir.join(file_name(session_id)))
    }

    fn session_cwd(&self) -> String {
        self.cfg.cwd.clone().unwrap_or_else(|| ".".to_string())
    }

    /// Creates the session file if it does not exist yet (header and the transcript so far)
    /// and returns its path for the engine's `sessionFile`.
    pub(crate) fn ensure_session_file(
        &self,
        session_key: &str,
        session_id: &str,
    ) -> Option<String> {
        let path = self.session_file_path(session_id)?;
        if !path.exists() {
            if let Some(dir) = path.parent() {
                if let Err(error) = std::fs::create_dir_all(dir) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot create the sessions dir");
                    return None;
                }
            }
            let store = self.store_for(session_key);
            rewrite_session_file(&path, store.as_ref(), session_id, &self.session_cwd());
        }
        path.exists().then(|| path.display().to_string())
    }

    /// Appends a turn's entries, chained after the file's last entry.
    pub(crate) fn append_session_file(&self, session_id: &str, entries: &[TranscriptEntry]) {
        let Some(path) = self.session_file_path(session_id) else {
            return;
        };
        let result = (|| -> Result<(), std::io::Error> {
            let existing = std::fs::read_to_string(&path)?;
            let lines = message_lines(
                last_entry_id(&existing).as_deref(),
                &pairs(entries),
                now_ms(),
            );
            let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
            if !existing.is_empty() && !existing.ends_with('\n') {
                file.write_all(b"\n")?;
            }
            file.write_all(lines.as_bytes())
        })();
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "cannot append to the session file");
        }
    }
}
