//! The requests of a turn: instructions, input, tools and the follow-up that carries tool
//! outputs.

use responses_client::{CreateResponse, InputItem};
use serde_json::Value;

use super::super::{parse_tool_arguments, ToolInvocation, ToolOutput, ToolSpec, TurnRequest};
use super::chain::{ChainPosition, ChainState};

/// `instructions` of a request: base, developer and the turn's own instructions, blank parts
/// omitted, joined by a blank line.
pub fn compose_instructions(
    base: Option<&str>,
    developer: Option<&str>,
    turn: Option<&str>,
) -> Option<String> {
    let parts: Vec<&str> = [base, developer, turn]
        .into_iter()
        .flatten()
        .filter(|part| !part.trim().is_empty())
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("\n\n"))
    }
}

/// Where a turn continues: a chain position, or a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Continuation {
    Chain(ChainPosition),
    Conversation(String),
}

/// The request of one turn. Pure: the thread's position and held state decide everything.
pub(super) fn turn_request(
    default_model: &str,
    continuation: &Continuation,
    state: &ChainState,
    request: &TurnRequest,
) -> CreateResponse {
    let mut input: Vec<InputItem> = Vec::new();
    if let Some(window) = &state.compacted_window {
        input.extend(window.iter().cloned().map(InputItem::Raw));
    }
    input.extend(
        state
            .pending_developer_messages
            .iter()
            .map(InputItem::developer_text),
    );
    input.push(InputItem::user_text(request.input.clone()));
    CreateResponse {
        model: state
            .model
            .clone()
            .unwrap_or_else(|| default_model.to_owned()),
        instructions: compose_instructions(
            request.base_instructions.as_deref(),
            request.developer_instructions.as_deref(),
            request.options.instructions.as_deref(),
        ),
        input,
        previous_response_id: match continuation {
            Continuation::Chain(ChainPosition::Response(id)) => Some(id.clone()),
            Continuation::Chain(ChainPosition::Fresh | ChainPosition::Compacted)
            | Continuation::Conversation(_) => None,
        },
        conversation: match continuation {
            Continuation::Conversation(id) => Some(id.clone()),
            Continuation::Chain(_) => None,
        },
        store: true,
        tools: function_tools(&request.tools.specs),
        tool_choice: request.options.tool_choice.clone(),
        max_output_tokens: request.options.max_output_tokens,
    }
}

/// The most model responses one turn may take while the model keeps calling tools; past it the
/// turn fails rather than loop forever.
pub const MAX_TOOL_ROUNDS: usize = 8;

/// The turn's tools as Responses function tools.
pub fn function_tools(specs: &[ToolSpec]) -> Vec<Value> {
    specs
        .iter()
        .map(|t| {
            serde_json::json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            })
        })
        .collect()
}

/// The `function_call` items of a response's output as tool invocations (arguments parsed
/// from the model's JSON text).
pub fn function_calls(output_items: &[Value]) -> Vec<ToolInvocation> {
    let text = |item: &Value, key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    output_items
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("function_call"))
        .map(|item| ToolInvocation {
            call_id: text(item, "call_id"),
            name: text(item, "name"),
            arguments: parse_tool_arguments(&text(item, "arguments")),
        })
        .collect()
}

/// The `function_call_output` input item answering a call. The Responses API has no error
/// flag: a failed call's text says so.
pub fn function_call_output(call_id: &str, output: &ToolOutput) -> InputItem {
    InputItem::Raw(serde_json::json!({
        "type": "function_call_output",
        "call_id": call_id,
        "output": output.text,
    }))
}

/// The request that continues a turn after the model's tool calls: the same model,
/// instructions and tools, with the outputs as input, in the same conversation (conversation
/// threads) or chained on the response that made the calls (chain threads).
pub(super) fn follow_up_request(
    previous: &CreateResponse,
    response_id: &str,
    outputs: Vec<InputItem>,
) -> CreateResponse {
    CreateResponse {
        input: outputs,
        previous_response_id: if previous.conversation.is_some() {
            None
        } else {
            Some(response_id.to_owned())
        },
        ..previous.clone()
    }
}
