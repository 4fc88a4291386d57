//! The bounds of one streaming response: idle timeout, turn deadline, event and reply caps.

use std::time::Duration;

use tokio::time::Instant;

/// The bounds of one streaming response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The longest wait for the next event.
    pub idle_timeout: Duration,
    /// The longest the whole response may take, counted from `started`.
    pub turn_timeout: Duration,
    /// When the response was requested.
    pub started: Instant,
    /// The longest SSE line or event data, in bytes.
    pub max_event_bytes: usize,
    /// The longest reply text (the sum of the text deltas, or of the finished items' text), in
    /// bytes.
    pub max_reply_bytes: usize,
}

impl StreamLimits {
    /// Limits with this idle timeout and the client's other defaults, starting now.
    pub fn with_idle_timeout(idle_timeout: Duration) -> Self {
        StreamLimits {
            idle_timeout,
            turn_timeout: crate::config::ResponsesConfig::DEFAULT_TURN_TIMEOUT,
            started: Instant::now(),
            max_event_bytes: crate::config::ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
            max_reply_bytes: crate::config::ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
        }
    }

    /// The instant the turn deadline passes; `None` when it lies beyond what `Instant` can hold.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.started.checked_add(self.turn_timeout)
    }
}
