//! The route table, pure: which client methods are session requests ([`SessionOp`]), which
//! subscribe the asking client to their thread ([`subscribes`]), how a relayed turn shows the
//! user's own input ([`show_user_input`]), what a debug log may show of a request's params
//! ([`request_shape`]) and the shape of an answer ([`response`]).

use ctxbridge_jsonrpc::{answer_text, RequestId};
use serde_json::Value;

use crate::serve::outbound::Outbound;
use crate::serve::RpcError;

/// Which session request the seam is asked to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOp {
    /// `turn/start`: one turn of the session.
    TurnStart,
    /// `thread/compact/start`: manual compaction.
    CompactStart,
    /// `thread/resume`: the session's thread is (re)attached.
    Resume,
    /// `thread/read`: the session's conversation (across its backend threads).
    Read,
    /// `thread/turns/list`: a page of the session's turns (across its backend threads).
    TurnsList,
    /// `thread/items/list`: a page of the session's items (across its backend threads).
    ItemsList,
}

impl SessionOp {
    /// The session operation a client method is, if any.
    pub fn of(method: &str) -> Option<SessionOp> {
        match method {
            "turn/start" => Some(SessionOp::TurnStart),
            "thread/compact/start" => Some(SessionOp::CompactStart),
            "thread/resume" => Some(SessionOp::Resume),
            "thread/read" => Some(SessionOp::Read),
            "thread/turns/list" => Some(SessionOp::TurnsList),
            "thread/items/list" => Some(SessionOp::ItemsList),
            _ => None,
        }
    }

    /// The app-server method.
    pub fn method(self) -> &'static str {
        match self {
            SessionOp::TurnStart => "turn/start",
            SessionOp::CompactStart => "thread/compact/start",
            SessionOp::Resume => "thread/resume",
            SessionOp::Read => "thread/read",
            SessionOp::TurnsList => "thread/turns/list",
            SessionOp::ItemsList => "thread/items/list",
        }
    }
}

/// Methods whose thread the asking client subscribes to.
pub(crate) fn subscribes(method: &str) -> bool {
    matches!(
        method,
        "thread/resume"
            | "thread/read"
            | "thread/turns/list"
            | "turn/start"
            | "thread/compact/start"
    )
}

/// The answer to client request `id`, serialised with the id as the client wrote it.
pub(crate) fn response(id: &RequestId, outcome: Result<Value, RpcError>) -> Outbound {
    Outbound::Text(answer_text(id, outcome.as_ref()).into())
}

/// Replaces the content of the `userMessage` items of a turn notification (`item/started`,
/// `item/completed`, `turn/completed`'s items) with the user's own `input`.
pub(crate) fn show_user_input(params: &mut Value, input: &Value) {
    let replace = |item: &mut Value| {
        if item.get("type").and_then(Value::as_str) == Some("userMessage") {
            if let Some(object) = item.as_object_mut() {
                object.insert("content".to_owned(), input.clone());
            }
        }
    };
    if let Some(item) = params.get_mut("item") {
        replace(item);
    }
    if let Some(items) = params
        .pointer_mut("/turn/items")
        .and_then(Value::as_array_mut)
    {
        items.iter_mut().for_each(replace);
    }
}

/// The params fields whose values a debug log of client requests shows: ids and the
/// history and paging options (`thread/resume`, `thread/read`, `thread/turns/list`,
/// `thread/items/list`, …). Other fields are shown by name only, so no secret is logged.
const SHOWN_PARAMS: &[&str] = &[
    "threadId",
    "turnId",
    "excludeTurns",
    "initialTurnsPage",
    "path",
    "includeTurns",
    "cursor",
    "limit",
    "sortDirection",
    "itemsView",
    "ephemeral",
];

/// A client request's params for a debug log: [`SHOWN_PARAMS`] with their values, the other
/// fields' names.
pub(crate) fn request_shape(params: &Value) -> String {
    let Some(object) = params.as_object() else {
        return String::new();
    };
    object
        .iter()
        .map(|(key, value)| {
            if SHOWN_PARAMS.contains(&key.as_str()) {
                format!("{key}={value}")
            } else {
                key.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
