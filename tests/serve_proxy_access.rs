//! `ctxbridge serve`'s access control and HTTP endpoints (docs/serve.md#the-serve-command): the
//! capability token (plain or by SHA-256) on the WebSocket upgrade and on `/metrics`, browser
//! origins, `--metrics-listen` for a unix listener, the health endpoints, and the refusal of a
//! non-loopback address without auth. No Codex needed: the upstream is never started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_proxy.rs"]
mod serve_proxy_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use codex_app_server_client::AppServerConfig;
use ctxbridge::serve::{self, CapabilityToken, ListenAddr, OriginPolicy, ServeOptions};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use serve_proxy_support::{http_get, without_codex};
use ws_client::Client;

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
