//! Engine tools (docs/engine-protocol.md#the-engine-process-protocol): tools an engine registers (an OpenClaw plugin's
//! `api.registerTool`), offered to the model by the host and executed by the engine through
//! `tools/call`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool an engine offers to the model (`initialize` result `tools[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineTool {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the tool's arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// `tools/call` params: one call of an engine tool made by the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallParams {
    /// The session whose turn made the call.
    pub session_id: String,
    /// The host's stable key of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments the model gave: an object, or the JSON text of one as the model sent it.
    #[serde(default)]
    pub arguments: Value,
    /// The backend's id of the call, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// `tools/call` result: content parts for the model, and whether the tool reports an error.
/// A result with `isError: true` is the tool's answer, not an engine failure.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallResult {
    /// Content parts (`{type: "text", text}`, other types kept opaque).
    #[serde(default)]
    pub content: Vec<Value>,
    /// The tool reports that the call failed.
    #[serde(default)]
    pub is_error: bool,
}

impl ToolCallResult {
    /// The text parts joined with `"\n"` (what a text-only tool output carries).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A one-text-part result with `isError: true`.
    pub fn error(message: impl Into<String>) -> Self {
        ToolCallResult {
            content: vec![serde_json::json!({"type": "text", "text": message.into()})],
            is_error: true,
        }
    }

    /// A one-text-part successful result.
    pub fn from_text(text: impl Into<String>) -> Self {
        ToolCallResult {
            content: vec![serde_json::json!({"type": "text", "text": text.into()})],
            is_error: false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Tool declarations decode from the engine's camelCase JSON; a missing schema becomes an
    /// empty object schema, a missing description an empty string.
    #[test]
    fn engine_tool_decodes_with_defaults() {
        let tool: EngineTool = serde_json::from_value(json!({
            "name": "lookup",
            "description": "Look a thing up",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }))
        .unwrap();
        assert_eq!(tool.name, "lookup");
        assert_eq!(tool.parameters["properties"]["q"]["type"], "string");
        let bare: EngineTool = serde_json::from_value(json!({"name": "x"})).unwrap();
        assert_eq!(bare.description, "");
        assert_eq!(bare.parameters, json!({"type": "object", "properties": {}}));
    }

    /// Call params are camelCase and leave unset options off the wire.
    #[test]
    fn tool_call_params_wire_shape() {
        let params = ToolCallParams {
            session_id: "s".into(),
            name: "lookup".into(),
            arguments: json!({"q": "x"}),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"sessionId": "s", "name": "lookup", "arguments": {"q": "x"}})
        );
        let full = ToolCallParams {
            session_key: Some("k".into()),
            tool_call_id: Some("call_1".into()),
            ..params
        };
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(v["sessionKey"], "k");
        assert_eq!(v["toolCallId"], "call_1");
    }

    /// `isError` defaults to false; `text()` joins only the text parts.
    #[test]
    fn tool_call_result_text_and_error() {
        let result: ToolCallResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "…"},
                {"type": "text", "text": "two"},
            ],
        }))
        .unwrap();
        assert!(!result.is_error);
        assert_eq!(result.text(), "one\ntwo");
        let err = ToolCallResult::error("nope");
        assert!(err.is_error);
        assert_eq!(err.text(), "nope");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!({"content": [{"type": "text", "text": "nope"}], "isError": true})
        );
        assert_eq!(ToolCallResult::from_text("ok").text(), "ok");
    }
}
