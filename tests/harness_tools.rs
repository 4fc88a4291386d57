//! Engine tools reach the model (docs/engine-protocol.md#the-engine-process-protocol): the tools an engine registers are offered to the
//! model, a call by the model is executed by the engine for the turn's session, and the model
//! receives the output — on the in-process mock backend and on the real Codex app-server
//! (offline against the loopback mock model; skipped loudly when Codex is not installed). The
//! tool catalogue is part of the thread binding: a changed tool list starts a new thread with
//! reason `dynamic-tools-mismatch`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::backend::codex::{AppServerConfig, CodexBackend};
use ctxbridge::backend::mock::{MockCall, MockFault, MockItem};
use ctxbridge::backend::responses::ResponsesThreads;
use ctxbridge::backend::{ResponsesBackend, ResponsesBackendConfig};
use ctxbridge::contract::{ContextEngine, EngineTool};
use ctxbridge::harness::{Harness, ThreadAction, TurnSpec};
use ctxbridge::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use ctxbridge::store::SqliteStore;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use serde_json::json;
use support::*;

fn otter_tool() -> EngineTool {
    EngineTool {
        name: "count_otters".into(),
        description: "Counts the otters in a river.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"river": {"type": "string"}},
            "required": ["river"],
            "additionalProperties": false
        }),
    }
}

/// On the mock backend: the thread starts with the engine's tool, the model's scripted call runs
/// in the engine with the model's arguments and the turn's session, and the model's reply is
/// based on the tool's output (recorded in the thread after the call).
#[tokio::test]
async fn the_mock_model_calls_an_engine_tool() {
    let rig = Rig::new();
    let engine = ScriptEngine::plain();
    engine.set_tools(vec![otter_tool()]);
    let harness = rig.harness(Some(&engine), cfg());
    rig.backend.push_fault(MockFault::CallTool {
        name: "count_otters".into(),
        arguments: json!({"river": "Thames"}),
    });
    let report = turn(&harness, "how many otters?").await;

    let calls = engine.tool_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].name, "count_otters");
    assert_eq!(calls[0].arguments, json!({"river": "Thames"}));
    assert_eq!(calls[0].session_key.as_deref(), Some("s"));
    assert!(!calls[0].session_id.is_empty());
    assert!(calls[0].tool_call_id.is_some());

    let thread = rig.backend.thread(&report.thread_id).unwrap();
    assert_eq!(thread.tools, vec!["count_otters".to_owned()]);
    let expected = r#"tool count_otters ran with {"river":"Thames"}"#;
    assert!(
        thread.items.iter().any(|item| matches!(
            item,
            MockItem::ToolOutput { name, text, is_error: false } if name == "count_otters" && text == expected
        )),
        "the model received the output: {:?}",
        thread.items
    );
    assert!(report.reply.contains(expected), "reply: {}", report.reply);
    assert!(rig
        .backend
        .calls()
        .iter()
        .any(|c| matches!(c, MockCall::ToolCall { name, .. } if name == "count_otters")));
}

/// A call of a tool the engine does not offer is answered with an error output for the model
/// and never reaches the engine.
#[tokio::test]
async fn an_unknown_tool_is_an_error_for_the_model() {
    let rig = Rig::new();
    let engine = ScriptEngine::plain();
    engine.set_tools(vec![otter_tool()]);
    let harness = rig.harness(Some(&engine), cfg());
    rig.backend.push_fault(MockFault::CallTool {
        name: "count_beavers".into(),
        arguments: json!({}),
    });
    let report = turn(&harness, "how many beavers?").await;
    assert!(engine.tool_calls().is_empty());
    let thread = rig.backend.thread(&report.thread_id).unwrap();
    assert!(
        thread
            .items
            .iter()
            .any(|item| matches!(item, MockItem::ToolOutput { is_error: true, .. })),
        "{:?}",
        thread.items
    );
}

/// The engine's tool catalogue is part of the binding: the same tools reuse the thread, a
/// changed tool list projects on a new thread with reason `dynamic-tools-mismatch`, which is
/// started with the new tools.
#[tokio::test]
async fn a_changed_tool_list_rotates_the_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_tools(vec![otter_tool()]);
    let harness = rig.harness(Some(&engine), cfg());
    let first = turn(&harness, "one").await;
    let second = turn(&harness, "two").await;
    assert_eq!(second.thread_id, first.thread_id);
    assert_eq!(second.reason, "matching-thread-bootstrap-binding");

    let mut changed = otter_tool();
    changed.description = "Counts the otters and the beavers in a river.".into();
    engine.set_tools(vec![changed]);
    let third = turn(&harness, "three").await;
    assert_eq!(third.reason, "dynamic-tools-mismatch");
    assert_eq!(third.thread_action, ThreadAction::Rotated);
    assert_ne!(third.thread_id, first.thread_id);

    engine.set_tools(vec![
        otter_tool(),
        EngineTool {
            name: "count_beavers".into(),
            description: "Counts beavers.".into(),
            parameters: json!({"type": "object"}),
        },
    ]);
    let fourth = turn(&harness, "four").await;
    assert_eq!(fourth.reason, "dynamic-tools-mismatch");
    assert_ne!(fourth.thread_id, third.thread_id);
    let thread = rig.backend.thread(&fourth.thread_id).unwrap();
    assert_eq!(
        thread.tools,
        vec!["count_otters".to_owned(), "count_beavers".to_owned()]
    );
}

/// On the real Codex app-server: the engine's tool is offered as a dynamic tool, the mock model
/// calls it, Codex asks ctxbridge (`item/tool/call`), the engine runs it with the model's
/// arguments, and the next model request carries its output.
#[tokio::test]
async fn codex_calls_an_engine_tool() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED codex_calls_an_engine_tool: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(CodexBackend::new(
        AppServerConfig::new(dir.path().join("codex-home"))
            .with_command(vec![binary.display().to_string(), "app-server".into()])
            .with_overrides(offline_overrides(&mock.base_url()))
            .with_cwd(dir.path().to_path_buf()),
    ));
    let engine = ScriptEngine::plain();
    engine.set_tools(vec![otter_tool()]);
    let harness = Harness::new(
        cfg(),
        Arc::new(QuarantineEngine::new(
            ENGINE_ID,
            engine.clone() as Arc<dyn ContextEngine>,
            Arc::new(QuarantineBook::new()),
            CallTimeouts::default(),
        )),
        backend,
        Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap()),
    );
    mock.push_reply(ScriptedReply::tool_call(
        "count_otters",
        r#"{"river":"Thames"}"#,
    ));
    let report = harness
        .turn(TurnSpec::new(
            "codex-tools",
            "how many otters are in the Thames?",
        ))
        .await
        .unwrap();
    harness.shutdown().await;

    let calls = engine.tool_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].name, "count_otters");
    assert_eq!(calls[0].arguments, json!({"river": "Thames"}));
    assert_eq!(calls[0].session_key.as_deref(), Some("codex-tools"));

    let expected = r#"tool count_otters ran with {\"river\":\"Thames\"}"#;
    let requests = mock.response_requests();
    assert!(
        requests[0].body_contains("count_otters"),
        "the model is offered the tool"
    );
    let follow_up = requests.last().unwrap();
    assert!(
        follow_up.body_contains("function_call_output") && follow_up.body_contains(expected),
        "the model received the tool output: {}",
        follow_up.body
    );
    assert!(
        report.reply.contains("tool count_otters ran with"),
        "reply: {}",
        report.reply
    );
}

/// A harness running a [`ScriptEngine`] with the otter tool on a Responses backend of `threads`
/// kind, against `mock`.
fn responses_harness(
    mock: &MockModelServer,
    threads: ResponsesThreads,
    dir: &tempfile::TempDir,
) -> (Harness, Arc<ScriptEngine>) {
    let backend = Arc::new(
        ResponsesBackend::new(ResponsesBackendConfig {
            threads,
            ..ResponsesBackendConfig::new(mock.base_url(), "mock-model")
        })
        .unwrap(),
    );
    let engine = ScriptEngine::plain();
    engine.set_tools(vec![otter_tool()]);
    let harness = Harness::new(
        cfg(),
        Arc::new(QuarantineEngine::new(
            ENGINE_ID,
            engine.clone() as Arc<dyn ContextEngine>,
            Arc::new(QuarantineBook::new()),
            CallTimeouts::default(),
        )),
        backend,
        Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap()),
    );
    (harness, engine)
}

/// On the Responses backend (both thread kinds): the engine's tool goes with the request as a
/// function tool; the model's `function_call` runs in the engine, and a follow-up request
/// carries the `function_call_output` — chained on the calling response, or in the same
/// conversation; the turn's reply is the model's answer to it.
#[tokio::test]
async fn responses_calls_an_engine_tool() {
    for threads in [ResponsesThreads::Chain, ResponsesThreads::Conversation] {
        let mock = MockModelServer::start(MockModelConfig::stateful())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (harness, engine) = responses_harness(&mock, threads, &dir);
        mock.push_reply(ScriptedReply::tool_call(
            "count_otters",
            r#"{"river":"Thames"}"#,
        ));
        let report = harness
            .turn(TurnSpec::new("responses-tools", "how many otters?"))
            .await
            .unwrap();

        let calls = engine.tool_calls();
        assert_eq!(calls.len(), 1, "{threads:?}: {calls:?}");
        assert_eq!(calls[0].arguments, json!({"river": "Thames"}));
        assert_eq!(calls[0].session_key.as_deref(), Some("responses-tools"));

        let requests = mock.response_requests();
        assert_eq!(requests.len(), 2, "{threads:?}");
        assert_eq!(requests[0].body["tools"][0]["type"], "function");
        assert_eq!(requests[0].body["tools"][0]["name"], "count_otters");
        assert_eq!(requests[1].body["tools"], requests[0].body["tools"]);
        let output = &requests[1].input[0];
        assert_eq!(output["type"], "function_call_output");
        assert_eq!(
            output["output"],
            r#"tool count_otters ran with {"river":"Thames"}"#
        );
        assert_eq!(
            report.reply,
            r#"mock reply to tool output: tool count_otters ran with {"river":"Thames"}"#,
            "{threads:?}"
        );
        match threads {
            ResponsesThreads::Chain => {
                assert_eq!(
                    requests[1].previous_response_id, requests[0].response_id,
                    "the follow-up is chained on the response that called the tool"
                );
                assert_eq!(
                    report.thread_id,
                    requests[1].response_id.clone().unwrap(),
                    "the thread continues from the last response"
                );
            }
            ResponsesThreads::Conversation => {
                assert_eq!(requests[1].previous_response_id, None);
                assert_eq!(
                    requests[1].body["conversation"],
                    requests[0].body["conversation"]
                );
                assert_eq!(
                    requests[1].body["conversation"].as_str(),
                    Some(report.thread_id.as_str())
                );
            }
        }
    }
}

/// A model that never stops calling tools ends the turn with a clear error after the bounded
/// number of responses, instead of looping.
#[tokio::test]
async fn responses_stops_a_model_that_keeps_calling_tools() {
    use ctxbridge::backend::responses::MAX_TOOL_ROUNDS;
    let mock = MockModelServer::start(MockModelConfig {
        default_reply: ScriptedReply::tool_call("count_otters", "{}"),
        ..MockModelConfig::stateful()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (harness, engine) = responses_harness(&mock, ResponsesThreads::Chain, &dir);
    let error = harness
        .turn(TurnSpec::new("responses-loop", "count forever"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("still calling tools"), "{error}");
    assert_eq!(mock.response_requests().len(), MAX_TOOL_ROUNDS);
    assert_eq!(engine.tool_calls().len(), MAX_TOOL_ROUNDS - 1);
}
