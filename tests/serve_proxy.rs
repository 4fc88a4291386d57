//! `ctxbridge serve` as a Codex app-server proxy (docs/serve.md#the-serve-command): WebSocket clients (over TCP and
//! over a unix socket, as Codex's listeners) in front of the real `codex app-server`, run offline against the mock model server. Tests that
//! need Codex skip loudly when it is not installed; transport-level tests run without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/ws_client.rs"]
mod ws_client;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides, AppServerConfig};
use ctxbridge::serve::{
    self, CapabilityToken, ListenAddr, OriginPolicy, ServeHandle, ServeOptions,
};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use ws_client::Client;

/// A generous bound so a broken proxy fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(60);

struct Env {
    handle: ServeHandle,
    mock: Option<MockModelServer>,
    store: Arc<SqliteStore>,
    dir: tempfile::TempDir,
}

impl Env {
    fn url(&self) -> String {
        format!("ws://{}", self.handle.local_addr.unwrap())
    }
    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("upstream.pid")
    }
}

/// The upstream command: a shell that records its pid, then becomes `codex app-server`.
fn upstream(binary: &Path, dir: &Path, base_url: &str) -> AppServerConfig {
    let script = format!(
        "echo $$ > '{}'; exec '{}' app-server \"$@\"",
        dir.join("upstream.pid").display(),
        binary.display()
    );
    AppServerConfig::new(dir.join("codex-home"))
        .with_command(["sh".to_owned(), "-c".to_owned(), script, "sh".to_owned()])
        .with_overrides(offline_overrides(base_url))
        .with_cwd(dir)
}

/// Serve on an ephemeral loopback port in front of the real Codex (None: Codex missing).
async fn with_codex(tweak: impl FnOnce(&mut ServeOptions)) -> Option<Env> {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED serve_proxy: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap());
    let mut options = ServeOptions::new(
        ListenAddr::parse("ws://127.0.0.1:0").unwrap(),
        upstream(&binary, dir.path(), &mock.base_url()),
    );
    options.store = Some(store.clone() as Arc<dyn StateStore>);
    tweak(&mut options);
    let handle = serve::start(options).await.unwrap();
    Some(Env {
        handle,
        mock: Some(mock),
        store,
        dir,
    })
}

/// Serve with an upstream that is never started (transport-level behaviour only).
async fn without_codex(tweak: impl FnOnce(&mut ServeOptions)) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap());
    let mut options = ServeOptions::new(
        ListenAddr::parse("ws://127.0.0.1:0").unwrap(),
        AppServerConfig::new(dir.path().join("codex-home")).with_command(["false"]),
    );
    tweak(&mut options);
    let handle = serve::start(options).await.unwrap();
    Env {
        handle,
        mock: None,
        store,
        dir,
    }
}

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

/// A plain HTTP `GET` (optionally with an `Authorization` header): status line and body.
async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
    authorization: Option<&str>,
) -> (String, String) {
    http_get_over(TcpStream::connect(addr).await.unwrap(), path, authorization).await
}

/// `GET path` over an open connection: the status line and the body.
async fn http_get_over(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    path: &str,
    authorization: Option<&str>,
) -> (String, String) {
    let auth = authorization.map_or(String::new(), |v| format!("Authorization: {v}\r\n"));
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// `--ws-token-sha256`: serve holds only the token's digest; the token itself is accepted,
/// a wrong one (or the digest presented as the token) is refused with 401. `/metrics` needs
/// the same token; `/readyz` stays open, as Codex's. The WebSocket connection is counted as a
/// connected client while it is open.
#[tokio::test]
async fn capability_token_by_sha256_and_metrics_auth() {
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(b"right-token"));
    let token = CapabilityToken::from_sha256_hex(&digest).unwrap();
    let env = without_codex(|o| o.auth = Some(token)).await;
    // The admitted connection stays open: it is the connected client /metrics counts.
    let _ws = assert_token_auth(&env.url(), &[&format!("Bearer {digest}")]).await;

    let addr = env.handle.local_addr.unwrap();
    let (status, _) = http_get(addr, "/metrics", None).await;
    assert!(status.contains("401"), "{status}");
    let (status, _) = http_get(addr, "/metrics", Some("Bearer wrong-token")).await;
    assert!(status.contains("401"), "{status}");
    let (status, body) = http_get(addr, "/metrics", Some("Bearer right-token")).await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(
        ctxbridge::metrics::sample(&body, "ctxbridge_connected_clients"),
        Some(1.0),
        "{body}"
    );
    let (status, _) = http_get(addr, "/readyz", None).await;
    assert!(status.contains("200"), "{status}");
    env.handle.shutdown().await;
}

/// `--metrics-listen` serves `GET /metrics` for a unix-socket listener (which has no HTTP
/// port) and counts its client; a non-loopback metrics address is refused.
#[tokio::test]
async fn metrics_listen_for_a_unix_listener() {
    let dir = tempfile::tempdir().unwrap();
    let mut refused = ServeOptions::new(
        ListenAddr::parse(&format!("unix://{}", dir.path().join("r.sock").display())).unwrap(),
        AppServerConfig::new(dir.path().join("codex-home")).with_command(["false"]),
    );
    refused.metrics_listen = Some("0.0.0.0:0".parse().unwrap());
    let error = serve::start(refused).await.unwrap_err().to_string();
    assert!(
        error.contains("--metrics-listen") && error.contains("non-loopback"),
        "{error}"
    );

    let socket = dir.path().join("s.sock");
    let mut options = ServeOptions::new(
        ListenAddr::parse(&format!("unix://{}", socket.display())).unwrap(),
        AppServerConfig::new(dir.path().join("codex-home")).with_command(["false"]),
    );
    options.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let handle = serve::start(options).await.unwrap();
    let addr = handle.metrics_addr.unwrap();
    let (_, before) = http_get(addr, "/metrics", None).await;
    assert_eq!(
        ctxbridge::metrics::sample(&before, "ctxbridge_connected_clients"),
        Some(0.0)
    );
    let mut unix = Client::connect_unix(&socket).await;
    let early = unix.call(json!(1), "thread/list", json!({})).await;
    assert_eq!(early["error"]["message"], "Not initialized", "{early}");
    let (status, during) = http_get(addr, "/metrics", None).await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(
        ctxbridge::metrics::sample(&during, "ctxbridge_connected_clients"),
        Some(1.0),
        "{during}"
    );
    handle.shutdown().await;
}

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

/// At `url`: no `Authorization`, `Bearer wrong-token` and each of `refused` get 401 on the
/// upgrade; `Bearer right-token` is let in (its first request gets "Not initialized"), and
/// its connection is returned open.
async fn assert_token_auth(
    url: &str,
    refused: &[&str],
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut headers = vec![None, Some("Bearer wrong-token")];
    headers.extend(refused.iter().copied().map(Some));
    for header in headers {
        let mut request = url.into_client_request().unwrap();
        if let Some(value) = header {
            request
                .headers_mut()
                .insert("Authorization", value.parse().unwrap());
        }
        match tokio_tungstenite::connect_async(request).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 401)
            }
            other => panic!("expected 401, got {:?}", other.map(|_| ())),
        }
    }
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Authorization", "Bearer right-token".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    ws.send(Message::Text(
        "{\"id\":1,\"method\":\"thread/list\"}".into(),
    ))
    .await
    .unwrap();
    let reply = ws.next().await.unwrap().unwrap();
    assert!(reply.to_text().unwrap().contains("Not initialized"));
    ws
}

/// Without the token, or with a wrong one, the WebSocket upgrade is refused with 401; the
/// right bearer token is accepted.
#[tokio::test]
async fn capability_token_auth() {
    let env = without_codex(|o| o.auth = Some(CapabilityToken::new("right-token"))).await;
    let _ws = assert_token_auth(&env.url(), &[]).await;
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

/// The status of a WebSocket upgrade at `url` carrying `origin` (and `authorization`): 101
/// when it was let in (its first request then gets "Not initialized"), else the refusal's.
async fn upgrade_status(url: &str, origin: Option<&str>, authorization: Option<&str>) -> u16 {
    let mut request = url.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", origin.parse().unwrap());
    }
    if let Some(value) = authorization {
        request
            .headers_mut()
            .insert("Authorization", value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, response)) => {
            let mut c = Client::over(ws);
            let early = c.call(json!(1), "thread/list", json!({})).await;
            assert_eq!(early["error"]["message"], "Not initialized", "{early}");
            response.status().as_u16()
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                .into_owned();
            if response.status() == 403 {
                assert!(body.contains("--allow-origin"), "{body}");
            }
            response.status().as_u16()
        }
        Err(other) => panic!("upgrade failed: {other}"),
    }
}

/// As the real `codex app-server`: a WebSocket upgrade carrying an `Origin` header (every
/// browser page sends one, `null` included) is refused with 403 — with auth too, even with
/// the right token — while a CLI client (no `Origin`) is let in.
#[tokio::test]
async fn browser_origins_are_refused_by_default() {
    let open = without_codex(|_| {}).await;
    for origin in ["http://evil.example", "null", "http://127.0.0.1:4500"] {
        assert_eq!(
            upgrade_status(&open.url(), Some(origin), None).await,
            403,
            "{origin}"
        );
    }
    assert_eq!(upgrade_status(&open.url(), None, None).await, 101);
    open.handle.shutdown().await;

    let authed = without_codex(|o| o.auth = Some(CapabilityToken::new("right-token"))).await;
    let token = Some("Bearer right-token");
    assert_eq!(
        upgrade_status(&authed.url(), Some("http://evil.example"), token).await,
        403
    );
    assert_eq!(
        upgrade_status(&authed.url(), Some("null"), token).await,
        403
    );
    assert_eq!(upgrade_status(&authed.url(), None, token).await, 101);
    authed.handle.shutdown().await;
}

/// `--allow-origin` lets exactly the listed origins in (case and a trailing slash aside);
/// others are still refused, and auth still applies to an allowed origin.
#[tokio::test]
async fn allowed_origins_are_let_in() {
    let env = without_codex(|o| {
        o.origins = OriginPolicy::allowing(["http://localhost:3000"]).unwrap();
        o.auth = Some(CapabilityToken::new("right-token"));
    })
    .await;
    let token = Some("Bearer right-token");
    assert_eq!(
        upgrade_status(&env.url(), Some("http://localhost:3000"), token).await,
        101
    );
    assert_eq!(
        upgrade_status(&env.url(), Some("HTTP://LOCALHOST:3000/"), token).await,
        101
    );
    assert_eq!(
        upgrade_status(&env.url(), Some("http://localhost:3000"), None).await,
        401
    );
    assert_eq!(
        upgrade_status(&env.url(), Some("http://localhost:3001"), token).await,
        403
    );
    assert_eq!(upgrade_status(&env.url(), Some("null"), token).await, 403);
    env.handle.shutdown().await;
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

/// `/readyz` and `/healthz` answer 200 over plain HTTP on the WebSocket port.
#[tokio::test]
async fn health_endpoints() {
    let env = without_codex(|_| {}).await;
    for path in ["/readyz", "/healthz"] {
        let mut tcp = TcpStream::connect(env.handle.local_addr.unwrap())
            .await
            .unwrap();
        tcp.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut text = String::new();
        tcp.read_to_string(&mut text).await.unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
    }
    env.handle.shutdown().await;
}

/// A non-loopback WebSocket address without auth is refused before anything listens.
#[tokio::test]
async fn non_loopback_without_auth_is_refused() {
    let options = ServeOptions::new(
        ListenAddr::parse("ws://0.0.0.0:0").unwrap(),
        AppServerConfig::new("/nonexistent").with_command(["false"]),
    );
    let error = serve::start(options).await.unwrap_err().to_string();
    assert!(error.contains("non-loopback"), "{error}");
}

fn pid_alive(pid: &str) -> bool {
    std::process::Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
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
