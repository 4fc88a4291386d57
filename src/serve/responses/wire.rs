//! The Responses API's wire shapes, as the front speaks them to its clients: the request it
//! reads, the response object and streaming events it writes, and the API's error body. Pure
//! functions of their inputs; the handlers do the I/O.

use serde_json::{json, Map, Value};

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

/// What a `POST /v1/responses` asks for, as far as the front serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateRequest {
    /// The model asked for (echoed; the upstream's configured model answers).
    pub model: Option<String>,
    /// The client's new input items, normalized to items (a string input is one user message).
    pub input: Vec<Value>,
    /// The user's text of this turn: the text of the input's user messages, in order.
    pub prompt: String,
    pub previous_response_id: Option<String>,
    /// The conversation the response belongs to (`conversation: "conv_…"` or `{id}`).
    pub conversation: Option<String>,
    pub stream: bool,
    /// Whether the response is kept for later reads (default true, as the API's).
    pub store: bool,
    pub metadata: Value,
}

/// The request fields the front accepts and ignores: sampling and presentation settings the
/// upstream's own configuration decides.
const IGNORED_FIELDS: &[&str] = &[
    "temperature",
    "top_p",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "parallel_tool_calls",
    "truncation",
    "text",
    "reasoning",
    "include",
    "top_logprobs",
    "stream_options",
    "background",
];

/// Request fields the front refuses for now rather than drop: they change what the model
/// does, and the harness's turn does not carry them to the upstream yet.
const NOT_YET_SERVED: &[&str] = &["instructions", "max_output_tokens"];

/// Reads a `POST /v1/responses` body. Fields the front cannot honour are refused with the
/// API's error naming the parameter, never silently dropped.
pub fn parse_create(body: &[u8]) -> Result<CreateRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            None,
            format!(
                "The request body is not valid JSON: {e} (line {}, column {}).",
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(fields) = value else {
        return Err(ApiError::invalid(
            None,
            "The request body must be a JSON object.",
        ));
    };
    for (key, value) in &fields {
        let served = matches!(
            key.as_str(),
            "model"
                | "input"
                | "previous_response_id"
                | "conversation"
                | "stream"
                | "store"
                | "metadata"
                | "tools"
                | "tool_choice"
        ) || IGNORED_FIELDS.contains(&key.as_str());
        if value.is_null() {
            continue;
        }
        if NOT_YET_SERVED.contains(&key.as_str()) {
            return Err(ApiError::invalid(
                Some(key),
                format!("`{key}` is not served by ctxbridge's Responses front yet: the upstream's configuration decides it."),
            ));
        }
        if !served && !NOT_YET_SERVED.contains(&key.as_str()) {
            return Err(ApiError::invalid(
                Some(key),
                format!("Unrecognized request argument supplied: {key}"),
            ));
        }
        if key == "tools" && value.as_array().is_some_and(|tools| !tools.is_empty()) {
            return Err(ApiError::invalid(
                Some("tools"),
                "Client tools are not served by ctxbridge's Responses front yet; the context engine's own tools are offered to the model.",
            ));
        }
    }
    let text_field = |name: &str| -> Result<Option<String>, ApiError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::invalid(
                Some(name),
                format!("`{name}` must be a string."),
            )),
        }
    };
    let bool_field = |name: &str, default: bool| -> Result<bool, ApiError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::invalid(
                Some(name),
                format!("`{name}` must be a boolean."),
            )),
        }
    };
    let conversation = match fields.get("conversation") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(Value::Object(c)) => match c.get("id") {
            Some(Value::String(id)) => Some(id.clone()),
            _ => {
                return Err(ApiError::invalid(
                    Some("conversation"),
                    "`conversation` must be a conversation id or an object with its `id`.",
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                Some("conversation"),
                "`conversation` must be a conversation id or an object with its `id`.",
            ))
        }
    };
    let previous_response_id = text_field("previous_response_id")?;
    if conversation.is_some() && previous_response_id.is_some() {
        return Err(ApiError::invalid(
            Some("previous_response_id"),
            "`previous_response_id` and `conversation` cannot be used together.",
        ));
    }
    let input = input_items(fields.get("input"))?;
    let prompt = user_text(&input)?;
    let metadata = match fields.get("metadata") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(_) => {
            return Err(ApiError::invalid(
                Some("metadata"),
                "`metadata` must be an object.",
            ))
        }
    };
    Ok(CreateRequest {
        model: text_field("model")?,
        input,
        prompt,
        previous_response_id,
        conversation,
        stream: bool_field("stream", false)?,
        store: bool_field("store", true)?,
        metadata,
    })
}

/// The request's `input` as items: a string is one user message.
fn input_items(input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    match input {
        None | Some(Value::Null) => Err(ApiError::invalid(
            Some("input"),
            "Missing required parameter: 'input'.",
        )),
        Some(Value::String(text)) => Ok(vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })]),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(_) => Err(ApiError::invalid(
            Some("input"),
            "`input` must be a string or an array of input items.",
        )),
    }
}

/// The text of the input's user messages (text parts joined by newlines). Items the front
/// cannot pass on as the user's turn are refused, naming the item.
fn user_text(items: &[Value]) -> Result<String, ApiError> {
    let mut texts = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let param = format!("input[{index}]");
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        if kind != "message" {
            return Err(ApiError::invalid(
                Some(&param),
                format!("Input items of type '{kind}' are not served by ctxbridge's Responses front yet (only messages)."),
            ));
        }
        let role = item.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" {
            return Err(ApiError::invalid(
                Some(&param),
                format!("Input messages of role '{role}' are not served: the user's turn is its user messages, and instructions go in `instructions`."),
            ));
        }
        match item.get("content") {
            Some(Value::String(text)) => texts.push(text.clone()),
            Some(Value::Array(parts)) => {
                for (part_index, part) in parts.iter().enumerate() {
                    let part_kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                    match (part_kind, part.get("text").and_then(Value::as_str)) {
                        ("input_text", Some(text)) => texts.push(text.to_owned()),
                        _ => {
                            return Err(ApiError::invalid(
                                Some(&format!("{param}.content[{part_index}]")),
                                format!("Content parts of type '{part_kind}' are not served by ctxbridge's Responses front yet (only input_text)."),
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(ApiError::invalid(
                    Some(&format!("{param}.content")),
                    "A message's `content` must be a string or an array of content parts.",
                ))
            }
        }
    }
    if texts.is_empty() {
        return Err(ApiError::invalid(
            Some("input"),
            "`input` holds no user text.",
        ));
    }
    Ok(texts.join("\n"))
}

/// Token counts of a response, as the API reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

/// Everything a response object shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseView<'a> {
    pub id: &'a str,
    pub created_at: u64,
    pub status: Status,
    pub model: &'a str,
    /// The assistant message's item id and text; `None` while nothing is answered.
    pub message: Option<(&'a str, &'a str)>,
    pub previous_response_id: Option<&'a str>,
    pub conversation: Option<&'a str>,
    pub metadata: &'a Value,
    pub store: bool,
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

fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The response object (`"object": "response"`).
pub fn response_object(view: &ResponseView<'_>) -> Value {
    let output: Vec<Value> = view
        .message
        .map(|(item_id, text)| message_item(item_id, text, view.status))
        .into_iter()
        .collect();
    json!({
        "id": view.id,
        "object": "response",
        "created_at": view.created_at,
        "status": view.status.as_str(),
        "background": false,
        "error": view.error.map(|(code, message)| json!({"code": code, "message": message})),
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": view.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": view.previous_response_id,
        "conversation": view.conversation.map(|id| json!({"id": id})),
        "reasoning": {"effort": null, "summary": null},
        "store": view.store,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage_json(view.usage),
        "metadata": view.metadata,
    })
}

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

/// `response.output_item.added` for the assistant message, still empty.
pub fn message_added(item_id: &str) -> Value {
    json!({
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
    })
}

/// `response.content_part.added` for the message's one text part.
pub fn text_part_added(item_id: &str) -> Value {
    json!({
        "type": "response.content_part.added",
        "item_id": item_id,
        "output_index": 0,
        "content_index": 0,
        "part": output_text_part(""),
    })
}

/// `response.output_text.delta`.
pub fn text_delta(item_id: &str, delta: &str) -> Value {
    json!({
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": 0,
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
            "output_index": 0,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        }),
        json!({
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": output_text_part(text),
        }),
        json!({
            "type": "response.output_item.done",
            "output_index": 0,
            "item": message_item(item_id, text, Status::Completed),
        }),
    ]
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

    /// A string input is one user message; the prompt is its text.
    #[test]
    fn string_input_is_one_user_message() {
        let request = parse_create(br#"{"model":"m","input":"hello"}"#).unwrap();
        assert_eq!(request.prompt, "hello");
        assert_eq!(request.input.len(), 1);
        assert_eq!(request.input[0]["role"], "user");
        assert!(request.store, "store defaults to true");
        assert!(!request.stream);
    }

    /// Message items with string or part content give their text, in order.
    #[test]
    fn message_items_give_their_text() {
        let request = parse_create(
            br#"{"input":[{"role":"user","content":"one"},{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}],"conversation":{"id":"conv_1"}}"#,
        )
        .unwrap();
        assert_eq!(request.prompt, "one\ntwo");
        assert_eq!(request.conversation.as_deref(), Some("conv_1"));
    }

    /// What the front cannot honour is refused naming the parameter, in the API's shape.
    #[test]
    fn unserved_input_is_refused_naming_the_parameter() {
        let cases: [(&[u8], &str); 7] = [
            (br#"{"input":"x","instructions":"be brief"}"#, "instructions"),
            (br#"{"input":"x","tools":[{"type":"function","name":"f"}]}"#, "tools"),
            (br#"{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}"#, "input[0]"),
            (br#"{"input":[{"role":"system","content":"s"}]}"#, "input[0]"),
            (br#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]}"#, "input[0].content[0]"),
            (br#"{"input":"x","frobnicate":1}"#, "frobnicate"),
            (br#"{"input":"x","previous_response_id":"r","conversation":"c"}"#, "previous_response_id"),
        ];
        for (body, param) in cases {
            let error = parse_create(body).unwrap_err();
            assert_eq!(error.status, 400, "{error}");
            assert_eq!(
                error.body()["error"]["param"],
                param,
                "{}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(error.body()["error"]["type"], "invalid_request_error");
        }
        let error = parse_create(b"{").unwrap_err();
        assert!(error.message.contains("line 1"), "{error}");
        assert_eq!(
            parse_create(b"{}").unwrap_err().param.as_deref(),
            Some("input")
        );
    }

    /// Streamed events are numbered from 0 and framed as SSE with their type.
    #[test]
    fn events_are_numbered_frames() {
        let mut seq = EventSequence::default();
        let first = seq.frame(text_delta("msg_1", "he"));
        let second = seq.frame(text_delta("msg_1", "llo"));
        assert!(first.starts_with("event: response.output_text.delta\ndata: {"));
        assert!(first.ends_with("\n\n"));
        let data = |frame: &str| -> Value {
            serde_json::from_str(
                frame
                    .lines()
                    .nth(1)
                    .unwrap()
                    .strip_prefix("data: ")
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(data(&first)["sequence_number"], 0);
        assert_eq!(data(&second)["sequence_number"], 1);
        assert_eq!(data(&second)["delta"], "llo");
    }

    /// The response object carries the answer as one assistant message, and the conversation
    /// as an object.
    #[test]
    fn response_object_shape() {
        let metadata = json!({"k": "v"});
        let view = ResponseView {
            id: "resp_1",
            created_at: 7,
            status: Status::Completed,
            model: "m",
            message: Some(("msg_1", "hi")),
            previous_response_id: Some("resp_0"),
            conversation: Some("conv_1"),
            metadata: &metadata,
            store: true,
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
        assert_eq!(object["conversation"]["id"], "conv_1");
        assert_eq!(object["usage"]["total_tokens"], 5);
        assert_eq!(object["metadata"]["k"], "v");
    }
}
