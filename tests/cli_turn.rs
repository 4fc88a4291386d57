//! `ctxbridge turn --json` through the built binary, on each backend kind: the in-process mock
//! (embedded default), the real Codex app-server, and the Responses API (both against the
//! loopback mock model server). State persists between invocations: the second turn of a
//! session resumes the thread the first one started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use codex_app_server_client::{locate_codex_binary, offline_overrides, overrides_json};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

const KEYS: [&str; 14] = [
    "sessionKey",
    "engineId",
    "mode",
    "epoch",
    "fingerprint",
    "threadId",
    "threadAction",
    "projected",
    "reason",
    "promptChars",
    "developerInstructionsChars",
    "developerInstructionsDelivery",
    "contextDelivery",
    "reply",
];

fn turn(dir: &Path, session: &str, prompt: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir)
        .args(["turn", "--session", session, "--json", prompt])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "turn failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = KEYS.to_vec();
    want.sort_unstable();
    assert_eq!(
        keys, want,
        "the --json object has exactly the docs/config.md#configuration-reference keys"
    );
    v
}

/// Runs `ctxbridge` with `args` in `dir`; the output, whatever the exit status.
fn ctxbridge(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// `backend` for the real Codex app-server in `dir`, offline against `mock`, plus `extra` keys.
fn codex_backend(binary: &Path, dir: &Path, mock: &MockModelServer, extra: Value) -> Value {
    let overrides = overrides_json(&offline_overrides(&mock.base_url()));
    let mut backend = json!({
        "kind": "codex",
        "command": [binary.display().to_string(), "app-server"],
        "codexHome": dir.join("codex-home"),
        "config": overrides,
    });
    for (k, v) in extra.as_object().unwrap() {
        backend[k] = v.clone();
    }
    backend
}

fn write_config(dir: &Path, config: &Value) {
    std::fs::write(
        dir.join("ctxbridge.json5"),
        serde_json::to_string_pretty(config).unwrap(),
    )
    .unwrap();
}

fn sample_engine(backend: Value) -> Value {
    json!({
        "plugins": {
            "slots": {"contextEngine": "sample-summary"},
            "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": 2}}}
        },
        "agent": {"developerInstructions": "Be brief."},
        "backend": backend,
        "store": {"path": "state/state.db"}
    })
}

/// On the embedded mock: two invocations continue one thread; a third after an epoch change
/// rotates; the binding is durable across processes.
#[test]
fn turn_json_on_the_mock_backend() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &sample_engine(json!({"kind": "mock"})));
    let first = turn(dir.path(), "s1", "hello there");
    assert_eq!(first["engineId"], "sample-summary");
    assert_eq!(first["mode"], "thread_bootstrap");
    assert_eq!(first["threadAction"], "started");
    assert_eq!(first["reason"], "missing-thread-binding");
    assert_eq!(first["developerInstructionsDelivery"], "thread-start");
    let second = turn(dir.path(), "s1", "second message");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(second["reason"], "matching-thread-bootstrap-binding");
    assert_eq!(second["projected"], false);
    assert_eq!(second["promptChars"], "second message".len());
    assert_eq!(second["threadId"], first["threadId"]);
    assert_eq!(second["developerInstructionsDelivery"], "unchanged");
    // With a 2-message window and chunks of 2, the third turn summarises the first exchange.
    let third = turn(dir.path(), "s1", "third message");
    assert_eq!(third["reason"], "projection-mismatch");
    assert_eq!(third["threadAction"], "rotated");
    assert_eq!(third["projected"], true);
    assert_ne!(third["threadId"], first["threadId"]);
    // Another session is independent.
    let other = turn(dir.path(), "s2", "hi");
    assert_eq!(other["threadAction"], "started");
}

/// On the real Codex app-server (offline, against the mock model): two invocations, the
/// second resumes the persisted thread in a new app-server process.
#[tokio::test(flavor = "multi_thread")]
async fn turn_json_on_codex() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!(
            "\n!!!!!!!! SKIPPED turn_json_on_codex: no codex binary (run `npm ci`) !!!!!!!!\n"
        );
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let overrides = overrides_json(&offline_overrides(&mock.base_url()));
    let config = sample_engine(json!({
        "kind": "codex",
        "command": [binary.display().to_string(), "app-server"],
        "codexHome": dir.path().join("codex-home"),
        "config": overrides,
    }));
    write_config(dir.path(), &config);
    let path = dir.path().to_path_buf();
    let (first, second) = tokio::task::spawn_blocking(move || {
        (
            turn(&path, "codex", "first on codex"),
            turn(&path, "codex", "second on codex"),
        )
    })
    .await
    .unwrap();
    assert_eq!(first["threadAction"], "started");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(second["threadId"], first["threadId"]);
    assert_eq!(second["reason"], "matching-thread-bootstrap-binding");
    assert!(!second["reply"].as_str().unwrap().is_empty());
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].body_contains("first on codex"),
        "the resumed thread keeps its history"
    );
    assert_eq!(
        requests[1].last_user_text().as_deref(),
        Some("second on codex")
    );
}

/// On the Responses API backend with `threads: "conversation"` (the default), against the
/// stateful mock: both invocations run on one conversation, whose id is the stable `threadId`;
/// the second request names it, sends no `previous_response_id` and no resent history.
#[tokio::test(flavor = "multi_thread")]
async fn turn_json_on_responses_conversation() {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &sample_engine(
            json!({"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model"}),
        ),
    );
    let path = dir.path().to_path_buf();
    let (first, second) = tokio::task::spawn_blocking(move || {
        (
            turn(&path, "c", "first on a conversation"),
            turn(&path, "c", "second on a conversation"),
        )
    })
    .await
    .unwrap();
    assert_eq!(first["threadAction"], "started");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(first["threadId"], second["threadId"]);
    assert!(first["threadId"].as_str().unwrap().starts_with("conv"));
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.conversation_id.as_deref(), first["threadId"].as_str());
        assert_eq!(r.previous_response_id, None);
    }
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["second on a conversation".to_string()]
    );
}

/// On the Responses API backend with `threads: "chain"` (against the stateful mock): the chain
/// continues across invocations with `previous_response_id` and no resent history.
#[tokio::test(flavor = "multi_thread")]
async fn turn_json_on_responses() {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &sample_engine(
            json!({"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model", "threads": "chain"}),
        ),
    );
    let path = dir.path().to_path_buf();
    let (first, second) = tokio::task::spawn_blocking(move || {
        (
            turn(&path, "r", "first on responses"),
            turn(&path, "r", "second on responses"),
        )
    })
    .await
    .unwrap();
    assert_eq!(first["threadAction"], "started");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(second["reason"], "matching-thread-bootstrap-binding");
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].previous_response_id.as_deref(),
        first["threadId"].as_str()
    );
    assert_eq!(
        requests[1].input_texts("user"),
        vec!["second on responses".to_string()]
    );
    for r in &requests {
        assert!(r
            .instructions
            .as_deref()
            .unwrap_or("")
            .contains("Be brief."));
    }
}

const KEEPER: &str = "Answer in the voice of a lighthouse keeper.";

/// Issue 13.1 on the real Codex, as a user meets it: two `ctxbridge turn` invocations on one
/// session (the second a cold `thread/resume` in a new app-server process), `ctxbridge compact`
/// (legacy engine: Codex's native compaction, again after a cold resume), then a third turn:
/// its model request still carries the configured developer instructions, because every
/// resume re-sends the thread's bound instructions.
#[tokio::test(flavor = "multi_thread")]
async fn developer_instructions_survive_cold_resume_and_compaction_on_codex() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED: no codex binary (run `npm ci`) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({
            "agent": {"developerInstructions": KEEPER},
            "backend": codex_backend(&binary, dir.path(), &mock, json!({})),
            "store": {"path": "state/state.db"}
        }),
    );
    let path = dir.path().to_path_buf();
    let (first, second, compact, third) = tokio::task::spawn_blocking(move || {
        let first = turn(&path, "keeper", "first question");
        let second = turn(&path, "keeper", "second question");
        let compact = ctxbridge(&path, &["compact", "--session", "keeper", "--json"]);
        let third = turn(&path, "keeper", "third question");
        (first, second, compact, third)
    })
    .await
    .unwrap();
    assert!(
        compact.status.success(),
        "compact failed: {}\n{}",
        String::from_utf8_lossy(&compact.stdout),
        String::from_utf8_lossy(&compact.stderr)
    );
    let report: Value = serde_json::from_slice(&compact.stdout).unwrap();
    assert_eq!(report["nativeCompaction"], true, "{report}");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(third["threadAction"], "resumed");
    assert_eq!(third["threadId"], first["threadId"]);
    let requests = mock.response_requests();
    let last = requests.last().unwrap();
    assert_eq!(last.last_user_text().as_deref(), Some("third question"));
    let developer = last.input_texts("developer").join("\n---\n");
    assert!(
        developer.contains(KEEPER),
        "the third turn's model request lost the developer instructions: {developer}"
    );
    // Two turns, the compaction's own model request, the third turn.
    assert_eq!(requests.len(), 4, "turn, turn, compaction, turn");
}

/// A stalled model on the real Codex: with `backend.idleTimeoutMs` set, `ctxbridge turn`
/// fails (exit 1) with a message naming the idle timeout and its setting, and nothing of the
/// turn is recorded: the session's transcript is as it was before.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_codex_turn_fails_clearly_and_records_nothing() {
    use ctxbridge::store::{SqliteStore, StateStore};
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED: no codex binary (run `npm ci`) !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({
            "backend": codex_backend(&binary, dir.path(), &mock, json!({"idleTimeoutMs": 1500})),
            "store": {"path": "state/state.db"}
        }),
    );
    let path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || turn(&path, "stall", "a quick one"))
        .await
        .unwrap();
    // The next model request hangs far longer than the idle timeout.
    mock.push_reply(
        ctxbridge_mock_model::ScriptedReply::text("too late")
            .with_delay(std::time::Duration::from_secs(600)),
    );
    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        ctxbridge(
            &path,
            &["turn", "--session", "stall", "--json", "this one stalls"],
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("idle timeout"), "{stderr}");
    assert!(stderr.contains("backend.idleTimeoutMs"), "{stderr}");
    // Under --json the failure is a JSON object on stdout too.
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["error"]["kind"], "backend", "{report}");
    assert_eq!(report["error"]["session"], "stall", "{report}");
    let message = report["error"]["message"].as_str().unwrap();
    assert!(message.contains("backend.idleTimeoutMs"), "{report}");
    let store = SqliteStore::open(dir.path().join("state/state.db")).unwrap();
    let transcript = store.load_transcript("stall").unwrap();
    let texts: Vec<String> = transcript.iter().map(|e| e.message.plain_text()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "a quick one");
}

/// A typo in `plugins.slots.contextEngine` is a configuration error at its place in the file
/// (exit 2, under `--json` an error of kind `config`), listing the engines that are
/// registered — not a turn answered by legacy with one log line.
#[test]
fn an_unknown_engine_id_is_a_config_error_listing_the_registered_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        "{\n  plugins: {\n    slots: { contextEngine: \"sample-sumary\" },\n    entries: { mine: { command: [\"python3\", \"engine.py\"] } },\n  },\n}\n",
    )
    .unwrap();
    let out = ctxbridge(dir.path(), &["turn", "--session", "s", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ctxbridge.json5:3:29: plugins.slots.contextEngine: no context engine \"sample-sumary\" is registered; the registered engines are: legacy, mine, sample-summary"),
        "{stderr}"
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["error"]["kind"], "config", "{printed}");
    assert!(
        !dir.path().join(".ctxbridge").exists(),
        "nothing ran: no state was written"
    );
}

/// A selected engine that cannot start (`command: ["false"]`) degrades to legacy, and
/// `turn --json` says so: `engineId: "legacy"` and `degraded: {engine, operation, error}`.
/// With `--strict` (or `plugins.strict: true`) the turn fails instead (exit 1, an error of
/// kind `degraded` naming the engine and why) and nothing is answered by legacy; so do `chat`
/// (before its first turn) and `serve` (before it listens) under `plugins.strict: true`.
#[test]
fn a_degraded_engine_shows_in_turn_json_and_strict_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let broken = json!({
        "plugins": {
            "slots": {"contextEngine": "broken"},
            "entries": {"broken": {"command": ["false"]}}
        }
    });
    write_config(dir.path(), &broken);
    let out = ctxbridge(dir.path(), &["turn", "--session", "s", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engineId"], "legacy", "{report}");
    assert_eq!(report["degraded"]["engine"], "broken", "{report}");
    assert_eq!(report["degraded"]["operation"], "factory", "{report}");
    assert!(
        report["degraded"]["error"]
            .as_str()
            .unwrap()
            .contains("did not start"),
        "{report}"
    );

    let out = ctxbridge(
        dir.path(),
        &["turn", "--session", "strict", "--json", "--strict", "hi"],
    );
    assert_eq!(out.status.code(), Some(1));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["error"]["kind"], "degraded", "{printed}");
    let message = printed["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "strict: context engine \"broken\" is quarantined (failed during factory:"
        ),
        "{message}"
    );

    let mut strict = broken.clone();
    strict["plugins"]["strict"] = json!(true);
    write_config(dir.path(), &strict);
    let out = ctxbridge(dir.path(), &["turn", "--session", "strict", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not falling back to legacy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "legacy answered nothing");

    let chat = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir.path())
        .args(["chat", "--session", "strict"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(chat.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&chat.stderr).contains("not falling back to legacy"),
        "{}",
        String::from_utf8_lossy(&chat.stderr)
    );

    strict["backend"] = json!({"kind": "codex", "command": ["/nonexistent/codex", "app-server"]});
    write_config(dir.path(), &strict);
    let serve = ctxbridge(dir.path(), &["serve", "--listen", "ws://127.0.0.1:0"]);
    assert_eq!(serve.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(
        stderr.contains("strict: context engine \"broken\" is quarantined"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening on"), "{stderr}");
}
