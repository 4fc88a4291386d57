//! OpenClaw plugins through the built `ctxbridge` binary and the Node plugin host (issue 16;
//! docs/engine-protocol.md#the-engine-process-protocol, §14): session resets (`ctxbridge reset`, `/reset` in chat) fire `before_reset`
//! then `session_end` and start a new session; the retention sweep fires `session_end`; the
//! commands a plugin registers run through `ctxbridge command` and `/NAME` in chat; and the
//! model calls the session-summary plugin's own tool end to end on the real Codex app-server
//! and on the Responses backend (both offline against the loopback mock model).
//!
//! lossless-claw — the plugin OpenClaw's own docs install — runs unchanged from the shared
//! plugin folder beside the repository (`../shared/plugins/lossless-claw`; skipped loudly when
//! it is not there): every turn, `compact`, the epoch after it, its commands under every name,
//! doctor, and its `lcm_grep` tool called by the model.
//!
//! The recording plugin (`tests/fixtures/openclaw-recording-plugin`) runs on any Node >= 20;
//! the session-summary plugin needs Node >= 22.5 (`node:sqlite`): the pinned one from
//! `hosts/openclaw-node` (`npm ci` there), else a new enough `node` on PATH. Without
//! a Node (or, for the Codex test, without Codex) a test says so on stderr and passes without
//! running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/node.rs"]
mod node;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use codex_app_server_client::{locate_codex_binary, offline_overrides, overrides_json};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest, ScriptedReply};
use node::node_at_least;
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ctxbridge(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("OPENCLAW_STATE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn turn(dir: &Path, session: &str, prompt: &str) -> Value {
    let out = ctxbridge(dir, &["turn", "--session", session, "--json", prompt], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "turn failed: {err}");
    assert!(!err.contains("quarantined"), "{err}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn write_config(dir: &Path, config: &Value) {
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(
        dir.join("ctxbridge.json5"),
        serde_json::to_string_pretty(config).unwrap(),
    )
    .unwrap();
}

/// The recording plugin as the context engine, on `backend`.
fn recorder_config(node: &str, backend: Value) -> Value {
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let plugin = repo().join("tests/fixtures/openclaw-recording-plugin/index.mjs");
    json!({
        "plugins": {
            "slots": { "contextEngine": "recorder" },
            "entries": { "recorder": {
                "command": [node, host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 20000,
            } },
        },
        "backend": backend,
        "store": { "path": ".ctxbridge/state.db" },
    })
}

/// The hooks the recording plugin received, in order.
fn recorded_hooks(dir: &Path) -> Vec<Value> {
    let file = dir.join(".ctxbridge/engines/recorder/hooks.jsonl");
    std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn hook_names(hooks: &[Value]) -> Vec<String> {
    hooks
        .iter()
        .map(|h| h["hook"].as_str().unwrap().to_string())
        .collect()
}

/// `ctxbridge reset`: `before_reset` gets the session's messages and its session file, then
/// `session_end` says the session ended (`reason: "reset"`, its message count, the archived
/// file, the next session id); the session file is archived as `<file>.reset.<timestamp>`
/// (OpenClaw's name), the binding and the transcript are gone, and the next turn starts a new
/// thread for the new session id, for which `session_start` fires.
#[test]
fn reset_fires_before_reset_then_session_end_and_the_next_turn_starts_anew() {
    let Some(node) = node_at_least((20, 0), "reset_fires_before_reset_then_session_end") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &recorder_config(&node, json!({"kind": "mock"})));
    let first = turn(dir.path(), "demo", "Hello one.");
    turn(dir.path(), "demo", "Hello two.");

    let out = ctxbridge(dir.path(), &["reset", "--session", "demo", "--json"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sessionKey"], "demo");
    assert_eq!(report["sessionId"], "demo");
    assert_eq!(report["messageCount"], 4);
    let next = report["nextSessionId"].as_str().unwrap().to_string();
    assert!(
        next.starts_with("demo-") && next.len() > 5,
        "a new session id: {next}"
    );
    let sessions = dir.path().join(".ctxbridge/sessions");
    let archived = PathBuf::from(report["archivedSessionFile"].as_str().unwrap());
    assert_eq!(archived.parent().unwrap(), sessions);
    assert!(
        archived
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("demo.jsonl.reset."),
        "{}",
        archived.display()
    );
    let archived_text = std::fs::read_to_string(&archived).unwrap();
    assert_eq!(
        archived_text
            .lines()
            .filter(|l| l.contains("\"type\":\"message\""))
            .count(),
        4,
        "the archive keeps the ended session's messages"
    );
    assert!(!sessions.join("demo.jsonl").exists(), "the file was moved");

    let conn = rusqlite::Connection::open(dir.path().join(".ctxbridge/state.db")).unwrap();
    let left: i64 = conn
        .query_row(
            "SELECT count(*) FROM transcript WHERE session_id = 'demo'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "the ended session's transcript is dropped");
    let bindings: i64 = conn
        .query_row("SELECT count(*) FROM bindings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(bindings, 0, "the binding is dropped");
    drop(conn);

    let after = turn(dir.path(), "demo", "Hello again.");
    assert_eq!(after["threadAction"], "started", "{after}");
    assert_ne!(after["threadId"], first["threadId"]);

    let hooks = recorded_hooks(dir.path());
    assert_eq!(
        hook_names(&hooks),
        [
            "session_start",
            "before_reset",
            "session_end",
            "session_start"
        ],
        "{hooks:?}"
    );
    assert_eq!(hooks[0]["event"]["sessionId"], "demo");
    let before = &hooks[1]["event"];
    assert_eq!(before["reason"], "reset");
    assert_eq!(
        before["messageTexts"],
        json!([
            "Hello one.",
            "mock reply 1 to: Hello one.",
            "Hello two.",
            "mock reply 2 to: Hello two."
        ]),
        "{before}"
    );
    assert_eq!(
        before["sessionFile"],
        sessions.join("demo.jsonl").display().to_string()
    );
    assert_eq!(hooks[1]["ctx"]["sessionId"], "demo");
    let end = &hooks[2]["event"];
    assert_eq!(end["sessionId"], "demo");
    assert_eq!(end["sessionKey"], "demo");
    assert_eq!(end["messageCount"], 4);
    assert_eq!(end["reason"], "reset");
    assert_eq!(end["sessionFile"], archived.display().to_string());
    assert_eq!(end["transcriptArchived"], true);
    assert_eq!(end["nextSessionId"], next.as_str());
    assert_eq!(hooks[3]["event"]["sessionId"], next.as_str());
    assert_eq!(hooks[3]["event"]["sessionKey"], "demo");
}

/// `ctxbridge command NAME ARGS --session K` runs the plugin's command in the session and
/// prints its reply; a reply with `isError` exits 1; an unknown command exits 1 naming the
/// commands the engine has.
#[test]
fn command_subcommand_runs_a_plugin_command() {
    let Some(node) = node_at_least((20, 0), "command_subcommand_runs_a_plugin_command") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &recorder_config(&node, json!({"kind": "mock"})));

    let out = ctxbridge(
        dir.path(),
        &["command", "echo", "hello", "world", "--session", "demo"],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echo: hello world (session demo)\n"
    );

    let out = ctxbridge(
        dir.path(),
        &["command", "/echo", "fail", "--session", "demo", "--json"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        reply,
        json!({"text": "echo failed on purpose", "isError": true})
    );

    let out = ctxbridge(dir.path(), &["command", "nope", "--session", "demo"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no command /nope (it has: /echo)"),
        "{err}"
    );
}

/// In `ctxbridge chat`, `/echo …` runs the plugin's command (not a turn), other lines are
/// turns, and `/reset` resets the session (the hooks fire in order).
#[test]
fn chat_runs_plugin_commands_and_resets() {
    let Some(node) = node_at_least((20, 0), "chat_runs_plugin_commands_and_resets") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &recorder_config(&node, json!({"kind": "mock"})));
    let out = ctxbridge(
        dir.path(),
        &["chat", "--session", "talk"],
        Some("/echo hi there\nHello.\n/reset\n/echo after\n/quit\n"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(", /echo"), "the banner lists it: {stdout}");
    assert!(
        stdout.contains("echo: hi there (session talk)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("mock reply 1 to: Hello."), "{stdout}");
    assert!(
        stdout.contains("[reset: 2 messages ended; next session talk-"),
        "{stdout}"
    );
    assert!(
        stdout.contains("echo: after (session talk-"),
        "after the reset, commands run in the new session: {stdout}"
    );
    assert_eq!(
        hook_names(&recorded_hooks(dir.path())),
        ["session_start", "before_reset", "session_end"]
    );
}

/// The retention sweep fires `session_end` (`reason: "idle"`, the message count it removed)
/// for a session it sweeps.
#[tokio::test(flavor = "multi_thread")]
async fn retention_sweep_fires_session_end() {
    let Some(node) = node_at_least((20, 0), "retention_sweep_fires_session_end") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = recorder_config(&node, json!({"kind": "mock"}));
    config["store"] = json!({
        "path": dir.path().join(".ctxbridge/state.db").display().to_string(),
        "retention": "off",
    });
    let parse = |value: &Value| {
        ctxbridge::config::Config::parse(&value.to_string(), "ctxbridge.json5").unwrap()
    };
    let app = ctxbridge::app::open(&parse(&config)).await.unwrap();
    app.harness
        .turn(ctxbridge::harness::TurnSpec::new("old", "Hello."))
        .await
        .unwrap();
    app.harness.shutdown().await;
    drop(app);

    config["store"]["retention"] = json!("1ms");
    let app = ctxbridge::app::open(&parse(&config)).await.unwrap();
    // The sweep runs at start in the background; wait for its hook (bounded by the test
    // runner, not by a timed assertion).
    let end = loop {
        if let Some(end) = recorded_hooks(dir.path())
            .into_iter()
            .find(|h| h["hook"] == "session_end")
        {
            break end;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    app.harness.shutdown().await;
    assert_eq!(end["event"]["sessionId"], "old", "{end}");
    assert_eq!(end["event"]["reason"], "idle", "{end}");
    assert_eq!(end["event"]["messageCount"], 2, "{end}");
    assert_eq!(end["ctx"]["sessionId"], "old", "{end}");
}

/// The session-summary plugin, unchanged: its `/summary` command (run by `ctxbridge command`)
/// shows the summary its `assemble` wrote for the session; `ctxbridge reset` makes its
/// `session_end` handler forget the ended session (its rows leave the plugin's SQLite
/// database), and the command then runs in the new, empty session.
#[test]
fn summary_plugin_command_and_session_end_on_reset() {
    let Some(node) = node_at_least((22, 5), "summary_plugin_command_and_session_end_on_reset")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = summary_config(&node, json!({"kind": "mock"}));
    config["plugins"]["entries"]["session-summary"]["config"]["keepRecent"] = json!(2);
    write_config(dir.path(), &config);
    for prompt in ["My name is Ada.", "I live in Paris.", "Where do I live?"] {
        turn(dir.path(), "demo", prompt);
    }
    let summary = |dir: &Path| {
        let out = ctxbridge(dir, &["command", "summary", "--session", "demo"], None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = summary(dir.path());
    assert!(
        before.starts_with("mock reply ") && before.contains("Write the summary."),
        "{before}"
    );
    assert!(before.contains("(covers "), "{before}");

    let db = dir
        .path()
        .join(".ctxbridge/engines/session-summary/home/.session-summary/summary.sqlite");
    let rows = |table: &str| -> i64 {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE session_id = 'demo'"),
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert!(rows("messages") >= 6);
    assert_eq!(rows("summaries"), 1);

    let out = ctxbridge(dir.path(), &["reset", "--session", "demo"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rows("messages"), 0, "session_end forgot the session");
    assert_eq!(rows("summaries"), 0, "session_end forgot its summary");
    assert_eq!(summary(dir.path()), "no summary yet (0 subagents)\n");
}

/// `backend` for the real Codex app-server in `dir`, offline against `mock`.
fn codex_backend(binary: &Path, dir: &Path, mock: &MockModelServer) -> Value {
    let overrides = overrides_json(&offline_overrides(&mock.base_url()));
    json!({
        "kind": "codex",
        "command": [binary.display().to_string(), "app-server"],
        "codexHome": dir.join("codex-home"),
        "config": overrides,
    })
}

/// The session-summary plugin, unchanged, on `backend`; `keepRecent` is large so that no
/// summary request takes a scripted model reply.
fn summary_config(node: &str, backend: Value) -> Value {
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let plugin = repo().join("examples/openclaw-summary-plugin");
    json!({
        "plugins": {
            "slots": { "contextEngine": "session-summary" },
            "entries": { "session-summary": {
                "command": [node, host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 20000,
                "config": { "keepRecent": 50 },
            } },
        },
        "backend": backend,
        "store": { "path": ".ctxbridge/state.db" },
    })
}

/// Two turns in `session` of a configuration written in `dir` whose engine is `engine`: "I live
/// in Paris.", then `prompt`, in which the model (scripted) calls `tool` with `arguments`.
/// Returns the model's requests of the second turn.
async fn tool_turn(
    dir: &Path,
    mock: &MockModelServer,
    (session, engine): (&'static str, &str),
    (tool, arguments): (&str, &str),
    prompt: &'static str,
) -> Vec<RecordedRequest> {
    let path = dir.to_path_buf();
    let first = tokio::task::spawn_blocking(move || turn(&path, session, "I live in Paris."))
        .await
        .unwrap();
    assert_eq!(first["engineId"], engine, "{first}");
    let before = mock.response_requests().len();
    mock.push_reply(ScriptedReply::tool_call(tool, arguments));
    let path = dir.to_path_buf();
    let second = tokio::task::spawn_blocking(move || turn(&path, session, prompt))
        .await
        .unwrap();
    assert_eq!(second["engineId"], engine, "{second}");
    mock.response_requests().split_off(before)
}

/// The `function_call_output` items of `requests` (what tools answered the model).
fn function_call_outputs(requests: &[RecordedRequest]) -> Vec<&Value> {
    requests
        .iter()
        .flat_map(|r| r.input.iter())
        .filter(|item| item["type"] == "function_call_output")
        .collect()
}

/// Two turns of the session-summary plugin; in the second the model (scripted) calls the
/// plugin's tool `session_recall {"query": "Paris"}`. The plugin runs it against its SQLite
/// store for the turn's session (only the plugin holds "user: I live in Paris." in that form),
/// and the model's next request carries that output as the call's `function_call_output`.
async fn model_calls_the_plugin_tool(backend: impl Fn(&Path, &MockModelServer) -> Value) {
    let Some(node) = node_at_least((22, 5), "model_calls_the_plugin_tool") else {
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &summary_config(&node, backend(dir.path(), &mock)),
    );
    let this_turn = tool_turn(
        dir.path(),
        &mock,
        ("demo", "session-summary"),
        ("session_recall", r#"{"query":"Paris"}"#),
        "Where do I live? Use session_recall.",
    )
    .await;
    assert!(
        this_turn[0].body_contains("session_recall"),
        "the model is offered the plugin's tool: {}",
        this_turn[0].body
    );
    let outputs = function_call_outputs(&this_turn);
    assert_eq!(outputs.len(), 1, "one tool output reached the model");
    // Codex sends the output as text, or as content parts; either way it holds the text.
    let output = outputs[0]["output"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| outputs[0]["output"].to_string());
    assert!(
        output.contains("user: I live in Paris."),
        "the plugin's tool output (from its SQLite store) reached the model: {}",
        outputs[0]
    );
}

/// The plugin's tool, called by the model, on the real Codex app-server.
#[tokio::test(flavor = "multi_thread")]
async fn model_calls_the_plugin_tool_on_codex() {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("SKIPPED model_calls_the_plugin_tool_on_codex: no codex binary (run `npm ci` at the repo root or set CODEX_BIN)");
        return;
    };
    model_calls_the_plugin_tool(|dir, mock| codex_backend(&binary, dir, mock)).await;
}

/// The plugin's tool, called by the model, on the Responses backend.
#[tokio::test(flavor = "multi_thread")]
async fn model_calls_the_plugin_tool_on_responses() {
    model_calls_the_plugin_tool(
        |_, mock| json!({"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model"}),
    )
    .await;
}

/// lossless-claw as built by its authors, from the shared plugin folder beside the
/// repository; None (with a loud note naming `test`) when it is not there.
fn lossless_claw(test: &str) -> Option<PathBuf> {
    let dir = repo().join("../shared/plugins/lossless-claw");
    if dir.join("dist/index.js").is_file() {
        return Some(dir);
    }
    eprintln!(
        "SKIPPED {test}: no lossless-claw build at {} (the shared plugin folder)",
        dir.display()
    );
    None
}

/// lossless-claw, unchanged, on `backend`, with the small config its folder documents (so it
/// compacts within a few turns) and its database in `dir`.
fn lossless_config(node: &str, plugin: &Path, dir: &Path, backend: Value) -> Value {
    let host = repo().join("hosts/openclaw-node/host.mjs");
    json!({
        "plugins": {
            "slots": { "contextEngine": "lossless-claw" },
            "entries": { "lossless-claw": {
                "command": [node, host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 30000,
                "config": {
                    "freshTailCount": 2, "leafChunkTokens": 200, "leafMinFanout": 2,
                    "leafTargetTokens": 100, "summaryModel": "mock/mock-model",
                    "databasePath": dir.join("engine.db"),
                },
            } },
        },
        "backend": backend,
        "store": { "path": ".ctxbridge/state.db" },
    })
}

/// lossless-claw on `backend`: it loads (its `registerSessionAction` is accepted, not
/// refused), serves every turn projecting its context once per epoch, compacts through its own
/// summaries when asked (`native compaction: false`), after which the next turn starts a new
/// epoch with the summary projected once and the turn after reuses the thread; its command
/// answers as `/lcm` and as `/lossless` (its native name); doctor passes and lists the seam it
/// registered that this host does not offer.
fn lossless_claw_session(test: &str, backend: impl FnOnce(&Path) -> Value) {
    let Some(plugin) = lossless_claw(test) else {
        return;
    };
    let Some(node) = node_at_least((22, 5), test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &lossless_config(&node, &plugin, dir.path(), backend(dir.path())),
    );
    let first = turn(dir.path(), "lcm", "Hello. I live in Paris and keep bees.");
    assert_eq!(first["engineId"], "lossless-claw", "{first}");
    assert_eq!(first["mode"], "thread_bootstrap", "{first}");
    assert_eq!(first["projected"], true, "{first}");
    let epoch = first["epoch"].clone();
    for i in 2..=6 {
        let prompt = format!("Turn {i}: tell me more about bees, honey and the hive, in detail.");
        let next = turn(dir.path(), "lcm", &prompt);
        assert_eq!(next["engineId"], "lossless-claw", "{next}");
        assert_eq!(
            next["projected"], false,
            "turn {i} reused the thread: {next}"
        );
        assert_eq!(next["epoch"], epoch, "{next}");
    }

    let out = ctxbridge(dir.path(), &["compact", "--session", "lcm"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("compacted: true (engine lossless-claw, native compaction: false)"),
        "{text}"
    );

    let after = turn(dir.path(), "lcm", "And after the compaction?");
    assert_eq!(after["engineId"], "lossless-claw", "{after}");
    assert_ne!(
        after["epoch"], epoch,
        "a new epoch after compaction: {after}"
    );
    assert_eq!(after["threadAction"], "rotated", "{after}");
    assert_eq!(after["projected"], true, "{after}");
    let again = turn(dir.path(), "lcm", "Once more.");
    assert_eq!(
        again["projected"], false,
        "projected once per epoch: {again}"
    );
    assert_eq!(again["epoch"], after["epoch"], "{again}");

    for name in ["lcm", "lossless"] {
        let out = ctxbridge(dir.path(), &["command", name, "--session", "lcm"], None);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "/{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Lossless Claw v"), "/{name}: {text}");
    }

    let out = ctxbridge(dir.path(), &["doctor", "--json"], None);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["passes"], true, "{report}");
    assert_eq!(report["activeEngineId"], "lossless-claw", "{report}");
    assert_eq!(
        report["unoffered"],
        json!(["api.session.controls.registerSessionAction"]),
        "{report}"
    );
}

/// lossless-claw's session on the mock backend (see [`lossless_claw_session`]).
#[test]
fn lossless_claw_serves_compacts_and_answers_its_commands() {
    lossless_claw_session(
        "lossless_claw_serves_compacts_and_answers_its_commands",
        |_| json!({"kind": "mock"}),
    );
}

/// lossless-claw's session on the real Codex app-server, offline against the loopback mock
/// model (see [`lossless_claw_session`]).
#[tokio::test(flavor = "multi_thread")]
async fn lossless_claw_serves_compacts_and_answers_its_commands_on_codex() {
    let test = "lossless_claw_serves_compacts_and_answers_its_commands_on_codex";
    let Some(binary) = locate_codex_binary() else {
        eprintln!(
            "SKIPPED {test}: no codex binary (run `npm ci` at the repo root or set CODEX_BIN)"
        );
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    tokio::task::spawn_blocking(move || {
        lossless_claw_session(test, |dir| codex_backend(&binary, dir, &mock));
    })
    .await
    .unwrap();
}

/// lossless-claw's tools reach the model on the Responses backend (offline against the
/// loopback mock model), and the model's scripted call of `lcm_grep {"pattern": "Paris"}`
/// runs in the plugin against its own store of the session: its output, naming what the user
/// said, goes back to the model as the call's `function_call_output`.
#[tokio::test(flavor = "multi_thread")]
async fn lossless_claw_tool_is_called_by_the_model() {
    let test = "lossless_claw_tool_is_called_by_the_model";
    let Some(plugin) = lossless_claw(test) else {
        return;
    };
    let Some(node) = node_at_least((22, 5), test) else {
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend = json!({"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model"});
    write_config(
        dir.path(),
        &lossless_config(&node, &plugin, dir.path(), backend),
    );
    let this_turn = tool_turn(
        dir.path(),
        &mock,
        ("grep", "lossless-claw"),
        ("lcm_grep", r#"{"pattern":"Paris"}"#),
        "Where do I live? Use lcm_grep.",
    )
    .await;
    for tool in ["lcm_grep", "lcm_describe", "lcm_expand"] {
        assert!(
            this_turn[0].body_contains(tool),
            "the model is offered {tool}: {}",
            this_turn[0].body
        );
    }
    let outputs = function_call_outputs(&this_turn);
    assert_eq!(outputs.len(), 1, "one tool output reached the model");
    let output = outputs[0]["output"].to_string();
    assert!(
        output.contains("Paris"),
        "lcm_grep's output (from the plugin's store) reached the model: {}",
        outputs[0]
    );
}
