//! Durable state: thread bindings, the mirrored transcript per session, the durable-turn
//! outbox, quarantine records, session leases, engine bootstrap marks and the mock backend's
//! threads.
//!
//! [`StateStore`] is the port; [`SqliteStore`] (embedded, WAL) is the default implementation and
//! [`PostgresStore`] gives the same guarantees to instances on several machines. The methods
//! are synchronous: every statement is a short write or an indexed read, so the harness calls
//! them directly (the PostgreSQL store hands each call to its own worker thread).

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod ext;
mod postgres;
mod retention;
mod sharded;
mod sqlite;
mod writes;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::contract::AgentMessage;

pub use crate::quarantine::QuarantineRecord;
pub use ext::StateStoreExt;
pub use postgres::{redact_url, PostgresOptions, PostgresStore};
pub use retention::{
    idle_before_ms, sweep_once, RetentionSweeper, SweepListener, SWEEP_BATCH, SWEEP_INTERVAL,
};
pub use sharded::{shard_index, shard_path, ShardedSqliteStore, MAX_SHARDS};
pub use sqlite::{HeldTimes, SqliteStore};
pub(crate) use writes::StoreWrites;
pub use writes::{TurnWrite, WriteMode, WriteOutcome};

/// Errors of the state store. Each names the file and the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another process holds the write lock longer than the busy timeout.
    #[error("state store {path}: {operation}: database is locked by another process (waited {waited_ms} ms)")]
    Locked {
        path: PathBuf,
        operation: &'static str,
        waited_ms: u64,
    },
    /// The file is not a readable ctxbridge database; it is never overwritten.
    #[error("state store {path} is corrupt or not a ctxbridge database ({operation}): {message}; refusing to start over — move the file away to begin with a fresh state")]
    Corrupt {
        path: PathBuf,
        operation: &'static str,
        message: String,
    },
    /// The database engine failed (any SQLite failure but a lock or corruption; a PostgreSQL
    /// statement, transaction or URL; no PostgreSQL connection to be had). `store` names the
    /// database: its file, or its URL with the password redacted. `message` says what failed,
    /// with the source chain spelled out (PostgreSQL's own message names only the error kind);
    /// the driver's error is kept as the source, without its type in this API.
    #[error("state store {store}: {operation}: {message}")]
    Backend {
        store: String,
        operation: &'static str,
        message: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored JSON record does not decode.
    #[error("state store {path}: {operation}: stored record {key:?} is unreadable: {message}")]
    Record {
        path: PathBuf,
        operation: &'static str,
        key: String,
        message: String,
    },
    /// The store's directory cannot be created.
    #[error("state store {path}: {operation}: cannot create the directory: {source}")]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A write fenced off: the caller's lease generation is older than the store's.
    #[error("state store: {operation} for {key:?} rejected: lease generation {held} is stale (current {current})")]
    StaleGeneration {
        operation: &'static str,
        key: String,
        held: u64,
        current: u64,
    },
    /// A store answered a write with an outcome of another kind (a broken store).
    #[error(
        "state store: {operation}: the store answered {answer}, which this write does not take"
    )]
    UnexpectedAnswer {
        operation: &'static str,
        answer: String,
    },
    /// A sharded SQLite store opened with a layout other than its recorded one.
    #[error("state store {path}: cannot open with this shard layout: {message}")]
    ShardLayout { path: PathBuf, message: String },
    /// The schema version on disk is newer than this build understands.
    #[error(
        "state store {path} has schema version {found}, this build understands up to {supported}"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// A PostgreSQL call did not finish within its time bound.
    #[error("state store {url}: {operation}: no answer from PostgreSQL within {waited_ms} ms")]
    PostgresTimeout {
        url: String,
        operation: &'static str,
        waited_ms: u64,
    },
    /// The PostgreSQL store cannot run: its options are unusable or its worker thread is gone.
    #[error("state store {url}: {operation}: {message}")]
    PostgresSetup {
        url: String,
        operation: &'static str,
        message: String,
    },
    /// The PostgreSQL store's worker thread could not be started.
    #[error("state store {url}: cannot start the PostgreSQL worker thread: {source}")]
    PostgresWorker {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

/// One mirrored transcript entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptEntry {
    pub entry_id: String,
    pub message: AgentMessage,
}

/// A queued durable-turn commit (docs/architecture.md#durable-turns-committurn): the serialised `commitTurn` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRow {
    pub session_id: String,
    pub advancement_key: String,
    pub engine_id: String,
    /// The `commitTurn` params as JSON (without host callbacks).
    pub params_json: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// A session lease: who holds the session and with which fencing generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub session: String,
    pub holder: String,
    pub generation: u64,
    pub expires_at_ms: u64,
}

/// The first generation of a session lease taken where no lease row is left: 1 in a store
/// whose retention sweep never removed a lease, otherwise two above the highest generation the
/// sweep removed (`floor`). A holder from before the sweep saw a generation at most `floor`;
/// the reborn lease is neither that generation nor the one after it, so the holder neither
/// passes the fencing check nor takes the new holder's turns for its own continuation
/// (the harness trusts its cached binding only when a lease continues its last one by one).
pub(crate) fn reborn_generation(floor: Option<u64>) -> u64 {
    floor.map_or(1, |floor| floor.saturating_add(2))
}

/// Outcome of a lease attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAttempt {
    Acquired(Lease),
    /// Held by another holder until `expires_at_ms`.
    Busy {
        holder: String,
        expires_at_ms: u64,
    },
}

/// Where a reader's copy of a session transcript ends: the store's rewrite version of the
/// session and the sequence number the next appended entry gets. Entries are appended with
/// increasing sequence numbers and never deleted; a rewrite of existing entries bumps the
/// version, so a cursor whose version differs from the store's is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranscriptCursor {
    /// The session's rewrite version when the copy was read.
    pub version: u64,
    /// The sequence number after the copy's last entry.
    pub next_seq: u64,
}

/// What [`StateStore::transcript_since`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptRead {
    /// The entries read: only those after the given cursor when `appended`, else all of them.
    pub entries: Vec<TranscriptEntry>,
    /// `entries` continue the caller's copy (its cursor was current); otherwise they replace it.
    pub appended: bool,
    /// Where this read ends; `None` when the store cannot read incrementally (the caller then
    /// reads the whole transcript every time).
    pub cursor: Option<TranscriptCursor>,
}

/// What a lease acquisition reads of its session in its own transaction, when asked
/// ([`TurnWrite::AcquireLease`]'s `read`): the reads a holder makes first, answered with the
/// lease instead of after it (no read waits for the writer, and on SQLite no read transaction
/// of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRead {
    /// The session key: the key of its session-id document, and the session id when there is
    /// no such document.
    pub session_key: String,
    /// The document namespace mapping session keys to session ids.
    pub id_namespace: String,
}

/// What a lease acquisition read of its session ([`SessionRead`]), as it was when the lease
/// was taken: it stays true while the lease is held, as nobody else writes the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSnapshot {
    /// The session id: the session-id document, or the session key without one.
    pub session_id: String,
    /// The session's outbox holds no queued commit.
    pub outbox_empty: bool,
    /// Every engine whose bootstrap of the session is marked done, sorted.
    pub bootstrapped: Vec<String>,
    /// The binding stored under the lease's key.
    pub binding: Option<StoredBinding>,
    /// The session's transcript holds no entry.
    pub transcript_empty: bool,
    /// For an empty transcript, the cursor [`StateStore::transcript_since`] hands out for it
    /// (`None` when the transcript has entries, or the store hands out no cursors). A long
    /// transcript is not read inside the lease's write: it would hold the writer.
    pub empty_transcript_cursor: Option<TranscriptCursor>,
}

/// A stored thread binding, as raw JSON plus its fencing generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBinding {
    pub binding_key: String,
    pub json: String,
    pub generation: u64,
}

/// What one retention sweep removes ([`StateStore::sweep_idle`]).
///
/// The store keeps a last-activity time (its own clock, milliseconds since the Unix epoch) per
/// session id (transcript, bootstrap marks, outbox), per binding key (binding and lease) and per
/// document, refreshed by every write to them. A sweep removes what has been idle since before
/// `idle_before_ms`; a session with an undelivered commit in the outbox is never swept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepRequest {
    /// Keys whose last activity is older than this instant (ms since the Unix epoch) are idle.
    pub idle_before_ms: u64,
    /// Most idle keys removed by one call (a bounded batch; call again for more).
    pub limit: usize,
    /// Document namespaces swept by their documents' own last write (for example the mock
    /// backend's threads). Documents of other namespaces are never swept.
    pub document_namespaces: Vec<String>,
}

/// What a retention sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Idle keys handled (session ids, binding keys and documents); a batch that handled
    /// fewer than its limit found nothing more to sweep.
    pub keys: u64,
    /// Idle session ids whose transcript and bootstrap marks were removed.
    pub sessions: u64,
    /// Transcript entries removed.
    pub transcript_entries: u64,
    /// Bootstrap marks removed.
    pub bootstrap_marks: u64,
    /// Thread bindings removed (with their expired leases).
    pub bindings: u64,
    /// Expired leases removed.
    pub leases: u64,
    /// Documents removed.
    pub documents: u64,
    /// The swept session ids, each with the transcript entries it had (for `session_end`).
    pub swept_sessions: Vec<SweptSession>,
}

/// One session a retention sweep removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweptSession {
    /// The session id.
    pub session_id: String,
    /// The transcript entries it had.
    pub transcript_entries: u64,
}

impl SweepReport {
    /// Adds another batch's counts.
    pub fn add(&mut self, other: &SweepReport) {
        self.keys += other.keys;
        self.sessions += other.sessions;
        self.transcript_entries += other.transcript_entries;
        self.bootstrap_marks += other.bootstrap_marks;
        self.bindings += other.bindings;
        self.leases += other.leases;
        self.documents += other.documents;
        self.swept_sessions
            .extend(other.swept_sessions.iter().cloned());
    }
}

/// The activity scopes a sweep looks at: sessions (`s`), binding keys (`b`) and the requested
/// document namespaces (`d:<namespace>`).
fn sweep_scopes(document_namespaces: &[String]) -> Vec<String> {
    let mut scopes = vec!["s".to_string(), "b".to_string()];
    scopes.extend(document_namespaces.iter().map(|ns| format!("d:{ns}")));
    scopes
}

/// Row counts of a store, for `doctor` ([`StateStore::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreStats {
    /// Session ids with stored state (transcript, bootstrap marks or outbox rows).
    pub sessions: u64,
    /// Thread bindings.
    pub bindings: u64,
    /// Transcript entries over all sessions.
    pub transcript_entries: u64,
    /// Queued (undelivered) durable-turn commits.
    pub outbox_pending: u64,
    /// Keyed documents (mock threads, serve thread map, session successors, notes).
    pub documents: u64,
    /// Last activity of the longest-idle session or binding (ms since the Unix epoch).
    pub oldest_session_ms: Option<u64>,
}

/// The answer to a [`StateStore::write`]: ready at once, or when the queued write is done.
pub type WriteFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<WriteOutcome, StoreError>> + Send>>;

/// The durable state behind the harness.
pub trait StateStore: Send + Sync {
    /// The file (or URL) for messages.
    fn location(&self) -> String;

    /// The store holding the state of session key `session_key` — its lease, binding,
    /// transcripts, outbox, bootstrap marks and session-id document — when this store is split
    /// by session ([`ShardedSqliteStore`]); `None` when this store holds it itself. A caller
    /// working on one session makes all of that session's calls on the store this names.
    fn session_shard(&self, session_key: &str) -> Option<std::sync::Arc<dyn StateStore>> {
        let _ = session_key;
        None
    }

    // --- reads
    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError>;
    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError>;
    /// The entries appended after `cursor` (when it is still current), or the whole
    /// transcript. The default reads the whole transcript and hands out no cursor.
    fn transcript_since(
        &self,
        session_id: &str,
        cursor: Option<TranscriptCursor>,
    ) -> Result<TranscriptRead, StoreError> {
        let _ = cursor;
        Ok(TranscriptRead {
            entries: self.load_transcript(session_id)?,
            appended: false,
            cursor: None,
        })
    }
    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError>;
    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError>;
    /// Whether an engine's first encounter of a session (its bootstrap) is marked done.
    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError>;
    /// Generic keyed documents (the mock backend's threads, session ids, serve's maps).
    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError>;
    /// Row counts and the oldest session's last activity.
    fn stats(&self) -> Result<StoreStats, StoreError>;

    // --- the one write path
    /// Carries out a write. `Grouped` (the turn path) lets a store whose writes go one at a
    /// time through one writer queue it and run it with other turns' queued writes in one
    /// transaction (each its own savepoint, so one write's failure or fencing leaves the others
    /// as they would be alone); writes run in the order they were submitted. `Now` runs it
    /// without waiting for other tasks, answerable without the caller's runtime. Callers use
    /// the named conveniences of [`StateStoreExt`].
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture;
}

/// Which store to open: what the config's `store` section selects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreTarget {
    /// The embedded SQLite file (`store: {path}`, the default).
    Sqlite(PathBuf),
    /// The embedded SQLite store split by session over `shards` files (`store: {path,
    /// shards}`, 2 or more; see [`ShardedSqliteStore`]).
    ShardedSqlite { path: PathBuf, shards: usize },
    /// A PostgreSQL database (`store: {kind: "postgres", url}`).
    Postgres {
        url: String,
        options: PostgresOptions,
    },
}

/// Decodes a session's stored transcript rows (`entry_id`, message JSON), in order; a row that
/// does not decode becomes the store's record error (`record_error(key, message)`, key
/// `session/entry`).
fn decode_transcript_rows(
    session_id: &str,
    rows: Vec<(String, String)>,
    record_error: impl Fn(&str, String) -> StoreError,
) -> Result<Vec<TranscriptEntry>, StoreError> {
    rows.into_iter()
        .map(|(entry_id, json)| {
            let message = serde_json::from_str(&json)
                .map_err(|e| record_error(&format!("{session_id}/{entry_id}"), e.to_string()))?;
            Ok(TranscriptEntry { entry_id, message })
        })
        .collect()
}

/// Opens the selected store (for a PostgreSQL one: connects and applies pending migrations).
pub fn open_store(target: &StoreTarget) -> Result<std::sync::Arc<dyn StateStore>, StoreError> {
    Ok(match target {
        StoreTarget::Sqlite(path) => {
            let store = SqliteStore::open(path)?;
            sharded::check_unsharded(&store)?;
            std::sync::Arc::new(store)
        }
        StoreTarget::ShardedSqlite { path, shards } => {
            std::sync::Arc::new(ShardedSqliteStore::open(path, *shards)?)
        }
        StoreTarget::Postgres { url, options } => {
            std::sync::Arc::new(PostgresStore::connect(url, options.clone())?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::reborn_generation;

    /// A lease row taken where none is left starts at 1 until a sweep removed a lease, then two
    /// above the highest generation removed (saturating at the top of the range).
    #[test]
    fn reborn_generations_skip_the_one_after_the_floor() {
        assert_eq!(reborn_generation(None), 1);
        assert_eq!(reborn_generation(Some(1)), 3);
        assert_eq!(reborn_generation(Some(41)), 43);
        assert_eq!(reborn_generation(Some(u64::MAX - 1)), u64::MAX);
        assert_eq!(reborn_generation(Some(u64::MAX)), u64::MAX);
    }
}
