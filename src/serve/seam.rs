//! The session seam: what serves a session's requests ([`SessionTurns`]; pass-through by
//! default, the harness with an engine) and the handle through which it reaches the shared
//! upstream ([`UpstreamHandle`]), by messages to the hub.

use async_trait::async_trait;
use codex_app_server_client::Routed;
use ctxbridge_jsonrpc::codes::INTERNAL_ERROR;
use ctxbridge_jsonrpc::RequestId;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::serve::hub::{ConnId, HubMsg};
use crate::serve::route::SessionOp;
use crate::serve::RpcError;

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
    pub(crate) conn: ConnId,
    pub(crate) id: RequestId,
    pub(crate) method: String,
}

/// How a session request was answered: the hub sends a [`SessionAnswer::Result`] (in backend
/// ids; it rewrites it for the client); [`SessionAnswer::Sent`] says the upstream's own
/// answer went already ([`UpstreamHandle::request_answering`]). Each answer has one producer.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionAnswer {
    /// The request's result, for the hub to send.
    Result(Value),
    /// The client was answered from the hub where the upstream's answer stood.
    Sent,
}

/// The seam between the proxy and whatever serves a session's turns. An error is the
/// request's error answer. The turn's notifications reach subscribed clients through the hub
/// whoever sent the upstream request.
#[async_trait]
pub trait SessionTurns: Send + Sync {
    /// Serves one session request.
    async fn serve(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<SessionAnswer, RpcError>;

    /// Called once when `serve` stops, after the last turn ended (background work of an engine
    /// is awaited and the engine released there).
    async fn shutdown(&self) {}

    /// The quarantine of the selected engine when `legacy` serves in its place (for `/readyz`);
    /// `None` when the engine runs, or none is selected.
    fn degradation(&self) -> Option<crate::quarantine::QuarantineRecord> {
        None
    }
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
    ) -> Result<SessionAnswer, RpcError> {
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
            .await?;
        Ok(SessionAnswer::Sent)
    }
}

/// Sends requests of ctxbridge's own to the shared upstream (backend ids, no rewriting).
#[derive(Debug, Clone)]
pub struct UpstreamHandle {
    pub(crate) hub: mpsc::UnboundedSender<HubMsg>,
}

impl UpstreamHandle {
    /// Watches a backend thread: every upstream notification about it (backend ids, before
    /// any rewriting) is copied to `tx` until its receiver is dropped. Watch before starting a
    /// turn so none of it is missed: the hub takes its messages in order.
    pub fn watch(&self, backend_thread_id: &str, tx: mpsc::UnboundedSender<Routed>) {
        let _ = self.hub.send(HubMsg::Watch {
            thread: backend_thread_id.to_owned(),
            tx,
        });
    }

    /// Whether the hub still runs (it stops with the server).
    pub fn is_open(&self) -> bool {
        !self.hub.is_closed()
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

    /// Sends connection `conn` a notification of ctxbridge's own (`params` in client ids).
    pub fn notify_client(&self, conn: ConnId, method: &str, params: Value) {
        let _ = self.hub.send(HubMsg::NotifyClient {
            conn,
            message: json!({"method": method, "params": params}),
        });
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
            hold: false,
        });
        await_hub_reply(sent.is_ok(), rx).await
    }

    /// As [`UpstreamHandle::request`]; a result also answers the client request `answer` at
    /// once, where the upstream's answer stands among its notifications (Codex answers a
    /// `turn/start` before the turn's `turn/started`; a client must see the same order): the
    /// session then answers [`SessionAnswer::Sent`]. An error is only returned.
    pub async fn request_answering(
        &self,
        method: &str,
        params: Value,
        answer: &ClientAnswer,
    ) -> Result<Value, RpcError> {
        self.answering(method, params, answer, false).await
    }

    /// As [`UpstreamHandle::request_answering`], and the clients are shown the completion of
    /// the turn it starts only once it is settled ([`UpstreamHandle::settle`]): a turn the
    /// upstream completed but ctxbridge failed afterwards (the answer not recorded, a turn
    /// limit) ends for them as failed, with the reason.
    pub async fn request_answering_held(
        &self,
        method: &str,
        params: Value,
        answer: &ClientAnswer,
    ) -> Result<Value, RpcError> {
        self.answering(method, params, answer, true).await
    }

    async fn answering(
        &self,
        method: &str,
        params: Value,
        answer: &ClientAnswer,
        hold: bool,
    ) -> Result<Value, RpcError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.hub.send(HubMsg::Internal {
            method: method.to_owned(),
            params,
            reply: Some(tx),
            answer: Some(answer.clone()),
            hold,
        });
        await_hub_reply(sent.is_ok(), rx).await
    }

    /// How a turn started with [`UpstreamHandle::request_answering_held`] on a backend thread
    /// ended for ctxbridge; its held completion goes to the clients accordingly.
    pub fn settle(&self, backend_thread_id: &str, turn: Option<String>, end: TurnEnd) {
        let _ = self.hub.send(HubMsg::Settle {
            thread: backend_thread_id.to_owned(),
            turn,
            end,
        });
    }
}

/// How a held turn ended for ctxbridge ([`UpstreamHandle::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// As the upstream ended it: ctxbridge recorded the turn, or the upstream failed or
    /// interrupted it itself. Its completion is shown as the upstream sent it.
    AsUpstream,
    /// ctxbridge failed the turn the upstream ran (the message says why): shown with an
    /// `error` and as failed, unless the upstream already reported it failed.
    Failed(String),
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
