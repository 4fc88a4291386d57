//! The embedded SQLite state store (WAL mode).
//!
//! One writer connection and a small pool of reader connections: in WAL mode readers never
//! wait for the writer, so store reads of concurrent turns run on every core while writes
//! queue on the writer. A turn's writes ([`StateStore::submit`]) go through a queue: the
//! submitting thread runs it unless another thread already does, and writes queued meanwhile
//! run as one transaction (group commit), each in a savepoint of its own — no thread sleeps
//! waiting for the writer. Every write transaction takes SQLite's write lock up front
//! (`BEGIN IMMEDIATE`), so a busy database makes it wait up to the busy timeout instead of
//! failing at once when a read transaction would have to be upgraded. A file store's WAL is
//! checkpointed by a thread of its own ([`super::checkpointer`]), not under the write lock.
//! The in-memory store is a named database of SQLite's `memdb` VFS shared by the same
//! connections (there, readers and the writer exclude each other: `memdb` has no WAL).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use super::checkpointer::{Checkpointer, CHECKPOINT_IDLE, WRITER_AUTOCHECKPOINT_PAGES};
use super::{
    decode_transcript_rows, reborn_generation, sweep_scopes, Lease, LeaseAttempt, OutboxRow,
    QuarantineRecord, StateStore, StoreError, StoreStats, StoredBinding, SweepReport, SweepRequest,
    SweptSession, TranscriptCursor, TranscriptEntry, TranscriptRead, TurnWrite, WriteFuture,
    WriteOutcome,
};

/// The schema this build writes (2: per-session transcript rewrite versions; 3: the lease
/// generation floor, which a build that does not honour it must not write past).
const SCHEMA_VERSION: i64 = 3;

/// How long a statement waits for another process's write lock before failing as `Locked`.
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections per store.
const READERS: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bindings (
    binding_key TEXT PRIMARY KEY,
    json TEXT NOT NULL,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS transcript (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry_id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, entry_id)
);
CREATE TABLE IF NOT EXISTS transcript_versions (
    session_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    session_id TEXT NOT NULL,
    advancement_key TEXT NOT NULL,
    engine_id TEXT NOT NULL,
    params TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    seq INTEGER NOT NULL,
    PRIMARY KEY (session_id, advancement_key)
);
CREATE TABLE IF NOT EXISTS quarantine (
    engine_id TEXT PRIMARY KEY,
    operation TEXT NOT NULL,
    reason TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bootstrapped (
    session_id TEXT NOT NULL,
    engine_id TEXT NOT NULL,
    PRIMARY KEY (session_id, engine_id)
);
CREATE TABLE IF NOT EXISTS leases (
    session TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    generation INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lease_floor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);
";

/// The tables of the schema (a database holding others is not ours).
const TABLES: &str = "('bindings','transcript','transcript_versions','outbox','quarantine','bootstrapped','leases','lease_floor','documents','activity','store_layout')";

/// How the connections of one store reach its database.
#[derive(Debug, Clone)]
enum Target {
    /// A file on disk.
    File(PathBuf),
    /// A named in-memory database shared by this store's connections.
    Memory(String),
}

impl Target {
    fn connect(&self) -> rusqlite::Result<Connection> {
        match self {
            Target::File(path) => Connection::open(path),
            Target::Memory(uri) => Connection::open_with_flags(
                uri,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            ),
        }
    }
}

/// Last activity per session id (`s`), binding key (`b`) and document (`d:<namespace>`), the
/// retention sweep's clock. Every write path dates its key with [`touch`], once per key and
/// transaction, in the transaction of the write. Additive: a database from an earlier build
/// gets the table, and its existing keys are dated to the upgrade (see
/// [`SqliteStore::ensure_activity`]).
const ACTIVITY_TABLE: &str = "
CREATE TABLE IF NOT EXISTS activity (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    last_active_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
";

/// The triggers earlier builds kept the activity table with (one upsert per written row, and
/// on the lease release too); dropped on open, as every write path now dates its key itself.
const OLD_ACTIVITY_TRIGGERS: &[&str] = &[
    "activity_transcript_insert",
    "activity_transcript_update",
    "activity_bootstrapped_insert",
    "activity_outbox_insert",
    "activity_outbox_delete",
    "activity_bindings_insert",
    "activity_bindings_update",
    "activity_leases_insert",
    "activity_leases_update",
    "activity_documents_insert",
    "activity_documents_update",
];

/// The database's clock in milliseconds since the Unix epoch, as SQL.
macro_rules! sql_now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

/// The database's clock in milliseconds since the Unix epoch (substituted for `NOW_MS`).
const SQL_NOW_MS: &str = sql_now_ms!();

/// Dates a key of a scope to now (see [`touch`]).
const TOUCH: &str = concat!(
    "INSERT INTO activity (scope, key, last_active_ms) VALUES (?1, ?2, ",
    sql_now_ms!(),
    ") ON CONFLICT(scope, key) DO UPDATE SET last_active_ms = excluded.last_active_ms"
);

/// Activity scope of session ids (transcript, bootstrap marks, outbox).
const SESSION_SCOPE: &str = "s";
/// Activity scope of binding keys (binding and lease).
const BINDING_SCOPE: &str = "b";

/// Dates `key` of `scope` to the database clock (inside the caller's transaction).
fn touch(conn: &Connection, scope: &str, key: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(TOUCH)?
        .execute(params![scope, key])
        .map(|_| ())
}

/// Dates the keys of a database from an earlier build (no activity table yet) to now.
const ACTIVITY_BACKFILL: &str = "
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 's', session_id, NOW_MS FROM transcript GROUP BY session_id;
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 's', session_id, NOW_MS FROM bootstrapped GROUP BY session_id;
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 's', session_id, NOW_MS FROM outbox GROUP BY session_id;
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 'b', binding_key, NOW_MS FROM bindings;
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 'b', session, NOW_MS FROM leases;
INSERT OR IGNORE INTO activity (scope, key, last_active_ms)
    SELECT 'd:' || namespace, key, NOW_MS FROM documents;
";

/// SQLite-backed [`StateStore`]: one writer connection and [`READERS`] reader connections.
pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    busy_timeout: Duration,
    /// Nanoseconds the writer connection was held (what concurrent writes queue on).
    writer_held_nanos: AtomicU64,
    /// Nanoseconds reader connections were held, summed over the readers.
    readers_held_nanos: AtomicU64,
    /// Turn writes waiting for the writer ([`StateStore::submit`]).
    queue: Mutex<Vec<QueuedWrite>>,
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

/// How long a store's connections were held since it was opened (see
/// [`SqliteStore::held_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldTimes {
    /// The writer connection: every write, one at a time.
    pub writer: Duration,
    /// The reader connections, summed (readers run side by side on a file; in memory they
    /// exclude the writer).
    pub readers: Duration,
}

fn add_elapsed(total: &AtomicU64, since: Instant) {
    let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    total.fetch_add(nanos, Ordering::Relaxed);
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

/// Locks a connection; a poisoned lock only means another thread panicked mid-statement, and
/// SQLite's own transaction rollback keeps the database consistent, so it stays usable.
fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(|p| p.into_inner())
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
        let store = SqliteStore {
            path: path.clone(),
            writer: Mutex::new(writer),
            readers: Vec::new(),
            next_reader: AtomicUsize::new(0),
            writer_held_nanos: AtomicU64::new(0),
            readers_held_nanos: AtomicU64::new(0),
            busy_timeout,
            queue: Mutex::new(Vec::new()),
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
                let started =
                    Checkpointer::start(conn, &name, CHECKPOINT_IDLE).map_err(|source| {
                        StoreError::Io {
                            path: path.clone(),
                            operation: "start the WAL checkpointer",
                            source,
                        }
                    })?;
                Some(started)
            }
            // No WAL in memory: nothing to checkpoint.
            Target::Memory(_) => None,
        };
        Ok(SqliteStore {
            readers,
            checkpointer,
            ..store
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

    /// [`SqliteStore::init`], again while another process holds a lock SQLite does not wait
    /// for (switching a fresh file to WAL), up to the busy timeout.
    fn init_retrying(&self, target: &Target) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match self.init(target) {
                Err(StoreError::Locked { .. }) if started.elapsed() < self.busy_timeout => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn init(&self, target: &Target) -> Result<(), StoreError> {
        self.with_conn("open", |conn| {
            if matches!(target, Target::File(_)) {
                // `journal_mode` returns a row; read it rather than execute it.
                let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
                conn.execute_batch(&format!(
                    "PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint={WRITER_AUTOCHECKPOINT_PAGES};"
                ))?;
            }
            conn.execute_batch("PRAGMA foreign_keys=ON;")?;
            let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
            if check != "ok" {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                    Some(format!("integrity check failed: {check}")),
                ));
            }
            Ok(())
        })?;
        // Version check and schema creation in one write transaction: processes opening a
        // fresh file at once queue on its lock instead of racing.
        enum Outcome {
            Ready,
            TooNew(i64),
            Foreign(i64),
        }
        let outcome = self.with_conn("create schema", |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if version > SCHEMA_VERSION {
                return Ok(Outcome::TooNew(version));
            }
            if version == 0 {
                // A database with foreign tables and no version is not ours: refuse it.
                let foreign: i64 = tx.query_row(
                    &format!(
                        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT IN {TABLES}"
                    ),
                    [],
                    |r| r.get(0),
                )?;
                if foreign > 0 {
                    return Ok(Outcome::Foreign(foreign));
                }
            }
            if version < SCHEMA_VERSION {
                tx.execute_batch(SCHEMA)?;
                tx.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION}"))?;
            }
            tx.commit()?;
            Ok(Outcome::Ready)
        })?;
        match outcome {
            Outcome::Ready => self.ensure_activity(),
            Outcome::TooNew(found) => Err(StoreError::SchemaTooNew {
                path: self.path.clone(),
                found,
                supported: SCHEMA_VERSION,
            }),
            Outcome::Foreign(foreign) => Err(StoreError::Corrupt {
                path: self.path.clone(),
                operation: "open",
                message: format!("{foreign} unexpected table(s) and no ctxbridge schema version"),
            }),
        }
    }

    /// Creates the activity table (the retention sweep's clock) and drops the triggers earlier
    /// builds kept it with; when the table is new, dates every existing key to now, in the same
    /// transaction.
    fn ensure_activity(&self) -> Result<(), StoreError> {
        self.with_conn("create activity schema", |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let existed: i64 = tx.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'activity'",
                [],
                |r| r.get(0),
            )?;
            tx.execute_batch(ACTIVITY_TABLE)?;
            // Earlier builds indexed the activity time; see `sweep_idle`.
            tx.execute_batch("DROP INDEX IF EXISTS activity_idle;")?;
            for name in OLD_ACTIVITY_TRIGGERS {
                tx.execute_batch(&format!("DROP TRIGGER IF EXISTS {name};"))?;
            }
            if existed == 0 {
                tx.execute_batch(&ACTIVITY_BACKFILL.replace("NOW_MS", SQL_NOW_MS))?;
            }
            tx.commit()
        })
    }

    /// Runs `f` on the writer connection.
    fn with_conn<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.writer);
        // A poisoned lock guards no data: the panic left nothing half-done behind it.
        let _exclusive = self
            .memory_lock
            .as_ref()
            .map(|l| l.write().unwrap_or_else(|p| p.into_inner()));
        let held = Instant::now();
        let result =
            f(&mut conn).map_err(|e| classify(&self.path, operation, e, self.busy_timeout));
        add_elapsed(&self.writer_held_nanos, held);
        drop(conn);
        // Counts reads on the writer too (a few, rare): the checkpointer only runs sooner.
        if result.is_ok() {
            self.committed();
        }
        result
    }

    /// Runs `f` (reads only) on a reader connection: a free one if any, else the next in turn.
    fn with_reader<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        if self.readers.is_empty() {
            return self.with_conn(operation, f);
        }
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        let free = (0..n).find_map(|i| match self.readers[(start + i) % n].try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        });
        let mut conn = match free {
            Some(guard) => guard,
            None => lock(&self.readers[start % n]),
        };
        let _shared = self
            .memory_lock
            .as_ref()
            .map(|l| l.read().unwrap_or_else(|p| p.into_inner()));
        let held = Instant::now();
        let result =
            f(&mut conn).map_err(|e| classify(&self.path, operation, e, self.busy_timeout));
        add_elapsed(&self.readers_held_nanos, held);
        result
    }

    /// Runs `f` in a write transaction that holds the write lock from its start.
    fn write_tx<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<(T, bool)>,
    ) -> Result<T, StoreError> {
        self.with_conn(operation, |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let (value, commit) = f(&tx)?;
            if commit {
                tx.commit()?;
            }
            Ok(value)
        })
    }

    /// Counts a commit for the checkpointer.
    fn committed(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.committed();
        }
    }

    /// `record_turn`, queueing `commit` too when given: one fenced transaction.
    fn record_turn_fenced(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: Option<&OutboxRow>,
    ) -> Result<(), StoreError> {
        let op = Op {
            encoded: self.encode_entries("record turn", entries)?,
            write: TurnWrite::RecordTurn {
                session_id: session_id.to_owned(),
                // Encoded above; the writer needs only their JSON.
                entries: Vec::new(),
                binding_key: binding_key.to_owned(),
                binding_json: binding_json.to_owned(),
                lease_generation,
                commit: commit.cloned(),
            },
        };
        self.run_now(&op).map(|_| ())
    }

    /// Runs one turn write in a transaction of its own, at once.
    fn run_now(&self, op: &Op) -> Result<WriteOutcome, StoreError> {
        let applied = self.write_tx(op.operation(), |tx| op.run(tx))?;
        op.finish(applied)
    }

    /// Turns a submitted write into what the writer runs (encoding transcript entries here,
    /// on the submitting thread, not under the writer).
    fn prepare(&self, mut write: TurnWrite) -> Result<Op, StoreError> {
        let encoded = match &mut write {
            TurnWrite::RecordTurn { entries, .. } => {
                self.encode_entries("record turn", &std::mem::take(entries))?
            }
            _ => Vec::new(),
        };
        Ok(Op { write, encoded })
    }

    /// Queues a write and, unless another thread is running the queue, runs it (with whatever
    /// else is queued) on this thread.
    fn enqueue(&self, op: Op, reply: Option<tokio::sync::oneshot::Sender<WriteResult>>) {
        lock_queue(&self.queue).push(QueuedWrite { op, reply });
        self.combine();
    }

    /// Runs the queued writes until the queue is empty, unless another thread already does.
    /// A submitter that finds the queue being run leaves its write there and goes on; the
    /// running thread picks it up in its next batch. After giving up the role, the queue is
    /// looked at once more: a write queued just before then would otherwise wait for the
    /// next submitter.
    fn combine(&self) {
        loop {
            if self
                .combining
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                return;
            }
            // Given up on the way out, also if a batch panics (its writes' submitters then get
            // an error instead of an answer), so the queue never stays claimed.
            let role = CombinerRole(&self.combining);
            loop {
                let batch = std::mem::take(&mut *lock_queue(&self.queue));
                if batch.is_empty() {
                    break;
                }
                self.run_batch(batch);
            }
            drop(role);
            if lock_queue(&self.queue).is_empty() {
                return;
            }
        }
    }

    /// Runs a batch of queued writes in one transaction, each in a savepoint of its own, and
    /// answers each. When the transaction itself fails (it cannot begin or commit), each write
    /// runs again alone, so each gets its own answer.
    fn run_batch(&self, batch: Vec<QueuedWrite>) {
        let mut orphans = Vec::new();
        self.answer_batch(batch, &mut orphans);
        // Leases acquired for cancelled turns: released by the queue's next batch.
        if !orphans.is_empty() {
            tracing::debug!(
                leases = orphans.len(),
                "releasing leases acquired for cancelled turns"
            );
            lock_queue(&self.queue).extend(orphans.into_iter().map(|lease| QueuedWrite {
                op: TurnWrite::ReleaseLease(lease).into(),
                reply: None,
            }));
        }
    }

    /// Runs a batch (see [`SqliteStore::run_batch`]), answering each write; leases nobody
    /// waits for any more go to `orphans`.
    fn answer_batch(&self, batch: Vec<QueuedWrite>, orphans: &mut Vec<Lease>) {
        if batch.len() == 1 {
            for queued in batch {
                let result = self.run_now(&queued.op);
                orphans.extend(queued.answer_with(result));
            }
            return;
        }
        let results = self.with_conn("run queued writes", |conn| {
            let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut results = Vec::with_capacity(batch.len());
            for queued in &batch {
                let savepoint = tx.savepoint()?;
                match queued.op.run(&savepoint) {
                    Ok((applied, true)) => {
                        savepoint.commit()?;
                        results.push(Ok(applied));
                    }
                    // Dropping a savepoint rolls it back.
                    Ok((applied, false)) => results.push(Ok(applied)),
                    Err(e) => results.push(Err(e)),
                }
            }
            tx.commit()?;
            Ok(results)
        });
        match results {
            Ok(results) => {
                for (queued, result) in batch.into_iter().zip(results) {
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
                for queued in batch {
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
                for queued in batch {
                    let result = self.run_now(&queued.op);
                    orphans.extend(queued.answer_with(result));
                }
            }
        }
    }

    fn decode_entries(
        &self,
        session_id: &str,
        rows: Vec<(String, String)>,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        decode_transcript_rows(session_id, rows, |key, message| {
            self.record_error("load transcript", key, message)
        })
    }

    fn encode_entries(
        &self,
        operation: &'static str,
        entries: &[TranscriptEntry],
    ) -> Result<Vec<(String, String)>, StoreError> {
        entries
            .iter()
            .map(|e| {
                serde_json::to_string(&e.message)
                    .map(|json| (e.entry_id.clone(), json))
                    .map_err(|err| self.record_error(operation, &e.entry_id, err.to_string()))
            })
            .collect()
    }

    fn record_error(&self, operation: &'static str, key: &str, message: String) -> StoreError {
        StoreError::Record {
            path: self.path.clone(),
            operation,
            key: key.to_string(),
            message,
        }
    }
}

/// What a queued write is answered with.
type WriteResult = Result<WriteOutcome, StoreError>;

/// A write waiting in the queue, and where its answer goes (nowhere for a detached write).
struct QueuedWrite {
    op: Op,
    reply: Option<tokio::sync::oneshot::Sender<WriteResult>>,
}

impl QueuedWrite {
    /// Hands the write its answer. A lease acquired for a submitter that stopped waiting (its
    /// turn was cancelled) is returned, to be released: nobody holds it. (A turn cancelled
    /// after the answer was sent and before it read it leaves its lease to expire, as a
    /// crashed holder's.)
    #[must_use]
    fn answer_with(self, result: WriteResult) -> Option<Lease> {
        match self.reply {
            Some(reply) => match reply.send(result) {
                Ok(()) => None,
                Err(Ok(WriteOutcome::Lease(LeaseAttempt::Acquired(lease)))) => Some(lease),
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

/// Locks the write queue (it only holds owned writes; a panic elsewhere cannot corrupt it).
fn lock_queue(queue: &Mutex<Vec<QueuedWrite>>) -> MutexGuard<'_, Vec<QueuedWrite>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

/// A turn write as the writer runs it: a [`TurnWrite`] whose transcript entries were taken
/// out and encoded.
struct Op {
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
enum Applied {
    Outcome(WriteOutcome),
    Fenced(u64),
}

impl Op {
    fn operation(&self) -> &'static str {
        self.write.operation()
    }

    /// Runs the write inside the caller's transaction or savepoint; true when it is to be
    /// kept (a fenced write and a refused lease are rolled back).
    fn run(&self, conn: &Connection) -> rusqlite::Result<(Applied, bool)> {
        let done = Applied::Outcome(WriteOutcome::Done);
        match &self.write {
            TurnWrite::AcquireLease {
                session,
                holder,
                dead_holder,
                now_ms,
                ttl_ms,
            } => acquire_lease(
                conn,
                session,
                holder,
                dead_holder.as_deref(),
                *now_ms,
                *ttl_ms,
            )
            .map(|(attempt, keep)| (Applied::Outcome(WriteOutcome::Lease(attempt)), keep)),
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

fn classify(
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
        _ => StoreError::Sqlite {
            path: path.to_path_buf(),
            operation,
            source: e,
        },
    }
}

/// Appends encoded transcript entries after the session's last one (inside the caller's
/// transaction).
fn insert_entries(
    conn: &Connection,
    session_id: &str,
    encoded: &[(String, String)],
) -> rusqlite::Result<()> {
    let next: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), -1) + 1 FROM transcript WHERE session_id = ?1")?
        .query_row(params![session_id], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO transcript (session_id, seq, entry_id, message) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (i, (entry_id, json)) in encoded.iter().enumerate() {
        stmt.execute(params![session_id, next + i as i64, entry_id, json])?;
    }
    if !encoded.is_empty() {
        touch(conn, SESSION_SCOPE, session_id)?;
    }
    Ok(())
}

/// Queues an outbox row (a duplicate advancement key keeps the queued row).
fn insert_outbox(conn: &Connection, row: &OutboxRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO outbox (session_id, advancement_key, engine_id, params, attempts, last_error, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox))
         ON CONFLICT(session_id, advancement_key) DO NOTHING",
    )?
    .execute(params![
        row.session_id,
        row.advancement_key,
        row.engine_id,
        row.params_json,
        row.attempts,
        row.last_error
    ])?;
    touch(conn, SESSION_SCOPE, &row.session_id)
}

/// Writes a binding unless a newer lease generation fences the writer; returns that newer
/// generation when fenced (inside the caller's transaction, which must then not commit).
fn upsert_binding(
    conn: &Connection,
    binding_key: &str,
    json: &str,
    lease_generation: u64,
) -> rusqlite::Result<Option<u64>> {
    let current: Option<i64> = conn
        .prepare_cached("SELECT generation FROM leases WHERE session = ?1")?
        .query_row(params![binding_key], |r| r.get(0))
        .optional()?;
    if let Some(current) = current.filter(|c| (*c as u64) > lease_generation) {
        return Ok(Some(current as u64));
    }
    if current.is_none() && lease_generation > 0 {
        // Leased once, and the lease has since been swept: the writer's generation is not
        // above the floor the sweep left, so the writer is a holder from before the sweep.
        if let Some(floor) = lease_floor(conn)?.filter(|floor| *floor >= lease_generation) {
            return Ok(Some(floor));
        }
    }
    conn.prepare_cached(
        "INSERT INTO bindings (binding_key, json, generation) VALUES (?1, ?2, ?3)
         ON CONFLICT(binding_key) DO UPDATE SET json = excluded.json, generation = excluded.generation",
    )?
    .execute(params![binding_key, json, lease_generation as i64])?;
    touch(conn, BINDING_SCOPE, binding_key)?;
    Ok(None)
}

/// The highest generation of any lease the retention sweep removed, if it removed one.
fn lease_floor(conn: &Connection) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached("SELECT generation FROM lease_floor WHERE id = 1")?
        .query_row([], |r| r.get::<_, i64>(0))
        .optional()
        .map(|floor| floor.map(|f| f.max(0) as u64))
}

/// Takes the session's lease for `holder` when it is free, expired, already `holder`'s, or
/// held by `dead_holder`; the new generation is one above the last (inside the caller's
/// write transaction, which commits only when the lease was taken).
fn acquire_lease(
    tx: &Connection,
    session: &str,
    holder: &str,
    dead_holder: Option<&str>,
    now_ms: u64,
    ttl_ms: u64,
) -> rusqlite::Result<(LeaseAttempt, bool)> {
    let existing: Option<(String, i64, i64)> = tx
        .prepare_cached("SELECT holder, generation, expires_at_ms FROM leases WHERE session = ?1")?
        .query_row(params![session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let generation = match &existing {
        Some((other, _, expires))
            if other != holder
                && Some(other.as_str()) != dead_holder
                && (*expires as u64) > now_ms =>
        {
            let busy = LeaseAttempt::Busy {
                holder: other.clone(),
                expires_at_ms: *expires as u64,
            };
            return Ok((busy, false));
        }
        Some((_, generation, _)) => *generation as u64 + 1,
        None => reborn_generation(lease_floor(tx)?),
    };
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    tx.prepare_cached(
        "INSERT INTO leases (session, holder, generation, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(session) DO UPDATE SET holder = excluded.holder,
           generation = excluded.generation, expires_at_ms = excluded.expires_at_ms",
    )?
    .execute(params![
        session,
        holder,
        generation as i64,
        expires_at_ms as i64
    ])?;
    touch(tx, BINDING_SCOPE, session)?;
    let lease = Lease {
        session: session.to_string(),
        holder: holder.to_string(),
        generation,
        expires_at_ms,
    };
    Ok((LeaseAttempt::Acquired(lease), true))
}

fn stale_check(
    operation: &'static str,
    binding_key: &str,
    held: u64,
    fenced: Option<u64>,
) -> Result<(), StoreError> {
    match fenced {
        Some(current) => Err(StoreError::StaleGeneration {
            operation,
            key: binding_key.to_string(),
            held,
            current,
        }),
        None => Ok(()),
    }
}

impl StateStore for SqliteStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn load_binding(&self, binding_key: &str) -> Result<Option<StoredBinding>, StoreError> {
        self.with_reader("load binding", |conn| {
            conn.prepare_cached("SELECT json, generation FROM bindings WHERE binding_key = ?1")?
                .query_row(params![binding_key], |r| {
                    Ok(StoredBinding {
                        binding_key: binding_key.to_string(),
                        json: r.get(0)?,
                        generation: r.get::<_, i64>(1)? as u64,
                    })
                })
                .optional()
        })
    }

    fn save_binding(
        &self,
        binding_key: &str,
        json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        let fenced = self.write_tx("save binding", |tx| {
            let fenced = upsert_binding(tx, binding_key, json, lease_generation)?;
            Ok((fenced, fenced.is_none()))
        })?;
        stale_check("save binding", binding_key, lease_generation, fenced)
    }

    fn delete_binding(&self, binding_key: &str) -> Result<(), StoreError> {
        self.with_conn("delete binding", |conn| {
            conn.prepare_cached("DELETE FROM bindings WHERE binding_key = ?1")?
                .execute(params![binding_key])
                .map(|_| ())
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<u64, StoreError> {
        self.with_conn("delete session", |conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let entries = tx
                .prepare_cached("DELETE FROM transcript WHERE session_id = ?1")?
                .execute(params![session_id])? as u64;
            tx.prepare_cached("DELETE FROM bootstrapped WHERE session_id = ?1")?
                .execute(params![session_id])?;
            tx.prepare_cached("DELETE FROM activity WHERE scope = 's' AND key = ?1")?
                .execute(params![session_id])?;
            tx.commit()?;
            Ok(entries)
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
            let version: i64 = tx
                .prepare_cached("SELECT version FROM transcript_versions WHERE session_id = ?1")?
                .query_row(params![session_id], |r| r.get(0))
                .optional()?
                .unwrap_or(0);
            let (mut appended, mut from) = match cursor {
                Some(c) if c.version == version as u64 => (true, c.next_seq as i64),
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
            Ok((version as u64, appended, rows, next_seq as u64))
        })?;
        Ok(TranscriptRead {
            entries: self.decode_entries(session_id, rows)?,
            appended,
            cursor: Some(TranscriptCursor { version, next_seq }),
        })
    }

    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        let encoded = self.encode_entries("append transcript", entries)?;
        self.write_tx("append transcript", |tx| {
            insert_entries(tx, session_id, &encoded)?;
            Ok(((), true))
        })
    }

    fn record_turn(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
    ) -> Result<(), StoreError> {
        self.record_turn_fenced(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            None,
        )
    }

    fn record_turn_with_commit(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding_key: &str,
        binding_json: &str,
        lease_generation: u64,
        commit: &OutboxRow,
    ) -> Result<(), StoreError> {
        self.record_turn_fenced(
            session_id,
            entries,
            binding_key,
            binding_json,
            lease_generation,
            Some(commit),
        )
    }

    fn replace_transcript_entries(
        &self,
        session_id: &str,
        replacements: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        let encoded = replacements
            .iter()
            .map(|e| {
                serde_json::to_string(&e.message)
                    .map(|json| (e.entry_id.as_str(), json))
                    .map_err(|err| {
                        self.record_error("rewrite transcript", &e.entry_id, err.to_string())
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let missing = self.write_tx("rewrite transcript", |tx| {
            for (entry_id, json) in &encoded {
                let n = tx
                    .prepare_cached(
                        "UPDATE transcript SET message = ?3 WHERE session_id = ?1 AND entry_id = ?2",
                    )?
                    .execute(params![session_id, entry_id, json])?;
                if n == 0 {
                    // Not committing rolls back every earlier replacement.
                    return Ok((Some(entry_id.to_string()), false));
                }
            }
            // Readers holding a copy of this transcript see the new version and reload it.
            tx.prepare_cached(
                "INSERT INTO transcript_versions (session_id, version) VALUES (?1, 1)
                 ON CONFLICT(session_id) DO UPDATE SET version = version + 1",
            )?
            .execute(params![session_id])?;
            if !encoded.is_empty() {
                touch(tx, SESSION_SCOPE, session_id)?;
            }
            Ok((None, true))
        })?;
        match missing {
            Some(entry_id) => Err(self.record_error(
                "rewrite transcript",
                &format!("{session_id}/{entry_id}"),
                "no such transcript entry".into(),
            )),
            None => Ok(()),
        }
    }

    fn enqueue_outbox(&self, row: &OutboxRow) -> Result<(), StoreError> {
        self.run_now(&TurnWrite::EnqueueOutbox(row.clone()).into())
            .map(|_| ())
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

    fn complete_outbox(&self, session_id: &str, advancement_key: &str) -> Result<(), StoreError> {
        self.run_now(
            &TurnWrite::CompleteOutbox {
                session_id: session_id.to_owned(),
                advancement_key: advancement_key.to_owned(),
            }
            .into(),
        )
        .map(|_| ())
    }
    fn move_outbox(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        self.write_tx("move outbox rows", |tx| {
            let moved = tx
                .prepare_cached(
                    "UPDATE OR IGNORE outbox SET session_id = ?2 WHERE session_id = ?1",
                )?
                .execute(params![from, to])? as u64;
            if moved > 0 {
                touch(tx, SESSION_SCOPE, to)?;
            }
            Ok((moved, true))
        })
    }
    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        self.run_now(
            &TurnWrite::FailOutbox {
                session_id: session_id.to_owned(),
                advancement_key: advancement_key.to_owned(),
                error: error.to_owned(),
            }
            .into(),
        )
        .map(|_| ())
    }
    fn record_quarantine(&self, record: &QuarantineRecord) -> Result<(), StoreError> {
        self.with_conn("record quarantine", |conn| {
            conn.prepare_cached("INSERT INTO quarantine (engine_id, operation, reason, at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(engine_id) DO UPDATE SET operation = excluded.operation,
                   reason = excluded.reason, at_ms = excluded.at_ms")?
                .execute(params![record.engine_id, record.operation, record.reason, record.at_ms as i64],
            )
            .map(|_| ())
        })
    }

    fn clear_quarantine(&self, engine_id: &str) -> Result<(), StoreError> {
        self.with_conn("clear quarantine", |conn| {
            conn.prepare_cached("DELETE FROM quarantine WHERE engine_id = ?1")?
                .execute(params![engine_id])
                .map(|_| ())
        })
    }

    fn quarantines(&self) -> Result<Vec<QuarantineRecord>, StoreError> {
        self.with_reader("read quarantines", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT engine_id, operation, reason, at_ms FROM quarantine ORDER BY engine_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(QuarantineRecord {
                    engine_id: r.get(0)?,
                    operation: r.get(1)?,
                    reason: r.get(2)?,
                    at_ms: r.get::<_, i64>(3)? as u64,
                })
            })?;
            rows.collect()
        })
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

    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.write_tx("mark bootstrapped", |tx| {
            let new = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO bootstrapped (session_id, engine_id) VALUES (?1, ?2)",
                )?
                .execute(params![session_id, engine_id])?
                == 1;
            if new {
                touch(tx, SESSION_SCOPE, session_id)?;
            }
            Ok((new, new))
        })
    }

    fn try_acquire_lease(
        &self,
        session: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.run_now(
            &TurnWrite::AcquireLease {
                session: session.to_owned(),
                holder: holder.to_owned(),
                dead_holder: None,
                now_ms,
                ttl_ms,
            }
            .into(),
        )
        .map(WriteOutcome::into_lease)
    }
    fn take_over_lease(
        &self,
        session: &str,
        dead_holder: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.run_now(
            &TurnWrite::AcquireLease {
                session: session.to_owned(),
                holder: holder.to_owned(),
                dead_holder: Some(dead_holder.to_owned()),
                now_ms,
                ttl_ms,
            }
            .into(),
        )
        .map(WriteOutcome::into_lease)
    }
    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.run_now(&TurnWrite::ReleaseLease(lease.clone()).into())
            .map(|_| ())
    }
    fn renew_lease(&self, lease: &Lease, now_ms: u64, ttl_ms: u64) -> Result<bool, StoreError> {
        self.write_tx("renew session lease", |tx| {
            let renewed =
                tx.prepare_cached(
                    "UPDATE leases SET expires_at_ms = ?4
                     WHERE session = ?1 AND holder = ?2 AND generation = ?3",
                )?
                .execute(params![
                    lease.session,
                    lease.holder,
                    lease.generation as i64,
                    now_ms.saturating_add(ttl_ms) as i64
                ])? == 1;
            if renewed {
                touch(tx, BINDING_SCOPE, &lease.session)?;
            }
            Ok((renewed, renewed))
        })
    }

    fn submit(&self, write: TurnWrite) -> WriteFuture {
        let op = match self.prepare(write) {
            Ok(op) => op,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.enqueue(op, Some(reply));
        let path = self.path.clone();
        Box::pin(async move {
            answer.await.unwrap_or_else(|_| {
                Err(StoreError::Io {
                    path,
                    operation: "wait for a queued write",
                    source: std::io::Error::other(
                        "the write was abandoned unanswered (the thread running it panicked)",
                    ),
                })
            })
        })
    }

    fn submit_detached(&self, write: TurnWrite) {
        match self.prepare(write) {
            Ok(op) => self.enqueue(op, None),
            Err(e) => tracing::warn!(error = %e, "a detached store write could not be prepared"),
        }
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.with_reader("load document", |conn| {
            conn.prepare_cached("SELECT json FROM documents WHERE namespace = ?1 AND key = ?2")?
                .query_row(params![namespace, key], |r| r.get(0))
                .optional()
        })
    }

    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        self.write_tx("save document", |tx| {
            tx.prepare_cached(
                "INSERT INTO documents (namespace, key, json) VALUES (?1, ?2, ?3)
                 ON CONFLICT(namespace, key) DO UPDATE SET json = excluded.json",
            )?
            .execute(params![namespace, key, json])?;
            touch(tx, &format!("d:{namespace}"), key)?;
            Ok(((), true))
        })
    }

    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        let cutoff = i64::try_from(request.idle_before_ms).unwrap_or(i64::MAX);
        let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
        let scopes = sweep_scopes(&request.document_namespaces);
        let placeholders = vec!["?"; scopes.len()].join(", ");
        // Oldest first; a session with an undelivered commit is never idle. The activity table
        // has no index on its time (every write would have to move an index entry), so the
        // candidates come from a scan on a reader, and the writer only checks them again.
        let query = format!(
            "SELECT scope, key FROM activity a
             WHERE last_active_ms < ? AND scope IN ({placeholders})
               AND NOT (scope = 's' AND EXISTS (SELECT 1 FROM outbox o WHERE o.session_id = a.key))
             ORDER BY last_active_ms LIMIT ?"
        );
        let mut values: Vec<rusqlite::types::Value> = vec![cutoff.into()];
        values.extend(scopes.iter().cloned().map(rusqlite::types::Value::from));
        values.push(limit.into());
        let candidates: Vec<(String, String)> = self.with_reader("find idle state", |conn| {
            conn.prepare(&query)?
                .query_map(rusqlite::params_from_iter(values), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect()
        })?;
        if candidates.is_empty() {
            return Ok(SweepReport::default());
        }
        self.with_conn("sweep idle state", |conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut report = SweepReport::default();
            for (scope, key) in &candidates {
                // Written (or given an undelivered commit) since the scan: not idle any more.
                let still_idle: bool = tx
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM activity a
                           WHERE scope = ?1 AND key = ?2 AND last_active_ms < ?3
                             AND NOT (scope = 's' AND EXISTS
                               (SELECT 1 FROM outbox o WHERE o.session_id = a.key)))",
                    )?
                    .query_row(params![scope, key, cutoff], |r| r.get(0))?;
                if !still_idle {
                    continue;
                }
                report.keys += 1;
                match scope.as_str() {
                    "s" => {
                        report.sessions += 1;
                        let entries = tx
                            .prepare_cached("DELETE FROM transcript WHERE session_id = ?1")?
                            .execute(params![key])? as u64;
                        report.transcript_entries += entries;
                        report.swept_sessions.push(SweptSession {
                            session_id: key.clone(),
                            transcript_entries: entries,
                        });
                        report.bootstrap_marks +=
                            tx.prepare_cached("DELETE FROM bootstrapped WHERE session_id = ?1")?
                                .execute(params![key])? as u64;
                    }
                    "b" => {
                        report.bindings +=
                            tx.prepare_cached("DELETE FROM bindings WHERE binding_key = ?1")?
                                .execute(params![key])? as u64;
                        // The floor first: a lease taken again later starts above every
                        // generation it had (see `reborn_generation`).
                        tx.prepare_cached(
                            "INSERT INTO lease_floor (id, generation)
                               SELECT 1, generation FROM leases
                               WHERE session = ?1 AND expires_at_ms < ?2
                             ON CONFLICT(id) DO UPDATE
                               SET generation = max(generation, excluded.generation)",
                        )?
                        .execute(params![key, cutoff])?;
                        report.leases +=
                            tx.prepare_cached(
                                "DELETE FROM leases WHERE session = ?1 AND expires_at_ms < ?2",
                            )?
                            .execute(params![key, cutoff])? as u64;
                    }
                    document => {
                        let namespace = document.strip_prefix("d:").unwrap_or(document);
                        report.documents +=
                            tx.prepare_cached(
                                "DELETE FROM documents WHERE namespace = ?1 AND key = ?2",
                            )?
                            .execute(params![namespace, key])? as u64;
                    }
                }
                tx.prepare_cached("DELETE FROM activity WHERE scope = ?1 AND key = ?2")?
                    .execute(params![scope, key])?;
            }
            tx.commit()?;
            Ok(report)
        })
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.with_reader("count rows", |conn| stats_of(conn))
    }
}

/// Row counts and the oldest session's last activity, read on `conn`.
fn stats_of(conn: &Connection) -> rusqlite::Result<StoreStats> {
    conn.query_row(
        "SELECT
           (SELECT count(*) FROM activity WHERE scope = 's'),
           (SELECT count(*) FROM bindings),
           (SELECT count(*) FROM transcript),
           (SELECT count(*) FROM outbox),
           (SELECT count(*) FROM documents),
           (SELECT min(last_active_ms) FROM activity WHERE scope IN ('s', 'b'))",
        [],
        |r| {
            let count = |i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
            Ok(StoreStats {
                sessions: count(0)?,
                bindings: count(1)?,
                transcript_entries: count(2)?,
                outbox_pending: count(3)?,
                documents: count(4)?,
                oldest_session_ms: r.get::<_, Option<i64>>(5)?.map(|ms| ms.max(0) as u64),
            })
        },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::AgentMessage;

    /// A queued acquire of session `k`'s lease by `holder` at `now_ms`, for a minute.
    fn acquire_k(holder: &str, now_ms: u64) -> TurnWrite {
        TurnWrite::AcquireLease {
            session: "k".into(),
            holder: holder.into(),
            dead_holder: None,
            now_ms,
            ttl_ms: 60_000,
        }
    }

    fn entry(id: &str, text: &str) -> TranscriptEntry {
        TranscriptEntry {
            entry_id: id.into(),
            message: AgentMessage::user(text),
        }
    }

    // The store-generic checks (transcript, rewrite, leases and fencing, record_turn, outbox)
    // are in the shared conformance suite, `store::conformance`, run on every store.

    /// State survives reopening the file.
    #[test]
    fn durable_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/state.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.save_binding("k", "{\"a\":1}", 0).unwrap();
            assert!(s.mark_bootstrapped("sess", "eng").unwrap());
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.load_binding("k").unwrap().unwrap().json, "{\"a\":1}");
        assert!(!s.mark_bootstrapped("sess", "eng").unwrap());
    }

    /// A file an earlier build wrote (schema 2, no lease floor) opens with its state intact,
    /// gains the (empty) lease floor table and is marked schema 3.
    #[test]
    fn schema_2_file_gains_the_lease_floor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.save_binding("k", "{\"a\":1}", 0).unwrap();
        }
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch("DROP TABLE lease_floor; PRAGMA user_version=2;")
                .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.load_binding("k").unwrap().unwrap().json, "{\"a\":1}");
        let version: i64 = s
            .with_reader("read version", |c| {
                c.query_row("PRAGMA user_version", [], |r| r.get(0))
            })
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let floor: i64 = s
            .with_reader("count floor rows", |c| {
                c.query_row("SELECT count(*) FROM lease_floor", [], |r| r.get(0))
            })
            .unwrap();
        assert_eq!(floor, 0, "no sweep yet: no floor");
    }

    /// A file that is not a database is refused with an error naming it, and left untouched.
    #[test]
    fn corrupt_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let garbage = vec![b'x'; 8192];
        std::fs::write(&path, &garbage).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("state.db"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), garbage);
    }

    /// A database held under an exclusive lock by another connection gives `Locked`.
    #[test]
    fn locked_database_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let s = SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let err = s.save_binding("k", "{}", 0).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        assert!(err.to_string().contains("locked"), "{err}");
    }

    /// An incremental read returns only the entries appended after the cursor; after a
    /// rewrite the old cursor is stale and the whole (rewritten) transcript comes back.
    #[test]
    fn transcript_since_reads_increments_and_notices_rewrites() {
        let s = SqliteStore::in_memory().unwrap();
        s.append_transcript("s", &[entry("a", "1"), entry("b", "2")])
            .unwrap();
        let first = s.transcript_since("s", None).unwrap();
        assert!(!first.appended);
        assert_eq!(first.entries.len(), 2);
        let cursor = first.cursor.unwrap();
        let none_new = s.transcript_since("s", Some(cursor)).unwrap();
        assert!(none_new.appended);
        assert!(none_new.entries.is_empty());
        s.append_transcript("s", &[entry("c", "3")]).unwrap();
        let more = s.transcript_since("s", Some(cursor)).unwrap();
        assert!(more.appended);
        let ids: Vec<_> = more.entries.iter().map(|e| e.entry_id.as_str()).collect();
        assert_eq!(ids, ["c"]);
        let cursor = more.cursor.unwrap();
        s.replace_transcript_entries("s", &[entry("a", "one")])
            .unwrap();
        let after = s.transcript_since("s", Some(cursor)).unwrap();
        assert!(!after.appended, "a rewrite invalidates the cursor");
        assert_eq!(after.entries.len(), 3);
        assert_eq!(after.entries[0].message.plain_text(), "one");
    }

    /// A copy whose entries were removed (a reset, or a retention sweep of the idle session)
    /// is stale: the next read returns the whole new transcript, not only what follows the
    /// old cursor (numbering starts again after a removal).
    #[test]
    fn transcript_since_notices_removed_entries() {
        let s = SqliteStore::in_memory().unwrap();
        s.append_transcript("s", &[entry("a", "1"), entry("b", "2")])
            .unwrap();
        let cursor = s.transcript_since("s", None).unwrap().cursor.unwrap();
        assert_eq!(s.delete_session("s").unwrap(), 2);
        s.append_transcript("s", &[entry("c", "3")]).unwrap();
        let read = s.transcript_since("s", Some(cursor)).unwrap();
        assert!(!read.appended, "a copy of removed entries was continued");
        let ids: Vec<_> = read.entries.iter().map(|e| e.entry_id.as_str()).collect();
        assert_eq!(ids, ["c"]);
    }

    /// A lease held by a holder known to be dead is taken over (with a higher generation);
    /// one held by anyone else is not. A renewal extends only the current holder's lease.
    #[test]
    fn leases_are_taken_over_and_renewed() {
        let s = SqliteStore::in_memory().unwrap();
        let LeaseAttempt::Acquired(dead) = s.try_acquire_lease("k", "dead", 0, 10_000).unwrap()
        else {
            panic!("lease refused");
        };
        assert!(matches!(
            s.take_over_lease("k", "someone-else", "p2", 10, 10_000)
                .unwrap(),
            LeaseAttempt::Busy { .. }
        ));
        let LeaseAttempt::Acquired(new) = s.take_over_lease("k", "dead", "p2", 10, 1_000).unwrap()
        else {
            panic!("dead holder's lease not taken over");
        };
        assert!(new.generation > dead.generation);
        assert!(!s.renew_lease(&dead, 20, 10_000).unwrap());
        assert!(s.renew_lease(&new, 20, 10_000).unwrap());
        // Renewed to 20 + 10 000: still held at 5 000.
        assert!(matches!(
            s.try_acquire_lease("k", "p3", 5_000, 1_000).unwrap(),
            LeaseAttempt::Busy { .. }
        ));
    }

    /// Several connections opening one fresh file at once all succeed (the schema is created
    /// under the write lock, and the others wait for it).
    #[test]
    fn concurrent_opens_of_a_fresh_file_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let s = SqliteStore::open(&path)?;
                    s.save_binding(&format!("k{i}"), "{}", 0)?;
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        for i in 0..8 {
            assert!(s.load_binding(&format!("k{i}")).unwrap().is_some());
        }
    }

    /// A write transaction that must wait for another connection's write lock waits for it
    /// (instead of failing at once) and then commits.
    #[test]
    fn writes_wait_for_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let s = SqliteStore::open(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            tx.send(()).unwrap();
            s.record_turn("sess", &[entry("a", "1")], "k", "{}", 0)
                .map(|()| s)
        });
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        other.execute_batch("COMMIT").unwrap();
        let s = writer.join().unwrap().unwrap();
        assert_eq!(s.load_transcript("sess").unwrap().len(), 1);
    }

    /// Writes queued while another thread runs the queue wait for it (their submitters go on
    /// meanwhile), then run in one batch in submission order, each in its own savepoint: a
    /// fenced record is refused and rolled back alone, a release queued before an acquire of
    /// the same session frees it for that acquire, and the other writes land.
    #[tokio::test]
    async fn queued_writes_run_as_one_batch_in_order() {
        let s = SqliteStore::in_memory().unwrap();
        let LeaseAttempt::Acquired(old) = s.try_acquire_lease("k", "p1", 0, 60_000).unwrap() else {
            panic!("lease refused");
        };
        // Another thread is running the queue: submissions only queue.
        s.combining.store(true, Ordering::SeqCst);
        let record = |session: &str, key: &str, generation: u64| TurnWrite::RecordTurn {
            session_id: session.into(),
            entries: vec![entry(&format!("{session}-e"), "x")],
            binding_key: key.into(),
            binding_json: format!("{{\"by\":\"{session}\"}}"),
            lease_generation: generation,
            commit: None,
        };
        let released = s.submit(TurnWrite::ReleaseLease(old.clone()));
        let acquired = s.submit(acquire_k("p2", 10));
        // p1's write after p2 took the session: fenced.
        let stale = s.submit(record("stale", "k", old.generation));
        let other = s.submit(record("other", "k2", 0));
        assert!(
            s.load_binding("k2").unwrap().is_none(),
            "ran before its turn"
        );
        assert_eq!(lock_queue(&s.queue).len(), 4);

        s.combining.store(false, Ordering::SeqCst);
        s.combine();
        assert!(lock_queue(&s.queue).is_empty());
        released.await.unwrap();
        let WriteOutcome::Lease(LeaseAttempt::Acquired(new)) = acquired.await.unwrap() else {
            panic!("the release queued first did not free the session");
        };
        assert_eq!(new.generation, old.generation + 1);
        let err = stale.await.unwrap_err();
        assert!(
            matches!(err, StoreError::StaleGeneration { held, current, .. } if held == old.generation && current == new.generation),
            "{err:?}"
        );
        other.await.unwrap();
        assert!(
            s.load_transcript("stale").unwrap().is_empty(),
            "fenced write kept"
        );
        assert!(
            s.load_binding("k").unwrap().is_none(),
            "fenced binding kept"
        );
        assert_eq!(s.load_transcript("other").unwrap().len(), 1);
        assert_eq!(
            s.load_binding("k2").unwrap().unwrap().json,
            "{\"by\":\"other\"}"
        );
    }

    /// A lease acquired for a submitter that stopped waiting (its turn was cancelled while the
    /// acquire was queued) is released by the queue: nobody would otherwise hold it until it
    /// expires.
    #[test]
    fn a_lease_acquired_for_a_cancelled_turn_is_released() {
        let s = SqliteStore::in_memory().unwrap();
        s.combining.store(true, Ordering::SeqCst);
        let acquire = s.submit(acquire_k("p1", 0));
        drop(acquire);
        s.combining.store(false, Ordering::SeqCst);
        s.combine();
        assert!(lock_queue(&s.queue).is_empty());
        let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("k", "p2", 10, 60_000).unwrap()
        else {
            panic!("the cancelled turn's lease was left held");
        };
        assert_eq!(
            lease.generation, 2,
            "the cancelled turn's lease was never taken"
        );
    }

    /// A batch that cannot take the write lock (another process holds it past the busy
    /// timeout) answers each of its writes `Locked`, under the write's own operation.
    #[tokio::test]
    async fn a_locked_batch_answers_each_write_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let s = SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        s.combining.store(true, Ordering::SeqCst);
        let acquire = s.submit(acquire_k("p1", 0));
        let complete = s.submit(TurnWrite::CompleteOutbox {
            session_id: "s".into(),
            advancement_key: "turn-1".into(),
        });
        s.combining.store(false, Ordering::SeqCst);
        s.combine();
        for (answer, operation) in [
            (acquire.await, "acquire session lease"),
            (complete.await, "complete outbox row"),
        ] {
            match answer {
                Err(StoreError::Locked { operation: op, .. }) => assert_eq!(op, operation),
                other => panic!("{operation}: {other:?}"),
            }
        }
        other.execute_batch("COMMIT").unwrap();
    }

    /// A detached write (nobody waits for it) runs too: at once when the queue is free, else
    /// with the running batch.
    #[test]
    fn detached_writes_run() {
        let s = SqliteStore::in_memory().unwrap();
        let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("k", "p1", 0, 60_000).unwrap()
        else {
            panic!("lease refused");
        };
        s.submit_detached(TurnWrite::ReleaseLease(lease));
        assert!(matches!(
            s.try_acquire_lease("k", "p2", 10, 60_000).unwrap(),
            LeaseAttempt::Acquired(_)
        ));
    }

    /// The activity (retention) time of `key` in `scope`, if dated.
    fn activity(path: &Path, scope: &str, key: &str) -> Option<i64> {
        Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT last_active_ms FROM activity WHERE scope = ?1 AND key = ?2",
                params![scope, key],
                |r| r.get(0),
            )
            .optional()
            .unwrap()
    }

    /// Every write path dates its key in the activity table (sessions by their transcript,
    /// bootstrap marks and outbox; bindings by binding, lease and renewal; documents by
    /// namespace), and the triggers an earlier build kept it with are dropped on open.
    #[test]
    fn every_write_path_dates_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        drop(SqliteStore::open(&path).unwrap());
        // An earlier build's trigger.
        Connection::open(&path)
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER activity_transcript_insert AFTER INSERT ON transcript BEGIN
                 INSERT INTO activity (scope, key, last_active_ms) VALUES ('s', NEW.session_id, 0)
                 ON CONFLICT(scope, key) DO UPDATE SET last_active_ms = 0; END;",
            )
            .unwrap();
        let s = SqliteStore::open(&path).unwrap();
        let triggers: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(triggers, 0, "old activity triggers left in place");

        let started = i64::try_from(crate::harness::now_ms()).unwrap() - 1;
        let dated = |scope: &str, key: &str| {
            let at = activity(&path, scope, key);
            assert!(
                at.is_some_and(|at| at >= started),
                "{scope}/{key} not dated: {at:?}"
            );
        };
        s.append_transcript("s-append", &[entry("a", "1")]).unwrap();
        dated("s", "s-append");
        s.record_turn("s-record", &[entry("r", "1")], "b-record", "{}", 0)
            .unwrap();
        dated("s", "s-record");
        dated("b", "b-record");
        s.mark_bootstrapped("s-boot", "eng").unwrap();
        dated("s", "s-boot");
        let row = OutboxRow {
            session_id: "s-outbox".into(),
            advancement_key: "k".into(),
            engine_id: "eng".into(),
            params_json: "{}".into(),
            attempts: 0,
            last_error: None,
        };
        s.enqueue_outbox(&row).unwrap();
        dated("s", "s-outbox");
        s.save_binding("b-save", "{}", 0).unwrap();
        dated("b", "b-save");
        let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("b-lease", "h", 0, 60_000).unwrap()
        else {
            panic!("lease refused");
        };
        dated("b", "b-lease");
        s.save_document("mock-thread", "t", "{}").unwrap();
        dated("d:mock-thread", "t");

        // Later writes move the time on: a rewrite, a renewal, a delivered commit.
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE activity SET last_active_ms = 1", [])
            .unwrap();
        s.replace_transcript_entries("s-append", &[entry("a", "one")])
            .unwrap();
        dated("s", "s-append");
        assert!(s.renew_lease(&lease, 10, 60_000).unwrap());
        dated("b", "b-lease");
        s.complete_outbox("s-outbox", "k").unwrap();
        dated("s", "s-outbox");
        // A release or a failed delivery does not date anything.
        conn.execute("UPDATE activity SET last_active_ms = 1", [])
            .unwrap();
        s.release_lease(&lease).unwrap();
        assert_eq!(activity(&path, "b", "b-lease"), Some(1));
    }
}
