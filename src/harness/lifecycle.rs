//! Engine lifecycle calls around a turn: durable commits and their outbox (SPEC §6),
//! maintenance in the foreground or deferred (SPEC §8), quarantine records for `doctor`.

use super::*;

impl Harness {
    pub(super) async fn commit_row(
        &self,
        serving: &QuarantineEngine,
        session_key: &str,
        session_id: &str,
        mut params: CommitTurnParams,
    ) {
        let key = params.advancement_key.clone();
        params.runtime_context = Some(self.runtime_context(session_key, session_id, None, true));
        let params = project_host_params(params, &serving.info());
        let outcome = match serving.commit_turn(params).await {
            Ok(r) if r.is_settled() => self.store.complete_outbox(session_id, &key),
            Ok(r) => {
                tracing::warn!(advancement_key = %key, status = %r.status, "commitTurn returned an unknown status; the turn stays queued");
                self.store
                    .fail_outbox(session_id, &key, &format!("unknown status {:?}", r.status))
            }
            Err(e) => {
                tracing::warn!(advancement_key = %key, error = %e, "commitTurn failed; the turn stays queued");
                self.store.fail_outbox(session_id, &key, &e.to_string())
            }
        };
        if let Err(e) = outcome {
            tracing::error!(advancement_key = %key, error = %e, "could not update the durable-turn outbox");
        }
    }

    /// Retries queued durable commits of a session (before its next turn, and after a restart).
    pub(super) async fn flush_outbox(&self, session_key: &str, session_id: &str) {
        let rows = match self.store.pending_outbox(session_id) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the durable-turn outbox");
                return;
            }
        };
        for row in rows {
            if row.engine_id != self.engine.engine_id() || self.engine.is_quarantined() {
                tracing::warn!(advancement_key = %row.advancement_key, engine = %row.engine_id, "queued durable turn waits for its engine");
                continue;
            }
            match serde_json::from_str::<CommitTurnParams>(&row.params_json) {
                Ok(params) => {
                    self.commit_row(&self.engine, session_key, session_id, params)
                        .await
                }
                Err(e) => {
                    tracing::error!(advancement_key = %row.advancement_key, error = %e, "queued commitTurn params are unreadable");
                }
            }
        }
    }

    /// Calls `maintain` (foreground, or deferred when the engine asks for background turn
    /// maintenance).
    pub(super) async fn maintain(
        &self,
        serving: &QuarantineEngine,
        session_key: &str,
        session_id: &str,
        reason: MaintainReason,
        thread: Option<&ThreadId>,
    ) {
        if !serving.methods().contains(EngineMethod::Maintain) {
            return;
        }
        let info = serving.info();
        let params = project_host_params(
            MaintainParams {
                session_id: session_id.to_string(),
                session_key: Some(session_key.to_string()),
                reason,
                session_target: self.facts(session_key, session_id, thread).session_target,
                runtime_settings: Some(self.runtime_settings(serving, None)),
                runtime_context: Some(self.runtime_context(session_key, session_id, thread, true)),
            },
            &info,
        );
        let background = reason == MaintainReason::Turn
            && info.turn_maintenance_mode() == TurnMaintenanceMode::Background;
        if background {
            let engine: Arc<QuarantineEngine> = if std::ptr::eq(serving, &*self.legacy) {
                self.legacy.clone()
            } else {
                self.engine.clone()
            };
            // Deferred work still belongs to the session: it holds the session's maintenance
            // mark, which the session's next turn in this process waits for, so the two never
            // overlap (the reply itself does not wait).
            let held = self
                .locks
                .hold_for_maintenance(&self.binding_key_for(session_key))
                .await;
            self.background.spawn(async move {
                let _maintenance = held;
                if let Err(e) = engine.maintain(params).await {
                    tracing::warn!(error = %e, "background maintenance failed");
                }
            });
        } else if let Err(e) = serving.maintain(params).await {
            tracing::warn!(error = %e, "maintain failed");
        }
    }

    /// Writes this process's quarantines to the store (doctor shows them later); an engine that
    /// just served a turn without failing has its record from an earlier run cleared.
    pub(super) fn persist_quarantines(&self) {
        let id = self.engine.engine_id();
        // Once per process is enough: the record is history from an earlier run.
        if id != crate::engines::LEGACY_ENGINE_ID
            && !self.engine.is_quarantined()
            && !self.cleared_old_quarantine.swap(true, Ordering::SeqCst)
        {
            if let Err(e) = self.store.clear_quarantine(id) {
                self.cleared_old_quarantine.store(false, Ordering::SeqCst);
                tracing::warn!(error = %e, "could not clear an old quarantine record");
            }
        }
        for record in self.engine.quarantine_book().records() {
            let row = crate::store::QuarantineRecord {
                engine_id: record.engine_id.clone(),
                operation: record.operation.as_str().to_string(),
                reason: record.reason.clone(),
                at_ms: now_ms(),
            };
            if let Err(e) = self.store.record_quarantine(&row) {
                tracing::warn!(error = %e, "could not persist a quarantine record");
            }
        }
    }
}
