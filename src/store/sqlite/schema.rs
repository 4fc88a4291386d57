//! The SQLite store's schema: its text and version, its creation and upgrade when a store
//! opens, and the activity table (the retention sweep's clock) with the helper that dates a key.

use std::time::{Duration, Instant};

use rusqlite::{params, Connection, TransactionBehavior};

use super::checkpointer::WRITER_AUTOCHECKPOINT_PAGES;
use super::pool::Target;
use super::StoreInner;
use crate::store::StoreError;

/// The schema this build writes (2: per-session transcript rewrite versions; 3: the lease
/// generation floor, which a build that does not honour it must not write past).
pub(super) const SCHEMA_VERSION: i64 = 3;

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

/// Last activity per session id (`s`), binding key (`b`) and document (`d:<namespace>`), the
/// retention sweep's clock. Every write path dates its key with [`touch`], once per key and
/// transaction, in the transaction of the write. Additive: a database from an earlier build
/// gets the table, and its existing keys are dated to the upgrade (see
/// [`StoreInner::ensure_activity`]).
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
pub(super) const SESSION_SCOPE: &str = "s";
/// Activity scope of binding keys (binding and lease).
pub(super) const BINDING_SCOPE: &str = "b";

/// Dates `key` of `scope` to the database clock (inside the caller's transaction).
pub(super) fn touch(conn: &Connection, scope: &str, key: &str) -> rusqlite::Result<()> {
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

impl StoreInner {
    /// [`StoreInner::init`], again while another process holds a lock SQLite does not wait
    /// for (switching a fresh file to WAL), up to the busy timeout.
    pub(super) fn init_retrying(&self, target: &Target) -> Result<(), StoreError> {
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
}
