//! What the mock remembers about each request, and helpers to read Responses input items.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which endpoint a request hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// `POST /v1/responses` (or `/responses`): a streamed model response.
    Responses,
    /// `POST /v1/responses/compact` (or `/responses/compact`): a unary compaction.
    Compact,
    /// `/v1/conversations…` (or `/conversations…`): create, retrieve, delete a conversation, or
    /// list or add its items.
    Conversations,
    /// Anything else; answered 404.
    Other,
}

/// One request as the mock received it, with what it made of it and what it answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// 1-based arrival order.
    pub seq: u64,
    /// Milliseconds since the Unix epoch at arrival.
    pub received_at_ms: u64,
    pub method: String,
    pub path: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Value::Null` when it is not JSON (see `raw_body`).
    pub body: Value,
    /// The body as text when it is not JSON; `None` otherwise.
    pub raw_body: Option<String>,
    pub kind: RequestKind,
    /// `instructions` of the request, if any.
    pub instructions: Option<String>,
    /// `input` of the request as a list of items (a string input becomes one user message).
    pub input: Vec<Value>,
    /// `previous_response_id` of the request, if any.
    pub previous_response_id: Option<String>,
    /// `conversation` of the request (given as a string or as `{id}`), if any; for the
    /// conversations endpoints, the conversation the path names.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// `store` of the request (`false` when absent).
    pub store: bool,
    /// The full conversation the reply was computed on: the stored chain rebuilt from
    /// `previous_response_id`, or the items of the named conversation (stateful mode), followed
    /// by `input`; `input` alone otherwise.
    pub conversation: Vec<Value>,
    /// The HTTP status the mock answered with.
    pub status: u16,
    /// The response id the mock answered with (also for failed and dropped streams).
    pub response_id: Option<String>,
    /// The assistant text the mock sent (or began to send).
    pub reply_text: Option<String>,
}

impl RecordedRequest {
    /// The first header value with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Text of every `message` item of this role in `input`, one string per message.
    pub fn input_texts(&self, role: &str) -> Vec<String> {
        message_texts(&self.input, role)
    }

    /// Text of every `message` item of this role in the rebuilt conversation.
    pub fn conversation_texts(&self, role: &str) -> Vec<String> {
        message_texts(&self.conversation, role)
    }

    /// The text of the last user message of the conversation.
    pub fn last_user_text(&self) -> Option<String> {
        last_user_text(&self.conversation)
    }

    /// Whether the serialised body contains `needle` anywhere.
    pub fn body_contains(&self, needle: &str) -> bool {
        match &self.raw_body {
            Some(raw) => raw.contains(needle),
            None => self.body.to_string().contains(needle),
        }
    }
}

/// `input` of a Responses request as a list of items.
pub fn normalize_input(input: Option<&Value>) -> Vec<Value> {
    match input {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(text)) => vec![serde_json::json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other.clone()],
    }
}

/// Whether an item is a message (explicit `type: message`, or the short form with only a role).
fn is_message(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some(kind) => kind == "message",
        None => item.get("role").is_some(),
    }
}

/// The text of one message item: a string `content`, or its text parts joined.
pub fn message_text(item: &Value) -> Option<String> {
    match item.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|part| {
                    matches!(
                        part.get("type").and_then(Value::as_str),
                        Some("input_text" | "output_text" | "text")
                    )
                })
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            Some(texts.join("\n"))
        }
        _ => None,
    }
}

/// Text of every message of `role` among `items`.
pub fn message_texts(items: &[Value], role: &str) -> Vec<String> {
    items
        .iter()
        .filter(|item| is_message(item))
        .filter(|item| item.get("role").and_then(Value::as_str) == Some(role))
        .filter_map(message_text)
        .collect()
}

/// Text of the last user message among `items`.
pub fn last_user_text(items: &[Value]) -> Option<String> {
    items
        .iter()
        .rev()
        .filter(|item| is_message(item))
        .find(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(message_text)
}
