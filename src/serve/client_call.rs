//! The connection a client's session request runs on ([`ClientCall`]): the shared upstream
//! ([`HubTransport`]), shaped by what only this request knows. The harness call serving the
//! request runs the one Codex backend over it (`CodexBackend::on`), so the backend stays the
//! same as `ctxbridge turn`'s and the client's request reaches Codex as Codex would have got
//! it:
//!
//! - the session's first `thread/start` adopts the thread the client started: it is loaded
//!   and given the developer instructions by injection instead of a new thread being started;
//! - a later `thread/start` (a rotation) gets the client's thread settings (its `thread/start`
//!   overlaid by its `thread/resume`s: cwd, model, sandbox, approval policy, config, base
//!   instructions, …) under the developer instructions the harness computed;
//! - `turn/start` carries the client's own turn params and non-text input items; before it
//!   goes, the session is bound to its backend thread for the asking connection and the
//!   relayed `userMessage` items are set to show the client's own input;
//! - the first accepted request of the client's method (`turn/start`, or
//!   `thread/compact/start` for a compaction) answers the client at once, in order with the
//!   upstream's notifications, and tells the waiting session request so; the completion of
//!   the turn it started reaches the clients once the call is settled ([`ClientCall::settle`]:
//!   the harness recorded the turn, or failed it — then they hear why).

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;
use codex_app_server_client::{developer_message, loaded_thread, AppServerError, Route, Transport};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::serve::codex_link::HubTransport;
use crate::serve::hub::ConnId;
use crate::serve::seam::{ClientAnswer, TurnEnd, UpstreamHandle};
use crate::util::lock;

/// What a client's `turn/start` sent beside its text.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientTurnParams {
    /// Its params other than `threadId` and `input` (backend ids).
    pub fields: Map<String, Value>,
    /// Its input as sent (shown to clients in place of the projected turn input).
    pub input: Option<Value>,
    /// Its input items other than text, after the prompt.
    pub extra_input: Vec<Value>,
}

/// The client request a [`ClientCall`] serves.
#[derive(Debug)]
pub(crate) struct CallFacts {
    /// The session key: the client thread id.
    pub session: String,
    /// The client request to answer: its connection owns the turn, and the first accepted
    /// request of its method answers it.
    pub answer: ClientAnswer,
    /// The client's `turn/start` (none for a compaction).
    pub turn: Option<ClientTurnParams>,
    /// The client's own backend thread, to adopt as the session's first thread.
    pub adopt: Option<String>,
    /// The backend thread the hub has loaded in the current upstream when it handed over the
    /// request (`SessionRequest::needs_resume` false): known attached without asking.
    pub loaded: Option<String>,
}

/// The shared upstream as one client request's connection (see the module documentation).
pub(crate) struct ClientCall {
    hub: HubTransport,
    session: String,
    /// The asking connection (it owns the turn).
    conn: ConnId,
    /// The method whose first accepted request answers the client.
    answers: String,
    turn: Option<ClientTurnParams>,
    /// Taken by the first accepted request of `answers`.
    pending_answer: Mutex<Option<(ClientAnswer, oneshot::Sender<()>)>>,
    adopt: Mutex<Option<String>>,
    /// Threads known loaded in the current upstream: the one the hub named with the request,
    /// those this request started, resumed or forked, and those asked of the hub (each once).
    attached: Mutex<HashSet<String>>,
    /// The accepted turn (its backend thread and, when the answer named it, its id) whose
    /// completion waits for [`ClientCall::settle`].
    accepted_turn: Mutex<Option<(String, Option<String>)>>,
}

impl ClientCall {
    /// The connection of the request `facts` names, and what resolves once the upstream
    /// accepted it (its answer went to the client).
    pub(crate) fn new(
        upstream: UpstreamHandle,
        facts: CallFacts,
    ) -> (ClientCall, oneshot::Receiver<()>) {
        let (accepted, accepted_rx) = oneshot::channel();
        let call = ClientCall {
            hub: HubTransport { upstream },
            session: facts.session,
            conn: facts.answer.conn,
            answers: facts.answer.method.clone(),
            turn: facts.turn,
            pending_answer: Mutex::new(Some((facts.answer, accepted))),
            adopt: Mutex::new(facts.adopt),
            attached: Mutex::new(facts.loaded.into_iter().collect()),
            accepted_turn: Mutex::new(None),
        };
        (call, accepted_rx)
    }

    /// The harness call is done with the accepted turn: its completion goes to the clients as
    /// `end` says. Once; nothing when no turn was accepted (the request's error answers it).
    pub(crate) fn settle(&self, end: TurnEnd) {
        if let Some((thread, turn)) = lock(&self.accepted_turn).take() {
            self.upstream().settle(&thread, turn, end);
        }
    }

    fn upstream(&self) -> &UpstreamHandle {
        &self.hub.upstream
    }

    /// The session's first thread: the client's own, loaded and given the developer
    /// instructions `params` carries by injection. Answers as `thread/start` would.
    async fn adopt(&self, thread: String, params: &Value) -> Result<Value, AppServerError> {
        self.attach(&thread, Value::Object(Map::new())).await?;
        if let Some(text) = params.get("developerInstructions").and_then(Value::as_str) {
            let item = developer_message(text);
            self.hub
                .request_via(
                    "thread/inject_items",
                    serde_json::json!({"threadId": thread, "items": [item]}),
                    None,
                    None,
                )
                .await?;
        }
        Ok(serde_json::json!({"thread": {"id": thread}}))
    }

    /// A rotation's `thread/start`: the client's thread settings, the base instructions and
    /// model ctxbridge asks for where the client set none, and ctxbridge's developer
    /// instructions (or none). The engine's dynamic tools are not offered: serve relays the
    /// upstream's server requests to its clients, so no turn here could answer their calls.
    async fn rotation_params(&self, params: Value) -> Value {
        let mut merged = self.upstream().session_settings(&self.session).await;
        let Value::Object(ours) = params else {
            return Value::Object(merged);
        };
        merged.remove("developerInstructions");
        for (key, value) in ours {
            match key.as_str() {
                "developerInstructions" => {
                    merged.insert(key, value);
                }
                "dynamicTools" => {}
                _ => {
                    merged.entry(key).or_insert(value);
                }
            }
        }
        Value::Object(merged)
    }

    /// The client's `turn/start` with ctxbridge's thread, input and additional context: the
    /// client's own params, the prompt's text item then the client's other items.
    fn turn_params(&self, params: Value) -> Value {
        let Some(turn) = &self.turn else {
            return params;
        };
        let Value::Object(ours) = params else {
            return params;
        };
        let mut merged = turn.fields.clone();
        for (key, mut value) in ours {
            if key == "input" {
                if let Some(items) = value.as_array_mut() {
                    items.extend(turn.extra_input.iter().cloned());
                }
            }
            merged.insert(key, value);
        }
        Value::Object(merged)
    }

    /// The client request still to answer, when `method` is the one that answers it.
    fn take_answer(&self, method: &str) -> Option<(ClientAnswer, oneshot::Sender<()>)> {
        if method != self.answers {
            return None;
        }
        lock(&self.pending_answer).take()
    }
}

#[async_trait]
impl Transport for ClientCall {
    async fn request(
        &self,
        method: &str,
        params: Value,
        route: Option<Route>,
    ) -> Result<Value, AppServerError> {
        let ephemeral = params.get("ephemeral").and_then(Value::as_bool) == Some(true);
        let params = match method {
            "thread/start" if !ephemeral => {
                let adopt = lock(&self.adopt).take();
                if let Some(thread) = adopt {
                    return self.adopt(thread, &params).await;
                }
                self.rotation_params(params).await
            }
            "turn/start" => {
                let params = self.turn_params(params);
                if let Some(thread) = params.get("threadId").and_then(Value::as_str) {
                    // Before anything of the turn flows: clients see this thread under their
                    // id, and this connection owns its turn.
                    self.upstream()
                        .bind_session(&self.session, thread, self.conn)
                        .await;
                    if let Some(input) = self.turn.as_ref().and_then(|t| t.input.clone()) {
                        self.upstream().show_user_input(thread, input);
                    }
                }
                params
            }
            _ => params,
        };
        let Some((answer, accepted)) = self.take_answer(method) else {
            let result = self.hub.request_via(method, params, route, None).await?;
            if let Some(thread) = loaded_thread(method, &result) {
                lock(&self.attached).insert(thread);
            }
            return Ok(result);
        };
        let params_thread = params
            .get("threadId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match self
            .hub
            .request_via(method, params, route, Some(&answer))
            .await
        {
            Ok(result) => {
                if let Some(thread) = params_thread {
                    let turn = result.pointer("/turn/id").and_then(Value::as_str);
                    *lock(&self.accepted_turn) = Some((thread, turn.map(str::to_owned)));
                }
                let _ = accepted.send(());
                Ok(result)
            }
            Err(error) => {
                // Not accepted: a retry (a new thread after an overflow) may still answer.
                *lock(&self.pending_answer) = Some((answer, accepted));
                Err(error)
            }
        }
    }

    fn respond(&self, id: Value, result: Result<Value, String>) {
        self.hub.respond(id, result);
    }

    async fn attach(&self, thread_id: &str, params: Value) -> Result<(), AppServerError> {
        if lock(&self.attached).contains(thread_id) {
            return Ok(());
        }
        self.hub.attach(thread_id, params).await?;
        lock(&self.attached).insert(thread_id.to_owned());
        Ok(())
    }

    fn is_alive(&self) -> bool {
        self.hub.is_alive()
    }

    fn death_reason(&self) -> Option<String> {
        self.hub.death_reason()
    }
}

/// A call dropped with its accepted turn unsettled (its harness task ended without saying how
/// the turn went: cancelled, or panicked) still ends the turn for the clients.
impl Drop for ClientCall {
    fn drop(&mut self) {
        self.settle(TurnEnd::Failed(
            "ctxbridge stopped serving this turn before it was recorded".to_owned(),
        ));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::serve::hub::HubMsg;
    use ctxbridge_jsonrpc::RequestId;
    use tokio::sync::mpsc;

    fn call_on(loaded: Option<&str>) -> (ClientCall, mpsc::UnboundedReceiver<HubMsg>) {
        let (hub, rx) = mpsc::unbounded_channel();
        let facts = CallFacts {
            session: "s".to_owned(),
            answer: ClientAnswer {
                conn: 1,
                id: RequestId::from_value(&Value::from(1)),
                method: "turn/start".to_owned(),
            },
            turn: None,
            adopt: None,
            loaded: loaded.map(str::to_owned),
        };
        let (call, _accepted) = ClientCall::new(UpstreamHandle { hub }, facts);
        (call, rx)
    }

    /// The thread the hub named loaded with the request is attached without asking the hub
    /// again; another thread is asked of the hub (a `thread/resume` unless it has it), once.
    #[tokio::test]
    async fn a_thread_known_loaded_is_not_asked_of_the_hub() {
        let (call, mut hub) = call_on(Some("th"));
        call.attach("th", Value::Object(Map::new())).await.unwrap();
        assert!(
            hub.try_recv().is_err(),
            "the hub was asked about a loaded thread"
        );

        let asked = tokio::spawn(async move {
            let attach = call.attach("other", Value::Object(Map::new())).await;
            (call, attach)
        });
        match hub.recv().await.unwrap() {
            HubMsg::EnsureAttached { thread, reply, .. } => {
                assert_eq!(thread, "other");
                reply.send(Ok(())).unwrap();
            }
            _ => panic!("expected the hub to be asked to attach"),
        }
        let (call, attach) = asked.await.unwrap();
        attach.unwrap();
        call.attach("other", Value::Object(Map::new()))
            .await
            .unwrap();
        assert!(hub.try_recv().is_err(), "asked twice for one thread");
    }
}
