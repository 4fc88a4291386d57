//! An OpenClaw context-engine plugin written only against the published plugin API
//! (`examples/openclaw-summary-plugin`: a plugin object with a `configSchema`, `node:sqlite`
//! storage, `runtime.llm.complete`, a tool, hooks) runs unchanged through the built `ctxbridge`
//! binary and the Node plugin host (issue 16; docs/engine-protocol.md#the-engine-process-protocol).
//!
//! The plugin needs Node >= 22.5 (`node:sqlite`): the test uses the pinned Node that
//! `hosts/openclaw-node/package.json` installs (`npm ci` there), else a `node` on
//! PATH that is new enough; without either it says so on stderr and passes without running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/node.rs"]
mod node;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use node::node_at_least;
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("OPENCLAW_STATE_DIR")
        .output()
        .unwrap()
}

/// The session-summary plugin serves three turns of one session, each in a new ctxbridge
/// process, without quarantine; by the third turn its `assemble` has summarised the older
/// messages through `runtime.llm.complete` (answered by the mock backend's model), the summary
/// is in the plugin's SQLite database under the engine's own state dir
/// (`<state dir>/engines/<id>`), the session's OpenClaw-format file is under
/// `<state dir>/sessions`, and nothing was written to the user's home.
#[test]
fn published_api_plugin_runs_unchanged_through_ctxbridge() {
    let Some(node) = node_at_least(
        (22, 5),
        "published_api_plugin_runs_unchanged_through_ctxbridge",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let plugin = repo().join("examples/openclaw-summary-plugin");
    let config = json!({
        "plugins": {
            "slots": { "contextEngine": "session-summary" },
            "entries": { "session-summary": {
                "enabled": true,
                "command": [node, host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 20000,
                "config": { "keepRecent": 2 },
            } },
        },
        "backend": { "kind": "mock" },
        "store": { "path": ".ctxbridge/state.db" },
    });
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();

    for prompt in ["My name is Ada.", "I live in Paris.", "Where do I live?"] {
        let out = run(
            dir.path(),
            home.path(),
            &["turn", "--session", "demo", "--json", prompt],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "turn failed: {err}");
        assert!(!err.contains("quarantined for this process"), "{err}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["engineId"], "session-summary", "{report}");
    }

    let db = dir
        .path()
        .join(".ctxbridge/engines/session-summary/home/.session-summary/summary.sqlite");
    assert!(
        db.exists(),
        "the plugin's database is under the engine's state dir"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (summary, covered): (String, i64) = conn
        .query_row("SELECT summary, covered FROM summaries", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(summary, "mock reply 0 to: Write the summary.");
    assert!(
        covered >= 2,
        "the summary covers the older messages: {covered}"
    );
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "nothing written to the user's home"
    );
    let entries = session_file_entries(&dir.path().join(".ctxbridge/sessions/demo.jsonl"));
    assert_eq!(entries.len(), 6, "three turns, user + assistant each");
}

/// Reads an OpenClaw session file and checks its format: the version-4 header for the
/// session, then message entries chained by `parentId` (null first). Returns the entries.
fn session_file_entries(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("session file {}: {e}", path.display()));
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap();
    assert_eq!(header["type"], "session", "{header}");
    assert_eq!(header["version"], 4, "{header}");
    assert!(header["timestamp"].as_str().unwrap().ends_with('Z'));
    let entries: Vec<Value> = lines.collect();
    let mut parent = Value::Null;
    for entry in &entries {
        assert_eq!(entry["parentId"], parent, "{entry}");
        assert!(entry["id"].is_string(), "{entry}");
        parent = entry["id"].clone();
    }
    entries
}

/// The plugin on the Responses backend against the loopback mock model, with a history it
/// did not see: a first turn runs on legacy (the entry disabled), a marker message is then
/// added to the session file as an OpenClaw host would have written it, and the plugin is
/// enabled. Its `bootstrap` reads the `sessionFile` (the marker reaches its database, and it is
/// in no transcript ctxbridge sends), its summary request reaches the model with the plugin's
/// system prompt as instructions (`llm.complete` `systemPrompt`), its `before_prompt_build`
/// system context reaches the developer instructions and its context the turn input, and
/// everything it writes stays under the state dir.
#[tokio::test(flavor = "multi_thread")]
async fn plugin_reads_the_session_file_and_its_prompts_reach_the_model() {
    let Some(node) = node_at_least(
        (22, 5),
        "plugin_reads_the_session_file_and_its_prompts_reach_the_model",
    ) else {
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let plugin = repo().join("examples/openclaw-summary-plugin");
    let config = |enabled: bool| {
        json!({
            "plugins": {
                "slots": { "contextEngine": "session-summary" },
                "entries": { "session-summary": {
                    "enabled": enabled,
                    "command": [node, host.display().to_string(), plugin.display().to_string()],
                    "timeoutMs": 20000,
                    "config": { "keepRecent": 2 },
                } },
            },
            "agent": { "developerInstructions": "Be brief." },
            "backend": { "kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model" },
            "store": { "path": ".ctxbridge/state.db" },
        })
    };
    let write = |value: Value| {
        std::fs::write(
            dir.path().join("ctxbridge.json5"),
            serde_json::to_string_pretty(&value).unwrap(),
        )
        .unwrap()
    };
    let turn = |prompt: &'static str| {
        let dir = dir.path().to_path_buf();
        let home = home.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let out = run(
                &dir,
                &home,
                &["turn", "--session", "demo", "--json", prompt],
            );
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert_eq!(out.status.code(), Some(0), "turn failed: {err}");
            assert!(!err.contains("quarantined for this process"), "{err}");
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        })
    };

    write(config(false));
    let first = turn("My name is Ada.").await.unwrap();
    assert_eq!(first["engineId"], "legacy");
    let session_file = dir.path().join(".ctxbridge/sessions/demo.jsonl");
    let entries = session_file_entries(&session_file);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["message"]["content"], "My name is Ada.");
    // A message only the session file holds (as OpenClaw would have written it).
    let marker = json!({
        "type": "message", "id": "imported-1", "parentId": entries[1]["id"],
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "Marker from the session file: I own a red bicycle."},
    });
    let mut text = std::fs::read_to_string(&session_file).unwrap();
    text.push_str(&format!("{marker}\n"));
    std::fs::write(&session_file, text).unwrap();

    write(config(true));
    for prompt in ["I live in Paris.", "Where do I live?"] {
        let report = turn(prompt).await.unwrap();
        assert_eq!(report["engineId"], "session-summary", "{report}");
    }

    let db = dir
        .path()
        .join(".ctxbridge/engines/session-summary/home/.session-summary/summary.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let imported: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE text LIKE '%red bicycle%'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(imported, 1, "bootstrap imported the session file's marker");

    let requests = mock.response_requests();
    let summary_requests: Vec<_> = requests.iter().filter(|r| !r.store).collect();
    assert!(
        !summary_requests.is_empty(),
        "the plugin's llm.complete reached the model"
    );
    for r in &summary_requests {
        assert_eq!(
            r.instructions.as_deref(),
            Some("You summarise conversations. Keep names, numbers, decisions and open questions. Answer with the summary only."),
            "llm.complete's systemPrompt is the request's instructions"
        );
        assert_eq!(
            r.body["max_output_tokens"], 200,
            "llm.complete's maxTokens (the plugin's summaryMaxTokens) is max_output_tokens"
        );
    }
    let turns: Vec<_> = requests.iter().filter(|r| r.store).collect();
    assert_eq!(turns.len(), 3);
    let guidance = "The session-summary plugin keeps older messages as a summary.";
    assert!(!turns[0]
        .instructions
        .as_deref()
        .unwrap_or("")
        .contains(guidance));
    for r in &turns[1..] {
        let instructions = r.instructions.as_deref().unwrap_or("");
        assert!(instructions.starts_with("Be brief."), "{instructions}");
        assert!(instructions.contains(guidance), "{instructions}");
    }
    let last_input = turns[2].input_texts("user").join("\n");
    assert!(
        last_input.contains("Summary of the earlier conversation:"),
        "before_prompt_build's prependContext is in the turn input: {last_input}"
    );
    assert!(last_input.contains("Where do I live?"), "{last_input}");

    assert_eq!(session_file_entries(&session_file).len(), 7);
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "nothing written to the user's home"
    );
    let mut top: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        vec![".ctxbridge".to_string(), "ctxbridge.json5".to_string()],
        "state stays under the state dir"
    );
}

/// The rollback handle the plugin's `prepareSubagentSpawn` returns (a function, which the Node
/// host keeps and names by `rollbackId`) comes back to ctxbridge as an id and runs when the
/// launch fails: the failed child's row is gone from the plugin's database, a launched
/// child's row stays.
#[tokio::test(flavor = "multi_thread")]
async fn rollback_handle_of_a_prepared_spawn_runs_when_the_launch_fails() {
    let Some(node) = node_at_least(
        (22, 5),
        "rollback_handle_of_a_prepared_spawn_runs_when_the_launch_fails",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let plugin = repo().join("examples/openclaw-summary-plugin");
    let config = json!({
        "plugins": {
            "slots": { "contextEngine": "session-summary" },
            "entries": { "session-summary": {
                "command": [node, host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 20000,
            } },
        },
        "backend": { "kind": "mock" },
        "store": { "path": dir.path().join("state/state.db").display().to_string() },
    });
    let config = ctxbridge::config::Config::parse(&config.to_string(), "ctxbridge.json5").unwrap();
    let app = ctxbridge::app::open(&config).await.unwrap();
    let spawn = |child: &str| ctxbridge::harness::SubagentSpawn {
        parent_session_key: "parent".into(),
        child_session_key: child.into(),
        context_mode: ctxbridge::contract::SubagentContextMode::Fork,
        light_context: false,
        ttl_ms: None,
    };
    let failed = app
        .harness
        .spawn_subagent(spawn("parent:failed"), || async {
            Err::<(), _>("launch failed")
        })
        .await;
    assert!(failed.is_err());
    app.harness
        .spawn_subagent(spawn("parent:launched"), || async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert!(!app.harness.engine().is_quarantined());
    app.harness.shutdown().await;

    let db = dir
        .path()
        .join("state/engines/session-summary/home/.session-summary/summary.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT child_session_key FROM children ORDER BY child_session_key")
        .unwrap();
    let children: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(children, vec!["parent:launched".to_string()]);
}
