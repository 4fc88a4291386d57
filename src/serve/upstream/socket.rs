//! An app-server that already runs (`backend.url`): a WebSocket over TCP or a unix socket.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::config::BackendUrl;

use super::{event_of, handshake, Connector, Keep, Live, UpstreamError, UpstreamEvent, EXIT_GRACE};

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
        if let Some(event) = event_of(&bytes) {
            if tx.send(event).is_err() {
                return;
            }
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
