//! The HTTP answers the handlers build: JSON bodies, OpenAI-style errors, the SSE response.

use std::convert::Infallible;
use std::time::{Duration, Instant};

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

/// How much of a reply's delay is slept on a blocking thread's own timer: more than tokio's
/// timer can be late.
const PRECISE_TAIL: Duration = Duration::from_millis(3);

/// Holds a reply for `delay`, to within the kernel's timer slack (tens of microseconds).
///
/// Tokio's timer counts whole milliseconds: a sleep ends on the runtime's next millisecond
/// tick after its deadline, or the one after, 0–2 ms late by where the request fell between
/// ticks. A client timing two paths through this model (directly, and through a proxy) would
/// read that phase as the paths' difference: a proxy's half millisecond before the request
/// can cost it a whole one, or nothing. So the bulk is slept on tokio's timer (the wait stays
/// cancellable with its request) and the rest on a blocking thread's `std::thread::sleep`.
pub(super) async fn hold(delay: Duration) {
    let deadline = Instant::now() + delay;
    if let Some(coarse) = delay.checked_sub(PRECISE_TAIL) {
        tokio::time::sleep(coarse).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        // A blocking task that cannot start (the runtime shutting down) holds no longer.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A reply is held at least its delay, longer or shorter than the precise tail.
    #[tokio::test]
    async fn a_reply_is_held_its_whole_delay() {
        for delay in [
            Duration::ZERO,
            Duration::from_millis(2),
            Duration::from_millis(20),
        ] {
            let started = Instant::now();
            hold(delay).await;
            assert!(
                started.elapsed() >= delay,
                "{delay:?} held {:?}",
                started.elapsed()
            );
        }
    }
}
