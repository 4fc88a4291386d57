//! `ctxbridge serve` with the sample engine, as operated (docs/serve.md#the-serve-command):
//! `backend.url` in front of an app-server that already runs (and its reconnection), `/metrics`
//! after turns across epoch changes, and a degraded engine reported by `/readyz`, `/metrics` and
//! a warning. Skips loudly without Codex.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_engine.rs"]
mod serve_engine_support;
#[path = "support/serve.rs"]
mod serve_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::path::Path;
use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::config::Config;
use ctxbridge::serve;
use ctxbridge::serve::command::{options, ServeArgs};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

use serve_engine_support::{four_turns, request_for, start, Env, CONTEXT, PATIENCE};
use ws_client::Client;

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
