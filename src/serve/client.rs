//! The actor of one client connection: it parses frames, keeps the connection's handshake
//! state (requests before `initialize` get Codex's "Not initialized"), and hands requests,
//! notifications and answers to the router tagged with its connection id — so request ids of
//! different clients can never mix. The router writes back through the connection's
//! [`Outbound`] queue, which the transport drains.

use ctxbridge_jsonrpc::codes::{INVALID_REQUEST, PARSE_ERROR};
use ctxbridge_jsonrpc::{answer_text, RequestId};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::serve::hub::{ConnId, HubMsg};
use crate::serve::outbound::{Outbound, OutboundSender};
use crate::serve::RpcError;
use ctxbridge_jsonrpc::Frame as LineFrame;

/// What a transport read from the client.
#[derive(Debug)]
pub enum Inbound {
    /// One message's text.
    Text(String),
    /// A line-framed message over the size limit was skipped (its length).
    Oversize(usize),
}

fn reject(id: RequestId, code: i64, message: impl Into<String>) -> Frame {
    Frame::Reject {
        id,
        error: RpcError::new(code, message),
    }
}

/// The message a transport hands on for one line of a newline-delimited connection: its text
/// (invalid UTF-8 replaced) or, for a line over the limit, its length.
pub(crate) fn inbound_of(frame: LineFrame) -> Inbound {
    match frame {
        LineFrame::Line(bytes) => Inbound::Text(String::from_utf8_lossy(&bytes).into_owned()),
        LineFrame::TooLong(over) => Inbound::Oversize(over.len),
    }
}

/// What one client frame asks of its connection, decided from the frame and the connection's
/// handshake state alone ([`classify`]); [`run`] acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Nothing to do: a blank line, the client's `initialized`, or a notification before
    /// `initialize`.
    Skip,
    /// Answer the client with this error under this id (as the client wrote it) and read on.
    Reject { id: RequestId, error: RpcError },
    /// `initialize` (with `clientInfo`), the first on this connection.
    Initialize { id: RequestId },
    /// A request after `initialize`, for the router.
    Request {
        id: RequestId,
        method: String,
        params: Option<Value>,
    },
    /// A notification after `initialize`, for the router.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// The client's answer to a server→client request (after `initialize`).
    Response {
        id: RequestId,
        outcome: Result<Value, Value>,
    },
}

/// Classifies one client frame: framing and JSON errors, the handshake rules (Codex's "Not
/// initialized", "Already initialized", `clientInfo` required), requests, notifications and
/// answers. `initialized`: this connection's `initialize` succeeded.
pub fn classify(frame: Inbound, initialized: bool, max_message_bytes: usize) -> Frame {
    let text = match frame {
        Inbound::Text(text) => text,
        Inbound::Oversize(len) => {
            return reject(
                RequestId::null(),
                INVALID_REQUEST,
                format!("message of {len} bytes exceeds the limit of {max_message_bytes} bytes"),
            );
        }
    };
    if text.trim().is_empty() {
        return Frame::Skip;
    }
    let mut message = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(message)) => message,
        Ok(_) => {
            return reject(
                RequestId::null(),
                INVALID_REQUEST,
                "Invalid request: not a JSON object",
            );
        }
        Err(error) => {
            tracing::debug!(%error, "serve: garbage from a client");
            return reject(
                RequestId::null(),
                PARSE_ERROR,
                format!("Parse error: {error}"),
            );
        }
    };
    let method = match message.remove("method") {
        Some(Value::String(method)) => Some(method),
        // A `method` that is not a string makes no request (and no answer either).
        Some(other) => {
            let id = message.remove("id").unwrap_or(Value::Null);
            return reject(
                RequestId::of_message(&text, &id),
                INVALID_REQUEST,
                format!(
                    "Invalid request: `method` must be a string, not {}",
                    crate::contract::json_kind(&other)
                ),
            );
        }
        None => None,
    };
    let id = message
        .remove("id")
        .map(|id| RequestId::of_message(&text, &id));
    let params = message.remove("params");
    match (method, id) {
        (Some(method), Some(id)) if method == "initialize" => {
            if initialized {
                reject(id, INVALID_REQUEST, "Already initialized")
            } else if params.as_ref().and_then(|p| p.get("clientInfo")).is_none() {
                reject(
                    id,
                    INVALID_REQUEST,
                    "Invalid request: missing field `clientInfo`",
                )
            } else {
                Frame::Initialize { id }
            }
        }
        (Some(_), Some(id)) if !initialized => reject(id, INVALID_REQUEST, "Not initialized"),
        (Some(method), Some(id)) => Frame::Request { id, method, params },
        // ctxbridge sent the upstream its own `initialized`.
        (Some(method), None) if method == "initialized" || !initialized => Frame::Skip,
        (Some(method), None) => Frame::Notification { method, params },
        (None, Some(id)) if initialized => {
            let outcome = match (message.remove("error"), message.remove("result")) {
                (Some(error), None) => Err(error),
                (None, Some(result)) => Ok(result),
                // An answer carries exactly one of them; anything else is no answer.
                (error, _) => {
                    let what = if error.is_some() {
                        "an answer with both `result` and `error`"
                    } else {
                        "neither a method nor an answer (no `result` or `error`)"
                    };
                    return reject(id, INVALID_REQUEST, format!("Invalid request: {what}"));
                }
            };
            Frame::Response { id, outcome }
        }
        (None, id) => reject(
            id.unwrap_or_else(RequestId::null),
            INVALID_REQUEST,
            "Invalid request: neither a method nor an answer",
        ),
    }
}

/// Runs one connection until its inbound side ends.
pub(crate) async fn run(
    conn: ConnId,
    max_message_bytes: usize,
    mut inbound: mpsc::Receiver<Inbound>,
    out: OutboundSender,
    hub: mpsc::UnboundedSender<HubMsg>,
) {
    let mut initialized = false;
    while let Some(frame) = inbound.recv().await {
        match classify(frame, initialized, max_message_bytes) {
            Frame::Skip => {}
            Frame::Reject { id, error } => {
                out.send(Outbound::Text(answer_text(&id, Err(&error)).into()));
            }
            Frame::Initialize { id } => {
                let (reply, answer) = oneshot::channel();
                if hub
                    .send(HubMsg::Initialize {
                        conn,
                        out: out.clone(),
                        reply,
                    })
                    .is_err()
                {
                    break;
                }
                let outcome = answer.await.unwrap_or_else(|_| {
                    Err(RpcError::new(
                        INVALID_REQUEST,
                        "ctxbridge serve is shutting down",
                    ))
                });
                initialized |= outcome.is_ok();
                let answer = answer_text(&id, outcome.as_ref());
                out.send(Outbound::Text(answer.into()));
            }
            Frame::Request { id, method, params } => {
                let _ = hub.send(HubMsg::Request {
                    conn,
                    id,
                    method,
                    params,
                });
            }
            Frame::Notification { method, params } => {
                let _ = hub.send(HubMsg::Notification {
                    conn,
                    method,
                    params,
                });
            }
            Frame::Response { id, outcome } => {
                let _ = hub.send(HubMsg::Response { conn, id, outcome });
            }
        }
    }
    let _ = hub.send(HubMsg::Disconnect { conn });
}
