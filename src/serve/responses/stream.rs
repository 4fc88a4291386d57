//! A streamed response (`stream: true`): the API's events, written as the harness turn runs.
//! A client that closes the stream before the turn's answer is recorded cancels the turn
//! (nothing of it is kept); once recorded, the turn runs to its end (the engine hears of it)
//! whether or not the client still reads.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_stream::wrappers::ReceiverStream;

use super::handlers::{turn_error, Pending};
use super::wire::{self, EventSequence, ResponseView, Status};
use super::ResponsesFront;
use crate::backend::TurnEvent;
use crate::harness::HarnessError;

/// Frames waiting to be written to the client.
const FRAME_QUEUE: usize = 64;
/// Reply events waiting to become frames.
const EVENT_QUEUE: usize = 256;

/// The streamed answer to `pending`.
pub(super) fn respond(front: Arc<ResponsesFront>, pending: Pending) -> Response {
    let (frames, frames_rx) = mpsc::channel(FRAME_QUEUE);
    let recorded = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(run(front, pending, frames, recorded.clone()));
    let body = Body::from_stream(CancelOnDrop {
        frames: ReceiverStream::new(frames_rx),
        _guard: CancelGuard::new(task.abort_handle(), recorded),
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

/// Aborts a turn's task when dropped before the turn's answer is recorded (the client went
/// away): nothing half-done is kept. Once recorded, the turn runs to its end.
pub(super) struct CancelGuard {
    task: AbortHandle,
    recorded: Arc<AtomicBool>,
}

impl CancelGuard {
    pub(super) fn new(task: AbortHandle, recorded: Arc<AtomicBool>) -> CancelGuard {
        CancelGuard { task, recorded }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.recorded.load(Ordering::SeqCst) && !self.task.is_finished() {
            tracing::info!(
                "responses front: the client went away before the answer; the turn is cancelled"
            );
            self.task.abort();
        }
    }
}

/// A turn spec for `pending` that sets `recorded` once the harness has recorded its answer.
pub(super) fn marked_spec(
    pending: &Pending,
    recorded: &Arc<AtomicBool>,
) -> crate::harness::TurnSpec {
    let mark = recorded.clone();
    ResponsesFront::turn_spec(pending)
        .when_recorded(Arc::new(move || mark.store(true, Ordering::SeqCst)))
}

/// The body's frames; dropped before the turn is recorded, it cancels the turn.
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

/// Writes frames to the client; a client that is gone is not written to again.
struct Writer {
    frames: mpsc::Sender<Result<Bytes, Infallible>>,
    sequence: EventSequence,
    open: bool,
}

impl Writer {
    /// A reply event as the client's event: text deltas go on as `response.output_text.delta`.
    async fn forward(&mut self, item_id: &str, event: TurnEvent) {
        if let TurnEvent::TextDelta(delta) = event {
            self.send(wire::text_delta(item_id, &delta)).await;
        }
    }

    async fn send(&mut self, event: serde_json::Value) {
        let frame = self.sequence.frame(event);
        if self.open && self.frames.send(Ok(Bytes::from(frame))).await.is_err() {
            self.open = false;
        }
    }
}

async fn run(
    front: Arc<ResponsesFront>,
    pending: Pending,
    frames: mpsc::Sender<Result<Bytes, Infallible>>,
    recorded: Arc<AtomicBool>,
) {
    let mut out = Writer {
        frames,
        sequence: EventSequence::default(),
        open: true,
    };
    let view = |status: Status, error: Option<(&str, &str)>| {
        wire::response_object(&ResponseView {
            id: &pending.id,
            created_at: pending.created_at,
            status,
            model: &pending.model,
            message: None,
            previous_response_id: pending.request.previous_response_id.as_deref(),
            conversation: pending.request.conversation.as_deref(),
            metadata: &pending.request.metadata,
            store: pending.request.store,
            usage: None,
            error,
        })
    };
    out.send(wire::response_event(
        "response.created",
        view(Status::InProgress, None),
    ))
    .await;
    out.send(wire::response_event(
        "response.in_progress",
        view(Status::InProgress, None),
    ))
    .await;
    out.send(wire::message_added(&pending.message_id)).await;
    out.send(wire::text_part_added(&pending.message_id)).await;

    let (events, mut events_rx) = mpsc::channel(EVENT_QUEUE);
    let spec = marked_spec(&pending, &recorded);
    let turn = front.harness.turn_streaming(spec, Some(events));
    tokio::pin!(turn);
    let outcome = loop {
        tokio::select! {
            outcome = &mut turn => break outcome,
            Some(event) = events_rx.recv() => out.forward(&pending.message_id, event).await,
        }
    };
    // What the turn sent in its last poll.
    while let Ok(event) = events_rx.try_recv() {
        out.forward(&pending.message_id, event).await;
    }
    let reply = match outcome {
        Ok(report) => report.reply,
        Err(HarnessError::NotRecorded { reply, .. }) => reply,
        Err(error) => {
            let api = turn_error(&error);
            tracing::warn!(response = %pending.id, %error, "responses front: the streamed turn failed");
            let code = api.code.unwrap_or(api.kind);
            out.send(wire::response_event(
                "response.failed",
                view(Status::Failed, Some((code, &api.message))),
            ))
            .await;
            return;
        }
    };
    let record = front.keep(&pending, &reply).await;
    for event in wire::message_done(&pending.message_id, &reply) {
        out.send(event).await;
    }
    out.send(wire::response_event("response.completed", record.object()))
        .await;
}
