//! An OpenClaw context-engine plugin written only against the published plugin API
//! (`examples/openclaw-summary-plugin`: a plugin object with a `configSchema`, `node:sqlite`
//! storage, `runtime.llm.complete`, a tool, hooks) runs unchanged through the built `ctxbridge`
//! binary and the Node plugin host (issue 16; SPEC §13).
//!
//! The plugin needs Node >= 22.5 (`node:sqlite`): the test uses the pinned Node that
//! `examples/openclaw-plugin-host/package.json` installs (`npm ci` there), else a `node` on
//! PATH that is new enough; without either it says so on stderr and passes without running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `(major, minor)` of a Node binary, or None when it does not run.
fn node_version(node: &str) -> Option<(u32, u32)> {
    let out = Command::new(node)
        .args(["-p", "process.versions.node"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A Node that has `node:sqlite`: the pinned one, else `node` on PATH; None (with a loud
/// note naming `test`) when neither is new enough.
fn sqlite_node(test: &str) -> Option<String> {
    let pinned = repo().join("examples/openclaw-plugin-host/node_modules/.bin/node");
    for candidate in [pinned.display().to_string(), "node".to_string()] {
        if let Some(version) = node_version(&candidate) {
            if version >= (22, 5) {
                return Some(candidate);
            }
        }
    }
    eprintln!(
        "SKIPPED {test}: no Node >= 22.5 (run `npm ci` in examples/openclaw-plugin-host for the pinned one)"
    );
    None
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
/// is in the plugin's SQLite database under the engine's own state dir (below the agent dir
/// ctxbridge gives it),
/// and nothing was written to the user's home.
#[test]
fn published_api_plugin_runs_unchanged_through_ctxbridge() {
    let Some(node) = sqlite_node("published_api_plugin_runs_unchanged_through_ctxbridge") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let host = repo().join("examples/openclaw-plugin-host/host.mjs");
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

    let db = dir.path().join(
        ".ctxbridge/agents/main/engines/session-summary/home/.session-summary/summary.sqlite",
    );
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
}
