//! A timing decorator for any [`StateStore`]: the time and number of calls per operation, so
//! the overhead benchmark can say how much of a turn is spent in the store and in which calls.
//!
//! It forwards the reads, the one write method ([`StateStore::write`], in the caller's mode)
//! and a sharded store's shards ([`StateStore::session_shard`], wrapped so their calls count
//! too): a turn's writes then take the path they take for users — a SQLite store's
//! group-commit queue — and a write is timed until its answer comes, which is what the
//! caller waits for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::{
    OutboxRow, QuarantineRecord, StateStore, StoreError, StoreStats, StoredBinding,
    TranscriptCursor, TranscriptEntry, TranscriptRead, TurnWrite, WriteFuture, WriteMode,
};

/// The store's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    LoadBinding,
    SaveBinding,
    DeleteBinding,
    RecordTurn,
    LoadTranscript,
    AppendTranscript,
    ReplaceTranscriptEntries,
    EnqueueOutbox,
    PendingOutbox,
    CompleteOutbox,
    FailOutbox,
    RecordQuarantine,
    ClearQuarantine,
    Quarantines,
    IsBootstrapped,
    MarkBootstrapped,
    TryAcquireLease,
    ReleaseLease,
    LoadDocument,
    SaveDocument,
    RenewLease,
    DeleteSession,
    MoveOutbox,
    SweepIdle,
}

impl StoreOp {
    pub const ALL: [StoreOp; 24] = [
        StoreOp::LoadBinding,
        StoreOp::SaveBinding,
        StoreOp::DeleteBinding,
        StoreOp::RecordTurn,
        StoreOp::LoadTranscript,
        StoreOp::AppendTranscript,
        StoreOp::ReplaceTranscriptEntries,
        StoreOp::EnqueueOutbox,
        StoreOp::PendingOutbox,
        StoreOp::CompleteOutbox,
        StoreOp::FailOutbox,
        StoreOp::RecordQuarantine,
        StoreOp::ClearQuarantine,
        StoreOp::Quarantines,
        StoreOp::IsBootstrapped,
        StoreOp::MarkBootstrapped,
        StoreOp::TryAcquireLease,
        StoreOp::ReleaseLease,
        StoreOp::LoadDocument,
        StoreOp::SaveDocument,
        StoreOp::RenewLease,
        StoreOp::DeleteSession,
        StoreOp::MoveOutbox,
        StoreOp::SweepIdle,
    ];

    /// The operation a write is; `None` for a kind of write newer than this table (the bench
    /// sees `TurnWrite` as any user of the crate does, non-exhaustive), forwarded untimed.
    pub fn of_write(write: &TurnWrite) -> Option<StoreOp> {
        Some(match write {
            TurnWrite::AcquireLease { .. } => StoreOp::TryAcquireLease,
            TurnWrite::ReleaseLease(_) => StoreOp::ReleaseLease,
            TurnWrite::RecordTurn { .. } => StoreOp::RecordTurn,
            TurnWrite::EnqueueOutbox(_) => StoreOp::EnqueueOutbox,
            TurnWrite::CompleteOutbox { .. } => StoreOp::CompleteOutbox,
            TurnWrite::FailOutbox { .. } => StoreOp::FailOutbox,
            TurnWrite::RenewLease { .. } => StoreOp::RenewLease,
            TurnWrite::SaveBinding { .. } => StoreOp::SaveBinding,
            TurnWrite::DeleteBinding { .. } => StoreOp::DeleteBinding,
            TurnWrite::DeleteSession { .. } => StoreOp::DeleteSession,
            TurnWrite::AppendTranscript { .. } => StoreOp::AppendTranscript,
            TurnWrite::ReplaceTranscriptEntries { .. } => StoreOp::ReplaceTranscriptEntries,
            TurnWrite::MoveOutbox { .. } => StoreOp::MoveOutbox,
            TurnWrite::RecordQuarantine(_) => StoreOp::RecordQuarantine,
            TurnWrite::ClearQuarantine { .. } => StoreOp::ClearQuarantine,
            TurnWrite::MarkBootstrapped { .. } => StoreOp::MarkBootstrapped,
            TurnWrite::SaveDocument { .. } => StoreOp::SaveDocument,
            TurnWrite::SweepIdle(_) => StoreOp::SweepIdle,
            // Unreachable inside this crate, required outside it: the match is written as a
            // user of the public API must write it.
            #[allow(unreachable_patterns)]
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::LoadBinding => "load_binding",
            StoreOp::SaveBinding => "save_binding",
            StoreOp::DeleteBinding => "delete_binding",
            StoreOp::RecordTurn => "record_turn",
            StoreOp::LoadTranscript => "load_transcript",
            StoreOp::AppendTranscript => "append_transcript",
            StoreOp::ReplaceTranscriptEntries => "replace_transcript_entries",
            StoreOp::EnqueueOutbox => "enqueue_outbox",
            StoreOp::PendingOutbox => "pending_outbox",
            StoreOp::CompleteOutbox => "complete_outbox",
            StoreOp::FailOutbox => "fail_outbox",
            StoreOp::RecordQuarantine => "record_quarantine",
            StoreOp::ClearQuarantine => "clear_quarantine",
            StoreOp::Quarantines => "quarantines",
            StoreOp::IsBootstrapped => "is_bootstrapped",
            StoreOp::MarkBootstrapped => "mark_bootstrapped",
            StoreOp::TryAcquireLease => "try_acquire_lease",
            StoreOp::ReleaseLease => "release_lease",
            StoreOp::LoadDocument => "load_document",
            StoreOp::SaveDocument => "save_document",
            StoreOp::RenewLease => "renew_lease",
            StoreOp::DeleteSession => "delete_session",
            StoreOp::MoveOutbox => "move_outbox",
            StoreOp::SweepIdle => "sweep_idle",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Calls and time of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTotals {
    pub op: StoreOp,
    pub calls: u64,
    pub time: Duration,
}

/// Time and calls per operation, shared by a store and the wrappers of its shards.
#[derive(Debug)]
struct Counters {
    nanos: [AtomicU64; StoreOp::ALL.len()],
    calls: [AtomicU64; StoreOp::ALL.len()],
}

impl Counters {
    fn add(&self, op: StoreOp, since: Instant) {
        let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos[op.index()].fetch_add(nanos, Ordering::Relaxed);
        self.calls[op.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// Wraps a store, timing every call per operation.
pub struct TimedStore {
    inner: Arc<dyn StateStore>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for TimedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedStore")
            .field("inner", &self.inner.location())
            .field("counters", &self.counters)
            .finish()
    }
}

impl TimedStore {
    pub fn new(inner: impl StateStore + 'static) -> Self {
        TimedStore {
            inner: Arc::new(inner),
            counters: Arc::new(Counters {
                nanos: std::array::from_fn(|_| AtomicU64::new(0)),
                calls: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        }
    }

    /// Time spent in the store so far, all operations.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(
            self.counters
                .nanos
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .sum(),
        )
    }

    /// Totals per operation (operations never called are left out).
    pub fn totals(&self) -> Vec<OpTotals> {
        StoreOp::ALL
            .iter()
            .map(|op| OpTotals {
                op: *op,
                calls: self.counters.calls[op.index()].load(Ordering::Relaxed),
                time: Duration::from_nanos(self.counters.nanos[op.index()].load(Ordering::Relaxed)),
            })
            .filter(|t| t.calls > 0)
            .collect()
    }

    fn timed<T>(&self, op: StoreOp, call: impl FnOnce(&dyn StateStore) -> T) -> T {
        let started = Instant::now();
        let result = call(&*self.inner);
        self.counters.add(op, started);
        result
    }
}

impl StateStore for TimedStore {
    fn location(&self) -> String {
        self.inner.location()
    }

    /// The shard a session lives on, wrapped so that its calls are counted here too.
    fn session_shard(&self, session_key: &str) -> Option<Arc<dyn StateStore>> {
        let shard = self.inner.session_shard(session_key)?;
        Some(Arc::new(TimedStore {
            inner: shard,
            counters: self.counters.clone(),
        }))
    }

    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError> {
        self.timed(StoreOp::LoadBinding, |s| s.load_binding(binding_key))
    }

    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        self.timed(StoreOp::LoadTranscript, |s| s.load_transcript(session_id))
    }

    fn transcript_since(
        &self,
        session_id: &str,
        cursor: Option<TranscriptCursor>,
    ) -> Result<TranscriptRead, StoreError> {
        self.timed(StoreOp::LoadTranscript, |s| {
            s.transcript_since(session_id, cursor)
        })
    }

    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.timed(StoreOp::PendingOutbox, |s| s.pending_outbox(session_id))
    }

    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.timed(StoreOp::Quarantines, |s| s.quarantines())
    }

    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.timed(StoreOp::IsBootstrapped, |s| {
            s.is_bootstrapped(session_id, engine_id)
        })
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.timed(StoreOp::LoadDocument, |s| s.load_document(namespace, key))
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats()
    }

    /// Forwarded in the caller's mode (a turn's write joins the store's queue), timed until
    /// its answer: what the caller waits for.
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture {
        let op = StoreOp::of_write(&write);
        let started = Instant::now();
        let answer = self.inner.write(write, mode);
        let counters = self.counters.clone();
        Box::pin(async move {
            let outcome = answer.await;
            if let Some(op) = op {
                counters.add(op, started);
            }
            outcome
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;
    use crate::store::{LeaseAttempt, StateStoreExt};

    /// Calls go through to the wrapped store and are counted per operation.
    #[test]
    fn delegates_and_counts_per_operation() {
        let store = TimedStore::new(SqliteStore::in_memory().unwrap());
        store.save_document("ns", "k", "\"v\"").unwrap();
        assert_eq!(
            store.load_document("ns", "k").unwrap().as_deref(),
            Some("\"v\"")
        );
        assert_eq!(store.load_document("ns", "missing").unwrap(), None);
        let totals = store.totals();
        assert_eq!(
            totals.iter().map(|t| (t.op, t.calls)).collect::<Vec<_>>(),
            vec![(StoreOp::LoadDocument, 2), (StoreOp::SaveDocument, 1)]
        );
        assert_eq!(
            store.elapsed(),
            totals.iter().map(|t| t.time).sum::<Duration>()
        );
    }

    /// A turn's queued writes go to the wrapped store's own `submit` (its group-commit queue),
    /// are timed until their answer and counted by operation; a sharded store's shards are
    /// handed out wrapped, so calls made on a shard count too.
    #[tokio::test]
    async fn queued_writes_and_shards_are_forwarded_and_counted() {
        let store = TimedStore::new(crate::store::ShardedSqliteStore::in_memory(2).unwrap());
        let shard = store
            .session_shard("k")
            .expect("a sharded store names the session's shard");
        let attempt = shard
            .submit(TurnWrite::acquire("k", "h", None, 1, 60_000, None))
            .await
            .unwrap()
            .into_lease();
        let LeaseAttempt::Acquired(lease) = attempt else {
            panic!("{attempt:?}")
        };
        assert!(matches!(
            shard.try_acquire_lease("k", "other", 2, 60_000).unwrap(),
            LeaseAttempt::Busy { .. }
        ));
        shard.submit_detached(TurnWrite::ReleaseLease(lease));
        assert!(matches!(
            shard.try_acquire_lease("k", "other", 3, 60_000).unwrap(),
            LeaseAttempt::Acquired(_)
        ));
        let totals = store.totals();
        assert_eq!(
            totals.iter().map(|t| (t.op, t.calls)).collect::<Vec<_>>(),
            vec![(StoreOp::TryAcquireLease, 3), (StoreOp::ReleaseLease, 1)]
        );
    }
}
