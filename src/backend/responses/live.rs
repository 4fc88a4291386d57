//! The conversations this process knows to exist (conversation threads). The harness resumes a
//! stored thread before every turn; asking the server each time (`GET /conversations/{id}`)
//! would add a round trip to the upstream to every turn. A conversation created here, or that
//! a call has just found, is resumed without a call; one that a call finds gone is forgotten,
//! so its next resume asks the server again. A conversation deleted on the server behind this
//! process's back shows on its next turn instead, as
//! [`BackendError::ThreadNotFound`](super::BackendError::ThreadNotFound), as it would between
//! a resume and a turn anyway.

use std::time::Duration;

use super::{BackendError, ThreadId};

/// Conversations kept at most (an evicted one is asked for again on its next resume).
const KEPT: u64 = 100_000;
/// How long a conversation stays known from when it was learnt: after this, its next resume
/// asks the server again (at most one lookup an hour per conversation, used or not).
const KNOWN_FOR: Duration = Duration::from_secs(3600);

/// The conversations known to exist.
#[derive(Debug)]
pub(super) struct LiveConversations(moka::future::Cache<String, ()>);

impl Default for LiveConversations {
    fn default() -> Self {
        LiveConversations(
            moka::future::Cache::builder()
                .max_capacity(KEPT)
                .time_to_live(KNOWN_FOR)
                .build(),
        )
    }
}

impl LiveConversations {
    /// Whether `thread` is known to exist.
    pub(super) fn contains(&self, thread: &ThreadId) -> bool {
        self.0.contains_key(thread.as_str())
    }

    /// `thread` exists (this process has just created it).
    pub(super) async fn seen(&self, thread: &ThreadId) {
        self.0.insert(thread.as_str().to_owned(), ()).await;
    }

    /// Learns from the result of a call on `thread`: it exists after a call that went through,
    /// and is gone after one that found it missing; other failures say nothing of it.
    pub(super) async fn learn<T>(&self, thread: &ThreadId, result: &Result<T, BackendError>) {
        match result {
            // Known already (the common case, after every turn): nothing to write. An insert
            // here cost 25-50 us per turn on the path from the model's answer to the client.
            Ok(_) if self.contains(thread) => {}
            Ok(_) => self.seen(thread).await,
            Err(BackendError::ThreadNotFound { .. }) => self.0.invalidate(thread.as_str()).await,
            Err(_) => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_that_goes_through_or_finds_it_gone_decides() {
        let live = LiveConversations::default();
        let thread = ThreadId("conv_1".into());
        assert!(!live.contains(&thread));
        live.learn(&thread, &Ok::<(), BackendError>(())).await;
        assert!(live.contains(&thread));
        let unavailable: Result<(), BackendError> = Err(BackendError::Unavailable {
            operation: "run turn",
            message: "connection refused".into(),
        });
        live.learn(&thread, &unavailable).await;
        assert!(
            live.contains(&thread),
            "a failure that is not about the thread"
        );
        let gone: Result<(), BackendError> = Err(BackendError::ThreadNotFound {
            operation: "run turn",
            thread_id: "conv_1".into(),
            message: "not found".into(),
        });
        live.learn(&thread, &gone).await;
        assert!(!live.contains(&thread));
    }
}
