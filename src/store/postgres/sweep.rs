//! The PostgreSQL store's retention sweep: idle keys taken oldest first (skipping rows another
//! instance or a writer holds) and removed in one transaction.

use super::queries::to_db;
use super::PostgresStore;
use crate::store::{sweep_scopes, StoreError, SweepReport, SweepRequest, SweptSession};

impl PostgresStore {
    /// [`crate::store::StateStore::sweep_idle`] on this store.
    pub(super) fn sweep(&self, request: &SweepRequest) -> Result<SweepReport, StoreError> {
        let cutoff = to_db(request.idle_before_ms);
        let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
        let scopes = sweep_scopes(&request.document_namespaces);
        self.run("sweep idle state", move |mut client| async move {
            let tx = client.transaction().await?;
            // Oldest first; a session with an undelivered commit is never idle; rows another
            // instance is sweeping (or a writer is touching) are skipped.
            let idle = tx
                .query(
                    "SELECT scope, key FROM ctxbridge_activity a
                     WHERE last_active_ms < $1 AND scope = ANY($2)
                       AND NOT (scope = 's' AND EXISTS
                         (SELECT 1 FROM ctxbridge_outbox o WHERE o.session_id = a.key))
                     ORDER BY last_active_ms LIMIT $3
                     FOR UPDATE SKIP LOCKED",
                    &[&cutoff, &scopes, &limit],
                )
                .await?;
            let mut report = SweepReport::default();
            for row in &idle {
                let scope: String = row.try_get(0)?;
                let key: String = row.try_get(1)?;
                report.keys += 1;
                match scope.as_str() {
                    "s" => {
                        report.sessions += 1;
                        let entries = tx
                            .execute(
                                "DELETE FROM ctxbridge_transcript WHERE session_id = $1",
                                &[&key],
                            )
                            .await?;
                        report.transcript_entries += entries;
                        report.swept_sessions.push(SweptSession {
                            session_id: key.clone(),
                            transcript_entries: entries,
                        });
                        report.bootstrap_marks += tx
                            .execute(
                                "DELETE FROM ctxbridge_bootstrapped WHERE session_id = $1",
                                &[&key],
                            )
                            .await?;
                    }
                    "b" => {
                        report.bindings += tx
                            .execute(
                                "DELETE FROM ctxbridge_bindings WHERE binding_key = $1",
                                &[&key],
                            )
                            .await?;
                        // The row goes and the floor rises in one statement: a lease taken
                        // again later starts above every generation it had.
                        report.leases += tx
                            .execute(
                                "WITH gone AS (
                                   DELETE FROM ctxbridge_leases
                                   WHERE session = $1 AND expires_at_ms < $2
                                   RETURNING generation)
                                 INSERT INTO ctxbridge_lease_floor AS f (id, generation)
                                   SELECT 1, generation FROM gone
                                 ON CONFLICT (id) DO UPDATE
                                   SET generation = GREATEST(f.generation, EXCLUDED.generation)",
                                &[&key, &cutoff],
                            )
                            .await?;
                    }
                    document => {
                        let namespace = document.strip_prefix("d:").unwrap_or(document);
                        report.documents += tx
                            .execute(
                                "DELETE FROM ctxbridge_documents WHERE namespace = $1 AND key = $2",
                                &[&namespace, &key],
                            )
                            .await?;
                    }
                }
                tx.execute(
                    "DELETE FROM ctxbridge_activity WHERE scope = $1 AND key = $2",
                    &[&scope, &key],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(report)
        })
    }
}
