//! A streamed response's events (`stream: true`), as the API names and shapes them: numbered
//! SSE frames for the response's state, its assistant message's text and its function calls.

use serde_json::{json, Value};

use super::{function_call_item, message_item, output_text_part, FunctionCall, Status};

/// The events of one streamed response, numbered in order (`sequence_number` from 0).
#[derive(Debug, Default)]
pub struct EventSequence {
    next: u64,
}

impl EventSequence {
    /// `event` (an object with its `type`) numbered, as one SSE frame.
    pub fn frame(&mut self, mut event: Value) -> String {
        if let Value::Object(fields) = &mut event {
            fields.insert("sequence_number".into(), Value::from(self.next));
        }
        self.next += 1;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        format!("event: {kind}\ndata: {event}\n\n")
    }
}

/// `response.created`, `response.in_progress`, `response.completed`, `response.failed`: an
/// event carrying the whole response.
pub fn response_event(kind: &str, response: Value) -> Value {
    json!({"type": kind, "response": response})
}

/// The assistant message is always a response's first output item.
const MESSAGE_INDEX: usize = 0;

/// The two events that open the assistant message: the item, still empty, and its one text
/// part.
pub fn message_opened(item_id: &str) -> [Value; 2] {
    [
        json!({
            "type": "response.output_item.added",
            "output_index": MESSAGE_INDEX,
            "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
        }),
        json!({
            "type": "response.content_part.added",
            "item_id": item_id,
            "output_index": MESSAGE_INDEX,
            "content_index": 0,
            "part": output_text_part(""),
        }),
    ]
}

/// `response.output_text.delta`.
pub fn text_delta(item_id: &str, delta: &str) -> Value {
    json!({
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": MESSAGE_INDEX,
        "content_index": 0,
        "delta": delta,
        "logprobs": [],
    })
}

/// The three events that close the message: the text, its part and the item, done.
pub fn message_done(item_id: &str, text: &str) -> [Value; 3] {
    [
        json!({
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": MESSAGE_INDEX,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        }),
        json!({
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": MESSAGE_INDEX,
            "content_index": 0,
            "part": output_text_part(text),
        }),
        json!({
            "type": "response.output_item.done",
            "output_index": MESSAGE_INDEX,
            "item": message_item(item_id, text, Status::Completed),
        }),
    ]
}

/// The four events of one function call at `output_index`: the item added, its arguments as
/// one delta, the arguments done, the item done.
pub fn function_call_events(call: &FunctionCall, output_index: usize) -> [Value; 4] {
    let mut added = function_call_item(call, Status::InProgress);
    added["arguments"] = Value::from("");
    [
        json!({
            "type": "response.output_item.added",
            "output_index": output_index,
            "item": added,
        }),
        json!({
            "type": "response.function_call_arguments.delta",
            "item_id": call.id,
            "output_index": output_index,
            "delta": call.arguments,
        }),
        json!({
            "type": "response.function_call_arguments.done",
            "item_id": call.id,
            "output_index": output_index,
            "name": call.name,
            "arguments": call.arguments,
        }),
        json!({
            "type": "response.output_item.done",
            "output_index": output_index,
            "item": function_call_item(call, Status::Completed),
        }),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn data(frame: &str) -> Value {
        serde_json::from_str(
            frame
                .lines()
                .nth(1)
                .unwrap()
                .strip_prefix("data: ")
                .unwrap(),
        )
        .unwrap()
    }

    /// Streamed events are numbered from 0 and framed as SSE with their type.
    #[test]
    fn events_are_numbered_frames() {
        let mut seq = EventSequence::default();
        let first = seq.frame(text_delta("msg_1", "he"));
        let second = seq.frame(text_delta("msg_1", "llo"));
        assert!(first.starts_with("event: response.output_text.delta\ndata: {"));
        assert!(first.ends_with("\n\n"));
        assert_eq!(data(&first)["sequence_number"], 0);
        assert_eq!(data(&second)["sequence_number"], 1);
        assert_eq!(data(&second)["delta"], "llo");
    }

    /// A function call streams as its item added without arguments, the arguments, and the
    /// item done with them, all at its output index.
    #[test]
    fn a_function_call_streams_its_item_and_arguments() {
        let call = FunctionCall {
            id: "fc_1".into(),
            call_id: "call_1".into(),
            name: "add".into(),
            arguments: r#"{"a":1}"#.into(),
        };
        let [added, delta, done, item_done] = function_call_events(&call, 1);
        assert_eq!(added["item"]["arguments"], "");
        assert_eq!(added["item"]["status"], "in_progress");
        assert_eq!(delta["delta"], r#"{"a":1}"#);
        assert_eq!(done["name"], "add");
        assert_eq!(item_done["item"]["call_id"], "call_1");
        assert_eq!(item_done["item"]["status"], "completed");
        for event in [added, delta, done, item_done] {
            assert_eq!(event["output_index"], 1, "{event}");
        }
    }
}
