//! The SQLite store's SQL helpers run inside a caller's transaction (transcript entries, outbox
//! rows, the fenced binding upsert, leases and the lease floor, bootstrap marks, documents, the
//! stale-generation check, row counts) and the encoding of transcript entries.

use rusqlite::{params, Connection, OptionalExtension};

use super::schema::{touch, BINDING_SCOPE, SESSION_SCOPE};
use super::StoreInner;
use crate::store::{
    decode_transcript_rows, reborn_generation, Lease, LeaseAttempt, OutboxRow, SessionRead,
    SessionSnapshot, StoreError, StoreStats, StoredBinding, TranscriptCursor, TranscriptEntry,
};

impl StoreInner {
    pub(super) fn decode_entries(
        &self,
        session_id: &str,
        rows: Vec<(String, String)>,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        decode_transcript_rows(session_id, rows, |key, message| {
            self.record_error("load transcript", key, message)
        })
    }

    pub(super) fn encode_entries(
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

    pub(super) fn record_error(
        &self,
        operation: &'static str,
        key: &str,
        message: String,
    ) -> StoreError {
        StoreError::Record {
            path: self.path.clone(),
            operation,
            key: key.to_string(),
            message,
        }
    }
}

/// Appends encoded transcript entries after the session's last one (inside the caller's
/// transaction).
pub(super) fn insert_entries(
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

/// Marks `engine_id`'s bootstrap of `session_id` done; true when the mark is new (inside the
/// caller's transaction; nothing is written otherwise).
pub(super) fn insert_bootstrap_mark(
    conn: &Connection,
    session_id: &str,
    engine_id: &str,
) -> rusqlite::Result<bool> {
    let new = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO bootstrapped (session_id, engine_id) VALUES (?1, ?2)",
        )?
        .execute(params![session_id, engine_id])?
        == 1;
    if new {
        touch(conn, SESSION_SCOPE, session_id)?;
    }
    Ok(new)
}

/// Writes a document of `namespace` under `key` (inside the caller's transaction).
pub(super) fn upsert_document(
    conn: &Connection,
    namespace: &str,
    key: &str,
    json: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO documents (namespace, key, json) VALUES (?1, ?2, ?3)
         ON CONFLICT(namespace, key) DO UPDATE SET json = excluded.json",
    )?
    .execute(params![namespace, key, json])?;
    touch(conn, &format!("d:{namespace}"), key)
}

/// Queues an outbox row (a duplicate advancement key keeps the queued row).
pub(super) fn insert_outbox(conn: &Connection, row: &OutboxRow) -> rusqlite::Result<()> {
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
pub(super) fn upsert_binding(
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
pub(super) fn acquire_lease(
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

/// The binding stored under `binding_key`.
pub(super) fn load_binding(
    conn: &Connection,
    binding_key: &str,
) -> rusqlite::Result<Option<StoredBinding>> {
    conn.prepare_cached("SELECT json, generation FROM bindings WHERE binding_key = ?1")?
        .query_row(params![binding_key], |r| {
            Ok(StoredBinding {
                binding_key: binding_key.to_string(),
                json: r.get(0)?,
                generation: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()
}

/// The document `key` of `namespace`.
pub(super) fn load_document(
    conn: &Connection,
    namespace: &str,
    key: &str,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT json FROM documents WHERE namespace = ?1 AND key = ?2")?
        .query_row(params![namespace, key], |r| r.get(0))
        .optional()
}

/// The rewrite version of `session_id`'s transcript (0 until its first rewrite).
pub(super) fn transcript_version(conn: &Connection, session_id: &str) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT version FROM transcript_versions WHERE session_id = ?1")?
        .query_row(params![session_id], |r| r.get::<_, i64>(0))
        .optional()
        .map(|version| version.map_or(0, |v| v.max(0) as u64))
}

/// What the holder of `binding_key`'s lease, just taken in the caller's transaction, first
/// reads of its session (`read`): indexed lookups only, as they hold the writer.
pub(super) fn read_session(
    conn: &Connection,
    binding_key: &str,
    read: &SessionRead,
) -> rusqlite::Result<SessionSnapshot> {
    let session_id = load_document(conn, &read.id_namespace, &read.session_key)?
        .unwrap_or_else(|| read.session_key.clone());
    let exists = |sql: &str| -> rusqlite::Result<bool> {
        conn.prepare_cached(sql)?
            .query_row(params![session_id], |r| r.get(0))
    };
    let outbox_empty = !exists("SELECT EXISTS (SELECT 1 FROM outbox WHERE session_id = ?1)")?;
    let transcript_empty =
        !exists("SELECT EXISTS (SELECT 1 FROM transcript WHERE session_id = ?1)")?;
    let bootstrapped = conn
        .prepare_cached(
            "SELECT engine_id FROM bootstrapped WHERE session_id = ?1 ORDER BY engine_id",
        )?
        .query_map(params![session_id], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let binding = load_binding(conn, binding_key)?;
    // As `transcript_since` hands it out for an empty transcript: the session's rewrite
    // version, and the first entry's sequence number.
    let empty_transcript_cursor = if transcript_empty {
        Some(TranscriptCursor {
            version: transcript_version(conn, &session_id)?,
            next_seq: 0,
        })
    } else {
        None
    };
    Ok(SessionSnapshot {
        session_id,
        outbox_empty,
        bootstrapped,
        binding,
        transcript_empty,
        empty_transcript_cursor,
    })
}

pub(super) fn stale_check(
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

/// Row counts and the oldest session's last activity, read on `conn`.
pub(super) fn stats_of(conn: &Connection) -> rusqlite::Result<StoreStats> {
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
