//! What an [`crate::AppServerClient`] speaks through: a [`Transport`] to one app-server. The
//! client's own child process is one ([`crate::AppServerClient::spawn`]); a connection someone
//! else owns is another ([`crate::AppServerClient::over`]: ctxbridge serve's shared upstream,
//! where many clients' requests meet one Codex).

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::AppServerError;

/// A message routed to the turn streaming on a thread.
#[derive(Debug)]
pub enum Routed {
    /// A notification about the thread (the turn stream skips those naming another turn).
    Notification { method: String, params: Value },
    /// A server request about the thread's turn (`item/tool/call`) that the turn's consumer
    /// answers (see [`Transport::respond`]).
    ServerRequest {
        id: Value,
        method: String,
        params: Value,
    },
    /// The connection died; no more events will come.
    Closed(AppServerError),
}

/// Subscribe a turn stream to a thread's messages when a request is sent.
#[derive(Debug)]
pub struct Route {
    /// The thread whose turn is followed.
    pub thread_id: String,
    /// Where its messages go, until its `turn/completed` or until the receiver is dropped.
    pub tx: mpsc::UnboundedSender<Routed>,
    /// Take the turn id from the result's `turn.id` (`turn/start`); otherwise from the first
    /// `turn/started` notification (`thread/compact/start`).
    pub turn_from_result: bool,
}

/// Server requests routed to the turn streaming on their thread instead of being declined.
pub const ROUTED_SERVER_REQUESTS: &[&str] = &["item/tool/call"];

/// One connection to an app-server that has had its `initialize` handshake (the handshake is
/// the job of whoever owns the connection).
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Sends a request and waits for its answer. With a `route`, the thread's turn messages go
    /// to it from before the request is sent (none is missed) until its `turn/completed`.
    async fn request(
        &self,
        method: &str,
        params: Value,
        route: Option<Route>,
    ) -> Result<Value, AppServerError>;

    /// Answers a server request routed to a turn ([`Routed::ServerRequest`]): a `result`, or
    /// an error with this message. Sent in the background.
    fn respond(&self, id: Value, result: Result<Value, String>);

    /// Loads a persisted thread on this connection with `thread/resume` (`params`) unless the
    /// connection has it loaded already (started, resumed or forked on it), as Codex requires
    /// before a turn.
    async fn attach(&self, thread_id: &str, params: Value) -> Result<(), AppServerError>;

    /// Whether the connection is still up.
    fn is_alive(&self) -> bool;

    /// Why the connection closed, once it has.
    fn death_reason(&self) -> Option<String>;
}

/// The thread a `thread/start`, `thread/resume` or `thread/fork` answer loaded on its
/// connection.
pub fn loaded_thread(method: &str, result: &Value) -> Option<String> {
    matches!(method, "thread/start" | "thread/resume" | "thread/fork")
        .then(|| result.pointer("/thread/id").and_then(Value::as_str))
        .flatten()
        .map(str::to_owned)
}
