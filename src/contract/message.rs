//! Transcript messages (`AgentMessage`, docs/architecture.md#messages).
//!
//! One struct for every role keeps the consumers (rendering, bounding, stores) simple; fields
//! that a role does not use stay `None`. Every field the contract does not name survives a JSON
//! round trip through `extra`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `role` tag of an [`AgentMessage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// A user message.
    User,
    /// A model reply.
    Assistant,
    /// The result of a tool call (carries `toolCallId`, `toolName?`).
    ToolResult,
    /// A summary that replaced compacted history (carries `summary`).
    CompactionSummary,
    /// A summary of an abandoned branch (carries `summary`).
    BranchSummary,
    /// A host- or engine-specific message.
    Custom,
}

impl Role {
    /// The role as written on the wire (`"toolResult"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::CompactionSummary => "compactionSummary",
            Role::BranchSummary => "branchSummary",
            Role::Custom => "custom",
        }
    }
}

/// A message of the transcript, as the engine contract sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMessage {
    /// The `role` tag.
    pub role: Role,
    /// The message id, when the host gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A string or an array of parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// `toolResult` messages: the call they answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// `toolResult` messages: the tool that was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// `compactionSummary` / `branchSummary` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Kept as JSON: hosts write milliseconds, ISO strings or floats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    /// Every field the contract does not name (kept through a round trip).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentMessage {
    fn with_text(role: Role, text: impl Into<String>) -> Self {
        AgentMessage {
            role,
            id: None,
            content: Some(MessageContent::Text(text.into())),
            tool_call_id: None,
            tool_name: None,
            summary: None,
            timestamp: None,
            extra: Map::new(),
        }
    }

    /// A `user` message with plain text content.
    pub fn user(text: impl Into<String>) -> Self {
        Self::with_text(Role::User, text)
    }

    /// An `assistant` message with plain text content.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::with_text(Role::Assistant, text)
    }

    /// A `toolResult` message answering `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        let mut m = Self::with_text(Role::ToolResult, text);
        m.tool_call_id = Some(tool_call_id.into());
        m
    }

    /// A `compactionSummary` message.
    pub fn compaction_summary(summary: impl Into<String>) -> Self {
        let mut m = Self::with_text(Role::CompactionSummary, "");
        m.content = None;
        m.summary = Some(summary.into());
        m
    }

    /// Sets the message id (builder style).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The concatenated plain text of the message (text parts only, summaries for summary roles).
    pub fn plain_text(&self) -> String {
        if let Some(summary) = &self.summary {
            if matches!(self.role, Role::CompactionSummary | Role::BranchSummary) {
                return summary.clone();
            }
        }
        match &self.content {
            None => String::new(),
            Some(MessageContent::Text(t)) => t.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The tool calls this message makes (assistant messages with `toolCall` parts).
    pub fn tool_call_ids(&self) -> Vec<&str> {
        match &self.content {
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::ToolCall { id, .. } => Some(id.as_str()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// `content`: a plain string or an array of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// An array of parts.
    Parts(Vec<ContentPart>),
}

/// One part of a message's content. Part types the contract does not name stay opaque
/// (`Other`) and survive a round trip unchanged, as do unknown fields of known parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum ContentPart {
    /// `{type: "text", text}`.
    Text {
        /// The text.
        text: String,
        /// The part's other fields, kept through a round trip.
        extra: Map<String, Value>,
    },
    /// `{type: "image", …}`, kept whole.
    Image {
        /// Every field but `type`, kept through a round trip.
        extra: Map<String, Value>,
    },
    /// `{type: "toolCall", id, name, arguments}`.
    ToolCall {
        /// The call id a `toolResult` answers with.
        id: String,
        /// The tool's name.
        name: String,
        /// The call's arguments (any JSON).
        arguments: Value,
        /// The part's other fields, kept through a round trip.
        extra: Map<String, Value>,
    },
    /// `{type: "toolResult", toolCallId, content}`.
    ToolResult {
        /// The call this result answers.
        tool_call_id: String,
        /// The result (any JSON).
        content: Value,
        /// The part's other fields, kept through a round trip.
        extra: Map<String, Value>,
    },
    /// A part type the contract does not name, kept as it came.
    Other(Value),
}

impl ContentPart {
    /// A `{type: "text", text}` part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text {
            text: text.into(),
            extra: Map::new(),
        }
    }

    /// A `{type: "toolCall", id, name, arguments}` part.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ContentPart::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            extra: Map::new(),
        }
    }
}

/// Why a JSON value is not a valid content part.
#[derive(Debug, thiserror::Error)]
#[error("invalid content part of type {part_type:?}: {problem}")]
pub struct ContentPartError {
    /// The part's `type`.
    pub part_type: String,
    /// What is wrong with it.
    pub problem: String,
}

fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    part_type: &str,
) -> Result<String, ContentPartError> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ContentPartError {
            part_type: part_type.to_string(),
            problem: format!(
                "field `{key}` must be a string, found {}",
                json_kind(&other)
            ),
        }),
        None => Err(ContentPartError {
            part_type: part_type.to_string(),
            problem: format!("missing field `{key}`"),
        }),
    }
}

/// What kind of JSON value a value is, with its article ("an array"): the one definition,
/// shared with the JSON-RPC layer.
pub use ctxbridge_jsonrpc::json_kind;

impl TryFrom<Value> for ContentPart {
    type Error = ContentPartError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        let Value::Object(mut map) = value else {
            return Err(ContentPartError {
                part_type: String::new(),
                problem: format!(
                    "a content part must be an object, found {}",
                    json_kind(&value)
                ),
            });
        };
        let part_type = match map.get("type") {
            Some(Value::String(t)) => t.clone(),
            _ => return Ok(ContentPart::Other(Value::Object(map))),
        };
        match part_type.as_str() {
            "text" => {
                map.remove("type");
                let text = take_string(&mut map, "text", "text")?;
                Ok(ContentPart::Text { text, extra: map })
            }
            "image" => {
                map.remove("type");
                Ok(ContentPart::Image { extra: map })
            }
            "toolCall" => {
                map.remove("type");
                let id = take_string(&mut map, "id", "toolCall")?;
                let name = take_string(&mut map, "name", "toolCall")?;
                let arguments = map.remove("arguments").unwrap_or(Value::Null);
                Ok(ContentPart::ToolCall {
                    id,
                    name,
                    arguments,
                    extra: map,
                })
            }
            "toolResult" => {
                map.remove("type");
                let tool_call_id = take_string(&mut map, "toolCallId", "toolResult")?;
                let content = map.remove("content").unwrap_or(Value::Null);
                Ok(ContentPart::ToolResult {
                    tool_call_id,
                    content,
                    extra: map,
                })
            }
            _ => Ok(ContentPart::Other(Value::Object(map))),
        }
    }
}

impl From<ContentPart> for Value {
    fn from(part: ContentPart) -> Value {
        fn with_type(t: &str, mut extra: Map<String, Value>) -> Map<String, Value> {
            extra.insert("type".into(), Value::String(t.into()));
            extra
        }
        match part {
            ContentPart::Text { text, extra } => {
                let mut m = with_type("text", extra);
                m.insert("text".into(), Value::String(text));
                Value::Object(m)
            }
            ContentPart::Image { extra } => Value::Object(with_type("image", extra)),
            ContentPart::ToolCall {
                id,
                name,
                arguments,
                extra,
            } => {
                let mut m = with_type("toolCall", extra);
                m.insert("id".into(), Value::String(id));
                m.insert("name".into(), Value::String(name));
                m.insert("arguments".into(), arguments);
                Value::Object(m)
            }
            ContentPart::ToolResult {
                tool_call_id,
                content,
                extra,
            } => {
                let mut m = with_type("toolResult", extra);
                m.insert("toolCallId".into(), Value::String(tool_call_id));
                m.insert("content".into(), content);
                Value::Object(m)
            }
            ContentPart::Other(v) => v,
        }
    }
}
