//! The HTTP answers the handlers build: JSON bodies, OpenAI-style errors, the SSE response.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::sse;

/// The 404 for a conversation id the mock does not hold.
pub(super) fn conversation_not_found(id: &str) -> Response {
    conversation_error(
        StatusCode::NOT_FOUND,
        &format!("Conversation with id '{id}' not found."),
    )
}

/// The API's error for a request about a conversation: `param: "conversation"`, no code.
pub(super) fn conversation_error(status: StatusCode, message: &str) -> Response {
    let body = json!({
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "conversation",
            "code": Value::Null,
        }
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn json_ok(body: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub(super) fn json_error(
    status: StatusCode,
    kind: &str,
    code: &str,
    message: &str,
    param: Option<&str>,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        sse::error_body(kind, code, message, param).to_string(),
    )
        .into_response()
}

pub(super) fn error_type_for(status: u16) -> &'static str {
    match status {
        400..=428 | 430..=499 => "invalid_request_error",
        429 => "requests",
        _ => "server_error",
    }
}
/// A `200 text/event-stream` response carrying `events`, one SSE frame each.
pub(super) fn event_stream(events: &[Value]) -> Response {
    let frames: Vec<Result<Bytes, Infallible>> = events
        .iter()
        .map(|event| Ok(Bytes::from(sse::frame(event))))
        .collect();
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(futures::stream::iter(frames)),
    )
        .into_response()
}
