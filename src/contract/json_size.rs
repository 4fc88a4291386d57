//! The JSON size of messages without serialising them: a message's size is the length of its
//! compact JSON form (as `serde_json` writes an [`AgentMessage`]) with every string counted as
//! its UTF-8 length plus two quotes — escapes are not counted, so measuring costs O(fields),
//! not O(bytes). A transcript's size is that of the JSON array of its messages. Bounding
//! (docs/architecture.md#bounding) and [`super::Messages`] measure with these.

use std::fmt;

use serde_json::Value;

use super::message::{AgentMessage, ContentPart, MessageContent};

/// The JSON size of a transcript (a JSON array of messages), strings counted unescaped.
pub fn transcript_json_bytes(messages: &[AgentMessage]) -> usize {
    let inner: usize = messages.iter().map(message_json_bytes).sum();
    2 + inner + messages.len().saturating_sub(1)
}

/// The JSON size of one message, strings counted unescaped (see the module documentation).
pub fn message_json_bytes(message: &AgentMessage) -> usize {
    let mut fields = Fields::default();
    fields.add("role", str_bytes(message.role.as_str()));
    if let Some(id) = &message.id {
        fields.add("id", str_bytes(id));
    }
    if let Some(content) = &message.content {
        let bytes = match content {
            MessageContent::Text(text) => str_bytes(text),
            MessageContent::Parts(parts) => {
                2 + parts.iter().map(part_bytes).sum::<usize>() + parts.len().saturating_sub(1)
            }
        };
        fields.add("content", bytes);
    }
    if let Some(id) = &message.tool_call_id {
        fields.add("toolCallId", str_bytes(id));
    }
    if let Some(name) = &message.tool_name {
        fields.add("toolName", str_bytes(name));
    }
    if let Some(summary) = &message.summary {
        fields.add("summary", str_bytes(summary));
    }
    if let Some(timestamp) = &message.timestamp {
        fields.add("timestamp", value_bytes(timestamp));
    }
    fields.extra(&message.extra);
    fields.close()
}

/// An object's size, field by field.
#[derive(Default)]
struct Fields {
    bytes: usize,
    count: usize,
}

impl Fields {
    fn add(&mut self, key: &str, value_bytes: usize) {
        self.bytes += key.len() + 3 + value_bytes;
        self.count += 1;
    }

    fn extra(&mut self, map: &serde_json::Map<String, Value>) {
        for (key, value) in map {
            self.add(key, value_bytes(value));
        }
    }

    fn close(&self) -> usize {
        2 + self.bytes + self.count.saturating_sub(1)
    }
}

fn str_bytes(s: &str) -> usize {
    s.len() + 2
}

fn part_bytes(part: &ContentPart) -> usize {
    let mut fields = Fields::default();
    match part {
        ContentPart::Text { text, extra } => {
            fields.add("type", str_bytes("text"));
            fields.add("text", str_bytes(text));
            fields.extra(extra);
        }
        ContentPart::Image { extra } => {
            fields.add("type", str_bytes("image"));
            fields.extra(extra);
        }
        ContentPart::ToolCall {
            id,
            name,
            arguments,
            extra,
        } => {
            fields.add("type", str_bytes("toolCall"));
            fields.add("id", str_bytes(id));
            fields.add("name", str_bytes(name));
            fields.add("arguments", value_bytes(arguments));
            fields.extra(extra);
        }
        ContentPart::ToolResult {
            tool_call_id,
            content,
            extra,
        } => {
            fields.add("type", str_bytes("toolResult"));
            fields.add("toolCallId", str_bytes(tool_call_id));
            fields.add("content", value_bytes(content));
            fields.extra(extra);
        }
        ContentPart::Other(value) => return value_bytes(value),
    }
    fields.close()
}

fn value_bytes(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => display_len(n),
        Value::String(s) => str_bytes(s),
        Value::Array(items) => {
            2 + items.iter().map(value_bytes).sum::<usize>() + items.len().saturating_sub(1)
        }
        Value::Object(map) => {
            let mut fields = Fields::default();
            fields.extra(map);
            fields.close()
        }
    }
}

/// The length of a value's `Display` form, without allocating.
fn display_len(value: &impl fmt::Display) -> usize {
    struct Counter(usize);
    impl fmt::Write for Counter {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // The counter never fails.
    let _ = fmt::write(&mut counter, format_args!("{value}"));
    counter.0
}
