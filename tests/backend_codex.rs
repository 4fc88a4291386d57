//! The Codex app-server backend runs the shared backend conformance suite against the real
//! `codex app-server` (npm `@openai/codex`, pinned in package.json), offline against the
//! loopback mock model server. Skips loudly only when the binary is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::backend::codex::{CodexBackend, CodexBackendConfig};
use ctxbridge::backend::{
    conformance, BackendError, StartThread, ThreadId, ThreadedBackend, TurnRequest,
};
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
    let backend = CodexBackend::new(CodexBackendConfig {
        command: vec![binary.display().to_string(), "app-server".into()],
        codex_home: dir.path().join("codex-home"),
        overrides: offline_overrides(&mock.base_url()),
        cwd: Some(dir.path().to_path_buf()),
        env: Vec::new(),
        turn_limits: Default::default(),
    });
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
        additional_context: None,
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
