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
//!
//! Its rooms: this file holds the connection and the handshake both kinds share; `child`
//! starts and keeps a child, `socket` connects to a running one, `oversize` reads what an
//! over-long upstream line was.

mod child;
mod oversize;
mod socket;

pub(crate) use child::ChildConnector;
pub use oversize::OversizeLine;
pub(crate) use socket::UrlConnector;

use std::sync::Arc;
use std::time::Duration;

use ctxbridge_jsonrpc::{Dialect, Incoming, Malformed, RequestId, StderrTail};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// How long a shutdown waits for the child to exit after its stdin closes (or the socket
/// writer to finish).
const EXIT_GRACE: Duration = Duration::from_secs(3);
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

/// The Codex app-server speaks JSON-RPC without the `jsonrpc` member.
pub(crate) const DIALECT: Dialect = Dialect::Bare;

/// What the child's stdout produced.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// One JSON-RPC message, classified by the reader (off the hub's loop).
    Message(Incoming),
    /// A line that is no JSON-RPC message but names the id of a request: that request fails.
    Malformed { id: RequestId, kind: Malformed },
    /// A message over the line limit, dropped unread: what its ends tell of it.
    Oversize(OversizeLine),
    /// The connection is gone (stdout closed); the reason names the upstream.
    Closed(String),
}

/// A running, initialized upstream connection (a child, a socket, or an in-memory peer).
pub struct Live {
    /// The child's `initialize` result.
    pub initialize_result: Value,
    pub(super) writer: mpsc::UnboundedSender<String>,
    pub(super) keeper: mpsc::UnboundedSender<Keep>,
}

/// Orders for the task that owns the child process.
pub(super) enum Keep {
    Kill,
    Shutdown(oneshot::Sender<()>),
}

impl Live {
    /// Queues one message for the child's stdin. A dead writer is reported by the `Closed`
    /// event, so a failed send needs no handling here.
    pub fn send(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_line(line);
    }

    /// Queues one line (ending in `\n`) for the child's stdin.
    pub fn send_line(&self, line: String) {
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

pub(super) type Tail = Arc<StderrTail>;

/// How the router obtains an upstream connection: a `codex app-server` child
/// ([`ChildConnector`]), or an already running app-server (`backend.url`, [`UrlConnector`]);
/// an upstream of the caller's own through [`crate::serve::start_with`] — an in-memory peer
/// ([`Live::in_memory`]) in the router's tests and the bench's scripted upstream.
#[async_trait::async_trait]
pub trait Connector: Send + Sync {
    /// A new, initialized connection; its events end with one `Closed`.
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError>;
}

/// An in-memory upstream (the router's tests, the bench's scripted upstream): what the router
/// writes, and a way to answer it.
pub struct MemoryPeer {
    /// What the router wrote to the upstream, one line each.
    pub written: mpsc::UnboundedReceiver<String>,
    /// Where the peer's messages go to the router.
    pub events: mpsc::UnboundedSender<UpstreamEvent>,
}

impl Live {
    /// A connection whose other end is a [`MemoryPeer`].
    pub fn in_memory(
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

/// The event for one line (or WebSocket message) from the upstream: its message, classified;
/// `None` for a blank line or one that is no message and names no request (logged).
pub(super) fn event_of(line: &[u8]) -> Option<UpstreamEvent> {
    match Incoming::parse(line) {
        Ok(message) => message.map(UpstreamEvent::Message),
        Err(kind) => {
            tracing::warn!(
                %kind,
                preview = %String::from_utf8_lossy(&line[..line.len().min(200)]),
                "serve: skipped a message from the upstream that is no JSON-RPC message"
            );
            RequestId::in_line(line).map(|id| UpstreamEvent::Malformed { id, kind })
        }
    }
}

/// ctxbridge's own `initialize`/`initialized` on a fresh connection. On failure the connection
/// is dropped (a child killed, a socket closed) and `error` names why.
pub(super) async fn handshake(
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
                UpstreamEvent::Message(Incoming::Response { id, outcome })
                    if id.as_i64() == Some(HANDSHAKE_ID) =>
                {
                    return Ok(outcome);
                }
                UpstreamEvent::Malformed { id, kind } if id.as_i64() == Some(HANDSHAKE_ID) => {
                    return Err(format!(
                        "its initialize answer is no JSON-RPC message: {kind}"
                    ));
                }
                UpstreamEvent::Malformed { .. } => {}
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
    let outcome = match answer {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(reason)) => {
            live.kill();
            return Err(error(&reason));
        }
        Err(_) => {
            live.kill();
            return Err(error("no answer in time"));
        }
    };
    let result = match outcome {
        Ok(result) => result,
        Err(answer) => {
            live.kill();
            return Err(error(&answer.to_value().to_string()));
        }
    };
    let mut live = live;
    live.initialize_result = result;
    live.send(&json!({"method": "initialized"}));
    Ok((live, events))
}
