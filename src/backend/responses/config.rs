//! What the backend is built from: the `backend` section's settings and the API key.

use std::fmt;
use std::time::Duration;

use responses_client::{redact_url_str, ApiKey, ResponsesConfig, ResponsesError};
use serde::{Deserialize, Serialize};

use super::super::BackendError;

/// What a Responses thread is (config `backend.threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponsesThreads {
    /// A chain of `previous_response_id`s; the thread id is the chain head and changes every
    /// turn. Stored responses expire after 30 days.
    Chain,
    /// A server-side conversation; the thread id (`conv_…`) is stable.
    #[default]
    Conversation,
}

impl ResponsesThreads {
    pub fn as_str(self) -> &'static str {
        match self {
            ResponsesThreads::Chain => "chain",
            ResponsesThreads::Conversation => "conversation",
        }
    }
}

/// What the backend is built from (the `backend` section of the config). Its `Debug` shows the
/// base URL redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct ResponsesBackendConfig {
    /// The API root; requests go to `{base_url}/responses`.
    pub base_url: String,
    /// The model of every request (unless `start_thread` overrides it).
    pub model: String,
    /// The environment variable holding the API key; `None` sends no `Authorization` header.
    pub api_key_env: Option<String>,
    /// What a thread is; [`ResponsesThreads::Conversation`] by default.
    pub threads: ResponsesThreads,
    /// The longest wait for the next stream event (default 120 s).
    pub idle_timeout: Duration,
    /// The longest one response may take in all (default 20 min).
    pub turn_timeout: Duration,
    /// The longest reply text, in bytes (default 8 MiB).
    pub max_reply_bytes: usize,
    /// The longest event-stream line or event, in bytes (default 16 MiB).
    pub max_event_bytes: usize,
}

impl ResponsesBackendConfig {
    /// A configuration with the defaults: no key variable, conversation threads, and the
    /// client's default limits.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ResponsesBackendConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            threads: ResponsesThreads::default(),
            idle_timeout: ResponsesConfig::DEFAULT_IDLE_TIMEOUT,
            turn_timeout: ResponsesConfig::DEFAULT_TURN_TIMEOUT,
            max_reply_bytes: ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
            max_event_bytes: ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl fmt::Debug for ResponsesBackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponsesBackendConfig")
            .field("base_url", &redact_url_str(&self.base_url))
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("threads", &self.threads)
            .field("idle_timeout", &self.idle_timeout)
            .field("turn_timeout", &self.turn_timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

/// Why the backend could not be built. Names the key's variable, never its value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResponsesBackendConfigError {
    #[error("Responses backend: the API key variable {variable} (backend api_key_env) is not set")]
    ApiKeyUnset { variable: String },
    #[error("Responses backend: the API key variable {variable} (backend api_key_env) is empty")]
    ApiKeyEmpty { variable: String },
    #[error(
        "Responses backend: the API key variable {variable} (backend api_key_env) is not valid UTF-8"
    )]
    ApiKeyNotUnicode { variable: String },
    #[error("Responses backend: the model name is empty")]
    EmptyModel,
    #[error("Responses backend: {0}")]
    Client(#[from] ResponsesError),
}

impl From<ResponsesBackendConfigError> for BackendError {
    fn from(error: ResponsesBackendConfigError) -> Self {
        BackendError::Other {
            operation: "configure the Responses backend",
            message: error.to_string(),
        }
    }
}

/// Reads the API key from the variable `variable` names, through `lookup` (the process
/// environment in [`ResponsesBackend::new`](super::ResponsesBackend::new)).
pub fn api_key_from_env(
    variable: Option<&str>,
    lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
) -> Result<Option<ApiKey>, ResponsesBackendConfigError> {
    let Some(variable) = variable else {
        return Ok(None);
    };
    match lookup(variable) {
        Ok(value) if value.trim().is_empty() => Err(ResponsesBackendConfigError::ApiKeyEmpty {
            variable: variable.to_owned(),
        }),
        Ok(value) => Ok(Some(ApiKey::new(value.trim().to_owned()))),
        Err(std::env::VarError::NotPresent) => Err(ResponsesBackendConfigError::ApiKeyUnset {
            variable: variable.to_owned(),
        }),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(ResponsesBackendConfigError::ApiKeyNotUnicode {
                variable: variable.to_owned(),
            })
        }
    }
}
