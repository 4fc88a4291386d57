//! The `POST /v1/responses` body, read: what the front serves of it, refused naming the
//! parameter where it cannot honour a field (never silently dropped).

use serde_json::{json, Map, Value};

use super::{ApiError, ModelSettings};

/// What a `POST /v1/responses` asks for, as far as the front serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateRequest {
    /// The model asked for (echoed; the upstream's configured model answers).
    pub model: Option<String>,
    /// The client's new input items, normalized to items (a string input is one user message).
    pub input: Vec<Value>,
    /// The user's text of this turn: the text of the input's user messages, in order. Empty
    /// when the input is the outputs of the model's function calls.
    pub prompt: String,
    /// The outputs of the model's function calls the input carries (`function_call_output`),
    /// in order; the turn that made the calls goes on with them.
    pub tool_outputs: Vec<ToolOutputItem>,
    /// The text of the input's `system` and `developer` messages, in order: instructions that
    /// stay with the rest of the chain or conversation, as those messages stay in the API's.
    pub standing_instructions: Vec<String>,
    pub previous_response_id: Option<String>,
    /// The conversation the response belongs to (`conversation: "conv_…"` or `{id}`).
    pub conversation: Option<String>,
    pub stream: bool,
    /// Whether the response is kept for later reads (default true, as the API's).
    pub store: bool,
    pub metadata: Value,
    /// What the client asks of the model for this response.
    pub settings: ModelSettings,
}

/// A `function_call_output` input item: the client's output of one of the model's calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutputItem {
    pub call_id: String,
    /// The output's text (the text parts of an array output, joined).
    pub output: String,
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

/// The request fields the front serves.
const SERVED_FIELDS: &[&str] = &[
    "model",
    "input",
    "previous_response_id",
    "conversation",
    "stream",
    "store",
    "metadata",
    "instructions",
    "max_output_tokens",
    "tools",
    "tool_choice",
];

/// The least `max_output_tokens` the API accepts.
const MIN_OUTPUT_TOKENS: u64 = 16;

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
        let known = SERVED_FIELDS.contains(&key.as_str()) || IGNORED_FIELDS.contains(&key.as_str());
        if !known && !value.is_null() {
            return Err(ApiError::invalid(
                Some(key),
                format!("Unrecognized request argument supplied: {key}"),
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
            _ => return Err(conversation_shape()),
        },
        Some(_) => return Err(conversation_shape()),
    };
    let previous_response_id = text_field("previous_response_id")?;
    if conversation.is_some() && previous_response_id.is_some() {
        return Err(ApiError::invalid(
            Some("previous_response_id"),
            "`previous_response_id` and `conversation` cannot be used together.",
        ));
    }
    let input = input_items(fields.get("input"))?;
    let Input {
        prompt,
        tool_outputs,
        standing_instructions,
    } = read_input(&input)?;
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
    let tools = function_tools(fields.get("tools"))?;
    let settings = ModelSettings {
        instructions: text_field("instructions")?,
        max_output_tokens: max_output_tokens(fields.get("max_output_tokens"))?,
        tool_choice: tool_choice(fields.get("tool_choice"), &tools)?,
        tools,
    };
    Ok(CreateRequest {
        model: text_field("model")?,
        input,
        prompt,
        tool_outputs,
        standing_instructions,
        previous_response_id,
        conversation,
        stream: bool_field("stream", false)?,
        store: bool_field("store", true)?,
        metadata,
        settings,
    })
}

fn conversation_shape() -> ApiError {
    ApiError::invalid(
        Some("conversation"),
        "`conversation` must be a conversation id or an object with its `id`.",
    )
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

/// What a request's input says: see [`read_input`].
struct Input {
    prompt: String,
    tool_outputs: Vec<ToolOutputItem>,
    standing_instructions: Vec<String>,
}

/// The user's text of the input's user messages (text parts joined by newlines), the function
/// call outputs it carries, and the text of its system and developer messages. A turn is user
/// messages or function call outputs: user messages start one, function call outputs let the
/// model's waiting turn go on (whose instructions are set). Items the front cannot pass on
/// are refused, naming the item.
fn read_input(items: &[Value]) -> Result<Input, ApiError> {
    let mut texts = Vec::new();
    let mut outputs = Vec::new();
    let mut instructions = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let param = format!("input[{index}]");
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => match role_of(item) {
                "system" | "developer" => instructions.extend(message_text(item, &param)?),
                _ => texts.extend(user_message_text(item, &param)?),
            },
            "function_call_output" => outputs.push(tool_output(item, &param)?),
            _ => {
                return Err(ApiError::invalid(
                    Some(&param),
                    format!("Input items of type '{kind}' are not served by ctxbridge's Responses front (only user messages and function_call_output)."),
                ))
            }
        }
    }
    match (texts.is_empty(), outputs.is_empty()) {
        (true, true) => Err(ApiError::invalid(
            Some("input"),
            "`input` holds no user text.",
        )),
        (false, false) => Err(ApiError::invalid(
            Some("input"),
            "User messages beside function_call_output items are not served: the model's turn waits on the outputs alone. Send the message in the next request.",
        )),
        (true, false) if !instructions.is_empty() => Err(ApiError::invalid(
            Some("input"),
            "System and developer messages beside function_call_output items are not served: the model's turn waits on the outputs alone, with the instructions it started with. Send them with the next user message.",
        )),
        _ => Ok(Input {
            prompt: texts.join("\n"),
            tool_outputs: outputs,
            standing_instructions: instructions,
        }),
    }
}

/// A message item's role (none: "").
fn role_of(item: &Value) -> &str {
    item.get("role").and_then(Value::as_str).unwrap_or("")
}

/// The text parts of a user message (`param` names it in an error).
pub fn user_message_text(item: &Value, param: &str) -> Result<Vec<String>, ApiError> {
    let role = role_of(item);
    if role != "user" {
        return Err(ApiError::invalid(
            Some(param),
            format!("Input messages of role '{role}' are not served: the user's turn is its user messages; system and developer messages in a response's input become its instructions."),
        ));
    }
    message_text(item, param)
}

/// The text parts of a message's content, a string or `input_text` parts (`param` names it
/// in an error).
fn message_text(item: &Value, param: &str) -> Result<Vec<String>, ApiError> {
    match item.get("content") {
        Some(Value::String(text)) => Ok(vec![text.clone()]),
        Some(Value::Array(parts)) => text_parts(parts, &format!("{param}.content")),
        _ => Err(ApiError::invalid(
            Some(&format!("{param}.content")),
            "A message's `content` must be a string or an array of content parts.",
        )),
    }
}

/// The texts of `input_text` parts; any other part is refused, naming it.
fn text_parts(parts: &[Value], param: &str) -> Result<Vec<String>, ApiError> {
    parts
        .iter()
        .enumerate()
        .map(|(index, part)| {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            match (kind, part.get("text").and_then(Value::as_str)) {
                ("input_text", Some(text)) => Ok(text.to_owned()),
                _ => Err(ApiError::invalid(
                    Some(&format!("{param}[{index}]")),
                    format!("Content parts of type '{kind}' are not served by ctxbridge's Responses front (only input_text)."),
                )),
            }
        })
        .collect()
}

/// A `function_call_output` item: its call id and its output's text.
fn tool_output(item: &Value, param: &str) -> Result<ToolOutputItem, ApiError> {
    let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
        return Err(ApiError::invalid(
            Some(&format!("{param}.call_id")),
            "A function_call_output needs the `call_id` of the call it answers.",
        ));
    };
    let output = match item.get("output") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => text_parts(parts, &format!("{param}.output"))?.join("\n"),
        _ => return Err(ApiError::invalid(
            Some(&format!("{param}.output")),
            "A function_call_output's `output` must be a string or an array of input_text parts.",
        )),
    };
    Ok(ToolOutputItem {
        call_id: call_id.to_owned(),
        output,
    })
}

/// Whether a field's value has the type it must have.
type TypeCheck = fn(&Value) -> bool;

/// The client's `tools`: function tools only, each named once.
fn function_tools(tools: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("tools"),
                "`tools` must be an array.",
            ))
        }
    };
    let mut names: Vec<&str> = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        let param = format!("tools[{index}]");
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(ApiError::invalid(
                Some(&format!("{param}.type")),
                format!("Tools of type '{kind}' are not served by ctxbridge's Responses front (only function tools, which the client runs)."),
            ));
        }
        let name = match tool.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name.as_str(),
            _ => {
                return Err(ApiError::invalid(
                    Some(&format!("{param}.name")),
                    "A function tool needs a `name`.",
                ))
            }
        };
        if names.contains(&name) {
            return Err(ApiError::invalid(
                Some(&format!("{param}.name")),
                format!("The tool name '{name}' is given twice."),
            ));
        }
        names.push(name);
        let checks: [(&str, TypeCheck); 3] = [
            ("description", Value::is_string),
            ("parameters", Value::is_object),
            ("strict", Value::is_boolean),
        ];
        for (field, ok) in checks {
            if tool.get(field).is_some_and(|v| !v.is_null() && !ok(v)) {
                return Err(ApiError::invalid(
                    Some(&format!("{param}.{field}")),
                    format!("A function tool's `{field}` has the wrong type."),
                ));
            }
        }
    }
    Ok(tools.clone())
}

/// `tool_choice`: `"auto"`, `"none"`, `"required"` or `{"type": "function", "name"}` of one
/// of `tools`.
fn tool_choice(choice: Option<&Value>, tools: &[Value]) -> Result<Option<Value>, ApiError> {
    let named = |name: &str| {
        tools
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    };
    match choice {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(mode)) if mode == "auto" || mode == "none" => Ok(choice.cloned()),
        Some(Value::String(mode)) if mode == "required" && !tools.is_empty() => {
            Ok(choice.cloned())
        }
        Some(Value::String(mode)) if mode == "required" => Err(ApiError::invalid(
            Some("tool_choice"),
            "`tool_choice: \"required\"` needs `tools`.",
        )),
        Some(Value::Object(fields))
            if fields.get("type").and_then(Value::as_str) == Some("function") =>
        {
            match fields.get("name").and_then(Value::as_str) {
                Some(name) if named(name) => Ok(choice.cloned()),
                Some(name) => Err(ApiError::invalid(
                    Some("tool_choice.name"),
                    format!("`tool_choice` names the function '{name}', which is not in `tools`."),
                )),
                None => Err(ApiError::invalid(
                    Some("tool_choice.name"),
                    "A function `tool_choice` needs the function's `name`.",
                )),
            }
        }
        Some(_) => Err(ApiError::invalid(
            Some("tool_choice"),
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": …} (other choices are not served by ctxbridge's Responses front).",
        )),
    }
}

/// `max_output_tokens`: a whole number, at least the API's minimum.
fn max_output_tokens(value: Option<&Value>) -> Result<Option<u64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(tokens) if tokens >= MIN_OUTPUT_TOKENS => Ok(Some(tokens)),
            _ => Err(ApiError::invalid(
                Some("max_output_tokens"),
                format!("Invalid 'max_output_tokens': expected an integer of at least {MIN_OUTPUT_TOKENS}."),
            )),
        },
    }
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
        assert_eq!(request.settings, ModelSettings::default());
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
        assert!(request.standing_instructions.is_empty());
    }

    /// System and developer messages give the standing instructions, in order, and no user
    /// text; the input keeps every item as sent.
    #[test]
    fn system_and_developer_messages_are_instructions() {
        let request = parse_create(
            br#"{"input":[{"role":"system","content":"be a pirate"},{"role":"user","content":"hi"},{"type":"message","role":"developer","content":[{"type":"input_text","text":"say arr"}]}]}"#,
        )
        .unwrap();
        assert_eq!(request.prompt, "hi");
        assert_eq!(request.standing_instructions, ["be a pirate", "say arr"]);
        assert_eq!(request.input.len(), 3);
        assert_eq!(request.settings.instructions, None);
    }

    /// Instructions, an output cap, function tools and a tool choice are read as given.
    #[test]
    fn model_settings_are_read() {
        let request = parse_create(
            br#"{"input":"x","instructions":"be brief","max_output_tokens":64,
                 "tools":[{"type":"function","name":"add","parameters":{"type":"object"}}],
                 "tool_choice":{"type":"function","name":"add"}}"#,
        )
        .unwrap();
        let settings = request.settings;
        assert_eq!(settings.instructions.as_deref(), Some("be brief"));
        assert_eq!(settings.max_output_tokens, Some(64));
        assert_eq!(settings.tools[0]["name"], "add");
        assert_eq!(settings.tool_choice.unwrap()["name"], "add");
    }

    /// Function call outputs (a string or text parts) are the input of a waiting turn.
    #[test]
    fn function_call_outputs_are_read() {
        let request = parse_create(
            br#"{"previous_response_id":"resp_1","input":[
                {"type":"function_call_output","call_id":"c1","output":"42"},
                {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}"#,
        )
        .unwrap();
        assert_eq!(request.prompt, "");
        assert_eq!(
            request.tool_outputs,
            vec![
                ToolOutputItem {
                    call_id: "c1".into(),
                    output: "42".into()
                },
                ToolOutputItem {
                    call_id: "c2".into(),
                    output: "a\nb".into()
                },
            ]
        );
    }

    /// What the front cannot honour is refused naming the parameter, in the API's shape.
    #[test]
    fn unserved_input_is_refused_naming_the_parameter() {
        let cases: [(&[u8], &str); 16] = [
            (br#"{"input":"x","tools":[{"type":"web_search"}]}"#, "tools[0].type"),
            (br#"{"input":"x","tools":[{"type":"function"}]}"#, "tools[0].name"),
            (br#"{"input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}"#, "tools[1].name"),
            (br#"{"input":"x","tools":[{"type":"function","name":"f","parameters":"no"}]}"#, "tools[0].parameters"),
            (br#"{"input":"x","tool_choice":"required"}"#, "tool_choice"),
            (br#"{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}"#, "tool_choice.name"),
            (br#"{"input":"x","max_output_tokens":3}"#, "max_output_tokens"),
            (br#"{"input":[{"type":"function_call_output","output":"o"}]}"#, "input[0].call_id"),
            (br#"{"input":[{"type":"function_call_output","call_id":"c","output":"o"},{"role":"user","content":"u"}]}"#, "input"),
            (br#"{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}"#, "input[0]"),
            (br#"{"input":[{"role":"assistant","content":"s"}]}"#, "input[0]"),
            (br#"{"input":[{"role":"system","content":"s"}]}"#, "input"),
            (br#"{"input":[{"type":"function_call_output","call_id":"c","output":"o"},{"role":"developer","content":"d"}]}"#, "input"),
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
}
