//! [`ResponseStream`]: the typed events of one streaming response, read from an SSE byte
//! stream within its [`StreamLimits`] (idle timeout, turn deadline, event and reply caps).

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use tokio::time::Instant;

use crate::error::ResponsesError;
use crate::types::{output_item_text, CompletedResponse, ResponseEvent};

use super::decoder::{SseDecodeError, SseDecoder, SseEvent};
use super::events::parse_event;
use super::limits::StreamLimits;

/// The typed events of one streaming response. It ends after [`ResponseEvent::Completed`], or
/// with exactly one error: `response.failed`/`error` events, an idle timeout, the turn deadline,
/// an oversized event or reply, a transport failure, a malformed event, or the end of the body
/// before `response.completed`.
pub struct ResponseStream {
    inner: BoxStream<'static, Result<ResponseEvent, ResponsesError>>,
}

impl fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseStream").finish_non_exhaustive()
    }
}

struct ParserState<S> {
    bytes: Pin<Box<S>>,
    decoder: SseDecoder,
    pending: VecDeque<SseEvent>,
    operation: &'static str,
    limits: StreamLimits,
    deadline: Option<Instant>,
    response_id: Option<String>,
    /// Bytes of text deltas so far.
    delta_bytes: usize,
    /// Bytes of finished items' text so far.
    item_bytes: usize,
    body_ended: bool,
    finished: bool,
}

impl ResponseStream {
    /// Parses an SSE byte stream with this idle timeout and the default deadline and size caps.
    /// `operation` names the call in errors.
    pub fn from_sse_bytes<S, B, E>(
        bytes: S,
        idle_timeout: Duration,
        operation: &'static str,
    ) -> Self
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        Self::from_sse_bytes_with(
            bytes,
            StreamLimits::with_idle_timeout(idle_timeout),
            operation,
        )
    }

    /// Parses an SSE byte stream within `limits`. `operation` names the call in errors.
    pub fn from_sse_bytes_with<S, B, E>(
        bytes: S,
        limits: StreamLimits,
        operation: &'static str,
    ) -> Self
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let state = ParserState {
            bytes: Box::pin(bytes),
            decoder: SseDecoder::new(limits.max_event_bytes),
            pending: VecDeque::new(),
            operation,
            deadline: limits.deadline(),
            limits,
            response_id: None,
            delta_bytes: 0,
            item_bytes: 0,
            body_ended: false,
            finished: false,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            let item = next_event(&mut state).await?;
            Some((item, state))
        });
        ResponseStream {
            inner: inner.boxed(),
        }
    }

    /// Maps every error of the stream (used to scrub the API key out of server texts).
    pub(crate) fn map_errors(
        self,
        map: impl Fn(ResponsesError) -> ResponsesError + Send + 'static,
    ) -> Self {
        ResponseStream {
            inner: self.inner.map(move |item| item.map_err(&map)).boxed(),
        }
    }

    /// Reads the stream to its end and gathers the response.
    pub async fn collect(mut self) -> Result<CompletedResponse, ResponsesError> {
        let mut deltas = String::new();
        let mut item_text = String::new();
        let mut output_items = Vec::new();
        while let Some(event) = self.inner.next().await {
            match event? {
                ResponseEvent::Created { .. } => {}
                // The first delta becomes the text as it is: a single huge delta is not copied.
                ResponseEvent::OutputTextDelta { delta } if deltas.is_empty() => deltas = delta,
                ResponseEvent::OutputTextDelta { delta } => deltas.push_str(&delta),
                ResponseEvent::OutputItemDone { item } => {
                    if let Some(text) = output_item_text(&item) {
                        item_text.push_str(&text);
                    }
                    output_items.push(item);
                }
                ResponseEvent::Completed { response_id, usage } => {
                    let text = if deltas.is_empty() { item_text } else { deltas };
                    return Ok(CompletedResponse {
                        id: response_id,
                        text,
                        usage,
                        output_items,
                    });
                }
            }
        }
        // The parser always ends with `Completed` or an error; an empty end means a stream
        // that was already drained.
        Err(ResponsesError::StreamClosed {
            operation: "collect response",
            response_id: None,
        })
    }
}

impl Stream for ResponseStream {
    type Item = Result<ResponseEvent, ResponsesError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

async fn next_event<S, B, E>(
    state: &mut ParserState<S>,
) -> Option<Result<ResponseEvent, ResponsesError>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: fmt::Display,
{
    if state.finished {
        return None;
    }
    let idle_at = Instant::now().checked_add(state.limits.idle_timeout);
    let outcome = loop {
        if let Some(event) = state.pending.pop_front() {
            match parse_event(event, state.operation) {
                Ok(None) => continue,
                Ok(Some(event)) => break check_reply_size(state, event),
                Err(error) => break Err(error),
            }
        }
        if state.body_ended {
            break Err(ResponsesError::StreamClosed {
                operation: state.operation,
                response_id: state.response_id.clone(),
            });
        }
        // Checked before every read, so a body that never pauses still meets both limits.
        let now = Instant::now();
        if state.deadline.is_some_and(|deadline| now >= deadline) {
            break Err(deadline_error(state));
        }
        if idle_at.is_some_and(|idle_at| now >= idle_at) {
            break Err(idle_error(state));
        }
        let wake = match (idle_at, state.deadline) {
            (Some(idle), Some(deadline)) => Some(idle.min(deadline)),
            (one, None) | (None, one) => one,
        };
        let next = match wake {
            Some(wake) => tokio::time::timeout_at(wake, state.bytes.next()).await,
            None => Ok(state.bytes.next().await),
        };
        match next {
            Err(_elapsed) => {
                if state
                    .deadline
                    .is_some_and(|deadline| Instant::now() >= deadline)
                {
                    break Err(deadline_error(state));
                }
                break Err(idle_error(state));
            }
            Ok(None) => state.body_ended = true,
            Ok(Some(Err(error))) => {
                break Err(ResponsesError::Transport {
                    operation: state.operation,
                    message: error.to_string(),
                })
            }
            Ok(Some(Ok(chunk))) => {
                if let Err(error) = state.decoder.feed(chunk.as_ref(), &mut state.pending) {
                    break Err(match error {
                        SseDecodeError::TooLarge { limit } => ResponsesError::EventTooLarge {
                            operation: state.operation,
                            limit,
                        },
                        SseDecodeError::InvalidUtf8 => ResponsesError::Transport {
                            operation: state.operation,
                            message: "the event stream is not valid UTF-8".into(),
                        },
                    });
                }
            }
        }
    };
    match &outcome {
        Ok(ResponseEvent::Created { response_id }) => {
            state.response_id = Some(response_id.clone());
        }
        Ok(ResponseEvent::Completed { .. }) | Err(_) => state.finished = true,
        Ok(_) => {}
    }
    Some(outcome)
}

fn idle_error<S>(state: &ParserState<S>) -> ResponsesError {
    ResponsesError::IdleTimeout {
        operation: state.operation,
        after: state.limits.idle_timeout,
    }
}

fn deadline_error<S>(state: &ParserState<S>) -> ResponsesError {
    ResponsesError::Deadline {
        operation: state.operation,
        after: state.limits.turn_timeout,
    }
}

/// Counts the reply text an event adds and fails once it passes the cap.
fn check_reply_size<S>(
    state: &mut ParserState<S>,
    event: ResponseEvent,
) -> Result<ResponseEvent, ResponsesError> {
    let total = match &event {
        ResponseEvent::OutputTextDelta { delta } => {
            state.delta_bytes = state.delta_bytes.saturating_add(delta.len());
            state.delta_bytes
        }
        ResponseEvent::OutputItemDone { item } => {
            let text = output_item_text(item).map_or(0, |text| text.len());
            state.item_bytes = state.item_bytes.saturating_add(text);
            state.item_bytes
        }
        ResponseEvent::Created { .. } | ResponseEvent::Completed { .. } => 0,
    };
    if total > state.limits.max_reply_bytes {
        return Err(ResponsesError::ReplyTooLarge {
            operation: state.operation,
            limit: state.limits.max_reply_bytes,
        });
    }
    Ok(event)
}
