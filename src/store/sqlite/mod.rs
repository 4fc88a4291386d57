//! The embedded SQLite state store (WAL mode).
//!
//! One writer connection and a small pool of reader connections: in WAL mode readers never
//! wait for the writer, so store reads of concurrent turns run on every core while writes
//! queue on the writer. A turn's writes ([`StateStore::write`]) go through a queue: the
//! submitting thread runs it unless another thread already does, and writes queued meanwhile
//! run as one transaction (group commit), each as if alone — no thread sleeps
//! waiting for the writer. That next batch is run by a task on the runtime of the turn that
//! waits longest for it, so the thread that ran a batch goes back to its own turns. Every write transaction takes SQLite's write lock up front
//! (`BEGIN IMMEDIATE`), so a busy database makes it wait up to the busy timeout instead of
//! failing at once when a read transaction would have to be upgraded. A file store's WAL is
//! checkpointed by a thread of its own ([`checkpointer`]), not under the write lock.
//! The in-memory store is a named database of SQLite's `memdb` VFS shared by the same
//! connections (there, readers and the writer exclude each other: `memdb` has no WAL).

mod checkpointer;
mod group_commit;
mod pool;
mod queries;
mod schema;
mod sweep;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot::error::TryRecvError;

use super::{
    OutboxRow, QuarantineRecord, StateStore, StoreError, StoreStats, StoredBinding,
    TranscriptCursor, TranscriptEntry, TranscriptRead, TurnWrite, WriteFuture, WriteMode,
};
use crate::util::lock;
use checkpointer::{Checkpointer, WriterLock, CHECKPOINT_IDLE};
use group_commit::{classify, Op, QueuedWrite};
use pool::{Target, READERS};
use queries::stats_of;

/// How long a statement waits for another process's write lock before failing as `Locked`.
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// SQLite-backed [`StateStore`]: one writer connection and [`READERS`] reader connections.
/// A handle: clones share the database, its connections and its write queue.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<StoreInner>,
}

impl std::ops::Deref for SqliteStore {
    type Target = StoreInner;

    fn deref(&self) -> &StoreInner {
        &self.inner
    }
}

/// Runs the write queue once, when asked or else when dropped: a submitted write whose
/// future is dropped before it ran the queue (a cancelled turn) is still written, as it was
/// submitted, and not left for the next submitter.
struct QueueRunner(Option<SqliteStore>);

impl QueueRunner {
    fn new(store: SqliteStore) -> Self {
        QueueRunner(Some(store))
    }

    fn run(&mut self) {
        if let Some(store) = self.0.take() {
            store.combine();
        }
    }

    /// The write has been run: nothing left to do, also on drop.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for QueueRunner {
    fn drop(&mut self) {
        self.run();
    }
}

/// What a [`SqliteStore`] handle shares.
pub struct StoreInner {
    path: PathBuf,
    /// Shared with the checkpointer, which holds it while it starts the WAL over.
    writer: WriterLock,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    busy_timeout: Duration,
    /// Nanoseconds the writer connection was held (what concurrent writes queue on).
    writer_held_nanos: AtomicU64,
    /// Nanoseconds reader connections were held, summed over the readers.
    readers_held_nanos: AtomicU64,
    /// Writes run from the queue, and the batches they ran in.
    queued_writes: AtomicU64,
    write_batches: AtomicU64,
    /// Turn writes waiting for the writer ([`StateStore::submit`]).
    queue: Mutex<Vec<QueuedWrite>>,
    /// The emptied vector of the last batch, swapped in for the queue by the next: a batch
    /// takes the queue's vector and leaves one that already has room, so the queue does not
    /// grow a new vector by doubling every batch (its writes are large; that is most of the
    /// fresh memory a turn takes, and another thread frees it).
    spare: Mutex<Vec<QueuedWrite>>,
    /// A thread is running the queued writes (the combiner).
    combining: AtomicBool,
    /// The background WAL checkpointer (file stores).
    checkpointer: Option<Checkpointer>,
    /// In-memory stores: readers share it, the writer holds it alone. `memdb` has no WAL, so
    /// a reader and the writer exclude each other anyway; SQLite's own exclusion makes the one
    /// that comes second sleep in the busy handler (1 ms and more, for writes of tens of µs),
    /// while this lock wakes it the moment the other is done.
    memory_lock: Option<RwLock<()>>,
}

/// How long a store's connections were held since it was opened, and how its queued writes
/// were grouped (see [`SqliteStore::held_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldTimes {
    /// The writer connection: every write, one at a time.
    pub writer: Duration,
    /// The reader connections, summed (readers run side by side on a file; in memory they
    /// exclude the writer).
    pub readers: Duration,
    /// Writes run from the write queue ([`StateStore::submit`], `submit_detached`).
    pub queued_writes: u64,
    /// The batches (one transaction each) they ran in.
    pub write_batches: u64,
}

impl HeldTimes {
    /// What was held and run between `earlier` and this reading.
    pub fn since(&self, earlier: &HeldTimes) -> HeldTimes {
        HeldTimes {
            writer: self.writer.saturating_sub(earlier.writer),
            readers: self.readers.saturating_sub(earlier.readers),
            queued_writes: self.queued_writes.saturating_sub(earlier.queued_writes),
            write_batches: self.write_batches.saturating_sub(earlier.write_batches),
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`. A file that is not a SQLite database,
    /// or fails its integrity check, is an error naming the file — never silently replaced.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with_timeout(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// As [`SqliteStore::open`] with a custom lock wait.
    pub fn open_with_timeout(
        path: impl AsRef<Path>,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                operation: "open",
                source,
            })?;
        }
        Self::open_target(path.clone(), Target::File(path), busy_timeout)
    }

    /// A private in-memory database (tests, benchmarks, the embedded demo).
    pub fn in_memory() -> Result<Self, StoreError> {
        let name = format!(
            "file:/ctxbridge-{}?vfs=memdb",
            uuid::Uuid::new_v4().simple()
        );
        Self::open_target(
            PathBuf::from(":memory:"),
            Target::Memory(name),
            DEFAULT_BUSY_TIMEOUT,
        )
    }

    fn open_target(
        path: PathBuf,
        target: Target,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let connect = |operation: &'static str| {
            let conn = target
                .connect()
                .map_err(|e| classify(&path, operation, e, busy_timeout))?;
            conn.busy_timeout(busy_timeout)
                .map_err(|e| classify(&path, operation, e, busy_timeout))?;
            Ok::<_, StoreError>(conn)
        };
        let writer = connect("open")?;
        let mut store = StoreInner {
            path: path.clone(),
            writer: Arc::new(Mutex::new(writer)),
            readers: Vec::new(),
            next_reader: AtomicUsize::new(0),
            writer_held_nanos: AtomicU64::new(0),
            readers_held_nanos: AtomicU64::new(0),
            queued_writes: AtomicU64::new(0),
            write_batches: AtomicU64::new(0),
            busy_timeout,
            queue: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            combining: AtomicBool::new(false),
            checkpointer: None,
            memory_lock: match target {
                Target::File(_) => None,
                Target::Memory(_) => Some(RwLock::new(())),
            },
        };
        store.init_retrying(&target)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let conn = connect("open a reader")?;
            conn.execute_batch("PRAGMA query_only=ON;")
                .map_err(|e| classify(&path, "open a reader", e, busy_timeout))?;
            readers.push(Mutex::new(conn));
        }
        let checkpointer = match target {
            Target::File(_) => {
                let name = path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                let conn = connect("open the checkpointer")?;
                let writer = store.writer.clone();
                let started = Checkpointer::start(conn, writer, &name, CHECKPOINT_IDLE).map_err(
                    |source| StoreError::Io {
                        path: path.clone(),
                        operation: "start the WAL checkpointer",
                        source,
                    },
                )?;
                Some(started)
            }
            // No WAL in memory: nothing to checkpoint.
            Target::Memory(_) => None,
        };
        store.readers = readers;
        store.checkpointer = checkpointer;
        Ok(SqliteStore {
            inner: Arc::new(store),
        })
    }

    /// How long the writer and the readers were held since the store was opened: the
    /// writer's share of a run's wall time is the part of the store's work that concurrent
    /// turns cannot overlap (wall time: a writer preempted by other work keeps the lock, so
    /// machine load inflates it too).
    pub fn held_times(&self) -> HeldTimes {
        HeldTimes {
            writer: Duration::from_nanos(self.writer_held_nanos.load(Ordering::Relaxed)),
            readers: Duration::from_nanos(self.readers_held_nanos.load(Ordering::Relaxed)),
            queued_writes: self.queued_writes.load(Ordering::Relaxed),
            write_batches: self.write_batches.load(Ordering::Relaxed),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shard count recorded in this database when it became shard 0 of a sharded store
    /// ([`super::ShardedSqliteStore`]); `None` for a database never sharded.
    pub fn recorded_shards(&self) -> Result<Option<usize>, StoreError> {
        self.with_conn("read the shard layout", |conn| {
            let exists: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'store_layout'",
                [],
                |r| r.get(0),
            )?;
            if exists == 0 {
                return Ok(None);
            }
            let shards: Option<i64> = conn
                .query_row(
                    "SELECT value FROM store_layout WHERE key = 'shards'",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(shards.map(|n| usize::try_from(n).unwrap_or(0)))
        })
    }

    /// Records `shards` as this database's shard layout unless one is recorded already, in one
    /// transaction; returns the layout recorded after the call (`shards`, or the earlier one).
    /// `may_record` decides, inside the transaction, whether the database may take the layout
    /// (it is refused when the database already holds an unsharded store's state).
    pub(crate) fn record_shards(
        &self,
        shards: usize,
        may_record: impl FnOnce(&StoreStats) -> bool,
    ) -> Result<Option<usize>, StoreError> {
        self.write_tx("record the shard layout", |tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS store_layout (key TEXT PRIMARY KEY, value INTEGER NOT NULL);",
            )?;
            let recorded: Option<i64> = tx
                .query_row(
                    "SELECT value FROM store_layout WHERE key = 'shards'",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(n) = recorded {
                return Ok((Some(usize::try_from(n).unwrap_or(0)), false));
            }
            let stats = stats_of(tx)?;
            if !may_record(&stats) {
                return Ok((None, false));
            }
            tx.execute(
                "INSERT INTO store_layout (key, value) VALUES ('shards', ?1)",
                params![i64::try_from(shards).unwrap_or(i64::MAX)],
            )?;
            Ok((Some(shards), true))
        })
    }
}

impl StateStore for SqliteStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError> {
        self.with_reader("load binding", |conn| {
            queries::load_binding(conn, binding_key)
        })
    }

    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let rows: Vec<(String, String)> = self.with_reader("load transcript", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT entry_id, message FROM transcript WHERE session_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![session_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })?;
        self.decode_entries(session_id, rows)
    }

    fn transcript_since(
        &self,
        session_id: &str,
        cursor: Option<TranscriptCursor>,
    ) -> Result<TranscriptRead, StoreError> {
        // One read transaction: the version, the rows and the last sequence number agree.
        let (version, appended, rows, next_seq) = self.with_reader("load transcript", |conn| {
            let tx = conn.transaction()?;
            let version = queries::transcript_version(&tx, session_id)?;
            let (mut appended, mut from) = match cursor {
                Some(c) if c.version == version => (true, c.next_seq as i64),
                _ => (false, 0),
            };
            // Entries the copy has are gone (a reset or a retention sweep removed them, and
            // numbering started again): the copy is stale.
            if appended {
                let end: i64 = tx
                    .prepare_cached(
                        "SELECT COALESCE(MAX(seq), -1) + 1 FROM transcript WHERE session_id = ?1",
                    )?
                    .query_row(params![session_id], |r| r.get(0))?;
                if end < from {
                    (appended, from) = (false, 0);
                }
            }
            let mut stmt = tx.prepare_cached(
                "SELECT seq, entry_id, message FROM transcript WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq",
            )?;
            let mut next_seq = from;
            let mut rows = Vec::new();
            let mut query = stmt.query(params![session_id, from])?;
            while let Some(r) = query.next()? {
                let seq: i64 = r.get(0)?;
                next_seq = seq + 1;
                rows.push((r.get(1)?, r.get(2)?));
            }
            drop(query);
            drop(stmt);
            tx.finish()?;
            Ok((version, appended, rows, next_seq as u64))
        })?;
        Ok(TranscriptRead {
            entries: self.decode_entries(session_id, rows)?,
            appended,
            cursor: Some(TranscriptCursor { version, next_seq }),
        })
    }
    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.with_reader("read outbox", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, advancement_key, engine_id, params, attempts, last_error
                 FROM outbox WHERE session_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![session_id], |r| {
                Ok(OutboxRow {
                    session_id: r.get(0)?,
                    advancement_key: r.get(1)?,
                    engine_id: r.get(2)?,
                    params_json: r.get(3)?,
                    attempts: r.get(4)?,
                    last_error: r.get(5)?,
                })
            })?;
            rows.collect()
        })
    }

    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.with_reader("read quarantines", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT engine_id, operation, reason, at_ms FROM quarantine ORDER BY engine_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)? as u64,
                ))
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?
        .into_iter()
        .map(|(engine_id, operation, reason, at_ms)| {
            QuarantineRecord::from_row(engine_id.clone(), &operation, reason, at_ms)
                .map_err(|message| self.record_error("read quarantines", &engine_id, message))
        })
        .collect()
    }

    fn is_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.with_reader("read bootstrap mark", |conn| {
            conn.prepare_cached(
                "SELECT count(*) FROM bootstrapped WHERE session_id = ?1 AND engine_id = ?2",
            )?
            .query_row(params![session_id, engine_id], |r| r.get::<_, i64>(0))
            .map(|n| n > 0)
        })
    }

    /// Turn writes (leases, recorded turns, the outbox) go through the write queue. `Grouped`:
    /// the returned future lets the other tasks that are ready run first, then, unless one of
    /// them ran this write already, runs the queue (or leaves it to the thread that already
    /// does) — turns that reach their writes in one round of the scheduler so share one
    /// transaction, also on a single worker thread, where running each write as it is
    /// submitted would commit one per turn. `Now`: the queue is run at once. A queued write
    /// whose caller stops waiting still runs. Other writes run at once on the writer.
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture {
        if !Op::is_queued(&write) {
            return Box::pin(std::future::ready(write.apply(self)));
        }
        let op = match self.prepare(write) {
            Ok(op) => op,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        lock(&self.queue).push(QueuedWrite::new(op, Some(reply), mode));
        let mut runner = QueueRunner::new(self.clone());
        if mode == WriteMode::Now {
            runner.run();
        }
        let path = self.path.clone();
        let abandoned = move || {
            Err(StoreError::Io {
                path,
                operation: "wait for a queued write",
                source: std::io::Error::other(
                    "the write was abandoned unanswered (the thread running it panicked)",
                ),
            })
        };
        Box::pin(async move {
            if mode == WriteMode::Grouped {
                tokio::task::yield_now().await;
                match answer.try_recv() {
                    // Run with the writes of the tasks that ran meanwhile.
                    Ok(result) => {
                        runner.disarm();
                        return result;
                    }
                    Err(TryRecvError::Empty) => runner.run(),
                    Err(TryRecvError::Closed) => {
                        runner.disarm();
                        return abandoned();
                    }
                }
            }
            answer.await.unwrap_or_else(|_| abandoned())
        })
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.with_reader("load document", |conn| {
            queries::load_document(conn, namespace, key)
        })
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.with_reader("count rows", |conn| stats_of(conn))
    }
}
