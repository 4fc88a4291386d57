//! The SQLite store's write queue (group commit): a turn's writes are queued, and the thread
//! that finds the queue free runs what is queued as one transaction and answers each (a write
//! that fails sends the batch's writes to run one by one); `classify` names what a SQLite
//! failure means.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, TransactionBehavior};

use super::queries::{
    acquire_lease, insert_bootstrap_mark, insert_entries, insert_outbox, read_session,
    upsert_binding, upsert_document,
};
use super::schema::{touch, SESSION_SCOPE};
use super::{QueueRunner, SqliteStore, StoreInner};
use crate::store::{
    Lease, LeaseAttempt, StoreError, TranscriptEntry, TurnWrite, WriteMode, WriteOutcome,
};
use crate::util::lock;

impl SqliteStore {
    /// Runs the queued writes, unless another thread already does. A submitter that finds
    /// the queue being run leaves its write there and goes on: the running thread sees it
    /// queued when its batch is done.
    ///
    /// One batch is run here. What was queued meanwhile is handed to a task on the runtime of
    /// the turn that has waited longest ([`SqliteStore::hand_off`]), which runs it at once:
    /// the current task goes back to its turn, and the turns this batch answered are taken
    /// up by the runtime's other worker threads while the next batch is written. Where no
    /// task can take it, the queue is run here until it is empty.
    pub(super) fn combine(&self) {
        while self.combine_once() {
            if self.hand_off() {
                return;
            }
        }
    }

    /// Hands the queued writes to a task spawned on the runtime of the oldest write awaited
    /// on one (on lanes, a runtime per core, that is the lane whose turns wait for the next
    /// batch, not the lane that ran this one). False, for the caller to run the queue itself,
    /// when no queued write was submitted on a runtime, or when one's submitter may be
    /// blocked waiting for it (a [`WriteMode::Now`] write, waited for by blocking a thread
    /// that may be the very one the task would need). The task is [`next_batch`].
    pub(super) fn hand_off(&self) -> bool {
        let runtime = {
            let queue = lock(&self.queue);
            if queue.iter().any(QueuedWrite::may_block) {
                return false;
            }
            queue.iter().find_map(|q| q.runtime.clone())
        };
        let Some(runtime) = runtime else {
            return false;
        };
        runtime.spawn(next_batch(QueueRunner::new(self.clone())));
        true
    }
}

/// The task a batch hands the queue to: it runs the queue when first polled, without yielding
/// first. Spawned from a worker thread of a multi-threaded runtime, it is that thread's next
/// task, so one thread goes on writing while the turns the batch answered wait in its run
/// queue for another worker to take them up; yielding first (to gather a larger batch) left
/// those turns to that one thread and the other worker idle. Dropped unrun (its runtime shut
/// down), it runs the queue as it drops.
pub(super) async fn next_batch(mut next: QueueRunner) {
    next.run()
}

impl StoreInner {
    /// A write of the queue's kinds run alone, at once (what [`TurnWrite::apply`] asks of
    /// this store; its own `write` queues them instead).
    pub(super) fn run_alone(&self, write: TurnWrite) -> Result<WriteOutcome, StoreError> {
        self.run_now(&self.prepare(write)?)
    }

    /// A turn's record run alone, at once, with `entries` as its transcript entries: they
    /// are encoded from the caller's slice, not copied into the write first (`record` is a
    /// [`TurnWrite::RecordTurn`] built without entries; the writer needs only their JSON).
    pub(super) fn record_alone(
        &self,
        entries: &[TranscriptEntry],
        record: TurnWrite,
    ) -> Result<(), StoreError> {
        let op = Op {
            encoded: self.encode_entries("record turn", entries)?,
            write: record,
        };
        self.run_now(&op).map(drop)
    }

    /// Runs one turn write in a transaction of its own, at once.
    pub(super) fn run_now(&self, op: &Op) -> Result<WriteOutcome, StoreError> {
        let applied = self.write_tx(op.operation(), |tx| op.run(tx))?;
        op.finish(applied)
    }

    /// Turns a submitted write into what the writer runs (encoding transcript entries here,
    /// on the submitting thread, not under the writer). Only turn writes are queued
    /// ([`Op::is_queued`]); the caller runs the others directly.
    pub(super) fn prepare(&self, mut write: TurnWrite) -> Result<Op, StoreError> {
        let encoded = match &mut write {
            TurnWrite::RecordTurn { entries, .. } => {
                self.encode_entries("record turn", &std::mem::take(entries))?
            }
            _ => Vec::new(),
        };
        Ok(Op { write, encoded })
    }

    /// Runs a batch of what is queued, unless another thread already does, once
    /// ([`SqliteStore::combine`] runs the rest).
    /// Returns whether writes are left queued for the next batch.
    fn combine_once(&self) -> bool {
        if self
            .combining
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        // Given up on the way out, also if a batch panics (its writes' submitters then get
        // an error instead of an answer), so the queue never stays claimed.
        let role = CombinerRole(&self.combining);
        // The spare is only taken by the combiner, so its lock is never waited for. A batch
        // that panics drops its vector (its writes' submitters hear so) and the spare stays
        // empty.
        let mut batch = std::mem::take(&mut *lock(&self.spare));
        std::mem::swap(&mut batch, &mut *lock(&self.queue));
        if !batch.is_empty() {
            self.run_batch(&mut batch);
        }
        *lock(&self.spare) = batch;
        drop(role);
        !lock(&self.queue).is_empty()
    }

    /// Runs a batch of queued writes in one transaction and answers each. When a write or the
    /// transaction itself fails (it cannot begin or commit), the batch is rolled back and each
    /// write runs again alone, so each gets its own answer. Leaves `batch` empty.
    fn run_batch(&self, batch: &mut Vec<QueuedWrite>) {
        self.write_batches.fetch_add(1, Ordering::Relaxed);
        self.queued_writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let mut orphans = Vec::new();
        self.answer_batch(batch, &mut orphans);
        // Leases acquired for cancelled turns: released by the queue's next batch.
        if !orphans.is_empty() {
            tracing::debug!(
                leases = orphans.len(),
                "releasing leases acquired for cancelled turns"
            );
            lock(&self.queue).extend(orphans.into_iter().map(|lease| QueuedWrite {
                op: TurnWrite::ReleaseLease(lease).into(),
                reply: None,
                runtime: None,
            }));
        }
    }

    /// Runs a batch (see [`StoreInner::run_batch`]), answering each write; leases nobody
    /// waits for any more go to `orphans`.
    fn answer_batch(&self, batch: &mut Vec<QueuedWrite>, orphans: &mut Vec<Lease>) {
        if batch.len() == 1 {
            for queued in batch.drain(..) {
                let result = self.run_now(&queued.op);
                orphans.extend(queued.answer_with(result));
            }
            return;
        }
        let results = self.with_conn("run queued writes", |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut results = Vec::with_capacity(batch.len());
            for queued in batch.iter() {
                // A write not to be kept (fenced, a busy lease) has written nothing; a write
                // that fails ends the batch: it is rolled back and each write runs alone.
                let (applied, _keep) = queued.op.run(&tx)?;
                results.push(Ok::<_, rusqlite::Error>(applied));
            }
            tx.commit()?;
            Ok(results)
        });
        match results {
            Ok(results) => {
                // The commit is counted; its other writes fill the WAL too.
                self.wrote(batch.len().saturating_sub(1) as u64);
                for (queued, result) in batch.drain(..).zip(results) {
                    let answer = result
                        .map_err(|e| {
                            classify(&self.path, queued.op.operation(), e, self.busy_timeout)
                        })
                        .and_then(|applied| queued.op.finish(applied));
                    orphans.extend(queued.answer_with(answer));
                }
            }
            // Another process kept the database locked past the busy timeout: each write
            // would wait as long again.
            Err(StoreError::Locked { waited_ms, .. }) => {
                for queued in batch.drain(..) {
                    let locked = StoreError::Locked {
                        path: self.path.clone(),
                        operation: queued.op.operation(),
                        waited_ms,
                    };
                    orphans.extend(queued.answer_with(Err(locked)));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, writes = batch.len(), "a batch of queued writes failed; running each alone");
                for queued in batch.drain(..) {
                    let result = self.run_now(&queued.op);
                    orphans.extend(queued.answer_with(result));
                }
            }
        }
    }
}

/// What a queued write is answered with.
type WriteResult = Result<WriteOutcome, StoreError>;

/// A write waiting in the queue, and where its answer goes (nowhere for a detached write).
pub(super) struct QueuedWrite {
    op: Op,
    reply: Option<tokio::sync::oneshot::Sender<WriteResult>>,
    /// The runtime of the task awaiting the write ([`WriteMode::Grouped`] writes): where a
    /// batch that leaves it queued hands the queue to ([`SqliteStore::hand_off`]).
    runtime: Option<tokio::runtime::Handle>,
}

impl QueuedWrite {
    /// A write answered to `reply`; `mode` says how it is waited for: a
    /// [`WriteMode::Grouped`] write by a task, whose runtime is taken from the caller's
    /// context, a [`WriteMode::Now`] write perhaps by a blocked thread.
    pub(super) fn new(
        op: Op,
        reply: Option<tokio::sync::oneshot::Sender<WriteResult>>,
        mode: WriteMode,
    ) -> Self {
        let runtime = match mode {
            WriteMode::Grouped => tokio::runtime::Handle::try_current().ok(),
            WriteMode::Now => None,
        };
        QueuedWrite { op, reply, runtime }
    }

    /// Whether the write's submitter may be a thread blocked waiting for its answer.
    fn may_block(&self) -> bool {
        self.reply.is_some() && self.runtime.is_none()
    }

    /// Hands the write its answer. A lease acquired for a submitter that stopped waiting (its
    /// turn was cancelled) is returned, to be released: nobody holds it. (A turn cancelled
    /// after the answer was sent and before it read it leaves its lease to expire, as a
    /// crashed holder's.)
    #[must_use]
    fn answer_with(self, result: WriteResult) -> Option<Lease> {
        match self.reply {
            Some(reply) => match reply.send(result) {
                Ok(()) => None,
                Err(Ok(WriteOutcome::Lease(LeaseAttempt::Acquired(lease))))
                | Err(Ok(WriteOutcome::SessionLease(lease, _))) => Some(lease),
                // Any other answer nobody waits for any more needs nothing done.
                Err(_) => None,
            },
            None => {
                if let Err(e) = result {
                    tracing::warn!(operation = self.op.operation(), error = %e, "a detached store write failed");
                }
                None
            }
        }
    }
}

/// The queue-runner role of one thread; given up when dropped.
struct CombinerRole<'a>(&'a AtomicBool);

impl Drop for CombinerRole<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A turn write as the writer runs it: a [`TurnWrite`] whose transcript entries were taken
/// out and encoded.
pub(super) struct Op {
    write: TurnWrite,
    /// The `RecordTurn`'s entries as (entry id, message JSON).
    encoded: Vec<(String, String)>,
}

impl From<TurnWrite> for Op {
    /// A write without transcript entries.
    fn from(write: TurnWrite) -> Op {
        Op {
            write,
            encoded: Vec::new(),
        }
    }
}

/// What running an [`Op`] did: an outcome, or nothing because a newer lease generation fences
/// the writer.
pub(super) enum Applied {
    Outcome(WriteOutcome),
    Fenced(u64),
}

impl Op {
    /// The writes the queue runs: a turn's lease, record and outbox writes, its bootstrap mark
    /// and the documents it keeps (a thread's history).
    pub(super) fn is_queued(write: &TurnWrite) -> bool {
        matches!(
            write,
            TurnWrite::AcquireLease { .. }
                | TurnWrite::ReleaseLease(_)
                | TurnWrite::RecordTurn { .. }
                | TurnWrite::EnqueueOutbox(_)
                | TurnWrite::CompleteOutbox { .. }
                | TurnWrite::FailOutbox { .. }
                | TurnWrite::MarkBootstrapped { .. }
                | TurnWrite::SaveDocument { .. }
        )
    }

    fn operation(&self) -> &'static str {
        self.write.operation()
    }

    /// Runs the write inside the caller's transaction; true when it is to be kept. A write not
    /// to be kept (a fenced record, a busy lease) decides so before it writes anything, so a
    /// batch needs no savepoint per write.
    fn run(&self, conn: &Connection) -> rusqlite::Result<(Applied, bool)> {
        let done = Applied::Outcome(WriteOutcome::Done);
        match &self.write {
            TurnWrite::AcquireLease {
                session,
                holder,
                dead_holder,
                now_ms,
                ttl_ms,
                read,
            } => {
                let (attempt, keep) = acquire_lease(
                    conn,
                    session,
                    holder,
                    dead_holder.as_deref(),
                    *now_ms,
                    *ttl_ms,
                )?;
                let outcome = match (attempt, read) {
                    (LeaseAttempt::Acquired(lease), Some(read)) => {
                        let snapshot = read_session(conn, session, read)?;
                        WriteOutcome::SessionLease(lease, Box::new(snapshot))
                    }
                    (attempt, _) => WriteOutcome::Lease(attempt),
                };
                Ok((Applied::Outcome(outcome), keep))
            }
            // Only the holder of this generation may release; expiry keeps the generation so a
            // stale holder stays fenced.
            TurnWrite::ReleaseLease(lease) => conn
                .prepare_cached(
                    "UPDATE leases SET expires_at_ms = 0 WHERE session = ?1 AND holder = ?2 AND generation = ?3",
                )?
                .execute(params![lease.session, lease.holder, lease.generation as i64])
                .map(|_| (done, true)),
            TurnWrite::RecordTurn {
                session_id,
                binding_key,
                binding_json,
                lease_generation,
                commit,
                ..
            } => {
                if let Some(current) =
                    upsert_binding(conn, binding_key, binding_json, *lease_generation)?
                {
                    return Ok((Applied::Fenced(current), false));
                }
                insert_entries(conn, session_id, &self.encoded)?;
                if let Some(commit) = commit {
                    insert_outbox(conn, commit)?;
                }
                Ok((done, true))
            }
            TurnWrite::EnqueueOutbox(row) => insert_outbox(conn, row).map(|()| (done, true)),
            TurnWrite::CompleteOutbox {
                session_id,
                advancement_key,
            } => {
                let deleted = conn
                    .prepare_cached(
                        "DELETE FROM outbox WHERE session_id = ?1 AND advancement_key = ?2",
                    )?
                    .execute(params![session_id, advancement_key])?;
                // Delivered: the session's idle time starts now.
                if deleted > 0 {
                    touch(conn, SESSION_SCOPE, session_id)?;
                }
                Ok((done, true))
            }
            TurnWrite::FailOutbox {
                session_id,
                advancement_key,
                error,
            } => conn
                .prepare_cached(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ?3
                     WHERE session_id = ?1 AND advancement_key = ?2",
                )?
                .execute(params![session_id, advancement_key, error])
                .map(|_| (done, true)),
            TurnWrite::MarkBootstrapped {
                session_id,
                engine_id,
            } => insert_bootstrap_mark(conn, session_id, engine_id)
                .map(|new| (Applied::Outcome(WriteOutcome::Applied(new)), new)),
            TurnWrite::SaveDocument {
                namespace,
                key,
                json,
            } => upsert_document(conn, namespace, key, json).map(|()| (done, true)),
            // Not reached: only `is_queued` writes enter the queue. Refused, not guessed at.
            other => Err(rusqlite::Error::ToSqlConversionFailure(Box::new(
                std::io::Error::other(format!("{} is not a queued write", other.operation())),
            ))),
        }
    }

    /// The write's answer: a fenced write is refused as stale.
    fn finish(&self, applied: Applied) -> Result<WriteOutcome, StoreError> {
        match (applied, &self.write) {
            (Applied::Outcome(outcome), _) => Ok(outcome),
            (
                Applied::Fenced(current),
                TurnWrite::RecordTurn {
                    binding_key,
                    lease_generation,
                    ..
                },
            ) => Err(StoreError::StaleGeneration {
                operation: "record turn",
                key: binding_key.clone(),
                held: *lease_generation,
                current,
            }),
            (Applied::Fenced(current), _) => Err(StoreError::StaleGeneration {
                operation: self.operation(),
                key: String::new(),
                held: 0,
                current,
            }),
        }
    }
}

pub(super) fn classify(
    path: &Path,
    operation: &'static str,
    e: rusqlite::Error,
    waited: Duration,
) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Locked {
            path: path.to_path_buf(),
            operation,
            waited_ms: waited.as_millis() as u64,
        },
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            operation,
            message: e.to_string(),
        },
        _ => StoreError::Backend {
            store: path.display().to_string(),
            operation,
            message: e.to_string(),
            source: Box::new(e),
        },
    }
}
