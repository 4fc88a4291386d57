//! The Codex app-server backend runs the shared backend conformance suite against the real
//! `codex app-server` (npm `@openai/codex`, pinned in package.json), offline against the
//! loopback mock model server. Skips loudly only when the binary is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use codex_app_server_client::{
    locate_codex_binary, offline_overrides, AppServerConfig, TurnLimits,
};
use ctxbridge::backend::codex::CodexBackend;
use ctxbridge::backend::{
    conformance, BackendError, StartThread, ThreadId, ThreadedBackend, TurnRequest,
};
use ctxbridge::serve::{self, HubConnect, ListenAddr, ServeOptions};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use tokio::sync::mpsc;

async fn setup(test: &str) -> Option<(CodexBackend, MockModelServer, tempfile::TempDir)> {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED {test}: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend = CodexBackend::new(
        AppServerConfig::new(dir.path().join("codex-home"))
            .with_command(vec![binary.display().to_string(), "app-server".into()])
            .with_overrides(offline_overrides(&mock.base_url()))
            .with_cwd(dir.path().to_path_buf()),
    );
    Some((backend, mock, dir))
}

/// The real Codex app-server passes the shared conformance suite.
#[tokio::test]
async fn codex_backend_conformance() {
    let Some((backend, _mock, _dir)) = setup("codex_backend_conformance").await else {
        return;
    };
    conformance::run_all(
        &backend,
        ThreadId("019a0000-0000-7000-8000-000000000000".into()),
    )
    .await;
    backend.shutdown().await;
}

/// The served path is the fourth implementation of the port: the one Codex backend on
/// `ctxbridge serve`'s shared upstream — requests through the hub, threads loaded as the hub
/// knows them, no child of its own — passes the same suite against the real Codex.
#[tokio::test]
async fn codex_backend_conformance_on_the_served_path() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED codex_backend_conformance_on_the_served_path: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let upstream = AppServerConfig::new(dir.path().join("codex-home"))
        .with_command([binary.display().to_string(), "app-server".into()])
        .with_overrides(offline_overrides(&mock.base_url()))
        .with_cwd(dir.path());
    let options = ServeOptions::new(ListenAddr::parse("ws://127.0.0.1:0").unwrap(), upstream);
    let backend = CodexBackend::over(
        Arc::new(HubConnect::new(
            options.upstream_handle(),
            TurnLimits::default(),
        )),
        "the Codex app-server behind ctxbridge serve",
    );
    let handle = serve::start(options).await.unwrap();
    conformance::run_all(
        &backend,
        ThreadId("019a0000-0000-7000-8000-000000000000".into()),
    )
    .await;
    // The backend never owned the upstream: the server still answers after it let go.
    backend.shutdown().await;
    assert!(
        backend.codex_version().await.unwrap().is_some(),
        "the served upstream went away with the backend"
    );
    handle.shutdown().await;
}

/// A child that dies mid-session fails the turn with a clear error; the next turn spawns a new
/// child, resumes the thread and continues it (the model sees the old history).
#[tokio::test]
async fn codex_backend_restarts_and_resumes() {
    let Some((backend, mock, _dir)) = setup("codex_backend_restarts_and_resumes").await else {
        return;
    };
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(256);
    let req = |input: &str| TurnRequest {
        thread_id: thread.clone(),
        input: input.into(),
        developer_instructions: None,
        base_instructions: None,
        tools: Default::default(),
        additional_context: None,
        options: Default::default(),
    };
    backend
        .run_turn(req("remember the word pelican"), tx.clone())
        .await
        .unwrap();
    let first_pid = backend.child_pid().await.unwrap();
    backend.kill_child().await;
    // The dead child is noticed; the call after it restarts the app-server.
    let outcome = backend
        .run_turn(req("what was the word?"), tx.clone())
        .await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(BackendError::Unavailable { .. }) => backend
            .run_turn(req("what was the word?"), tx)
            .await
            .unwrap(),
        Err(e) => panic!("unexpected error after kill: {e}"),
    };
    assert!(!outcome.reply.is_empty());
    assert_ne!(backend.child_pid().await.unwrap(), first_pid);
    let last = mock.response_requests().last().cloned().unwrap();
    assert!(
        last.body_contains("remember the word pelican"),
        "the resumed thread must carry the old history"
    );
    backend.shutdown().await;
}

/// Records every tool call and answers with a fixed text.
struct RecordingTools {
    calls: std::sync::Mutex<Vec<ctxbridge::backend::ToolInvocation>>,
}

#[async_trait::async_trait]
impl ctxbridge::backend::ToolExecutor for RecordingTools {
    async fn call(
        &self,
        invocation: ctxbridge::backend::ToolInvocation,
    ) -> ctxbridge::backend::ToolOutput {
        self.calls.lock().unwrap().push(invocation);
        ctxbridge::backend::ToolOutput::text("the otter count is 42")
    }
}

/// Tools offered at thread start reach the model as function tools (`dynamicTools`); when the
/// model calls one, Codex asks ctxbridge (`item/tool/call`), the turn's executor runs it with
/// the model's arguments, and the next model request carries the tool's output.
#[tokio::test]
async fn codex_backend_runs_dynamic_tools_for_the_model() {
    use ctxbridge::backend::{ToolSpec, TurnTools};
    use ctxbridge_mock_model::ScriptedReply;
    use std::sync::Arc;
    let Some((backend, mock, _dir)) = setup("codex_backend_runs_dynamic_tools_for_the_model").await
    else {
        return;
    };
    let spec = ToolSpec {
        name: "count_otters".into(),
        description: "Counts the otters in a river.".into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"river": {"type": "string"}},
            "required": ["river"],
            "additionalProperties": false
        }),
    };
    let thread = backend
        .start_thread(StartThread {
            tools: vec![spec.clone()],
            ..StartThread::default()
        })
        .await
        .unwrap();
    mock.push_reply(ScriptedReply::tool_call(
        "count_otters",
        r#"{"river":"Thames"}"#,
    ));
    let executor = Arc::new(RecordingTools {
        calls: std::sync::Mutex::new(Vec::new()),
    });
    let (tx, _rx) = mpsc::channel(256);
    let outcome = backend
        .run_turn(
            TurnRequest {
                thread_id: thread.clone(),
                input: "how many otters are in the Thames?".into(),
                developer_instructions: None,
                base_instructions: None,
                tools: TurnTools::new(vec![spec], executor.clone()),
                additional_context: None,
                options: Default::default(),
            },
            tx,
        )
        .await
        .unwrap();
    let calls = executor.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "the tool ran once: {calls:?}");
    assert_eq!(calls[0].name, "count_otters");
    assert_eq!(calls[0].arguments, serde_json::json!({"river": "Thames"}));
    let requests = mock.response_requests();
    assert!(
        requests[0].body_contains("count_otters") && requests[0].body_contains("Counts the otters"),
        "the first model request offers the tool"
    );
    let follow_up = requests.last().unwrap();
    assert!(
        follow_up.body_contains("function_call_output")
            && follow_up.body_contains("the otter count is 42"),
        "the model received the tool output: {}",
        follow_up.body
    );
    assert!(
        outcome.reply.contains("the otter count is 42"),
        "reply: {}",
        outcome.reply
    );
    backend.shutdown().await;
}

/// A thread's dynamic tools survive an app-server restart: after the child died and the thread
/// was resumed by a new one (`thread/resume` has no `dynamicTools`), the model can still call
/// the tool and the turn's executor runs it.
#[tokio::test]
async fn codex_backend_keeps_dynamic_tools_across_a_restart() {
    use ctxbridge::backend::{ToolSpec, TurnTools};
    use ctxbridge_mock_model::ScriptedReply;
    use std::sync::Arc;
    let Some((backend, mock, _dir)) =
        setup("codex_backend_keeps_dynamic_tools_across_a_restart").await
    else {
        return;
    };
    let spec = ToolSpec {
        name: "count_otters".into(),
        description: "Counts the otters in a river.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"river": {"type": "string"}}}),
    };
    let thread = backend
        .start_thread(StartThread {
            tools: vec![spec.clone()],
            ..StartThread::default()
        })
        .await
        .unwrap();
    let executor = Arc::new(RecordingTools {
        calls: std::sync::Mutex::new(Vec::new()),
    });
    let request = |input: &str| TurnRequest {
        thread_id: thread.clone(),
        input: input.into(),
        developer_instructions: None,
        base_instructions: None,
        tools: TurnTools::new(vec![spec.clone()], executor.clone()),
        additional_context: None,
        options: Default::default(),
    };
    let (tx, _rx) = mpsc::channel(256);
    backend
        .run_turn(request("hello"), tx.clone())
        .await
        .unwrap();
    let first_pid = backend.child_pid().await;
    backend.kill_child().await;
    mock.push_reply(ScriptedReply::tool_call(
        "count_otters",
        r#"{"river":"Severn"}"#,
    ));
    let outcome = backend
        .run_turn(request("how many otters in the Severn?"), tx)
        .await
        .unwrap();
    assert_ne!(
        backend.child_pid().await,
        first_pid,
        "a new child serves the thread"
    );
    let calls = executor.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].arguments, serde_json::json!({"river": "Severn"}));
    assert!(
        outcome.reply.contains("the otter count is 42"),
        "{}",
        outcome.reply
    );
    backend.shutdown().await;
}
