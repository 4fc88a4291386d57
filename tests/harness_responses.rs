//! The harness on the Responses API backend (against the stateful loopback mock model server):
//! an expired chain (`previous_response_not_found`) drops the chain, re-projects on a new chain,
//! retries once and rewrites the binding; a deleted conversation is handled the same way on a
//! new conversation; instructions (with the engine's addition) go with every request; a reused
//! thread never resends history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ctxbridge::backend::responses::{ResponsesBackend, ResponsesBackendConfig, ResponsesThreads};
use ctxbridge::contract::ProjectionMode;
use ctxbridge::engines::sample::{SampleEngineConfig, SampleSummaryEngine, SAMPLE_ENGINE_ID};
use ctxbridge::harness::{Harness, HarnessConfig, TurnSpec};
use ctxbridge::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use ctxbridge::store::SqliteStore;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};

/// A harness on the Responses backend with these threads, against a stateful mock, running
/// the sample summary engine in thread-bootstrap projection.
async fn responses_harness(threads: ResponsesThreads) -> (Harness, MockModelServer) {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let backend = Arc::new(
        ResponsesBackend::new(ResponsesBackendConfig {
            threads,
            ..ResponsesBackendConfig::new(mock.base_url(), "mock-model")
        })
        .unwrap(),
    );
    let engine = SampleSummaryEngine::new(
        SampleEngineConfig {
            window_messages: 50,
            chunk_messages: 10,
            projection: ProjectionMode::ThreadBootstrap,
        },
        None,
    );
    let harness = Harness::new(
        HarnessConfig {
            developer_instructions: Some("Answer briefly.".into()),
            ..HarnessConfig::default()
        },
        Arc::new(QuarantineEngine::new(
            SAMPLE_ENGINE_ID,
            Arc::new(engine),
            Arc::new(QuarantineBook::new()),
            CallTimeouts::default(),
        )),
        backend,
        Arc::new(SqliteStore::in_memory().unwrap()),
    );
    (harness, mock)
}

/// Chain expiry mid-session: the next turn runs on a fresh chain carrying the projection
/// (the conversation so far, rendered), and the binding points at the new chain.
#[tokio::test]
async fn expired_chain_is_reprojected_on_a_new_chain() {
    let (harness, mock) = responses_harness(ResponsesThreads::Chain).await;
    let t1 = harness
        .turn(TurnSpec::new("r", "the first question"))
        .await
        .unwrap();
    let t2 = harness
        .turn(TurnSpec::new("r", "the second question"))
        .await
        .unwrap();
    assert_eq!(t2.reason, "matching-thread-bootstrap-binding");
    assert!(!t2.projected);
    assert_ne!(
        t1.thread_id, t2.thread_id,
        "a chain advances to the newest response id"
    );

    mock.expire_all();
    let t3 = harness
        .turn(TurnSpec::new("r", "the third question"))
        .await
        .unwrap();
    assert!(
        t3.projected,
        "the new chain is bootstrapped with the projection"
    );
    assert!(t3.metrics.retried);
    assert_eq!(t3.reason, "missing-thread-binding");
    let binding = harness.binding("r").await.unwrap().unwrap();
    assert_eq!(binding.thread_id.as_str(), t3.thread_id);

    let requests = mock.response_requests();
    // t1, t2, the failed t3 on the expired chain, the retried t3 on a new chain.
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[2].status, 400);
    let retried = &requests[3];
    assert_eq!(retried.previous_response_id, None, "a new chain");
    let input = retried.input_texts("user").join("\n");
    assert!(input.contains("<conversation_context>"), "{input}");
    assert!(input.contains("the first question") && input.contains("the second question"));
    assert!(input.ends_with("the third question"));
    // Instructions, with the engine's systemPromptAddition, on every request.
    for r in &requests {
        let instructions = r.instructions.clone().unwrap_or_default();
        assert!(
            instructions.starts_with("Answer briefly."),
            "{instructions}"
        );
        assert!(
            instructions.contains("sample summary engine"),
            "{instructions}"
        );
    }
    // The reused turn sent only its own prompt with the chain id.
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["the second question".to_string()]
    );
    harness.shutdown().await;
}

/// Conversation threads: the thread id is the conversation and stays the same across turns;
/// a reused conversation sends only the new prompt; once the conversation is deleted, the next
/// turn runs on a new conversation carrying the projection (one retry) and the binding points
/// at it.
#[tokio::test]
async fn deleted_conversation_is_reprojected_on_a_new_conversation() {
    let (harness, mock) = responses_harness(ResponsesThreads::Conversation).await;
    let t1 = harness
        .turn(TurnSpec::new("r", "the first question"))
        .await
        .unwrap();
    let t2 = harness
        .turn(TurnSpec::new("r", "the second question"))
        .await
        .unwrap();
    assert_eq!(t2.reason, "matching-thread-bootstrap-binding");
    assert!(!t2.projected);
    assert!(t1.thread_id.starts_with("conv_"), "{}", t1.thread_id);
    assert_eq!(t1.thread_id, t2.thread_id, "a conversation keeps its id");
    assert_eq!(mock.conversation_items(&t1.thread_id).unwrap().len(), 4);

    assert!(mock.delete_conversation(&t1.thread_id));
    let t3 = harness
        .turn(TurnSpec::new("r", "the third question"))
        .await
        .unwrap();
    assert!(t3.projected, "the new conversation gets the projection");
    assert!(t3.metrics.retried);
    assert_ne!(t3.thread_id, t1.thread_id);
    assert!(mock.has_conversation(&t3.thread_id));
    let binding = harness.binding("r").await.unwrap().unwrap();
    assert_eq!(binding.thread_id.as_str(), t3.thread_id);

    let requests = mock.response_requests();
    // t1, t2, t3's first try on the deleted conversation, and t3 on the new one: the backend
    // made the conversation, so resuming it before each turn asks the server nothing, and the
    // deletion is found by the turn's request (a 404, no answer).
    assert_eq!(requests.len(), 4);
    let statuses: Vec<u16> = requests.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 404, 200]);
    assert_eq!(
        requests[2].conversation_id.as_deref(),
        Some(t1.thread_id.as_str())
    );
    let lookups = mock
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/v1/conversations/"))
        .count();
    assert_eq!(lookups, 0, "no conversation lookup before a turn");
    for r in &requests {
        assert_eq!(r.previous_response_id, None, "never a chain id");
        let instructions = r.instructions.clone().unwrap_or_default();
        assert!(
            instructions.starts_with("Answer briefly."),
            "{instructions}"
        );
    }
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["the second question".to_string()],
        "no history with a conversation"
    );
    let retried = &requests[3];
    assert_eq!(
        retried.conversation_id.as_deref(),
        Some(t3.thread_id.as_str())
    );
    let input = retried.input_texts("user").join("\n");
    assert!(input.contains("<conversation_context>"), "{input}");
    assert!(input.contains("the first question") && input.contains("the second question"));
    assert!(input.ends_with("the third question"));
    harness.shutdown().await;
}
