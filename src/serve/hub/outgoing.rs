//! Server→client requests (approvals, tool calls) awaiting an answer: each goes to the client
//! that started the turn, else a subscriber of its thread; a client's answer goes back under the
//! upstream's id; with no client left the request is declined and the turn interrupted.

use ctxbridge_jsonrpc::codes::INVALID_REQUEST;
use ctxbridge_jsonrpc::RequestId;
use serde_json::{json, Value};

use super::{ConnId, Hub, HubMsg, ServerRequest};
use crate::serve::outbound::Outbound;
use crate::serve::thread_map::Direction;
use crate::serve::upstream::DIALECT;
use crate::serve::RpcError;

impl Hub {
    /// Sends a server→client request to the turn's starter, else a subscriber of its thread,
    /// else (thread-less) any client. Nobody left: decline it and interrupt the turn.
    pub(super) fn route_server_request(&mut self, request: ServerRequest) {
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
                let error = RpcError::new(INVALID_REQUEST, "no client connected to answer");
                live.send_line(DIALECT.answer_line(&request.upstream_id, Err(&error)));
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
                        hold: false,
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
        client.out.send(Outbound::Message(message));
        self.server_requests.insert((conn, id), request);
    }

    pub(super) fn client_response(
        &mut self,
        conn: ConnId,
        id: RequestId,
        outcome: Result<Value, Value>,
    ) {
        let Some(request) = id
            .as_i64()
            .and_then(|n| self.server_requests.remove(&(conn, n)))
        else {
            tracing::warn!(conn, %id, "serve: a client answered an unknown server request");
            // Taken for an answer, it is no request either: say so (its sender may be waiting).
            let message = format!("Invalid request: no server request {id} awaits an answer");
            self.answer(conn, &id, Err(RpcError::new(INVALID_REQUEST, message)));
            return;
        };
        let line = match outcome {
            Ok(mut result) => {
                self.threads
                    .rewrite(&mut result, Direction::ToBackend, None);
                DIALECT.answer_line(&request.upstream_id, Ok(&result))
            }
            Err(error) => {
                DIALECT.answer_line(&request.upstream_id, Err(&RpcError::from_value(&error)))
            }
        };
        if let Some(live) = &self.live {
            live.send_line(line);
        }
    }
}
