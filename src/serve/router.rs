//! The router: one task (the hub) that owns everything shared between client connections —
//! the upstream connection, the upstream request ids in flight, which client subscribes to
//! which thread, who started each running turn, the server→client requests awaiting answers,
//! and the thread-id map. Client actors and session tasks talk to it over one channel
//! ([`HubMsg`]); it never awaits a client, so one slow client cannot stall the others.
//!
//! Every client request is routed one of two ways:
//! - **Session requests** — `turn/start`, `thread/compact/start`, `thread/resume`,
//!   `thread/read`, `thread/turns/list` and `thread/items/list` on a non-ephemeral thread — go through the [`SessionTurns`] seam, run as their own task with an
//!   [`UpstreamHandle`]. [`PassThroughSessions`] relays them unchanged (SPEC §16: every thread
//!   is pure pass-through when only `legacy` is selected and `serve.engineThreads` is `none`);
//!   an engine-driven implementation runs the harness turn there instead.
//! - **Everything else** passes through: a fresh upstream id, the answer relayed back under the
//!   client's own id.
//!
//! Thread ids are rewritten both ways on every relayed message ([`ThreadMap::rewrite`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::serve::thread_map::{thread_of, thread_settings, Direction, ThreadMap};
use crate::serve::upstream::{Connector, Live, UpstreamEvent};

/// A client connection's number, unique in this process.
pub type ConnId = u64;

/// JSON-RPC error code Codex uses for application errors (including "Not initialized").
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC internal error: used when the upstream is unavailable or died.
pub const INTERNAL_ERROR: i64 = -32603;
/// After a shutdown's grace period, how long interrupted turns get to report.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// The code (`-32600` for Codex application errors).
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra data, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn from_value(error: &Value) -> RpcError {
        RpcError {
            code: error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(INTERNAL_ERROR),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_owned(),
            data: error.get("data").cloned(),
        }
    }

    fn to_value(&self) -> Value {
        serde_json::to_value(self)
            .unwrap_or_else(|_| json!({"code": self.code, "message": self.message}))
    }
}

/// What goes out to a client connection's transport.
#[derive(Debug)]
pub enum Outbound {
    /// One JSON-RPC message.
    Message(Value),
    /// Close the connection (WebSocket close code and reason).
    Close(u16, String),
}

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

/// One session request handed to [`SessionTurns`].
#[derive(Debug, Clone)]
pub struct SessionRequest {
    /// What is asked.
    pub op: SessionOp,
    /// The session key: the client thread id (stable across rotations).
    pub client_thread_id: String,
    /// The backend thread currently serving the session.
    pub backend_thread_id: String,
    /// The client connection that asked (its server→client requests go there first).
    pub conn: ConnId,
    /// The request's params, thread ids already rewritten to backend ids.
    pub params: Value,
    /// The backend thread is not loaded in the current upstream child (it was restarted, or
    /// this process never touched the thread): a turn or compaction must `thread/resume` it
    /// first, as Codex requires.
    pub needs_resume: bool,
    /// Where the request's answer goes: a session's upstream request made with
    /// [`UpstreamHandle::request_answering`] answers the client from the hub, in order with the
    /// upstream's notifications.
    pub answer: ClientAnswer,
}

/// A client request still to be answered: its connection, its id and its method.
#[derive(Debug, Clone)]
pub struct ClientAnswer {
    conn: ConnId,
    id: Value,
    method: String,
}

/// The seam between the proxy and whatever serves a session's turns. Its result is the
/// request's result in backend ids (the router rewrites it for the client). The turn's
/// notifications reach subscribed clients through the router whoever sent the upstream request.
#[async_trait]
pub trait SessionTurns: Send + Sync {
    /// Serves one session request.
    async fn serve(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<Value, RpcError>;

    /// Called once when `serve` stops, after the last turn ended (background work of an engine
    /// is awaited and the engine released there).
    async fn shutdown(&self) {}
}

/// Session requests relayed unchanged to the upstream: what `serve` does when no engine other
/// than `legacy` is selected and engine threads are off.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassThroughSessions;

#[async_trait]
impl SessionTurns for PassThroughSessions {
    async fn serve(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<Value, RpcError> {
        if request.needs_resume
            && matches!(request.op, SessionOp::TurnStart | SessionOp::CompactStart)
        {
            upstream
                .request(
                    "thread/resume",
                    json!({"threadId": request.backend_thread_id}),
                )
                .await?;
        }
        upstream
            .request_answering(request.op.method(), request.params, &request.answer)
            .await
    }
}

/// Sends requests of ctxbridge's own to the shared upstream (backend ids, no rewriting).
#[derive(Debug, Clone)]
pub struct UpstreamHandle {
    hub: mpsc::UnboundedSender<HubMsg>,
}

impl UpstreamHandle {
    /// Watches a backend thread: every upstream notification about it (backend ids, before
    /// any rewriting) is copied to the returned receiver as `(method, params)` until the
    /// receiver is dropped. Watch before starting a turn so its `turn/completed` is not missed.
    pub fn watch(&self, backend_thread_id: &str) -> mpsc::UnboundedReceiver<(String, Value)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.hub.send(HubMsg::Watch {
            thread: backend_thread_id.to_owned(),
            tx,
        });
        rx
    }

    /// Makes sure a backend thread is loaded in the current upstream child: `thread/resume`
    /// unless this child already started, resumed or forked it.
    pub async fn ensure_attached(&self, backend_thread_id: &str) -> Result<(), RpcError> {
        self.ensure_attached_with(backend_thread_id, json!({"threadId": backend_thread_id}))
            .await
    }

    /// As [`UpstreamHandle::ensure_attached`], resuming with `params` (instructions re-sent).
    pub async fn ensure_attached_with(
        &self,
        backend_thread_id: &str,
        params: Value,
    ) -> Result<(), RpcError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::EnsureAttached {
            thread: backend_thread_id.to_owned(),
            params,
            reply: tx,
        });
        await_hub_reply(sent.is_ok(), rx).await
    }

    /// Points a session's client thread id at the backend thread now serving it (a rotation:
    /// the thread map's `bind`): the session's subscribers follow it, `conn` owns its turn, and
    /// a backend thread other than the client's own is hidden from thread lists. Resolves once
    /// the hub has applied it.
    pub async fn bind_session(
        &self,
        client_thread_id: &str,
        backend_thread_id: &str,
        conn: ConnId,
    ) {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::BindSession {
            client: client_thread_id.to_owned(),
            backend: backend_thread_id.to_owned(),
            conn,
            reply: tx,
        });
        if sent.is_ok() {
            let _ = rx.await;
        }
    }

    /// The user's own input for the turn about to start on a backend thread: relayed
    /// `userMessage` items of that turn show `input` instead of what the upstream got (the
    /// projected turn input), until its `turn/completed`.
    pub fn show_user_input(&self, backend_thread_id: &str, input: Value) {
        let _ = self.hub.send(HubMsg::ShowUserInput {
            thread: backend_thread_id.to_owned(),
            input,
        });
    }

    /// The upstream's `initialize` result (its `userAgent` names its Codex version). Starts the
    /// upstream if none runs.
    pub async fn upstream_info(&self) -> Result<Value, RpcError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::UpstreamInfo { reply: tx });
        await_hub_reply(sent.is_ok(), rx).await
    }

    /// The thread settings a session's client gave (`thread/start`, overlaid by its later
    /// `thread/resume`s; see [`crate::serve::thread_map::thread_settings`]), empty when none
    /// are known.
    pub async fn session_settings(&self, client_thread_id: &str) -> Map<String, Value> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::SessionSettings {
            client: client_thread_id.to_owned(),
            reply: tx,
        });
        if sent.is_err() {
            return Map::new();
        }
        rx.await.unwrap_or_default()
    }

    /// The manual compaction of a backend thread was done by the engine alone (no upstream
    /// turn): after the `thread/compact/start` answer its clients are shown the compaction turn
    /// Codex would have run, so a client waiting for it to end (the Codex TUI) does not wait
    /// forever. Call before the session request returns.
    pub fn show_compaction_turn(&self, backend_thread_id: &str) {
        let _ = self.hub.send(HubMsg::ShowCompactionTurn {
            thread: backend_thread_id.to_owned(),
        });
    }

    /// One request; the upstream's result or error. Starts the upstream if none runs.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::Internal {
            method: method.to_owned(),
            params,
            reply: Some(tx),
            answer: None,
        });
        await_hub_reply(sent.is_ok(), rx).await
    }

    /// As [`UpstreamHandle::request`]; a result also answers the client request `answer` at
    /// once, where the upstream's answer stands among its notifications (Codex answers a
    /// `turn/start` before the turn's `turn/started`; a client must see the same order). The
    /// session request's own result is then not sent again. An error is only returned.
    pub async fn request_answering(
        &self,
        method: &str,
        params: Value,
        answer: &ClientAnswer,
    ) -> Result<Value, RpcError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::Internal {
            method: method.to_owned(),
            params,
            reply: Some(tx),
            answer: Some(answer.clone()),
        });
        await_hub_reply(sent.is_ok(), rx).await
    }
}

/// The hub's reply to a request just sent (`sent`: whether the hub took it); a hub that is gone
/// (serve shutting down) answers with an internal error.
async fn await_hub_reply<T>(
    sent: bool,
    rx: oneshot::Receiver<Result<T, RpcError>>,
) -> Result<T, RpcError> {
    let shutting_down = || RpcError::new(INTERNAL_ERROR, "ctxbridge serve is shutting down");
    if !sent {
        return Err(shutting_down());
    }
    rx.await.unwrap_or_else(|_| Err(shutting_down()))
}

/// Messages to the hub.
#[derive(Debug)]
pub enum HubMsg {
    /// A client sent `initialize`: register it and answer from the upstream's handshake.
    Initialize {
        conn: ConnId,
        out: mpsc::UnboundedSender<Outbound>,
        reply: oneshot::Sender<Result<Value, RpcError>>,
    },
    /// A client connection ended.
    Disconnect { conn: ConnId },
    /// A client request (after `initialize`).
    Request {
        conn: ConnId,
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// A client notification (after `initialized`).
    Notification {
        conn: ConnId,
        method: String,
        params: Option<Value>,
    },
    /// A client's answer to a server→client request.
    Response {
        conn: ConnId,
        id: Value,
        outcome: Result<Value, Value>,
    },
    /// A request of ctxbridge's own ([`UpstreamHandle`]); `reply: None` is fire-and-forget.
    Internal {
        method: String,
        params: Value,
        reply: Option<oneshot::Sender<Result<Value, RpcError>>>,
        /// A result also answers this client request ([`UpstreamHandle::request_answering`]).
        answer: Option<ClientAnswer>,
    },
    /// Copy the notifications of a backend thread to `tx` ([`UpstreamHandle::watch`]).
    Watch {
        thread: String,
        tx: mpsc::UnboundedSender<(String, Value)>,
    },
    /// Resume a backend thread unless the current child has it loaded.
    EnsureAttached {
        thread: String,
        params: Value,
        reply: oneshot::Sender<Result<(), RpcError>>,
    },
    /// A session moved to another backend thread ([`UpstreamHandle::bind_session`]).
    BindSession {
        client: String,
        backend: String,
        conn: ConnId,
        reply: oneshot::Sender<()>,
    },
    /// Show a user's own input in the next turn's `userMessage` items
    /// ([`UpstreamHandle::show_user_input`]).
    ShowUserInput { thread: String, input: Value },
    /// The upstream's `initialize` result ([`UpstreamHandle::upstream_info`]).
    UpstreamInfo {
        reply: oneshot::Sender<Result<Value, RpcError>>,
    },
    /// A session's recorded thread settings ([`UpstreamHandle::session_settings`]).
    SessionSettings {
        client: String,
        reply: oneshot::Sender<Map<String, Value>>,
    },
    /// Follow the answer to this thread's `thread/compact/start` with a compaction turn
    /// ([`UpstreamHandle::show_compaction_turn`]).
    ShowCompactionTurn { thread: String },
    /// A session request served by the seam finished; `thread` is the backend thread it named.
    SessionDone {
        conn: ConnId,
        id: Value,
        method: String,
        thread: String,
        outcome: Result<Value, RpcError>,
    },
    /// Something from the upstream child of `generation`.
    Upstream {
        generation: u64,
        event: UpstreamEventMsg,
    },
    /// Let running turns finish within `grace` (then interrupt them), stop the child, stop.
    Shutdown {
        grace: Duration,
        reply: oneshot::Sender<()>,
    },
    /// A shutdown timer fired.
    ShutdownDeadline,
}

/// An upstream event as the hub receives it.
#[derive(Debug)]
pub struct UpstreamEventMsg(UpstreamEvent);

enum Origin {
    Client {
        conn: ConnId,
        id: Value,
    },
    Internal(Option<oneshot::Sender<Result<Value, RpcError>>>),
    /// A session's request whose result also answers a client request.
    Answering {
        reply: oneshot::Sender<Result<Value, RpcError>>,
        answer: ClientAnswer,
    },
}

struct Pending {
    method: String,
    origin: Origin,
    /// `thread/start` / `thread/fork` with `ephemeral: true`.
    ephemeral: bool,
    /// A client's non-ephemeral `thread/start`: its thread settings, recorded for the session.
    settings: Option<Map<String, Value>>,
}

struct Client {
    out: mpsc::UnboundedSender<Outbound>,
    next_server_request: i64,
}

struct ServerRequest {
    upstream_id: Value,
    method: String,
    /// Backend ids.
    params: Value,
    thread: Option<String>,
}

struct Shutdown {
    reply: oneshot::Sender<()>,
    deadlines_seen: u8,
}

/// The hub's state. See the module doc.
pub(crate) struct Hub {
    connector: Arc<dyn Connector>,
    tx: mpsc::UnboundedSender<HubMsg>,
    sessions: Arc<dyn SessionTurns>,
    live: Option<Live>,
    generation: u64,
    next_id: i64,
    pending: HashMap<i64, Pending>,
    clients: HashMap<ConnId, Client>,
    /// Backend thread id → subscribed connections.
    subscribers: HashMap<String, BTreeSet<ConnId>>,
    /// Backend thread id → the connection that started its running turn.
    turn_owner: HashMap<String, ConnId>,
    /// Backend thread id → running turn id.
    active_turns: HashMap<String, String>,
    /// (connection, id given to it) → a server request it was asked to answer.
    server_requests: HashMap<(ConnId, i64), ServerRequest>,
    threads: ThreadMap,
    /// Backend threads loaded in the current child (started, resumed or forked through it).
    attached: std::collections::HashSet<String>,
    /// Backend thread id → session tasks watching its notifications.
    watchers: HashMap<String, Vec<mpsc::UnboundedSender<(String, Value)>>>,
    /// Backend thread id → the user's own input of its running session turn.
    user_inputs: HashMap<String, Value>,
    /// Backend threads whose `thread/compact/start` answer is to be followed by a compaction
    /// turn made up here (the engine compacted without the upstream).
    compaction_turns: std::collections::HashSet<String>,
    /// Client requests (connection, id as JSON text) already answered by the upstream's own
    /// answer; their session request's result is not sent again.
    answered: std::collections::HashSet<(ConnId, String)>,
    shutdown: Option<Shutdown>,
}

/// Starts the hub task; returns its channel.
pub(crate) fn start(
    connector: Arc<dyn Connector>,
    threads: ThreadMap,
    sessions: Arc<dyn SessionTurns>,
) -> (mpsc::UnboundedSender<HubMsg>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let hub = Hub {
        connector,
        tx: tx.clone(),
        sessions,
        live: None,
        generation: 0,
        next_id: 1,
        pending: HashMap::new(),
        clients: HashMap::new(),
        subscribers: HashMap::new(),
        turn_owner: HashMap::new(),
        active_turns: HashMap::new(),
        server_requests: HashMap::new(),
        threads,
        attached: std::collections::HashSet::new(),
        watchers: HashMap::new(),
        user_inputs: HashMap::new(),
        compaction_turns: std::collections::HashSet::new(),
        answered: std::collections::HashSet::new(),
        shutdown: None,
    };
    let task = tokio::spawn(hub.run(rx));
    (tx, task)
}

fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"id": id, "result": result}),
        Err(error) => json!({"id": id, "error": error.to_value()}),
    }
}

/// Replaces the content of the `userMessage` items of a turn notification (`item/started`,
/// `item/completed`, `turn/completed`'s items) with the user's own `input`.
fn show_user_input(params: &mut Value, input: &Value) {
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
fn request_shape(params: &Value) -> String {
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

impl Hub {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<HubMsg>) {
        while let Some(message) = rx.recv().await {
            match message {
                HubMsg::Initialize { conn, out, reply } => {
                    let outcome = self.initialize(conn, out).await;
                    let _ = reply.send(outcome);
                }
                HubMsg::Disconnect { conn } => self.disconnect(conn),
                HubMsg::Request {
                    conn,
                    id,
                    method,
                    params,
                } => self.client_request(conn, id, method, params).await,
                HubMsg::Notification {
                    conn,
                    method,
                    params,
                } => {
                    tracing::debug!(conn, %method, "serve: client notification passed through");
                    let mut params = params.unwrap_or(Value::Null);
                    self.threads
                        .rewrite(&mut params, Direction::ToBackend, None);
                    if let Ok(live) = self.ensure_live().await {
                        live.send(&json!({"method": method, "params": params}));
                    }
                }
                HubMsg::Response { conn, id, outcome } => self.client_response(conn, id, outcome),
                HubMsg::Internal {
                    method,
                    params,
                    reply,
                    answer,
                } => {
                    let origin = match (reply, answer) {
                        (Some(reply), Some(answer)) => Origin::Answering { reply, answer },
                        (reply, _) => Origin::Internal(reply),
                    };
                    self.forward(method, params, origin, false).await;
                }
                HubMsg::UpstreamInfo { reply } => {
                    let outcome = self
                        .ensure_live()
                        .await
                        .map(|live| live.initialize_result.clone());
                    let _ = reply.send(outcome);
                }
                HubMsg::SessionSettings { client, reply } => {
                    let _ = reply.send(self.threads.settings(&client).unwrap_or_default());
                }
                HubMsg::ShowUserInput { thread, input } => {
                    self.user_inputs.insert(thread, input);
                }
                HubMsg::Watch { thread, tx } => {
                    self.watchers.entry(thread).or_default().push(tx);
                }
                HubMsg::EnsureAttached {
                    thread,
                    params,
                    reply,
                } => {
                    if self.live.is_some() && self.attached.contains(&thread) {
                        let _ = reply.send(Ok(()));
                    } else {
                        let (tx, rx) = oneshot::channel();
                        self.forward(
                            "thread/resume".to_owned(),
                            params,
                            Origin::Internal(Some(tx)),
                            false,
                        )
                        .await;
                        tokio::spawn(async move {
                            let outcome = rx.await.unwrap_or_else(|_| {
                                Err(RpcError::new(INTERNAL_ERROR, "upstream request dropped"))
                            });
                            let _ = reply.send(outcome.map(|_| ()));
                        });
                    }
                }
                HubMsg::BindSession {
                    client,
                    backend,
                    conn,
                    reply,
                } => {
                    self.bind_session(&client, &backend, conn);
                    let _ = reply.send(());
                }
                HubMsg::ShowCompactionTurn { thread } => {
                    self.compaction_turns.insert(thread);
                }
                HubMsg::SessionDone {
                    conn,
                    id,
                    method,
                    thread,
                    outcome,
                } => {
                    let answered = outcome.is_ok();
                    if !self.answered.remove(&(conn, id.to_string())) {
                        let outcome = outcome.map(|mut result| {
                            self.threads
                                .rewrite(&mut result, Direction::ToClient, Some(&method));
                            result
                        });
                        self.send_to(conn, response(id, outcome));
                    }
                    if self.compaction_turns.remove(&thread)
                        && answered
                        && method == "thread/compact/start"
                    {
                        self.compaction_turn(&thread);
                    }
                }
                HubMsg::Upstream { generation, event } => {
                    if generation == self.generation && self.live.is_some() {
                        match event.0 {
                            UpstreamEvent::Message(message) => self.upstream_message(message),
                            UpstreamEvent::Closed(reason) => self.upstream_died(reason),
                        }
                    }
                }
                HubMsg::Shutdown { grace, reply } => {
                    self.shutdown = Some(Shutdown {
                        reply,
                        deadlines_seen: 0,
                    });
                    self.arm_deadline(grace);
                }
                HubMsg::ShutdownDeadline => {
                    if let Some(shutdown) = self.shutdown.as_mut() {
                        shutdown.deadlines_seen += 1;
                        if shutdown.deadlines_seen == 1 && !self.active_turns.is_empty() {
                            tracing::warn!(
                                turns = self.active_turns.len(),
                                "serve: interrupting turns still running at shutdown"
                            );
                            self.interrupt_all();
                            self.arm_deadline(INTERRUPT_GRACE);
                        } else {
                            self.active_turns.clear();
                        }
                    }
                }
            }
            if self.shutdown.is_some() && self.active_turns.is_empty() {
                break;
            }
        }
        if let Some(live) = self.live.take() {
            live.shutdown().await;
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.reply.send(());
        }
    }

    fn arm_deadline(&self, after: Duration) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(HubMsg::ShutdownDeadline);
        });
    }

    fn interrupt_all(&mut self) {
        let turns: Vec<(String, String)> = self
            .active_turns
            .iter()
            .map(|(thread, turn)| (thread.clone(), turn.clone()))
            .collect();
        if let Some(live) = &self.live {
            for (thread, turn) in turns {
                let id = self.next_id;
                self.next_id += 1;
                self.pending.insert(
                    id,
                    Pending {
                        method: "turn/interrupt".to_owned(),
                        origin: Origin::Internal(None),
                        ephemeral: false,
                        settings: None,
                    },
                );
                live.send(&json!({"id": id, "method": "turn/interrupt", "params": {"threadId": thread, "turnId": turn}}));
            }
        }
    }

    /// The live upstream, started (with its handshake) if none runs.
    async fn ensure_live(&mut self) -> Result<&Live, RpcError> {
        if self.live.is_none() {
            self.generation += 1;
            let generation = self.generation;
            let (live, mut events) = self.connector.connect(generation).await.map_err(|error| {
                tracing::warn!(%error, "serve: could not start the upstream");
                RpcError::new(INTERNAL_ERROR, crate::serve::error_chain(&error))
            })?;
            let tx = self.tx.clone();
            tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    let message = HubMsg::Upstream {
                        generation,
                        event: UpstreamEventMsg(event),
                    };
                    if tx.send(message).is_err() {
                        return;
                    }
                }
            });
            self.live = Some(live);
            self.attached.clear();
        }
        self.live.as_ref().ok_or_else(|| {
            RpcError::new(INTERNAL_ERROR, "upstream codex app-server is not running")
        })
    }

    async fn initialize(
        &mut self,
        conn: ConnId,
        out: mpsc::UnboundedSender<Outbound>,
    ) -> Result<Value, RpcError> {
        let live = self.ensure_live().await?;
        let mut result = live.initialize_result.clone();
        let suffix = format!("ctxbridge/{}", env!("CARGO_PKG_VERSION"));
        let agent = match result.get("userAgent").and_then(Value::as_str) {
            Some(agent) => format!("{agent} {suffix}"),
            None => suffix,
        };
        if let Some(object) = result.as_object_mut() {
            object.insert("userAgent".to_owned(), Value::String(agent));
        }
        self.clients.insert(
            conn,
            Client {
                out,
                next_server_request: 0,
            },
        );
        tracing::info!(conn, "serve: client initialized");
        Ok(result)
    }

    fn send_to(&self, conn: ConnId, message: Value) -> bool {
        match self.clients.get(&conn) {
            Some(client) => client.out.send(Outbound::Message(message)).is_ok(),
            None => false,
        }
    }

    /// See [`UpstreamHandle::bind_session`].
    fn bind_session(&mut self, client: &str, backend: &str, conn: ConnId) {
        let old = self.threads.backend_of(client);
        if old == backend {
            self.turn_owner.insert(backend.to_owned(), conn);
            return;
        }
        if backend != client {
            if let Err(error) = self.threads.hide(backend) {
                tracing::warn!(%backend, %error, "serve: could not record a hidden backend thread");
            }
        }
        if let Err(error) = self.threads.bind(client, backend) {
            tracing::warn!(%client, %backend, %error, "serve: could not record the session's new backend thread");
        }
        let mut followers = self.subscribers.get(&old).cloned().unwrap_or_default();
        followers.insert(conn);
        for follower in followers {
            self.subscribe(follower, backend);
        }
        self.turn_owner.insert(backend.to_owned(), conn);
        tracing::info!(%client, from = %old, to = %backend, "serve: session moved to a new backend thread");
    }

    fn subscribe(&mut self, conn: ConnId, thread: &str) {
        self.subscribers
            .entry(thread.to_owned())
            .or_default()
            .insert(conn);
    }

    async fn client_request(
        &mut self,
        conn: ConnId,
        id: Value,
        method: String,
        params: Option<Value>,
    ) {
        let mut params = params.unwrap_or_else(|| json!({}));
        tracing::debug!(conn, %method, params = %request_shape(&params), "serve: client request");
        self.threads
            .rewrite(&mut params, Direction::ToBackend, Some(&method));
        let thread = thread_of(&params).map(str::to_owned);
        if let Some(thread) = &thread {
            if subscribes(&method) {
                self.subscribe(conn, thread);
            }
            if method == "turn/start" {
                self.turn_owner.insert(thread.clone(), conn);
            }
            if method == "thread/unsubscribe" {
                if let Some(set) = self.subscribers.get_mut(thread) {
                    let was_subscribed = set.remove(&conn);
                    if !set.is_empty() {
                        // Others still watch it: the upstream must keep the thread loaded.
                        let status = if was_subscribed {
                            "unsubscribed"
                        } else {
                            "notSubscribed"
                        };
                        self.send_to(conn, response(id, Ok(json!({"status": status}))));
                        return;
                    }
                }
            }
        }
        if let (Some(op), Some(thread)) = (SessionOp::of(&method), &thread) {
            if !self.threads.is_ephemeral(thread) {
                if op == SessionOp::Resume {
                    let client = self.threads.client_of(thread);
                    let settings = thread_settings(&params);
                    if let Err(error) = self.threads.record_settings(&client, settings, true) {
                        tracing::warn!(%client, %error, "serve: could not record the thread settings of a resume");
                    }
                }
                let request = SessionRequest {
                    op,
                    client_thread_id: self.threads.client_of(thread),
                    backend_thread_id: thread.clone(),
                    conn,
                    params,
                    needs_resume: !self.attached.contains(thread),
                    answer: ClientAnswer {
                        conn,
                        id: id.clone(),
                        method: method.clone(),
                    },
                };
                let sessions = self.sessions.clone();
                let handle = UpstreamHandle {
                    hub: self.tx.clone(),
                };
                let tx = self.tx.clone();
                let thread = thread.clone();
                tokio::spawn(async move {
                    let outcome = sessions.serve(request, handle).await;
                    let _ = tx.send(HubMsg::SessionDone {
                        conn,
                        id,
                        method,
                        thread,
                        outcome,
                    });
                });
                return;
            }
        }
        let ephemeral = params.get("ephemeral").and_then(Value::as_bool) == Some(true);
        let settings = (method == "thread/start" && !ephemeral).then(|| thread_settings(&params));
        self.forward_with(
            method,
            params,
            Origin::Client { conn, id },
            ephemeral,
            settings,
        )
        .await;
    }

    async fn forward(&mut self, method: String, params: Value, origin: Origin, ephemeral: bool) {
        self.forward_with(method, params, origin, ephemeral, None)
            .await;
    }

    async fn forward_with(
        &mut self,
        method: String,
        params: Value,
        origin: Origin,
        ephemeral: bool,
        settings: Option<Map<String, Value>>,
    ) {
        let upstream_id = self.next_id;
        self.next_id += 1;
        let outcome = match self.ensure_live().await {
            Ok(live) => {
                live.send(&json!({"id": upstream_id, "method": method, "params": params}));
                Ok(())
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {
                self.pending.insert(
                    upstream_id,
                    Pending {
                        method,
                        origin,
                        ephemeral,
                        settings,
                    },
                );
            }
            Err(error) => self.complete(origin, &method, Err(error)),
        }
    }

    fn complete(&mut self, origin: Origin, method: &str, outcome: Result<Value, RpcError>) {
        match origin {
            Origin::Client { conn, id } => {
                let outcome = outcome.map(|mut result| {
                    self.threads
                        .rewrite(&mut result, Direction::ToClient, Some(method));
                    result
                });
                self.send_to(conn, response(id, outcome));
            }
            Origin::Internal(Some(reply)) => {
                let _ = reply.send(outcome);
            }
            Origin::Internal(None) => {
                if let Err(error) = outcome {
                    tracing::warn!(%method, error = %error.message, "serve: internal request failed");
                }
            }
            Origin::Answering { reply, answer } => {
                if let Ok(result) = &outcome {
                    let mut result = result.clone();
                    self.threads
                        .rewrite(&mut result, Direction::ToClient, Some(&answer.method));
                    self.send_to(answer.conn, response(answer.id.clone(), Ok(result)));
                    self.answered.insert((answer.conn, answer.id.to_string()));
                }
                let _ = reply.send(outcome);
            }
        }
    }

    fn client_response(&mut self, conn: ConnId, id: Value, outcome: Result<Value, Value>) {
        let Some(request) = id
            .as_i64()
            .and_then(|n| self.server_requests.remove(&(conn, n)))
        else {
            tracing::warn!(conn, %id, "serve: a client answered an unknown server request");
            return;
        };
        let message = match outcome {
            Ok(mut result) => {
                self.threads
                    .rewrite(&mut result, Direction::ToBackend, None);
                json!({"id": request.upstream_id, "result": result})
            }
            Err(error) => json!({"id": request.upstream_id, "error": error}),
        };
        if let Some(live) = &self.live {
            live.send(&message);
        }
    }

    fn disconnect(&mut self, conn: ConnId) {
        if self.clients.remove(&conn).is_none() {
            return;
        }
        tracing::info!(conn, "serve: client disconnected");
        for set in self.subscribers.values_mut() {
            set.remove(&conn);
        }
        self.subscribers.retain(|_, set| !set.is_empty());
        self.turn_owner.retain(|_, owner| *owner != conn);
        let orphaned: Vec<(ConnId, i64)> = self
            .server_requests
            .keys()
            .filter(|(owner, _)| *owner == conn)
            .copied()
            .collect();
        for key in orphaned {
            if let Some(request) = self.server_requests.remove(&key) {
                self.route_server_request(request);
            }
        }
    }

    fn upstream_message(&mut self, message: Map<String, Value>) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method, message.get("id").cloned()) {
            (Some(method), Some(id)) => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                let thread = thread_of(&params).map(str::to_owned);
                self.route_server_request(ServerRequest {
                    upstream_id: id,
                    method,
                    params,
                    thread,
                });
            }
            (Some(method), None) => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                self.upstream_notification(method, params);
            }
            (None, Some(id)) => {
                let Some(pending) = id.as_i64().and_then(|n| self.pending.remove(&n)) else {
                    tracing::warn!(%id, "serve: upstream answered an unknown id");
                    return;
                };
                let outcome = match message.get("error") {
                    Some(error) => Err(RpcError::from_value(error)),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                if let Ok(result) = &outcome {
                    if matches!(
                        pending.method.as_str(),
                        "thread/start" | "thread/resume" | "thread/fork"
                    ) {
                        if let Some(thread) = result.pointer("/thread/id").and_then(Value::as_str) {
                            self.attached.insert(thread.to_owned());
                        }
                    }
                }
                if let (Ok(result), Origin::Internal(_)) = (&outcome, &pending.origin) {
                    // A thread ctxbridge starts itself is a session's rotation target: never
                    // announced to clients nor listed (it is bound to its client id later).
                    if pending.method == "thread/start" {
                        if let Some(thread) = result.pointer("/thread/id").and_then(Value::as_str) {
                            if let Err(error) = self.threads.hide(thread) {
                                tracing::warn!(%thread, %error, "serve: could not record a hidden backend thread");
                            }
                        }
                    }
                }
                if let (Ok(result), Origin::Client { conn, .. }) = (&outcome, &pending.origin) {
                    if matches!(pending.method.as_str(), "thread/start" | "thread/fork") {
                        if let Some(thread) = result.pointer("/thread/id").and_then(Value::as_str) {
                            let thread = thread.to_owned();
                            if pending.ephemeral {
                                self.threads.mark_ephemeral(&thread);
                            } else if let Err(error) = self.threads.bind(&thread, &thread) {
                                tracing::warn!(%thread, %error, "serve: could not record the new thread");
                            }
                            if let Some(settings) = pending.settings.clone() {
                                if let Err(error) =
                                    self.threads.record_settings(&thread, settings, false)
                                {
                                    tracing::warn!(%thread, %error, "serve: could not record the thread settings");
                                }
                            }
                            self.subscribe(*conn, &thread);
                        }
                    }
                }
                self.complete(pending.origin, &pending.method, outcome);
            }
            (None, None) => tracing::warn!("serve: upstream message with neither id nor method"),
        }
    }

    fn upstream_notification(&mut self, method: String, mut params: Value) {
        let thread = thread_of(&params).map(str::to_owned);
        if let Some(thread) = &thread {
            if let Some(watchers) = self.watchers.get_mut(thread) {
                watchers.retain(|tx| tx.send((method.clone(), params.clone())).is_ok());
                if watchers.is_empty() {
                    self.watchers.remove(thread);
                }
            }
            if method == "thread/started" && self.threads.is_hidden(thread) {
                tracing::debug!(%thread, "serve: a hidden backend thread started; not announced");
                return;
            }
            match method.as_str() {
                "turn/started" => {
                    if let Some(turn) = params.pointer("/turn/id").and_then(Value::as_str) {
                        self.active_turns.insert(thread.clone(), turn.to_owned());
                    }
                }
                "turn/completed" => {
                    self.active_turns.remove(thread);
                    self.turn_owner.remove(thread);
                }
                _ => {}
            }
            if let Some(input) = self.user_inputs.get(thread) {
                show_user_input(&mut params, input);
                if method == "turn/completed" {
                    self.user_inputs.remove(thread);
                }
            }
        }
        self.threads.rewrite(&mut params, Direction::ToClient, None);
        let message = json!({"method": method, "params": params});
        // Thread-scoped notifications go to the thread's subscribers; `thread/started` (a new
        // thread announced) and thread-less ones (account, config, …) to every client.
        match thread.filter(|_| method != "thread/started") {
            Some(thread) => {
                if let Some(set) = self.subscribers.get(&thread) {
                    for conn in set {
                        self.send_to(*conn, message.clone());
                    }
                }
            }
            None => {
                for client in self.clients.values() {
                    let _ = client.out.send(Outbound::Message(message.clone()));
                }
            }
        }
    }

    /// The notifications of the turn Codex runs for `thread/compact/start` (`turn/started`, a
    /// `contextCompaction` item started and completed, `turn/completed`), relayed like the
    /// upstream's own, for a compaction the engine did without the upstream.
    fn compaction_turn(&mut self, thread: &str) {
        let turn = uuid::Uuid::now_v7().to_string();
        let item = json!({"type": "contextCompaction", "id": uuid::Uuid::now_v7().to_string()});
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let now_s = now_ms / 1000;
        self.upstream_notification(
            "turn/started".to_owned(),
            json!({"threadId": thread, "turn": {"id": turn, "items": [], "status": "inProgress", "error": null, "startedAt": now_s}}),
        );
        self.upstream_notification(
            "item/started".to_owned(),
            json!({"threadId": thread, "turnId": turn, "item": item, "startedAtMs": now_ms}),
        );
        self.upstream_notification(
            "item/completed".to_owned(),
            json!({"threadId": thread, "turnId": turn, "item": item, "completedAtMs": now_ms}),
        );
        self.upstream_notification(
            "turn/completed".to_owned(),
            json!({"threadId": thread, "turn": {"id": turn, "items": [], "status": "completed", "error": null, "startedAt": now_s, "completedAt": now_s, "durationMs": 0}}),
        );
    }

    /// Sends a server→client request to the turn's starter, else a subscriber of its thread,
    /// else (thread-less) any client. Nobody left: decline it and interrupt the turn.
    fn route_server_request(&mut self, request: ServerRequest) {
        let target = match &request.thread {
            Some(thread) => self
                .turn_owner
                .get(thread)
                .copied()
                .filter(|conn| self.clients.contains_key(conn))
                .or_else(|| {
                    self.subscribers.get(thread).and_then(|set| {
                        set.iter()
                            .copied()
                            .find(|conn| self.clients.contains_key(conn))
                    })
                }),
            None => self.clients.keys().next().copied(),
        };
        let Some(conn) = target else {
            tracing::warn!(method = %request.method, thread = ?request.thread, "serve: no client can answer a server request; interrupting the turn");
            if let Some(live) = &self.live {
                live.send(&json!({"id": request.upstream_id, "error": {"code": INVALID_REQUEST, "message": "no client connected to answer"}}));
            }
            if let Some(thread) = &request.thread {
                let turn = self.active_turns.get(thread).cloned().or_else(|| {
                    request
                        .params
                        .get("turnId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
                if let Some(turn) = turn {
                    let tx = self.tx.clone();
                    let _ = tx.send(HubMsg::Internal {
                        method: "turn/interrupt".to_owned(),
                        params: json!({"threadId": thread, "turnId": turn}),
                        reply: None,
                        answer: None,
                    });
                }
            }
            return;
        };
        let Some(client) = self.clients.get_mut(&conn) else {
            return;
        };
        client.next_server_request += 1;
        let id = client.next_server_request;
        let mut params = request.params.clone();
        self.threads.rewrite(&mut params, Direction::ToClient, None);
        let message = json!({"id": id, "method": request.method, "params": params});
        let _ = client.out.send(Outbound::Message(message));
        self.server_requests.insert((conn, id), request);
    }

    /// The child is gone: fail what waited on it and end its running turns with a clear error.
    fn upstream_died(&mut self, reason: String) {
        tracing::warn!(%reason, "serve: upstream connection closed");
        self.live = None;
        self.attached.clear();
        let message = format!("{reason}; it will be restarted on the next request");
        for (_, pending) in std::mem::take(&mut self.pending) {
            let error = RpcError::new(INTERNAL_ERROR, message.clone());
            self.complete(pending.origin, &pending.method, Err(error));
        }
        self.server_requests.clear();
        self.turn_owner.clear();
        for (thread, turn) in std::mem::take(&mut self.active_turns) {
            let error = json!({"message": message});
            self.upstream_notification(
                "error".to_owned(),
                json!({"threadId": thread, "turnId": turn, "willRetry": false, "error": error}),
            );
            self.upstream_notification(
                "turn/completed".to_owned(),
                json!({"threadId": thread, "turn": {"id": turn, "items": [], "status": "failed", "error": error}}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::serve::upstream::{MemoryPeer, UpstreamError};

    /// Hands out one prepared in-memory connection.
    struct MemoryConnector(
        std::sync::Mutex<Option<(Live, mpsc::UnboundedReceiver<UpstreamEvent>)>>,
    );

    #[async_trait]
    impl Connector for MemoryConnector {
        async fn connect(
            &self,
            _generation: u64,
        ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
            self.0
                .lock()
                .unwrap()
                .take()
                .ok_or(UpstreamError::NoCommand)
        }
    }

    struct Rig {
        hub: mpsc::UnboundedSender<HubMsg>,
        peer: MemoryPeer,
    }

    impl Rig {
        fn new(threads: ThreadMap) -> Rig {
            Rig::with_sessions(threads, Arc::new(PassThroughSessions))
        }

        fn with_sessions(threads: ThreadMap, sessions: Arc<dyn SessionTurns>) -> Rig {
            let (live, events, peer) =
                Live::in_memory(json!({"userAgent": "codex/1", "codexHome": "/h"}));
            let connector = Arc::new(MemoryConnector(std::sync::Mutex::new(Some((live, events)))));
            let (hub, _task) = start(connector, threads, sessions);
            Rig { hub, peer }
        }

        async fn client(&self, conn: ConnId) -> mpsc::UnboundedReceiver<Outbound> {
            let (out, rx) = mpsc::unbounded_channel();
            let (reply, answer) = oneshot::channel();
            self.hub
                .send(HubMsg::Initialize { conn, out, reply })
                .unwrap();
            let result = answer.await.unwrap().unwrap();
            assert_eq!(
                result["userAgent"],
                format!("codex/1 ctxbridge/{}", env!("CARGO_PKG_VERSION"))
            );
            rx
        }

        fn request(&self, conn: ConnId, id: Value, method: &str, params: Value) {
            self.hub
                .send(HubMsg::Request {
                    conn,
                    id,
                    method: method.to_owned(),
                    params: Some(params),
                })
                .unwrap();
        }

        /// The next message the router wrote upstream.
        async fn upstream_got(&mut self) -> Value {
            let line = self.peer.written.recv().await.unwrap();
            serde_json::from_str(&line).unwrap()
        }

        fn upstream_says(&self, message: Value) {
            let Value::Object(map) = message else {
                panic!("not an object")
            };
            self.peer.events.send(UpstreamEvent::Message(map)).unwrap();
        }
    }

    async fn got(rx: &mut mpsc::UnboundedReceiver<Outbound>) -> Value {
        match rx.recv().await.unwrap() {
            Outbound::Message(message) => message,
            Outbound::Close(code, reason) => panic!("closed {code} {reason}"),
        }
    }

    /// A session's `turn/start` is answered where the upstream's answer stands among its
    /// notifications: before the turn's `turn/started`, deltas and `turn/completed`, even when
    /// they all arrive at once (the session request's task would answer only later).
    #[tokio::test]
    async fn a_session_turn_is_answered_before_its_notifications() {
        let mut rig = Rig::new(ThreadMap::new(None));
        let mut client = rig.client(1).await;
        rig.request(
            1,
            json!("turn-1"),
            "turn/start",
            json!({"threadId": "th", "input": []}),
        );
        let resume = rig.upstream_got().await;
        assert_eq!(resume["method"], "thread/resume");
        rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
        let start = rig.upstream_got().await;
        assert_eq!(start["method"], "turn/start");
        let turn = json!({"id": "tu", "status": "inProgress", "items": []});
        rig.upstream_says(json!({"id": start["id"], "result": {"turn": turn}}));
        rig.upstream_says(
            json!({"method": "turn/started", "params": {"threadId": "th", "turn": turn}}),
        );
        rig.upstream_says(json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "turnId": "tu", "itemId": "m", "delta": "x"}}));
        rig.upstream_says(json!({"method": "turn/completed", "params": {"threadId": "th", "turn": {"id": "tu", "status": "completed", "items": []}}}));
        assert_eq!(
            got(&mut client).await,
            json!({"id": "turn-1", "result": {"turn": turn}})
        );
        for method in ["turn/started", "item/agentMessage/delta", "turn/completed"] {
            assert_eq!(got(&mut client).await["method"], method);
        }
        // The session request's own result is not sent a second time.
        rig.request(1, json!(2), "config/read", json!({}));
        let read = rig.upstream_got().await;
        rig.upstream_says(json!({"id": read["id"], "result": {"config": {}}}));
        assert_eq!(got(&mut client).await["id"], 2);
    }

    /// The same for an engine session: the harness runs the turn (the session's first: the
    /// client's thread is adopted, resumed and given its instructions), and the client still
    /// gets the `turn/start` answer before the turn's notifications, then no second answer.
    #[tokio::test]
    async fn an_engine_turn_is_answered_before_its_notifications() {
        use crate::serve::sessions::{EngineSessions, ServeBackend};
        let store = Arc::new(crate::store::SqliteStore::in_memory().unwrap());
        let backend = Arc::new(ServeBackend::new());
        let app = crate::app::open_with_backend(
            &crate::config::Config::default(),
            store,
            backend.clone(),
        )
        .await;
        let sessions = Arc::new(EngineSessions::new(Arc::new(app.harness), backend));
        let rig = Rig::with_sessions(ThreadMap::new(None), sessions);
        let mut client = rig.client(1).await;
        let Rig { hub, mut peer } = rig;
        // The scripted upstream: every request answered; a turn's notifications follow its
        // answer at once.
        tokio::spawn(async move {
            while let Some(line) = peer.written.recv().await {
                let request: Value = serde_json::from_str(&line).unwrap();
                let Some(id) = request.get("id").cloned() else {
                    continue;
                };
                let says = |message: Value| {
                    let Value::Object(map) = message else {
                        panic!("not an object")
                    };
                    let _ = peer.events.send(UpstreamEvent::Message(map));
                };
                match request["method"].as_str().unwrap() {
                    "turn/start" => {
                        let turn = json!({"id": "tu", "status": "inProgress", "items": []});
                        says(json!({"id": id, "result": {"turn": turn}}));
                        says(
                            json!({"method": "turn/started", "params": {"threadId": "th", "turn": turn}}),
                        );
                        says(
                            json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "turnId": "tu", "itemId": "m", "delta": "hi"}}),
                        );
                        says(
                            json!({"method": "turn/completed", "params": {"threadId": "th", "turn": {"id": "tu", "status": "completed", "items": []}}}),
                        );
                    }
                    "thread/resume" => says(json!({"id": id, "result": {"thread": {"id": "th"}}})),
                    _ => says(json!({"id": id, "result": {}})),
                }
            }
        });
        hub.send(HubMsg::Request {
            conn: 1,
            id: json!("turn-1"),
            method: "turn/start".to_owned(),
            params: Some(json!({"threadId": "th", "input": [{"type": "text", "text": "hello"}]})),
        })
        .unwrap();
        let answer = got(&mut client).await;
        assert_eq!(answer["id"], "turn-1", "{answer}");
        assert_eq!(answer["result"]["turn"]["id"], "tu", "{answer}");
        for method in ["turn/started", "item/agentMessage/delta", "turn/completed"] {
            let message = got(&mut client).await;
            assert_eq!(message["method"], method, "{message}");
        }
        // The harness records the turn; its session request ends without a second answer.
        hub.send(HubMsg::Request {
            conn: 1,
            id: json!(2),
            method: "config/read".to_owned(),
            params: Some(json!({})),
        })
        .unwrap();
        let next = got(&mut client).await;
        assert_eq!(next["id"], 2, "{next}");
    }

    /// A session's manual compaction done without an upstream turn (the engine compacted
    /// alone) is answered, then followed by the turn Codex runs for `thread/compact/start` —
    /// `turn/started`, a `contextCompaction` item started and completed, `turn/completed` —
    /// under the client's thread id, so a client waiting for the compaction to end (the Codex
    /// TUI) sees it end.
    #[tokio::test]
    async fn engine_compaction_is_followed_by_a_compaction_turn() {
        struct EngineCompacts;
        #[async_trait]
        impl SessionTurns for EngineCompacts {
            async fn serve(
                &self,
                request: SessionRequest,
                upstream: UpstreamHandle,
            ) -> Result<Value, RpcError> {
                assert_eq!(request.op, SessionOp::CompactStart);
                assert_eq!(request.backend_thread_id, "backend");
                upstream.show_compaction_turn(&request.backend_thread_id);
                Ok(json!({}))
            }
        }
        let mut threads = ThreadMap::new(None);
        threads.bind("client", "backend").unwrap();
        let rig = Rig::with_sessions(threads, Arc::new(EngineCompacts));
        let mut tui = rig.client(1).await;
        rig.request(
            1,
            json!(7),
            "thread/compact/start",
            json!({"threadId": "client"}),
        );
        assert_eq!(got(&mut tui).await, json!({"id": 7, "result": {}}));
        let mut methods = Vec::new();
        let mut turn_ids = Vec::new();
        for _ in 0..4 {
            let message = got(&mut tui).await;
            assert_eq!(message["params"]["threadId"], "client", "{message}");
            methods.push(message["method"].as_str().unwrap().to_owned());
            turn_ids.push(
                message["params"]
                    .pointer("/turn/id")
                    .or_else(|| message["params"].get("turnId"))
                    .cloned()
                    .unwrap(),
            );
            if message["method"].as_str().unwrap().starts_with("item/") {
                assert_eq!(message["params"]["item"]["type"], "contextCompaction");
            }
            if message["method"] == "turn/completed" {
                assert_eq!(message["params"]["turn"]["status"], "completed");
            }
        }
        assert_eq!(
            methods,
            [
                "turn/started",
                "item/started",
                "item/completed",
                "turn/completed"
            ]
        );
        assert!(turn_ids.iter().all(|id| *id == turn_ids[0]), "{turn_ids:?}");
    }

    /// Two clients using the same request id get their own answers, whatever order the
    /// upstream answers in; upstream ids never collide.
    #[tokio::test]
    async fn client_ids_never_mix() {
        let mut rig = Rig::new(ThreadMap::new(None));
        let mut one = rig.client(1).await;
        let mut two = rig.client(2).await;
        rig.request(1, json!("a"), "x/echo", json!({"who": 1}));
        rig.request(2, json!("a"), "x/echo", json!({"who": 2}));
        let first = rig.upstream_got().await;
        let second = rig.upstream_got().await;
        assert_ne!(first["id"], second["id"]);
        assert_eq!(first["params"]["who"], 1);
        rig.upstream_says(json!({"id": second["id"], "result": {"n": 2}}));
        rig.upstream_says(json!({"id": first["id"], "error": {"code": -32600, "message": "no"}}));
        assert_eq!(got(&mut two).await, json!({"id": "a", "result": {"n": 2}}));
        assert_eq!(
            got(&mut one).await,
            json!({"id": "a", "error": {"code": -32600, "message": "no"}})
        );
    }

    /// A turn on a thread the upstream has not loaded resumes it first. A server request goes
    /// to the client that started the turn, under that client's own id,
    /// and its answer reaches the upstream under the upstream's id; when that client leaves an
    /// unanswered request moves to another subscriber; when nobody is left the request is
    /// declined and the turn interrupted.
    #[tokio::test]
    async fn server_requests_follow_the_turn() {
        let mut rig = Rig::new(ThreadMap::new(None));
        let mut owner = rig.client(1).await;
        let mut watcher = rig.client(2).await;
        rig.request(2, json!(1), "thread/read", json!({"threadId": "th"}));
        let read = rig.upstream_got().await;
        rig.upstream_says(json!({"id": read["id"], "result": {"thread": {"id": "th"}}}));
        got(&mut watcher).await;
        rig.request(
            1,
            json!(9),
            "turn/start",
            json!({"threadId": "th", "input": []}),
        );
        // The thread was never loaded through this upstream: it is resumed first.
        let resume = rig.upstream_got().await;
        assert_eq!(resume["method"], "thread/resume");
        assert_eq!(resume["params"], json!({"threadId": "th"}));
        rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
        let start = rig.upstream_got().await;
        assert_eq!(start["method"], "turn/start");
        rig.upstream_says(
            json!({"id": start["id"], "result": {"turn": {"id": "tu", "status": "inProgress"}}}),
        );
        assert_eq!(got(&mut owner).await["id"], 9);
        rig.upstream_says(
            json!({"method": "turn/started", "params": {"threadId": "th", "turn": {"id": "tu"}}}),
        );
        assert_eq!(got(&mut owner).await["method"], "turn/started");
        assert_eq!(got(&mut watcher).await["method"], "turn/started");

        rig.upstream_says(json!({"id": "srv-1", "method": "item/commandExecution/requestApproval", "params": {"threadId": "th"}}));
        let asked = got(&mut owner).await;
        assert_eq!(asked["method"], "item/commandExecution/requestApproval");
        rig.hub
            .send(HubMsg::Response {
                conn: 1,
                id: asked["id"].clone(),
                outcome: Ok(json!({"decision": "accept"})),
            })
            .unwrap();
        assert_eq!(
            rig.upstream_got().await,
            json!({"id": "srv-1", "result": {"decision": "accept"}})
        );

        rig.upstream_says(json!({"id": "srv-2", "method": "item/fileChange/requestApproval", "params": {"threadId": "th"}}));
        assert_eq!(
            got(&mut owner).await["method"],
            "item/fileChange/requestApproval"
        );
        rig.hub.send(HubMsg::Disconnect { conn: 1 }).unwrap();
        let moved = got(&mut watcher).await;
        assert_eq!(moved["method"], "item/fileChange/requestApproval");
        rig.hub.send(HubMsg::Disconnect { conn: 2 }).unwrap();
        let declined = rig.upstream_got().await;
        assert_eq!(declined["id"], "srv-2");
        assert!(declined["error"]["message"].is_string(), "{declined}");
        let interrupt = rig.upstream_got().await;
        assert_eq!(interrupt["method"], "turn/interrupt");
        assert_eq!(
            interrupt["params"],
            json!({"threadId": "th", "turnId": "tu"})
        );
    }

    /// Thread notifications reach only the thread's subscribers; thread-less ones reach every
    /// initialized client.
    #[tokio::test]
    async fn notifications_follow_subscriptions() {
        let mut rig = Rig::new(ThreadMap::new(None));
        let mut subscribed = rig.client(1).await;
        let mut other = rig.client(2).await;
        rig.request(1, json!(1), "thread/resume", json!({"threadId": "th"}));
        let resume = rig.upstream_got().await;
        rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
        got(&mut subscribed).await;
        rig.upstream_says(json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "delta": "x"}}));
        rig.upstream_says(json!({"method": "account/rateLimits/updated", "params": {}}));
        assert_eq!(
            got(&mut subscribed).await["method"],
            "item/agentMessage/delta"
        );
        assert_eq!(
            got(&mut subscribed).await["method"],
            "account/rateLimits/updated"
        );
        // In order: had the delta gone to `other`, it would come first.
        assert_eq!(
            got(&mut other).await["method"],
            "account/rateLimits/updated"
        );
    }

    /// What an engine session does on rotation, through its [`UpstreamHandle`]: a thread it
    /// starts itself is never announced; once bound, the session's subscriber gets that
    /// thread's notifications under the client id, with the user's own input in the
    /// `userMessage` item, while the session's watch sees the upstream's raw notification.
    #[tokio::test]
    async fn rotation_through_the_handle() {
        let mut rig = Rig::new(ThreadMap::new(None));
        let mut c = rig.client(1).await;
        rig.request(1, json!(1), "thread/resume", json!({"threadId": "th"}));
        let resume = rig.upstream_got().await;
        rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
        got(&mut c).await;
        let handle = UpstreamHandle {
            hub: rig.hub.clone(),
        };
        let mut watch = handle.watch("new");
        let starter = handle.clone();
        let started = tokio::spawn(async move { starter.request("thread/start", json!({})).await });
        let start = rig.upstream_got().await;
        assert_eq!(start["method"], "thread/start");
        rig.upstream_says(json!({"id": start["id"], "result": {"thread": {"id": "new"}}}));
        rig.upstream_says(json!({"method": "thread/started", "params": {"thread": {"id": "new"}}}));
        assert_eq!(started.await.unwrap().unwrap()["thread"]["id"], "new");
        handle.bind_session("th", "new", 1).await;
        handle.show_user_input("new", json!([{"type": "text", "text": "hi"}]));
        let projected =
            json!({"type": "userMessage", "content": [{"type": "text", "text": "CONTEXT hi"}]});
        rig.upstream_says(json!({"method": "item/completed", "params": {"threadId": "new", "turnId": "t", "item": projected}}));
        let relayed = got(&mut c).await;
        assert_eq!(
            relayed["method"], "item/completed",
            "thread/started was not announced"
        );
        assert_eq!(relayed["params"]["threadId"], "th");
        assert_eq!(
            relayed["params"]["item"]["content"],
            json!([{"type": "text", "text": "hi"}])
        );
        assert_eq!(watch.recv().await.unwrap().0, "thread/started");
        let (method, raw) = watch.recv().await.unwrap();
        assert_eq!(method, "item/completed");
        assert_eq!(raw["threadId"], "new");
        assert_eq!(raw["item"], projected);
    }

    /// With a session rotated onto another backend thread, the client only ever sees its own
    /// thread id: requests are rewritten to the backend id, notifications and list results back.
    #[tokio::test]
    async fn thread_ids_are_rewritten_both_ways() {
        let mut threads = ThreadMap::new(None);
        threads.bind("client-th", "backend-th").unwrap();
        let mut rig = Rig::new(threads);
        let mut c = rig.client(1).await;
        rig.request(
            1,
            json!(1),
            "turn/start",
            json!({"threadId": "client-th", "input": []}),
        );
        let resume = rig.upstream_got().await;
        assert_eq!(resume["params"]["threadId"], "backend-th");
        rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "backend-th"}}}));
        let start = rig.upstream_got().await;
        assert_eq!(start["params"]["threadId"], "backend-th");
        rig.upstream_says(json!({"id": start["id"], "result": {"turn": {"id": "tu"}}}));
        got(&mut c).await;
        rig.upstream_says(json!({"method": "turn/completed", "params": {"threadId": "backend-th", "turn": {"id": "tu", "status": "completed"}}}));
        assert_eq!(got(&mut c).await["params"]["threadId"], "client-th");
        rig.request(1, json!(2), "thread/loaded/list", json!({}));
        let list = rig.upstream_got().await;
        rig.upstream_says(json!({"id": list["id"], "result": {"data": ["backend-th"]}}));
        assert_eq!(got(&mut c).await["result"]["data"], json!(["client-th"]));
    }
}
