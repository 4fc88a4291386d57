//! One SSE event → a typed [`ResponseEvent`], or the error a failure event reports. Text
//! deltas take a fast path that cuts the delta out of the event's data without copying it;
//! `response.created` and `response.completed` one that reads only the fields used; an event
//! its name says this client does not read is skipped without parsing its data.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::Value;

use crate::error::ResponsesError;
use crate::types::{ResponseEvent, ResponseUsage, WireUsage};

use super::decoder::SseEvent;

/// One SSE event → a typed event, `None` for events this client does not use, or the error a
/// failure event reports.
pub(super) fn parse_event(
    event: SseEvent,
    operation: &'static str,
) -> Result<Option<ResponseEvent>, ResponsesError> {
    let data = event.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    if unread(&event) {
        tracing::trace!(event = %event.event, "skipping Responses stream event");
        return Ok(None);
    }
    let event = match text_delta(event) {
        Ok(delta) => return Ok(Some(ResponseEvent::OutputTextDelta { delta })),
        Err(event) => event,
    };
    if let Some(lifecycle) = lifecycle_event(&event) {
        return Ok(Some(lifecycle));
    }
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

/// The event types [`parse_event`] reads; the others are skipped.
const READ: [&str; 7] = [
    "response.created",
    "response.output_text.delta",
    "response.output_item.done",
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// Whether the event's SSE name says it is of a type this client does not read (a stream
/// carries several per response, `response.in_progress` with the whole response object). An
/// event without a name, or with the default `message`, is read: its data's `type` decides.
fn unread(event: &SseEvent) -> bool {
    !event.event.is_empty() && event.event != "message" && !READ.contains(&event.event.as_str())
}

/// The fields of a `response.created` or `response.completed` payload this client uses.
#[derive(Deserialize)]
struct Lifecycle<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    response: Option<LifecycleResponse>,
}

#[derive(Deserialize)]
struct LifecycleResponse {
    id: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A `response.created` or `response.completed` event, read without building its payload
/// (the whole response object) as a JSON value. `None` for any other event, or a payload
/// this fast path does not read (the general path then decides, with its errors).
fn lifecycle_event(event: &SseEvent) -> Option<ResponseEvent> {
    const CREATED: &str = "response.created";
    const COMPLETED: &str = "response.completed";
    if !(event.event.is_empty() || event.event == CREATED || event.event == COMPLETED) {
        return None;
    }
    let payload: Lifecycle<'_> = serde_json::from_str(event.data.trim()).ok()?;
    let response = payload.response?;
    let response_id = response.id?;
    match payload.kind.as_deref().unwrap_or(&event.event) {
        CREATED => Some(ResponseEvent::Created { response_id }),
        COMPLETED => Some(ResponseEvent::Completed {
            response_id,
            usage: response.usage.map(ResponseUsage::from),
        }),
        _ => None,
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
