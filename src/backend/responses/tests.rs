use std::time::Duration;

use responses_client::{InputItem, ResponsesError};

use super::super::{ThreadedBackend, ToolOutput, ToolSpec, TurnRequest};
use super::chain::ChainState;
use super::errors::backend_error;
use super::request::{follow_up_request, turn_request, Continuation};
use super::*;

fn turn(thread: &str, input: &str) -> TurnRequest {
    TurnRequest {
        thread_id: ThreadId(thread.into()),
        input: input.into(),
        developer_instructions: Some("dev".into()),
        base_instructions: Some("base".into()),
        tools: Default::default(),
        additional_context: None,
        options: Default::default(),
    }
}

/// Instructions join the non-blank parts with a blank line.
#[test]
fn instructions_compose() {
    assert_eq!(
        compose_instructions(Some("base"), Some("dev"), None).as_deref(),
        Some("base\n\ndev")
    );
    assert_eq!(
        compose_instructions(None, Some("dev"), None).as_deref(),
        Some("dev")
    );
    assert_eq!(compose_instructions(Some("  "), None, None), None);
}

/// Thread ids are classified by prefix.
#[test]
fn chain_positions() {
    assert_eq!(
        ChainPosition::of(&ThreadId("chain:1".into())),
        ChainPosition::Fresh
    );
    assert_eq!(
        ChainPosition::of(&ThreadId("compacted:1".into())),
        ChainPosition::Compacted
    );
    assert_eq!(
        ChainPosition::of(&ThreadId("resp_1".into())),
        ChainPosition::Response("resp_1".into())
    );
}

/// A continued chain sends only the new turn (plus queued developer notes) with its id.
#[test]
fn continued_turn_carries_no_history() {
    let state = ChainState {
        pending_developer_messages: vec!["note".into()],
        ..ChainState::default()
    };
    let position = Continuation::Chain(ChainPosition::Response("resp_7".into()));
    let request = turn_request("m", &position, &state, &turn("resp_7", "hi"));
    assert_eq!(request.conversation, None);
    assert_eq!(request.previous_response_id.as_deref(), Some("resp_7"));
    assert_eq!(
        request.input,
        vec![
            InputItem::developer_text("note"),
            InputItem::user_text("hi")
        ]
    );
    assert_eq!(request.instructions.as_deref(), Some("base\n\ndev"));
    assert!(request.store);
}

/// A compacted thread sends its window as input and no previous_response_id.
#[test]
fn compacted_turn_sends_the_window_without_a_chain_id() {
    let window = serde_json::json!({"type": "compaction", "encrypted_content": "x"});
    let state = ChainState {
        model: Some("override".into()),
        compacted_window: Some(vec![window.clone()]),
        ..ChainState::default()
    };
    let request = turn_request(
        "m",
        &Continuation::Chain(ChainPosition::Compacted),
        &state,
        &turn("compacted:1", "hi"),
    );
    assert_eq!(request.previous_response_id, None);
    assert_eq!(request.model, "override");
    assert_eq!(
        request.input,
        vec![InputItem::Raw(window), InputItem::user_text("hi")]
    );
}

/// A conversation turn names the conversation, never a previous response, and sends only
/// the new turn (with queued developer notes) and the instructions.
#[test]
fn conversation_turn_names_the_conversation_only() {
    let state = ChainState {
        pending_developer_messages: vec!["note".into()],
        ..ChainState::default()
    };
    let request = turn_request(
        "m",
        &Continuation::Conversation("conv_1".into()),
        &state,
        &turn("conv_1", "hi"),
    );
    assert_eq!(request.conversation.as_deref(), Some("conv_1"));
    assert_eq!(request.previous_response_id, None);
    assert_eq!(
        request.input,
        vec![
            InputItem::developer_text("note"),
            InputItem::user_text("hi")
        ]
    );
    assert_eq!(request.instructions.as_deref(), Some("base\n\ndev"));
    assert!(request.store);
}

/// Conversation threads are the default, in the backend config and its wire name.
#[test]
fn conversation_threads_are_the_default() {
    let config = ResponsesBackendConfig::new("http://127.0.0.1:1/v1", "m");
    assert_eq!(config.threads, ResponsesThreads::Conversation);
    assert_eq!(
        serde_json::to_value(ResponsesThreads::Chain).unwrap(),
        serde_json::json!("chain")
    );
    assert_eq!(
        serde_json::from_value::<ResponsesThreads>(serde_json::json!("conversation")).unwrap(),
        ResponsesThreads::Conversation
    );
}

/// The backend config's Debug and the backend's label never show a key written into the
/// base URL.
#[test]
fn base_url_secrets_never_print() {
    let config = ResponsesBackendConfig::new(
        "http://user:sk-userinfo@127.0.0.1:1/v1?api-key=sk-query",
        "m",
    );
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("sk-userinfo") && !debug.contains("sk-query"),
        "{debug}"
    );
    let backend = ResponsesBackend::new(config).unwrap();
    let label = backend.label().to_owned();
    assert!(
        !label.contains("sk-userinfo") && !label.contains("sk-query"),
        "{label}"
    );
    assert!(label.contains("127.0.0.1:1/v1?api-key=***"), "{label}");
    let debug = format!("{backend:?}");
    assert!(
        !debug.contains("sk-userinfo") && !debug.contains("sk-query"),
        "{debug}"
    );
}

/// The stream limits map to clear backend errors naming the setting to change.
#[test]
fn limits_map_to_clear_errors() {
    let idle = backend_error(
        "run turn",
        "t",
        ResponsesError::IdleTimeout {
            operation: "create response",
            after: Duration::from_secs(120),
        },
    );
    assert!(matches!(idle, BackendError::Unavailable { .. }));
    assert!(idle.to_string().contains(IDLE_TIMEOUT_KEY), "{idle}");
    let deadline = backend_error(
        "run turn",
        "t",
        ResponsesError::Deadline {
            operation: "create response",
            after: Duration::from_secs(1200),
        },
    );
    assert!(deadline.to_string().contains("turn deadline"), "{deadline}");
    assert!(
        deadline.to_string().contains(TURN_TIMEOUT_KEY),
        "{deadline}"
    );
    let large = backend_error(
        "run turn",
        "t",
        ResponsesError::ReplyTooLarge {
            operation: "create response",
            limit: 10,
        },
    );
    assert!(matches!(large, BackendError::TurnFailed { .. }));
    assert!(large.to_string().contains(MAX_REPLY_BYTES_KEY), "{large}");
    let event = backend_error(
        "run turn",
        "t",
        ResponsesError::EventTooLarge {
            operation: "create response",
            limit: 10,
        },
    );
    assert!(event.to_string().contains(MAX_EVENT_BYTES_KEY), "{event}");
}

/// The key variable is read; unset, empty and absent configurations are told apart and
/// the error names the variable.
#[test]
fn api_key_from_env_cases() {
    assert!(api_key_from_env(None, |_| unreachable!())
        .unwrap()
        .is_none());
    let key = api_key_from_env(Some("K"), |_| Ok("sk-1".into()))
        .unwrap()
        .unwrap();
    assert_eq!(key.expose(), "sk-1");
    let unset =
        api_key_from_env(Some("MY_KEY_VAR"), |_| Err(std::env::VarError::NotPresent)).unwrap_err();
    assert!(unset.to_string().contains("MY_KEY_VAR"));
    assert!(matches!(
        api_key_from_env(Some("K"), |_| Ok("  ".into())),
        Err(ResponsesBackendConfigError::ApiKeyEmpty { .. })
    ));
}

/// `function_call` output items become invocations with parsed arguments (other items are
/// skipped; arguments that are not JSON are kept as text); outputs answer by call id.
#[test]
fn function_calls_and_their_outputs() {
    let items = vec![
        serde_json::json!({"type": "message", "role": "assistant", "content": []}),
        serde_json::json!({"type": "function_call", "call_id": "c1", "name": "lookup",
                           "arguments": "{\"q\":\"otters\"}"}),
        serde_json::json!({"type": "function_call", "call_id": "c2", "name": "raw",
                           "arguments": "not json"}),
    ];
    let calls = function_calls(&items);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].call_id, "c1");
    assert_eq!(calls[0].name, "lookup");
    assert_eq!(calls[0].arguments, serde_json::json!({"q": "otters"}));
    assert_eq!(calls[1].arguments, serde_json::json!("not json"));
    let InputItem::Raw(output) = function_call_output("c1", &ToolOutput::text("3")) else {
        panic!("a raw item");
    };
    assert_eq!(
        output,
        serde_json::json!({"type": "function_call_output", "call_id": "c1", "output": "3"})
    );
}

/// A turn's tools go with its request as function tools, and the follow-up after tool calls
/// keeps model, instructions and tools, chained on the calling response.
#[test]
fn requests_carry_the_turn_tools() {
    let mut request = turn("resp_1", "hi");
    request.tools.specs = vec![ToolSpec {
        name: "lookup".into(),
        description: "Looks up.".into(),
        parameters: serde_json::json!({"type": "object"}),
    }];
    let fresh = Continuation::Chain(ChainPosition::Fresh);
    let create = turn_request("m", &fresh, &ChainState::default(), &request);
    assert_eq!(
        create.tools,
        vec![serde_json::json!({"type": "function", "name": "lookup",
                                "description": "Looks up.",
                                "parameters": {"type": "object"}})]
    );
    let follow = follow_up_request(
        &create,
        "resp_2",
        vec![function_call_output("c1", &ToolOutput::text("x"))],
    );
    assert_eq!(follow.previous_response_id.as_deref(), Some("resp_2"));
    assert_eq!(follow.tools, create.tools);
    assert_eq!(follow.instructions, create.instructions);
    assert_eq!(follow.input.len(), 1);
    assert!(
        turn_request("m", &fresh, &ChainState::default(), &turn("t", "x"))
            .tools
            .is_empty()
    );
    let conversation = Continuation::Conversation("conv_1".into());
    let create = turn_request("m", &conversation, &ChainState::default(), &request);
    let follow = follow_up_request(&create, "resp_2", Vec::new());
    assert_eq!(
        follow.previous_response_id, None,
        "a conversation carries the call"
    );
    assert_eq!(follow.conversation.as_deref(), Some("conv_1"));
}

/// A turn's own options go with every request of the turn: its instructions after the
/// configured ones, its output cap and its tool choice (kept by the follow-up after calls).
#[test]
fn requests_carry_the_turn_options() {
    let mut request = turn("resp_1", "hi");
    request.options = super::super::TurnOptions {
        instructions: Some("Answer in one line.".into()),
        max_output_tokens: Some(64),
        tool_choice: Some(serde_json::json!("required")),
        api_key: None,
        connection_pool: 0,
    };
    let fresh = Continuation::Chain(ChainPosition::Fresh);
    let create = turn_request("m", &fresh, &ChainState::default(), &request);
    assert_eq!(
        create.instructions.as_deref(),
        Some("base\n\ndev\n\nAnswer in one line.")
    );
    assert_eq!(create.max_output_tokens, Some(64));
    assert_eq!(create.tool_choice, Some(serde_json::json!("required")));
    let follow = follow_up_request(&create, "resp_2", Vec::new());
    assert_eq!(follow.max_output_tokens, Some(64));
    assert_eq!(follow.tool_choice, create.tool_choice);
    let plain = turn_request("m", &fresh, &ChainState::default(), &turn("t", "x"));
    assert_eq!((plain.max_output_tokens, plain.tool_choice), (None, None));
}

/// Which connection pool a turn uses asks nothing of the model: options naming only a pool
/// are empty (every backend serves them); any setting for the model is not.
#[test]
fn a_connection_pool_alone_asks_nothing_of_the_model() {
    let pool_only = super::super::TurnOptions {
        connection_pool: 3,
        ..Default::default()
    };
    assert!(pool_only.is_empty());
    let capped = super::super::TurnOptions {
        max_output_tokens: Some(1),
        ..pool_only
    };
    assert!(!capped.is_empty());
}
