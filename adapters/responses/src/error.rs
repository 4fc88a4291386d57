//! Errors of the Responses client, each with the operation and what it concerned.

use std::time::Duration;

/// The API's error code for a chain whose previous response is gone (expired, or stored with
/// `store: false`).
pub const PREVIOUS_RESPONSE_NOT_FOUND: &str = "previous_response_not_found";
/// The API's error code for an input that does not fit the model's context window.
pub const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";

/// The error code a server may give for a conversation that does not exist (the OpenAI API
/// answers a plain 404 instead, see [`ResponsesError::is_conversation_not_found`]).
pub const CONVERSATION_NOT_FOUND: &str = "conversation_not_found";

/// Phrases of an overflow message sent without the code (matched case-insensitively).
const OVERFLOW_PHRASES: [&str; 3] = ["context window", "context length", "maximum context"];

/// Why a Responses API call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResponsesError {
    /// The client could not be built or the request could not be formed.
    #[error("{operation}: invalid client configuration: {message}")]
    Config {
        operation: &'static str,
        message: String,
    },
    /// No HTTP answer: connection refused or reset, or no response headers within the request
    /// timeout — after every allowed attempt.
    #[error("{operation} {url}: no answer after {attempts} attempt(s): {message}")]
    Connect {
        operation: &'static str,
        url: String,
        attempts: u32,
        message: String,
    },
    /// The server answered with a non-success HTTP status.
    #[error("{operation} {url}: HTTP {status}{}: {message} (after {attempts} attempt(s))", code_suffix(.code))]
    Api {
        operation: &'static str,
        url: String,
        status: u16,
        /// The API's `error.code`, when the body carried one.
        code: Option<String>,
        message: String,
        attempts: u32,
        /// Whether the request continued a chain (`previous_response_id` was set).
        chained: bool,
        /// Whether the request named a conversation (`conversation` was set, or the call was
        /// on `/conversations/{id}`).
        conversation: bool,
    },
    /// The stream reported `response.failed` (or `response.incomplete`).
    #[error("{operation}: response {} failed{}: {message}", .response_id.as_deref().unwrap_or("(unknown)"), code_suffix(.code))]
    ResponseFailed {
        operation: &'static str,
        response_id: Option<String>,
        code: Option<String>,
        message: String,
    },
    /// The stream carried an `error` event.
    #[error("{operation}: error event{}: {message}", code_suffix(.code))]
    ErrorEvent {
        operation: &'static str,
        code: Option<String>,
        message: String,
    },
    /// No SSE event arrived within the idle timeout.
    #[error("{operation}: no stream event within the idle timeout of {after:?}")]
    IdleTimeout {
        operation: &'static str,
        after: Duration,
    },
    /// The response did not complete within the turn deadline.
    #[error("{operation}: the response did not complete within the turn deadline of {after:?}")]
    Deadline {
        operation: &'static str,
        after: Duration,
    },
    /// The reply text grew past the cap.
    #[error("{operation}: the reply is larger than the cap of {limit} bytes")]
    ReplyTooLarge {
        operation: &'static str,
        limit: usize,
    },
    /// One SSE line or event's data is longer than the cap.
    #[error("{operation}: an event-stream line or event is larger than the cap of {limit} bytes")]
    EventTooLarge {
        operation: &'static str,
        limit: usize,
    },
    /// The stream ended before `response.completed`.
    #[error("{operation}: stream closed before response.completed (response {})", .response_id.as_deref().unwrap_or("not yet created"))]
    StreamClosed {
        operation: &'static str,
        response_id: Option<String>,
    },
    /// Reading the body failed mid-stream (reset connection, invalid UTF-8, malformed SSE).
    #[error("{operation}: reading the response failed: {message}")]
    Transport {
        operation: &'static str,
        message: String,
    },
    /// An event or body that does not have the documented shape.
    #[error("{operation}: malformed {what}: {message}")]
    Decode {
        operation: &'static str,
        what: String,
        message: String,
    },
    /// The server does not offer this endpoint (HTTP 404/405 without an API error code).
    #[error("{operation} is not supported by the server at {url} (HTTP {status})")]
    Unsupported {
        operation: &'static str,
        url: String,
        status: u16,
    },
}

fn code_suffix(code: &Option<String>) -> String {
    match code {
        Some(code) => format!(" ({code})"),
        None => String::new(),
    }
}

impl ResponsesError {
    /// The HTTP status, for errors the server answered with a status.
    pub fn status(&self) -> Option<u16> {
        match self {
            ResponsesError::Api { status, .. } | ResponsesError::Unsupported { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }

    /// The API's error code, wherever the server reported one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ResponsesError::Api { code, .. }
            | ResponsesError::ResponseFailed { code, .. }
            | ResponsesError::ErrorEvent { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The server's message, wherever the server sent one.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            ResponsesError::Api { message, .. }
            | ResponsesError::ResponseFailed { message, .. }
            | ResponsesError::ErrorEvent { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The chain's previous response is gone: code `previous_response_not_found`, or a 404 on
    /// a request that continued a chain.
    pub fn is_previous_response_not_found(&self) -> bool {
        if self.code() == Some(PREVIOUS_RESPONSE_NOT_FOUND) {
            return true;
        }
        matches!(
            self,
            ResponsesError::Api {
                status: 404,
                chained: true,
                ..
            }
        )
    }

    /// The conversation named by the request does not exist (never created, or deleted): code
    /// `conversation_not_found`, or a 404 on a request that named a conversation.
    pub fn is_conversation_not_found(&self) -> bool {
        if self.code() == Some(CONVERSATION_NOT_FOUND) {
            return true;
        }
        matches!(
            self,
            ResponsesError::Api {
                status: 404,
                conversation: true,
                ..
            }
        )
    }

    /// The input did not fit the model's context window: code `context_length_exceeded`, or a
    /// server message naming the context window/length.
    pub fn is_context_overflow(&self) -> bool {
        if self.code() == Some(CONTEXT_LENGTH_EXCEEDED) {
            return true;
        }
        self.server_message().is_some_and(|message| {
            let lower = message.to_ascii_lowercase();
            OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
        })
    }

    /// Whether another attempt may succeed: a 5xx answer or no answer at all.
    pub fn is_retryable(&self) -> bool {
        match self {
            ResponsesError::Connect { .. } => true,
            ResponsesError::Api { status, .. } => (500..600).contains(status),
            _ => false,
        }
    }

    /// The same error with every occurrence of `secret` in its texts replaced by `[redacted]`,
    /// so that a server echoing the key cannot leak it into logs.
    pub fn redacted(self, secret: &str) -> Self {
        if secret.is_empty() {
            return self;
        }
        let scrub = |text: String| {
            if text.contains(secret) {
                text.replace(secret, "[redacted]")
            } else {
                text
            }
        };
        let scrub_opt = |text: Option<String>| text.map(scrub);
        match self {
            ResponsesError::Config { operation, message } => ResponsesError::Config {
                operation,
                message: scrub(message),
            },
            ResponsesError::Connect {
                operation,
                url,
                attempts,
                message,
            } => ResponsesError::Connect {
                operation,
                url: scrub(url),
                attempts,
                message: scrub(message),
            },
            ResponsesError::Api {
                operation,
                url,
                status,
                code,
                message,
                attempts,
                chained,
                conversation,
            } => ResponsesError::Api {
                operation,
                url: scrub(url),
                status,
                code: scrub_opt(code),
                message: scrub(message),
                attempts,
                chained,
                conversation,
            },
            ResponsesError::ResponseFailed {
                operation,
                response_id,
                code,
                message,
            } => ResponsesError::ResponseFailed {
                operation,
                response_id: scrub_opt(response_id),
                code: scrub_opt(code),
                message: scrub(message),
            },
            ResponsesError::ErrorEvent {
                operation,
                code,
                message,
            } => ResponsesError::ErrorEvent {
                operation,
                code: scrub_opt(code),
                message: scrub(message),
            },
            ResponsesError::StreamClosed {
                operation,
                response_id,
            } => ResponsesError::StreamClosed {
                operation,
                response_id: scrub_opt(response_id),
            },
            ResponsesError::Transport { operation, message } => ResponsesError::Transport {
                operation,
                message: scrub(message),
            },
            ResponsesError::Decode {
                operation,
                what,
                message,
            } => ResponsesError::Decode {
                operation,
                what,
                message: scrub(message),
            },
            ResponsesError::Unsupported {
                operation,
                url,
                status,
            } => ResponsesError::Unsupported {
                operation,
                url: scrub(url),
                status,
            },
            error @ (ResponsesError::IdleTimeout { .. }
            | ResponsesError::Deadline { .. }
            | ResponsesError::ReplyTooLarge { .. }
            | ResponsesError::EventTooLarge { .. }) => error,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn api(status: u16, code: Option<&str>, message: &str, chained: bool) -> ResponsesError {
        ResponsesError::Api {
            operation: "create response",
            url: "http://127.0.0.1:1/responses".into(),
            status,
            code: code.map(str::to_owned),
            message: message.into(),
            attempts: 1,
            chained,
            conversation: false,
        }
    }

    /// `previous_response_not_found` is recognised by code anywhere, and by a 404 only on a chain.
    #[test]
    fn previous_response_not_found_predicate() {
        assert!(api(400, Some(PREVIOUS_RESPONSE_NOT_FOUND), "gone", false)
            .is_previous_response_not_found());
        assert!(api(404, None, "Not Found", true).is_previous_response_not_found());
        assert!(!api(404, None, "Not Found", false).is_previous_response_not_found());
        assert!(!api(400, Some("invalid_value"), "bad", true).is_previous_response_not_found());
        let failed = ResponsesError::ErrorEvent {
            operation: "create response",
            code: Some(PREVIOUS_RESPONSE_NOT_FOUND.into()),
            message: "gone".into(),
        };
        assert!(failed.is_previous_response_not_found());
    }

    /// A missing conversation is recognised by its code anywhere, and by a 404 only on a
    /// request that named a conversation.
    #[test]
    fn conversation_not_found_predicate() {
        let on_conversation = ResponsesError::Api {
            operation: "create response",
            url: "http://127.0.0.1:1/responses".into(),
            status: 404,
            code: None,
            message: "Conversation with id 'conv_x' not found.".into(),
            attempts: 1,
            chained: false,
            conversation: true,
        };
        assert!(on_conversation.is_conversation_not_found());
        assert!(!on_conversation.is_previous_response_not_found());
        assert!(!api(404, None, "Not Found", false).is_conversation_not_found());
        assert!(api(400, Some(CONVERSATION_NOT_FOUND), "gone", false).is_conversation_not_found());
    }

    /// Overflow is recognised by the code or by the wording of the server's message.
    #[test]
    fn context_overflow_predicate() {
        assert!(api(400, Some(CONTEXT_LENGTH_EXCEEDED), "x", false).is_context_overflow());
        let failed = ResponsesError::ResponseFailed {
            operation: "create response",
            response_id: Some("resp_1".into()),
            code: None,
            message: "Your input exceeds the Context Window of this model.".into(),
        };
        assert!(failed.is_context_overflow());
        assert!(!api(400, Some("invalid_value"), "bad input", false).is_context_overflow());
    }

    /// Only 5xx answers and connection failures are retryable.
    #[test]
    fn retryable_classes() {
        assert!(api(500, None, "x", false).is_retryable());
        assert!(api(503, None, "x", false).is_retryable());
        assert!(!api(400, None, "x", false).is_retryable());
        assert!(!api(429, None, "x", false).is_retryable());
        let connect = ResponsesError::Connect {
            operation: "create response",
            url: "u".into(),
            attempts: 1,
            message: "refused".into(),
        };
        assert!(connect.is_retryable());
    }

    /// Redaction scrubs a secret echoed in server texts out of Display and Debug.
    #[test]
    fn redaction_scrubs_echoed_secret() {
        let error = api(
            401,
            Some("invalid_api_key"),
            "Incorrect API key: sk-abc",
            false,
        )
        .redacted("sk-abc");
        assert!(!error.to_string().contains("sk-abc"));
        assert!(!format!("{error:?}").contains("sk-abc"));
        assert!(error.to_string().contains("[redacted]"));
    }
}
