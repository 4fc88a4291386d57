//! Manual compaction (docs/architecture.md#compaction-on-threaded-backends): the engine's `compact({force: true})` first; legacy and
//! non-owning engines end on the backend's native compactor.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::session::SessionGuard;
use super::{store_err, CompactReport, Harness, HarnessError, DOCTOR_NAMESPACE, SESSION_NAMESPACE};
use crate::backend::ContextDelivery;
use crate::backend::{BackendError, ResumeThread, ThreadedBackend};
use crate::contract::{
    CompactParams, CompactionTarget, ContextEngine, HostOperation, MaintainReason,
    RuntimeCallbacks, RuntimeContext,
};
use crate::host::params::project_host_params;
use crate::host::requirements::check_host_requirements;
use crate::projection::{EffectiveMode, ThreadBinding};
use crate::store::StateStoreExt;

impl Harness {
    /// Manual compaction of a session (`ctxbridge compact`, `/compact`; docs/architecture.md#compaction-on-threaded-backends).
    pub async fn compact(&self, session_key: &str) -> Result<CompactReport, HarnessError> {
        self.compact_on(session_key, None).await
    }

    /// As [`Harness::compact`], the backend work on `backend` when given (see
    /// [`super::TurnSpec::backend`]).
    pub async fn compact_on(
        &self,
        session_key: &str,
        backend: Option<Arc<dyn ThreadedBackend>>,
    ) -> Result<CompactReport, HarnessError> {
        let backend = backend.unwrap_or_else(|| self.backend.clone());
        let key = self.binding_key_for(session_key);
        let mut guard = self.lock_session(session_key, &key).await?;
        // What the last turn learnt of the session may not hold after this: the next turn reads
        // the store again.
        guard.take_facts();
        let session_id = self.session_id(session_key)?;
        let stored = self.load_binding(session_key, &key).await?;
        let report = self
            .compact_locked(
                &backend,
                session_key,
                &session_id,
                stored.as_deref(),
                &guard,
            )
            .await;
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "could not release the session lease; it will expire");
        }
        report
    }

    pub(super) async fn compact_locked(
        &self,
        backend: &Arc<dyn ThreadedBackend>,
        session_key: &str,
        session_id: &str,
        stored: Option<&ThreadBinding>,
        guard: &SessionGuard,
    ) -> Result<CompactReport, HarnessError> {
        let info = self.engine.info();
        check_host_requirements(
            &info,
            HostOperation::ManualCompact,
            self.backend.label(),
            &self.backend.capabilities(),
        )?;
        let mut thread = stored.map(|b| b.thread_id.clone());
        // Native compaction runs on the bound thread, which the backend may not have loaded
        // yet (a fresh `ctxbridge compact` invocation): resume it first, as a turn would
        // (resuming a loaded thread does nothing).
        if let Some(t) = thread.clone() {
            let resume = ResumeThread {
                base_instructions: self.cfg.base_instructions.clone(),
                developer_instructions: stored.and_then(|b| b.developer_instructions.clone()),
            };
            match backend.resume_thread(&t, &resume).await {
                Ok(()) => {}
                Err(BackendError::ThreadNotFound { .. }) => {
                    tracing::warn!(thread = %t, "the bound backend thread is gone; nothing to compact natively");
                    thread = None;
                }
                Err(source) => {
                    return Err(HarnessError::Backend {
                        session: session_key.to_string(),
                        source,
                    })
                }
            }
        }
        let (cb, delegated) =
            self.callbacks(backend, session_key, session_id, thread.as_ref(), true);
        let params = project_host_params(
            CompactParams {
                session_id: session_id.to_string(),
                session_key: Some(session_key.to_string()),
                session_file: self.ensure_session_file(session_key, session_id),
                session_target: self
                    .facts(session_key, session_id, thread.as_ref())
                    .session_target,
                token_budget: Some(self.cfg.engine_token_budget()),
                force: Some(true),
                current_token_count: None,
                compaction_target: Some(CompactionTarget::Budget),
                custom_instructions: None,
                runtime_settings: Some(self.runtime_settings(&self.engine, None)),
                runtime_context: Some(RuntimeContext {
                    facts: self.facts(session_key, session_id, thread.as_ref()),
                    callbacks: Some(cb.clone()),
                }),
                abort: Some(tokio_util::sync::CancellationToken::new()),
            },
            &info,
        );
        // Fails closed: the error goes to the caller.
        let result = self.engine.compact(params).await.map_err(|source| {
            self.persist_quarantines();
            HarnessError::Engine {
                operation: "compact",
                session: session_key.to_string(),
                source,
            }
        })?;
        let mut native = delegated.load(Ordering::SeqCst);
        if !info.owns_compaction() && !native {
            if !result.compacted {
                let note = format!(
                    "context engine \"{}\" does not own compaction but its compact was a no-op; ctxbridge ran the backend's native compaction instead",
                    info.id
                );
                tracing::warn!("{note}");
                if let Err(e) = self.store.save_document(
                    DOCTOR_NAMESPACE,
                    &format!("noop-compact:{}", info.id),
                    &serde_json::to_string(&note).unwrap_or_default(),
                ) {
                    tracing::warn!(error = %e, "could not record a doctor note");
                }
            }
            let fallback = cb.delegate_compaction(CompactParams {
                session_id: session_id.to_string(),
                force: Some(true),
                ..Default::default()
            });
            match fallback.await {
                Ok(r) => native = r.compacted,
                Err(e) => tracing::warn!(error = %e, "native compaction failed"),
            }
        }
        if native {
            self.mark_context_refresh(stored, thread.as_ref(), guard)
                .await?;
        }
        // A successor session named by the engine becomes the session's id.
        let successor = result.result.as_ref().and_then(|r| {
            r.session_id
                .clone()
                .or_else(|| r.session_target.as_ref().and_then(|t| t.session_id.clone()))
        });
        if let Some(next) = successor.filter(|s| s != session_id) {
            guard
                .store()
                .save_document(SESSION_NAMESPACE, session_key, &next)
                .map_err(store_err("record successor session"))?;
        }
        self.maintain(
            &self.engine,
            session_key,
            session_id,
            MaintainReason::Compaction,
            thread.as_ref(),
        )
        .await;
        self.persist_quarantines();
        Ok(CompactReport {
            session_key: session_key.to_string(),
            engine_id: self.engine.active_engine_id().to_string(),
            result,
            native_compaction: native,
        })
    }
}

impl Harness {
    /// After a native compaction of a bootstrap thread whose context went as additional
    /// context (which the compaction drops), records in the binding that the next turn
    /// re-sends it.
    async fn mark_context_refresh(
        &self,
        stored: Option<&ThreadBinding>,
        compacted: Option<&crate::backend::ThreadId>,
        guard: &SessionGuard,
    ) -> Result<(), HarnessError> {
        let Some(binding) = stored.filter(|b| Some(&b.thread_id) == compacted) else {
            return Ok(());
        };
        if binding.fed_mode() != Some(EffectiveMode::ThreadBootstrap)
            || binding.context_refresh
            || self.context_delivery().await != ContextDelivery::AdditionalContext
        {
            return Ok(());
        }
        let updated = ThreadBinding {
            context_refresh: true,
            generation: guard.generation(),
            ..binding.clone()
        };
        let json = serde_json::to_string(&updated).map_err(|source| HarnessError::Encode {
            what: "the thread binding",
            source,
        })?;
        guard
            .store()
            .save_binding(&updated.binding_key, &json, guard.generation())
            .map_err(store_err("save binding"))?;
        self.bindings
            .insert(
                updated.binding_key.clone(),
                Some(std::sync::Arc::new(updated)),
            )
            .await;
        Ok(())
    }
}
