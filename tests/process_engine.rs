//! The engine process protocol adapter (docs/engine-protocol.md#the-engine-process-protocol) against deliberately broken engines
//! (`tests/fixtures/engines/broken_engine.py`): every failure kind maps to the right
//! `EngineError` naming the right method, callbacks round-trip, cancellation reaches the
//! engine, calls of different sessions interleave, unset host params stay off the wire, and
//! the child is reaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctxbridge::contract::*;
use ctxbridge::engines::process::{HostIdentity, ProcessEngine, ProcessEngineConfig};
use ctxbridge::host::capabilities::Capability;
use tokio_util::sync::CancellationToken;

#[path = "support/programs.rs"]
mod programs;

fn python3_available() -> bool {
    programs::program_here("python3", "the process-engine fault tests")
}

fn config(mode: &str) -> ProcessEngineConfig {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines/broken_engine.py");
    let mut config = ProcessEngineConfig::new(
        format!("broken-{mode}"),
        vec![
            "python3".into(),
            script.to_string_lossy().into_owned(),
            mode.into(),
        ],
        HostIdentity {
            id: "test-host".into(),
            label: "the test host".into(),
            capabilities: Capability::ALL.to_vec(),
        },
    )
    .with_call_timeout(Duration::from_secs(10));
    config.init_timeout = Duration::from_secs(10);
    config
}

async fn engine(mode: &str) -> ProcessEngine {
    ProcessEngine::spawn(config(mode)).await.unwrap()
}

fn assemble_params(session: &str) -> AssembleParams {
    AssembleParams {
        session_id: session.into(),
        messages: vec![AgentMessage::user("hello")].into(),
        ..Default::default()
    }
}

fn ingest_params(session: &str) -> IngestParams {
    IngestParams {
        session_id: session.into(),
        message: Some(AgentMessage::user("ping")),
        ..Default::default()
    }
}

/// Host callbacks that answer from fixed data and record what they were asked.
#[derive(Default)]
struct RecordingCallbacks {
    rewrites: Mutex<Vec<TranscriptRewriteRequest>>,
    llm_requests: Mutex<Vec<LlmCompleteRequest>>,
}

#[async_trait]
impl RuntimeCallbacks for RecordingCallbacks {
    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        let count = request.replacements.len() as u64;
        self.rewrites.lock().unwrap().push(request);
        Ok(MaintainResult {
            changed: true,
            bytes_freed: 42,
            rewritten_entries: count,
            reason: Some("host rewrote".into()),
        })
    }

    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        let prompt = request
            .messages
            .first()
            .map(AgentMessage::plain_text)
            .unwrap_or_default();
        let request_model = request.model.clone();
        self.llm_requests.lock().unwrap().push(request);
        Ok(LlmCompleteResult {
            text: format!("LLM: {prompt}"),
            model: request_model,
            ..Default::default()
        })
    }

    async fn delegate_compaction(
        &self,
        params: CompactParams,
    ) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: true,
            compacted: true,
            reason: Some(format!("delegated for {}", params.session_id)),
            result: None,
        })
    }
}

fn runtime_context(callbacks: &Arc<RecordingCallbacks>) -> RuntimeContext {
    RuntimeContext {
        facts: RuntimeFacts::default(),
        callbacks: Some(callbacks.clone() as Arc<dyn RuntimeCallbacks>),
    }
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A child that exits before answering `initialize` fails the spawn with `Process` naming
/// `info`, with its exit status and its last stderr line in the detail.
#[tokio::test]
async fn crash_on_start_is_a_process_failure_of_initialize() {
    if !python3_available() {
        return;
    }
    let err = ProcessEngine::spawn(config("crash_on_start"))
        .await
        .unwrap_err();
    let EngineError::Process { method, detail } = &err else {
        panic!("expected a process failure, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Info);
    assert!(detail.contains("exit status: 3"), "{detail}");
    assert!(detail.contains("refusing to start"), "{detail}");
}

/// A command that cannot be started is a `Process` failure of `info`.
#[tokio::test]
async fn missing_command_is_a_process_failure_of_initialize() {
    let mut config = config("unused");
    config.command = vec!["/nonexistent/ctxbridge-engine".into()];
    let err = ProcessEngine::spawn(config).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Process { method: EngineMethod::Info, detail } if detail.contains("cannot start")),
        "{err:?}"
    );
}

/// An engine that never answers `initialize` fails the spawn with `Process` once the
/// handshake bound passes.
#[tokio::test]
async fn never_answering_initialize_is_a_process_failure() {
    if !python3_available() {
        return;
    }
    let mut config = config("no_initialize");
    config.init_timeout = Duration::from_millis(300);
    let err = ProcessEngine::spawn(config).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Process { method: EngineMethod::Info, detail } if detail.contains("did not answer initialize")),
        "{err:?}"
    );
}

/// A mistyped `info` in the `initialize` answer is `Malformed` naming `info` and the field.
#[tokio::test]
async fn mistyped_initialize_answer_is_malformed() {
    if !python3_available() {
        return;
    }
    let err = ProcessEngine::spawn(config("bad_initialize"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Malformed { method: EngineMethod::Info, detail } if detail.contains("ownsCompaction")),
        "{err:?}"
    );
}

/// The process dying during `assemble` fails that call with `Process` naming `assemble` (exit
/// status in the detail), and every later call with `Process` too.
#[tokio::test]
async fn crash_mid_call_is_a_process_failure_of_that_method() {
    if !python3_available() {
        return;
    }
    let engine = engine("crash_mid_call").await;
    let err = engine.assemble(assemble_params("s1")).await.unwrap_err();
    let EngineError::Process { method, detail } = &err else {
        panic!("expected a process failure, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Assemble);
    assert!(detail.contains("exit status: 7"), "{detail}");
    assert!(detail.contains("dying mid-call"), "{detail}");

    let later = engine.ingest(ingest_params("s1")).await.unwrap_err();
    assert!(
        matches!(
            later,
            EngineError::Process {
                method: EngineMethod::Ingest,
                ..
            }
        ),
        "{later:?}"
    );
}

/// A call that gets no answer within the configured timeout is `Timeout` naming the method,
/// and the engine receives `$/cancelRequest` for that request id.
#[tokio::test]
async fn hang_times_out_and_sends_cancel_request() {
    if !python3_available() {
        return;
    }
    let engine = ProcessEngine::spawn(config("hang").with_call_timeout(Duration::from_millis(300)))
        .await
        .unwrap();
    let err = engine.assemble(assemble_params("s1")).await.unwrap_err();
    assert_eq!(
        err,
        EngineError::Timeout {
            method: EngineMethod::Assemble,
            after: Duration::from_millis(300)
        }
    );
    // The fixture answers ingest with whether the last unanswered request was cancelled.
    let seen = engine.ingest(ingest_params("s1")).await.unwrap();
    assert!(seen.ingested, "the engine did not receive $/cancelRequest");
}

/// A non-JSON line on stdout is a protocol violation: `Process` naming the call in flight.
#[tokio::test]
async fn garbage_on_stdout_is_a_process_failure() {
    if !python3_available() {
        return;
    }
    let engine = engine("garbage").await;
    let err = engine.assemble(assemble_params("s1")).await.unwrap_err();
    let EngineError::Process { method, detail } = &err else {
        panic!("expected a process failure, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Assemble);
    assert!(detail.contains("this is not json"), "{detail}");
    assert!(engine.closed_reason().is_some());
}

/// A result of the wrong shape is `Malformed` naming the method and the offending field.
#[tokio::test]
async fn wrong_result_shape_is_malformed() {
    if !python3_available() {
        return;
    }
    let engine = engine("wrong_shape").await;
    let err = engine.assemble(assemble_params("s1")).await.unwrap_err();
    let EngineError::Malformed { method, detail } = &err else {
        panic!("expected a malformed result, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Assemble);
    assert!(detail.contains("messages"), "{detail}");
    // The engine is still usable: a malformed result is the caller's (quarantine's) business.
    assert!(engine.ingest(ingest_params("s1")).await.unwrap().ingested);
}

/// A JSON-RPC error reply is `Failed` naming the method, carrying the engine's message.
#[tokio::test]
async fn error_reply_is_failed() {
    if !python3_available() {
        return;
    }
    let engine = engine("error_reply").await;
    let err = engine.assemble(assemble_params("s1")).await.unwrap_err();
    let EngineError::Failed { method, message } = &err else {
        panic!("expected a failure, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Assemble);
    assert!(message.contains("engine exploded"), "{message}");
}

/// Engine → host requests made mid-call are served through the `RuntimeCallbacks` of that
/// call: `llmComplete` in assemble, `rewriteTranscriptEntries` in maintain,
/// `delegateCompaction` in compact.
#[tokio::test]
async fn callbacks_round_trip_through_runtime_context() {
    if !python3_available() {
        return;
    }
    let engine = engine("callbacks").await;
    let callbacks = Arc::new(RecordingCallbacks::default());

    let mut params = assemble_params("s1");
    params.runtime_context = Some(runtime_context(&callbacks));
    let assembled = engine.assemble(params).await.unwrap();
    assert_eq!(
        assembled.system_prompt_addition.as_deref(),
        Some("LLM: summarise")
    );
    assert_eq!(
        callbacks.llm_requests.lock().unwrap()[0].max_tokens,
        Some(16)
    );

    let maintained = engine
        .maintain(MaintainParams {
            session_id: "s1".into(),
            session_key: None,
            session_file: None,
            reason: MaintainReason::Turn,
            session_target: None,
            runtime_settings: None,
            runtime_context: Some(runtime_context(&callbacks)),
        })
        .await
        .unwrap();
    assert_eq!(maintained.bytes_freed, 42);
    assert_eq!(maintained.rewritten_entries, 1);
    let rewrites = callbacks.rewrites.lock().unwrap().clone();
    assert_eq!(rewrites[0].replacements[0].entry_id, "e1");
    assert_eq!(
        rewrites[0].allowed_rewrite_suffix_entry_ids,
        Some(vec!["e1".to_string()])
    );

    let compacted = engine
        .compact(CompactParams {
            session_id: "s1".into(),
            force: Some(true),
            runtime_context: Some(runtime_context(&callbacks)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(compacted.reason.as_deref(), Some("delegated for s1"));
}

/// An engine → host request during a call without runtime callbacks gets a JSON-RPC error.
#[tokio::test]
async fn callback_without_runtime_context_is_refused() {
    if !python3_available() {
        return;
    }
    let engine = engine("callbacks").await;
    let assembled = engine.assemble(assemble_params("s1")).await.unwrap();
    let addition = assembled.system_prompt_addition.unwrap();
    assert!(
        addition.starts_with("error: no runtime callbacks"),
        "{addition}"
    );
}

/// Aborting `compact` returns `Cancelled` and sends `$/cancelRequest` to the engine.
#[tokio::test]
async fn compact_abort_cancels_the_request() {
    if !python3_available() {
        return;
    }
    let engine = engine("hang").await;
    let abort = CancellationToken::new();
    let params = CompactParams {
        session_id: "s1".into(),
        force: Some(true),
        abort: Some(abort.clone()),
        ..Default::default()
    };
    // `join!` polls the compact first, which sends the request before the abort fires.
    let (result, ()) = tokio::join!(engine.compact(params), async { abort.cancel() });
    assert_eq!(
        result.unwrap_err(),
        EngineError::Cancelled {
            method: EngineMethod::Compact
        }
    );
    let seen = engine.ingest(ingest_params("s1")).await.unwrap();
    assert!(seen.ingested, "the engine did not receive $/cancelRequest");
}

/// Calls of different sessions are in flight together and answered out of order, matched
/// by id: the fixture holds session "slow" until it has answered session "fast".
#[tokio::test]
async fn concurrent_calls_of_different_sessions_interleave() {
    if !python3_available() {
        return;
    }
    let engine = engine("interleave").await;
    let (slow, fast) = tokio::join!(
        engine.assemble(assemble_params("slow")),
        engine.assemble(assemble_params("fast"))
    );
    assert_eq!(
        slow.unwrap().system_prompt_addition.as_deref(),
        Some("slow")
    );
    assert_eq!(
        fast.unwrap().system_prompt_addition.as_deref(),
        Some("fast")
    );
}

/// Host params the caller did not set (no prompt, no runtimeSettings, no runtimeContext, no
/// sessionKey) are absent from the JSON the engine receives; set ones are present.
#[tokio::test]
async fn unset_host_params_are_absent_from_the_wire() {
    if !python3_available() {
        return;
    }
    let engine = engine("echo_keys").await;
    let bare = engine.assemble(assemble_params("s1")).await.unwrap();
    assert_eq!(
        bare.system_prompt_addition.as_deref(),
        Some(r#"["messages", "sessionId"]"#)
    );

    let mut params = assemble_params("s1");
    params.prompt = Some("hi".into());
    params.session_key = Some("agent:main:s1".into());
    let with_host_keys = engine.assemble(params).await.unwrap();
    assert_eq!(
        with_host_keys.system_prompt_addition.as_deref(),
        Some(r#"["messages", "prompt", "sessionId", "sessionKey"]"#)
    );
}

/// A member the engine did not declare is `NotImplemented` and nothing is sent: the
/// fixture's request counter does not move.
#[tokio::test]
async fn undeclared_method_is_not_sent() {
    if !python3_available() {
        return;
    }
    let engine = engine("echo_keys").await;
    assert!(!engine.methods().contains(EngineMethod::Bootstrap));
    assert!(engine.methods().missing_required().is_empty());
    let first = engine.assemble(assemble_params("s1")).await.unwrap();
    assert_eq!(first.estimated_tokens, 1.0);
    let err = engine
        .bootstrap(BootstrapParams {
            session_id: "s1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::NotImplemented {
            method: EngineMethod::Bootstrap
        }
    );
    let second = engine.assemble(assemble_params("s1")).await.unwrap();
    assert_eq!(second.estimated_tokens, 2.0);
}

/// `info` and `methods` are what the engine declared in `initialize`.
#[tokio::test]
async fn info_and_methods_come_from_initialize() {
    if !python3_available() {
        return;
    }
    let engine = engine("callbacks").await;
    assert_eq!(engine.info().id, "broken-callbacks");
    assert_eq!(engine.info().name, "Broken engine (callbacks)");
    let methods = engine.methods();
    assert!(methods.contains(EngineMethod::Maintain));
    assert!(methods.contains(EngineMethod::Dispose));
    assert!(!methods.contains(EngineMethod::CommitTurn));
}

/// `dispose` reaps the child: no `/proc/<pid>` (not even a zombie) once it returns, and
/// later calls fail with `Process`.
#[tokio::test]
async fn dispose_reaps_the_child() {
    if !python3_available() {
        return;
    }
    let engine = engine("callbacks").await;
    let pid = engine.pid().unwrap();
    assert!(proc_exists(pid));
    engine.dispose().await.unwrap();
    assert!(!proc_exists(pid), "child {pid} still exists after dispose");
    let err = engine.ingest(ingest_params("s1")).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Process { method: EngineMethod::Ingest, detail } if detail.contains("disposed")),
        "{err:?}"
    );
}

/// Dropping the engine kills and reaps the child (polled with a bound; no timing asserted).
#[tokio::test]
async fn drop_kills_and_reaps_the_child() {
    if !python3_available() {
        return;
    }
    let engine = engine("hang").await;
    let pid = engine.pid().unwrap();
    drop(engine);
    let mut gone = false;
    for _ in 0..200 {
        if !proc_exists(pid) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        gone,
        "child {pid} was not reaped after the engine was dropped"
    );
}

fn tool_engine_config(mode: &str) -> ProcessEngineConfig {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines/tool_engine.py");
    let mut config = ProcessEngineConfig::new(
        "tooly",
        vec![
            "python3".into(),
            script.to_string_lossy().into_owned(),
            mode.into(),
        ],
        HostIdentity {
            id: "test-host".into(),
            label: "the test host".into(),
            capabilities: Capability::ALL.to_vec(),
        },
    )
    .with_call_timeout(Duration::from_secs(10));
    config.init_timeout = Duration::from_secs(10);
    config
}

fn tool_call(name: &str, arguments: serde_json::Value) -> ToolCallParams {
    ToolCallParams {
        session_id: "s1".into(),
        session_key: Some("agent:main:s1".into()),
        name: name.into(),
        arguments,
        tool_call_id: Some("call_7".into()),
    }
}

/// The tools, hooks and commands listed in `initialize` are kept; `tools/call` is announced
/// because tools are listed, carries the call's camelCase params, and answers with the
/// tool's content; an `isError` answer is a result, not an error.
#[tokio::test]
async fn tools_come_from_initialize_and_tools_call_reaches_the_engine() {
    if !python3_available() {
        return;
    }
    let engine = ProcessEngine::spawn(tool_engine_config("tools"))
        .await
        .unwrap();
    let tools = engine.tools();
    assert_eq!(tools.len(), 10);
    assert_eq!(tools[0].name, "echo");
    assert_eq!(tools[0].description, "the echo tool");
    assert_eq!(tools[0].parameters["properties"]["q"]["type"], "string");
    assert!(engine.methods().contains(EngineMethod::CallTool));
    assert_eq!(engine.hooks(), ["gateway_start", "before_prompt_build"]);
    assert_eq!(engine.commands()[0].name, "summary");

    let echoed = engine
        .call_tool(tool_call("echo", serde_json::json!({"q": "x"})))
        .await
        .unwrap();
    assert!(!echoed.is_error);
    let seen: serde_json::Value = serde_json::from_str(&echoed.text()).unwrap();
    assert_eq!(
        seen,
        serde_json::json!({
            "sessionId": "s1",
            "sessionKey": "agent:main:s1",
            "name": "echo",
            "arguments": {"q": "x"},
            "toolCallId": "call_7",
        })
    );
    let soft = engine
        .call_tool(tool_call("soft_fail", serde_json::json!({})))
        .await
        .unwrap();
    assert!(soft.is_error);
    assert_eq!(soft.text(), "no such record");
    engine.dispose().await.unwrap();
}

/// `tools/call` failures map like every other method's: a JSON-RPC error is `Failed`, a
/// result of the wrong shape `Malformed`, no answer `Timeout`, a crash `Process` — each
/// naming `tools/call`.
#[tokio::test]
async fn tools_call_failures_map_to_engine_errors() {
    if !python3_available() {
        return;
    }
    let mut config = tool_engine_config("tools");
    config.call_timeout = Duration::from_millis(500);
    let engine = ProcessEngine::spawn(config).await.unwrap();
    let method = EngineMethod::CallTool;
    let err = engine
        .call_tool(tool_call("explode", serde_json::json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Failed { method: m, message } if *m == method && message.contains("tool exploded")),
        "{err:?}"
    );
    let err = engine
        .call_tool(tool_call("malformed", serde_json::json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Malformed { method: m, detail } if *m == method && detail.contains("content")),
        "{err:?}"
    );
    let err = engine
        .call_tool(tool_call("hang", serde_json::json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Timeout { method: m, .. } if *m == method),
        "{err:?}"
    );
    let err = engine
        .call_tool(tool_call("crash", serde_json::json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Process { method: m, detail } if *m == method && detail.contains("exit status: 9")),
        "{err:?}"
    );
}

/// An engine that lists no tools does not announce `tools/call` (even if its `methods` names
/// it) and nothing is sent; a `tools` field of the wrong type fails the handshake as
/// `Malformed` naming `tools`.
#[tokio::test]
async fn engines_without_tools_have_no_tools_call() {
    if !python3_available() {
        return;
    }
    let engine = ProcessEngine::spawn(tool_engine_config("no_tools"))
        .await
        .unwrap();
    assert!(engine.tools().is_empty());
    assert!(!engine.methods().contains(EngineMethod::CallTool));
    let err = engine
        .call_tool(tool_call("echo", serde_json::json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::NotImplemented {
            method: EngineMethod::CallTool
        }
    );
    let err = ProcessEngine::spawn(tool_engine_config("bad_tools"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Malformed { method: EngineMethod::Info, detail } if detail.contains("`tools`")),
        "{err:?}"
    );
}

/// Through the quarantine wrapper, a crashing tool quarantines the process engine and the
/// caller gets an `isError` result for the model; the tools are gone afterwards.
#[tokio::test]
async fn quarantined_process_engine_answers_tool_calls_with_error_results() {
    if !python3_available() {
        return;
    }
    use ctxbridge::quarantine::{CallTimeouts, FailedOperation, QuarantineBook, QuarantineEngine};
    let engine = ProcessEngine::spawn(tool_engine_config("tools"))
        .await
        .unwrap();
    let book = Arc::new(QuarantineBook::new());
    let guarded = QuarantineEngine::new(
        "tooly",
        Arc::new(engine),
        Arc::clone(&book),
        CallTimeouts::uniform(Duration::from_secs(10)),
    );
    assert_eq!(guarded.tools().len(), 10);
    let answer = guarded
        .call_tool(tool_call("explode", serde_json::json!({})))
        .await
        .unwrap();
    assert!(answer.is_error);
    assert!(answer.text().contains("tool exploded"), "{}", answer.text());
    let record = book.get("tooly").unwrap();
    assert_eq!(
        record.operation,
        FailedOperation::Method(EngineMethod::CallTool)
    );
    assert!(guarded.tools().is_empty());
    guarded.release().await;
}

/// `runtime/llmComplete` made from a tool (no lifecycle call offers callbacks) is served by
/// the engine's host callbacks, with `systemPrompt`, `model`, `purpose` and `maxTokens` as
/// the engine sent them, and the result's model reaches the engine.
#[tokio::test]
async fn llm_complete_from_a_tool_is_served_by_host_callbacks() {
    if !python3_available() {
        return;
    }
    let engine = ProcessEngine::spawn(tool_engine_config("tools"))
        .await
        .unwrap();
    // Without host callbacks the request is refused and the tool reports it.
    let refused = engine
        .call_tool(tool_call("llm", serde_json::json!({})))
        .await
        .unwrap();
    assert!(refused.is_error);
    assert!(
        refused.text().contains("no runtime callbacks"),
        "{}",
        refused.text()
    );

    let callbacks = Arc::new(RecordingCallbacks::default());
    engine.set_host_callbacks(callbacks.clone());
    let answer = engine
        .call_tool(tool_call("llm", serde_json::json!({})))
        .await
        .unwrap();
    assert!(!answer.is_error, "{}", answer.text());
    assert_eq!(answer.text(), "LLM: hello");
    let requests = callbacks.llm_requests.lock().unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].system_prompt.as_deref(), Some("be brief"));
    assert_eq!(requests[0].model.as_deref(), Some("tiny"));
    assert_eq!(requests[0].purpose.as_deref(), Some("tool test"));
    assert_eq!(requests[0].max_tokens, Some(5));
}

/// `initialize` carries `stateDir`, `openclawConfig` and `model`, and the child gets
/// `OPENCLAW_STATE_DIR`; a `-32010` answer to `initialize` is a configuration error naming
/// the key.
#[tokio::test]
async fn initialize_carries_state_dir_config_and_model() {
    if !python3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = tool_engine_config("tools");
    config.state_dir = Some(dir.path().join("engines/tooly"));
    config.openclaw_config =
        Some(serde_json::json!({"plugins": {"slots": {"contextEngine": "tooly"}}}));
    config.model = Some("gpt-test".into());
    let engine = ProcessEngine::spawn(config).await.unwrap();
    let seen = engine
        .call_tool(tool_call("init_params", serde_json::json!({})))
        .await
        .unwrap();
    let params: serde_json::Value = serde_json::from_str(&seen.text()).unwrap();
    let state_dir = dir.path().join("engines/tooly").display().to_string();
    assert_eq!(params["stateDir"], state_dir.as_str());
    assert_eq!(
        params["openclawConfig"]["plugins"]["slots"]["contextEngine"],
        "tooly"
    );
    assert_eq!(params["model"], "gpt-test");
    let env = engine
        .call_tool(tool_call("env", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(env.text(), state_dir);

    let err = ProcessEngine::spawn(tool_engine_config("config_error"))
        .await
        .unwrap_err();
    let EngineError::InvalidConfig {
        method,
        issues,
        message,
    } = &err
    else {
        panic!("expected a configuration error, got {err:?}");
    };
    assert_eq!(*method, EngineMethod::Info);
    assert_eq!(issues[0].key, "keepRecent");
    assert!(
        message.contains("plugins.entries.tooly.config"),
        "{message}"
    );
}

/// Hooks the engine listed are announced (`hooks`), sent as `hooks/<name>` requests (the
/// `before_prompt_build` answer comes back) or notifications, with their event and ctx; a hook
/// the engine did not list is not sent.
#[tokio::test]
async fn hooks_are_sent_as_requests_and_notifications() {
    if !python3_available() {
        return;
    }
    let engine = ProcessEngine::spawn(tool_engine_config("tools"))
        .await
        .unwrap();
    assert!(engine.methods().contains(EngineMethod::Hook));
    engine
        .notify_hook(
            HOOK_GATEWAY_START,
            HookCall {
                event: serde_json::json!({"port": null}),
                ctx: serde_json::Value::Null,
            },
        )
        .await
        .unwrap();
    let answer = engine
        .call_hook(
            HOOK_BEFORE_PROMPT_BUILD,
            HookCall {
                event: serde_json::json!({"prompt": "hi", "messages": []}),
                ctx: serde_json::json!({"sessionId": "s1"}),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"prependContext": "hook context"})
    );
    let unlisted = engine
        .call_hook("session_end", HookCall::default())
        .await
        .unwrap_err();
    assert_eq!(
        unlisted,
        EngineError::NotImplemented {
            method: EngineMethod::Hook
        }
    );
    let seen = engine
        .call_tool(tool_call("hooks_seen", serde_json::json!({})))
        .await
        .unwrap();
    let seen: serde_json::Value = serde_json::from_str(&seen.text()).unwrap();
    assert_eq!(seen[0]["name"], "gateway_start");
    assert_eq!(seen[0]["request"], false);
    assert_eq!(seen[1]["name"], "before_prompt_build");
    assert_eq!(seen[1]["request"], true);
    assert_eq!(seen[1]["params"]["event"]["prompt"], "hi");
    assert_eq!(seen[1]["params"]["ctx"]["sessionId"], "s1");
    assert_eq!(seen.as_array().unwrap().len(), 2);
}
