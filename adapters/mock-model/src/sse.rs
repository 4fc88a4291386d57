//! Responses streaming events, shaped the way Codex and the OpenAI API emit them.

use serde_json::{json, Value};

use crate::script::Usage;

/// One SSE frame: `event: <type>` then `data: <json>`.
pub fn frame(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {event}\n\n")
}

pub fn response_created(response_id: &str, model: &str) -> Value {
    json!({
        "type": "response.created",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "in_progress",
            "model": model,
            "output": [],
        }
    })
}

pub fn output_item_added(item_id: &str) -> Value {
    json!({
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {
            "type": "message",
            "role": "assistant",
            "id": item_id,
            "status": "in_progress",
            "content": [],
        }
    })
}

pub fn output_text_delta(item_id: &str, delta: &str) -> Value {
    json!({
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": 0,
        "content_index": 0,
        "delta": delta,
    })
}

/// A `response.output_item.added` event for any item (e.g. a function call).
pub fn item_added(item: &Value) -> Value {
    json!({
        "type": "response.output_item.added",
        "output_index": 0,
        "item": item,
    })
}

/// A finished `function_call` output item.
pub fn function_call(item_id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    })
}

/// The finished assistant message item, as it appears in `output` and in later conversations.
pub fn assistant_message(item_id: &str, text: &str) -> Value {
    json!({
        "type": "message",
        "role": "assistant",
        "id": item_id,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

pub fn output_item_done(item: &Value) -> Value {
    json!({
        "type": "response.output_item.done",
        "output_index": 0,
        "item": item,
    })
}

pub fn usage_json(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    })
}

pub fn response_completed(response_id: &str, model: &str, item: &Value, usage: Usage) -> Value {
    json!({
        "type": "response.completed",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "completed",
            "model": model,
            "output": [item],
            "usage": usage_json(usage),
        }
    })
}

pub fn response_failed(response_id: &str, model: &str, code: &str, message: &str) -> Value {
    json!({
        "type": "response.failed",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "failed",
            "model": model,
            "output": [],
            "error": {"code": code, "message": message},
        }
    })
}

/// An OpenAI-style error body.
pub fn error_body(kind: &str, code: &str, message: &str, param: Option<&str>) -> Value {
    json!({
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code,
        }
    })
}

/// Split `text` into up to `parts` pieces on character boundaries, none empty (an empty text
/// gives no pieces).
pub fn split_deltas(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let parts = parts.clamp(1, chars.len());
    let size = chars.len().div_ceil(parts);
    chars
        .chunks(size)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deltas concatenate back to the text and never split inside a character.
    #[test]
    fn split_deltas_round_trips() {
        let text = "héllo wörld, ünïcode";
        let parts = split_deltas(text, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts.concat(), text);
        assert!(split_deltas("", 3).is_empty());
        assert_eq!(split_deltas("ab", 5), vec!["a".to_owned(), "b".to_owned()]);
    }
}
