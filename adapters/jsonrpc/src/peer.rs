//! One side of a JSON-RPC conversation: the ids of the requests it sent, what waits for each
//! answer, and the matching of what the other side sends against them.
//!
//! [`Peer`] does no I/O. Each connection is owned by one task — mini-redis's actor: callers
//! hand it `(request, oneshot reply)` and it alone reads and writes — and that task drives a
//! `Peer`: it issues an id and a line for each request ([`Peer::request`]), hands every line
//! it reads to [`Peer::receive`] and acts on what comes back: an answer with the call that
//! waited for it, a request or a notification of the other side to route, an answer nobody
//! waits for. What a call carries (`C`: a reply channel, the method, a route) is the owner's.
//! The three peers of ctxbridge — the Codex app-server client, `serve`'s upstream and the
//! engine process protocol — each own their connection's lifecycle (a child's exit and
//! drain, a socket, restarts) and share this.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::RpcError;
use crate::id::RequestId;
use crate::message::{Dialect, Incoming, Malformed};

/// What the other side sent, matched against the requests waiting.
#[derive(Debug)]
pub enum Received<C> {
    /// The answer to request `id`, with the call that waited for it.
    Answer {
        id: i64,
        call: C,
        outcome: Result<Value, RpcError>,
    },
    /// An answer to no request waiting (one given up on, or an id never issued).
    Unmatched {
        id: RequestId,
        outcome: Result<Value, RpcError>,
    },
    /// A request of the other side, to be answered under `id`.
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    /// A notification of the other side.
    Notification { method: String, params: Value },
}

/// The requests one peer has sent and not yet seen answered, by id.
#[derive(Debug)]
pub struct Peer<C> {
    dialect: Dialect,
    next_id: i64,
    waiting: HashMap<i64, C>,
}

impl<C> Peer<C> {
    /// A peer writing `dialect` whose request ids count from 1.
    pub fn new(dialect: Dialect) -> Peer<C> {
        Peer::starting_at(dialect, 1)
    }

    /// A peer whose request ids count from `first` (ids below it are the owner's own, e.g. a
    /// handshake sent before this peer existed).
    pub fn starting_at(dialect: Dialect, first: i64) -> Peer<C> {
        Peer {
            dialect,
            next_id: first,
            waiting: HashMap::new(),
        }
    }

    /// The peer's dialect (for the owner's own lines).
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// A request: its id and its line (with `\n`). `call` waits for the answer until
    /// [`Peer::receive`] matches it or the owner takes it back ([`Peer::take`]). Nothing is
    /// registered when `params` cannot be serialised.
    pub fn request<P: Serialize + ?Sized>(
        &mut self,
        method: &str,
        params: &P,
        call: C,
    ) -> Result<(i64, String), serde_json::Error> {
        let line = self.dialect.request_line(self.next_id, method, params)?;
        Ok((self.issue(call), line))
    }

    /// Registers `call` under a new id, for a request the owner writes itself.
    pub fn issue(&mut self, call: C) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.insert(id, call);
        id
    }

    /// Registers `call` under `id`, an id the owner chose: a caller that encodes its request
    /// off the owner's task (no `Value` in between) and must know the id to cancel it. The
    /// owner keeps such ids unique; [`Peer::issue`] then counts on from above them.
    pub fn register(&mut self, id: i64, call: C) {
        self.next_id = self.next_id.max(id.saturating_add(1));
        self.waiting.insert(id, call);
    }

    /// Takes back the call waiting under `id`: given up on (a timeout, a cancel), or failed
    /// by the owner (an answer too long to read).
    pub fn take(&mut self, id: i64) -> Option<C> {
        self.waiting.remove(&id)
    }

    /// The call waiting under `id`.
    pub fn get_mut(&mut self, id: i64) -> Option<&mut C> {
        self.waiting.get_mut(&id)
    }

    /// The calls waiting, in no order.
    pub fn waiting(&self) -> impl Iterator<Item = &C> {
        self.waiting.values()
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Takes every call waiting (the connection is gone: each is to be failed).
    pub fn drain(&mut self) -> impl Iterator<Item = (i64, C)> + '_ {
        self.waiting.drain()
    }

    /// Classifies one line and matches an answer. `Ok(None)`: a blank line.
    pub fn receive(&mut self, line: &[u8]) -> Result<Option<Received<C>>, Malformed> {
        Ok(Incoming::parse(line)?.map(|incoming| self.receive_message(incoming)))
    }

    /// Matches a message classified elsewhere (a reader task off the owner's loop). An answer's
    /// id may be this peer's integer or the same number as a string.
    pub fn receive_message(&mut self, incoming: Incoming) -> Received<C> {
        match incoming {
            Incoming::Response { id, outcome } => {
                let issued = issued_id(&id);
                match issued.and_then(|n| self.waiting.remove(&n).map(|call| (n, call))) {
                    Some((id, call)) => Received::Answer { id, call, outcome },
                    None => Received::Unmatched { id, outcome },
                }
            }
            Incoming::Request { id, method, params } => Received::Request { id, method, params },
            Incoming::Notification { method, params } => Received::Notification { method, params },
        }
    }

    /// The answer line (with `\n`) to the other side's request `id`.
    pub fn answer_line(&self, id: &RequestId, outcome: Result<&Value, &RpcError>) -> String {
        self.dialect.answer_line(id, outcome)
    }

    /// A notification line (with `\n`).
    pub fn notification_line<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
    ) -> Result<String, serde_json::Error> {
        self.dialect.notification_line(method, params)
    }
}

/// The integer an answer's id names: the integer itself, or a string holding one.
fn issued_id(id: &RequestId) -> Option<i64> {
    id.as_i64().or_else(|| match id.to_value() {
        Value::String(text) => text.parse().ok(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    /// Requests get increasing ids; an answer reaches the call waiting under its id once
    /// (also when the id comes back as a numeric string); a late or unknown answer is
    /// unmatched; a taken call is no longer answered.
    #[test]
    fn answers_reach_the_call_waiting_for_them() {
        let mut peer = Peer::new(Dialect::Bare);
        let (first, line) = peer.request("a", &json!({}), "call a").unwrap();
        assert_eq!(line, "{\"id\":1,\"method\":\"a\",\"params\":{}}\n");
        let (second, _) = peer.request("b", &json!({}), "call b").unwrap();
        let third = peer.issue("call c");
        assert_eq!((first, second, third), (1, 2, 3));
        assert_eq!(peer.len(), 3);

        match peer.receive(br#"{"id":"2","result":{"ok":true}}"#).unwrap() {
            Some(Received::Answer { id, call, outcome }) => {
                assert_eq!((id, call), (2, "call b"));
                assert_eq!(outcome, Ok(json!({"ok": true})));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            peer.receive(br#"{"id":2,"result":1}"#).unwrap(),
            Some(Received::Unmatched { .. })
        ));
        assert_eq!(peer.take(1), Some("call a"));
        assert!(matches!(
            peer.receive(br#"{"id":1,"error":{"code":-1,"message":"late"}}"#)
                .unwrap(),
            Some(Received::Unmatched {
                outcome: Err(_),
                ..
            })
        ));
        assert!(matches!(
            peer.receive(br#"{"id":9,"method":"item/tool/call","params":{}}"#)
                .unwrap(),
            Some(Received::Request { .. })
        ));
        assert!(matches!(
            peer.receive(br#"{"method":"turn/started","params":{}}"#)
                .unwrap(),
            Some(Received::Notification { .. })
        ));
        assert_eq!(peer.drain().collect::<Vec<_>>(), vec![(3, "call c")]);
        assert!(peer.is_empty());
    }

    /// Ids can start above the owner's own (a handshake sent before the peer existed); ids
    /// the owner chose are matched too, and issued ids count on above them.
    #[test]
    fn ids_start_where_the_owner_says() {
        let mut peer = Peer::starting_at(Dialect::JsonRpc2, 10);
        assert_eq!(peer.issue("a"), 10);
        assert_eq!(peer.issue("b"), 11);
        peer.register(40, "c");
        assert_eq!(peer.issue("d"), 41);
        assert!(matches!(
            peer.receive(br#"{"jsonrpc":"2.0","id":40,"result":null}"#)
                .unwrap(),
            Some(Received::Answer {
                id: 40,
                call: "c",
                ..
            })
        ));
    }
}
