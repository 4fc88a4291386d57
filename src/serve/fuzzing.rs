//! Entry points for the fuzz targets (`fuzz/`); not part of the API.
//!
//! [`client_frames`] runs a client's bytes through exactly what a stdio connection runs them
//! through — the bounded line reader, the client actor's classification with its handshake
//! state — and what the router does to a frame before any I/O: the client→backend thread-id
//! rewriting and the routing decisions taken from method and params.

use ctxbridge_jsonrpc::{line_reader, next_frame};
use serde_json::{json, Value};
use tokio::io::AsyncRead;

use crate::serve::client::{classify, inbound_of, Inbound};
use crate::serve::route::{subscribes, SessionOp};
use crate::serve::thread_map::{thread_of, Direction, ThreadMap};

pub use crate::serve::client::Frame;

/// A frame read from the client and what the router would make of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// The line's text as the client actor got it (`None`: over the limit, unread).
    pub line: Option<String>,
    /// The client actor's decision.
    pub frame: Frame,
    /// For requests, notifications and answers: the params (or result) after the
    /// client→backend thread-id rewriting.
    pub rewritten: Option<Value>,
    /// For requests: the backend thread the request is about.
    pub thread: Option<String>,
    /// For requests: the session operation it is (served through the session seam).
    pub session_op: Option<SessionOp>,
    /// For requests: whether the asking client subscribes to the thread.
    pub subscribes: bool,
}

/// Reads `reader` as one newline-delimited client connection (lines over `max_message_bytes`
/// are skipped and reported) and classifies every frame; a successful `initialize` is assumed
/// for the handshake state. `threads` is the thread-id map the router rewrites with.
pub async fn client_frames<R: AsyncRead + Unpin>(
    reader: R,
    max_message_bytes: usize,
    threads: &mut ThreadMap,
) -> Vec<Routed> {
    let mut reader = line_reader(reader, max_message_bytes);
    let mut initialized = false;
    let mut routed = Vec::new();
    while let Ok(Some(line)) = next_frame(&mut reader).await {
        let inbound = inbound_of(line);
        let text = match &inbound {
            Inbound::Text(text) => Some(text.clone()),
            Inbound::Oversize(_) => None,
        };
        let frame = classify(inbound, initialized, max_message_bytes);
        let mut entry = Routed {
            line: text,
            frame,
            rewritten: None,
            thread: None,
            session_op: None,
            subscribes: false,
        };
        match &entry.frame {
            Frame::Initialize { .. } => initialized = true,
            Frame::Request { method, params, .. } => {
                let mut params = params.clone().unwrap_or_else(|| json!({}));
                threads.rewrite(&mut params, Direction::ToBackend, Some(method));
                entry.thread = thread_of(&params).map(str::to_owned);
                entry.session_op = SessionOp::of(method);
                entry.subscribes = subscribes(method);
                entry.rewritten = Some(params);
            }
            Frame::Notification { params, .. } => {
                let mut params = params.clone().unwrap_or(Value::Null);
                threads.rewrite(&mut params, Direction::ToBackend, None);
                entry.rewritten = Some(params);
            }
            Frame::Response {
                outcome: Ok(result),
                ..
            } => {
                let mut result = result.clone();
                threads.rewrite(&mut result, Direction::ToBackend, None);
                entry.rewritten = Some(result);
            }
            Frame::Skip | Frame::Reject { .. } | Frame::Response { .. } => {}
        }
        routed.push(entry);
    }
    routed
}
