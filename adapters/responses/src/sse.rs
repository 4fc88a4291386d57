//! SSE → typed events. The same parser reads a live HTTP body and the scripted byte chunks of
//! the tests.
//!
//! The line splitter ([`SseDecoder`]) is linear in the body size: each byte is scanned for a line
//! end once, however the body is chunked, and a line or event longer than the configured cap
//! ends the stream with [`ResponsesError::EventTooLarge`] instead of growing without bound.
//! Around it, [`ResponseStream`] enforces the idle timeout between events, the overall turn
//! deadline, and the cap on the reply text.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::error::ResponsesError;
use crate::types::{output_item_text, CompletedResponse, ResponseEvent, ResponseUsage, WireUsage};

/// One dispatched SSE event: its `event:` name (empty when absent) and its `data:` lines joined
/// by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Why the decoder stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseDecodeError {
    /// A line, or the data of one event, is longer than the cap.
    TooLarge { limit: usize },
    /// A line is not UTF-8.
    InvalidUtf8,
}

/// An incremental SSE decoder (the `text/event-stream` line rules: lines end with LF, CRLF or
/// CR; `event:` and `data:` fields; `:` comments; a blank line dispatches the event).
///
/// It is one pass per chunk and never revisits a byte: each chunk is split at its line ends
/// (SIMD `memchr`), and a line's bytes go straight to where they belong as they arrive — the
/// field name is collected up to its `:`, a `data:` value is checked for UTF-8 and appended to
/// the event's data while the chunk is still in cache, comments are skipped. A line is never
/// buffered whole and then copied again, so an event of several megabytes costs one copy.
#[derive(Debug)]
pub struct SseDecoder {
    /// What the bytes of the current line are.
    state: LineState,
    /// The current line's field name so far (until its first `:`).
    field: Vec<u8>,
    /// The bytes of a character cut by the end of the last chunk (at most 3).
    partial: Vec<u8>,
    /// The current line's length so far.
    line_len: usize,
    /// A CR ended the last line; a LF that follows it belongs to the same line end.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    limit: usize,
}

/// Where the decoder is within the current line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineState {
    /// Nothing of the line has arrived yet.
    Start,
    /// A `:` comment: skipped.
    Comment,
    /// Reading the field name.
    Field,
    /// Reading the value of a field; `at_start`: its first byte (a space to drop) is still due.
    Value { field: Field, at_start: bool },
}

/// The fields the decoder keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Event,
    Data,
    /// `id`, `retry` and unknown fields mean nothing to this client (checked, then dropped).
    Other,
}

impl SseDecoder {
    /// A decoder that fails on any line or event data longer than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        SseDecoder {
            state: LineState::Start,
            field: Vec::new(),
            partial: Vec::new(),
            line_len: 0,
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            limit,
        }
    }

    /// Feeds one chunk; complete events are appended to `out`.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut VecDeque<SseEvent>,
    ) -> Result<(), SseDecodeError> {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(tail) = rest.strip_prefix(b"\n") {
                rest = tail;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            self.piece(&rest[..end])?;
            self.end_line(out)?;
            let mut next = end + 1;
            if rest[end] == b'\r' {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    // The LF of a CRLF may come with the next chunk.
                    None => self.after_cr = true,
                }
            }
            rest = &rest[next..];
        }
        self.piece(rest)
    }

    /// Bytes of the current line (no line end among them).
    fn piece(&mut self, bytes: &[u8]) -> Result<(), SseDecodeError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.line_len = self.line_len.saturating_add(bytes.len());
        if self.line_len > self.limit {
            return Err(SseDecodeError::TooLarge { limit: self.limit });
        }
        let mut bytes = bytes;
        loop {
            match self.state {
                LineState::Start => {
                    self.state = if bytes[0] == b':' {
                        LineState::Comment
                    } else {
                        LineState::Field
                    };
                }
                LineState::Comment => return Ok(()),
                LineState::Field => match memchr::memchr(b':', bytes) {
                    None => {
                        self.field.extend_from_slice(bytes);
                        return Ok(());
                    }
                    Some(colon) => {
                        self.field.extend_from_slice(&bytes[..colon]);
                        self.begin_value()?;
                        bytes = &bytes[colon + 1..];
                        if bytes.is_empty() {
                            return Ok(());
                        }
                    }
                },
                LineState::Value { field, at_start } => {
                    if at_start {
                        self.state = LineState::Value {
                            field,
                            at_start: false,
                        };
                        if let Some(tail) = bytes.strip_prefix(b" ") {
                            bytes = tail;
                        }
                    }
                    let target = match field {
                        Field::Event => Some(&mut self.event),
                        Field::Data => Some(&mut self.data),
                        Field::Other => None,
                    };
                    push_utf8(&mut self.partial, bytes, target)?;
                    if self.data.len() > self.limit {
                        return Err(SseDecodeError::TooLarge { limit: self.limit });
                    }
                    return Ok(());
                }
            }
        }
    }

    /// The field name is complete: the value that follows goes to its field.
    fn begin_value(&mut self) -> Result<(), SseDecodeError> {
        let field = match std::str::from_utf8(&self.field) {
            Ok("event") => Field::Event,
            Ok("data") => Field::Data,
            Ok(_) => Field::Other,
            Err(_) => return Err(SseDecodeError::InvalidUtf8),
        };
        self.field.clear();
        match field {
            Field::Event => self.event.clear(),
            Field::Data => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
            }
            Field::Other => {}
        }
        self.state = LineState::Value {
            field,
            at_start: true,
        };
        Ok(())
    }

    /// The current line ended: a blank line dispatches the event.
    fn end_line(&mut self, out: &mut VecDeque<SseEvent>) -> Result<(), SseDecodeError> {
        match self.state {
            LineState::Start => {
                if self.has_data {
                    out.push_back(SseEvent {
                        event: std::mem::take(&mut self.event),
                        data: std::mem::take(&mut self.data),
                    });
                }
                self.event.clear();
                self.data.clear();
                self.has_data = false;
            }
            LineState::Comment => {}
            // A field without a `:` has an empty value.
            LineState::Field => self.begin_value()?,
            LineState::Value { .. } => {
                if !self.partial.is_empty() {
                    return Err(SseDecodeError::InvalidUtf8);
                }
            }
        }
        self.state = LineState::Start;
        self.line_len = 0;
        Ok(())
    }
}

/// Appends `bytes`, a piece of a field's value, to `target` (or only checks it) once it is
/// known to be UTF-8. A character cut by the end of the piece waits in `partial` for the rest
/// of its bytes (the piece's whole characters are then checked a second time, while they are
/// still in cache: `from_utf8`'s ASCII path is far cheaper than `utf8_chunks`).
fn push_utf8(
    partial: &mut Vec<u8>,
    mut bytes: &[u8],
    mut target: Option<&mut String>,
) -> Result<(), SseDecodeError> {
    while !partial.is_empty() {
        let Some((first, tail)) = bytes.split_first() else {
            return Ok(());
        };
        partial.push(*first);
        bytes = tail;
        match std::str::from_utf8(partial) {
            Ok(character) => {
                if let Some(target) = target.as_deref_mut() {
                    target.push_str(character);
                }
                partial.clear();
            }
            Err(error) if error.error_len().is_none() => {}
            Err(_) => return Err(SseDecodeError::InvalidUtf8),
        }
    }
    let (valid, cut) = match std::str::from_utf8(bytes) {
        Ok(valid) => (valid, &[][..]),
        // Only the last bytes of the piece may be the start of a character still arriving.
        Err(error) if error.error_len().is_none() => {
            let (head, cut) = bytes.split_at(error.valid_up_to());
            (
                std::str::from_utf8(head).map_err(|_| SseDecodeError::InvalidUtf8)?,
                cut,
            )
        }
        Err(_) => return Err(SseDecodeError::InvalidUtf8),
    };
    if let Some(target) = target {
        target.push_str(valid);
    }
    partial.extend_from_slice(cut);
    Ok(())
}

/// The bounds of one streaming response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The longest wait for the next event.
    pub idle_timeout: Duration,
    /// The longest the whole response may take, counted from `started`.
    pub turn_timeout: Duration,
    /// When the response was requested.
    pub started: Instant,
    /// The longest SSE line or event data, in bytes.
    pub max_event_bytes: usize,
    /// The longest reply text (the sum of the text deltas, or of the finished items' text), in
    /// bytes.
    pub max_reply_bytes: usize,
}

impl StreamLimits {
    /// Limits with this idle timeout and the client's other defaults, starting now.
    pub fn with_idle_timeout(idle_timeout: Duration) -> Self {
        StreamLimits {
            idle_timeout,
            turn_timeout: crate::config::ResponsesConfig::DEFAULT_TURN_TIMEOUT,
            started: Instant::now(),
            max_event_bytes: crate::config::ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
            max_reply_bytes: crate::config::ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
        }
    }

    /// The instant the turn deadline passes; `None` when it lies beyond what `Instant` can hold.
    fn deadline(&self) -> Option<Instant> {
        self.started.checked_add(self.turn_timeout)
    }
}

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

/// One SSE event → a typed event, `None` for events this client does not use, or the error a
/// failure event reports.
fn parse_event(
    event: SseEvent,
    operation: &'static str,
) -> Result<Option<ResponseEvent>, ResponsesError> {
    let data = event.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    let event = match text_delta(event) {
        Ok(delta) => return Ok(Some(ResponseEvent::OutputTextDelta { delta })),
        Err(event) => event,
    };
    let event = &event;
    let data = event.data.trim();
    let malformed = |what: &str, message: String| ResponsesError::Decode {
        operation,
        what: format!("{what} event"),
        message,
    };
    let mut payload: Value = serde_json::from_str(data)
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
            // Taken out of the payload rather than copied: a delta may be megabytes long.
            match payload.get_mut("delta").map(Value::take) {
                Some(Value::String(delta)) => Ok(Some(ResponseEvent::OutputTextDelta { delta })),
                _ => Err(malformed(&kind, "missing string delta".into())),
            }
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

/// A `response.output_text.delta` event's payload, borrowing the delta from the event's data
/// where it holds no escapes.
#[derive(Deserialize)]
struct TextDelta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    delta: Cow<'a, str>,
}

/// The delta of a `response.output_text.delta` event, decoded without copying it: a delta
/// without escapes is cut out of the event's own data in place. The event back for any other
/// event, or a payload this fast path does not read (the general path then decides, with its
/// errors).
fn text_delta(event: SseEvent) -> Result<String, SseEvent> {
    match locate_delta(&event) {
        None => Err(event),
        Some(Ok(delta)) => Ok(delta),
        Some(Err(range)) => {
            let mut text = event.data;
            text.truncate(range.end);
            text.drain(..range.start);
            Ok(text)
        }
    }
}

/// Where a text delta is: decoded (it held escapes) or the byte range of the event's data
/// that is the delta as is. `None` when the event is not a text delta this path reads.
fn locate_delta(event: &SseEvent) -> Option<Result<String, Range<usize>>> {
    const DELTA: &str = "response.output_text.delta";
    if !(event.event.is_empty() || event.event == DELTA) {
        return None;
    }
    let payload: TextDelta<'_> = serde_json::from_str(event.data.trim()).ok()?;
    if payload.kind.as_deref().unwrap_or(&event.event) != DELTA {
        return None;
    }
    match payload.delta {
        Cow::Owned(delta) => Some(Ok(delta)),
        Cow::Borrowed(delta) => {
            // The borrowed delta is a slice of the data: its offset is the pointers' distance.
            let start = (delta.as_ptr() as usize).checked_sub(event.data.as_ptr() as usize)?;
            let end = start.checked_add(delta.len())?;
            if end > event.data.len() || !event.data.is_char_boundary(start) {
                return Some(Ok(delta.to_owned()));
            }
            Some(Err(start..end))
        }
    }
}

/// The event's type: the JSON `type` field, else the SSE `event:` name.
fn event_name<'a>(event: &'a SseEvent, payload: Option<&'a Value>) -> &'a str {
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

    fn limits(idle: Duration, turn: Duration, max_event: usize, max_reply: usize) -> StreamLimits {
        StreamLimits {
            idle_timeout: idle,
            turn_timeout: turn,
            started: Instant::now(),
            max_event_bytes: max_event,
            max_reply_bytes: max_reply,
        }
    }

    fn delta_frame(delta: &str) -> String {
        sse(
            "response.output_text.delta",
            &serde_json::json!({"type": "response.output_text.delta", "delta": delta}).to_string(),
        )
    }

    /// One 8 MB delta event fed in 4 KiB chunks parses to exactly that text (the splitter scans
    /// each byte once, so this runs in linear time; see benches/sse.rs for the figures).
    #[tokio::test]
    async fn an_eight_megabyte_event_in_small_chunks_yields_the_whole_text() {
        let big: String = "abcdefgh".repeat(1024 * 1024);
        let body = [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_big"}}"#,
            ),
            delta_frame(&big),
            sse(
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"resp_big"}}"#,
            ),
        ]
        .concat();
        let done = stream_of(chunked(&body, 4096)).collect().await.unwrap();
        assert_eq!(done.text.len(), big.len());
        assert!(done.text == big);
    }

    /// A line longer than the event cap ends the stream with EventTooLarge, whether it arrives
    /// whole or never finishes.
    #[tokio::test]
    async fn a_line_over_the_cap_is_event_too_large() {
        let long = delta_frame(&"x".repeat(2_000));
        let source =
            futures::stream::iter(chunked(&long, 100).into_iter().map(Ok::<_, Infallible>));
        let error = ResponseStream::from_sse_bytes_with(
            source,
            limits(IDLE, IDLE, 1_000, usize::MAX),
            "test",
        )
        .collect()
        .await
        .unwrap_err();
        assert!(
            matches!(error, ResponsesError::EventTooLarge { limit: 1_000, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("1000 bytes"), "{error}");
        // A line that never ends: an endless source of bytes without a line break.
        let endless = futures::stream::repeat(Ok::<_, Infallible>(b"data: xxxxxxxx".to_vec()));
        let error = ResponseStream::from_sse_bytes_with(
            endless,
            limits(IDLE, IDLE, 1_000, usize::MAX),
            "test",
        )
        .collect()
        .await
        .unwrap_err();
        assert!(
            matches!(error, ResponsesError::EventTooLarge { .. }),
            "{error:?}"
        );
    }

    /// Many data lines adding up past the cap within one event are EventTooLarge too.
    #[tokio::test]
    async fn event_data_over_the_cap_is_event_too_large() {
        let lines = "data: 0123456789\n".repeat(200);
        let error = ResponseStream::from_sse_bytes_with(
            futures::stream::iter(vec![Ok::<_, Infallible>(lines.into_bytes())]),
            limits(IDLE, IDLE, 1_000, usize::MAX),
            "test",
        )
        .collect()
        .await
        .unwrap_err();
        assert!(
            matches!(error, ResponsesError::EventTooLarge { .. }),
            "{error:?}"
        );
    }

    /// Deltas adding up past the reply cap end the stream with ReplyTooLarge.
    #[tokio::test]
    async fn a_reply_over_the_cap_is_reply_too_large() {
        let endless =
            futures::stream::repeat(Ok::<_, Infallible>(delta_frame("0123456789").into_bytes()));
        let error = ResponseStream::from_sse_bytes_with(
            endless,
            limits(IDLE, Duration::from_secs(3600), 1_000, 95),
            "test",
        )
        .collect()
        .await
        .unwrap_err();
        assert!(
            matches!(error, ResponsesError::ReplyTooLarge { limit: 95, .. }),
            "{error:?}"
        );
    }

    /// A stream of deltas that never completes ends at the turn deadline, even though events
    /// keep arriving.
    #[tokio::test]
    async fn an_endless_stream_ends_at_the_deadline() {
        let endless = futures::stream::repeat(Ok::<_, Infallible>(delta_frame("x").into_bytes()))
            .then(|chunk| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                chunk
            });
        let events = events_of(ResponseStream::from_sse_bytes_with(
            endless,
            limits(IDLE, Duration::from_millis(100), 1_000, usize::MAX),
            "test",
        ))
        .await;
        let last = events.last().unwrap();
        assert!(
            matches!(last, Err(ResponsesError::Deadline { after, .. }) if *after == Duration::from_millis(100)),
            "{last:?}"
        );
        assert!(events[..events.len() - 1].iter().all(Result::is_ok));
    }

    /// A stream that stops after response.created ends at the deadline when that comes before
    /// the idle timeout.
    #[tokio::test]
    async fn a_stall_ends_at_the_earlier_of_idle_and_deadline() {
        let first = sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_7"}}"#,
        );
        let source = futures::stream::iter(vec![Ok::<_, Infallible>(first.into_bytes())])
            .chain(futures::stream::pending());
        let error = ResponseStream::from_sse_bytes_with(
            source,
            limits(
                Duration::from_secs(3600),
                Duration::from_millis(50),
                1_000,
                1_000,
            ),
            "test",
        )
        .collect()
        .await
        .unwrap_err();
        assert!(
            matches!(error, ResponsesError::Deadline { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("turn deadline"), "{error}");
    }

    /// CR, LF and CRLF line ends (a CRLF split across chunks included), comments and fields
    /// without a space all decode alike.
    #[test]
    fn decoder_line_ends_and_fields() {
        let text =
            ": comment\r\nevent:a\r\ndata: 1\r\ndata:2\r\n\r\nevent: b\rdata: x\r\rdata: y\n\n";
        for size in [1, 2, 5, 100] {
            let mut decoder = SseDecoder::new(1_000);
            let mut out = VecDeque::new();
            for chunk in text.as_bytes().chunks(size) {
                decoder.feed(chunk, &mut out).unwrap();
            }
            let out: Vec<SseEvent> = out.into_iter().collect();
            assert_eq!(
                out,
                vec![
                    SseEvent {
                        event: "a".into(),
                        data: "1\n2".into()
                    },
                    SseEvent {
                        event: "b".into(),
                        data: "x".into()
                    },
                    SseEvent {
                        event: String::new(),
                        data: "y".into()
                    },
                ],
                "chunk size {size}"
            );
        }
    }

    /// UTF-8 is checked per line, whatever the chunking: a character cut between chunks is
    /// whole again, a line with invalid bytes (or ending inside a character) is an error, and a
    /// comment's bytes are never looked at.
    #[test]
    fn decoder_checks_utf8_per_line() {
        let mut bytes = b": ".to_vec();
        bytes.push(0xff);
        bytes.extend_from_slice(" skipped\ndata: \u{2713} ok\n\n".as_bytes());
        for size in [1, 2, 3, 64] {
            let mut decoder = SseDecoder::new(1_000);
            let mut out = VecDeque::new();
            for chunk in bytes.chunks(size) {
                decoder.feed(chunk, &mut out).unwrap();
            }
            assert_eq!(
                out.pop_front().unwrap().data,
                "\u{2713} ok",
                "chunk size {size}"
            );
        }
        let invalid: [&[u8]; 3] = [b"data: a\xffb\n\n", b"id: \xff\n\n", b"data: \xe2\x9c\n\n"];
        for bytes in invalid {
            for size in [1, 2, 64] {
                let mut decoder = SseDecoder::new(1_000);
                let mut out = VecDeque::new();
                let fed: Result<(), SseDecodeError> = bytes
                    .chunks(size)
                    .try_for_each(|chunk| decoder.feed(chunk, &mut out));
                assert_eq!(fed, Err(SseDecodeError::InvalidUtf8), "{bytes:?} by {size}");
            }
        }
    }

    /// A delta with escapes, one without (cut out of the event in place), and one in a
    /// data-only event decode to their text; a delta event whose payload lacks a string delta
    /// is still the decode error naming the event.
    #[tokio::test]
    async fn escaped_and_plain_deltas_decode_alike() {
        let body = [
            sse(
                "response.created",
                r#"{"type":"response.created","response":{"id":"r"}}"#,
            ),
            delta_frame("plain "),
            delta_frame("esc\"aped\n\u{2713} "),
            "data: {\"delta\":\"data-only\",\"type\":\"response.output_text.delta\"}\n\n".into(),
            sse(
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"r"}}"#,
            ),
        ]
        .concat();
        let done = stream_of(vec![body.into_bytes()]).collect().await.unwrap();
        assert_eq!(done.text, "plain esc\"aped\n\u{2713} data-only");
        let bad = sse(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":7}"#,
        );
        let error = stream_of(vec![bad.into_bytes()])
            .collect()
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ResponsesError::Decode { message, .. } if message.contains("missing string delta")),
            "{error:?}"
        );
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
