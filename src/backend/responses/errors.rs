//! How the client's errors become [`BackendError`]s.

use responses_client::ResponsesError;

use super::super::{is_overflow_message, BackendError};
use super::{
    BACKEND_NAME, IDLE_TIMEOUT_KEY, MAX_EVENT_BYTES_KEY, MAX_REPLY_BYTES_KEY, TURN_TIMEOUT_KEY,
};

/// Maps a client error onto the port's error kinds.
pub(super) fn backend_error(
    operation: &'static str,
    thread_id: &str,
    error: ResponsesError,
) -> BackendError {
    if error.is_previous_response_not_found() || error.is_conversation_not_found() {
        return BackendError::ThreadNotFound {
            operation,
            thread_id: thread_id.to_owned(),
            message: error.to_string(),
        };
    }
    if error.is_context_overflow() || error.server_message().is_some_and(is_overflow_message) {
        return BackendError::ContextOverflow {
            operation,
            message: error.to_string(),
        };
    }
    let message = error.to_string();
    match error {
        ResponsesError::Unsupported { .. } => BackendError::Unsupported {
            operation,
            backend: BACKEND_NAME,
        },
        ResponsesError::ResponseFailed { .. } | ResponsesError::ErrorEvent { .. } => {
            BackendError::TurnFailed { operation, message }
        }
        ResponsesError::IdleTimeout { .. } => BackendError::Unavailable {
            operation,
            message: format!("{message}; the server went silent (the limit is {IDLE_TIMEOUT_KEY})"),
        },
        ResponsesError::Deadline { .. } => BackendError::Unavailable {
            operation,
            message: format!("{message}; the turn was abandoned (the limit is {TURN_TIMEOUT_KEY})"),
        },
        ResponsesError::ReplyTooLarge { .. } => BackendError::TurnFailed {
            operation,
            message: format!(
                "{message}; the turn was abandoned (the limit is {MAX_REPLY_BYTES_KEY})"
            ),
        },
        ResponsesError::EventTooLarge { .. } => BackendError::TurnFailed {
            operation,
            message: format!(
                "{message}; the turn was abandoned (the limit is {MAX_EVENT_BYTES_KEY})"
            ),
        },
        ResponsesError::Connect { .. }
        | ResponsesError::StreamClosed { .. }
        | ResponsesError::Transport { .. }
        | ResponsesError::Decode { .. } => BackendError::Unavailable { operation, message },
        _ => BackendError::Other { operation, message },
    }
}
