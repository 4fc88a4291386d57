//! The actor of one client connection: it parses frames, keeps the connection's handshake
//! state (requests before `initialize` get Codex's "Not initialized"), and hands requests,
//! notifications and answers to the router tagged with its connection id — so request ids of
//! different clients can never mix. The router writes back through the connection's
//! [`Outbound`] queue, which the transport drains.

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::serve::router::{ConnId, HubMsg, Outbound, RpcError, INVALID_REQUEST, PARSE_ERROR};

/// What a transport read from the client.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// One message's text.
    Text(String),
    /// A line-framed message over the size limit was skipped (its length).
    Oversize(usize),
}

fn error_message(id: Value, code: i64, message: impl Into<String>) -> Outbound {
    let error = RpcError::new(code, message);
    Outbound::Message(json!({"id": id, "error": {"code": error.code, "message": error.message}}))
}

/// Runs one connection until its inbound side ends.
pub(crate) async fn run(
    conn: ConnId,
    max_message_bytes: usize,
    mut inbound: mpsc::Receiver<Inbound>,
    out: mpsc::UnboundedSender<Outbound>,
    hub: mpsc::UnboundedSender<HubMsg>,
) {
    let mut initialized = false;
    while let Some(frame) = inbound.recv().await {
        let text = match frame {
            Inbound::Text(text) => text,
            Inbound::Oversize(len) => {
                let _ = out.send(error_message(
                    Value::Null,
                    INVALID_REQUEST,
                    format!(
                        "message of {len} bytes exceeds the limit of {max_message_bytes} bytes"
                    ),
                ));
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        let message = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(message)) => message,
            Ok(_) => {
                let _ = out.send(error_message(
                    Value::Null,
                    INVALID_REQUEST,
                    "Invalid request: not a JSON object",
                ));
                continue;
            }
            Err(error) => {
                tracing::debug!(%error, "serve: garbage from a client");
                let _ = out.send(error_message(
                    Value::Null,
                    PARSE_ERROR,
                    format!("Parse error: {error}"),
                ));
                continue;
            }
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.get("id").cloned();
        let params = message.get("params").cloned();
        match (method, id) {
            (Some(method), Some(id)) if method == "initialize" => {
                if initialized {
                    let _ = out.send(error_message(id, INVALID_REQUEST, "Already initialized"));
                    continue;
                }
                if params.as_ref().and_then(|p| p.get("clientInfo")).is_none() {
                    let _ = out.send(error_message(
                        id,
                        INVALID_REQUEST,
                        "Invalid request: missing field `clientInfo`",
                    ));
                    continue;
                }
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
                let message = match outcome {
                    Ok(result) => {
                        initialized = true;
                        json!({"id": id, "result": result})
                    }
                    Err(error) => {
                        json!({"id": id, "error": {"code": error.code, "message": error.message}})
                    }
                };
                let _ = out.send(Outbound::Message(message));
            }
            (Some(_), Some(id)) if !initialized => {
                let _ = out.send(error_message(id, INVALID_REQUEST, "Not initialized"));
            }
            (Some(method), Some(id)) => {
                let _ = hub.send(HubMsg::Request {
                    conn,
                    id,
                    method,
                    params,
                });
            }
            // ctxbridge sent the upstream its own `initialized`.
            (Some(method), None) if method == "initialized" || !initialized => {}
            (Some(method), None) => {
                let _ = hub.send(HubMsg::Notification {
                    conn,
                    method,
                    params,
                });
            }
            (None, Some(id)) if initialized => {
                let outcome = match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = hub.send(HubMsg::Response { conn, id, outcome });
            }
            (None, _) => {
                let _ = out.send(error_message(
                    Value::Null,
                    INVALID_REQUEST,
                    "Invalid request: neither a method nor an answer",
                ));
            }
        }
    }
    let _ = hub.send(HubMsg::Disconnect { conn });
}
