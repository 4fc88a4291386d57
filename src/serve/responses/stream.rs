//! A streamed response (`stream: true`): the body of SSE frames the response's task writes as
//! its turn goes on, and the guard that cancels the turn when the client goes away before the
//! model's answer (nothing of it is kept). Once answered, or once the response has ended
//! with the model's calls of the client's functions, the turn runs on whether or not the
//! client still reads.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_stream::wrappers::ReceiverStream;

use super::answer;
use super::handlers::Pending;
use super::turns::RunningTurn;
use super::wire::EventSequence;
use super::ResponsesFront;

/// Frames waiting to be written to the client.
const FRAME_QUEUE: usize = 64;

/// The streamed answer to `pending`, following `turn`.
pub(super) fn respond(
    front: Arc<ResponsesFront>,
    pending: Pending,
    turn: RunningTurn,
    guard: CancelGuard,
    handed_over: Arc<AtomicBool>,
) -> Response {
    let (frames, frames_rx) = mpsc::channel(FRAME_QUEUE);
    let out = Writer {
        frames,
        sequence: EventSequence::default(),
        open: true,
    };
    tokio::spawn(async move {
        // The outcome went to the client as events.
        let _ = answer::follow(front, pending, turn, handed_over, Some(out)).await;
    });
    let body = Body::from_stream(CancelOnDrop {
        frames: ReceiverStream::new(frames_rx),
        _guard: guard,
    });
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Aborts a turn's task when dropped before the model has answered or the response is
/// handed over to a parked turn's next one (the client went away): nothing half-done is kept.
pub(super) struct CancelGuard {
    task: AbortHandle,
    answered: Arc<AtomicBool>,
    handed_over: Arc<AtomicBool>,
}

impl CancelGuard {
    /// A guard of `turn` for one response; `handed_over` is set when the response ends with
    /// the model's calls and the turn waits for the next.
    pub(super) fn new(turn: &RunningTurn, handed_over: Arc<AtomicBool>) -> CancelGuard {
        CancelGuard {
            task: turn.task.clone(),
            answered: turn.answered.clone(),
            handed_over,
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let done = self.answered.load(Ordering::SeqCst) || self.handed_over.load(Ordering::SeqCst);
        if !done && !self.task.is_finished() {
            tracing::info!(
                "responses front: the client went away before the answer; the turn is cancelled"
            );
            self.task.abort();
        }
    }
}

/// The body's frames; dropped before the model has answered, it cancels the turn.
struct CancelOnDrop {
    frames: ReceiverStream<Result<Bytes, Infallible>>,
    _guard: CancelGuard,
}

impl Stream for CancelOnDrop {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.frames).poll_next(cx)
    }
}

/// Writes a streamed response's events to its client; a client that is gone is not written
/// to again.
pub(super) struct Writer {
    frames: mpsc::Sender<Result<Bytes, Infallible>>,
    sequence: EventSequence,
    open: bool,
}

impl Writer {
    /// Sends `event`, numbered, as the next frame.
    pub(super) async fn send(&mut self, event: Value) {
        let frame = self.sequence.frame(event);
        if self.open && self.frames.send(Ok(Bytes::from(frame))).await.is_err() {
            self.open = false;
        }
    }
}
