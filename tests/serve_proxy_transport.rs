//! `ctxbridge serve`'s transports (docs/serve.md#the-serve-command): the unix socket listener
//! (private, WebSocket over the socket, used by the real `codex exec --remote`), garbage and
//! oversized frames, a client that does not read, and the `serve` command itself (where it
//! listens, usage errors, SIGTERM). Tests that need Codex skip loudly when it is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_proxy.rs"]
mod serve_proxy_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::serve::{self, ListenAddr, ServeOptions};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;

use serve_proxy_support::{
    http_get_over, pid_alive, upstream, with_codex, without_codex, PATIENCE,
};
use ws_client::Client;

/// A unix socket listener is created with mode 0600 and speaks WebSocket over the socket, as
/// Codex's `--listen unix://PATH`: the upgrade at Codex's client path `/rpc` (or any other)
/// carries the `initialize` handshake through to the upstream; a plain HTTP request is no
/// upgrade and gets no health endpoint (Codex's unix listener serves none).
#[tokio::test]
async fn unix_socket_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let Some(env) = with_codex(|_| {}).await else {
        return;
    };
    let path = env.dir.path().join("serve.sock");
    let binary = locate_codex_binary().unwrap();
    let mut options = ServeOptions::new(
        ListenAddr::Unix(path.clone()),
        upstream(
            &binary,
            env.dir.path(),
            &env.mock.as_ref().unwrap().base_url(),
        ),
    );
    options.store = None;
    let handle = serve::start(options).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = Client::connect_unix(&path).await;
    let init = c.initialize(json!(1)).await;
    assert!(
        init["result"]["userAgent"]
            .as_str()
            .unwrap()
            .contains("ctxbridge/"),
        "{init}"
    );
    let listed = c.call(json!(2), "thread/list", json!({})).await;
    assert!(listed["result"]["data"].is_array(), "{listed}");
    // Any path upgrades, as on Codex's socket.
    let (mut other, _) = tokio_tungstenite::client_async(
        "ws://localhost/",
        UnixStream::connect(&path).await.unwrap(),
    )
    .await
    .unwrap();
    other
        .send(Message::Text(
            "{\"id\":1,\"method\":\"thread/list\"}".into(),
        ))
        .await
        .unwrap();
    let reply = tokio::time::timeout(PATIENCE, other.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        reply.to_text().unwrap().contains("Not initialized"),
        "{reply}"
    );
    let (status, body) =
        http_get_over(UnixStream::connect(&path).await.unwrap(), "/readyz", None).await;
    assert!(
        status.starts_with("HTTP/1.1 4") && body != "ok",
        "{status}: {body}"
    );
    drop(c);
    handle.shutdown().await;
    env.handle.shutdown().await;
}

/// The real Codex CLI as a client of serve's unix socket: `codex exec --remote unix://PATH`
/// (which speaks WebSocket over the socket, as to `codex app-server --listen unix://PATH`)
/// runs its turn through serve on the real app-server and prints the model's reply.
#[tokio::test]
async fn codex_exec_over_the_unix_socket() {
    let sockets = tempfile::tempdir().unwrap();
    let path = sockets.path().join("serve.sock");
    let Some(env) = with_codex(|o| o.listen = ListenAddr::Unix(path.clone())).await else {
        return;
    };
    let mock = env.mock.as_ref().unwrap();
    mock.set_default_reply(ScriptedReply::text("Seven swans over the unix socket"));
    let binary = locate_codex_binary().unwrap();
    // `exec --remote` takes no `-c` overrides ("configure the agent on the server"); the
    // client's own offline settings go in its Codex home's config.toml.
    let home = env.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    let config: String = offline_overrides(&mock.base_url())
        .iter()
        .map(|(key, value)| format!("{key} = {}\n", value.to_toml()))
        .collect();
    std::fs::write(home.join("config.toml"), config).unwrap();
    let mut exec = tokio::process::Command::new(&binary);
    exec.env("CODEX_HOME", &home)
        .arg("exec")
        .arg("--remote")
        .arg(format!("unix://{}", path.display()))
        .arg("--skip-git-repo-check")
        .arg("count the swans")
        .current_dir(env.dir.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(PATIENCE, exec.output())
        .await
        .expect("codex exec finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Seven swans over the unix socket"),
        "{stdout}\n{stderr}"
    );
    assert!(
        mock.requests().iter().any(|r| r
            .last_user_text()
            .is_some_and(|t| t.contains("count the swans"))),
        "the prompt reached the model through serve"
    );
    env.handle.shutdown().await;
}

/// A garbage frame gets a JSON-RPC parse error and the connection keeps working; a frame
/// over the limit closes the connection with 1009 — over TCP and over a unix socket alike.
#[tokio::test]
async fn garbage_and_oversize_frames() {
    let env = without_codex(|o| o.max_message_bytes = 1024).await;
    garbage_then_oversize(Client::connect(&env.url()).await).await;
    let socket = env.dir.path().join("limits.sock");
    let unix = without_codex(|o| {
        o.listen = ListenAddr::Unix(socket.clone());
        o.max_message_bytes = 1024;
    })
    .await;
    garbage_then_oversize(Client::connect_unix(&socket).await).await;
    unix.handle.shutdown().await;
    env.handle.shutdown().await;
}

async fn garbage_then_oversize<S: AsyncRead + AsyncWrite + Unpin>(mut c: Client<S>) {
    c.ws.send(Message::Text("this is not json".into()))
        .await
        .unwrap();
    let error = c.next().await;
    assert_eq!(error["error"]["code"], -32700, "{error}");
    let still = c.call(json!(1), "thread/list", json!({})).await;
    assert_eq!(still["error"]["message"], "Not initialized");
    let big = format!(
        "{{\"id\":2,\"method\":\"x\",\"params\":\"{}\"}}",
        "a".repeat(1500)
    );
    c.ws.send(Message::Text(big)).await.unwrap();
    let close = loop {
        match tokio::time::timeout(PATIENCE, c.ws.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(u16::from(close.unwrap().code), 1009);
}

/// A client that sends requests and never reads what they answer does not grow serve's memory
/// without bound: once its outgoing queue passes the limit it is disconnected with close 1008
/// (policy violation) naming the limit, serve stops reading it, and other clients are served
/// as before.
#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected() {
    let env = without_codex(|o| {
        o.outbound = ctxbridge::serve::OutboundLimits {
            max_messages: 1_000,
            max_bytes: 64 * 1024,
        };
    })
    .await;
    let (ws, _) = tokio_tungstenite::connect_async(env.url()).await.unwrap();
    let (mut sink, mut stream) = ws.split();
    // Requests before `initialize`: each is answered "Not initialized" (by the client actor,
    // through the same queue) under its own 8 KB id — 10 000 of them, 80 MB of answers, more
    // than loopback's socket buffers can hold (32 MB + 4 MB here), all sent before anything is read.
    const REQUESTS: u64 = 10_000;
    let request =
        json!({"id": "x".repeat(8_000), "method": "thread/list", "params": {}}).to_string();
    for _ in 0..REQUESTS / 100 {
        for _ in 0..100 {
            sink.feed(Message::Text(request.clone())).await.unwrap();
        }
        sink.flush().await.unwrap();
    }
    let sent = REQUESTS;
    let close = tokio::time::timeout(PATIENCE, async {
        let mut answers = 0u64;
        while let Some(frame) = stream.next().await {
            match frame {
                Ok(Message::Close(frame)) => return (answers, frame),
                Ok(_) => answers += 1,
                Err(error) => panic!("no close frame after {answers} answers: {error}"),
            }
        }
        panic!("the connection ended without a close frame after {answers} answers");
    })
    .await
    .unwrap();
    let (answers, frame) = close;
    let frame = frame.unwrap();
    assert_eq!(u16::from(frame.code), 1008, "{frame:?}");
    assert!(frame.reason.contains("outgoing queue"), "{frame:?}");
    assert!(answers < sent, "{answers} answers of {sent} requests");

    let mut c = Client::connect(&env.url()).await;
    let early = c.call(json!(7), "thread/list", json!({})).await;
    assert_eq!(early["error"]["message"], "Not initialized");
    env.handle.shutdown().await;
}

/// `ctxbridge serve` says where it listens, as `codex app-server --listen` does: one line on
/// stderr at the default log level with the URL (the port actually bound for `:0`), the auth
/// mode and the metrics endpoint — and a client can connect there.
#[tokio::test]
async fn serve_command_announces_where_it_listens() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "backend": {"kind": "codex", "command": ["false"], "codexHome": dir.path().join("home")},
        "store": {"path": dir.path().join("state.db")},
    });
    let config_path = dir.path().join("ctxbridge.json5");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .arg("--config")
        .arg(&config_path)
        .args(["serve", "--listen", "ws://127.0.0.1:0"])
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(PATIENCE, stderr.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("ctxbridge serve: listening on ")
        .and_then(|rest| rest.split_once(' '))
        .map(|(url, _)| url.to_owned())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        url.starts_with("ws://127.0.0.1:") && !url.ends_with(":0"),
        "{line}"
    );
    assert!(line.contains("auth: none (loopback only)"), "{line}");
    assert!(
        line.contains(&format!(
            "metrics: http://{}/metrics",
            &url["ws://".len()..]
        )),
        "{line}"
    );
    let mut c = Client::connect(&url).await;
    let early = c.call(json!(1), "thread/list", json!({})).await;
    assert_eq!(early["error"]["message"], "Not initialized");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// The `serve` command: a non-loopback address without auth is a usage error (exit 2); on a
/// loopback port it serves clients, and SIGTERM stops it cleanly (exit 0) with the upstream
/// child reaped.
#[tokio::test]
async fn serve_command_runs_and_stops_on_sigterm() {
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(["serve", "--listen", "ws://0.0.0.0:4599"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("non-loopback"));
    let bad_origin = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "serve",
            "--listen",
            "ws://127.0.0.1:0",
            "--allow-origin",
            "evil.example",
        ])
        .output()
        .unwrap();
    assert_eq!(bad_origin.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad_origin.stderr);
    assert!(
        stderr.contains("--allow-origin \"evil.example\""),
        "{stderr}"
    );
    let zero = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "serve",
            "--listen",
            "ws://127.0.0.1:0",
            "--max-outgoing-bytes",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(
        stderr.contains("--max-outgoing-bytes must be at least 1"),
        "{stderr}"
    );
    // A busy port: the error names the address and the cause, with one `serve:` prefix.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let busy_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        busy_dir.path().join("ctxbridge.json5"),
        "{ backend: { kind: 'codex', command: ['/nonexistent/codex', 'app-server'], codexHome: 'ch' } }",
    )
    .unwrap();
    let taken = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(["serve", "--listen", &format!("ws://127.0.0.1:{port}")])
        .current_dir(busy_dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&taken.stderr);
    assert_eq!(taken.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error: serve: binding ws://127.0.0.1:{port}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("in use"), "{stderr}");
    assert!(!stderr.contains("serve: serve:"), "{stderr}");
    drop(busy);

    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED serve_command: no codex binary !!!!!!!!\n");
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(&binary, dir.path(), &mock.base_url());
    let overrides = codex_app_server_client::overrides_json(&up.config_overrides);
    let config = json!({
        "backend": {"kind": "codex", "command": up.command, "codexHome": up.codex_home, "config": overrides},
        "store": {"path": dir.path().join("state.db")},
    });
    let config_path = dir.path().join("ctxbridge.json5");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .arg("--config")
        .arg(&config_path)
        .args(["serve", "--listen", &format!("ws://127.0.0.1:{port}")])
        .current_dir(dir.path())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("ws://127.0.0.1:{port}");
    let mut c = loop {
        match tokio_tungstenite::connect_async(url.as_str()).await {
            Ok((ws, _)) => break Client::over(ws),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let init = c.initialize(json!(1)).await;
    assert!(
        init["result"]["userAgent"]
            .as_str()
            .unwrap()
            .contains("ctxbridge/"),
        "{init}"
    );
    let pid = std::fs::read_to_string(dir.path().join("upstream.pid")).unwrap();
    assert!(pid_alive(&pid));
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!pid_alive(&pid), "the upstream child was reaped");
}
