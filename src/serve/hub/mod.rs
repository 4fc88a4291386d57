//! The hub: one task that owns everything shared between client connections —
//! the upstream connection, the upstream request ids in flight, which client subscribes to
//! which thread, who started each running turn, the server→client requests awaiting answers,
//! and the thread-id map. Client actors and session tasks talk to it over one channel
//! ([`HubMsg`]); it never awaits a client, so one slow client cannot stall the others.
//!
//! Every client request is routed one of two ways:
//! - **Session requests** — `turn/start`, `thread/compact/start`, `thread/resume`,
//!   `thread/read`, `thread/turns/list` and `thread/items/list` on a non-ephemeral thread — go through the [`SessionTurns`] seam, run as their own task with an
//!   [`UpstreamHandle`]. [`PassThroughSessions`] relays them unchanged (docs/serve.md#the-serve-command: every thread
//!   is pure pass-through when only `legacy` is selected and `serve.engineThreads` is `none`);
//!   an engine-driven implementation runs the harness turn there instead.
//! - **Everything else** passes through: a fresh upstream id, the answer relayed back under the
//!   client's own id.
//!
//! Thread ids are rewritten both ways on every relayed message ([`ThreadMap::rewrite`]).
//!
//! Its rooms: this file holds the state and the loop (and shutdown); `clients` what a client
//! connection asks (handshake, requests, subscriptions, disconnects); `relay` the upstream side
//! (starting it, forwarding, matching answers, relaying notifications, its death); `outgoing`
//! the server→client requests awaiting a client's answer. The route table is
//! [`crate::serve::route`], the session seam [`crate::serve::seam`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::Routed;
use ctxbridge_jsonrpc::codes::INTERNAL_ERROR;
use ctxbridge_jsonrpc::{Peer, RequestId};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::serve::outbound::{Outbound, OutboundSender};
use crate::serve::seam::{ClientAnswer, SessionAnswer, SessionTurns, TurnEnd};
use crate::serve::thread_map::{thread_of, Direction, ThreadMap};
use crate::serve::upstream::{Connector, Live, UpstreamEvent, DIALECT};
use crate::serve::RpcError;

mod clients;
mod held;
mod outgoing;
mod relay;
#[cfg(test)]
mod tests;

/// A client connection's number, unique in this process.
pub type ConnId = u64;

/// After a shutdown's grace period, how long interrupted turns get to report.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// Messages to the hub.
#[derive(Debug)]
pub enum HubMsg {
    /// A client sent `initialize`: register it and answer from the upstream's handshake.
    Initialize {
        conn: ConnId,
        out: OutboundSender,
        reply: oneshot::Sender<Result<Value, RpcError>>,
    },
    /// A client connection ended.
    Disconnect { conn: ConnId },
    /// A client request (after `initialize`).
    Request {
        conn: ConnId,
        id: RequestId,
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
        id: RequestId,
        outcome: Result<Value, Value>,
    },
    /// A request of ctxbridge's own ([`UpstreamHandle`]); `reply: None` is fire-and-forget.
    Internal {
        method: String,
        params: Value,
        reply: Option<oneshot::Sender<Result<Value, RpcError>>>,
        /// A result also answers this client request ([`UpstreamHandle::request_answering`]).
        answer: Option<ClientAnswer>,
        /// The completion of the turn it starts waits for [`HubMsg::Settle`]
        /// ([`UpstreamHandle::request_answering_held`]).
        hold: bool,
    },
    /// How a held turn ended for ctxbridge ([`UpstreamHandle::settle`]).
    Settle {
        thread: String,
        turn: Option<String>,
        end: TurnEnd,
    },
    /// Copy the notifications of a backend thread to `tx` ([`UpstreamHandle::watch`]).
    Watch {
        thread: String,
        tx: mpsc::UnboundedSender<Routed>,
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
    /// A message of ctxbridge's own for one client ([`UpstreamHandle::notify_client`]).
    NotifyClient { conn: ConnId, message: Value },
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
        id: RequestId,
        method: String,
        thread: String,
        outcome: Result<SessionAnswer, RpcError>,
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
        id: RequestId,
    },
    Internal(Option<oneshot::Sender<Result<Value, RpcError>>>),
    /// A session's request whose result also answers a client request.
    Answering {
        reply: oneshot::Sender<Result<Value, RpcError>>,
        answer: ClientAnswer,
        /// The backend thread whose turn's completion is held once this is accepted.
        hold: Option<String>,
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
    out: OutboundSender,
    next_server_request: i64,
}

struct ServerRequest {
    upstream_id: RequestId,
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
    /// The requests written upstream and what waits for each answer, by upstream id.
    calls: Peer<Pending>,
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
    watchers: HashMap<String, Vec<mpsc::UnboundedSender<Routed>>>,
    /// Backend thread id → the user's own input of its running session turn.
    user_inputs: HashMap<String, Value>,
    /// Backend threads whose `thread/compact/start` answer is to be followed by a compaction
    /// turn made up here (the engine compacted without the upstream).
    compaction_turns: std::collections::HashSet<String>,
    shutdown: Option<Shutdown>,
    /// How long the upstream gets to answer a request before it is answered for it.
    request_timeout: Duration,
    /// Most requests waiting for the upstream's answer; a client request past it is refused
    /// with Codex's own "Server overloaded; retry later." at once.
    max_in_flight: usize,
    /// (deadline, upstream id) of the requests sent, oldest first (one timeout for all, so
    /// the deadlines are in order).
    deadlines: VecDeque<(tokio::time::Instant, i64)>,
    /// Turns failed here because a message of theirs was over the line limit: the upstream's
    /// own `turn/completed` for them (after the interrupt) is not relayed again.
    failed_turns: std::collections::HashSet<String>,
    /// Backend thread → its session turn whose completion waits to be settled.
    held: HashMap<String, held::Held>,
}

/// What bounds the requests the hub has waiting on the upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HubLimits {
    /// How long the upstream gets to answer one request.
    pub request_timeout: Duration,
    /// Most requests waiting for it at once.
    pub max_in_flight: usize,
}

/// The hub's channel, made before the hub runs so that what serves sessions can hold an
/// [`crate::serve::UpstreamHandle`] from the start (the engine sessions' harness is built on
/// one). The receiving end goes to the one hub started with it.
#[derive(Debug, Clone)]
pub(crate) struct HubChannel {
    tx: mpsc::UnboundedSender<HubMsg>,
    rx: Arc<std::sync::Mutex<Option<mpsc::UnboundedReceiver<HubMsg>>>>,
}

impl HubChannel {
    pub(crate) fn new() -> HubChannel {
        let (tx, rx) = mpsc::unbounded_channel();
        HubChannel {
            tx,
            rx: Arc::new(std::sync::Mutex::new(Some(rx))),
        }
    }

    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<HubMsg> {
        self.tx.clone()
    }

    /// The receiving end, once: `None` when a hub was started with this channel already.
    fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<HubMsg>> {
        self.rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Starts the hub task on `channel`; returns its sender, or `None` when `channel` served a
/// hub already.
pub(crate) fn start(
    channel: &HubChannel,
    connector: Arc<dyn Connector>,
    threads: ThreadMap,
    sessions: Arc<dyn SessionTurns>,
    limits: HubLimits,
) -> Option<(mpsc::UnboundedSender<HubMsg>, tokio::task::JoinHandle<()>)> {
    let rx = channel.take_receiver()?;
    let tx = channel.sender();
    let hub = Hub {
        connector,
        tx: tx.clone(),
        sessions,
        live: None,
        generation: 0,
        calls: Peer::new(DIALECT),
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
        shutdown: None,
        failed_turns: std::collections::HashSet::new(),
        held: HashMap::new(),
        request_timeout: limits.request_timeout,
        max_in_flight: limits.max_in_flight,
        deadlines: VecDeque::new(),
    };
    let task = tokio::spawn(hub.run(rx));
    Some((tx, task))
}

impl Hub {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<HubMsg>) {
        loop {
            let deadline = self.deadlines.front().map(|(at, _)| *at);
            let message = tokio::select! {
                message = rx.recv() => message,
                () = sleep_until(deadline) => {
                    self.expire_requests();
                    continue;
                }
            };
            let Some(message) = message else {
                break;
            };
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
                    hold,
                } => {
                    let hold = hold
                        .then(|| thread_of(&params).map(str::to_owned))
                        .flatten();
                    let origin = match (reply, answer) {
                        (Some(reply), Some(answer)) => Origin::Answering {
                            reply,
                            answer,
                            hold,
                        },
                        (reply, _) => Origin::Internal(reply),
                    };
                    self.forward(method, params, origin, false).await;
                }
                HubMsg::Settle { thread, turn, end } => self.settle(&thread, turn, end),
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
                HubMsg::NotifyClient { conn, message } => {
                    if let Some(client) = self.clients.get(&conn) {
                        client.out.send(Outbound::Message(message));
                    }
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
                    let reply = match outcome {
                        Ok(SessionAnswer::Sent) => None,
                        Ok(SessionAnswer::Result(mut result)) => {
                            self.threads
                                .rewrite(&mut result, Direction::ToClient, Some(&method));
                            Some(Ok(result))
                        }
                        Err(error) => Some(Err(error)),
                    };
                    if let Some(reply) = reply {
                        self.answer(conn, &id, reply);
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
                            UpstreamEvent::Malformed { id, kind } => {
                                self.upstream_malformed(&id, &kind)
                            }
                            UpstreamEvent::Closed(reason) => self.upstream_died(reason),
                            UpstreamEvent::Oversize(line) => self.upstream_oversize(line).await,
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
                            self.release_all_held();
                        }
                    }
                }
            }
            if self.shutdown.is_some() && self.active_turns.is_empty() && !self.holds_completions()
            {
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
                let pending = Pending {
                    method: "turn/interrupt".to_owned(),
                    origin: Origin::Internal(None),
                    ephemeral: false,
                    settings: None,
                };
                let params = json!({"threadId": thread, "turnId": turn});
                // A `Value` always serialises.
                if let Ok((_, line)) = self.calls.request("turn/interrupt", &params, pending) {
                    live.send_line(line);
                }
            }
        }
    }
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
