//! The JSON-RPC client of `bench --serve`: a WebSocket connection to `serve`, or an
//! app-server child's stdio, speaking just what a timed turn needs.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use codex_app_server_client::AppServerConfig;
use ctxbridge_jsonrpc::{line_reader, next_frame, Frame, LineReader};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use crate::bench::serve::{runtime_err, Throughput, PATIENCE};
use crate::bench::{BenchError, BENCH_BASE_INSTRUCTIONS};

/// A JSON-RPC peer: a WebSocket connection to `serve`, or an app-server child's stdio.
pub(crate) enum Peer {
    Ws(
        Box<
            tokio_tungstenite::WebSocketStream<
                tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
            >,
        >,
    ),
    Stdio(Box<StdioPeer>),
}

/// An app-server child and its stdio.
pub(crate) struct StdioPeer {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: LineReader<tokio::process::ChildStdout>,
}

impl Peer {
    pub(crate) async fn ws(url: &str) -> Result<Peer, BenchError> {
        // No Nagle delay on small frames, as serve's own listener (and upstream connection).
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .map_err(|e| runtime_err("connect to serve")(e.to_string()))?;
        Ok(Peer::Ws(Box::new(ws)))
    }

    pub(crate) fn stdio(config: &AppServerConfig) -> Result<Peer, BenchError> {
        let program = config
            .command
            .first()
            .cloned()
            .ok_or_else(|| runtime_err("start codex app-server")("no command".into()))?;
        std::fs::create_dir_all(&config.codex_home).map_err(|source| BenchError::Io {
            operation: "create the Codex home",
            path: config.codex_home.clone(),
            source,
        })?;
        let mut command = tokio::process::Command::new(&program);
        command
            .args(config.args())
            .env("CODEX_HOME", &config.codex_home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|source| BenchError::Io {
            operation: "start codex app-server",
            path: PathBuf::from(&program),
            source,
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(runtime_err("start codex app-server")(
                "stdio not piped".into(),
            ));
        };
        Ok(Peer::Stdio(Box::new(StdioPeer {
            _child: child,
            stdin,
            lines: line_reader(stdout, config.max_line_bytes),
        })))
    }

    pub(crate) async fn send(&mut self, message: &Value) -> Result<(), BenchError> {
        let text = message.to_string();
        let sent = match self {
            Peer::Ws(ws) => ws
                .send(Message::Text(text))
                .await
                .map_err(|e| e.to_string()),
            Peer::Stdio(stdio) => {
                let mut line = text.into_bytes();
                line.push(b'\n');
                stdio
                    .stdin
                    .write_all(&line)
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        sent.map_err(runtime_err("send a message"))
    }

    /// The next message's text.
    pub(crate) async fn recv_text(&mut self) -> Result<String, BenchError> {
        let next = async {
            match self {
                Peer::Ws(ws) => loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(text))) => return Ok(text),
                        Some(Ok(Message::Close(_))) | None => {
                            return Err("the connection closed".to_owned())
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(e.to_string()),
                    }
                },
                Peer::Stdio(stdio) => match next_frame(&mut stdio.lines).await {
                    Ok(Some(Frame::Line(line))) => Ok(String::from_utf8_lossy(&line).into_owned()),
                    Ok(Some(Frame::TooLong(over))) => Err(format!(
                        "the app-server wrote a line of {} bytes, over the limit",
                        over.len
                    )),
                    Ok(None) => Err("the app-server closed its stdout".to_owned()),
                    Err(e) => Err(e.to_string()),
                },
            }
        };
        match tokio::time::timeout(PATIENCE, next).await {
            Ok(result) => result.map_err(runtime_err("receive a message")),
            Err(_) => Err(runtime_err("receive a message")("nothing in time".into())),
        }
    }

    pub(crate) async fn recv(&mut self) -> Result<Value, BenchError> {
        let text = self.recv_text().await?;
        serde_json::from_str(&text).map_err(|e| runtime_err("parse a message")(e.to_string()))
    }

    /// A request; its answer's result (notifications in between are skipped).
    pub(crate) async fn call(
        &mut self,
        id: u64,
        method: &str,
        params: Value,
    ) -> Result<Value, BenchError> {
        self.send(&json!({"id": id, "method": method, "params": params}))
            .await?;
        loop {
            let message = self.recv().await?;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                if let Some(error) = message.get("error") {
                    return Err(runtime_err("a request failed")(format!(
                        "{method}: {error}"
                    )));
                }
                return Ok(message.get("result").cloned().unwrap_or(Value::Null));
            }
        }
    }

    pub(crate) async fn initialize(&mut self) -> Result<(), BenchError> {
        self.call(
            0,
            "initialize",
            json!({"clientInfo": {"name": "ctxbridge-bench", "version": env!("CARGO_PKG_VERSION")}, "capabilities": {"experimentalApi": true}}),
        )
        .await?;
        self.send(&json!({"method": "initialized"})).await
    }

    pub(crate) async fn start_thread(&mut self) -> Result<String, BenchError> {
        let result = self
            .call(
                1,
                "thread/start",
                json!({"baseInstructions": BENCH_BASE_INSTRUCTIONS}),
            )
            .await?;
        result
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| runtime_err("thread/start")(format!("no thread id in {result}")))
    }

    /// One turn: its latency and the messages received until its `turn/completed` (which
    /// is found without parsing every message: a substring check, so the client's own cost
    /// stays small next to the relay's).
    pub(crate) async fn turn(
        &mut self,
        id: u64,
        thread: &str,
        text: &str,
    ) -> Result<Throughput, BenchError> {
        let started = Instant::now();
        self.send(&json!({"id": id, "method": "turn/start", "params": {"threadId": thread, "input": [{"type": "text", "text": text}]}}))
            .await?;
        let mut messages = 0usize;
        loop {
            let text = self.recv_text().await?;
            messages += 1;
            if text.contains("\"turn/completed\"") {
                let message: Value = serde_json::from_str(&text)
                    .map_err(|e| runtime_err("parse turn/completed")(e.to_string()))?;
                let status = message
                    .pointer("/params/turn/status")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if status != "completed" {
                    return Err(runtime_err("a turn failed")(message.to_string()));
                }
                return Ok(Throughput {
                    messages,
                    elapsed: started.elapsed(),
                });
            }
            if text.starts_with("{\"error\"") || text.contains("\"error\":{\"code\"") {
                return Err(runtime_err("a turn failed")(text));
            }
        }
    }
}
