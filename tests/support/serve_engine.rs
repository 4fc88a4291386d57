//! Shared by the `serve_engine*` tests: `ctxbridge serve` with the sample `sample-summary`
//! thread_bootstrap engine in front of the real `codex app-server` (offline, mock model), a
//! client turn, and what the model was sent. A binary including this module also declares
//! `serve_support` (support/serve.rs) and `ws_client` (support/ws_client.rs).

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use codex_app_server_client::locate_codex_binary;
use ctxbridge::serve::{self, ServeHandle};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest};
use serde_json::{json, Value};

use crate::serve_support;
use crate::ws_client::Client;

/// A generous bound so a broken proxy fails the test instead of hanging it.
pub const PATIENCE: Duration = Duration::from_secs(60);
/// The marker of a rendered projection in a turn input (docs/architecture.md#rendering).
pub const CONTEXT: &str = "<conversation_context>";
/// Text of the sample engine's `systemPromptAddition`.
pub const ENGINE_INSTRUCTIONS: &str = "Context comes from the sample summary engine";

pub struct Env {
    pub handle: ServeHandle,
    pub mock: MockModelServer,
    pub dir: tempfile::TempDir,
}

/// `serve` built from a configuration selecting `sample-summary` on the real Codex (None:
/// Codex is not installed), as [`serve_in`] with chunks of 2.
pub async fn start() -> Option<Env> {
    start_with(2, turn_input()).await
}

/// As [`start`] with chunks of `chunk` and the `projection` section (see [`serve_with`]).
pub async fn start_with(chunk: u64, projection: Value) -> Option<Env> {
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
pub fn turn_input() -> Value {
    json!({"codexContextDelivery": "turn-input"})
}

/// A server on the state (store, Codex home) kept in `dir`; the sample engine keeps a window
/// of 2 messages and summarises `chunk` at a time. The projection goes in the turn input
/// (set explicitly: on Codex 0.171.0 the default is additional context).
pub async fn serve_in(dir: &Path, mock: &MockModelServer, chunk: u64) -> ServeHandle {
    serve_with(dir, mock, chunk, turn_input()).await
}

/// As [`serve_in`] with a `projection` section.
pub async fn serve_with(
    dir: &Path,
    mock: &MockModelServer,
    chunk: u64,
    projection: Value,
) -> ServeHandle {
    let binary = locate_codex_binary().unwrap();
    serve_support::serve_sample_engine(dir, mock, &binary, chunk, projection).await
}

impl Env {
    pub fn url(&self) -> String {
        format!("ws://{}", self.handle.local_addr.unwrap())
    }

    /// The state store the server writes (opened beside it).
    pub fn store(&self) -> SqliteStore {
        SqliteStore::open(self.dir.path().join("state").join("state.db")).unwrap()
    }

    /// The backend thread currently serving a client thread id.
    pub fn backend_of(&self, client: &str) -> String {
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
    pub async fn turn(&mut self, id: &str, thread: &str, text: &str) -> (Value, Value) {
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
pub fn request_for(requests: &[RecordedRequest], prompt: &str) -> RecordedRequest {
    requests
        .iter()
        .rev()
        .find(|r| r.last_user_text().is_some_and(|t| t.ends_with(prompt)))
        .unwrap_or_else(|| panic!("no model request for {prompt:?}"))
        .clone()
}

/// How many user messages of a request carry a rendered projection.
pub fn projections_in(request: &RecordedRequest) -> usize {
    request
        .conversation_texts("user")
        .iter()
        .filter(|t| t.contains(CONTEXT))
        .count()
}

/// The prompts of [`four_turns`].
pub const FOUR_PROMPTS: [&str; 4] = [
    "hello there",
    "second message",
    "third message",
    "fourth message",
];

/// A client that started a session and ran [`FOUR_PROMPTS`] in it, each completed: with the
/// sample engine of [`start`] turns 3 and 4 rotate onto new backend threads. The client and
/// the client thread id.
pub async fn four_turns(env: &Env) -> (Client, String) {
    let mut c = Client::connect(&env.url()).await;
    c.initialize_ok().await;
    let thread = c.start_thread(json!(1), false).await;
    for (i, prompt) in FOUR_PROMPTS.iter().enumerate() {
        let (_, done) = c.turn(&format!("t{i}"), &thread, prompt).await;
        assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    }
    (c, thread)
}
