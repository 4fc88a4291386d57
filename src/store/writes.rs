//! The store's one write path: every write is a [`TurnWrite`], handed to
//! [`StateStore::write`](super::StateStore::write) — the one write method of the port, which a
//! decorator forwards and a store may queue. [`StoreWrites`] is how the shipped stores carry a
//! write out; callers use the conveniences of
//! [`StateStoreExt`](super::StateStoreExt).

use super::{
    Lease, LeaseAttempt, OutboxRow, QuarantineRecord, SessionRead, SessionSnapshot, StoreError,
    SweepReport, SweepRequest, TranscriptEntry,
};

/// How a submitted write may wait for other writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// The turn path: the store may first let the other tasks that are ready run up to their
    /// own writes, and run them all in one transaction (each as if alone).
    Grouped,
    /// At once, without waiting for other tasks: a caller that blocks on the answer, or a
    /// write nobody waits for. A store must not need the caller's runtime to answer it.
    Now,
}

/// A write, owned so that a store can queue it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TurnWrite {
    /// Takes a session's lease (when `dead_holder` is given, from that holder, known to have
    /// died): answers [`WriteOutcome::Lease`], or, when `read` is given and the lease was
    /// taken, [`WriteOutcome::SessionLease`] with what the same transaction read of the
    /// session.
    AcquireLease {
        session: String,
        holder: String,
        dead_holder: Option<String>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<SessionRead>,
    },
    /// Releases a held lease (only its holder's generation is released).
    ReleaseLease(Lease),
    /// Extends a held lease to `now_ms + ttl_ms` (the holder's heartbeat): answers
    /// [`WriteOutcome::Applied`], false when the lease is no longer this holder's generation.
    RenewLease {
        lease: Lease,
        now_ms: u64,
        ttl_ms: u64,
    },
    /// Appends a finished turn's transcript entries and writes the session's binding in one
    /// atomic step, fenced by `lease_generation` (a stale holder cannot overwrite a newer
    /// turn's binding), and queues the turn's durable commit in the same step when given (a
    /// crash cannot leave a recorded turn without its queued commit; a duplicate advancement
    /// key keeps the queued row).
    RecordTurn {
        session_id: String,
        entries: Vec<TranscriptEntry>,
        binding_key: String,
        binding_json: String,
        lease_generation: u64,
        commit: Option<OutboxRow>,
    },
    /// Writes a binding, fenced like [`TurnWrite::RecordTurn`].
    SaveBinding {
        binding_key: String,
        json: String,
        lease_generation: u64,
    },
    DeleteBinding {
        binding_key: String,
    },
    /// Removes a session's transcript and bootstrap marks (a reset; queued outbox rows stay):
    /// answers [`WriteOutcome::Count`], the transcript entries that went.
    DeleteSession {
        session_id: String,
    },
    AppendTranscript {
        session_id: String,
        entries: Vec<TranscriptEntry>,
    },
    /// Replaces the messages of existing entries atomically (all or none).
    ReplaceTranscriptEntries {
        session_id: String,
        replacements: Vec<TranscriptEntry>,
    },
    /// Queues a durable commit (a known advancement key keeps its row).
    EnqueueOutbox(OutboxRow),
    CompleteOutbox {
        session_id: String,
        advancement_key: String,
    },
    FailOutbox {
        session_id: String,
        advancement_key: String,
        error: String,
    },
    /// Moves the queued commits of session `from` to session `to`, in their order (a reset);
    /// a row whose advancement key `to` already holds stays. Answers [`WriteOutcome::Count`].
    MoveOutbox {
        from: String,
        to: String,
    },
    RecordQuarantine(QuarantineRecord),
    ClearQuarantine {
        engine_id: String,
    },
    /// Records an engine's bootstrap of a session: answers [`WriteOutcome::Applied`], true
    /// when the mark was new.
    MarkBootstrapped {
        session_id: String,
        engine_id: String,
    },
    SaveDocument {
        namespace: String,
        key: String,
        json: String,
    },
    /// Removes up to `limit` idle keys' state in one atomic step: answers
    /// [`WriteOutcome::Swept`]. Never removes an undelivered outbox row or the state of its
    /// session, and never fails a write: a key written while the sweep runs stays.
    SweepIdle(SweepRequest),
}

impl TurnWrite {
    /// A turn's record, with its durable commit when given.
    pub(crate) fn record(
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: Option<&OutboxRow>,
    ) -> TurnWrite {
        TurnWrite::RecordTurn {
            session_id: session_id.to_owned(),
            entries: entries.to_vec(),
            binding_key: binding_key.to_owned(),
            binding_json: binding_json.to_owned(),
            lease_generation,
            commit: commit.cloned(),
        }
    }

    /// A lease acquisition, from `dead_holder` when given, reading the session with the lease
    /// when `read` is given.
    pub(crate) fn acquire(
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<&SessionRead>,
    ) -> TurnWrite {
        TurnWrite::AcquireLease {
            session: session.to_owned(),
            holder: holder.to_owned(),
            dead_holder: dead_holder.map(str::to_owned),
            now_ms,
            ttl_ms,
            read: read.cloned(),
        }
    }

    /// The write's operation, for messages.
    pub fn operation(&self) -> &'static str {
        match self {
            TurnWrite::AcquireLease {
                dead_holder: None, ..
            } => "acquire session lease",
            TurnWrite::AcquireLease { .. } => "take over session lease",
            TurnWrite::ReleaseLease(_) => "release session lease",
            TurnWrite::RenewLease { .. } => "renew session lease",
            TurnWrite::RecordTurn { .. } => "record turn",
            TurnWrite::SaveBinding { .. } => "save binding",
            TurnWrite::DeleteBinding { .. } => "delete binding",
            TurnWrite::DeleteSession { .. } => "delete session",
            TurnWrite::AppendTranscript { .. } => "append transcript",
            TurnWrite::ReplaceTranscriptEntries { .. } => "replace transcript entries",
            TurnWrite::EnqueueOutbox(_) => "enqueue outbox row",
            TurnWrite::CompleteOutbox { .. } => "complete outbox row",
            TurnWrite::FailOutbox { .. } => "record outbox failure",
            TurnWrite::MoveOutbox { .. } => "move outbox rows",
            TurnWrite::RecordQuarantine(_) => "record quarantine",
            TurnWrite::ClearQuarantine { .. } => "clear quarantine",
            TurnWrite::MarkBootstrapped { .. } => "mark bootstrapped",
            TurnWrite::SaveDocument { .. } => "save document",
            TurnWrite::SweepIdle(_) => "sweep idle state",
        }
    }

    /// Carries the write out with a store's [`StoreWrites`].
    pub(crate) fn apply(
        &self,
        store: &(impl StoreWrites + ?Sized),
    ) -> Result<WriteOutcome, StoreError> {
        let done = |r: Result<(), StoreError>| r.map(|()| WriteOutcome::Done);
        match self {
            TurnWrite::AcquireLease {
                session,
                holder,
                dead_holder,
                now_ms,
                ttl_ms,
                read,
            } => store.acquire_lease(
                session,
                holder,
                dead_holder.as_deref(),
                *now_ms,
                *ttl_ms,
                read.as_ref(),
            ),
            TurnWrite::ReleaseLease(lease) => done(store.release_lease(lease)),
            TurnWrite::RenewLease {
                lease,
                now_ms,
                ttl_ms,
            } => store
                .renew_lease(lease, *now_ms, *ttl_ms)
                .map(WriteOutcome::Applied),
            TurnWrite::RecordTurn {
                session_id,
                entries,
                binding_key,
                binding_json,
                lease_generation,
                commit,
            } => {
                let (id, key, json, generation) =
                    (session_id, binding_key, binding_json, *lease_generation);
                done(store.record_turn(id, entries, key, json, generation, commit.as_ref()))
            }
            TurnWrite::SaveBinding {
                binding_key,
                json,
                lease_generation,
            } => done(store.save_binding(binding_key, json, *lease_generation)),
            TurnWrite::DeleteBinding { binding_key } => done(store.delete_binding(binding_key)),
            TurnWrite::DeleteSession { session_id } => {
                store.delete_session(session_id).map(WriteOutcome::Count)
            }
            TurnWrite::AppendTranscript {
                session_id,
                entries,
            } => done(store.append_transcript(session_id, entries)),
            TurnWrite::ReplaceTranscriptEntries {
                session_id,
                replacements,
            } => done(store.replace_transcript_entries(session_id, replacements)),
            TurnWrite::EnqueueOutbox(row) => done(store.enqueue_outbox(row)),
            TurnWrite::CompleteOutbox {
                session_id,
                advancement_key,
            } => done(store.complete_outbox(session_id, advancement_key)),
            TurnWrite::FailOutbox {
                session_id,
                advancement_key,
                error,
            } => done(store.fail_outbox(session_id, advancement_key, error)),
            TurnWrite::MoveOutbox { from, to } => {
                store.move_outbox(from, to).map(WriteOutcome::Count)
            }
            TurnWrite::RecordQuarantine(record) => done(store.record_quarantine(record)),
            TurnWrite::ClearQuarantine { engine_id } => done(store.clear_quarantine(engine_id)),
            TurnWrite::MarkBootstrapped {
                session_id,
                engine_id,
            } => store
                .mark_bootstrapped(session_id, engine_id)
                .map(WriteOutcome::Applied),
            TurnWrite::SaveDocument {
                namespace,
                key,
                json,
            } => done(store.save_document(namespace, key, json)),
            TurnWrite::SweepIdle(request) => store.sweep_idle(request).map(WriteOutcome::Swept),
        }
    }
}

/// What a [`TurnWrite`] gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// A lease attempt's outcome.
    Lease(LeaseAttempt),
    /// A lease taken, with what its transaction read of the session (an
    /// [`TurnWrite::AcquireLease`] with a `read`).
    SessionLease(Lease, Box<SessionSnapshot>),
    /// The write is done.
    Done,
    /// Whether the write changed anything (a renewal, a new bootstrap mark).
    Applied(bool),
    /// How many rows the write moved or removed.
    Count(u64),
    /// What a sweep removed.
    Swept(SweepReport),
}

impl WriteOutcome {
    /// The lease attempt of an [`TurnWrite::AcquireLease`]; a store answering anything else to
    /// it is broken, and the attempt counts as busy (the caller waits and tries again).
    pub fn into_lease(self) -> LeaseAttempt {
        self.into_session_lease().0
    }

    /// The lease attempt of an [`TurnWrite::AcquireLease`], with what it read of the session
    /// when it was asked to and took the lease (as [`WriteOutcome::into_lease`] otherwise).
    pub fn into_session_lease(self) -> (LeaseAttempt, Option<SessionSnapshot>) {
        match self {
            WriteOutcome::Lease(attempt) => (attempt, None),
            WriteOutcome::SessionLease(lease, snapshot) => {
                (LeaseAttempt::Acquired(lease), Some(*snapshot))
            }
            _ => (
                LeaseAttempt::Busy {
                    holder: String::new(),
                    expires_at_ms: 0,
                },
                None,
            ),
        }
    }
}

/// How a store carries writes out, one operation each: what [`TurnWrite::apply`] calls. The
/// port does not expose these; they are the shipped stores' own.
pub(crate) trait StoreWrites {
    fn save_binding(
        &self,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError>;
    fn delete_binding(&self, binding_key: &str) -> Result<(), StoreError>;
    fn delete_session(&self, session_id: &str) -> Result<u64, StoreError>;
    /// A turn's entries and binding, and its durable commit when given: one fenced write.
    fn record_turn(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: Option<&OutboxRow>,
    ) -> Result<(), StoreError>;
    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError>;
    fn replace_transcript_entries(
        &self,
        session_id: &str,
        replacements: &[TranscriptEntry],
    ) -> Result<(), StoreError>;
    fn enqueue_outbox(&self, row: &OutboxRow) -> Result<(), StoreError>;
    fn complete_outbox(&self, session_id: &str, advancement_key: &str) -> Result<(), StoreError>;
    fn move_outbox(&self, from: &str, to: &str) -> Result<u64, StoreError>;
    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError>;
    fn record_quarantine(&self, record: &QuarantineRecord) -> Result<(), StoreError>;
    fn clear_quarantine(&self, engine_id: &str) -> Result<(), StoreError>;
    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError>;
    /// [`TurnWrite::AcquireLease`]: the attempt, and what it read of the session when `read`
    /// is given and the lease was taken ([`WriteOutcome::SessionLease`]).
    fn acquire_lease(
        &self,
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<&SessionRead>,
    ) -> Result<WriteOutcome, StoreError>;
    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;
    fn renew_lease(&self, lease: &Lease, now_ms: u64, ttl_ms: u64) -> Result<bool, StoreError>;
    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError>;
    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError>;
}
