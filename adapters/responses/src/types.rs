//! Request bodies and the typed results of the Responses API.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who an input message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputRole {
    User,
    Developer,
}

/// One content part of an input message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputContent {
    InputText { text: String },
}

/// A message item: `{"type":"message","role":…,"content":[{"type":"input_text","text":…}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "message")]
pub struct InputMessage {
    pub role: InputRole,
    pub content: Vec<InputContent>,
}

/// One item of a request's `input`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum InputItem {
    Message(InputMessage),
    /// An item sent verbatim, e.g. the opaque output of the compaction endpoint.
    Raw(Value),
}

impl InputItem {
    /// A user message with one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::text(InputRole::User, text)
    }

    /// A developer message with one text part.
    pub fn developer_text(text: impl Into<String>) -> Self {
        Self::text(InputRole::Developer, text)
    }

    fn text(role: InputRole, text: impl Into<String>) -> Self {
        InputItem::Message(InputMessage {
            role,
            content: vec![InputContent::InputText { text: text.into() }],
        })
    }
}

/// `POST /responses`. The client always adds `"stream": true`. `previous_response_id` and
/// `conversation` exclude each other (the API refuses both together).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CreateResponse {
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    pub input: Vec<InputItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// The conversation (`conv_…`) the response continues; its input and output items are
    /// appended to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    pub store: bool,
    /// Tools the model may call (`{"type": "function", name, description, parameters}`);
    /// omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    /// How the model must choose among `tools` (`"auto"`, `"none"`, `"required"` or
    /// `{"type": "function", "name"}`); omitted when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// The most tokens the response may produce (`max_output_tokens`); omitted when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
}

/// A conversation object (`POST /conversations`, `GET /conversations/{id}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Conversation {
    /// `conv_…`.
    pub id: String,
    /// Seconds since the Unix epoch.
    #[serde(default)]
    pub created_at: Option<u64>,
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// `POST /responses/compact`: compacts either a stored chain (`previous_response_id`) or an
/// explicit `input` history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactRequest {
    pub model: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub input: Vec<InputItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
}

/// Token usage of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `input_tokens_details.cached_tokens`.
    pub cached_tokens: u64,
}

/// A typed event of a streaming response. `response.failed` and `error` events end the stream
/// as a [`crate::ResponsesError`] instead; events not listed here are skipped.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseEvent {
    /// `response.created`.
    Created { response_id: String },
    /// `response.output_text.delta`.
    OutputTextDelta { delta: String },
    /// `response.output_item.done`, with the item as sent.
    OutputItemDone { item: Value },
    /// `response.completed`; always the last event of a stream.
    Completed {
        response_id: String,
        usage: Option<ResponseUsage>,
    },
}

/// A finished response, gathered by [`crate::ResponseStream::collect`].
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedResponse {
    pub id: String,
    /// The concatenated text deltas; when the server streamed none, the `output_text` of the
    /// finished message items.
    pub text: String,
    pub usage: Option<ResponseUsage>,
    /// Every `response.output_item.done` item, in order.
    pub output_items: Vec<Value>,
}

/// What the compaction endpoint returns: a new, opaque context window to send as `input` (without
/// `previous_response_id`) in place of the compacted history.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactedResponse {
    pub id: Option<String>,
    pub output: Vec<Value>,
    pub usage: Option<ResponseUsage>,
}

/// The wire form of `usage`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<WireInputTokensDetails>,
}

#[derive(Debug, Deserialize)]
struct WireInputTokensDetails {
    #[serde(default)]
    cached_tokens: u64,
}

impl From<WireUsage> for ResponseUsage {
    fn from(wire: WireUsage) -> Self {
        ResponseUsage {
            input_tokens: wire.input_tokens,
            output_tokens: wire.output_tokens,
            cached_tokens: wire
                .input_tokens_details
                .map(|d| d.cached_tokens)
                .unwrap_or_default(),
        }
    }
}

/// The text of a finished `message` output item (its `output_text` parts), if it is one.
pub fn output_item_text(item: &Value) -> Option<String> {
    if item.get("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let parts = item.get("content")?.as_array()?;
    let text: String = parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("output_text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    Some(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A create request serialises to the Responses wire shape, omitting absent options.
    #[test]
    fn create_request_wire_shape() {
        let request = CreateResponse {
            model: "m".into(),
            instructions: None,
            input: vec![
                InputItem::developer_text("d"),
                InputItem::user_text("u"),
                InputItem::Raw(json!({"type": "compaction", "encrypted_content": "x"})),
            ],
            previous_response_id: Some("resp_1".into()),
            conversation: None,
            store: true,
            tools: Vec::new(),
            tool_choice: None,
            max_output_tokens: None,
        };
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({
                "model": "m",
                "input": [
                    {"type": "message", "role": "developer",
                     "content": [{"type": "input_text", "text": "d"}]},
                    {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "u"}]},
                    {"type": "compaction", "encrypted_content": "x"}
                ],
                "previous_response_id": "resp_1",
                "store": true
            })
        );
        let in_conversation = CreateResponse {
            previous_response_id: None,
            conversation: Some("conv_1".into()),
            input: vec![InputItem::user_text("u")],
            ..request
        };
        let wire = serde_json::to_value(&in_conversation).unwrap();
        assert_eq!(wire["conversation"], "conv_1");
        assert!(wire.get("previous_response_id").is_none());
        let bounded = CreateResponse {
            max_output_tokens: Some(200),
            ..in_conversation
        };
        assert_eq!(
            serde_json::to_value(&bounded).unwrap()["max_output_tokens"],
            200
        );
    }

    /// The text of a message output item is its output_text parts; other items have none.
    #[test]
    fn output_item_text_reads_message_items_only() {
        let message = json!({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Hel"}, {"type": "refusal", "refusal": "no"},
            {"type": "output_text", "text": "lo"}]});
        assert_eq!(output_item_text(&message).as_deref(), Some("Hello"));
        assert_eq!(output_item_text(&json!({"type": "reasoning"})), None);
    }
}
