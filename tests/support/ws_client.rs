//! A test WebSocket client of `ctxbridge serve` (and of any Codex app-server): JSON-RPC over
//! text frames, keeping the notifications it skipped while waiting for a response. Over TCP
//! (`ws://`) by default, or over a unix socket.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

/// How long a client waits for one message.
const PATIENCE: Duration = Duration::from_secs(60);

/// A test client.
pub struct Client<S = MaybeTlsStream<TcpStream>> {
    pub ws: tokio_tungstenite::WebSocketStream<S>,
    /// Notifications and server requests not consumed yet.
    pub seen: Vec<Value>,
    /// Every message received, in order.
    pub all: Vec<Value>,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Client::over(ws)
    }
}

impl Client<UnixStream> {
    /// Connects as Codex's own client does to a `unix://` app-server: the WebSocket upgrade
    /// (at `/rpc`) over the socket.
    pub async fn connect_unix(path: &Path) -> Client<UnixStream> {
        let stream = UnixStream::connect(path).await.unwrap();
        let (ws, _) = tokio_tungstenite::client_async("ws://localhost/rpc", stream)
            .await
            .unwrap();
        Client::over(ws)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// A client over an upgraded connection.
    pub fn over(ws: tokio_tungstenite::WebSocketStream<S>) -> Client<S> {
        Client {
            ws,
            seen: Vec::new(),
            all: Vec::new(),
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.ws
            .send(Message::Text(message.to_string()))
            .await
            .unwrap();
    }

    /// Sends `text` as it is, in one text frame.
    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.to_owned())).await.unwrap();
    }

    /// The next text frame as it came, unparsed (other frames skipped; not kept in `all`).
    pub async fn next_text(&mut self) -> String {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("no message in time")
                .expect("connection closed")
                .unwrap();
            if let Message::Text(text) = frame {
                return text;
            }
        }
    }

    /// The next JSON message (other frames skipped).
    pub async fn next(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("no message in time")
                .expect("connection closed")
                .unwrap();
            if let Message::Text(text) = frame {
                let message: Value = serde_json::from_str(&text).unwrap();
                self.all.push(message.clone());
                return message;
            }
        }
    }

    /// Sends a request and returns its response, keeping everything else in `seen`.
    pub async fn call(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
        loop {
            let message = self.next().await;
            if message.get("id") == Some(&id) && message.get("method").is_none() {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// `initialize` (as request `id`) and `initialized`; the `initialize` response.
    pub async fn initialize(&mut self, id: Value) -> Value {
        let response = self
            .call(id, "initialize", json!({"clientInfo": {"name": "test", "version": "1"}, "capabilities": {"experimentalApi": true}}))
            .await;
        self.send(json!({"method": "initialized"})).await;
        response
    }

    /// [`Client::initialize`] as request 0, which must succeed.
    pub async fn initialize_ok(&mut self) {
        let response = self.initialize(json!(0)).await;
        assert!(response["result"].is_object(), "{response}");
    }

    /// Waits for a notification with `method` (looking at kept ones first).
    pub async fn until(&mut self, method: &str) -> Value {
        if let Some(i) = self.seen.iter().position(|m| m["method"] == method) {
            return self.seen.remove(i);
        }
        loop {
            let message = self.next().await;
            if message["method"] == method {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// `thread/start` (ephemeral or not); the new thread's id.
    pub async fn start_thread(&mut self, id: Value, ephemeral: bool) -> String {
        let response = self
            .call(
                id,
                "thread/start",
                json!({"baseInstructions": "You are a test model.", "ephemeral": ephemeral}),
            )
            .await;
        response["result"]["thread"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{response}"))
            .to_owned()
    }
}
