//! Where each backend thread of a session begins in the session's transcript. A session whose
//! thread was replaced (an epoch change, drift under `rotate`, overflow recovery) has turns on
//! earlier backend threads; the messages before the current thread's position belong to them
//! (ctxbridge serve shows a client its whole conversation from this).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{store_err, Harness, HarnessError};
use crate::backend::ThreadId;
use crate::store::TurnWrite;

/// The store documents namespace (key = session key). The name predates the harness keeping
/// it and stays, so stores written before keep their history.
pub const THREAD_HISTORY_NAMESPACE: &str = "serve.session-history";

/// A session's backend threads and where each begins in its transcript.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadHistory {
    /// Backend thread id → how many transcript messages the session had when it started.
    pub threads: BTreeMap<String, usize>,
}

impl Harness {
    /// A session's thread history as stored (empty when none was recorded).
    pub fn thread_history(&self, session_key: &str) -> Result<ThreadHistory, HarnessError> {
        let Some(json) = self
            .store()
            .load_document(THREAD_HISTORY_NAMESPACE, session_key)
            .map_err(store_err("load thread history"))?
        else {
            return Ok(ThreadHistory::default());
        };
        serde_json::from_str(&json).map_err(|source| HarnessError::ThreadHistory {
            session: session_key.to_owned(),
            source,
        })
    }

    /// The write that records that the session's new backend thread `thread` begins where its
    /// transcript stands now (built with the session's lease held, after the first turn on the
    /// thread ran and before it is recorded: the previous turn is committed and this one is
    /// not yet; the write goes with the turn's record). A session's first thread begins at 0,
    /// which is what no record says, so nothing is written for it. A failure is logged: reads
    /// then show only the current backend thread.
    ///
    /// `transcript_len`: how many messages the transcript holds, when the caller knows (else
    /// it is read).
    pub(super) fn thread_start_write(
        &self,
        session_key: &str,
        thread: &ThreadId,
        transcript_len: Option<usize>,
    ) -> Option<TurnWrite> {
        let transcript_len = match transcript_len {
            Some(known) => Ok(known),
            None => self.transcript(session_key).map(|t| t.len()),
        };
        let write = transcript_len.and_then(|transcript_len| {
            if transcript_len == 0 {
                return Ok(None);
            }
            let mut history = self.thread_history(session_key)?;
            history
                .threads
                .insert(thread.as_str().to_owned(), transcript_len);
            let json = serde_json::to_string(&history).map_err(|source| HarnessError::Encode {
                what: "a thread history",
                source,
            })?;
            Ok(Some(TurnWrite::SaveDocument {
                namespace: THREAD_HISTORY_NAMESPACE.to_owned(),
                key: session_key.to_owned(),
                json,
            }))
        });
        write.unwrap_or_else(|error| {
            thread_start_unrecorded(session_key, thread, &error);
            None
        })
    }
}

/// Logs that where a session's new backend thread begins could not be recorded.
pub(super) fn thread_start_unrecorded(
    session_key: &str,
    thread: &ThreadId,
    error: &dyn std::fmt::Display,
) {
    tracing::warn!(session = %session_key, %thread, %error, "could not record where the session's new backend thread begins; reads show only its current backend thread");
}
