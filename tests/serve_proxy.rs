//! `ctxbridge serve` as a Codex app-server proxy (docs/serve.md#the-serve-command): WebSocket
//! clients in front of the real `codex app-server`, run offline against the mock model server —
//! the handshake, shared threads, pass-through, upstream deaths and restarts, oversized replies,
//! invalid messages, request ids, and shutdown. Tests that need Codex skip loudly when it is not
//! installed. Access control is in `serve_proxy_access.rs`, listeners, frames and the `serve`
//! command in `serve_proxy_transport.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_proxy.rs"]
mod serve_proxy_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::time::Duration;

use ctxbridge::serve;
use ctxbridge::store::StateStore;
use ctxbridge_mock_model::ScriptedReply;
use serde_json::json;

use serve_proxy_support::{http_get, pid_alive, with_codex, PATIENCE};
use ws_client::Client;

/// A client's `initialize` is answered from the upstream's with ctxbridge added to
/// `userAgent`; requests before it get Codex's "Not initialized"; a second one is refused.
#[tokio::test]
async fn initialize_handshake() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    let early = c.call(json!(7), "thread/list", json!({})).await;
    assert_eq!(early["error"]["message"], "Not initialized");
    let init = c.initialize(json!(1)).await;
    let agent = init["result"]["userAgent"].as_str().unwrap();
    assert!(agent.contains("ctxbridge/"), "{agent}");
    assert!(init["result"]["codexHome"].is_string(), "{init}");
    let again = c.initialize(json!(2)).await;
    assert_eq!(again["error"]["message"], "Already initialized");
    env.handle.shutdown().await;
}

/// Two clients use the same ids at once (one numbers, one strings); each gets its own
/// answers; a turn streams its notifications with the client's thread id; a second client
/// that resumes the thread gets the thread's notifications too; and when it disconnects
/// mid-turn the first client's turn completes undisturbed.
#[tokio::test]
async fn two_clients_share_a_thread() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let mut a = Client::connect(&env.url()).await;
    let mut b = Client::connect(&env.url()).await;
    a.initialize(json!("init")).await;
    b.initialize(json!(1)).await;
    // The same id from both clients at once.
    a.send(json!({"id": "x-1", "method": "thread/start", "params": {"baseInstructions": "You are a test model."}})).await;
    b.send(json!({"id": 1, "method": "thread/start", "params": {"baseInstructions": "You are a test model."}})).await;
    let mut answer_a = None;
    while answer_a.is_none() {
        let m = a.next().await;
        if m.get("method").is_none() {
            answer_a = Some(m);
        } else {
            a.seen.push(m);
        }
    }
    let answer_a = answer_a.unwrap();
    assert_eq!(answer_a["id"], "x-1");
    let b_start = loop {
        let m = b.next().await;
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(b_start["id"], 1);
    let thread = answer_a["result"]["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(
        Some(thread.as_str()),
        b_start["result"]["thread"]["id"].as_str()
    );

    let first = a
        .call(
            json!("t1"),
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    assert_eq!(first["result"]["turn"]["status"], "inProgress", "{first}");
    let delta = a.until("item/agentMessage/delta").await;
    assert_eq!(delta["params"]["threadId"], thread);
    let done = a.until("turn/completed").await;
    assert_eq!(done["params"]["threadId"], thread);
    assert_eq!(done["params"]["turn"]["status"], "completed");

    // b subscribes by resuming; both see the next turn.
    let resumed = b
        .call(json!(2), "thread/resume", json!({"threadId": thread}))
        .await;
    assert_eq!(resumed["result"]["thread"]["id"], thread, "{resumed}");
    env.mock
        .as_ref()
        .unwrap()
        .push_reply(ScriptedReply::text("slow reply").with_delay(Duration::from_millis(1500)));
    a.call(
        json!("t2"),
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "again"}]}),
    )
    .await;
    let started_b = b.until("turn/started").await;
    assert_eq!(started_b["params"]["threadId"], thread);
    // b leaves mid-turn.
    drop(b);
    let done = a.until("turn/completed").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    let item = a
        .seen
        .iter()
        .any(|m| m["method"] == "item/completed" && m["params"]["item"]["text"] == "slow reply");
    assert!(item, "a got the reply's item: {:?}", a.seen);
    env.handle.shutdown().await;
}

/// An unknown method passes through and the upstream's error comes back under the client's
/// id.
#[tokio::test]
async fn unknown_method_passes_through() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize(json!(1)).await;
    let answer = c.call(json!("u"), "no/such/method", json!({})).await;
    assert!(answer["error"]["message"].is_string(), "{answer}");
    assert!(answer.get("result").is_none());
    let ok = c.call(json!(3), "thread/list", json!({})).await;
    assert!(ok["result"]["data"].is_array(), "{ok}");
    env.handle.shutdown().await;
}

/// An ephemeral thread is pure pass-through: it works, and nothing of it enters the thread
/// map; a normal thread is recorded there.
#[tokio::test]
async fn ephemeral_thread_is_not_recorded() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize(json!(1)).await;
    let eph = c.start_thread(json!(2), true).await;
    let turn = c
        .call(
            json!(3),
            "turn/start",
            json!({"threadId": eph, "input": [{"type": "text", "text": "title please"}]}),
        )
        .await;
    assert!(turn["result"]["turn"]["id"].is_string(), "{turn}");
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["threadId"], eph);
    let normal = c.start_thread(json!(4), false).await;
    assert_eq!(
        env.store
            .load_document(serve::thread_map::NAMESPACE, &eph)
            .unwrap(),
        None
    );
    let entry = env
        .store
        .load_document(serve::thread_map::NAMESPACE, &normal)
        .unwrap()
        .unwrap();
    assert!(entry.contains(&normal), "{entry}");
    env.handle.shutdown().await;
}

/// The upstream child dies mid-turn: the turn fails with an error naming the upstream; the
/// next request starts a new child and `thread/resume` + a turn work on it; after another
/// death a bare `turn/start` resumes the thread by itself.
#[tokio::test]
async fn upstream_death_fails_the_turn_and_restarts() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize(json!(1)).await;
    let thread = c.start_thread(json!(2), false).await;
    env.mock
        .as_ref()
        .unwrap()
        .push_reply(ScriptedReply::text("never").with_delay(Duration::from_secs(120)));
    c.call(
        json!(3),
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "hang"}]}),
    )
    .await;
    c.until("turn/started").await;
    // Kill only once the model holds the hanging request, so the scripted delay is used up.
    while env.mock.as_ref().unwrap().pending_replies() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = std::fs::read_to_string(env.pid_file()).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["threadId"], thread);
    assert_eq!(done["params"]["turn"]["status"], "failed");
    let message = done["params"]["turn"]["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream codex app-server"), "{message}");

    let resumed = c
        .call(json!(4), "thread/resume", json!({"threadId": thread}))
        .await;
    assert_eq!(resumed["result"]["thread"]["id"], thread, "{resumed}");
    let new_pid = std::fs::read_to_string(env.pid_file()).unwrap();
    assert_ne!(pid, new_pid, "a new child runs");
    c.call(
        json!(5),
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "after"}]}),
    )
    .await;
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");

    // Killed again between turns: the next turn alone restarts the child and resumes the
    // thread on it.
    let pid = std::fs::read_to_string(env.pid_file()).unwrap();
    std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    let third = json!({"threadId": thread, "input": [{"type": "text", "text": "third"}]});
    let mut answer = c.call(json!(6), "turn/start", third.clone()).await;
    if answer["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("upstream codex app-server"))
    {
        // The request raced the death: it failed naming the upstream; the next one restarts.
        answer = c.call(json!(7), "turn/start", third).await;
    }
    assert!(answer["result"]["turn"]["id"].is_string(), "{answer}");
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_ne!(pid, std::fs::read_to_string(env.pid_file()).unwrap());
    let (_, metrics) = http_get(env.handle.local_addr.unwrap(), "/metrics", None).await;
    assert_eq!(
        ctxbridge::metrics::sample(&metrics, "ctxbridge_upstream_restarts_total"),
        Some(2.0),
        "two restarts after the first start: {metrics}"
    );
    env.handle.shutdown().await;
}

/// A model reply too big for one upstream line (here a 300 KB reply over a 128 KiB line
/// limit; in the field 20 MiB over 16 MiB) does not leave the session stuck: the real Codex's
/// `item/completed` for it is dropped unread, serve fails the turn — the client hears an
/// `error` and a failed `turn/completed` naming the limit — and the next turn on the same
/// thread completes.
#[tokio::test]
async fn a_reply_over_the_line_limit_fails_its_turn_and_the_session_goes_on() {
    let Some(env) = with_codex(|o| {
        o.upstream = o.upstream.clone().with_max_line_bytes(128 * 1024);
    })
    .await
    else {
        return;
    };
    let mock = env.mock.as_ref().unwrap();
    mock.push_reply(ScriptedReply::text("y".repeat(300_000)));
    let mut c = Client::connect(&env.url()).await;
    c.initialize(json!(1)).await;
    let thread = c.start_thread(json!(2), false).await;
    let started = c
        .call(
            json!(3),
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "a lot"}]}),
        )
        .await;
    assert!(started.get("result").is_some(), "{started}");
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["turn"]["status"], "failed", "{done}");
    let failed_turn = done["params"]["turn"]["id"].clone();
    let reason = done["params"]["turn"]["error"]["message"].as_str().unwrap();
    assert!(
        reason.contains("over the limit of 131072 bytes"),
        "{reason}"
    );
    assert!(
        c.seen
            .iter()
            .any(|m| m["method"] == "error"
                && m["params"]["error"]["message"].as_str() == Some(reason)),
        "no error notification before the completion"
    );
    mock.push_reply(ScriptedReply::text("small again"));
    c.call(
        json!(4),
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "less"}]}),
    )
    .await;
    // The next completion is the new turn's: the failed turn's own (interrupted) completion
    // from Codex is not relayed a second time.
    let next = c.until("turn/completed").await;
    assert_ne!(next["params"]["turn"]["id"], failed_turn, "{next}");
    assert_eq!(next["params"]["turn"]["status"], "completed", "{next}");
    env.handle.shutdown().await;
}

/// Invalid messages that carry an id are answered under that id with -32600 — a `method`
/// that is not a string, an "answer" with neither `result` nor `error`, an answer to a server
/// request nobody asked — before and after `initialize`, instead of being taken for answers
/// and dropped unanswered.
#[tokio::test]
async fn invalid_messages_with_an_id_are_answered() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    /// The next answer (notifications, a `configWarning` say, may come first) is -32600
    /// under `id` and says `text`.
    async fn check(c: &mut Client, id: serde_json::Value, text: &str) {
        let answer = loop {
            let message = c.next().await;
            if message.get("method").is_none() {
                break message;
            }
        };
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(text), "{answer}");
    }
    let mut c = Client::connect(&env.url()).await;
    for initialized in [false, true] {
        if initialized {
            c.initialize(json!(1)).await;
        }
        c.send(json!({"method": 5, "id": 7})).await;
        check(&mut c, json!(7), "`method` must be a string").await;
        c.send(json!({"id": 99})).await;
        check(&mut c, json!(99), "neither a method nor an answer").await;
    }
    c.send(json!({"id": 98, "result": {}})).await;
    check(&mut c, json!(98), "no server request 98 awaits an answer").await;
    c.send(json!({"id": "s", "result": 1, "error": {"code": 1, "message": "x"}}))
        .await;
    check(&mut c, json!("s"), "both `result` and `error`").await;
    env.handle.shutdown().await;
}

/// A request id is answered exactly as the client wrote it, whatever JSON number it is: an id
/// beyond 64 bits (`1180591620717411303424`, which a `serde_json::Value` would round to
/// `1.1805916207174113e+21`) or with a fraction digit, on a result relayed from the real Codex,
/// on Codex's error, on serve's own "Not initialized", and on an invalid message's -32600.
#[tokio::test]
async fn request_ids_are_answered_as_written() {
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    /// The next answer's text (notifications skipped) and its parse.
    async fn answer_text(c: &mut Client) -> (String, serde_json::Value) {
        loop {
            let text = c.next_text().await;
            let message: serde_json::Value = serde_json::from_str(&text).unwrap();
            if message.get("method").is_none() {
                return (text, message);
            }
        }
    }
    let mut c = Client::connect(&env.url()).await;
    c.send_text(r#"{"id":1180591620717411303424,"method":"model/list","params":{}}"#)
        .await;
    let (text, answer) = answer_text(&mut c).await;
    assert!(
        text.starts_with(r#"{"id":1180591620717411303424,"error""#),
        "{text}"
    );
    assert_eq!(answer["error"]["message"], "Not initialized");

    c.initialize(json!(0)).await;
    c.send_text(r#"{"id":1180591620717411303425,"method":"model/list","params":{}}"#)
        .await;
    let (text, answer) = answer_text(&mut c).await;
    assert!(
        text.starts_with(r#"{"id":1180591620717411303425,"result""#),
        "{text}"
    );
    assert!(answer["result"]["data"].is_array(), "{text}");

    c.send_text(r#"{"id":2.50,"method":"no/such/method","params":{}}"#)
        .await;
    let (text, answer) = answer_text(&mut c).await;
    assert!(text.starts_with(r#"{"id":2.50,"error""#), "{text}");
    assert!(answer["error"]["code"].is_i64(), "{text}");

    c.send_text(r#"{"method":5,"id":-1180591620717411303426}"#)
        .await;
    let (text, answer) = answer_text(&mut c).await;
    assert!(
        text.starts_with(r#"{"id":-1180591620717411303426,"error""#),
        "{text}"
    );
    assert_eq!(answer["error"]["code"], -32600);
    env.handle.shutdown().await;
}

/// Shutdown with a turn still running: after the grace period the turn is interrupted (its
/// client sees `turn/completed` with `interrupted`) and the upstream child is stopped.
#[tokio::test]
async fn shutdown_interrupts_running_turns_and_stops_the_child() {
    let Some(env) = with_codex(|o| o.shutdown_grace = Duration::from_millis(300)).await else {
        return;
    };
    let mut c = Client::connect(&env.url()).await;
    c.initialize(json!(1)).await;
    let thread = c.start_thread(json!(2), false).await;
    env.mock
        .as_ref()
        .unwrap()
        .push_reply(ScriptedReply::text("never").with_delay(Duration::from_secs(120)));
    c.call(
        json!(3),
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "hang"}]}),
    )
    .await;
    c.until("turn/started").await;
    let pid = std::fs::read_to_string(env.pid_file()).unwrap();
    let shutdown = tokio::spawn(env.handle.shutdown());
    let done = c.until("turn/completed").await;
    assert_eq!(done["params"]["turn"]["status"], "interrupted", "{done}");
    tokio::time::timeout(PATIENCE, shutdown)
        .await
        .unwrap()
        .unwrap();
    assert!(!pid_alive(&pid), "the upstream child is gone");
}
