//! The Responses API backend against a whole model: it runs the shared backend conformance
//! suite (the same checks as the mock and Codex backends) on the loopback mock model server in
//! its stateful (`previous_response_id`) mode, plus chain checks end to end. The wire details —
//! exact request bodies, error mapping, keys — are proved against a scripted server in
//! `backend_responses_wire.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxbridge::backend::responses::{ResponsesBackend, ResponsesBackendConfig};
use ctxbridge::backend::{
    conformance, BackendError, StartThread, ThreadId, ThreadedBackend, TurnRequest,
};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use tokio::sync::mpsc;

async fn setup() -> (ResponsesBackend, MockModelServer) {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let backend = ResponsesBackend::new(ResponsesBackendConfig {
        base_url: mock.base_url(),
        model: "mock-model".into(),
        api_key_env: None,
    })
    .unwrap();
    (backend, mock)
}

/// The Responses backend passes the shared conformance suite on the stateful mock.
#[tokio::test]
async fn responses_backend_conformance() {
    let (backend, _mock) = setup().await;
    conformance::run_all(&backend, ThreadId("resp_does_not_exist".into())).await;
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
