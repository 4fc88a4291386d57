//! The in-process mock backend runs the shared backend conformance suite, plus checks of its
//! own test knobs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ctxbridge::backend::conformance;
use ctxbridge::backend::mock::{MockCall, MockFault};
use ctxbridge::backend::{
    BackendError, BackendProfile, MockBackend, ResumeThread, StartThread, ThreadId,
    ThreadedBackend, TurnEvent, TurnRequest, CODEX_TURN_INPUT_LIMIT_CHARS,
};
use ctxbridge::host::capabilities::Capability;
use ctxbridge::store::SqliteStore;
use tokio::sync::mpsc;

/// The mock passes the shared conformance suite.
#[tokio::test]
async fn mock_backend_conformance() {
    let backend = MockBackend::new();
    conformance::run_all(&backend, ThreadId("mock-thread-unknown".into())).await;
}

/// The mock models the Codex app-server: it declares the Codex profile (the 1 048 576-char
/// turn-input limit, native compaction, instructions fixed at thread start, every capability),
/// and the port's accessors read that profile.
#[test]
fn mock_declares_the_codex_profile() {
    let backend = MockBackend::new();
    assert_eq!(backend.profile(), BackendProfile::CODEX);
    assert_eq!(backend.turn_input_limit(), 1_048_576);
    assert_eq!(backend.turn_input_limit(), CODEX_TURN_INPUT_LIMIT_CHARS);
    assert!(backend.has_native_auto_compaction());
    assert!(!backend.sends_instructions_per_request());
    assert_eq!(backend.capabilities(), Capability::ALL.to_vec());
}

fn req(thread: &ThreadId, input: &str) -> TurnRequest {
    TurnRequest {
        thread_id: thread.clone(),
        input: input.into(),
        developer_instructions: None,
        base_instructions: None,
        tools: Default::default(),
        additional_context: None,
        options: Default::default(),
    }
}

/// With a store, threads survive a new backend instance (a restart of ctxbridge) once resumed;
/// without a resume the restarted backend does not know the thread, as Codex would not.
#[tokio::test]
async fn persisted_threads_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
    let first = MockBackend::with_store(store.clone());
    let thread = first.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(64);
    first
        .run_turn(req(&thread, "one"), tx.clone())
        .await
        .unwrap();

    let second = MockBackend::with_store(store);
    let err = second
        .run_turn(req(&thread, "two"), tx.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::ThreadNotFound { .. }));
    second
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap();
    second.run_turn(req(&thread, "two"), tx).await.unwrap();
    let t = second.thread(thread.as_str()).unwrap();
    assert_eq!(t.turns, 2);
    assert_eq!(t.items.len(), 4, "history of both turns: {:?}", t.items);
}

/// Scripted faults: overflow, failure, native auto-compaction, a lost thread.
#[tokio::test]
async fn scripted_faults() {
    let b = MockBackend::new();
    let thread = b.start_thread(StartThread::default()).await.unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    b.push_fault(MockFault::Overflow);
    b.push_fault(MockFault::Fail("model exploded".into()));
    b.push_fault(MockFault::AutoCompact("summary of the past".into()));
    assert!(matches!(
        b.run_turn(req(&thread, "a"), tx.clone()).await,
        Err(BackendError::ContextOverflow { .. })
    ));
    let err = b.run_turn(req(&thread, "b"), tx.clone()).await.unwrap_err();
    assert!(err.to_string().contains("model exploded"));
    let ok = b.run_turn(req(&thread, "c"), tx.clone()).await.unwrap();
    assert_eq!(
        ok.auto_compaction.unwrap().summary.as_deref(),
        Some("summary of the past")
    );
    let mut saw_compacted = false;
    while let Ok(ev) = rx.try_recv() {
        saw_compacted |= matches!(ev, TurnEvent::Compacted { .. });
    }
    assert!(saw_compacted);
    b.lose_thread(thread.as_str());
    assert!(matches!(
        b.run_turn(req(&thread, "d"), tx).await,
        Err(BackendError::ThreadNotFound { .. })
    ));
}

/// A context window makes a growing thread overflow, and model-request characters count the
/// whole history each turn (the Codex request shape).
#[tokio::test]
async fn context_window_and_request_accounting() {
    let b = MockBackend::new().with_context_window(200);
    let thread = b.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(64);
    let input = "x".repeat(40);
    let r1 = b.run_turn(req(&thread, &input), tx.clone()).await.unwrap();
    let first = b.model_request_chars();
    assert_eq!(first, 40);
    b.run_turn(req(&thread, &input), tx.clone()).await.unwrap();
    assert_eq!(
        b.model_request_chars(),
        first + 40 + r1.reply.chars().count() + 40
    );
    let mut overflowed = false;
    for _ in 0..10 {
        if let Err(BackendError::ContextOverflow { .. }) =
            b.run_turn(req(&thread, &input), tx.clone()).await
        {
            overflowed = true;
            break;
        }
    }
    assert!(overflowed);
    assert!(b.calls().iter().any(|c| matches!(c, MockCall::Turn { .. })));
}
