//! The Responses API's wire shapes, as the front speaks them to its clients: the request it
//! reads ([`request`]), the response object and its output items, the streaming events it
//! writes ([`events`]), and the API's error body. Pure functions of their inputs; the
//! handlers do the I/O.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::backend::ToolSpec;

mod events;
mod request;

pub use self::events::{
    function_call_events, message_done, message_opened, response_event, text_delta, EventSequence,
};
pub use self::request::{parse_create, user_message_text, CreateRequest, ToolOutputItem};

/// An error answered in the API's own shape: `{"error": {message, type, param, code}}` with
/// an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The error's `type` (`invalid_request_error`, `server_error`, …).
    pub kind: &'static str,
    /// What went wrong, for the client.
    pub message: String,
    /// The request parameter at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code, if any.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400: the request is not one the front can serve as given.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// 404: no such object (`what` names it, e.g. "Response with id 'resp_…'").
    pub fn not_found(param: Option<&str>, what: impl std::fmt::Display) -> ApiError {
        ApiError {
            status: 404,
            kind: "invalid_request_error",
            message: format!("{what} not found."),
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// 401: the request's `Authorization` is missing or wrong.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: 401,
            kind: "invalid_request_error",
            message: "Incorrect or missing API key: this ctxbridge front needs `Authorization: Bearer TOKEN` with its capability token.".into(),
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 401: a front passing its clients' keys on got a request without one.
    pub fn unauthorized_upstream() -> ApiError {
        ApiError {
            status: 401,
            kind: "invalid_request_error",
            message: "Missing API key: this ctxbridge front passes the client's `Authorization: Bearer KEY` on to the upstream.".into(),
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 404 for a route this front does not serve.
    pub fn unknown_route(method: &str, path: &str) -> ApiError {
        ApiError {
            status: 404,
            kind: "invalid_request_error",
            message: format!(
                "Invalid URL ({method} {path}): ctxbridge's Responses front does not serve it."
            ),
            param: None,
            code: None,
        }
    }

    /// 500: the front failed (`message` says where).
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 502: the upstream model failed the turn.
    pub fn upstream(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 502,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: Some("upstream_error"),
        }
    }

    /// The body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// Token counts of a response, as the API reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
}

fn usage_json(usage: Option<TokenUsage>) -> Value {
    match usage {
        None => Value::Null,
        Some(u) => json!({
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.input_tokens + u.output_tokens,
        }),
    }
}

/// Where a response stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Failed => "failed",
        }
    }
}

/// What a client asks of the model for one response, echoed in its response object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ModelSettings {
    /// Instructions for this response only.
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    /// The client's function tools, as sent.
    pub tools: Vec<Value>,
    pub tool_choice: Option<Value>,
}

impl ModelSettings {
    /// The client's function tools as the backend offers them to the model.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|tool| ToolSpec {
                name: text_of(tool, "name"),
                description: text_of(tool, "description"),
                parameters: tool
                    .get("parameters")
                    .filter(|p| p.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            })
            .collect()
    }
}

fn text_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// One function call of the model, as its client sees it: the client runs it and answers
/// with a `function_call_output` of the same `call_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCall {
    /// The item's id (`fc_…`).
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// Everything a response object shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseView<'a> {
    pub id: &'a str,
    pub created_at: u64,
    pub status: Status,
    pub model: &'a str,
    /// The output items (empty while nothing is answered).
    pub output: Vec<Value>,
    pub previous_response_id: Option<&'a str>,
    pub conversation: Option<&'a str>,
    pub metadata: &'a Value,
    pub store: bool,
    pub settings: &'a ModelSettings,
    pub usage: Option<TokenUsage>,
    /// The error of a failed response: (code, message).
    pub error: Option<(&'a str, &'a str)>,
}

/// The assistant message item.
pub fn message_item(item_id: &str, text: &str, status: Status) -> Value {
    json!({
        "id": item_id,
        "type": "message",
        "status": status.as_str(),
        "role": "assistant",
        "content": [output_text_part(text)],
    })
}

/// A function call item.
pub fn function_call_item(call: &FunctionCall, status: Status) -> Value {
    json!({
        "id": call.id,
        "type": "function_call",
        "status": status.as_str(),
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
    })
}

fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The response object (`"object": "response"`).
pub fn response_object(view: &ResponseView<'_>) -> Value {
    let settings = view.settings;
    json!({
        "id": view.id,
        "object": "response",
        "created_at": view.created_at,
        "status": view.status.as_str(),
        "background": false,
        "error": view.error.map(|(code, message)| json!({"code": code, "message": message})),
        "incomplete_details": null,
        "instructions": settings.instructions,
        "max_output_tokens": settings.max_output_tokens,
        "model": view.model,
        "output": view.output,
        "parallel_tool_calls": true,
        "previous_response_id": view.previous_response_id,
        "conversation": view.conversation.map(|id| json!({"id": id})),
        "reasoning": {"effort": null, "summary": null},
        "store": view.store,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": settings.tool_choice.clone().unwrap_or_else(|| Value::from("auto")),
        "tools": settings.tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage_json(view.usage),
        "metadata": view.metadata,
    })
}

/// A list page (`"object": "list"`) of `data`, all of it (the front does not paginate).
pub fn list(data: Vec<Value>) -> Value {
    let first_id = data
        .first()
        .and_then(|d| d.get("id"))
        .cloned()
        .unwrap_or(Value::Null);
    let last_id = data
        .last()
        .and_then(|d| d.get("id"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({"object": "list", "data": data, "first_id": first_id, "last_id": last_id, "has_more": false})
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The response object carries its output items, the conversation as an object, and the
    /// client's settings echoed.
    #[test]
    fn response_object_shape() {
        let metadata = json!({"k": "v"});
        let settings = ModelSettings {
            instructions: Some("be brief".into()),
            max_output_tokens: Some(64),
            tools: vec![json!({"type": "function", "name": "add"})],
            tool_choice: None,
        };
        let call = FunctionCall {
            id: "fc_1".into(),
            call_id: "call_1".into(),
            name: "add".into(),
            arguments: "{}".into(),
        };
        let view = ResponseView {
            id: "resp_1",
            created_at: 7,
            status: Status::Completed,
            model: "m",
            output: vec![
                message_item("msg_1", "hi", Status::Completed),
                function_call_item(&call, Status::Completed),
            ],
            previous_response_id: Some("resp_0"),
            conversation: Some("conv_1"),
            metadata: &metadata,
            store: true,
            settings: &settings,
            usage: Some(TokenUsage {
                input_tokens: 3,
                output_tokens: 2,
                cached_tokens: 0,
            }),
            error: None,
        };
        let object = response_object(&view);
        assert_eq!(object["object"], "response");
        assert_eq!(object["output"][0]["content"][0]["text"], "hi");
        assert_eq!(object["output"][1]["type"], "function_call");
        assert_eq!(object["output"][1]["call_id"], "call_1");
        assert_eq!(object["conversation"]["id"], "conv_1");
        assert_eq!(object["usage"]["total_tokens"], 5);
        assert_eq!(object["metadata"]["k"], "v");
        assert_eq!(object["instructions"], "be brief");
        assert_eq!(object["max_output_tokens"], 64);
        assert_eq!(object["tools"][0]["name"], "add");
        assert_eq!(object["tool_choice"], "auto");
    }

    /// A function tool without parameters is offered with an empty object schema.
    #[test]
    fn tool_specs_default_their_parameters() {
        let settings = ModelSettings {
            tools: vec![json!({"type": "function", "name": "now", "description": "The time."})],
            ..ModelSettings::default()
        };
        let specs = settings.tool_specs();
        assert_eq!(specs[0].name, "now");
        assert_eq!(specs[0].description, "The time.");
        assert_eq!(specs[0].parameters["type"], "object");
    }
}
