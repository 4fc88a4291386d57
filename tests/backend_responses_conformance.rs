//! The Responses API backend against a whole model: it runs the shared backend conformance
//! suite (the same checks as the mock and Codex backends) on the loopback mock model server in
//! its stateful mode, on both thread kinds (previous_response_id chains and conversations), plus
//! chain- and conversation-specific checks end to end (injection into and compaction of a
//! conversation included). The wire details — exact request bodies,
//! error mapping, keys — are proved against a scripted server in `backend_responses_wire.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxbridge::backend::responses::{ResponsesBackend, ResponsesBackendConfig, ResponsesThreads};
use ctxbridge::backend::{
    conformance, BackendError, ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnRequest,
};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RequestKind};
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
/// input; the thread id stays the same; resuming a conversation this backend made or used asks
/// the server nothing; once it is deleted, the next turn is `ThreadNotFound`, and from then on
/// resume asks the server and is `ThreadNotFound` too.
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
        options: Default::default(),
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
    let retrievals = || {
        let path = format!("/v1/conversations/{thread}");
        mock.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .count()
    };
    backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap();
    assert_eq!(
        retrievals(),
        0,
        "a conversation made here is resumed without a call"
    );

    assert!(mock.delete_conversation(thread.as_str()));
    // Deleted behind the backend's back: the next turn finds out.
    backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap();
    let err = backend
        .run_turn(req(&thread, "three"), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{err:?}"
    );
    let err = backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(
        retrievals(),
        1,
        "a conversation found gone is asked for again"
    );
    let err = backend.compact_thread(&thread).await.unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "compacting a deleted conversation: {err:?}"
    );
    let err = backend
        .inject_developer_message(&thread, "too late")
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::ThreadNotFound { .. }),
        "injecting into a deleted conversation: {err:?}"
    );
}

fn conversation_turn(thread: &ThreadId, input: &str) -> TurnRequest {
    TurnRequest {
        thread_id: thread.clone(),
        input: input.into(),
        developer_instructions: Some("dev instructions".into()),
        base_instructions: None,
        tools: Default::default(),
        additional_context: None,
        options: Default::default(),
    }
}

/// Conversation threads: an injected developer message lands in the conversation at once
/// (`POST /conversations/{id}/items`, before any turn), is not sent again with the next turn,
/// and the model sees it in the conversation in front of that turn's input.
#[tokio::test]
async fn injection_lands_in_the_conversation_at_once() {
    let (backend, mock) = setup_with(ResponsesThreads::Conversation).await;
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(256);
    backend
        .run_turn(conversation_turn(&thread, "one"), tx.clone())
        .await
        .unwrap();
    backend
        .inject_developer_message(&thread, "policy changed")
        .await
        .unwrap();
    let items = mock.conversation_items(thread.as_str()).unwrap();
    assert_eq!(
        ctxbridge_mock_model::record::message_texts(&items, "developer"),
        vec!["policy changed".to_string()],
        "in the conversation before the next turn: {items:?}"
    );
    let added: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/items"))
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].conversation_id.as_deref(), Some(thread.as_str()));

    let second = backend
        .run_turn(conversation_turn(&thread, "two"), tx)
        .await
        .unwrap();
    assert_eq!(second.thread_id, thread);
    let requests = mock.response_requests();
    let last = requests.last().unwrap();
    assert!(last.input_texts("developer").is_empty(), "not sent again");
    assert_eq!(last.input_texts("user"), vec!["two".to_string()]);
    assert_eq!(
        last.conversation_texts("developer"),
        vec!["policy changed".to_string()]
    );
    let texts: Vec<String> = last
        .conversation
        .iter()
        .filter_map(ctxbridge_mock_model::record::message_text)
        .collect();
    let note = texts.iter().position(|t| t == "policy changed").unwrap();
    let two = texts.iter().position(|t| t == "two").unwrap();
    assert!(note < two, "the note precedes the turn: {texts:?}");
}

/// Conversation threads: native compaction lists the conversation's items, compacts them as
/// `input` (no `previous_response_id`, no `conversation`), and seeds a new conversation with the
/// window; the thread moves to it, its next turn sends only the new input and the model sees the
/// window in front of it; the old conversation is left alone. An empty conversation is not
/// compacted.
#[tokio::test]
async fn conversation_compaction_seeds_a_new_conversation() {
    let (backend, mock) = setup_with(ResponsesThreads::Conversation).await;
    let empty = backend.start_thread(StartThread::default()).await.unwrap();
    let nothing = backend.compact_thread(&empty).await.unwrap();
    assert_eq!(nothing.thread_id, None, "nothing to compact");

    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(256);
    for input in ["one", "two"] {
        backend
            .run_turn(conversation_turn(&thread, input), tx.clone())
            .await
            .unwrap();
    }
    let before = mock.conversation_items(thread.as_str()).unwrap();
    assert_eq!(before.len(), 4, "two inputs and two outputs: {before:?}");
    mock.clear_requests();

    let compacted = backend.compact_thread(&thread).await.unwrap();
    let new_thread = compacted.thread_id.expect("a new conversation");
    assert_ne!(new_thread, thread);
    assert!(new_thread.as_str().starts_with("conv_"), "{new_thread}");

    let compact: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.kind == RequestKind::Compact)
        .collect();
    assert_eq!(compact.len(), 1);
    assert_eq!(compact[0].previous_response_id, None);
    assert_eq!(compact[0].body.get("conversation"), None);
    assert_eq!(compact[0].input, before, "the whole conversation as input");

    let window = mock.conversation_items(new_thread.as_str()).unwrap();
    assert!(
        window
            .iter()
            .any(|i| i.get("type").and_then(|t| t.as_str()) == Some("compaction")),
        "{window:?}"
    );
    assert_eq!(
        ctxbridge_mock_model::record::message_texts(&window, "user"),
        vec!["one".to_string(), "two".to_string()]
    );
    assert_eq!(
        mock.conversation_items(thread.as_str()).unwrap(),
        before,
        "the old conversation is left as it was"
    );

    let after = backend
        .run_turn(conversation_turn(&new_thread, "three"), tx)
        .await
        .unwrap();
    assert_eq!(after.thread_id, new_thread);
    let last = mock.response_requests().pop().unwrap();
    assert_eq!(last.conversation_id.as_deref(), Some(new_thread.as_str()));
    assert_eq!(last.input_texts("user"), vec!["three".to_string()]);
    assert_eq!(
        last.conversation_texts("user"),
        vec!["one".to_string(), "two".to_string(), "three".to_string()]
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
        options: Default::default(),
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

/// The conversations made so far (`POST /v1/conversations`), and the ids deleted.
fn conversations_made_and_deleted(mock: &MockModelServer) -> (usize, Vec<String>) {
    let requests = mock.requests();
    let made = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/conversations")
        .count();
    let deleted = requests
        .iter()
        .filter(|r| r.method == "DELETE")
        .filter_map(|r| r.path.strip_prefix("/v1/conversations/"))
        .map(str::to_owned)
        .collect();
    (made, deleted)
}

/// Waits (up to 5 s) until `count` conversations have been made.
async fn until_made(mock: &MockModelServer, count: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while conversations_made_and_deleted(mock).0 < count {
        assert!(
            std::time::Instant::now() < deadline,
            "{count} conversations were not made in 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn setup_with_spare() -> (ResponsesBackend, MockModelServer) {
    let (backend, mock) = setup_with(ResponsesThreads::Conversation).await;
    (backend.with_spare_conversation(), mock)
}

/// With a spare conversation (a long-running process), the backend still passes the shared
/// conformance suite on conversation threads.
#[tokio::test]
async fn responses_backend_conformance_with_a_spare_conversation() {
    let (backend, _mock) = setup_with_spare().await;
    conformance::run_all(&backend, ThreadId("conv_does_not_exist".into())).await;
    backend.shutdown().await;
}

/// As `serve --front responses` builds it (a spare, a connection pool per lane), the backend
/// passes the shared conformance suite, and a turn asking for another pool is answered.
#[tokio::test]
async fn responses_backend_conformance_with_connection_pools() {
    let (backend, mock) = setup_with_spare().await;
    let backend = backend.with_connection_pools(2).unwrap();
    conformance::run_all(&backend, ThreadId("conv_does_not_exist".into())).await;
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    let mut request = conversation_turn(&thread, "on the second lane");
    request.options.connection_pool = 1;
    let (events, _events_rx) = mpsc::channel(64);
    let outcome = backend.run_turn(request, events).await.unwrap();
    let asked = mock.requests();
    let turn = asked
        .iter()
        .rfind(|r| r.kind == RequestKind::Responses)
        .unwrap();
    assert_eq!(turn.conversation_id.as_deref(), Some(thread.as_str()));
    assert!(
        turn.body.to_string().contains("on the second lane"),
        "{turn:?}"
    );
    assert_eq!(Some(&outcome.reply), turn.reply_text.as_ref());
    backend.shutdown().await;
}

/// A new thread takes the conversation made ahead of need: the first new thread makes its
/// own and a spare is made in the background; the second takes the spare (an existing, empty
/// conversation) without making one on its path; each turn names its own conversation.
#[tokio::test]
async fn a_new_thread_takes_the_spare_conversation_made_ahead() {
    let (backend, mock) = setup_with_spare().await;
    let first = backend.start_thread(StartThread::default()).await.unwrap();
    assert_eq!(
        conversations_made_and_deleted(&mock).0,
        1,
        "the first makes its own"
    );
    until_made(&mock, 2).await;
    // On this test's single-threaded runtime, the next spare's task cannot run before the
    // second start_thread returns: any conversation made by then was made on its path.
    let second = backend.start_thread(StartThread::default()).await.unwrap();
    assert_eq!(
        conversations_made_and_deleted(&mock).0,
        2,
        "the second new thread made no conversation on its path"
    );
    assert_ne!(first, second);
    assert!(mock.has_conversation(second.as_str()), "{second}");
    assert_eq!(
        mock.conversation_items(second.as_str()).unwrap(),
        Vec::<serde_json::Value>::new(),
        "the spare is empty"
    );
    let (tx, _rx) = mpsc::channel(64);
    for thread in [&first, &second] {
        let turn = conversation_turn(thread, "hello");
        backend.run_turn(turn, tx.clone()).await.unwrap();
    }
    let named: Vec<Option<String>> = mock
        .response_requests()
        .iter()
        .map(|r| r.conversation_id.clone())
        .collect();
    assert_eq!(
        named,
        [Some(first.to_string()), Some(second.to_string())],
        "each turn names its own conversation"
    );
    backend.shutdown().await;
}

/// The spare left when the backend shuts down is deleted on the server; the conversations
/// of threads stay.
#[tokio::test]
async fn the_spare_left_at_shutdown_is_deleted() {
    let (backend, mock) = setup_with_spare().await;
    let thread = backend.start_thread(StartThread::default()).await.unwrap();
    until_made(&mock, 2).await;
    // The spare is ready once its creation's answer is in (the request is recorded first).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        backend.shutdown().await;
        let (_, deleted) = conversations_made_and_deleted(&mock);
        if let [spare] = deleted.as_slice() {
            assert_ne!(spare, thread.as_str());
            assert!(!mock.has_conversation(spare), "the spare is gone");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no spare was deleted");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(mock.has_conversation(thread.as_str()), "the thread's stays");
    assert_eq!(conversations_made_and_deleted(&mock).0, 2);
}

/// Without a spare (a short-lived process: `turn`), nothing is made ahead: every new thread
/// makes its own conversation, and nothing is left to delete.
#[tokio::test]
async fn without_a_spare_nothing_is_made_ahead() {
    let (backend, mock) = setup_with(ResponsesThreads::Conversation).await;
    backend.start_thread(StartThread::default()).await.unwrap();
    backend.start_thread(StartThread::default()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    backend.shutdown().await;
    assert_eq!(conversations_made_and_deleted(&mock), (2, Vec::new()));
}
