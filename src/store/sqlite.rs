//! The embedded SQLite state store (WAL mode).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use super::{
    Lease, LeaseAttempt, OutboxRow, QuarantineRecord, StateStore, StoreError, StoredBinding,
    TranscriptEntry,
};

/// The schema this build writes.
const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another process's write lock before failing as `Locked`.
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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
CREATE TABLE IF NOT EXISTS documents (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);
";

/// SQLite-backed [`StateStore`]. One connection behind a mutex: SQLite serialises writers
/// anyway, and statements here are short.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    busy_timeout: Duration,
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
        let conn = Connection::open(&path).map_err(|e| classify(&path, "open", e, busy_timeout))?;
        let store = SqliteStore {
            path,
            conn: Mutex::new(conn),
            busy_timeout,
        };
        store.init()?;
        Ok(store)
    }

    /// A private in-memory database (tests, benchmarks, the embedded demo).
    pub fn in_memory() -> Result<Self, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory()
            .map_err(|e| classify(&path, "open", e, DEFAULT_BUSY_TIMEOUT))?;
        let store = SqliteStore {
            path,
            conn: Mutex::new(conn),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        };
        store.init()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn init(&self) -> Result<(), StoreError> {
        self.with_conn("open", |conn| {
            conn.busy_timeout(self.busy_timeout)?;
            // `journal_mode` returns a row; read it rather than execute it.
            let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
            let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
            if check != "ok" {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                    Some(format!("integrity check failed: {check}")),
                ));
            }
            Ok(())
        })?;
        let version: i64 = self.with_conn("read schema version", |conn| {
            conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        })?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version == 0 {
            // A database with foreign tables and no version is not ours: refuse it.
            let foreign: i64 = self.with_conn("inspect schema", |conn| {
                conn.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT IN
                     ('bindings','transcript','outbox','quarantine','bootstrapped','leases','documents')",
                    [],
                    |r| r.get(0),
                )
            })?;
            if foreign > 0 {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    operation: "open",
                    message: format!(
                        "{foreign} unexpected table(s) and no ctxbridge schema version"
                    ),
                });
            }
        }
        self.with_conn("create schema", |conn| {
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION}"))
        })
    }

    fn with_conn<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        // A poisoned lock only means another thread panicked mid-statement; SQLite's own
        // transaction rollback keeps the database consistent, so keep using the connection.
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut conn).map_err(|e| classify(&self.path, operation, e, self.busy_timeout))
    }

    fn encode_entries<'e>(
        &self,
        operation: &'static str,
        entries: &'e [TranscriptEntry],
    ) -> Result<Vec<(&'e str, String)>, StoreError> {
        entries
            .iter()
            .map(|e| {
                serde_json::to_string(&e.message)
                    .map(|json| (e.entry_id.as_str(), json))
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
    encoded: &[(&str, String)],
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
    ])
    .map(|_| ())
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
    conn.prepare_cached(
        "INSERT INTO bindings (binding_key, json, generation) VALUES (?1, ?2, ?3)
         ON CONFLICT(binding_key) DO UPDATE SET json = excluded.json, generation = excluded.generation",
    )?
    .execute(params![binding_key, json, lease_generation as i64])?;
    Ok(None)
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
        self.with_conn("load binding", |conn| {
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
        let fenced = self.with_conn("save binding", |conn| {
            let tx = conn.transaction()?;
            let fenced = upsert_binding(&tx, binding_key, json, lease_generation)?;
            if fenced.is_none() {
                tx.commit()?;
            }
            Ok(fenced)
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

    fn load_transcript(&self, session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let rows: Vec<(String, String)> = self.with_conn("load transcript", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT entry_id, message FROM transcript WHERE session_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![session_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })?;
        rows.into_iter()
            .map(|(entry_id, json)| {
                let message = serde_json::from_str(&json).map_err(|e| {
                    self.record_error(
                        "load transcript",
                        &format!("{session_id}/{entry_id}"),
                        e.to_string(),
                    )
                })?;
                Ok(TranscriptEntry { entry_id, message })
            })
            .collect()
    }

    fn append_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<(), StoreError> {
        let encoded = self.encode_entries("append transcript", entries)?;
        self.with_conn("append transcript", |conn| {
            let tx = conn.transaction()?;
            insert_entries(&tx, session_id, &encoded)?;
            tx.commit()
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
        let encoded = self.encode_entries("record turn", entries)?;
        let fenced = self.with_conn("record turn", |conn| {
            let tx = conn.transaction()?;
            let fenced = upsert_binding(&tx, binding_key, binding_json, lease_generation)?;
            if fenced.is_none() {
                insert_entries(&tx, session_id, &encoded)?;
                tx.commit()?;
            }
            Ok(fenced)
        })?;
        stale_check("record turn", binding_key, lease_generation, fenced)
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
        let encoded = self.encode_entries("record turn", entries)?;
        let fenced = self.with_conn("record turn", |conn| {
            let tx = conn.transaction()?;
            let fenced = upsert_binding(&tx, binding_key, binding_json, lease_generation)?;
            if fenced.is_none() {
                insert_entries(&tx, session_id, &encoded)?;
                insert_outbox(&tx, commit)?;
                tx.commit()?;
            }
            Ok(fenced)
        })?;
        stale_check("record turn", binding_key, lease_generation, fenced)
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
        let missing = self.with_conn("rewrite transcript", |conn| {
            let tx = conn.transaction()?;
            for (entry_id, json) in &encoded {
                let n = tx.prepare_cached("UPDATE transcript SET message = ?3 WHERE session_id = ?1 AND entry_id = ?2")?
                .execute(params![session_id, entry_id, json],
                )?;
                if n == 0 {
                    // Dropping the transaction rolls back every earlier replacement.
                    return Ok(Some(entry_id.to_string()));
                }
            }
            tx.commit()?;
            Ok(None)
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
        self.with_conn("enqueue outbox row", |conn| insert_outbox(conn, row))
    }

    fn pending_outbox(&self, session_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.with_conn("read outbox", |conn| {
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
        self.with_conn("complete outbox row", |conn| {
            conn.prepare_cached(
                "DELETE FROM outbox WHERE session_id = ?1 AND advancement_key = ?2",
            )?
            .execute(params![session_id, advancement_key])
            .map(|_| ())
        })
    }

    fn fail_outbox(
        &self,
        session_id: &str,
        advancement_key: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        self.with_conn("record outbox failure", |conn| {
            conn.prepare_cached(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?3
                 WHERE session_id = ?1 AND advancement_key = ?2",
            )?
            .execute(params![session_id, advancement_key, error])
            .map(|_| ())
        })
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
        self.with_conn("read quarantines", |conn| {
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
        self.with_conn("read bootstrap mark", |conn| {
            conn.prepare_cached(
                "SELECT count(*) FROM bootstrapped WHERE session_id = ?1 AND engine_id = ?2",
            )?
            .query_row(params![session_id, engine_id], |r| r.get::<_, i64>(0))
            .map(|n| n > 0)
        })
    }

    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.with_conn("mark bootstrapped", |conn| {
            conn.prepare_cached(
                "INSERT OR IGNORE INTO bootstrapped (session_id, engine_id) VALUES (?1, ?2)",
            )?
            .execute(params![session_id, engine_id])
            .map(|n| n == 1)
        })
    }

    fn try_acquire_lease(
        &self,
        session: &str,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<LeaseAttempt, StoreError> {
        self.with_conn("acquire session lease", |conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let existing: Option<(String, i64, i64)> = tx
                .prepare_cached("SELECT holder, generation, expires_at_ms FROM leases WHERE session = ?1")?
                .query_row(params![session],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let generation = match &existing {
                Some((other, _, expires)) if other != holder && (*expires as u64) > now_ms => {
                    return Ok(LeaseAttempt::Busy {
                        holder: other.clone(),
                        expires_at_ms: *expires as u64,
                    });
                }
                Some((_, generation, _)) => *generation as u64 + 1,
                None => 1,
            };
            let expires_at_ms = now_ms.saturating_add(ttl_ms);
            tx.prepare_cached("INSERT INTO leases (session, holder, generation, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(session) DO UPDATE SET holder = excluded.holder,
                   generation = excluded.generation, expires_at_ms = excluded.expires_at_ms")?
                .execute(params![session, holder, generation as i64, expires_at_ms as i64],
            )?;
            tx.commit()?;
            Ok(LeaseAttempt::Acquired(Lease {
                session: session.to_string(),
                holder: holder.to_string(),
                generation,
                expires_at_ms,
            }))
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        // Only the holder of this generation may release; expiry keeps the generation so a
        // stale holder stays fenced.
        self.with_conn("release session lease", |conn| {
            conn.prepare_cached("UPDATE leases SET expires_at_ms = 0 WHERE session = ?1 AND holder = ?2 AND generation = ?3")?
                .execute(params![lease.session, lease.holder, lease.generation as i64],
            )
            .map(|_| ())
        })
    }

    fn load_document(&self, namespace: &str, key: &str) -> Result<Option<String>, StoreError> {
        self.with_conn("load document", |conn| {
            conn.prepare_cached("SELECT json FROM documents WHERE namespace = ?1 AND key = ?2")?
                .query_row(params![namespace, key], |r| r.get(0))
                .optional()
        })
    }

    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        self.with_conn("save document", |conn| {
            conn.prepare_cached(
                "INSERT INTO documents (namespace, key, json) VALUES (?1, ?2, ?3)
                 ON CONFLICT(namespace, key) DO UPDATE SET json = excluded.json",
            )?
            .execute(params![namespace, key, json])
            .map(|_| ())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
}
