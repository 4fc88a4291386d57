//! Client configuration and the API key wrapper.

use std::fmt;
use std::time::Duration;

/// An API key. Its `Debug` and `Display` print `[redacted]`; the only way to read it is
/// [`ApiKey::expose`], which the client uses to build the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key itself. Do not log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How to reach a Responses API server. Its `Debug` shows the base URL redacted (see
/// [`crate::redact_url`]) and never the key.
#[derive(Clone)]
pub struct ResponsesConfig {
    /// The API root; requests go to `{base_url}/responses` (e.g. `https://api.openai.com/v1`),
    /// joined as URL path segments so that a query string stays at the end.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when present.
    pub api_key: Option<ApiKey>,
    /// The longest wait for the next SSE event of a streaming response.
    pub idle_timeout: Duration,
    /// The longest wait for the response headers of one attempt (and, for the JSON compaction
    /// endpoint, for its whole body). A streaming body is bounded by `idle_timeout` per event
    /// instead, so long replies are not cut off.
    pub request_timeout: Duration,
    /// Retries after the first attempt, for 5xx answers and connection errors (including no
    /// headers within `request_timeout`) only, and only before the response started streaming.
    /// 4xx answers are never retried — 429 (rate limit) included: the caller decides when to
    /// try again.
    pub max_retries: u32,
    /// The wait before the first retry; it doubles for every further retry.
    pub backoff_base: Duration,
    /// The longest a streaming response may take in all, from the request to
    /// `response.completed` (retries and waiting for headers included).
    pub turn_timeout: Duration,
    /// The longest reply text of one response, in bytes.
    pub max_reply_bytes: usize,
    /// The longest line, or data of one event, of the event stream, in bytes.
    pub max_event_bytes: usize,
}

impl fmt::Debug for ResponsesConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponsesConfig")
            .field("base_url", &crate::urls::redact_url_str(&self.base_url))
            .field("api_key", &self.api_key)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff_base", &self.backoff_base)
            .field("turn_timeout", &self.turn_timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

impl ResponsesConfig {
    /// 120 s without a stream event ends the response.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_MAX_RETRIES: u32 = 2;
    pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_millis(250);
    /// 20 minutes for a whole response.
    pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(20 * 60);
    /// 8 MiB of reply text.
    pub const DEFAULT_MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;
    /// 16 MiB for one event-stream line or event (a `response.completed` event repeats the
    /// whole reply, so this stays well above [`Self::DEFAULT_MAX_REPLY_BYTES`]).
    pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

    /// A configuration with the defaults (no key, 120 s idle, 60 s to headers, 2 retries from
    /// 250 ms, 20 min per response, 8 MiB of reply, 16 MiB per event).
    pub fn new(base_url: impl Into<String>) -> Self {
        ResponsesConfig {
            base_url: base_url.into(),
            api_key: None,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            max_retries: Self::DEFAULT_MAX_RETRIES,
            backoff_base: Self::DEFAULT_BACKOFF_BASE,
            turn_timeout: Self::DEFAULT_TURN_TIMEOUT,
            max_reply_bytes: Self::DEFAULT_MAX_REPLY_BYTES,
            max_event_bytes: Self::DEFAULT_MAX_EVENT_BYTES,
        }
    }

    pub fn with_api_key(mut self, api_key: Option<ApiKey>) -> Self {
        self.api_key = api_key;
        self
    }

    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    pub fn with_backoff_base(mut self, backoff_base: Duration) -> Self {
        self.backoff_base = backoff_base;
        self
    }

    pub fn with_turn_timeout(mut self, turn_timeout: Duration) -> Self {
        self.turn_timeout = turn_timeout;
        self
    }

    pub fn with_max_reply_bytes(mut self, max_reply_bytes: usize) -> Self {
        self.max_reply_bytes = max_reply_bytes;
        self
    }

    pub fn with_max_event_bytes(mut self, max_event_bytes: usize) -> Self {
        self.max_event_bytes = max_event_bytes;
        self
    }

    /// The wait before retry number `retry` (1-based): `backoff_base × 2^(retry−1)`.
    pub fn backoff_for(&self, retry: u32) -> Duration {
        let factor = 1u32 << retry.saturating_sub(1).min(16);
        self.backoff_base.saturating_mul(factor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The key prints as `[redacted]` through Debug and Display, also inside the config.
    #[test]
    fn api_key_never_prints() {
        let key = ApiKey::new("sk-very-secret");
        assert_eq!(format!("{key}"), "[redacted]");
        assert_eq!(format!("{key:?}"), "[redacted]");
        let config = ResponsesConfig::new("http://127.0.0.1:1").with_api_key(Some(key.clone()));
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        assert_eq!(key.expose(), "sk-very-secret");
    }

    /// Debug of the config never shows a key written into the base URL's userinfo or query.
    #[test]
    fn config_debug_redacts_the_base_url() {
        let config =
            ResponsesConfig::new("http://user:sk-in-userinfo@127.0.0.1:1/v1?api-key=sk-in-query");
        let debug = format!("{config:?}");
        assert!(!debug.contains("sk-in-userinfo"), "{debug}");
        assert!(!debug.contains("sk-in-query"), "{debug}");
        assert!(debug.contains("127.0.0.1:1/v1?api-key=***"), "{debug}");
    }

    /// Backoff doubles from the base for each retry.
    #[test]
    fn backoff_doubles() {
        let config = ResponsesConfig::new("x").with_backoff_base(Duration::from_millis(100));
        assert_eq!(config.backoff_for(1), Duration::from_millis(100));
        assert_eq!(config.backoff_for(2), Duration::from_millis(200));
        assert_eq!(config.backoff_for(3), Duration::from_millis(400));
    }
}
