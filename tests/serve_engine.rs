//! `ctxbridge serve` with a context engine behind it (docs/serve.md#the-serve-command "Sessions", "Turns",
//! "Compaction"): a WebSocket client in front of the real `codex app-server` (offline, mock
//! model), the sample `sample-summary` thread_bootstrap engine configured with a tiny window so
//! its epoch changes every turn from the third on. Skips loudly without Codex.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve.rs"]
mod serve_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::path::Path;
use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::config::Config;
use ctxbridge::serve::command::{options, ServeArgs};
use ctxbridge::serve::{self, ServeHandle};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest};
use serde_json::{json, Value};
use ws_client::Client;

/// A generous bound so a broken proxy fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(60);
/// The marker of a rendered projection in a turn input (docs/architecture.md#rendering).
const CONTEXT: &str = "<conversation_context>";
/// Text of the sample engine's `systemPromptAddition`.
const ENGINE_INSTRUCTIONS: &str = "Context comes from the sample summary engine";

struct Env {
    handle: ServeHandle,
    mock: MockModelServer,
    dir: tempfile::TempDir,
}

/// `serve` built from a configuration selecting `sample-summary` on the real Codex (None:
/// Codex is not installed), as [`serve_in`] with chunks of 2.
async fn start() -> Option<Env> {
    start_with(2, turn_input()).await
}

/// As [`start`] with chunks of `chunk` and the `projection` section (see [`serve_with`]).
async fn start_with(chunk: u64, projection: Value) -> Option<Env> {
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = serve_with(dir.path(), &mock, chunk, projection).await;
    Some(Env { handle, mock, dir })
}

/// The projection section that puts the context in the turn input (set explicitly: on Codex
/// 0.171.0 the default is additional context).
fn turn_input() -> Value {
    json!({"codexContextDelivery": "turn-input"})
}

/// A server on the state (store, Codex home) kept in `dir`; the sample engine keeps a window
/// of 2 messages and summarises `chunk` at a time. The projection goes in the turn input
/// (set explicitly: on Codex 0.171.0 the default is additional context).
async fn serve_in(dir: &Path, mock: &MockModelServer, chunk: u64) -> ServeHandle {
    serve_with(dir, mock, chunk, turn_input()).await
}

/// As [`serve_in`] with a `projection` section.
async fn serve_with(
    dir: &Path,
    mock: &MockModelServer,
    chunk: u64,
    projection: Value,
) -> ServeHandle {
    let binary = locate_codex_binary().unwrap();
    serve_support::serve_sample_engine(dir, mock, &binary, chunk, projection).await
}

impl Env {
    fn url(&self) -> String {
        format!("ws://{}", self.handle.local_addr.unwrap())
    }

    /// The state store the server writes (opened beside it).
    fn store(&self) -> SqliteStore {
        SqliteStore::open(self.dir.path().join("state").join("state.db")).unwrap()
    }

    /// The backend thread currently serving a client thread id.
    fn backend_of(&self, client: &str) -> String {
        let doc = self
            .store()
            .load_document(serve::thread_map::NAMESPACE, client)
            .unwrap()
            .unwrap_or_else(|| panic!("no thread-map entry for {client}"));
        let doc: Value = serde_json::from_str(&doc).unwrap();
        doc["backendThreadId"].as_str().unwrap().to_owned()
    }
}

impl Client {
    /// One turn: the `turn/start` answer and the `turn/completed` notification.
    async fn turn(&mut self, id: &str, thread: &str, text: &str) -> (Value, Value) {
        let answer = self
            .call(
                json!(id),
                "turn/start",
                json!({"threadId": thread, "input": [{"type": "text", "text": text}]}),
            )
            .await;
        assert!(answer["result"]["turn"]["id"].is_string(), "{answer}");
        let done = self.until("turn/completed").await;
        (answer, done)
    }
}

/// The mock model's request whose last user message ends with `prompt`.
fn request_for(requests: &[RecordedRequest], prompt: &str) -> RecordedRequest {
    requests
        .iter()
        .rev()
        .find(|r| r.last_user_text().is_some_and(|t| t.ends_with(prompt)))
        .unwrap_or_else(|| panic!("no model request for {prompt:?}"))
        .clone()
}

/// How many user messages of a request carry a rendered projection.
fn projections_in(request: &RecordedRequest) -> usize {
    request
        .conversation_texts("user")
        .iter()
        .filter(|t| t.contains(CONTEXT))
        .count()
}

/// A stalled model behind a served turn: with `backend.idleTimeoutMs` set, the turn the
/// upstream accepted is interrupted and ends for the client as failed, after an `error` that
/// names the idle timeout and its setting; nothing of it is recorded (docs/architecture.md#failure-handling: the client
/// hears how its turn ended).
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_served_turn_fails_clearly_and_records_nothing() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = serve_support::serve_sample_engine_with(
        dir.path(),
        &mock,
        &binary,
        2,
        turn_input(),
        json!({"idleTimeoutMs": 1500}),
    )
    .await;
    let env = Env { handle, mock, dir };
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    let (_, done) = c.turn("t1", &thread, "a quick one").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    // The next model request hangs far longer than the idle timeout.
    env.mock.push_reply(
        ctxbridge_mock_model::ScriptedReply::text("too late").with_delay(Duration::from_secs(600)),
    );
    let answer = c
        .call(
            json!("t2"),
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "this one stalls"}]}),
        )
        .await;
    let turn = answer["result"]["turn"]["id"].clone();
    assert!(turn.is_string(), "{answer}");
    let error = tokio::time::timeout(PATIENCE, c.until("error"))
        .await
        .unwrap();
    assert_eq!(error["params"]["threadId"], thread, "{error}");
    assert_eq!(error["params"]["turnId"], turn, "{error}");
    let message = error["params"]["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("idle timeout"), "{message}");
    assert!(message.contains("backend.idleTimeoutMs"), "{message}");
    let done = tokio::time::timeout(PATIENCE, c.until("turn/completed"))
        .await
        .unwrap();
    assert_eq!(done["params"]["turn"]["id"], turn, "{done}");
    assert_eq!(done["params"]["turn"]["status"], "failed", "{done}");
    assert_eq!(done["params"]["turn"]["error"]["message"], message.as_str());
    let texts: Vec<String> = env
        .store()
        .load_transcript(&thread)
        .unwrap()
        .iter()
        .map(|e| e.message.plain_text())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "a quick one");
}

/// Four turns through one WebSocket client across two epoch changes of the sample engine: the
/// client's thread id never changes (every notification and answer names it) while the
/// session moves to hidden backend threads; the model sees the engine's context once per
/// epoch (a reused thread gets the bare prompt, a rotated one the projection) while the
/// user-message items the client gets hold only the user's words; `thread/list`
/// and `thread/loaded/list` show only the client id; an ephemeral thread gets no projection
/// and no engine instructions; `thread/compact/start` on the session is answered.
#[tokio::test(flavor = "multi_thread")]
async fn turns_across_epochs_keep_the_client_thread() {
    let Some(env) = start().await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;

    // Epoch 1: the client's own thread is adopted, then reused.
    let (answer, done) = c.turn("t1", &thread, "hello there").await;
    assert_eq!(answer["id"], "t1");
    assert_eq!(done["params"]["threadId"], thread, "{done}");
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_eq!(env.backend_of(&thread), thread);
    let (_, done) = c.turn("t2", &thread, "second message").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_eq!(env.backend_of(&thread), thread);

    // Epoch 2 and 3: each turn moves the session to a new, hidden backend thread.
    let (_, done) = c.turn("t3", &thread, "third message").await;
    assert_eq!(done["params"]["threadId"], thread, "{done}");
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    let second_backend = env.backend_of(&thread);
    assert_ne!(second_backend, thread);
    let (_, done) = c.turn("t4", &thread, "fourth message").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    let third_backend = env.backend_of(&thread);
    assert_ne!(third_backend, second_backend);
    assert_ne!(third_backend, thread);

    // The client only ever saw its own thread id; the reply streamed to it.
    for message in &c.all {
        for pointer in ["/params/threadId", "/result/thread/id", "/params/thread/id"] {
            if let Some(id) = message.pointer(pointer).and_then(Value::as_str) {
                assert_eq!(id, thread, "a message named another thread: {message}");
            }
        }
    }
    // Each turn's answer came before its `turn/started`, as from Codex itself.
    for (n, id) in ["t1", "t2", "t3", "t4"].into_iter().enumerate() {
        let at = c
            .all
            .iter()
            .position(|m| m["id"] == id && m.get("result").is_some())
            .unwrap_or_else(|| panic!("no answer to {id}"));
        let started = c.all[..at]
            .iter()
            .filter(|m| m["method"] == "turn/started")
            .count();
        assert_eq!(started, n, "the answer to {id} came after its turn/started");
    }
    let users: Vec<&Value> = c
        .all
        .iter()
        .filter(|m| m["method"] == "item/completed" && m["params"]["item"]["type"] == "userMessage")
        .collect();
    assert_eq!(users.len(), 4, "one user message per turn");
    assert_eq!(
        users[2]["params"]["item"]["content"],
        json!([{"type": "text", "text": "third message"}]),
        "the user-message item holds the user's words"
    );
    for message in &c.all {
        assert!(
            !message.to_string().contains(CONTEXT),
            "no projection reached the client: {message}"
        );
    }
    let deltas = c
        .all
        .iter()
        .filter(|m| m["method"] == "item/agentMessage/delta")
        .count();
    assert!(deltas >= 4, "the replies streamed to the client");

    // What the model saw.
    let requests = env.mock.response_requests();
    let first = request_for(&requests, "hello there");
    assert_eq!(first.last_user_text().unwrap(), "hello there");
    assert!(
        first.body_contains(ENGINE_INSTRUCTIONS),
        "the engine's instructions reached the adopted thread"
    );
    let second = request_for(&requests, "second message");
    assert_eq!(
        second.last_user_text().unwrap(),
        "second message",
        "a reused thread gets the bare prompt"
    );
    assert!(second
        .conversation_texts("user")
        .iter()
        .any(|t| t == "hello there"));
    for prompt in ["third message", "fourth message"] {
        let request = request_for(&requests, prompt);
        let input = request.last_user_text().unwrap();
        assert!(input.contains(CONTEXT), "a new epoch projects: {input}");
        assert_eq!(
            projections_in(&request),
            1,
            "a rotated thread holds its epoch's projection once"
        );
        assert!(
            !request
                .conversation_texts("user")
                .iter()
                .any(|t| t == "hello there"),
            "a rotated thread does not hold the old turns verbatim"
        );
    }
    for request in &requests {
        assert!(projections_in(request) <= 1);
    }

    // Lists show the session once, under the client id.
    let list = c.call(json!("l"), "thread/list", json!({})).await;
    let ids: Vec<&str> = list["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids.iter().filter(|id| **id == thread).count(), 1, "{list}");
    assert!(!ids.contains(&second_backend.as_str()), "{list}");
    assert!(!ids.contains(&third_backend.as_str()), "{list}");
    let loaded = c.call(json!("ll"), "thread/loaded/list", json!({})).await;
    let loaded: Vec<&str> = loaded["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{loaded}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(loaded.iter().filter(|id| **id == thread).count(), 1);
    assert!(!loaded.contains(&second_backend.as_str()));
    assert!(!loaded.contains(&third_backend.as_str()));

    // Manual compaction of the session is answered (the sample engine owns compaction).
    let compact = c
        .call(
            json!("c"),
            "thread/compact/start",
            json!({"threadId": thread}),
        )
        .await;
    assert!(compact.get("result").is_some(), "{compact}");
    c.seen.clear();
    let ended = c.until("turn/completed").await;
    assert_eq!(ended["params"]["threadId"], thread, "{ended}");

    // An ephemeral helper thread passes through: no projection, no engine instructions.
    let helper = c.start_thread(json!(5), true).await;
    let (_, done) = c.turn("h", &helper, "title please").await;
    assert_eq!(done["params"]["threadId"], helper);
    let requests = env.mock.response_requests();
    let title = request_for(&requests, "title please");
    assert_eq!(title.last_user_text().unwrap(), "title please");
    assert!(!title.body_contains(ENGINE_INSTRUCTIONS));
    assert_eq!(projections_in(&title), 0);
    env.handle.shutdown().await;
}

/// After a rotation and a restart of `serve` on the same state, `thread/resume` of the client
/// id resumes the session's current backend thread (answered under the client id), and the
/// next turn continues it: same epoch, so the model gets the bare prompt on the thread that
/// holds the projection. (Window 2, chunks of 4: turns 1–3 share the first epoch, turn 4
/// rotates, turn 5 stays.)
#[tokio::test(flavor = "multi_thread")]
async fn resume_after_restart_continues_the_current_backend_thread() {
    let Some(env) = start_with(4, turn_input()).await else {
        return;
    };
    let thread = {
        let mut c = Client::connect(&env.url()).await;
        c.initialize_ok().await;
        let thread = c.start_thread(json!(1), false).await;
        for (id, text) in [("a", "one"), ("b", "two"), ("c", "three")] {
            let (_, done) = c.turn(id, &thread, text).await;
            assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
            assert_eq!(env.backend_of(&thread), thread);
        }
        let (_, done) = c.turn("d", &thread, "four").await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
        thread
    };
    let current = env.backend_of(&thread);
    assert_ne!(current, thread, "the fourth turn rotated");
    let Env { handle, mock, dir } = env;
    handle.shutdown().await;

    let handle = serve_in(dir.path(), &mock, 4).await;
    let env = Env { handle, mock, dir };
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let resumed = c
        .call(json!(2), "thread/resume", json!({"threadId": thread}))
        .await;
    assert_eq!(resumed["result"]["thread"]["id"], thread, "{resumed}");
    let (answer, done) = c.turn("e", &thread, "five").await;
    assert_eq!(answer["id"], "e");
    assert_eq!(done["params"]["threadId"], thread);
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_eq!(
        env.backend_of(&thread),
        current,
        "the session stayed on its thread"
    );
    let request = request_for(&env.mock.response_requests(), "five");
    assert_eq!(request.last_user_text().unwrap(), "five", "bare prompt");
    assert_eq!(
        projections_in(&request),
        1,
        "the thread holds its projection once"
    );
    env.handle.shutdown().await;
}

/// `thread/compact/start` on a session takes the manual-compaction path: the engine's forced
/// `compact` (the sample engine owns compaction and summarises everything; the client is shown
/// a compaction turn ending, as Codex shows one) starts a new epoch,
/// so the next turn — which the window alone would have kept on the thread — moves to a new
/// backend thread carrying the projection, still under the client's id.
#[tokio::test(flavor = "multi_thread")]
async fn manual_compaction_runs_the_engine_and_starts_a_new_epoch() {
    let Some(env) = start_with(4, turn_input()).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    for (id, text) in [("a", "one"), ("b", "two")] {
        let (_, done) = c.turn(id, &thread, text).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    assert_eq!(env.backend_of(&thread), thread);
    let compact = c
        .call(
            json!("c"),
            "thread/compact/start",
            json!({"threadId": thread}),
        )
        .await;
    assert!(compact.get("result").is_some(), "{compact}");
    // The client is shown the compaction turn Codex would have run (none ran upstream).
    c.seen.clear();
    let item = c.until("item/completed").await;
    assert_eq!(
        item["params"]["item"]["type"], "contextCompaction",
        "{item}"
    );
    let ended = c.until("turn/completed").await;
    assert_eq!(ended["params"]["threadId"], thread, "{ended}");
    assert_eq!(ended["params"]["turn"]["status"], "completed", "{ended}");
    let (_, done) = c.turn("d", &thread, "three").await;
    assert_eq!(done["params"]["threadId"], thread);
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_ne!(
        env.backend_of(&thread),
        thread,
        "the compaction's epoch rotated"
    );
    let request = request_for(&env.mock.response_requests(), "three");
    let input = request.last_user_text().unwrap();
    assert!(input.contains(CONTEXT), "{input}");
    assert!(
        input.contains("one"),
        "the summary covers the compacted turns: {input}"
    );
    env.handle.shutdown().await;
}

/// With no `projection.codexContextDelivery` configured, serve passes the upstream's version
/// (0.171.0, from its `initialize` userAgent) to the harness, whose default there is
/// additional context: a projecting turn reaches the model as the bare prompt plus the context
/// in a developer item, so Codex's own user message holds only the user's words.
#[tokio::test(flavor = "multi_thread")]
async fn additional_context_is_the_default_on_codex_0_171() {
    let Some(env) = start_with(2, json!({})).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    for (id, text) in [("a", "one"), ("b", "two"), ("c", "three")] {
        let (_, done) = c.turn(id, &thread, text).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    assert_ne!(env.backend_of(&thread), thread, "the third turn rotated");
    let request = request_for(&env.mock.response_requests(), "three");
    assert_eq!(request.last_user_text().unwrap(), "three", "bare prompt");
    assert!(
        request
            .conversation_texts("developer")
            .iter()
            .any(|t| t.contains(CONTEXT) && t.contains("<ctxbridge>")),
        "the context reached the model as a developer item: {:?}",
        request.conversation_texts("developer")
    );
    assert_eq!(
        projections_in(&request),
        0,
        "no projection in a user message"
    );
    env.handle.shutdown().await;
}

/// The user-message texts of a list of turns, in order.
fn user_texts(turns: &[Value]) -> Vec<String> {
    turns
        .iter()
        .flat_map(|turn| turn["items"].as_array().cloned().unwrap_or_default())
        .filter(|item| item["type"] == "userMessage")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect()
}

/// The prompts of [`four_turns`].
const FOUR_PROMPTS: [&str; 4] = [
    "hello there",
    "second message",
    "third message",
    "fourth message",
];

/// A client that started a session and ran [`FOUR_PROMPTS`] in it, each completed: with the
/// sample engine of [`start`] turns 3 and 4 rotate onto new backend threads. The client and
/// the client thread id.
async fn four_turns(env: &Env) -> (Client, String) {
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    for (i, prompt) in FOUR_PROMPTS.iter().enumerate() {
        let (_, done) = c.turn(&format!("t{i}"), &thread, prompt).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    (c, thread)
}

/// After two rotations (turns 3 and 4 start new backend threads), `thread/read` and
/// `thread/turns/list` of the client id show the conversation as the user had it: every
/// prompt once, in order, no projection text, under the client's id; the earlier threads'
/// turns come from the transcript, the current thread's from Codex; pages follow
/// `limit`, `sortDirection` and the cursors given.
#[tokio::test(flavor = "multi_thread")]
async fn reads_show_the_conversation_across_rotations() {
    let Some(env) = start().await else {
        return;
    };
    let (mut c, thread) = four_turns(&env).await;
    let prompts = FOUR_PROMPTS;
    assert_ne!(env.backend_of(&thread), thread, "the session rotated");

    let read = c
        .call(
            json!("r"),
            "thread/read",
            json!({"threadId": thread, "includeTurns": true}),
        )
        .await;
    assert_eq!(read["result"]["thread"]["id"], thread, "{read}");
    let backend = env.backend_of(&thread);
    assert!(
        !read.to_string().contains(&backend),
        "the current backend thread {backend} shows through: {read}"
    );
    let turns = read["result"]["thread"]["turns"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"));
    assert_eq!(user_texts(turns), prompts, "{read}");
    assert!(!read.to_string().contains(CONTEXT), "{read}");
    let replies = turns
        .iter()
        .filter(|t| {
            t["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["type"] == "agentMessage")
        })
        .count();
    assert_eq!(replies, 4, "every turn shows its reply: {read}");
    let bare = c
        .call(json!("r2"), "thread/read", json!({"threadId": thread}))
        .await;
    assert_eq!(bare["result"]["thread"]["id"], thread, "{bare}");
    assert!(
        bare["result"]["thread"]["turns"]
            .as_array()
            .map_or(true, Vec::is_empty),
        "no turns without includeTurns: {bare}"
    );

    // Newest first by default, two at a time.
    let first = c
        .call(
            json!("p1"),
            "thread/turns/list",
            json!({"threadId": thread, "limit": 2}),
        )
        .await;
    let page = first["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{first}"));
    assert_eq!(user_texts(page), ["fourth message", "third message"]);
    let next = first["result"]["nextCursor"].clone();
    assert!(next.is_string(), "{first}");
    let second = c
        .call(
            json!("p2"),
            "thread/turns/list",
            json!({"threadId": thread, "limit": 2, "cursor": next}),
        )
        .await;
    let page = second["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{second}"));
    assert_eq!(user_texts(page), ["second message", "hello there"]);
    assert!(second["result"]["nextCursor"].is_null(), "{second}");
    let ascending = c
        .call(
            json!("p3"),
            "thread/turns/list",
            json!({"threadId": thread, "sortDirection": "asc"}),
        )
        .await;
    let page = ascending["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{ascending}"));
    assert_eq!(user_texts(page), prompts);
    assert!(!ascending.to_string().contains(CONTEXT), "{ascending}");
    env.handle.shutdown().await;
}

/// The user-message texts of `thread/items/list` entries, in order.
fn entry_user_texts(entries: &[Value]) -> Vec<String> {
    let items: Vec<Value> = entries.iter().map(|e| e["item"].clone()).collect();
    user_texts(&[json!({ "items": items })])
}

/// The Codex TUI's way of opening a session (0.171): `thread/resume` with `excludeTurns` and
/// `initialTurnsPage`, then `thread/turns/list` from the answer's `turnsBackwardsCursor`
/// (`itemsView: "notLoaded"`) and `thread/items/list` from its `itemsBackwardsCursor`. After
/// two rotations every answer covers the whole conversation under the client's id — the
/// initial page the newest turns, the turn list every turn without items, the item list every
/// prompt and reply newest first with the user's own words and each item's turn — and a
/// `turnId` filter with an item anchor pages within one earlier turn.
#[tokio::test(flavor = "multi_thread")]
async fn resume_pages_turns_and_items_across_rotations() {
    let Some(env) = start().await else {
        return;
    };
    let (_c, thread) = four_turns(&env).await;
    let prompts = FOUR_PROMPTS;
    assert_ne!(env.backend_of(&thread), thread, "the session rotated");

    let mut tui = Client::connect(&env.url()).await;
    tui.initialize_ok().await;
    let resume = tui
        .call(
            json!("resume"),
            "thread/resume",
            json!({"threadId": thread, "excludeTurns": true,
                   "initialTurnsPage": {"limit": 2, "itemsView": "full"}}),
        )
        .await;
    let result = &resume["result"];
    assert_eq!(result["thread"]["id"], thread, "{resume}");
    assert!(
        result["thread"]["turns"]
            .as_array()
            .map_or(true, Vec::is_empty),
        "excludeTurns: {resume}"
    );
    let initial = result["initialTurnsPage"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{resume}"));
    assert_eq!(user_texts(initial), ["fourth message", "third message"]);
    assert!(!resume.to_string().contains(CONTEXT), "{resume}");
    let backend = env.backend_of(&thread);
    for field in [
        "initialTurnsPage",
        "turnsBackwardsCursor",
        "itemsBackwardsCursor",
    ] {
        assert!(
            !result[field].is_null() && !result[field].to_string().contains(&backend),
            "{field} is ctxbridge's: {resume}"
        );
    }
    assert!(
        !resume.to_string().contains(&backend),
        "the backend thread {backend} shows through (its id, session id or rollout path): {resume}"
    );

    let turns = tui
        .call(
            json!("turns"),
            "thread/turns/list",
            json!({"threadId": thread, "cursor": result["turnsBackwardsCursor"],
                   "limit": 5, "sortDirection": "desc", "itemsView": "notLoaded"}),
        )
        .await;
    let page = turns["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{turns}"));
    assert_eq!(page.len(), 4, "every turn: {turns}");
    assert!(
        page.iter()
            .all(|t| t["items"] == json!([]) && t["itemsView"] == "notLoaded"),
        "{turns}"
    );
    assert!(turns["result"]["nextCursor"].is_null(), "{turns}");
    let turn_ids: Vec<Value> = page.iter().rev().map(|t| t["id"].clone()).collect();

    let items = tui
        .call(
            json!("items"),
            "thread/items/list",
            json!({"threadId": thread, "cursor": result["itemsBackwardsCursor"],
                   "limit": 100, "sortDirection": "desc"}),
        )
        .await;
    let entries = items["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{items}"));
    let mut newest_first = prompts.to_vec();
    newest_first.reverse();
    assert_eq!(entry_user_texts(entries), newest_first, "{items}");
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["item"]["type"] == "agentMessage")
            .count(),
        4,
        "every reply: {items}"
    );
    assert!(!items.to_string().contains(CONTEXT), "{items}");
    let entry_turns: std::collections::BTreeSet<String> = entries
        .iter()
        .map(|e| e["turnId"].as_str().unwrap().to_owned())
        .collect();
    let listed: std::collections::BTreeSet<String> = turn_ids
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(entry_turns, listed, "items name the listed turns");

    let first_turn = tui
        .call(
            json!("first"),
            "thread/items/list",
            json!({"threadId": thread, "turnId": turn_ids[0]}),
        )
        .await;
    let first = first_turn["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{first_turn}"));
    assert_eq!(entry_user_texts(first), ["hello there"], "{first_turn}");
    let anchor = json!({"type": "item", "itemId": first[0]["item"]["id"]});
    let after = tui
        .call(
            json!("after"),
            "thread/items/list",
            json!({"threadId": thread, "turnId": turn_ids[0], "cursor": anchor}),
        )
        .await;
    let rest = after["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{after}"));
    assert_eq!(rest.len(), first.len() - 1, "{after}");
    assert!(
        rest.iter().all(|e| e["item"]["type"] == "agentMessage"),
        "{after}"
    );
    env.handle.shutdown().await;
}

/// A backend thread started by rotation gets the client's thread settings: the client
/// started its thread with its own `cwd`, `approvalPolicy`, `sandbox` and `config` overrides
/// that turn the environment context and permissions instructions on (serve's Codex has them
/// off); after the rotation (third turn) the model request of the new thread carries the
/// client's cwd, sandbox mode and approval policy as on the client's own thread.
#[tokio::test(flavor = "multi_thread")]
async fn rotated_threads_inherit_the_client_settings() {
    let Some(env) = start().await else {
        return;
    };
    let workdir = tempfile::tempdir().unwrap();
    let cwd = workdir.path().canonicalize().unwrap().display().to_string();
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let started = c
        .call(
            json!(1),
            "thread/start",
            json!({
                "baseInstructions": "You are a test model.",
                "cwd": cwd,
                "approvalPolicy": "on-request",
                "sandbox": "workspace-write",
                "config": {"include_environment_context": true, "include_permissions_instructions": true},
            }),
        )
        .await;
    let thread = started["result"]["thread"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    for (id, text) in [("a", "one"), ("b", "two"), ("c", "three")] {
        let (_, done) = c.turn(id, &thread, text).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    assert_ne!(env.backend_of(&thread), thread, "the third turn rotated");
    let requests = env.mock.response_requests();
    let first = request_for(&requests, "one");
    assert!(
        first.body_contains(&cwd),
        "the client's own thread has its cwd"
    );
    let rotated = request_for(&requests, "three");
    assert!(
        !rotated
            .conversation_texts("user")
            .iter()
            .any(|t| t == "one"),
        "a new backend thread"
    );
    assert!(
        rotated.body_contains(&cwd),
        "the rotated thread has the client's cwd and environment context"
    );
    // Codex words them in its permissions instructions: the sandbox mode by name, and
    // on-request approval as how to ask for escalation (never-approval has no such part).
    for setting in ["`sandbox_mode` is `workspace-write`", "require_escalated"] {
        assert!(
            first.body_contains(setting),
            "the client's own thread has {setting}"
        );
        assert!(
            rotated.body_contains(setting),
            "the rotated thread has the client's {setting}"
        );
    }
    env.handle.shutdown().await;
}

/// A `codex app-server --listen URL` started by the test (offline, mock model), as an operator
/// would run it for `backend.url`.
struct RunningCodex {
    child: tokio::process::Child,
    /// The URL it listens on (`ws://127.0.0.1:PORT` as it reports it, or `unix://PATH`).
    url: String,
}

impl RunningCodex {
    /// Starts it listening on `listen` with its state in `home`; waits until it accepts.
    async fn start(listen: &str, home: &Path, mock: &MockModelServer) -> RunningCodex {
        let binary = locate_codex_binary().unwrap();
        let args = codex_app_server_client::AppServerConfig::new(home.to_path_buf())
            .with_command([
                binary.display().to_string(),
                "app-server".into(),
                "--listen".into(),
                listen.into(),
            ])
            .with_overrides(offline_overrides(&mock.base_url()))
            .args();
        std::fs::create_dir_all(home).unwrap();
        let mut child = tokio::process::Command::new(&binary)
            .args(args)
            .env("CODEX_HOME", home)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = if let Some(path) = listen.strip_prefix("unix://") {
            tokio::time::timeout(PATIENCE, async {
                while tokio::net::UnixStream::connect(path).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("the app-server's socket never accepted");
            listen.to_owned()
        } else {
            // It reports the bound port on stderr: `listening on: ws://127.0.0.1:PORT`.
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
            let url = tokio::time::timeout(PATIENCE, async {
                while let Some(line) = lines.next_line().await.unwrap() {
                    if let Some(at) = line.find("listening on: ") {
                        return line[at + "listening on: ".len()..].trim().to_owned();
                    }
                }
                panic!("the app-server exited without listening");
            })
            .await
            .expect("the app-server never reported its address");
            // Keep draining stderr so it never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            url
        };
        RunningCodex { child, url }
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// `backend.url` in front of an app-server that already runs (`--listen ws://` and
/// `unix://`): serve spawns nothing; when that app-server goes away and comes back on the same
/// address, the next turn reconnects and resumes the session's thread (its history intact:
/// the model sees the earlier turns verbatim and gets the bare prompt); a later epoch change
/// rotates the session onto a new thread of the same app-server. (Window 2, chunks of 4:
/// turns 1–3 share the first epoch, turn 4 rotates.)
#[tokio::test(flavor = "multi_thread")]
async fn backend_url_uses_a_running_app_server_and_reconnects() {
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("codex.sock");
    for (name, listen) in [
        ("ws", "ws://127.0.0.1:0".to_owned()),
        ("unix", format!("unix://{}", socket.display())),
    ] {
        let home = dir.path().join(format!("codex-home-{name}"));
        let codex = RunningCodex::start(&listen, &home, &mock).await;
        let state = dir.path().join(format!("state-{name}"));
        let config = json!({
            "plugins": {
                "slots": {"contextEngine": "sample-summary"},
                "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": 4}}}
            },
            "backend": {"kind": "codex", "url": codex.url, "command": []},
            "store": {"path": state.join("state.db")},
            "projection": {"codexContextDelivery": "turn-input"},
        });
        let config = Config::parse(&config.to_string(), "test.json5").unwrap();
        let args = ServeArgs::listening_on("ws://127.0.0.1:0");
        let handle = serve::start(options(&config, &args).await.unwrap())
            .await
            .unwrap();
        let mut c = Client::connect(&format!("ws://{}", handle.local_addr.unwrap())).await;
        c.initialize_ok().await;
        let thread = c.start_thread(json!(1), false).await;
        let prompt = |n: &str| format!("{name} {n}");
        for (i, n) in ["one", "two"].into_iter().enumerate() {
            let (_, done) = c.turn(&format!("t{i}"), &thread, &prompt(n)).await;
            assert_eq!(
                done["params"]["turn"]["status"], "completed",
                "{name}: {done}"
            );
        }

        // The app-server goes away and comes back on the same address.
        let address = codex.url.clone();
        codex.stop().await;
        let codex = RunningCodex::start(&address, &home, &mock).await;
        assert_eq!(codex.url, address);
        let three = prompt("three");
        let mut outcome = None;
        // The loss may only be noticed by the request that meets it; the next one reconnects.
        for attempt in 0..2 {
            let answer = c
                .call(
                    json!(format!("r{attempt}")),
                    "turn/start",
                    json!({"threadId": thread, "input": [{"type": "text", "text": three}]}),
                )
                .await;
            if answer.get("result").is_some() {
                outcome = Some(c.until("turn/completed").await);
                break;
            }
            eprintln!("{name}: attempt {attempt} met the lost connection: {answer}");
        }
        let done = outcome.unwrap_or_else(|| panic!("{name}: no turn after the reconnect"));
        assert_eq!(
            done["params"]["turn"]["status"], "completed",
            "{name}: {done}"
        );
        assert_eq!(done["params"]["threadId"], thread);
        let request = request_for(&mock.response_requests(), &three);
        assert_eq!(
            request.last_user_text().unwrap(),
            three,
            "{name}: bare prompt"
        );
        assert!(
            request
                .conversation_texts("user")
                .iter()
                .any(|t| *t == prompt("one")),
            "{name}: the resumed thread kept its history"
        );

        // The next epoch rotates onto a new thread of the same app-server.
        let four = prompt("four");
        let (_, done) = c.turn("t4", &thread, &four).await;
        assert_eq!(
            done["params"]["turn"]["status"], "completed",
            "{name}: {done}"
        );
        assert_eq!(done["params"]["threadId"], thread);
        let request = request_for(&mock.response_requests(), &four);
        assert!(
            request.last_user_text().unwrap().contains(CONTEXT),
            "{name}: the fourth turn rotated onto a projected thread"
        );
        handle.shutdown().await;
        codex.stop().await;
    }
}

/// `GET` on the server's HTTP port: the status line and the body.
async fn http_get(env: &Env, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(env.handle.local_addr.unwrap())
        .await
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// `GET /metrics` after four turns across two epoch changes of the sample engine (one
/// adoption, one reuse, two rotations): turns are counted by outcome, the projection decisions
/// by reason, the projected characters are those the model received, the turn latency and
/// bridge overhead histograms hold one sample per turn, and the connected client is counted.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_turns_and_projection_decisions() {
    let Some(env) = start().await else {
        return;
    };
    let (c, _thread) = four_turns(&env).await;
    // The client has `turn/completed` before the harness recorded the turn: wait (bounded)
    // until the last turn is counted.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let body = loop {
        let (status, body) = http_get(&env, "/metrics").await;
        assert!(status.contains("200"), "{status}");
        let counted = ctxbridge::metrics::sample(&body, "ctxbridge_turn_duration_seconds_count");
        if counted == Some(4.0) || tokio::time::Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let value = |series: &str| {
        ctxbridge::metrics::sample(&body, series).unwrap_or_else(|| panic!("{series}:\n{body}"))
    };
    assert_eq!(
        value("ctxbridge_turns_total{outcome=\"completed\"}"),
        4.0,
        "{body}"
    );
    assert!(!body.contains("outcome=\"backend_error\""), "{body}");
    assert_eq!(value("ctxbridge_turn_duration_seconds_count"), 4.0);
    assert_eq!(value("ctxbridge_bridge_overhead_seconds_count"), 4.0);
    // The adopted first thread, its reuse, then two epoch changes.
    assert_eq!(
        value("ctxbridge_projection_decisions_total{reason=\"missing-thread-binding\",projected=\"true\"}"),
        1.0,
        "{body}"
    );
    assert_eq!(
        value("ctxbridge_projection_decisions_total{reason=\"matching-thread-bootstrap-binding\",projected=\"false\"}"),
        1.0,
        "{body}"
    );
    assert_eq!(
        value("ctxbridge_projection_decisions_total{reason=\"projection-mismatch\",projected=\"true\"}"),
        2.0,
        "{body}"
    );
    // The projected characters are the rendered contexts the model got (the turn inputs of
    // the rotated threads minus the prompt).
    let projected = value("ctxbridge_projected_chars_total");
    assert!(projected > 0.0, "{body}");
    assert_eq!(value("ctxbridge_upstream_restarts_total"), 0.0);
    assert_eq!(value("ctxbridge_connected_clients"), 1.0);
    assert_eq!(value("ctxbridge_lease_takeovers_total"), 0.0);
    drop(c);
    env.handle.shutdown().await;
}

/// A selected engine that cannot start does not pass unnoticed under serve: `/readyz` says
/// `degraded` with the engine, the operation and the error (still 200: turns are answered);
/// `/metrics` has its quarantine from start-up on; and a client whose session turn `legacy`
/// serves gets Codex's `warning` notification naming the engine, once per session, while its
/// turns complete.
#[tokio::test(flavor = "multi_thread")]
async fn a_degraded_engine_is_reported_by_readyz_metrics_and_a_warning() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "plugins": {
            "slots": {"contextEngine": "broken"},
            "entries": {"broken": {"command": ["false"]}}
        },
        "backend": {
            "kind": "codex",
            "command": [binary.display().to_string(), "app-server"],
            "codexHome": dir.path().join("codex-home"),
            "config": codex_app_server_client::overrides_json(&offline_overrides(&mock.base_url())),
        },
        "store": {"path": dir.path().join("state").join("state.db")},
    });
    let config = Config::parse(&config.to_string(), "test.json5").unwrap();
    let args = ServeArgs::listening_on("ws://127.0.0.1:0");
    let handle = serve::start(options(&config, &args).await.unwrap())
        .await
        .unwrap();
    let env = Env { handle, mock, dir };

    let (status, body) = http_get(&env, "/readyz").await;
    assert!(status.contains("200"), "{status}");
    let ready: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["degraded"]["engine"], "broken", "{ready}");
    assert_eq!(ready["degraded"]["operation"], "factory", "{ready}");
    let (_, metrics) = http_get(&env, "/metrics").await;
    assert_eq!(
        ctxbridge::metrics::sample(
            &metrics,
            "ctxbridge_engine_quarantines_total{engine=\"broken\",method=\"factory\"}"
        ),
        Some(1.0),
        "{metrics}"
    );

    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    let (_, done) = c.turn("t1", &thread, "hello").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    let (_, done) = c.turn("t2", &thread, "again").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    // Codex sends warnings of its own (the mock model has no metadata); ctxbridge's are those
    // naming the engine.
    let warnings: Vec<&Value> = c
        .all
        .iter()
        .filter(|m| m["method"] == "warning")
        .filter(|m| {
            m["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("\"broken\"")
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per session: {warnings:?}");
    assert_eq!(warnings[0]["params"]["threadId"], thread.as_str());
    let message = warnings[0]["params"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("context engine \"broken\" is quarantined (failed during factory:"),
        "{message}"
    );
    assert!(warnings[0].get("error").is_none());
    env.handle.shutdown().await;
}
