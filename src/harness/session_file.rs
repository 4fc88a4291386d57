//! The session's OpenClaw-format transcript file (`sessionFile`, docs/architecture.md#method-parameters-and-results): created with the
//! session's transcript so far, appended each turn, rewritten after a transcript rewrite. The
//! store stays the source of truth: a file that cannot be written is logged and skipped, never
//! a failed turn. The formatting is [`crate::host::session_file`].

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
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
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)?;
            let tail = read_tail(&mut file, TAIL_WINDOW)?;
            let lines = message_lines(tail.last_id.as_deref(), &pairs(entries), now_ms());
            if tail.unterminated {
                file.write_all(b"\n")?;
            }
            file.write_all(lines.as_bytes())
        })();
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "cannot append to the session file");
        }
    }
}

/// The bytes read from a session file's end at first when appending; doubled until a whole
/// entry line is among them (a long message's line is longer).
const TAIL_WINDOW: u64 = 8 * 1024;

/// What appending to a session file needs of what it holds.
#[derive(Debug, PartialEq, Eq)]
struct Tail {
    /// The last entry's id ([`last_entry_id`] of the whole text).
    last_id: Option<String>,
    /// The file does not end with a newline (a torn last line): the next entry starts on a
    /// line of its own.
    unterminated: bool,
}

/// Reads what [`Tail`] needs from the end of `file`, `window` bytes at first, so that a turn
/// does not read the whole session file: its cost stays that of the last lines however long
/// the session grows. The result is that of [`last_entry_id`] on the whole text.
fn read_tail(file: &mut File, window: u64) -> std::io::Result<Tail> {
    let len = file.metadata()?.len();
    let mut window = window.clamp(1, len.max(1));
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        Read::take(&mut *file, len - start).read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        // Unless the window starts the file, its first line is cut: only whole lines count.
        let whole = match start {
            0 => Some(text.as_ref()),
            _ => text.find('\n').map(|at| &text[at + 1..]),
        };
        let last_id = whole.and_then(last_entry_id);
        if last_id.is_some() || start == 0 {
            return Ok(Tail {
                last_id,
                unterminated: bytes.last().is_some_and(|b| *b != b'\n'),
            });
        }
        window = window.saturating_mul(2);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;

    use super::{last_entry_id, read_tail, Tail};

    fn entry(id: &str, text_len: usize) -> String {
        format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"message\":{{\"text\":\"{}\"}}}}\n",
            "é".repeat(text_len)
        )
    }

    /// Every window finds what reading the whole file finds, whatever the lines' lengths,
    /// a torn last line, or a header alone.
    #[test]
    fn the_tail_says_what_the_whole_file_says() {
        let header = "{\"type\":\"session\",\"id\":\"s\"}\n".to_string();
        let cases = [
            String::new(),
            header.clone(),
            format!("{header}{}", entry("a", 3)),
            format!("{header}{}{}", entry("a", 3), entry("b", 5000)),
            format!("{header}{}{}", entry("a", 9000), entry("b", 2)),
            format!("{header}{}{{\"type\":\"mess", entry("a", 40)),
            format!("{header}{}not json\n\n", entry("a", 40)),
            format!("{header}{}", entry("a", 40)).trim_end().to_string(),
        ];
        for text in &cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            std::fs::File::create(&path)
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let expected = Tail {
                last_id: last_entry_id(text),
                unterminated: !text.is_empty() && !text.ends_with('\n'),
            };
            for window in [1, 7, 64, 1000, 8 * 1024, 1 << 20] {
                let mut file = std::fs::File::open(&path).unwrap();
                assert_eq!(
                    read_tail(&mut file, window).unwrap(),
                    expected,
                    "window {window} of {text:?}"
                );
            }
        }
    }
}
