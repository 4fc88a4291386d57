//! SSE → typed events. The same parser reads a live HTTP body and the scripted byte chunks of
//! the tests.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{BoxStream, Stream, StreamExt};
use serde_json::Value;

use crate::error::ResponsesError;
use crate::types::{output_item_text, CompletedResponse, ResponseEvent, ResponseUsage, WireUsage};

/// The typed events of one streaming response. It ends after [`ResponseEvent::Completed`], or
/// with exactly one error: `response.failed`/`error` events, an idle timeout, a transport
/// failure, a malformed event, or the end of the body before `response.completed`.
pub struct ResponseStream {
    inner: BoxStream<'static, Result<ResponseEvent, ResponsesError>>,
}

impl fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseStream").finish_non_exhaustive()
    }
}

struct ParserState<S> {
    events: S,
    operation: &'static str,
    idle_timeout: Duration,
    response_id: Option<String>,
    finished: bool,
}

impl ResponseStream {
    /// Parses an SSE byte stream. `operation` names the call in errors.
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
        let state = ParserState {
            events: Box::pin(bytes).eventsource(),
            operation,
            idle_timeout,
            response_id: None,
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

async fn next_event<S, E>(
    state: &mut ParserState<S>,
) -> Option<Result<ResponseEvent, ResponsesError>>
where
    S: Stream<Item = Result<Event, EventStreamError<E>>> + Unpin,
    E: fmt::Display,
{
    if state.finished {
        return None;
    }
    loop {
        let next = tokio::time::timeout(state.idle_timeout, state.events.next()).await;
        let outcome = match next {
            Err(_elapsed) => Err(ResponsesError::IdleTimeout {
                operation: state.operation,
                idle_timeout: state.idle_timeout,
            }),
            Ok(None) => Err(ResponsesError::StreamClosed {
                operation: state.operation,
                response_id: state.response_id.clone(),
            }),
            Ok(Some(Err(error))) => Err(ResponsesError::Transport {
                operation: state.operation,
                message: error.to_string(),
            }),
            Ok(Some(Ok(event))) => match parse_event(&event, state.operation) {
                Ok(None) => continue,
                Ok(Some(event)) => Ok(event),
                Err(error) => Err(error),
            },
        };
        match &outcome {
            Ok(ResponseEvent::Created { response_id }) => {
                state.response_id = Some(response_id.clone());
            }
            Ok(ResponseEvent::Completed { .. }) | Err(_) => state.finished = true,
            Ok(_) => {}
        }
        return Some(outcome);
    }
}

/// One SSE event → a typed event, `None` for events this client does not use, or the error a
/// failure event reports.
fn parse_event(
    event: &Event,
    operation: &'static str,
) -> Result<Option<ResponseEvent>, ResponsesError> {
    let data = event.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    let malformed = |what: &str, message: String| ResponsesError::Decode {
        operation,
        what: format!("{what} event"),
        message,
    };
    let payload: Value = serde_json::from_str(data)
        .map_err(|e| malformed(event_name(event, None), format!("invalid JSON: {e}")))?;
    let kind = event_name(event, Some(&payload)).to_owned();
    let response = payload.get("response");
    let response_id = response
        .and_then(|r| r.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    match kind.as_str() {
        "response.created" => {
            let response_id =
                response_id.ok_or_else(|| malformed(&kind, "missing response.id".into()))?;
            Ok(Some(ResponseEvent::Created { response_id }))
        }
        "response.output_text.delta" => {
            let delta = payload
                .get("delta")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(&kind, "missing string delta".into()))?;
            Ok(Some(ResponseEvent::OutputTextDelta {
                delta: delta.to_owned(),
            }))
        }
        "response.output_item.done" => {
            let item = payload
                .get("item")
                .cloned()
                .ok_or_else(|| malformed(&kind, "missing item".into()))?;
            Ok(Some(ResponseEvent::OutputItemDone { item }))
        }
        "response.completed" => {
            let response_id =
                response_id.ok_or_else(|| malformed(&kind, "missing response.id".into()))?;
            let usage = match response.and_then(|r| r.get("usage")) {
                None | Some(Value::Null) => None,
                Some(usage) => {
                    let wire: WireUsage = serde_json::from_value(usage.clone())
                        .map_err(|e| malformed(&kind, format!("invalid usage: {e}")))?;
                    Some(ResponseUsage::from(wire))
                }
            };
            Ok(Some(ResponseEvent::Completed { response_id, usage }))
        }
        "response.failed" => {
            let error = response.and_then(|r| r.get("error"));
            Err(ResponsesError::ResponseFailed {
                operation,
                response_id,
                code: error.and_then(|e| string_field(e, "code")),
                message: error
                    .and_then(|e| string_field(e, "message"))
                    .unwrap_or_else(|| "response.failed without a message".into()),
            })
        }
        "response.incomplete" => {
            let reason = response
                .and_then(|r| r.get("incomplete_details"))
                .and_then(|d| string_field(d, "reason"))
                .unwrap_or_else(|| "unknown".into());
            Err(ResponsesError::ResponseFailed {
                operation,
                response_id,
                code: Some("incomplete".into()),
                message: format!("response incomplete: {reason}"),
            })
        }
        "error" => {
            // Servers send the fields at the top level or nested under "error".
            let source = payload
                .get("error")
                .filter(|e| e.is_object())
                .unwrap_or(&payload);
            Err(ResponsesError::ErrorEvent {
                operation,
                code: string_field(source, "code"),
                message: string_field(source, "message")
                    .unwrap_or_else(|| "error event without a message".into()),
            })
        }
        other => {
            tracing::trace!(event = other, "skipping Responses stream event");
            Ok(None)
        }
    }
}

/// The event's type: the JSON `type` field, else the SSE `event:` name.
fn event_name<'a>(event: &'a Event, payload: Option<&'a Value>) -> &'a str {
    payload
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or(event.event.as_str())
}

fn string_field(value: &Value, field: &str) -> Option<String> {
    value.get(field).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    const IDLE: Duration = Duration::from_secs(5);

    fn sse(kind: &str, data: &str) -> String {
        format!("event: {kind}\ndata: {data}\n\n")
    }

    fn happy_stream() -> String {
        [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}"#,
            ),
            sse(
                "response.in_progress",
                r#"{"type":"response.in_progress","response":{"id":"resp_1"}}"#,
            ),
            sse(
                "response.output_text.delta",
                r#"{"type":"response.output_text.delta","delta":"Hel"}"#,
            ),
            sse(
                "response.output_text.delta",
                r#"{"type":"response.output_text.delta","delta":"lo ✓"}"#,
            ),
            sse(
                "response.output_item.done",
                r#"{"type":"response.output_item.done","item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello ✓"}]}}"#,
            ),
            sse(
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":12,"output_tokens":3,"input_tokens_details":{"cached_tokens":8}}}}"#,
            ),
        ]
        .concat()
    }

    fn stream_of(chunks: Vec<Vec<u8>>) -> ResponseStream {
        let source = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
        ResponseStream::from_sse_bytes(source, IDLE, "test")
    }

    fn chunked(text: &str, size: usize) -> Vec<Vec<u8>> {
        text.as_bytes().chunks(size).map(<[u8]>::to_vec).collect()
    }

    async fn events_of(stream: ResponseStream) -> Vec<Result<ResponseEvent, ResponsesError>> {
        StreamExt::collect::<Vec<_>>(stream).await
    }

    /// A whole stream yields the typed events in order, skipping unknown ones, and ends after
    /// response.completed.
    #[tokio::test]
    async fn parses_typed_events_in_order() {
        let events = events_of(stream_of(vec![happy_stream().into_bytes()])).await;
        let events: Vec<ResponseEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(events.len(), 5);
        assert_eq!(
            events[0],
            ResponseEvent::Created {
                response_id: "resp_1".into()
            }
        );
        assert_eq!(
            events[1],
            ResponseEvent::OutputTextDelta {
                delta: "Hel".into()
            }
        );
        assert!(matches!(events[3], ResponseEvent::OutputItemDone { .. }));
        assert_eq!(
            events[4],
            ResponseEvent::Completed {
                response_id: "resp_1".into(),
                usage: Some(ResponseUsage {
                    input_tokens: 12,
                    output_tokens: 3,
                    cached_tokens: 8
                })
            }
        );
    }

    /// Chunk boundaries anywhere — inside lines, inside a multi-byte character — change nothing.
    #[tokio::test]
    async fn chunk_boundaries_inside_events_change_nothing() {
        let whole = stream_of(vec![happy_stream().into_bytes()])
            .collect()
            .await
            .unwrap();
        for size in [1, 2, 3, 7, 64] {
            let split = stream_of(chunked(&happy_stream(), size))
                .collect()
                .await
                .unwrap();
            assert_eq!(split, whole, "chunk size {size}");
        }
        assert_eq!(whole.text, "Hello ✓");
        assert_eq!(whole.id, "resp_1");
    }

    /// Without deltas, collect() takes the text of the finished message items.
    #[tokio::test]
    async fn collect_falls_back_to_item_text() {
        let body = [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_2"}}"#,
            ),
            sse(
                "response.output_item.done",
                r#"{"type":"response.output_item.done","item":{"type":"message","content":[{"type":"output_text","text":"only items"}]}}"#,
            ),
            sse(
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"resp_2"}}"#,
            ),
        ]
        .concat();
        let done = stream_of(vec![body.into_bytes()]).collect().await.unwrap();
        assert_eq!(done.text, "only items");
        assert_eq!(done.usage, None);
        assert_eq!(done.output_items.len(), 1);
    }

    /// The `type` field decides when the SSE event name is absent (data-only events).
    #[tokio::test]
    async fn data_only_events_use_the_type_field() {
        let body = "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
                    data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n\
                    data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\"}}\n\n";
        let done = stream_of(vec![body.as_bytes().to_vec()])
            .collect()
            .await
            .unwrap();
        assert_eq!((done.id.as_str(), done.text.as_str()), ("r", "x"));
    }

    /// response.failed ends the stream with its code and message.
    #[tokio::test]
    async fn response_failed_is_a_typed_error() {
        let body = [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_3"}}"#,
            ),
            sse(
                "response.failed",
                r#"{"type":"response.failed","response":{"id":"resp_3","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window"}}}"#,
            ),
            sse(
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"resp_3"}}"#,
            ),
        ]
        .concat();
        let events = events_of(stream_of(vec![body.into_bytes()])).await;
        assert_eq!(events.len(), 2, "nothing is read after the failure");
        let error = events[1].as_ref().unwrap_err();
        assert_eq!(error.code(), Some("context_length_exceeded"));
        assert!(error.is_context_overflow());
        assert!(matches!(
            error,
            ResponsesError::ResponseFailed { response_id: Some(id), .. } if id == "resp_3"
        ));
    }

    /// An `error` event, flat or nested, carries its code and message.
    #[tokio::test]
    async fn error_event_is_a_typed_error() {
        for data in [
            r#"{"type":"error","code":"previous_response_not_found","message":"Previous response with id 'resp_x' not found."}"#,
            r#"{"type":"error","error":{"code":"previous_response_not_found","message":"Previous response with id 'resp_x' not found."}}"#,
        ] {
            let error = stream_of(vec![sse("error", data).into_bytes()])
                .collect()
                .await
                .unwrap_err();
            assert!(matches!(error, ResponsesError::ErrorEvent { .. }));
            assert!(error.is_previous_response_not_found());
            assert!(error.to_string().contains("not found"));
        }
    }

    /// A body that ends before response.completed is the "stream closed" error.
    #[tokio::test]
    async fn early_end_is_stream_closed() {
        let body = [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_4"}}"#,
            ),
            sse(
                "response.output_text.delta",
                r#"{"type":"response.output_text.delta","delta":"partial"}"#,
            ),
        ]
        .concat();
        let error = stream_of(vec![body.into_bytes()])
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(
            &error,
            ResponsesError::StreamClosed { response_id: Some(id), .. } if id == "resp_4"
        ));
        assert!(error
            .to_string()
            .contains("stream closed before response.completed"));
    }

    /// Invalid JSON in an event is a decode error naming the event.
    #[tokio::test]
    async fn invalid_json_is_a_decode_error() {
        let error = stream_of(vec![b"event: response.created\ndata: {oops\n\n".to_vec()])
            .collect()
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ResponsesError::Decode { what, .. } if what.contains("response.created"))
        );
    }

    /// A source that goes quiet produces the idle-timeout error.
    #[tokio::test]
    async fn silence_is_an_idle_timeout() {
        let first = sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_5"}}"#,
        );
        let source = futures::stream::iter(vec![Ok::<_, Infallible>(first.into_bytes())])
            .chain(futures::stream::pending());
        let stream = ResponseStream::from_sse_bytes(source, Duration::from_millis(50), "test");
        let events = events_of(stream).await;
        assert_eq!(events.len(), 2);
        assert!(matches!(events[1], Err(ResponsesError::IdleTimeout { .. })));
    }

    /// A transport failure mid-stream is a transport error, not a silent end.
    #[tokio::test]
    async fn transport_error_mid_stream() {
        let first = sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_6"}}"#,
        );
        let source = futures::stream::iter(vec![
            Ok(first.into_bytes()),
            Err("connection reset by peer".to_string()),
        ]);
        let error = ResponseStream::from_sse_bytes(source, IDLE, "test")
            .collect()
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ResponsesError::Transport { message, .. } if message.contains("connection reset"))
        );
    }
}
