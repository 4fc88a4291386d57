//! The shared backend conformance suite (in the manner of object_store's `integration.rs`):
//! every [`ThreadedBackend`] — the in-process mock, the Codex app-server, the Responses API —
//! runs these same checks against itself from its own test file.
//!
//! Each check panics with a message naming the backend and what it did wrong; they are meant to
//! be called from `#[tokio::test]`s.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tokio::sync::mpsc;

use super::{
    BackendError, ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnOutcome,
    TurnRequest,
};
use crate::host::capabilities::Capability;

async fn turn(
    backend: &dyn ThreadedBackend,
    thread: &ThreadId,
    input: &str,
    developer_instructions: Option<&str>,
) -> (Result<TurnOutcome, BackendError>, Vec<TurnEvent>) {
    let (tx, mut rx) = mpsc::channel(1024);
    let outcome = backend
        .run_turn(
            TurnRequest {
                thread_id: thread.clone(),
                input: input.to_string(),
                developer_instructions: developer_instructions.map(str::to_string),
                base_instructions: None,
                tools: Default::default(),
                additional_context: None,
                options: Default::default(),
            },
            tx,
        )
        .await;
    let mut events = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        events.push(ev);
    }
    (outcome, events)
}

/// A new thread answers a turn; the streamed deltas add up to the reply.
pub async fn start_and_turn(backend: &dyn ThreadedBackend) -> ThreadId {
    let label = backend.label().to_string();
    let thread = backend
        .start_thread(StartThread {
            base_instructions: Some("You are a test assistant.".into()),
            developer_instructions: Some("conformance developer instructions".into()),
            model: None,
            tools: Vec::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("{label}: start_thread failed: {e}"));
    let (outcome, events) = turn(
        backend,
        &thread,
        "hello from the conformance suite",
        Some("conformance developer instructions"),
    )
    .await;
    let outcome = outcome.unwrap_or_else(|e| panic!("{label}: first turn failed: {e}"));
    assert!(!outcome.reply.is_empty(), "{label}: empty reply");
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::TextDelta(d) => Some(d.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        streamed, outcome.reply,
        "{label}: deltas do not add up to the reply"
    );
    outcome.thread_id
}

/// A second turn continues the same thread.
pub async fn continue_thread(backend: &dyn ThreadedBackend) {
    let label = backend.label().to_string();
    let thread = start_and_turn(backend).await;
    let (outcome, _) = turn(
        backend,
        &thread,
        "second message",
        Some("conformance developer instructions"),
    )
    .await;
    let outcome = outcome.unwrap_or_else(|e| panic!("{label}: second turn failed: {e}"));
    assert!(!outcome.reply.is_empty(), "{label}: empty second reply");
    if !backend.thread_id_advances_per_turn() {
        assert_eq!(
            outcome.thread_id, thread,
            "{label}: thread id changed on a thread backend"
        );
    } else {
        assert_ne!(
            outcome.thread_id, thread,
            "{label}: a chain must advance to the new response id"
        );
    }
}

/// A thread the backend never had fails as `ThreadNotFound`, at resume or at the turn.
pub async fn unknown_thread_is_not_found(backend: &dyn ThreadedBackend, unknown: ThreadId) {
    let label = backend.label().to_string();
    let err = match backend
        .resume_thread(&unknown, &ResumeThread::default())
        .await
    {
        Err(e) => e,
        Ok(()) => match turn(backend, &unknown, "anyone there?", None).await.0 {
            Err(e) => e,
            Ok(_) => panic!("{label}: a turn on unknown thread {unknown} succeeded"),
        },
    };
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{label}: unknown thread gave {err:?}, not ThreadNotFound"
    );
}

/// An existing thread can be resumed and continued.
pub async fn resume_existing(backend: &dyn ThreadedBackend) {
    let label = backend.label().to_string();
    let thread = start_and_turn(backend).await;
    backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap_or_else(|e| panic!("{label}: resume of a live thread failed: {e}"));
    let (outcome, _) = turn(backend, &thread, "after resume", None).await;
    outcome.unwrap_or_else(|e| panic!("{label}: turn after resume failed: {e}"));
}

/// A developer message can be delivered to an existing thread, and the thread keeps working.
pub async fn inject_developer_message(backend: &dyn ThreadedBackend) {
    let label = backend.label().to_string();
    let thread = start_and_turn(backend).await;
    match backend
        .inject_developer_message(&thread, "injected developer note")
        .await
    {
        Ok(()) | Err(BackendError::Unsupported { .. }) => {}
        Err(e) => panic!("{label}: inject failed: {e}"),
    }
    let (outcome, _) = turn(backend, &thread, "after inject", None).await;
    outcome.unwrap_or_else(|e| panic!("{label}: turn after inject failed: {e}"));
}

/// Manual native compaction either works (and the thread keeps working) or is reported as
/// unsupported — never another error.
pub async fn native_compaction(backend: &dyn ThreadedBackend) {
    let label = backend.label().to_string();
    let thread = start_and_turn(backend).await;
    let thread = match backend.compact_thread(&thread).await {
        Ok(c) => c.thread_id.unwrap_or(thread),
        Err(BackendError::Unsupported { .. }) => return,
        Err(e) => panic!("{label}: compaction failed: {e}"),
    };
    let (outcome, _) = turn(backend, &thread, "after compaction", None).await;
    outcome.unwrap_or_else(|e| panic!("{label}: turn after compaction failed: {e}"));
}

/// The backend advertises the capabilities a threaded backend must have for projection.
pub fn capabilities(backend: &dyn ThreadedBackend) {
    let caps = backend.capabilities();
    for needed in [
        Capability::AssembleBeforePrompt,
        Capability::ThreadBootstrapProjection,
    ] {
        assert!(
            caps.contains(&needed),
            "{}: missing capability {needed}",
            backend.label()
        );
    }
    assert!(backend.turn_input_limit() > 0);
}

/// Runs every check.
pub async fn run_all(backend: &dyn ThreadedBackend, unknown: ThreadId) {
    capabilities(backend);
    start_and_turn(backend).await;
    continue_thread(backend).await;
    unknown_thread_is_not_found(backend, unknown).await;
    resume_existing(backend).await;
    inject_developer_message(backend).await;
    native_compaction(backend).await;
}
