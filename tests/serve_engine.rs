//! `ctxbridge serve` with a context engine behind it (SPEC §16 "Sessions", "Turns",
//! "Compaction"): a WebSocket client in front of the real `codex app-server` (offline, mock
//! model), the sample `sample-summary` thread_bootstrap engine configured with a tiny window so
//! its epoch changes every turn from the third on. Skips loudly without Codex.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides, ConfigValue};
use ctxbridge::config::Config;
use ctxbridge::serve::command::{options, ServeArgs};
use ctxbridge::serve::{self, ServeHandle, DEFAULT_MAX_MESSAGE_BYTES};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A generous bound so a broken proxy fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(60);
/// The marker of a rendered projection in a turn input (SPEC §9.2).
const CONTEXT: &str = "<conversation_context>";
/// Text of the sample engine's `systemPromptAddition`.
const ENGINE_INSTRUCTIONS: &str = "Context comes from the sample summary engine";

struct Env {
    handle: ServeHandle,
    mock: MockModelServer,
    dir: tempfile::TempDir,
}

/// `serve` built from a configuration selecting `sample-summary` on the real Codex (None:
/// Codex is not installed).
async fn start() -> Option<Env> {
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = serve_in(dir.path(), &mock, 2).await;
    Some(Env { handle, mock, dir })
}

/// A server on the state (store, Codex home) kept in `dir`; the sample engine keeps a window
/// of 2 messages and summarises `chunk` at a time.
async fn serve_in(dir: &Path, mock: &MockModelServer, chunk: u64) -> ServeHandle {
    serve_with(dir, mock, chunk, json!({})).await
}

/// As [`serve_in`] with a `projection` section.
async fn serve_with(
    dir: &Path,
    mock: &MockModelServer,
    chunk: u64,
    projection: Value,
) -> ServeHandle {
    let binary = locate_codex_binary().unwrap();
    let mut overrides = serde_json::Map::new();
    for (k, v) in offline_overrides(&mock.base_url()) {
        let value = match v {
            ConfigValue::String(s) => json!(s),
            ConfigValue::Bool(b) => json!(b),
            ConfigValue::Integer(i) => json!(i),
            ConfigValue::Float(f) => json!(f),
            other => panic!("unexpected override value {other:?}"),
        };
        overrides.insert(k, value);
    }
    let config = json!({
        "plugins": {
            "slots": {"contextEngine": "sample-summary"},
            "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": chunk}}}
        },
        "agent": {"developerInstructions": "Be brief."},
        "backend": {
            "kind": "codex",
            "command": [binary.display().to_string(), "app-server"],
            "codexHome": dir.join("codex-home"),
            "config": overrides,
        },
        "store": {"path": dir.join("state").join("state.db")},
        "projection": projection,
    });
    let config = Config::parse(&config.to_string(), "test.json5").unwrap();
    let args = ServeArgs {
        listen: "ws://127.0.0.1:0".into(),
        ws_auth: None,
        ws_token_file: None,
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
    };
    let options = options(&config, &args).await.unwrap();
    serve::start(options).await.unwrap()
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

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A test WebSocket client that keeps every message it received.
struct Client {
    ws: WsStream,
    /// Notifications and server requests not consumed yet.
    seen: Vec<Value>,
    /// Every message received, in order.
    all: Vec<Value>,
}

impl Client {
    async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Client {
            ws,
            seen: Vec::new(),
            all: Vec::new(),
        }
    }

    async fn next(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("no message in time")
                .expect("connection closed")
                .unwrap();
            if let Message::Text(text) = frame {
                let message: Value = serde_json::from_str(&text).unwrap();
                self.all.push(message.clone());
                return message;
            }
        }
    }

    async fn call(&mut self, id: Value, method: &str, params: Value) -> Value {
        let request = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::Text(request.to_string()))
            .await
            .unwrap();
        loop {
            let message = self.next().await;
            if message.get("id") == Some(&id) && message.get("method").is_none() {
                return message;
            }
            self.seen.push(message);
        }
    }

    async fn initialize(&mut self) {
        let init = self
            .call(json!(0), "initialize", json!({"clientInfo": {"name": "test", "version": "1"}, "capabilities": {"experimentalApi": true}}))
            .await;
        assert!(init["result"].is_object(), "{init}");
        self.ws
            .send(Message::Text(json!({"method": "initialized"}).to_string()))
            .await
            .unwrap();
    }

    async fn until(&mut self, method: &str) -> Value {
        if let Some(i) = self.seen.iter().position(|m| m["method"] == method) {
            return self.seen.remove(i);
        }
        loop {
            let message = self.next().await;
            if message["method"] == method {
                return message;
            }
            self.seen.push(message);
        }
    }

    async fn start_thread(&mut self, id: Value, ephemeral: bool) -> String {
        let answer = self
            .call(
                id,
                "thread/start",
                json!({"baseInstructions": "You are a test model.", "ephemeral": ephemeral}),
            )
            .await;
        answer["result"]["thread"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned()
    }

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
    c.initialize().await;
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
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = serve_in(dir.path(), &mock, 4).await;
    let env = Env { handle, mock, dir };
    let thread = {
        let mut c = Client::connect(&env.url()).await;
        c.initialize().await;
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
    c.initialize().await;
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
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = serve_in(dir.path(), &mock, 4).await;
    let env = Env { handle, mock, dir };
    let mut c = Client::connect(&env.url()).await;
    c.initialize().await;
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

/// With `projection.codexContextDelivery: "additional-context"` a projecting turn reaches the
/// model as the bare prompt plus the context in a separate (developer) item, so Codex's own
/// user message holds only the user's words.
#[tokio::test(flavor = "multi_thread")]
async fn additional_context_delivery_keeps_the_user_message_clean() {
    if locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED serve_engine: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    }
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let projection = json!({"codexContextDelivery": "additional-context"});
    let handle = serve_with(dir.path(), &mock, 2, projection).await;
    let env = Env { handle, mock, dir };
    let mut c = Client::connect(&env.url()).await;
    c.initialize().await;
    let thread = c.start_thread(json!(1), false).await;
    for (id, text) in [("a", "one"), ("b", "two"), ("c", "three")] {
        let (_, done) = c.turn(id, &thread, text).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    assert_ne!(env.backend_of(&thread), thread, "the third turn rotated");
    let request = request_for(&env.mock.response_requests(), "three");
    assert_eq!(request.last_user_text().unwrap(), "three", "bare prompt");
    assert!(
        request.body_contains("summarised"),
        "the context reached the model"
    );
    assert_eq!(
        projections_in(&request),
        0,
        "no projection in a user message"
    );
    env.handle.shutdown().await;
}
