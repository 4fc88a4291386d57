//! The harness's copy of a session's transcript under a kept lease: the turn after this
//! process's own turn uses the copy without reading the store, and a transcript rewrite in
//! between (an engine's `rewriteTranscriptEntries`) makes it read again, so what the engine
//! is shown is always what the store holds. A lease taken from the store brings what the turn
//! would read first, so a new session's turn reads nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ctxbridge::harness::{Harness, HarnessConfig};
use ctxbridge::quarantine::QuarantineRecord;
use ctxbridge::store::{
    OutboxRow, StateStore, StoreError, StoreStats, StoredBinding, TranscriptCursor,
    TranscriptEntry, TranscriptRead, TurnWrite, WriteFuture, WriteMode,
};
use support::*;

/// A store that counts its transcript reads, and its reads of any kind, and forwards
/// everything to the rig's store.
struct CountingStore {
    inner: Arc<dyn StateStore>,
    transcript_reads: AtomicUsize,
    reads: AtomicUsize,
}

impl CountingStore {
    fn read(&self) {
        self.reads.fetch_add(1, Ordering::SeqCst);
    }
}

impl StateStore for CountingStore {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn load_binding(&self, key: &str) -> Result<Option<StoredBinding>, StoreError> {
        self.read();
        self.inner.load_binding(key)
    }
    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        self.read();
        self.transcript_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_transcript(session_id)
    }
    fn transcript_since(
        &self,
        session_id: &str,
        cursor: Option<TranscriptCursor>,
    ) -> Result<TranscriptRead, StoreError> {
        self.read();
        self.transcript_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.transcript_since(session_id, cursor)
    }
    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.read();
        self.inner.pending_outbox(session_id)
    }
    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.read();
        self.inner.quarantines()
    }
    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.read();
        self.inner.is_bootstrapped(session_id, engine_id)
    }
    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.read();
        self.inner.load_document(namespace, key)
    }
    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.read();
        self.inner.stats()
    }
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture {
        self.inner.write(write, mode)
    }
}

/// A harness whose leases linger for `linger`, on a counting store over a fresh rig, with a
/// scripted engine that bootstraps (the rig is returned to keep its directory).
fn counted(linger: Duration) -> (Rig, Arc<CountingStore>, Arc<ScriptEngine>, Harness) {
    let rig = Rig::new();
    let store = Arc::new(CountingStore {
        inner: rig.store.clone(),
        transcript_reads: AtomicUsize::new(0),
        reads: AtomicUsize::new(0),
    });
    let engine = ScriptEngine::bootstrap("e1");
    let h = build_harness_on(
        Some(&engine),
        kept(linger),
        store.clone(),
        rig.backend.clone(),
    );
    (rig, store, engine, h)
}

fn kept(linger: Duration) -> HarnessConfig {
    HarnessConfig {
        lease_linger: linger,
        ..cfg()
    }
}

/// Under a kept lease the second and third turns read no transcript from the store, and the
/// engine still sees every earlier message; without a linger every turn after the first reads
/// it, once. The first turn reads none either way: its lease, taken from the store, read that
/// the new session's transcript is empty. (The session's first thread learns where it begins
/// in the transcript from the turn's copy too: it used to read the whole transcript again.)
#[tokio::test]
async fn a_kept_lease_turn_uses_the_copy_without_reading_the_store() {
    for (linger, reads) in [(Duration::from_secs(30), 0), (Duration::ZERO, 2)] {
        let (_rig, store, engine, h) = counted(linger);
        for prompt in ["one", "two", "three"] {
            turn(&h, prompt).await;
        }
        assert_eq!(
            store.transcript_reads.load(Ordering::SeqCst),
            reads,
            "linger {linger:?}"
        );
        assert_eq!(
            engine.assembled_message_counts(),
            [0, 2, 4],
            "linger {linger:?}: the engine saw the whole transcript each turn"
        );
        h.shutdown().await;
    }
}

/// A rewrite by the engine after a turn (in `maintain`) drops the copy: the next turn under
/// the kept lease reads the store again and the engine sees the rewritten message.
#[tokio::test]
async fn a_rewrite_drops_the_copy() {
    let (_rig, store, engine, h) = counted(Duration::from_secs(30));
    engine.script().rewrite_in_maintain = Some(RewritePlan::ReplaceFirst("[redacted]".into()));
    turn(&h, "my password is hunter2").await;
    let before = store.transcript_reads.load(Ordering::SeqCst);
    turn(&h, "two").await;
    assert!(
        store.transcript_reads.load(Ordering::SeqCst) > before,
        "the turn after a rewrite read the store"
    );
    let shown = engine.script().last_assembled.clone();
    assert_eq!(shown[0].plain_text(), "[redacted]", "{shown:?}");
    h.shutdown().await;
}

/// A new session's first turn reads nothing of the store: its lease, taken from the store,
/// brought the session id, the empty outbox, the bootstrap marks, the binding and the empty
/// transcript. The next turn under a lease taken anew reads only the transcript, which has
/// entries now; under a kept lease it reads nothing either.
#[tokio::test]
async fn a_new_sessions_turn_reads_nothing_beside_its_lease() {
    for (linger, second_turn_reads) in [(Duration::ZERO, 1), (Duration::from_secs(30), 0)] {
        let (_rig, store, engine, h) = counted(linger);
        turn(&h, "one").await;
        assert_eq!(
            store.reads.load(Ordering::SeqCst),
            0,
            "linger {linger:?}: the first turn read the store"
        );
        let bootstraps = || {
            engine
                .calls()
                .iter()
                .filter(|c| matches!(c, Call::Bootstrap))
                .count()
        };
        assert_eq!(bootstraps(), 1, "linger {linger:?}");
        turn(&h, "two").await;
        assert_eq!(
            store.reads.load(Ordering::SeqCst),
            second_turn_reads,
            "linger {linger:?}: reads of the second turn"
        );
        assert_eq!(
            bootstraps(),
            1,
            "linger {linger:?}: the session was bootstrapped again"
        );
        assert_eq!(
            engine.assembled_message_counts(),
            [0, 2],
            "linger {linger:?}"
        );
        h.shutdown().await;
    }
}
