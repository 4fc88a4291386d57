//! The upstream: one `codex app-server` shared by every client connection, spoken to in raw
//! JSON-RPC (any method passes through, so no typed client sits in between): a child started
//! here ([`ChildConnector`]) or an app-server that already runs ([`UrlConnector`],
//! `backend.url`: a WebSocket over TCP or over a unix socket, as Codex's `--listen` offers).
//!
//! [`spawn`] starts the child as the Codex backend does (command, `-c` overrides, `CODEX_HOME`),
//! performs ctxbridge's own `initialize`/`initialized` handshake and hands back a [`Live`]
//! connection: a writer queue into the child's stdin and a receiver of [`UpstreamEvent`]s
//! (every message from stdout, in order, then one `Closed` with the reason). The router owns
//! the `Live` and matches ids; a dead child is replaced by the router on the next need.

use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::{log_stderr_line, AppServerConfig};
use ctxbridge_jsonrpc::{
    next_frame, reader_with, spawn_piped, Frame, LineCodec, Overlong, Piped, StderrTail,
};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::config::BackendUrl;

/// How many stderr lines are kept to explain a death.
const STDERR_TAIL_LINES: usize = 10;
/// The longest stderr line kept whole; a longer one is noted by its length.
const STDERR_MAX_LINE: usize = 64 * 1024;
/// How long a shutdown waits for the child to exit after its stdin closes.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// After the process exits, how long its stdout may still drain before the death is reported.
const EXIT_DRAIN: Duration = Duration::from_millis(200);
/// The upstream id of ctxbridge's own `initialize`; relayed requests use ids from 1 up.
const HANDSHAKE_ID: i64 = 0;

/// Starting the upstream failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The command is empty.
    #[error("upstream codex app-server: the command is empty")]
    NoCommand,
    /// `CODEX_HOME` could not be created.
    #[error("upstream codex app-server: creating CODEX_HOME {path}")]
    CodexHome {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The process could not be started.
    #[error("upstream codex app-server `{program}`: spawn failed")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// The running app-server of `backend.url` could not be reached.
    #[error("upstream codex app-server at {url}: connecting failed")]
    Connect {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The handshake failed (error answer, death or timeout).
    #[error("upstream codex app-server `{program}`: initialize failed: {reason}")]
    Handshake { program: String, reason: String },
}

/// What the child's stdout produced.
#[derive(Debug)]
pub(crate) enum UpstreamEvent {
    /// One JSON-RPC message.
    Message(Map<String, Value>),
    /// A message over the line limit, dropped unread: what its ends tell of it.
    Oversize(OversizeLine),
    /// The connection is gone (stdout closed); the reason names the upstream.
    Closed(String),
}

/// How many bytes of each end of an over-long upstream line are kept to tell whose it was.
const OVERSIZE_ENDS: usize = 4 * 1024;

/// An upstream message over the line limit (never held whole): its length, the limit, and
/// what its first and last bytes name — the answer's id, or the notification's method, thread
/// and turn — so the request or the turn it belongs to can be failed instead of waiting
/// forever for a message that will not come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OversizeLine {
    pub len: usize,
    pub limit: usize,
    /// A response's id (the message starts `{"id":N`).
    pub response_id: Option<i64>,
    pub method: Option<String>,
    pub thread: Option<String>,
    pub turn: Option<String>,
}

impl OversizeLine {
    /// Reads what the kept ends of a dropped line name. Codex writes compact JSON whose first
    /// key is `id` (a response) or `method` (a notification or request); `threadId` and
    /// `turnId` stand before or after the bulk of the params.
    pub(crate) fn read(over: &Overlong, limit: usize) -> OversizeLine {
        let response_id = over
            .head
            .strip_prefix(b"{\"id\":")
            .filter(|_| !over.head.starts_with(b"{\"id\":\""))
            .and_then(|rest| {
                let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
            });
        let field =
            |key: &str| string_field(&over.head, key).or_else(|| string_field(&over.tail, key));
        OversizeLine {
            len: over.len,
            limit,
            response_id,
            method: over
                .head
                .starts_with(b"{\"method\":")
                .then(|| string_field(&over.head, "method"))
                .flatten(),
            thread: field("threadId"),
            turn: field("turnId"),
        }
    }
}

/// The first `"key":"value"` string of `text` (ids and method names: no escapes in them).
fn string_field(text: &[u8], key: &str) -> Option<String> {
    let pattern = format!("\"{key}\":\"");
    let pattern = pattern.as_bytes();
    let start = text.windows(pattern.len()).position(|w| w == pattern)? + pattern.len();
    let len = text[start..].iter().position(|b| *b == b'"')?;
    let value = std::str::from_utf8(&text[start..start + len]).ok()?;
    (!value.is_empty() && !value.contains('\\')).then(|| value.to_owned())
}

/// A running, initialized upstream child.
pub(crate) struct Live {
    /// The child's `initialize` result.
    pub initialize_result: Value,
    writer: mpsc::UnboundedSender<String>,
    keeper: mpsc::UnboundedSender<Keep>,
}

/// Orders for the task that owns the child process.
enum Keep {
    Kill,
    Shutdown(oneshot::Sender<()>),
}

impl Live {
    /// Queues one message for the child's stdin. A dead writer is reported by the `Closed`
    /// event, so a failed send needs no handling here.
    pub fn send(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        if self.writer.send(line).is_err() {
            tracing::debug!("serve: upstream writer already gone");
        }
    }

    /// SIGKILLs the child (its `Closed` event follows).
    pub fn kill(&self) {
        let _ = self.keeper.send(Keep::Kill);
    }

    /// Closes stdin and waits for the child to exit (killed after a grace period).
    pub async fn shutdown(self) {
        let (tx, rx) = oneshot::channel();
        drop(self.writer);
        if self.keeper.send(Keep::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

type Tail = Arc<StderrTail>;

/// How the router obtains an upstream connection: a `codex app-server` child
/// ([`ChildConnector`]), or an already running app-server (`backend.url`, [`UrlConnector`]);
/// an in-memory peer in the router's tests.
#[async_trait::async_trait]
pub(crate) trait Connector: Send + Sync {
    /// A new, initialized connection; its events end with one `Closed`.
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError>;
}

/// Starts a `codex app-server` child per connection ([`spawn`]).
pub(crate) struct ChildConnector(pub AppServerConfig);

#[async_trait::async_trait]
impl Connector for ChildConnector {
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
        spawn(&self.0, generation).await
    }
}

/// An in-memory upstream (the router's tests, the bench's scripted upstream): what the router
/// writes, and a way to answer it.
pub(crate) struct MemoryPeer {
    pub written: mpsc::UnboundedReceiver<String>,
    pub events: mpsc::UnboundedSender<UpstreamEvent>,
}

impl Live {
    /// A connection whose other end is a [`MemoryPeer`].
    pub(crate) fn in_memory(
        initialize_result: Value,
    ) -> (Live, mpsc::UnboundedReceiver<UpstreamEvent>, MemoryPeer) {
        let (writer, written) = mpsc::unbounded_channel();
        let (keeper, _orders) = mpsc::unbounded_channel();
        let (events, events_rx) = mpsc::unbounded_channel();
        let live = Live {
            initialize_result,
            writer,
            keeper,
        };
        (live, events_rx, MemoryPeer { written, events })
    }
}

/// Starts the child and performs the handshake. Returns the connection and its events.
pub(crate) async fn spawn(
    config: &AppServerConfig,
    generation: u64,
) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
    let program = config
        .command
        .first()
        .cloned()
        .ok_or(UpstreamError::NoCommand)?;
    std::fs::create_dir_all(&config.codex_home).map_err(|source| UpstreamError::CodexHome {
        path: config.codex_home.clone(),
        source,
    })?;
    let mut command = tokio::process::Command::new(&program);
    command
        .args(config.args())
        .env("CODEX_HOME", &config.codex_home)
        .envs(config.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    let Piped {
        child,
        stdin,
        stdout,
        stderr,
    } = spawn_piped(command).map_err(|source| UpstreamError::Spawn {
        program: program.clone(),
        source,
    })?;
    tracing::info!(%program, pid = ?child.id(), generation, "serve: started upstream codex app-server");
    let handshake_error = |reason: &str| UpstreamError::Handshake {
        program: program.clone(),
        reason: reason.to_owned(),
    };
    let tail: Tail = Arc::new(StderrTail::new(STDERR_TAIL_LINES));
    let (event_tx, events) = mpsc::unbounded_channel();
    let (writer, writer_rx) = mpsc::unbounded_channel();
    let (keeper, keeper_rx) = mpsc::unbounded_channel();
    let label = format!("upstream codex app-server `{program}`");
    tokio::spawn(read_stdout(
        stdout,
        config.max_line_bytes,
        event_tx.clone(),
        tail.clone(),
        label.clone(),
    ));
    tokio::spawn(write_lines(stdin, writer_rx));
    tokio::spawn(forward_stderr(stderr, tail.clone()));
    tokio::spawn(keep_child(child, keeper_rx, event_tx, tail, label));
    let live = Live {
        initialize_result: Value::Null,
        writer,
        keeper,
    };
    handshake(live, events, config.request_timeout, |reason| {
        handshake_error(reason)
    })
    .await
}

/// ctxbridge's own `initialize`/`initialized` on a fresh connection. On failure the connection
/// is dropped (a child killed, a socket closed) and `error` names why.
async fn handshake(
    live: Live,
    mut events: mpsc::UnboundedReceiver<UpstreamEvent>,
    timeout: Duration,
    error: impl Fn(&str) -> UpstreamError,
) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
    live.send(&json!({        "id": HANDSHAKE_ID,
        "method": "initialize",
        "params": {
            "clientInfo": {"name": "ctxbridge", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": {"experimentalApi": true},
        },
    }));
    let answer = tokio::time::timeout(timeout, async {
        while let Some(event) = events.recv().await {
            match event {
                UpstreamEvent::Message(message)
                    if message.get("id").and_then(Value::as_i64) == Some(HANDSHAKE_ID)
                        && message.get("method").is_none() =>
                {
                    return Ok(message);
                }
                UpstreamEvent::Message(message) => {
                    tracing::debug!(
                        ?message,
                        "serve: upstream message before initialize; dropped"
                    );
                }
                UpstreamEvent::Oversize(line) if line.response_id == Some(HANDSHAKE_ID) => {
                    return Err(format!(
                        "its initialize answer of {} bytes is over the line limit of {} bytes",
                        line.len, line.limit
                    ));
                }
                UpstreamEvent::Oversize(_) => {}
                UpstreamEvent::Closed(reason) => return Err(reason),
            }
        }
        Err("the connection closed".to_owned())
    })
    .await;
    let message = match answer {
        Ok(Ok(message)) => message,
        Ok(Err(reason)) => {
            live.kill();
            return Err(error(&reason));
        }
        Err(_) => {
            live.kill();
            return Err(error("no answer in time"));
        }
    };
    if let Some(answer) = message.get("error") {
        live.kill();
        return Err(error(&answer.to_string()));
    }
    let mut live = live;
    live.initialize_result = message.get("result").cloned().unwrap_or(Value::Null);
    live.send(&json!({"method": "initialized"}));
    Ok((live, events))
}

/// Owns the process: kills it on order, reaps it, and reports its exit as the connection's
/// end (a grandchild holding stdout open must not hide a death from the reader).
async fn keep_child(
    mut child: Child,
    mut orders: mpsc::UnboundedReceiver<Keep>,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    tail: Tail,
    label: String,
) {
    let mut waiters = Vec::new();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            order = orders.recv() => match order {
                Some(Keep::Kill) | None => {
                    if let Err(error) = child.start_kill() {
                        tracing::debug!(%error, "serve: killing the upstream failed");
                    }
                }
                Some(Keep::Shutdown(reply)) => {
                    waiters.push(reply);
                    match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                        Ok(status) => break status,
                        Err(_) => {
                            tracing::warn!("serve: upstream did not exit after stdin closed; killing it");
                            let _ = child.start_kill();
                        }
                    }
                }
            },
        }
    };
    let reason = match status {
        Ok(status) => {
            tracing::info!(%status, "serve: upstream codex app-server exited");
            format!("the process exited ({status})")
        }
        Err(error) => {
            tracing::warn!(%error, "serve: waiting for the upstream failed");
            format!("waiting for the process failed: {error}")
        }
    };
    // Let stdout deliver what the process wrote before it died; the reader may report first.
    tokio::time::sleep(EXIT_DRAIN).await;
    let _ = events.send(UpstreamEvent::Closed(format!(
        "{label}: {reason}{}",
        tail_summary(&tail)
    )));
    for waiter in waiters {
        let _ = waiter.send(());
    }
    // Late shutdown orders still get their answer.
    while let Ok(order) = orders.try_recv() {
        if let Keep::Shutdown(reply) = order {
            let _ = reply.send(());
        }
    }
}

async fn read_stdout<R: AsyncRead + Unpin>(
    stdout: R,
    max_line_bytes: usize,
    tx: mpsc::UnboundedSender<UpstreamEvent>,
    tail: Tail,
    label: String,
) {
    let mut reader = reader_with(
        stdout,
        LineCodec::keeping_ends(max_line_bytes, OVERSIZE_ENDS),
    );
    let reason = loop {
        match next_frame(&mut reader).await {
            Ok(Some(Frame::Line(line))) => match serde_json::from_slice::<Value>(&line) {
                Ok(Value::Object(message)) => {
                    if tx.send(UpstreamEvent::Message(message)).is_err() {
                        return;
                    }
                }
                _ => tracing::warn!(
                    preview = %String::from_utf8_lossy(&line[..line.len().min(200)]),
                    "serve: skipped a non-object line from the upstream"
                ),
            },
            Ok(Some(Frame::TooLong(over))) => {
                let line = OversizeLine::read(&over, max_line_bytes);
                tracing::warn!(
                    len = line.len,
                    max_line_bytes,
                    method = line.method.as_deref().unwrap_or_default(),
                    thread = line.thread.as_deref().unwrap_or_default(),
                    "serve: dropped an upstream message over the line limit"
                );
                if tx.send(UpstreamEvent::Oversize(line)).is_err() {
                    return;
                }
            }
            Ok(None) => break "its output closed (the process died or exited)".to_owned(),
            Err(error) => break format!("reading its output failed: {error}"),
        }
    };
    // Give stderr a moment to deliver the last words of a dying process.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = tx.send(UpstreamEvent::Closed(format!(
        "{label}: {reason}{}",
        tail_summary(&tail)
    )));
}

fn tail_summary(tail: &Tail) -> String {
    let lines = tail.lines();
    if lines.is_empty() {
        String::new()
    } else {
        format!("; last stderr: {}", lines.join(" | "))
    }
}

/// Writes queued lines into a child's stdin; when the queue closes, shuts it (EOF asks the
/// child to exit).
async fn write_lines<W: AsyncWrite + Unpin>(mut out: W, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = rx.recv().await {
        let written = match out.write_all(line.as_bytes()).await {
            Ok(()) => out.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            // The reader reports the death; nothing more can be written.
            tracing::debug!(%error, "serve: writing to the upstream failed");
            return;
        }
    }
    let _ = out.shutdown().await;
}

/// Connects to an app-server that already runs (`backend.url`): nothing is spawned or killed;
/// a lost connection is reported like a child's death and the router connects again on the
/// next need (its threads are resumed then).
pub(crate) struct UrlConnector {
    url: BackendUrl,
    max_message_bytes: usize,
    timeout: Duration,
}

impl UrlConnector {
    /// A connector for `url`; messages over `max_message_bytes` are refused (a line skipped, a
    /// WebSocket message ends the connection), the handshake waits at most `timeout`.
    pub(crate) fn new(url: BackendUrl, max_message_bytes: usize, timeout: Duration) -> Self {
        UrlConnector {
            url,
            max_message_bytes,
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl Connector for UrlConnector {
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
        let url = self.url.to_string();
        let label = format!("upstream codex app-server at {url}");
        let connect_error =
            |source: Box<dyn std::error::Error + Send + Sync>| UpstreamError::Connect {
                url: url.clone(),
                source,
            };
        let (event_tx, events) = mpsc::unbounded_channel();
        let (writer, writer_rx) = mpsc::unbounded_channel();
        let (keeper, keeper_rx) = mpsc::unbounded_channel();
        let config = WebSocketConfig {
            max_message_size: Some(self.max_message_bytes),
            max_frame_size: Some(self.max_message_bytes),
            ..WebSocketConfig::default()
        };
        // Both transports are WebSockets: Codex's `--listen unix://PATH` speaks the same
        // WebSocket protocol over the socket (an HTTP upgrade, then one message per frame).
        let (reader, writer_task) = match &self.url {
            BackendUrl::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| connect_error(Box::new(e)))?;
                let (ws, _response) = tokio_tungstenite::client_async_with_config(
                    "ws://localhost/",
                    stream,
                    Some(config),
                )
                .await
                .map_err(|e| connect_error(Box::new(e)))?;
                let (sink, stream) = ws.split();
                let reader = tokio::spawn(read_ws(stream, event_tx.clone(), label.clone()));
                (reader, tokio::spawn(write_ws(sink, writer_rx)))
            }
            BackendUrl::Ws(address) => {
                // `true`: no Nagle delay on small frames.
                let (ws, _response) = tokio_tungstenite::connect_async_with_config(
                    address.as_str(),
                    Some(config),
                    true,
                )
                .await
                .map_err(|e| connect_error(Box::new(e)))?;
                let (sink, stream) = ws.split();
                let reader = tokio::spawn(read_ws(stream, event_tx.clone(), label.clone()));
                (reader, tokio::spawn(write_ws(sink, writer_rx)))
            }
        };
        tracing::info!(%url, generation, "serve: connected to the upstream codex app-server");
        tokio::spawn(keep_socket(keeper_rx, reader, writer_task, event_tx, label));
        let live = Live {
            initialize_result: Value::Null,
            writer,
            keeper,
        };
        handshake(live, events, self.timeout, |reason| {
            UpstreamError::Handshake {
                program: url.clone(),
                reason: reason.to_owned(),
            }
        })
        .await
    }
}

/// Owns a socket connection's tasks: on `Kill` (or when the connection is dropped) closes it
/// at once; on `Shutdown` lets the writer finish and close its side first.
async fn keep_socket(
    mut orders: mpsc::UnboundedReceiver<Keep>,
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    label: String,
) {
    let mut waiters = Vec::new();
    match orders.recv().await {
        Some(Keep::Shutdown(reply)) => {
            waiters.push(reply);
            let _ = tokio::time::timeout(EXIT_GRACE, writer).await;
        }
        Some(Keep::Kill) | None => writer.abort(),
    }
    reader.abort();
    let _ = events.send(UpstreamEvent::Closed(format!(
        "{label}: the connection was closed by ctxbridge"
    )));
    for waiter in waiters {
        let _ = waiter.send(());
    }
    while let Ok(order) = orders.try_recv() {
        if let Keep::Shutdown(reply) = order {
            let _ = reply.send(());
        }
    }
}

/// Reads JSON-RPC messages from WebSocket frames (text; binary accepted alike) until the
/// connection ends, then reports `Closed` with the reason.
async fn read_ws<S>(mut stream: S, tx: mpsc::UnboundedSender<UpstreamEvent>, label: String)
where
    S: futures::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let reason = loop {
        let bytes = match stream.next().await {
            Some(Ok(WsMessage::Text(text))) => text.into_bytes(),
            Some(Ok(WsMessage::Binary(bytes))) => bytes,
            Some(Ok(WsMessage::Close(frame))) => {
                break match frame {
                    Some(frame) => {
                        format!("it closed the WebSocket ({} {})", frame.code, frame.reason)
                    }
                    None => "it closed the WebSocket".to_owned(),
                }
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => break format!("reading the WebSocket failed: {error}"),
            None => break "the WebSocket ended".to_owned(),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(message)) => {
                if tx.send(UpstreamEvent::Message(message)).is_err() {
                    return;
                }
            }
            _ => tracing::warn!(
                preview = %String::from_utf8_lossy(&bytes[..bytes.len().min(200)]),
                "serve: skipped a non-object message from the upstream"
            ),
        }
    };
    let _ = tx.send(UpstreamEvent::Closed(format!("{label}: {reason}")));
}

/// Sends queued messages as WebSocket text frames (one each); closes the WebSocket when the
/// queue closes.
async fn write_ws<S>(mut sink: S, mut rx: mpsc::UnboundedReceiver<String>)
where
    S: futures::Sink<WsMessage, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    while let Some(mut line) = rx.recv().await {
        if line.ends_with('\n') {
            line.pop();
        }
        if let Err(error) = sink.send(WsMessage::Text(line)).await {
            tracing::debug!(%error, "serve: writing to the upstream failed");
            return;
        }
    }
    let _ = sink.close().await;
}

async fn forward_stderr<R: AsyncRead + Unpin>(stderr: R, tail: Tail) {
    ctxbridge_jsonrpc::forward_stderr(stderr, STDERR_MAX_LINE, &tail, |line| {
        log_stderr_line("serve upstream", line)
    })
    .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn over(head: &str, tail: &str) -> Overlong {
        Overlong {
            len: 99,
            head: head.as_bytes().to_vec().into(),
            tail: tail.as_bytes().to_vec().into(),
        }
    }

    /// The ends of a dropped line name its answer's id, or its method, thread and turn, from
    /// whichever end holds them; nothing is made up where they do not.
    #[test]
    fn oversize_lines_are_read_from_their_ends() {
        let line = OversizeLine::read(
            &over(
                r#"{"method":"item/completed","params":{"item":{"text":"xx"#,
                r#"xx"},"threadId":"th-1","turnId":"tu-1"}}"#,
            ),
            10,
        );
        assert_eq!(line.method.as_deref(), Some("item/completed"));
        assert_eq!(line.thread.as_deref(), Some("th-1"));
        assert_eq!(line.turn.as_deref(), Some("tu-1"));
        assert_eq!(line.response_id, None);
        let line = OversizeLine::read(&over(r#"{"id":42,"result":{"thread":{"id":"x"#, "}}"), 10);
        assert_eq!((line.response_id, line.method), (Some(42), None));
        let line = OversizeLine::read(&over(r#"{"id":"s-1","result":"#, ""), 10);
        assert_eq!(line.response_id, None);
        let line = OversizeLine::read(&over("garbage", "more"), 10);
        assert_eq!(
            line,
            OversizeLine {
                len: 99,
                limit: 10,
                response_id: None,
                method: None,
                thread: None,
                turn: None
            }
        );
    }
}
