//! A timing decorator for any [`StateStore`]: the time and number of calls per operation, so
//! the overhead benchmark can say how much of a turn is spent in the store and in which calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::store::{
    Lease, LeaseAttempt, OutboxRow, QuarantineRecord, StateStore, StoreError, StoreStats,
    StoredBinding, SweepReport, SweepRequest, TranscriptCursor, TranscriptEntry, TranscriptRead,
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
}

impl StoreOp {
    pub const ALL: [StoreOp; 20] = [
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
    ];

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

/// Wraps `inner`, timing every call per operation.
#[derive(Debug)]
pub struct TimedStore<S> {
    inner: S,
    nanos: [AtomicU64; StoreOp::ALL.len()],
    calls: [AtomicU64; StoreOp::ALL.len()],
}

impl<S> TimedStore<S> {
    pub fn new(inner: S) -> Self {
        TimedStore {
            inner,
            nanos: std::array::from_fn(|_| AtomicU64::new(0)),
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Time spent in the store so far, all operations.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.nanos.iter().map(|n| n.load(Ordering::Relaxed)).sum())
    }

    /// Totals per operation (operations never called are left out).
    pub fn totals(&self) -> Vec<OpTotals> {
        StoreOp::ALL
            .iter()
            .map(|op| OpTotals {
                op: *op,
                calls: self.calls[op.index()].load(Ordering::Relaxed),
                time: Duration::from_nanos(self.nanos[op.index()].load(Ordering::Relaxed)),
            })
            .filter(|t| t.calls > 0)
            .collect()
    }

    fn timed<T>(&self, op: StoreOp, call: impl FnOnce(&S) -> T) -> T {
        let started = Instant::now();
        let result = call(&self.inner);
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos[op.index()].fetch_add(nanos, Ordering::Relaxed);
        self.calls[op.index()].fetch_add(1, Ordering::Relaxed);
        result
    }
}

impl<S: StateStore> StateStore for TimedStore<S> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError> {
        self.timed(StoreOp::LoadBinding, |s| s.load_binding(binding_key))
    }

    fn save_binding(
        &self,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::SaveBinding, |s| {
            s.save_binding(binding_key, json, lease_generation)
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<u64, StoreError> {
        self.inner.delete_session(session_id)
    }

    fn move_outbox(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        self.inner.move_outbox(from, to)
    }

    fn delete_binding(&self, binding_key: &str) -> Result<(), StoreError> {
        self.timed(StoreOp::DeleteBinding, |s| s.delete_binding(binding_key))
    }

    fn record_turn(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::RecordTurn, |s| {
            s.record_turn(
                session_id,
                entries,
                binding_key,
                binding_json,
                lease_generation,
            )
        })
    }

    /// Timed as a `record_turn` (one atomic step; the default would split it in two).
    fn record_turn_with_commit(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: &OutboxRow,
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::RecordTurn, |s| {
            s.record_turn_with_commit(
                session_id,
                entries,
                binding_key,
                binding_json,
                lease_generation,
                commit,
            )
        })
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

    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::AppendTranscript, |s| {
            s.append_transcript(session_id, entries)
        })
    }

    fn replace_transcript_entries(
        &self,
        session_id: &str,
        replacements: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::ReplaceTranscriptEntries, |s| {
            s.replace_transcript_entries(session_id, replacements)
        })
    }

    fn enqueue_outbox(&self, row: &OutboxRow) -> Result<(), StoreError> {
        self.timed(StoreOp::EnqueueOutbox, |s| s.enqueue_outbox(row))
    }

    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.timed(StoreOp::PendingOutbox, |s| s.pending_outbox(session_id))
    }

    fn complete_outbox(&self, session_id: &str, advancement_key: &str) -> Result<(), StoreError> {
        self.timed(StoreOp::CompleteOutbox, |s| {
            s.complete_outbox(session_id, advancement_key)
        })
    }

    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        self.timed(StoreOp::FailOutbox, |s| {
            s.fail_outbox(session_id, advancement_key, error)
        })
    }

    fn record_quarantine(&self, record: &QuarantineRecord) -> Result<(), StoreError> {
        self.timed(StoreOp::RecordQuarantine, |s| s.record_quarantine(record))
    }

    fn clear_quarantine(&self, engine_id: &str) -> Result<(), StoreError> {
        self.timed(StoreOp::ClearQuarantine, |s| s.clear_quarantine(engine_id))
    }

    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.timed(StoreOp::Quarantines, |s| s.quarantines())
    }

    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.timed(StoreOp::IsBootstrapped, |s| {
            s.is_bootstrapped(session_id, engine_id)
        })
    }

    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.timed(StoreOp::MarkBootstrapped, |s| {
            s.mark_bootstrapped(session_id, engine_id)
        })
    }

    fn try_acquire_lease(
        &self,
        session: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.timed(StoreOp::TryAcquireLease, |s| {
            s.try_acquire_lease(session, holder, now_ms, ttl_ms)
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.timed(StoreOp::ReleaseLease, |s| s.release_lease(lease))
    }

    /// Heartbeats run beside the turn, not in it: forwarded untimed.
    fn renew_lease(&self, lease: &Lease, now_ms: u64, ttl_ms: u64) -> Result<bool, StoreError> {
        self.inner.renew_lease(lease, now_ms, ttl_ms)
    }

    fn take_over_lease(
        &self,
        session: &str,
        dead_holder: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.timed(StoreOp::TryAcquireLease, |s| {
            s.take_over_lease(session, dead_holder, holder, now_ms, ttl_ms)
        })
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.timed(StoreOp::LoadDocument, |s| s.load_document(namespace, key))
    }

    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        self.timed(StoreOp::SaveDocument, |s| {
            s.save_document(namespace, key, json)
        })
    }

    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        self.inner.sweep_idle(request)
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

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
}
