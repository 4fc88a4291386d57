//! The listeners: WebSocket on TCP (axum; `/readyz`, `/healthz` and `/metrics` on the same
//! port; optional bearer capability token checked on the upgrade and on `/metrics`), WebSocket
//! on a unix socket (mode 0600; the same upgrade and frames, as Codex's `--listen unix://PATH`)
//! and stdio (newline-delimited, one client). Each accepted connection becomes a client actor
//! ([`client::run`]) plus a writer task draining its [`Outbound`] queue.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ctxbridge_jsonrpc::{line_reader, next_frame};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::metrics::Registry;
use crate::serve::client::{self, Inbound};
use crate::serve::hub::HubMsg;
use crate::serve::listen::{CapabilityToken, OriginPolicy};
use crate::serve::outbound::{
    self, Outbound, OutboundLimits, OutboundReceiver, OutboundSender, Queued,
};
use crate::serve::seam::SessionTurns;

/// WebSocket close code for a message over the size limit (RFC 6455 "message too big").
pub const CLOSE_TOO_BIG: u16 = 1009;

/// Most messages a writer sends before it flushes.
const MAX_BATCH: usize = 256;
/// How long a writer tries to deliver the close of a connection whose queue overflowed (its
/// client is not reading, so it may never arrive).
const OVERFLOW_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What every listener shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub hub: mpsc::UnboundedSender<HubMsg>,
    pub max_message_bytes: usize,
    /// Bounds of each connection's outgoing queue.
    pub outbound: OutboundLimits,
    pub auth: Option<CapabilityToken>,
    pub origins: Arc<OriginPolicy>,
    pub next_conn: Arc<AtomicU64>,
    pub metrics: Arc<Registry>,
    /// What serves session turns (asked by `/readyz` whether its engine is degraded).
    pub sessions: Arc<dyn SessionTurns>,
    /// The listener kind, as logged with each client (`ws`, `unix`, `stdio`).
    pub transport: &'static str,
}

/// Counts a client connection as connected while it lives.
struct Connected(Arc<Registry>);

impl Connected {
    fn new(metrics: &Arc<Registry>) -> Connected {
        metrics.client_connections(1);
        Connected(metrics.clone())
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.client_connections(-1);
    }
}

impl Shared {
    fn conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The content type of what `prometheus-client` encodes (OpenMetrics text 1.0.0).
pub(crate) const METRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The axum app: health endpoints (open, as Codex's), `/metrics` (behind the same token as
/// the WebSocket when auth is on) and the WebSocket endpoint at `/`.
pub(crate) fn ws_router(shared: Shared) -> Router {
    Router::new()
        .route("/readyz", get(readyz))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(ws_metrics))
        .route("/", get(ws_upgrade))
        .with_state(shared)
}

/// The unix-socket app: as Codex's `--listen unix://PATH`, every request is the WebSocket
/// upgrade whatever its path (Codex's own client asks for `/rpc`), and nothing else is served
/// (no health or metrics endpoints: `--metrics-listen` exports the metrics).
pub(crate) fn unix_router(shared: Shared) -> Router {
    Router::new().fallback(ws_upgrade).with_state(shared)
}

/// The `--metrics-listen` app: only `GET /metrics` (loopback only, no auth).
pub(crate) fn metrics_router(metrics: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_only))
        .with_state(metrics)
}

fn exposition(metrics: &Registry) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        metrics.render(),
    )
        .into_response()
}

async fn metrics_only(State(metrics): State<Arc<Registry>>) -> Response {
    exposition(&metrics)
}

/// `GET /readyz`: `ok`, as Codex's, while the selected engine runs; when it is quarantined and
/// `legacy` serves in its place, still 200 (turns are answered) with a JSON body saying so:
/// `{"status": "degraded", "degraded": {engine, operation, error}}`.
async fn readyz(State(shared): State<Shared>) -> Response {
    match shared.sessions.degradation() {
        None => "ok".into_response(),
        Some(record) => axum::Json(serde_json::json!({
            "status": "degraded",
            "degraded": record.degraded_json(),
        }))
        .into_response(),
    }
}

/// Whether a request may pass the capability-token check (always, without auth).
fn authorized(shared: &Shared, headers: &axum::http::HeaderMap) -> bool {
    match &shared.auth {
        Some(token) => token.accepts(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok()),
        ),
        None => true,
    }
}

async fn ws_metrics(State(shared): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return (StatusCode::UNAUTHORIZED, "unauthorized").into_response();
    }
    exposition(&shared.metrics)
}

async fn ws_upgrade(
    State(shared): State<Shared>,
    headers: axum::http::HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    // A browser page (any site the user visits) sends its Origin; CLI clients never do.
    let origin = headers.get(header::ORIGIN).map(|value| {
        value
            .to_str()
            .map(str::to_owned)
            .unwrap_or_else(|_| String::from_utf8_lossy(value.as_bytes()).into_owned())
    });
    if !shared.origins.admits(origin.as_deref()) {
        tracing::warn!(
            origin = origin.as_deref().unwrap_or_default(),
            "serve: refused a WebSocket upgrade from a browser origin that is not allowed (--allow-origin)"
        );
        return (
            StatusCode::FORBIDDEN,
            "forbidden: WebSocket upgrades carrying an Origin header are refused unless the origin is allowed with --allow-origin",
        )
            .into_response();
    }
    if !authorized(&shared, &headers) {
        tracing::warn!("serve: refused a WebSocket client without a valid token");
        return (StatusCode::UNAUTHORIZED, "unauthorized").into_response();
    }
    // tungstenite's own limit is a backstop; the exact limit is checked per message so an
    // oversize one gets a clean close with 1009.
    let backstop = shared.max_message_bytes.saturating_mul(2).max(64 * 1024);
    upgrade
        .max_message_size(backstop)
        .max_frame_size(backstop)
        .on_upgrade(move |socket| {
            let conn = shared.conn_id();
            let span = tracing::info_span!("client", conn, transport = shared.transport);
            serve_ws(socket, conn, shared).instrument(span)
        })
}

async fn serve_ws(socket: WebSocket, conn: u64, shared: Shared) {
    let _connected = Connected::new(&shared.metrics);
    let (mut sink, mut stream) = socket.split();
    let (out_tx, mut out_rx) = outbound::channel(conn, shared.outbound);
    let overflow = out_tx.overflow();
    let (in_tx, in_rx) = mpsc::channel(64);
    let actor = spawn_client(conn, &shared, in_rx, out_tx.clone());
    let writer_overflow = overflow.clone();
    let writer = tokio::spawn(
        async move {
            let written = async {
                // Messages already queued go out together: one flush (one write) per batch,
                // not per message, which is what bounds the relay rate of a streaming turn.
                'connection: while let Some(first) = out_rx.recv().await {
                    let mut next = Some(first);
                    let mut batched = 0usize;
                    while let Some(queued) = next.take() {
                        match queued {
                            Queued::Text(text) => {
                                if sink.feed(Message::Text(text.to_string())).await.is_err() {
                                    break 'connection;
                                }
                            }
                            Queued::Close(code, reason) => {
                                let frame = CloseFrame {
                                    code,
                                    reason: reason.into(),
                                };
                                let _ = sink.send(Message::Close(Some(frame))).await;
                                break 'connection;
                            }
                        }
                        batched += 1;
                        if batched < MAX_BATCH {
                            next = out_rx.try_recv();
                        }
                    }
                    if sink.flush().await.is_err() {
                        break;
                    }
                }
            };
            // A client that does not read blocks the writes: an overflow ends them.
            tokio::select! {
                () = written => {}
                () = writer_overflow.cancelled() => {}
            }
            if let Some((code, reason)) = out_rx.overflow_close() {
                out_rx.discard();
                let frame = CloseFrame {
                    code,
                    reason: reason.into(),
                };
                let _ = tokio::time::timeout(
                    OVERFLOW_CLOSE_WAIT,
                    sink.send(Message::Close(Some(frame))),
                )
                .await;
            }
        }
        .in_current_span(),
    );
    let limit = shared.max_message_bytes;
    loop {
        let frame = tokio::select! {
            frame = stream.next() => frame,
            () = overflow.cancelled() => {
                // Overflowed: what it still sends is read and dropped until its close comes
                // (or a bound passes), so closing the socket does not reset it with its
                // requests unread and the close frame lost.
                let drain = async {
                    while let Some(Ok(frame)) = stream.next().await {
                        if matches!(frame, Message::Close(_)) {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(OVERFLOW_CLOSE_WAIT * 2, drain).await;
                break;
            }
        };
        let Some(frame) = frame else {
            break;
        };
        let text = match frame {
            Ok(Message::Text(text)) => text,
            Ok(Message::Binary(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(Message::Close(_)) => break,
            Ok(_) => continue,
            Err(error) => {
                tracing::info!(%error, "serve: WebSocket read failed");
                out_tx.send(Outbound::Close(CLOSE_TOO_BIG, "message too big".into()));
                break;
            }
        };
        if text.len() > limit {
            tracing::warn!(
                len = text.len(),
                limit,
                "serve: closing a client that sent an oversize message"
            );
            out_tx.send(Outbound::Close(
                CLOSE_TOO_BIG,
                format!(
                    "message of {} bytes exceeds the limit of {limit} bytes",
                    text.len()
                ),
            ));
            break;
        }
        if in_tx.send(Inbound::Text(text)).await.is_err() {
            break;
        }
    }
    drop(in_tx);
    let _ = actor.await;
    drop(out_tx);
    let _ = writer.await;
    tracing::info!("serve: WebSocket client gone");
}

/// Spawns the client actor of connection `conn`: it reads `in_rx` and answers on `out_tx`.
fn spawn_client(
    conn: u64,
    shared: &Shared,
    in_rx: mpsc::Receiver<Inbound>,
    out_tx: OutboundSender,
) -> tokio::task::JoinHandle<()> {
    tracing::info!(
        conn,
        transport = shared.transport,
        "serve: client connected"
    );
    tokio::spawn(
        client::run(
            conn,
            shared.max_message_bytes,
            in_rx,
            out_tx,
            shared.hub.clone(),
        )
        .in_current_span(),
    )
}

/// Serves one newline-delimited connection (stdio).
pub(crate) async fn serve_lines<R, W>(reader: R, writer: W, conn: u64, shared: Shared)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let _connected = Connected::new(&shared.metrics);
    let (out_tx, out_rx) = outbound::channel(conn, shared.outbound);
    let overflow = out_tx.overflow();
    let (in_tx, in_rx) = mpsc::channel(64);
    let actor = spawn_client(conn, &shared, in_rx, out_tx.clone());
    let write_task = tokio::spawn(write_lines(writer, out_rx).in_current_span());
    let mut reader = line_reader(reader, shared.max_message_bytes);
    loop {
        let read = tokio::select! {
            read = next_frame(&mut reader) => read,
            // Overflowed: read no more of what it asks.
            () = overflow.cancelled() => break,
        };
        let inbound = match read {
            Ok(Some(frame)) => client::inbound_of(frame),
            Ok(None) => break,
            Err(error) => {
                tracing::info!(%error, "serve: reading a client failed");
                break;
            }
        };
        if in_tx.send(inbound).await.is_err() {
            break;
        }
    }
    drop(in_tx);
    let _ = actor.await;
    drop(out_tx);
    let _ = write_task.await;
    tracing::info!("serve: client gone");
}

/// Writes a newline-delimited connection's queue: what is already queued goes out together
/// (one write per batch). A client that does not read blocks the writes: an overflow of the
/// queue ends them.
async fn write_lines<W: AsyncWrite + Unpin>(mut writer: W, mut out_rx: OutboundReceiver) {
    let overflow = out_rx.overflow_token();
    let written = async {
        let mut buffer = Vec::new();
        'connection: while let Some(first) = out_rx.recv().await {
            let mut next = Some(first);
            let mut batched = 0usize;
            let mut closing = false;
            buffer.clear();
            while let Some(queued) = next.take() {
                let Queued::Text(text) = queued else {
                    closing = true;
                    break;
                };
                buffer.extend_from_slice(text.as_bytes());
                buffer.push(b'\n');
                batched += 1;
                if batched < MAX_BATCH {
                    next = out_rx.try_recv();
                }
            }
            if writer.write_all(&buffer).await.is_err() || writer.flush().await.is_err() {
                break 'connection;
            }
            if closing {
                break;
            }
            if buffer.capacity() > 256 * 1024 {
                // A burst of big messages does not pin its buffer for the connection's life.
                buffer = Vec::new();
            }
        }
    };
    tokio::select! {
        () = written => {}
        () = overflow.cancelled() => {}
    }
    if out_rx.overflow_close().is_some() {
        out_rx.discard();
    }
}

/// Binds a unix socket at `path` with mode 0600 from the start: it is created inside a fresh
/// private directory next to `path`, restricted, then renamed into place.
pub(crate) fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let private = tempfile::Builder::new()
        .prefix(".ctxbridge-sock")
        .tempdir_in(&parent)?;
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))?;
    let staged = private.path().join("s");
    let listener = tokio::net::UnixListener::bind(&staged)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&staged, path)?;
    Ok(listener)
}

/// Accepts unix-socket clients until `stop` fires. Each connection is served HTTP/1 by `app`
/// ([`unix_router`]): the WebSocket upgrade, then the same frames as on `ws://`.
pub(crate) async fn accept_unix(
    listener: tokio::net::UnixListener,
    app: Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let service = TowerToHyperService::new(app.clone());
                    tokio::spawn(async move {
                        if let Err(error) = auto::Builder::new(TokioExecutor::new())
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .await
                        {
                            tracing::info!(%error, "serve: a unix-socket connection failed");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "serve: accepting a unix client failed");
                    // Out of descriptors, say: give the system a moment instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A newline-delimited client that writes requests and never reads is let go once its
    /// queue overflows: the connection ends by itself, with the client still writing.
    #[tokio::test]
    async fn a_stdio_client_that_does_not_read_is_let_go() {
        let (hub, mut hub_rx) = mpsc::unbounded_channel();
        let shared = Shared {
            hub,
            max_message_bytes: 1024 * 1024,
            outbound: OutboundLimits {
                max_messages: 100,
                max_bytes: 16 * 1024,
            },
            auth: None,
            origins: Arc::new(OriginPolicy::default()),
            next_conn: Arc::new(AtomicU64::new(0)),
            metrics: Arc::new(Registry::new()),
            sessions: Arc::new(crate::serve::seam::PassThroughSessions),
            transport: "stdio",
        };
        // 4 KiB pipes: the served side blocks on writing as soon as the client stops reading.
        let (client_in, served_out) = tokio::io::duplex(4096);
        let (mut client_out, served_in) = tokio::io::duplex(4096);
        let served = tokio::spawn(serve_lines(served_in, served_out, 1, shared));
        let request = format!(
            "{{\"id\":\"{}\",\"method\":\"thread/list\"}}\n",
            "x".repeat(500)
        );
        let flood = tokio::spawn(async move {
            let mut written = 0u64;
            while client_out.write_all(request.as_bytes()).await.is_ok() {
                written += 1;
                if written == 1_000_000 {
                    break;
                }
            }
            written
        });
        tokio::time::timeout(std::time::Duration::from_secs(60), served)
            .await
            .expect("the connection was not let go")
            .unwrap();
        let written = flood.await.unwrap();
        assert!(written < 1_000_000, "the flood was read to its end");
        // The hub heard the connection end.
        let mut disconnected = false;
        while let Ok(message) = hub_rx.try_recv() {
            disconnected |= matches!(message, HubMsg::Disconnect { conn: 1 });
        }
        assert!(disconnected);
        drop(client_in);
    }
}
