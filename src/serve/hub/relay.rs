//! The hub's upstream side: starting the upstream (with its handshake) when none runs,
//! forwarding requests under fresh upstream ids, matching the answers to who asked, relaying
//! notifications to the subscribed clients and watching sessions, and failing what waited on
//! an upstream that died.

use codex_app_server_client::Routed;
use ctxbridge_jsonrpc::codes::{INTERNAL_ERROR, OVERLOADED};
use ctxbridge_jsonrpc::{Incoming, Malformed, Received, RequestId};
use serde_json::{json, Map, Value};

use super::{Hub, HubMsg, Origin, Pending, ServerRequest, UpstreamEventMsg};
use crate::serve::outbound::Outbound;
use crate::serve::route::show_user_input;
use crate::serve::thread_map::{thread_of, Direction};
use crate::serve::upstream::{Live, OversizeLine};
use crate::serve::RpcError;

impl Hub {
    /// The live upstream, started (with its handshake) if none runs.
    pub(super) async fn ensure_live(&mut self) -> Result<&Live, RpcError> {
        if self.live.is_none() {
            self.generation += 1;
            let generation = self.generation;
            let (live, mut events) = self.connector.connect(generation).await.map_err(|error| {
                tracing::warn!(%error, "serve: could not start the upstream");
                RpcError::new(INTERNAL_ERROR, crate::util::error_chain(&error))
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

    pub(super) async fn forward(
        &mut self,
        method: String,
        params: Value,
        origin: Origin,
        ephemeral: bool,
    ) {
        self.forward_with(method, params, origin, ephemeral, None)
            .await;
    }

    pub(super) async fn forward_with(
        &mut self,
        method: String,
        params: Value,
        origin: Origin,
        ephemeral: bool,
        settings: Option<Map<String, Value>>,
    ) {
        if matches!(origin, Origin::Client { .. }) && self.calls.len() >= self.max_in_flight {
            tracing::warn!(
                %method,
                in_flight = self.calls.len(),
                "serve: refusing a client request: too many requests wait for the upstream"
            );
            let error = RpcError::new(OVERLOADED, "Server overloaded; retry later.");
            self.complete(origin, &method, Err(error));
            return;
        }
        if let Err(error) = self.ensure_live().await {
            self.complete(origin, &method, Err(error));
            return;
        }
        let pending = Pending {
            method: method.clone(),
            origin,
            ephemeral,
            settings,
        };
        // A `Value` always serialises.
        let Ok((upstream_id, line)) = self.calls.request(&method, &params, pending) else {
            return;
        };
        if let Some(live) = &self.live {
            live.send_line(line);
        }
        self.deadlines.push_back((
            tokio::time::Instant::now() + self.request_timeout,
            upstream_id,
        ));
    }

    pub(super) fn complete(
        &mut self,
        origin: Origin,
        method: &str,
        outcome: Result<Value, RpcError>,
    ) {
        match origin {
            Origin::Client { conn, id } => {
                let outcome = outcome.map(|mut result| {
                    self.threads
                        .rewrite(&mut result, Direction::ToClient, Some(method));
                    result
                });
                self.answer(conn, &id, outcome);
            }
            Origin::Internal(Some(reply)) => {
                let _ = reply.send(outcome);
            }
            Origin::Internal(None) => {
                if let Err(error) = outcome {
                    tracing::warn!(%method, error = %error.message, "serve: internal request failed");
                }
            }
            Origin::Answering {
                reply,
                answer,
                hold,
            } => {
                if let Ok(result) = &outcome {
                    if let Some(thread) = hold {
                        let turn = result.pointer("/turn/id").and_then(Value::as_str);
                        self.hold(thread, turn.map(str::to_owned));
                    }
                    let mut result = result.clone();
                    self.threads
                        .rewrite(&mut result, Direction::ToClient, Some(&answer.method));
                    self.answer(answer.conn, &answer.id, Ok(result));
                }
                let _ = reply.send(outcome);
            }
        }
    }

    pub(super) fn upstream_message(&mut self, message: Incoming) {
        match self.calls.receive_message(message) {
            Received::Request { id, method, params } => {
                let thread = thread_of(&params).map(str::to_owned);
                self.route_server_request(ServerRequest {
                    upstream_id: id,
                    method,
                    params,
                    thread,
                });
            }
            Received::Notification { method, params } => {
                self.upstream_notification(method, params);
            }
            Received::Unmatched { id, .. } => {
                tracing::warn!(%id, "serve: upstream answered an unknown id");
            }
            Received::Answer {
                call: pending,
                outcome,
                ..
            } => {
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
        }
    }

    /// An upstream line naming request `id` was no JSON-RPC message: that request fails with
    /// why, rather than wait for its deadline.
    pub(super) fn upstream_malformed(&mut self, id: &RequestId, kind: &Malformed) {
        let Some(pending) = id.as_i64().and_then(|id| self.calls.take(id)) else {
            return;
        };
        let error = RpcError::new(
            INTERNAL_ERROR,
            format!("the upstream codex app-server's answer is no JSON-RPC message: {kind}"),
        );
        self.complete(pending.origin, &pending.method, Err(error));
    }

    pub(super) fn upstream_notification(&mut self, method: String, mut params: Value) {
        if method == "turn/completed" {
            let turn = params.pointer("/turn/id").and_then(Value::as_str);
            if turn.is_some_and(|turn| self.failed_turns.remove(turn)) {
                tracing::debug!(
                    ?turn,
                    "serve: the upstream's completion of a turn failed here; not relayed"
                );
                return;
            }
        }
        let thread = thread_of(&params).map(str::to_owned);
        if let Some(thread) = &thread {
            if let Some(watchers) = self.watchers.get_mut(thread) {
                watchers.retain(|tx| {
                    tx.send(Routed::Notification {
                        method: method.clone(),
                        params: params.clone(),
                    })
                    .is_ok()
                });
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
        if method == "turn/completed" {
            if let Some(thread) = &thread {
                match self.held_completion(thread, params) {
                    Some(relayed) => params = relayed,
                    None => return,
                }
            }
        }
        self.relay_to_clients(&method, thread, params);
    }

    /// Sends a notification (backend ids) to the clients it is for, rewritten to their ids.
    pub(super) fn relay_to_clients(
        &mut self,
        method: &str,
        thread: Option<String>,
        mut params: Value,
    ) {
        self.threads.rewrite(&mut params, Direction::ToClient, None);
        // Serialised once, whatever the number of clients it goes to.
        let text: std::sync::Arc<str> = json!({"method": method, "params": params})
            .to_string()
            .into();
        // Thread-scoped notifications go to the thread's subscribers; `thread/started` (a new
        // thread announced) and thread-less ones (account, config, …) to every client.
        match thread.filter(|_| method != "thread/started") {
            Some(thread) => {
                if let Some(set) = self.subscribers.get(&thread) {
                    for conn in set {
                        if let Some(client) = self.clients.get(conn) {
                            client.out.send(Outbound::Text(text.clone()));
                        }
                    }
                }
            }
            None => {
                for client in self.clients.values() {
                    client.out.send(Outbound::Text(text.clone()));
                }
            }
        }
    }

    /// The notifications of the turn Codex runs for `thread/compact/start` (`turn/started`, a
    /// `contextCompaction` item started and completed, `turn/completed`), relayed like the
    /// upstream's own, for a compaction the engine did without the upstream.
    pub(super) fn compaction_turn(&mut self, thread: &str) {
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

    /// The child is gone: fail what waited on it and end its running turns with a clear error.
    pub(super) fn upstream_died(&mut self, reason: String) {
        tracing::warn!(%reason, "serve: upstream connection closed");
        self.live = None;
        self.attached.clear();
        let message = format!("{reason}; it will be restarted on the next request");
        let waiting: Vec<Pending> = self.calls.drain().map(|(_, pending)| pending).collect();
        for pending in waiting {
            let error = RpcError::new(INTERNAL_ERROR, message.clone());
            self.complete(pending.origin, &pending.method, Err(error));
        }
        self.server_requests.clear();
        self.turn_owner.clear();
        for (thread, turn) in std::mem::take(&mut self.active_turns) {
            self.fail_turn(&thread, &turn, &message);
        }
    }

    /// An upstream message over the line limit was dropped. An answer: the request it
    /// answers fails with the reason. A notification of a running turn: the turn is failed —
    /// interrupted upstream, and its clients and session watchers shown an `error` and a
    /// failed `turn/completed` naming the limit — since the rest of it (its text, its
    /// completion) may never arrive whole and nothing may wait for it forever.
    pub(super) async fn upstream_oversize(&mut self, line: OversizeLine) {
        let message = format!(
            "the upstream codex app-server sent a message of {} bytes{}, over the limit of {} bytes per line; it was dropped",
            line.len,
            line.method
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
            line.limit
        );
        if let Some(id) = line.response_id {
            if let Some(pending) = self.calls.take(id) {
                let error = RpcError::new(INTERNAL_ERROR, message);
                self.complete(pending.origin, &pending.method, Err(error));
            }
            return;
        }
        let Some(thread) = line.thread else {
            tracing::warn!(
                len = line.len,
                "serve: an over-long upstream message named no thread; nothing to fail"
            );
            return;
        };
        let Some(turn) = self.active_turns.get(&thread).cloned().or(line.turn) else {
            return;
        };
        if self.failed_turns.contains(&turn) {
            return;
        }
        tracing::warn!(%thread, %turn, len = line.len, "serve: failing a turn whose message was over the line limit");
        self.forward(
            "turn/interrupt".to_owned(),
            json!({"threadId": thread, "turnId": turn}),
            Origin::Internal(None),
            false,
        )
        .await;
        self.fail_turn(&thread, &turn, &message);
        self.failed_turns.insert(turn);
    }

    /// Ends a turn for its clients and session watchers as Codex ends a failed one: an `error`
    /// notification, then `turn/completed` with status `failed`, both carrying `message`.
    pub(super) fn fail_turn(&mut self, thread: &str, turn: &str, message: &str) {
        let error = json!({"message": message});
        self.upstream_notification("error".to_owned(), turn_error(thread, turn, &error));
        self.upstream_notification(
            "turn/completed".to_owned(),
            json!({"threadId": thread, "turn": {"id": turn, "items": [], "status": "failed", "error": error}}),
        );
    }

    /// Answers, for the upstream, the requests it did not answer in time (it may have
    /// dropped them when overloaded: Codex's stdio transport does), so every request gets an
    /// answer; a late answer of the upstream is then ignored as unknown.
    pub(super) fn expire_requests(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some(&(at, id)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            let Some(pending) = self.calls.take(id) else {
                continue;
            };
            let ms = self.request_timeout.as_millis();
            tracing::warn!(id, method = %pending.method, ms, "serve: the upstream did not answer a request in time");
            let error = RpcError::new(
                INTERNAL_ERROR,
                format!(
                    "the upstream codex app-server did not answer {} within {ms} ms (overloaded, or the request was lost); it was abandoned",
                    pending.method
                ),
            );
            self.complete(pending.origin, &pending.method, Err(error));
        }
    }
}

/// The params of the `error` notification that ends a turn for good (`willRetry: false`), as
/// Codex sends before a failed `turn/completed`.
pub(super) fn turn_error(thread: &str, turn: impl Into<Value>, error: &Value) -> Value {
    json!({"threadId": thread, "turnId": turn.into(), "willRetry": false, "error": error})
}
