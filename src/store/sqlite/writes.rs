//! The SQLite store's writes one at a time ([`StoreWrites`]), each in a transaction of its own
//! when called directly; the turn's writes among them are the queue's ([`Op`]) run at once.

use rusqlite::params;

use super::queries::{insert_entries, stale_check, upsert_binding};
use super::schema::{touch, BINDING_SCOPE, SESSION_SCOPE};
use super::SqliteStore;
use crate::store::{
    Lease, OutboxRow, QuarantineRecord, SessionRead, StoreError, StoreWrites, SweepReport,
    SweepRequest, TranscriptEntry, TurnWrite, WriteOutcome,
};

impl StoreWrites for SqliteStore {
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
        commit: Option<&OutboxRow>,
    ) -> Result<(), StoreError> {
        let record = TurnWrite::record(
            session_id,
            &[],
            binding_key,
            binding_json,
            lease_generation,
            commit,
        );
        self.record_alone(entries, record)
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
                .execute(params![record.engine_id, record.operation.as_str(), record.reason, record.at_ms as i64],
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

    fn mark_bootstrapped(&self, session_id: &str, engine_id: &str) -> Result<bool, StoreError> {
        self.run_now(
            &TurnWrite::MarkBootstrapped {
                session_id: session_id.to_owned(),
                engine_id: engine_id.to_owned(),
            }
            .into(),
        )
        .map(|outcome| outcome == WriteOutcome::Applied(true))
    }

    fn acquire_lease(
        &self,
        session: &str,
        holder: &str,
        dead_holder: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
        read: Option<&SessionRead>,
    ) -> Result<WriteOutcome, StoreError> {
        self.run_alone(TurnWrite::acquire(
            session,
            holder,
            dead_holder,
            now_ms,
            ttl_ms,
            read,
        ))
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

    fn save_document(&self, namespace: &str, key: &str, json: &str) -> Result<(), StoreError> {
        self.run_now(
            &TurnWrite::SaveDocument {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                json: json.to_owned(),
            }
            .into(),
        )
        .map(|_| ())
    }

    fn sweep_idle(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        self.sweep(request)
    }
}
