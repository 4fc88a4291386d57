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

/// How to reach a Responses API server.
#[derive(Debug, Clone)]
pub struct ResponsesConfig {
    /// The API root; requests go to `{base_url}/responses` (e.g. `https://api.openai.com/v1`).
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
}

impl ResponsesConfig {
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_MAX_RETRIES: u32 = 2;
    pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_millis(250);

    /// A configuration with the defaults (no key, 300 s idle, 60 s to headers, 2 retries from
    /// 250 ms).
    pub fn new(base_url: impl Into<String>) -> Self {
        ResponsesConfig {
            base_url: base_url.into(),
            api_key: None,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            max_retries: Self::DEFAULT_MAX_RETRIES,
            backoff_base: Self::DEFAULT_BACKOFF_BASE,
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

    /// Backoff doubles from the base for each retry.
    #[test]
    fn backoff_doubles() {
        let config = ResponsesConfig::new("x").with_backoff_base(Duration::from_millis(100));
        assert_eq!(config.backoff_for(1), Duration::from_millis(100));
        assert_eq!(config.backoff_for(2), Duration::from_millis(200));
        assert_eq!(config.backoff_for(3), Duration::from_millis(400));
    }
}
