//! A client connection's outgoing queue, bounded in messages and in bytes.
//!
//! The hub and the client actor never wait for a client: they queue what it is to be sent and
//! go on, and the connection's writer drains the queue into the socket. A client that stops
//! reading (its socket full) would make the queue grow without end, so each message is
//! serialised when it is queued — its size is then known exactly, and a message fanned out
//! to several clients is serialised once — and counted against [`OutboundLimits`]. A message
//! that would pass either limit is not queued: the connection is marked overflowed, logged
//! once naming it, its writer stops writing what is queued, tries to close it (WebSocket close
//! 1008) and drops it, and its reader stops. Its memory goes with it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::serve::hub::ConnId;

/// Default of [`OutboundLimits::max_messages`].
pub const DEFAULT_MAX_OUTGOING_MESSAGES: usize = 16_384;
/// Default of [`OutboundLimits::max_bytes`]: 64 MiB.
pub const DEFAULT_MAX_OUTGOING_BYTES: usize = 64 * 1024 * 1024;
/// WebSocket close code for a client whose queue overflowed (RFC 6455 "policy violation").
pub const CLOSE_POLICY: u16 = 1008;

/// How much may wait in one connection's outgoing queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundLimits {
    /// Messages queued and not yet written.
    pub max_messages: usize,
    /// Bytes (serialised JSON) queued and not yet written.
    pub max_bytes: usize,
}

impl Default for OutboundLimits {
    fn default() -> OutboundLimits {
        OutboundLimits {
            max_messages: DEFAULT_MAX_OUTGOING_MESSAGES,
            max_bytes: DEFAULT_MAX_OUTGOING_BYTES,
        }
    }
}

/// What goes out to a client connection's transport.
#[derive(Debug)]
pub enum Outbound {
    /// One JSON-RPC message (serialised when queued).
    Message(Value),
    /// One JSON-RPC message already serialised (shared by the clients it is fanned out to).
    Text(Arc<str>),
    /// Close the connection (WebSocket close code and reason).
    Close(u16, String),
}

/// What the writer takes out of the queue.
#[derive(Debug)]
pub enum Queued {
    /// A serialised message.
    Text(Arc<str>),
    /// Close the connection.
    Close(u16, String),
}

#[derive(Debug)]
struct Shared {
    conn: ConnId,
    limits: OutboundLimits,
    messages: AtomicUsize,
    bytes: AtomicUsize,
    overflow: CancellationToken,
    logged: AtomicBool,
}

/// The queueing side (cheap to clone: the hub and the client actor hold one each).
#[derive(Debug, Clone)]
pub struct OutboundSender {
    tx: mpsc::UnboundedSender<Queued>,
    shared: Arc<Shared>,
}

/// The writer's side.
#[derive(Debug)]
pub struct OutboundReceiver {
    rx: mpsc::UnboundedReceiver<Queued>,
    shared: Arc<Shared>,
}

/// A new queue for connection `conn`.
pub fn channel(conn: ConnId, limits: OutboundLimits) -> (OutboundSender, OutboundReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        conn,
        limits,
        messages: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        overflow: CancellationToken::new(),
        logged: AtomicBool::new(false),
    });
    (
        OutboundSender {
            tx,
            shared: shared.clone(),
        },
        OutboundReceiver { rx, shared },
    )
}

impl OutboundSender {
    /// Queues `outbound`; false when it was not queued (the connection is gone, or this
    /// message would pass a limit and the connection is now overflowed).
    pub fn send(&self, outbound: Outbound) -> bool {
        if self.shared.overflow.is_cancelled() {
            return false;
        }
        let text: Arc<str> = match outbound {
            Outbound::Close(code, reason) => {
                return self.tx.send(Queued::Close(code, reason)).is_ok()
            }
            Outbound::Message(value) => value.to_string().into(),
            Outbound::Text(text) => text,
        };
        let size = text.len();
        let messages = self.shared.messages.fetch_add(1, Ordering::AcqRel) + 1;
        let bytes = self.shared.bytes.fetch_add(size, Ordering::AcqRel) + size;
        let limits = self.shared.limits;
        if messages > limits.max_messages || bytes > limits.max_bytes {
            self.shared.messages.fetch_sub(1, Ordering::AcqRel);
            self.shared.bytes.fetch_sub(size, Ordering::AcqRel);
            self.overflowed(messages, bytes);
            return false;
        }
        if self.tx.send(Queued::Text(text)).is_err() {
            self.shared.messages.fetch_sub(1, Ordering::AcqRel);
            self.shared.bytes.fetch_sub(size, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Fires when the queue overflowed (the connection is to be dropped).
    pub fn overflow(&self) -> CancellationToken {
        self.shared.overflow.clone()
    }

    fn overflowed(&self, messages: usize, bytes: usize) {
        if self.shared.logged.swap(true, Ordering::AcqRel) {
            return;
        }
        let limits = self.shared.limits;
        tracing::warn!(
            conn = self.shared.conn,
            queued_messages = messages - 1,
            queued_bytes = bytes,
            max_messages = limits.max_messages,
            max_bytes = limits.max_bytes,
            "serve: disconnecting client {}: its outgoing queue is over the limit (it does not read what it asked for)",
            self.shared.conn
        );
        self.shared.overflow.cancel();
    }
}

impl OutboundReceiver {
    fn took(&self, item: &Queued) {
        if let Queued::Text(text) = item {
            self.shared.messages.fetch_sub(1, Ordering::AcqRel);
            self.shared.bytes.fetch_sub(text.len(), Ordering::AcqRel);
        }
    }

    /// The next item; `None` when every sender is gone or the queue overflowed.
    pub async fn recv(&mut self) -> Option<Queued> {
        let item = tokio::select! {
            biased;
            () = self.shared.overflow.cancelled() => return None,
            item = self.rx.recv() => item?,
        };
        self.took(&item);
        Some(item)
    }

    /// An item already queued, without waiting (`None` too after an overflow).
    pub fn try_recv(&mut self) -> Option<Queued> {
        if self.shared.overflow.is_cancelled() {
            return None;
        }
        let item = self.rx.try_recv().ok()?;
        self.took(&item);
        Some(item)
    }

    /// Fires when the queue overflows.
    pub fn overflow_token(&self) -> CancellationToken {
        self.shared.overflow.clone()
    }

    /// Drops whatever is still queued (after an overflow: its memory goes at once, not when
    /// the connection's last task ends).
    pub fn discard(&mut self) {
        while let Ok(item) = self.rx.try_recv() {
            self.took(&item);
        }
    }

    /// The close an overflow asks for (`None` while it has not overflowed).
    pub fn overflow_close(&self) -> Option<(u16, String)> {
        if !self.shared.overflow.is_cancelled() {
            return None;
        }
        let limits = self.shared.limits;
        let reason = format!(
            "outgoing queue over its limit ({} messages or {} bytes): the client does not read",
            limits.max_messages, limits.max_bytes
        );
        Some((CLOSE_POLICY, reason))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    /// Messages are counted while queued and uncounted when taken; the one that would pass a
    /// limit is refused, the queue overflows once, and nothing more is handed out.
    #[tokio::test]
    async fn limits_are_enforced_while_queued() {
        let limits = OutboundLimits {
            max_messages: 3,
            max_bytes: 1_000,
        };
        let (tx, mut rx) = channel(7, limits);
        for n in 0..3 {
            assert!(tx.send(Outbound::Message(json!({"n": n}))));
        }
        let Some(Queued::Text(first)) = rx.recv().await else {
            panic!("no first message");
        };
        assert_eq!(&*first, r#"{"n":0}"#);
        assert!(
            tx.send(Outbound::Message(json!({"n": 3}))),
            "taking one made room"
        );
        assert!(rx.overflow_close().is_none());
        assert!(
            !tx.send(Outbound::Message(json!({"n": 4}))),
            "a fourth waiting is over"
        );
        let (code, reason) = rx.overflow_close().unwrap();
        assert_eq!(code, CLOSE_POLICY);
        assert!(reason.contains("3 messages"), "{reason}");
        assert!(rx.recv().await.is_none());
        assert!(rx.try_recv().is_none());
        assert!(!tx.send(Outbound::Message(json!({"n": 5}))));
    }

    /// The byte limit counts serialised bytes, shared text included.
    #[tokio::test]
    async fn bytes_are_counted_exactly() {
        let limits = OutboundLimits {
            max_messages: 100,
            max_bytes: 10,
        };
        let (tx, mut rx) = channel(1, limits);
        let text: Arc<str> = Arc::from("12345");
        assert!(tx.send(Outbound::Text(text.clone())));
        assert!(tx.send(Outbound::Text(text.clone())));
        assert!(!tx.send(Outbound::Text(text)));
        assert!(rx.recv().await.is_none(), "overflowed");
    }
}
