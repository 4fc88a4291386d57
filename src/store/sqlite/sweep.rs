//! The SQLite store's retention sweep: idle keys found on a reader, checked again and removed
//! on the writer.

use rusqlite::params;

use super::SqliteStore;
use crate::store::{sweep_scopes, StoreError, SweepReport, SweepRequest, SweptSession};

impl SqliteStore {
    /// [`crate::store::StateStore::sweep_idle`] on this store.
    pub(super) fn sweep(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
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
}
