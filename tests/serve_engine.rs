//! `ctxbridge serve` with a context engine behind it (docs/serve.md#the-serve-command "Sessions",
//! "Turns", "Compaction"): a WebSocket client in front of the real `codex app-server` (offline,
//! mock model), the sample `sample-summary` thread_bootstrap engine configured with a tiny window
//! so its epoch changes every turn from the third on — turns across epochs, a stalled turn,
//! resume after a restart, manual compaction, context delivery and the settings of rotated
//! threads. Reads of the conversation are in `serve_engine_reads.rs`, `backend.url`, metrics and
//! readiness in `serve_engine_ops.rs`. Skips loudly without Codex.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_engine.rs"]
mod serve_engine_support;
#[path = "support/serve.rs"]
mod serve_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::time::Duration;

use codex_app_server_client::locate_codex_binary;
use ctxbridge::store::StateStore;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

use serve_engine_support::{
    projections_in, request_for, serve_in, start, start_with, turn_input, Env, CONTEXT,
    ENGINE_INSTRUCTIONS, PATIENCE,
};
use ws_client::Client;

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
