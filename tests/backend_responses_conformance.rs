//! The Responses API backend against a whole model: it runs the shared backend conformance
//! suite (the same checks as the mock and Codex backends) on the loopback mock model server in
//! its stateful mode, on both thread kinds (previous_response_id chains and conversations), plus
//! chain- and conversation-specific checks end to end. The wire details — exact request bodies,
//! error mapping, keys — are proved against a scripted server in `backend_responses_wire.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxbridge::backend::responses::{ResponsesBackend, ResponsesBackendConfig, ResponsesThreads};
use ctxbridge::backend::{
    conformance, BackendError, ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnRequest,
};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use tokio::sync::mpsc;

async fn setup_with(threads: ResponsesThreads) -> (ResponsesBackend, MockModelServer) {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let backend = ResponsesBackend::new(ResponsesBackendConfig {
        threads,
        ..ResponsesBackendConfig::new(mock.base_url(), "mock-model")
    })
    .unwrap();
    (backend, mock)
}

async fn setup() -> (ResponsesBackend, MockModelServer) {
    setup_with(ResponsesThreads::Chain).await
}

/// The Responses backend on chain threads passes the shared conformance suite on the stateful
/// mock.
#[tokio::test]
async fn responses_backend_conformance() {
    let (backend, _mock) = setup().await;
    conformance::run_all(&backend, ThreadId("resp_does_not_exist".into())).await;
}

/// The Responses backend on conversation threads passes the shared conformance suite on the
/// stateful mock.
#[tokio::test]
async fn responses_backend_conformance_on_conversations() {
    let (backend, _mock) = setup_with(ResponsesThreads::Conversation).await;
    assert!(!backend.thread_id_advances_per_turn());
    conformance::run_all(&backend, ThreadId("conv_does_not_exist".into())).await;
}

/// Conversation threads: start_thread creates a conversation whose id is the thread id; every
/// request names it (never a previous response), carries the instructions and only the new
/// input; the thread id stays the same; resume retrieves the conversation; once it is deleted,
/// resume and the next turn are `ThreadNotFound`.
#[tokio::test]
async fn conversation_requests_and_deletion() {
    let (backend, mock) = setup_with(ResponsesThreads::Conversation).await;
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    assert!(mock.has_conversation(thread.as_str()), "{thread}");
    let (tx, _rx) = mpsc::channel(256);
    let req = |t: &ThreadId, input: &str| TurnRequest {
        thread_id: t.clone(),
        input: input.into(),
        developer_instructions: Some("dev instructions".into()),
        base_instructions: None,
        tools: Default::default(),
        additional_context: None,
    };
    let first = backend
        .run_turn(req(&thread, "one"), tx.clone())
        .await
        .unwrap();
    assert_eq!(first.thread_id, thread);
    let second = backend
        .run_turn(req(&thread, "two"), tx.clone())
        .await
        .unwrap();
    assert_eq!(second.thread_id, thread);
    assert_eq!(second.reply, "mock reply to: two");
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.instructions.as_deref(), Some("dev instructions"));
        assert_eq!(r.conversation_id.as_deref(), Some(thread.as_str()));
        assert_eq!(r.previous_response_id, None);
    }
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["two".to_string()],
        "no history with a conversation"
    );
    assert_eq!(
        requests[1].conversation_texts("user"),
        vec!["one".to_string(), "two".to_string()],
        "the server holds the history"
    );
    backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap();

    assert!(mock.delete_conversation(thread.as_str()));
    let err = backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{err:?}"
    );
    let err = backend
        .run_turn(req(&thread, "three"), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{err:?}"
    );
    assert!(
        matches!(
            backend.compact_thread(&thread).await,
            Err(BackendError::Unsupported { .. })
        ),
        "no native compaction on conversations"
    );
}

/// Every request carries the instructions; a continued chain sends only the new input with
/// `previous_response_id`; an expired chain is `ThreadNotFound`.
#[tokio::test]
async fn chain_requests_and_expiry() {
    let (backend, mock) = setup().await;
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(256);
    let req = |t: &ThreadId, input: &str| TurnRequest {
        thread_id: t.clone(),
        input: input.into(),
        developer_instructions: Some("dev instructions".into()),
        base_instructions: None,
        tools: Default::default(),
        additional_context: None,
    };
    let first = backend
        .run_turn(req(&thread, "one"), tx.clone())
        .await
        .unwrap();
    let second = backend
        .run_turn(req(&first.thread_id, "two"), tx.clone())
        .await
        .unwrap();
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.instructions.as_deref(), Some("dev instructions"));
    }
    assert_eq!(requests[0].previous_response_id, None);
    assert_eq!(
        requests[1].previous_response_id.as_deref(),
        Some(first.thread_id.as_str())
    );
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["two".to_string()],
        "no history with a chain id"
    );
    mock.expire_all();
    let err = backend
        .run_turn(req(&second.thread_id, "three"), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{err:?}"
    );
}
