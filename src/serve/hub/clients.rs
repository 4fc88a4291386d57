//! The hub's client side: a connection's `initialize`, its requests (a session request goes to
//! the session seam as its own task, everything else is forwarded), its subscriptions, and its
//! disconnection.

use ctxbridge_jsonrpc::RequestId;
use serde_json::{json, Value};

use super::{Client, ConnId, Hub, HubMsg, Origin};
use crate::serve::outbound::{Outbound, OutboundSender};
use crate::serve::route::{request_shape, response, subscribes, SessionOp};
use crate::serve::seam::{ClientAnswer, SessionRequest, UpstreamHandle};
use crate::serve::thread_map::{thread_of, thread_settings, Direction};
use crate::serve::RpcError;

impl Hub {
    pub(super) async fn initialize(
        &mut self,
        conn: ConnId,
        out: OutboundSender,
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

    /// Answers client request `id` of connection `conn`.
    pub(super) fn answer(&self, conn: ConnId, id: &RequestId, outcome: Result<Value, RpcError>) {
        self.send_out(conn, response(id, outcome));
    }

    fn send_out(&self, conn: ConnId, outbound: Outbound) -> bool {
        match self.clients.get(&conn) {
            Some(client) => client.out.send(outbound),
            None => false,
        }
    }

    /// See [`UpstreamHandle::bind_session`].
    pub(super) fn bind_session(&mut self, client: &str, backend: &str, conn: ConnId) {
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

    pub(super) fn subscribe(&mut self, conn: ConnId, thread: &str) {
        self.subscribers
            .entry(thread.to_owned())
            .or_default()
            .insert(conn);
    }

    pub(super) async fn client_request(
        &mut self,
        conn: ConnId,
        id: RequestId,
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
                        self.answer(conn, &id, Ok(json!({"status": status})));
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

    pub(super) fn disconnect(&mut self, conn: ConnId) {
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
}
