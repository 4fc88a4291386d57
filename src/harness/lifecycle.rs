//! Engine lifecycle calls around a turn: bootstrapping a session on its first encounter,
//! telling the engine about a finished turn (durable commits and their outbox,
//! docs/architecture.md#durable-turns-committurn; afterTurn / ingest otherwise), maintenance in
//! the foreground or deferred (docs/architecture.md#maintenance), quarantine records for
//! `doctor`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::turn::{RecordedTurn, TurnContext};
use super::{store_err, Harness, HarnessError};
use crate::backend::{ThreadId, TurnOutcome};
use crate::contract::{
    AfterTurnParams, BootstrapParams, CommitTurnParams, ContextEngine, EngineMethod, HookCall,
    IngestBatchParams, IngestParams, MaintainParams, MaintainReason, Messages, ReasonCode,
    RuntimeContext, TranscriptEntryAnchor, TranscriptTurnAdmission, TurnMaintenanceMode,
    HOOK_SESSION_START,
};
use crate::engines::LEGACY_ENGINE_ID;
use crate::host::params::project_host_params;
use crate::quarantine::QuarantineEngine;
use crate::store::StateStoreExt;
use crate::store::{OutboxRow, QuarantineRecord, TranscriptEntry, TurnWrite};
use crate::util::now_ms;

impl Harness {
    /// Bootstraps the session for `serving` unless the store says it was (not asked when
    /// `known_unmarked`: what the lease read says it is not); true when it marks the session
    /// bootstrapped now.
    pub(super) async fn bootstrap_if_new(
        &self,
        serving: &QuarantineEngine,
        session_key: &str,
        session_id: &str,
        known_unmarked: bool,
    ) -> Result<bool, HarnessError> {
        let engine_id = serving.active_engine_id().to_string();
        let done = !known_unmarked
            && self
                .store_for(session_key)
                .is_bootstrapped(session_id, &engine_id)
                .map_err(store_err("read bootstrap mark"))?;
        if done {
            return Ok(false);
        }
        if serving.hooks().iter().any(|h| h == HOOK_SESSION_START) {
            let call = HookCall {
                event: serde_json::json!({"sessionId": session_id, "sessionKey": session_key}),
                ctx: self.hook_ctx(session_key, session_id),
            };
            if let Err(e) = serving.call_hook(HOOK_SESSION_START, call).await {
                tracing::warn!(error = %e, "session_start hook failed");
            }
        }
        let info = serving.info();
        let methods = serving.methods();
        if methods.contains(EngineMethod::Bootstrap) {
            let params = project_host_params(
                BootstrapParams {
                    session_id: session_id.to_string(),
                    session_key: Some(session_key.to_string()),
                    session_file: self.ensure_session_file(session_key, session_id),
                    session_target: self.facts(session_key, session_id, None).session_target,
                    runtime_settings: Some(self.runtime_settings(serving, None)),
                    runtime_context: Some(self.runtime_context(
                        session_key,
                        session_id,
                        None,
                        false,
                    )),
                },
                &info,
            );
            if let Err(e) = serving.bootstrap(params).await {
                tracing::warn!(error = %e, "bootstrap failed");
            }
        }
        self.maintain(
            serving,
            session_key,
            session_id,
            MaintainReason::Bootstrap,
            None,
        )
        .await;
        // Marked only once bootstrap has run: a crash before this point bootstraps again.
        // Submitted with the turn writes of other sessions, not run alone while this task's
        // worker thread waits for the writer.
        self.store_for(session_key)
            .submit(TurnWrite::MarkBootstrapped {
                session_id: session_id.to_owned(),
                engine_id: engine_id.clone(),
            })
            .await
            .map_err(store_err("mark bootstrapped"))?;
        Ok(true)
    }

    /// A durable engine's commit of this turn (docs/architecture.md#durable-turns-committurn): its `commitTurn` params and the
    /// outbox row that queues them, written in the same transaction as the recorded turn so a
    /// crash cannot leave the turn recorded without its commit. `None` for other engines.
    pub(super) fn durable_commit(
        &self,
        ctx: &TurnContext<'_>,
        turn_id: &str,
        entries: &[TranscriptEntry; 2],
        outcome: &TurnOutcome,
        retried: bool,
    ) -> Result<Option<(CommitTurnParams, OutboxRow)>, HarnessError> {
        let durable = ctx.engine_active
            && ctx.info.declares_durable_turns()
            && ctx.serving.methods().contains(EngineMethod::CommitTurn);
        if !durable {
            return Ok(None);
        }
        let [user, assistant] = entries;
        let session_key = ctx.session_key();
        let session_id = ctx.session_id.as_str();
        let fallback = retried.then_some(ReasonCode::ContextOverflow);
        let at = &ctx.transcript_at;
        // The two entries go right after the transcript as the turn read it, in one generation.
        let anchor =
            |entry: &TranscriptEntry, offset: u64, parent: Option<String>| TranscriptEntryAnchor {
                agent_id: self.cfg.agent_id.clone(),
                session_id: session_id.to_string(),
                session_key: session_key.to_string(),
                // As the session target names it: the state store holding the transcript.
                store_path: self.store_for(session_key).location(),
                generation: at.generation.to_string(),
                entry_id: entry.entry_id.clone(),
                raw_seq: at.next_seq + offset,
                effective_parent_id: parent,
                active_message_position: at.len + offset,
                idempotency_key: None,
            };
        let params = CommitTurnParams {
            advancement_key: turn_id.to_string(),
            admission: TranscriptTurnAdmission {
                anchor: anchor(user, 0, at.last_id.clone()),
                logical_turn_id: turn_id.to_string(),
                role: "user".to_string(),
            },
            terminal: anchor(assistant, 1, Some(user.entry_id.clone())),
            messages: vec![user.message.clone(), assistant.message.clone()],
            session_id: session_id.to_string(),
            session_key: Some(session_key.to_string()),
            session_target: self
                .facts(session_key, session_id, Some(&outcome.thread_id))
                .session_target,
            runtime_settings: Some(self.runtime_settings(ctx.serving, fallback)),
            // The turn's facts (its token budget among them), kept with the queued commit as
            // OpenClaw keeps them; callbacks do not outlive the turn.
            runtime_context: Some(RuntimeContext {
                facts: self.facts(session_key, session_id, Some(&outcome.thread_id)),
                callbacks: None,
            }),
            is_heartbeat: ctx.spec.is_heartbeat.then_some(true),
        };
        let row = OutboxRow {
            session_id: session_id.to_string(),
            advancement_key: turn_id.to_string(),
            engine_id: ctx.info.id.clone(),
            params_json: serde_json::to_string(&params).map_err(|source| HarnessError::Encode {
                what: "commitTurn params",
                source,
            })?,
            attempts: 0,
            last_error: None,
        };
        Ok(Some((params, row)))
    }

    /// Tells the serving engine about a recorded turn: durable engines get an outbox row and
    /// `commitTurn`, others `afterTurn`, `ingestBatch` or `ingest` (the first they implement);
    /// then maintenance after the turn, and after a native compaction during it.
    /// `messages`: the transcript before the turn. `retried`: the turn ran on a fresh thread
    /// after a failure (reported as the fallback reason).
    pub(super) async fn notify_engine(
        &self,
        ctx: &TurnContext<'_>,
        messages: Messages,
        recorded: RecordedTurn,
        outcome: &TurnOutcome,
        retried: bool,
    ) -> Result<(), HarnessError> {
        let RecordedTurn { entries, commit } = recorded;
        let [user, assistant] = entries.map(|entry| entry.message);
        let serving = ctx.serving;
        let session_key = ctx.session_key();
        let session_id = ctx.session_id.as_str();
        let is_heartbeat = ctx.spec.is_heartbeat.then_some(true);
        let pre_prompt = messages.len();
        // The turn's two new messages; the whole transcript is copied only for `afterTurn`,
        // whose params carry it.
        let appended = vec![user.clone(), assistant.clone()];

        let fallback = retried.then_some(ReasonCode::ContextOverflow);
        let session_target = || {
            self.facts(session_key, session_id, Some(&outcome.thread_id))
                .session_target
        };

        let methods = serving.methods();
        if let Some(params) = commit {
            // Queued with the recorded turn (see `durable_commit`).
            self.commit_row(serving, session_key, session_id, params)
                .await;
        } else if methods.contains(EngineMethod::AfterTurn) {
            let params = project_host_params(
                AfterTurnParams {
                    session_id: session_id.to_string(),
                    session_key: Some(session_key.to_string()),
                    session_file: self.ensure_session_file(session_key, session_id),
                    session_target: session_target(),
                    messages: messages.iter().chain(&appended).cloned().collect(),
                    pre_prompt_message_count: pre_prompt as u64,
                    auto_compaction_summary: outcome
                        .auto_compaction
                        .as_ref()
                        .and_then(|c| c.summary.clone()),
                    is_heartbeat,
                    token_budget: Some(self.cfg.engine_token_budget()),
                    runtime_settings: Some(self.runtime_settings(serving, fallback)),
                    runtime_context: Some(self.runtime_context(
                        session_key,
                        session_id,
                        Some(&outcome.thread_id),
                        true,
                    )),
                },
                &ctx.info,
            );
            if let Err(e) = serving.after_turn(params).await {
                tracing::warn!(error = %e, "afterTurn failed");
            }
        } else if methods.contains(EngineMethod::IngestBatch) {
            let params = project_host_params(
                IngestBatchParams {
                    session_id: session_id.to_string(),
                    session_key: Some(session_key.to_string()),
                    messages: appended.clone(),
                    is_heartbeat,
                },
                &ctx.info,
            );
            if let Err(e) = serving.ingest_batch(params).await {
                tracing::warn!(error = %e, "ingestBatch failed");
            }
        } else {
            for message in &appended {
                let params = project_host_params(
                    IngestParams {
                        session_id: session_id.to_string(),
                        session_key: Some(session_key.to_string()),
                        message: Some(message.clone()),
                        is_heartbeat,
                    },
                    &ctx.info,
                );
                if let Err(e) = serving.ingest(params).await {
                    tracing::warn!(error = %e, "ingest failed");
                }
            }
        }

        // Maintenance after the turn, and after native compaction.
        self.maintain(
            serving,
            session_key,
            session_id,
            MaintainReason::Turn,
            Some(&outcome.thread_id),
        )
        .await;
        if outcome.auto_compaction.is_some() {
            self.maintain(
                serving,
                session_key,
                session_id,
                MaintainReason::Compaction,
                Some(&outcome.thread_id),
            )
            .await;
        }
        Ok(())
    }

    /// Commits one durable turn (from this turn or the outbox) and settles its outbox row.
    pub(super) async fn commit_row(
        &self,
        serving: &QuarantineEngine,
        session_key: &str,
        session_id: &str,
        mut params: CommitTurnParams,
    ) {
        let key = params.advancement_key.clone();
        // The turn's own facts, queued with the commit (its thread, its token budget), with
        // this call's callbacks; a row queued without facts gets the session's current ones.
        let live = self.runtime_context(session_key, session_id, None, true);
        params.runtime_context = Some(match params.runtime_context.take() {
            Some(queued) => RuntimeContext {
                facts: queued.facts,
                callbacks: live.callbacks,
            },
            None => live,
        });
        let params = project_host_params(params, &serving.info());
        let failed = |error: String| TurnWrite::FailOutbox {
            session_id: session_id.to_owned(),
            advancement_key: key.clone(),
            error,
        };
        let write = match serving.commit_turn(params).await {
            Ok(r) if r.is_settled() => TurnWrite::CompleteOutbox {
                session_id: session_id.to_owned(),
                advancement_key: key.clone(),
            },
            Ok(r) => {
                tracing::warn!(advancement_key = %key, status = %r.status, "commitTurn returned an unknown status; the turn stays queued");
                failed(format!("unknown status {:?}", r.status))
            }
            Err(e) => {
                tracing::warn!(advancement_key = %key, error = %e, "commitTurn failed; the turn stays queued");
                failed(e.to_string())
            }
        };
        if let Err(e) = self.store_for(session_key).submit(write).await {
            tracing::error!(advancement_key = %key, error = %e, "could not update the durable-turn outbox");
        }
    }

    /// Retries queued durable commits of a session (before its next turn, and after a
    /// restart). True when the outbox held none (rows found are not known gone afterwards).
    pub(super) async fn flush_outbox(&self, session_key: &str, session_id: &str) -> bool {
        let rows = match self.store_for(session_key).pending_outbox(session_id) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the durable-turn outbox");
                return false;
            }
        };
        if rows.is_empty() {
            return true;
        }
        for row in rows {
            if row.engine_id != self.engine.engine_id() || self.engine.is_quarantined() {
                tracing::warn!(advancement_key = %row.advancement_key, engine = %row.engine_id, "queued durable turn waits for its engine");
                continue;
            }
            let parsed = serde_json::from_str::<CommitTurnParams>(&row.params_json)
                .or_else(|e| self.upgrade_queued_commit(session_key, &row).ok_or(e));
            match parsed {
                Ok(params) => {
                    self.commit_row(&self.engine, session_key, session_id, params)
                        .await
                }
                Err(e) => {
                    tracing::error!(advancement_key = %row.advancement_key, error = %e, "queued commitTurn params are unreadable");
                }
            }
        }
        false
    }

    /// A commit queued by a build that sent the admitted and terminal entries as messages:
    /// the same commit with anchors, placed where the turn's entries (`<key>-user`,
    /// `<key>-assistant`) sit in the stored transcript. `None` when the row is not of that
    /// shape or its entries are no longer stored.
    fn upgrade_queued_commit(
        &self,
        session_key: &str,
        row: &OutboxRow,
    ) -> Option<CommitTurnParams> {
        let mut value: serde_json::Value = serde_json::from_str(&row.params_json).ok()?;
        let object = value.as_object_mut()?;
        if object.get("admission")?.get("role")?.as_str()? != "user" {
            return None;
        }
        let key = row.advancement_key.as_str();
        let transcript = self
            .store_for(session_key)
            .load_transcript(&row.session_id)
            .ok()?;
        let user_id = format!("{key}-user");
        let at = transcript.iter().position(|e| e.entry_id == user_id)?;
        let terminal = transcript.get(at + 1)?;
        let parent = at.checked_sub(1).map(|i| transcript[i].entry_id.clone());
        let place = |entry_id: &str, index: usize, parent: Option<String>| TranscriptEntryAnchor {
            agent_id: self.cfg.agent_id.clone(),
            session_id: row.session_id.clone(),
            session_key: session_key.to_string(),
            store_path: self.store_for(session_key).location(),
            generation: "0".to_string(),
            entry_id: entry_id.to_string(),
            raw_seq: index as u64,
            effective_parent_id: parent,
            active_message_position: index as u64,
            idempotency_key: None,
        };
        let admission = TranscriptTurnAdmission {
            anchor: place(&user_id, at, parent),
            logical_turn_id: key.to_string(),
            role: "user".to_string(),
        };
        let terminal = place(&terminal.entry_id, at + 1, Some(user_id.clone()));
        object.insert("admission".into(), serde_json::to_value(admission).ok()?);
        object.insert("terminal".into(), serde_json::to_value(terminal).ok()?);
        let upgraded = serde_json::from_value(value).ok();
        if upgraded.is_some() {
            tracing::info!(advancement_key = %key, "a commit queued by an earlier build was given its entries' anchors");
        }
        upgraded
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
                session_file: self.ensure_session_file(session_key, session_id),
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
        if id != LEGACY_ENGINE_ID
            && !self.engine.is_quarantined()
            && !self.cleared_old_quarantine.swap(true, Ordering::SeqCst)
        {
            if let Err(e) = self.store.clear_quarantine(id) {
                self.cleared_old_quarantine.store(false, Ordering::SeqCst);
                tracing::warn!(error = %e, "could not clear an old quarantine record");
            }
        }
        for record in self.engine.quarantine_book().records() {
            let row = QuarantineRecord {
                at_ms: now_ms(),
                ..record
            };
            if let Err(e) = self.store.record_quarantine(&row) {
                tracing::warn!(error = %e, "could not persist a quarantine record");
            }
        }
    }
}
