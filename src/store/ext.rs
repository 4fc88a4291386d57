//! Conveniences over the port's one write method: each of the store's writes by name, waiting
//! for its answer ([`WriteMode::Now`]), plus the turn path's queued [`StateStoreExt::submit`]
//! and the fire-and-forget [`StateStoreExt::submit_detached`]. Implemented for every
//! [`StateStore`], so a decorator that forwards [`StateStore::write`] forwards them all.

use futures::FutureExt;

use super::{
    Lease, LeaseAttempt, OutboxRow, QuarantineRecord, StateStore, StoreError, SweepReport,
    SweepRequest, TranscriptEntry, TurnWrite, WriteFuture, WriteMode, WriteOutcome,
};

/// A store answered a write with an outcome of another kind: the store is broken.
fn unexpected(operation: &'static str, outcome: WriteOutcome) -> StoreError {
    StoreError::UnexpectedAnswer {
        operation,
        answer: format!("{outcome:?}"),
    }
}

/// Runs `write` at once and takes its answer apart with `take` (`None`: an answer of another
/// kind, a broken store).
fn answer<S, T>(
    store: &S,
    write: TurnWrite,
    take: impl FnOnce(&WriteOutcome) -> Option<T>,
) -> Result<T, StoreError>
where
    S: StateStore + ?Sized,
{
    let operation = write.operation();
    let outcome = futures::executor::block_on(store.write(write, WriteMode::Now))?;
    take(&outcome).ok_or_else(|| unexpected(operation, outcome))
}

fn count(outcome: &WriteOutcome) -> Option<u64> {
    match outcome {
        WriteOutcome::Count(n) => Some(*n),
        _ => None,
    }
}

fn applied(outcome: &WriteOutcome) -> Option<bool> {
    match outcome {
        WriteOutcome::Applied(yes) => Some(*yes),
        _ => None,
    }
}

fn lease(outcome: &WriteOutcome) -> Option<LeaseAttempt> {
    match outcome {
        WriteOutcome::Lease(attempt) => Some(attempt.clone()),
        WriteOutcome::SessionLease(lease, _) => Some(LeaseAttempt::Acquired(lease.clone())),
        _ => None,
    }
}

/// The store's writes by name (see [`TurnWrite`] for what each does).
pub trait StateStoreExt: StateStore {
    /// Submits a write on a turn's path: the store may run it with the writes of other tasks
    /// that are ready ([`WriteMode::Grouped`]).
    fn submit(&self, write: TurnWrite) -> WriteFuture {
        self.write(write, WriteMode::Grouped)
    }

    /// A write nobody waits for (a lease released on a failure path, a drop): run at once,
    /// or left with the batch another thread is running; a failure is logged.
    fn submit_detached(&self, write: TurnWrite) {
        let operation = write.operation();
        let mut answer = self.write(write, WriteMode::Now);
        let log = move |result: Result<WriteOutcome, StoreError>| {
            if let Err(e) = result {
                tracing::warn!(operation, error = %e, "a detached store write failed");
            }
        };
        match (&mut answer).now_or_never() {
            Some(result) => log(result),
            // Left with another thread's batch: waited for on the runtime when there is one;
            // without, the write still runs, unlogged.
            None => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { log(answer.await) });
                }
            }
        }
    }

    /// Runs a write at once and waits for its answer.
    fn write_now(&self, write: TurnWrite) -> Result<WriteOutcome, StoreError> {
        futures::executor::block_on(self.write(write, WriteMode::Now))
    }

    /// [`TurnWrite::SaveBinding`].
    fn save_binding(
        &self,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        self.write_now(TurnWrite::SaveBinding {
            binding_key: binding_key.to_owned(),
            json: json.to_owned(),
            lease_generation,
        })
        .map(drop)
    }

    /// [`TurnWrite::DeleteBinding`].
    fn delete_binding(&self, binding_key: &str) -> Result<(), StoreError> {
        self.write_now(TurnWrite::DeleteBinding {
            binding_key: binding_key.to_owned(),
        })
        .map(drop)
    }

    /// [`TurnWrite::DeleteSession`]: how many transcript entries went.
    fn delete_session(&self, session_id: &str) -> Result<u64, StoreError> {
        let write = TurnWrite::DeleteSession {
            session_id: session_id.to_owned(),
        };
        answer(self, write, count)
    }

    /// [`TurnWrite::RecordTurn`] without a commit.
    fn record_turn(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        let write = TurnWrite::record(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            None,
        );
        self.write_now(write).map(drop)
    }

    /// [`TurnWrite::RecordTurn`] with the turn's durable commit.
    fn record_turn_with_commit(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: &OutboxRow,
    ) -> Result<(), StoreError> {
        let (id, key, json) = (session_id, binding_key, binding_json);
        let write = TurnWrite::record(id, entries, key, json, lease_generation, Some(commit));
        self.write_now(write).map(drop)
    }

    /// [`TurnWrite::AppendTranscript`].
    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        self.write_now(TurnWrite::AppendTranscript {
            session_id: session_id.to_owned(),
            entries: entries.to_vec(),
        })
        .map(drop)
    }

    /// [`TurnWrite::ReplaceTranscriptEntries`].
    fn replace_transcript_entries(
        &self,
        session_id: &str,
        replacements: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        self.write_now(TurnWrite::ReplaceTranscriptEntries {
            session_id: session_id.to_owned(),
            replacements: replacements.to_vec(),
        })
        .map(drop)
    }

    /// [`TurnWrite::EnqueueOutbox`].
    fn enqueue_outbox(&self, row: &OutboxRow) -> Result<(), StoreError> {
        self.write_now(TurnWrite::EnqueueOutbox(row.clone()))
            .map(drop)
    }

    /// [`TurnWrite::CompleteOutbox`].
    fn complete_outbox(&self, session_id: &str, advancement_key: &str) -> Result<(), StoreError> {
        self.write_now(TurnWrite::CompleteOutbox {
            session_id: session_id.to_owned(),
            advancement_key: advancement_key.to_owned(),
        })
        .map(drop)
    }

    /// [`TurnWrite::MoveOutbox`]: how many rows moved.
    fn move_outbox(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        let write = TurnWrite::MoveOutbox {
            from: from.to_owned(),
            to: to.to_owned(),
        };
        answer(self, write, count)
    }

    /// [`TurnWrite::FailOutbox`].
    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        self.write_now(TurnWrite::FailOutbox {
            session_id: session_id.to_owned(),
            advancement_key: advancement_key.to_owned(),
            error: error.to_owned(),
        })
        .map(drop)
    }

    /// [`TurnWrite::RecordQuarantine`].
    fn record_quarantine(&self, record: &QuarantineRecord) -> Result<(), StoreError> {
        self.write_now(TurnWrite::RecordQuarantine(record.clone()))
            .map(drop)
    }

    /// [`TurnWrite::ClearQuarantine`].
    fn clear_quarantine(&self, engine_id: &str) -> Result<(), StoreError> {
        self.write_now(TurnWrite::ClearQuarantine {
            engine_id: engine_id.to_owned(),
        })
        .map(drop)
    }

    /// [`TurnWrite::MarkBootstrapped`]: true when the mark was new.
    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        let write = TurnWrite::MarkBootstrapped {
            session_id: session_id.to_owned(),
            engine_id: engine_id.to_owned(),
        };
        answer(self, write, applied)
    }

    /// [`TurnWrite::AcquireLease`].
    fn try_acquire_lease(
        &self,
        session: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        answer(
            self,
            TurnWrite::acquire(session, holder, None, now_ms, ttl_ms, None),
            lease,
        )
    }

    /// [`TurnWrite::AcquireLease`] from a holder known to be dead.
    fn take_over_lease(
        &self,
        session: &str,
        dead_holder: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        let write = TurnWrite::acquire(session, holder, Some(dead_holder), now_ms, ttl_ms, None);
        answer(self, write, lease)
    }

    /// [`TurnWrite::ReleaseLease`].
    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.write_now(TurnWrite::ReleaseLease(lease.clone()))
            .map(drop)
    }

    /// [`TurnWrite::RenewLease`]: false when the lease is no longer this holder's.
    fn renew_lease(&self, lease: &Lease, now_ms: u64, ttl_ms: u64) -> Result<bool, StoreError> {
        let write = TurnWrite::RenewLease {
            lease: lease.clone(),
            now_ms,
            ttl_ms,
        };
        answer(self, write, applied)
    }

    /// [`TurnWrite::SaveDocument`].
    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        self.write_now(TurnWrite::SaveDocument {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            json: json.to_owned(),
        })
        .map(drop)
    }

    /// [`TurnWrite::SweepIdle`]: what went.
    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        answer(
            self,
            TurnWrite::SweepIdle(request.clone()),
            |outcome| match outcome {
                WriteOutcome::Swept(report) => Some(report.clone()),
                _ => None,
            },
        )
    }
}

impl<S: StateStore + ?Sized> StateStoreExt for S {}
