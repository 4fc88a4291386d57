//! A published OpenClaw context-engine plugin from npm runs unchanged through `ctxbridge`
//! (issue 16): `@robertogongora/graphiti` (pinned in `tests/openclaw-plugins/package.json`,
//! installed by `.ci/run` with `npm ci --prefix tests/openclaw-plugins`), a TypeScript plugin
//! that registers the context engine `graphiti`, two tools, hooks, a command, a service and CLI
//! commands, and keeps its memory in a Graphiti server, here a loopback fake that records what
//! the plugin sends and answers one fact.
//!
//! OpenClaw installs an npm plugin into its extensions dir (`~/.openclaw/extensions/<id>`,
//! with its dependencies beside it) and loads its TypeScript itself; Node strips types only
//! outside `node_modules`, so the test lays the package out the same way (a copy of the
//! package, its `node_modules` linked) and runs the host under the pinned Node with
//! `--experimental-transform-types` (the plugin's classes use parameter properties). Without
//! that Node (>= 22.7) or the installed package, the test says so on stderr and passes without
//! running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
#[path = "support/node.rs"]
mod node;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use node::node_at_least;
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One request the fake Graphiti server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

/// A loopback stand-in for the Graphiti server's REST API: `/healthcheck`, `/messages`
/// (ingest), `/get-memory` (answers one fact), `/search`; records every request.
struct FakeGraphiti {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

const FACT: &str = "Ada lives in Paris";

impl FakeGraphiti {
    fn start() -> FakeGraphiti {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let record = record.clone();
                std::thread::spawn(move || serve(stream, &record));
            }
        });
        FakeGraphiti { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves the requests of one connection (keep-alive) until the peer closes it.
fn serve(stream: TcpStream, record: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        record.lock().unwrap().push(Seen {
            method: method.clone(),
            path: path.clone(),
            body,
        });
        let (status, answer) = match (method.as_str(), path.as_str()) {
            ("GET", "/healthcheck") => ("200 OK", json!({"status": "healthy"})),
            ("POST", "/messages") => (
                "202 Accepted",
                json!({"success": true, "message": "queued"}),
            ),
            ("POST", "/get-memory") | ("POST", "/search") => (
                "200 OK",
                json!({"facts": [{
                    "uuid": "f1", "name": "LIVES_IN", "fact": FACT,
                    "valid_at": null, "invalid_at": null,
                    "created_at": "2026-01-01T00:00:00Z", "expired_at": null,
                }]}),
            ),
            _ => ("404 Not Found", json!({"detail": "not found"})),
        };
        let text = answer.to_string();
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn ctxbridge(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("OPENCLAW_STATE_DIR")
        .output()
        .unwrap()
}

/// Copies a directory tree (files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Two turns through `ctxbridge turn` on the Responses backend (loopback mock model) with the
/// published plugin as the context engine: it is not quarantined; its `afterTurn` captures the
/// conversation into Graphiti (`POST /messages` holds the user's words); its `assemble` asks
/// `/get-memory` with the conversation and puts the recalled fact into
/// `systemPromptAddition`, which reaches the model's instructions on the second turn; and its
/// `/graphiti` command answers through `ctxbridge command`.
#[tokio::test(flavor = "multi_thread")]
async fn published_graphiti_plugin_runs_unchanged() {
    let installed = repo().join("tests/openclaw-plugins/node_modules/@robertogongora/graphiti");
    if !installed.join("package.json").exists() {
        eprintln!("SKIPPED published_graphiti_plugin_runs_unchanged: run `npm ci --prefix tests/openclaw-plugins`");
        return;
    }
    // Node >= 22.7 transforms the plugin's TypeScript.
    let Some(node) = node_at_least((22, 7), "published_graphiti_plugin_runs_unchanged") else {
        return;
    };
    let graphiti = FakeGraphiti::start();
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    // OpenClaw's layout of an installed npm plugin: the package, its dependencies beside it.
    let plugin = dir.path().join("extensions/graphiti");
    copy_tree(&installed, &plugin);
    std::os::unix::fs::symlink(
        repo().join("tests/openclaw-plugins/node_modules"),
        plugin.join("node_modules"),
    )
    .unwrap();
    let host = repo().join("hosts/openclaw-node/host.mjs");
    let config = json!({
        "plugins": {
            "slots": { "contextEngine": "graphiti" },
            "entries": { "graphiti": {
                "command": [node, "--experimental-transform-types", "--no-warnings",
                            host.display().to_string(), plugin.display().to_string()],
                "timeoutMs": 20000,
                "config": { "url": graphiti.url, "debug": false, "autoIndex": false, "recallMaxFacts": 3 },
            } },
        },
        "backend": { "kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model" },
        "store": { "path": ".ctxbridge/state.db" },
    });
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();

    for prompt in ["My name is Ada and I live in Paris.", "Where do I live?"] {
        let path = dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            ctxbridge(&path, &["turn", "--session", "demo", "--json", prompt])
        })
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "turn failed: {err}");
        assert!(!err.contains("quarantined"), "{err}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["engineId"], "graphiti", "{report}");
    }

    let seen = graphiti.seen();
    assert!(
        seen.iter()
            .any(|s| s.method == "GET" && s.path == "/healthcheck"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.path == "/messages" && s.body.to_string().contains("I live in Paris")),
        "the plugin captured the conversation into Graphiti: {seen:?}"
    );
    let recall = seen
        .iter()
        .find(|s| s.path == "/get-memory")
        .unwrap_or_else(|| panic!("assemble asked Graphiti: {seen:?}"));
    assert_eq!(recall.body["group_id"], "core");
    assert_eq!(recall.body["max_facts"], 3);

    let turns: Vec<_> = mock
        .response_requests()
        .into_iter()
        .filter(|r| r.store)
        .collect();
    assert_eq!(turns.len(), 2);
    let instructions = turns[1].instructions.as_deref().unwrap_or("");
    assert!(
        instructions.contains("<graphiti-context>") && instructions.contains(FACT),
        "the recalled fact reached the model: {instructions}"
    );

    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        ctxbridge(&path, &["command", "graphiti", "--session", "demo"])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Graphiti healthy") && stdout.contains(&graphiti.url),
        "{stdout}"
    );
}
