//! One turn of one session (docs/architecture.md#the-turn-algorithm): lock, bootstrap, assemble, plan (the pure
//! [`plan_turn`]), the backend turn with its one retry on a fresh thread, then record the turn
//! (transcript and binding together), notify the engine (`lifecycle`: commit or afterTurn,
//! maintenance) and report.

use std::time::Duration;

use tokio::sync::mpsc;
use tracing::Instrument;

use super::session::{SessionFacts, SessionGuard};
use super::thread_history::thread_start_unrecorded;
use super::tools::{
    available_tool_names, catalogue_fingerprint, tool_specs, turn_tools, with_caller_tools,
};
use super::{Harness, HarnessError, ThreadAction, TurnMetrics, TurnReport, TurnSpec};
use crate::backend::ThreadedBackend;
use crate::backend::{
    BackendError, ContextDelivery, ResumeThread, StartThread, ThreadId, TurnEvent, TurnOutcome,
    TurnRequest, TurnTools,
};
use crate::contract::{
    estimate_tokens, AgentMessage, AssembleParams, AssembleResult, CommitTurnParams, ContextEngine,
    EngineInfo, EngineMethod, HookCall, HostOperation, Messages, PromptAuthority,
    PromptBuildResult, HOOK_BEFORE_PROMPT_BUILD,
};
use crate::engines::LEGACY_ENGINE_ID;
use crate::host::params::project_host_params;
use crate::host::requirements::check_host_requirements;
use crate::metrics::TurnOutcomeKind;
use crate::projection::{
    context_cap_chars, developer_instructions_sha256, plan_turn, policy_fingerprint, EffectiveMode,
    InstructionDelivery, PlanInput, PolicyInputs, ThreadBinding, ThreadChoice, TurnPlan,
    BINDING_SCHEMA_VERSION,
};
use crate::quarantine::QuarantineEngine;
use crate::store::StateStoreExt;
use crate::store::TranscriptEntry;
use crate::util::now_ms;

/// What every step of one turn works with once the session is held and the serving engine
/// chosen (instead of long parameter lists).
pub(super) struct TurnContext<'a> {
    /// The caller's request.
    pub(super) spec: &'a TurnSpec,
    /// The session's current id (a compaction may have named a successor).
    pub(super) session_id: String,
    /// The held session (its lease generation fences the store writes).
    pub(super) guard: &'a SessionGuard,
    /// The engine serving this turn: the selected one, or legacy when degraded.
    pub(super) serving: &'a QuarantineEngine,
    /// The serving engine's info.
    pub(super) info: EngineInfo,
    /// An engine other than legacy answers this turn.
    pub(super) engine_active: bool,
    /// The serving engine's policy fingerprint.
    pub(super) policy_fingerprint: String,
    /// The host's tool catalogue fingerprint (configured tools and the engine's tools).
    pub(super) tools_fingerprint: String,
    /// The engine's `before_prompt_build` answer this turn, if it listens to the hook.
    pub(super) prompt_build: Option<PromptBuildResult>,
    /// The engine's tools offered to the model this turn, and their executor.
    pub(super) tools: TurnTools,
    /// Where this turn's rendered context goes.
    pub(super) context_delivery: ContextDelivery,
    /// Where the transcript ended before this turn (its entries' anchors start there).
    pub(super) transcript_at: TranscriptPosition,
}

/// Where a session's transcript ends: what a durable commit's anchors are placed after.
#[derive(Debug, Clone)]
pub(super) struct TranscriptPosition {
    /// The rewrite generation the positions count in (0 when the store cannot tell).
    pub(super) generation: u64,
    /// The sequence number the next entry gets.
    pub(super) next_seq: u64,
    /// How many messages the transcript holds.
    pub(super) len: u64,
    /// The id of its last message.
    pub(super) last_id: Option<String>,
}

impl TranscriptPosition {
    /// The end of `messages`, read at `cursor` (a store without cursors counts positions from
    /// the messages themselves).
    fn of(messages: &Messages, cursor: Option<crate::store::TranscriptCursor>) -> Self {
        let len = messages.len() as u64;
        TranscriptPosition {
            generation: cursor.map_or(0, |c| c.version),
            next_seq: cursor.map_or(len, |c| c.next_seq),
            len,
            last_id: messages.last().and_then(|m| m.id.clone()),
        }
    }
}

impl TurnContext<'_> {
    /// The engine the turn is recorded and reported under.
    pub(super) fn active_engine_id(&self) -> &str {
        if self.engine_active {
            self.info.id.as_str()
        } else {
            LEGACY_ENGINE_ID
        }
    }

    /// The session key of the turn.
    pub(super) fn session_key(&self) -> &str {
        &self.spec.session_key
    }
}

/// The backend's side of a turn it accepted.
struct ExecutedTurn {
    outcome: TurnOutcome,
    action: ThreadAction,
    /// The backend thread the turn started, recorded in the session's thread history with the
    /// turn.
    started: Option<ThreadStart>,
    /// Characters sent to the backend (input, instructions on start, injected text).
    backend_chars: usize,
    /// Time inside the backend's turn (`run_turn`).
    backend_time: Duration,
}

/// A backend thread a turn started, and how many messages the session's transcript held
/// before the turn, when known.
struct ThreadStart {
    thread: ThreadId,
    transcript_len: Option<usize>,
}

/// A backend failure of a turn, and whether it happened on a fresh thread.
struct FailedTurn {
    error: BackendError,
    fresh_thread: bool,
}

/// What a turn knows of its session before running on the backend.
#[derive(Debug, Clone, Copy)]
struct SessionSoFar {
    /// The session had a bound thread before this turn (a new thread is then a rotation).
    had_thread: bool,
    /// How many messages its transcript holds, when the turn's copy is still the store's.
    transcript_len: Option<usize>,
}

/// The two transcript entries a turn appended.
pub(super) struct RecordedTurn {
    /// The user's message and the model's reply, as written (also for the harness's own
    /// copies, its cached transcript and the session file, which follow the store once the
    /// caller has heard of the turn).
    pub(super) entries: [TranscriptEntry; 2],
    /// A durable engine's `commitTurn` params, queued in the outbox with the turn.
    pub(super) commit: Option<CommitTurnParams>,
}

impl Harness {
    /// Runs one turn of one session (docs/architecture.md#the-turn-algorithm).
    pub async fn turn(&self, spec: TurnSpec) -> Result<TurnReport, HarnessError> {
        self.turn_streaming(spec, None).await
    }

    /// As [`Harness::turn`], streaming reply events to `events`.
    pub async fn turn_streaming(
        &self,
        spec: TurnSpec,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Result<TurnReport, HarnessError> {
        let span = tracing::info_span!("turn", session = %spec.session_key, engine = %self.engine.engine_id());
        let started = std::time::Instant::now();
        let result = self.turn_inner(spec, events).instrument(span).await;
        let (outcome, backend) = match &result {
            Ok(report) => (TurnOutcomeKind::Completed, report.metrics.backend_time),
            Err(HarnessError::Backend { .. }) => (TurnOutcomeKind::BackendError, Duration::ZERO),
            Err(HarnessError::SessionBusy(_)) => (TurnOutcomeKind::SessionBusy, Duration::ZERO),
            Err(HarnessError::NotRecorded { .. }) => (TurnOutcomeKind::NotRecorded, Duration::ZERO),
            Err(_) => (TurnOutcomeKind::Error, Duration::ZERO),
        };
        self.metrics
            .turn_finished(outcome, started.elapsed(), backend);
        result
    }

    async fn turn_inner(
        &self,
        spec: TurnSpec,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Result<TurnReport, HarnessError> {
        // 1. Lock the session; load binding and transcript.
        // Where this call's thread work runs (serve: the connection of the client's request).
        let backend = spec.backend.clone().unwrap_or_else(|| self.backend.clone());
        let key = self.binding_key_for(&spec.session_key);
        let mut guard = self.lock_session(&spec.session_key, &key).await?;
        // Under a lease kept from this process's previous turn, what that turn learnt of the
        // session still holds: no read of it again.
        let known = guard.take_facts();
        let session_id = match &known {
            Some(facts) => facts.session_id.clone(),
            None => self.session_id(&spec.session_key)?,
        };
        let outbox_was_empty = match &known {
            Some(facts) if facts.outbox_empty => true,
            _ => self.flush_outbox(&spec.session_key, &session_id).await,
        };
        let stored = self.load_binding(&spec.session_key, &key).await?;
        // Under a kept lease, the copy this process left at the end of its last turn, if no
        // rewrite dropped it since; else a read of the store.
        let kept = match &known {
            Some(SessionFacts {
                transcript: Some(cursor),
                ..
            }) => self
                .cached_transcript(&session_id, *cursor)
                .await
                .map(|messages| (messages, Some(*cursor))),
            Some(facts) if facts.transcript_empty => Some((Messages::new(), None)),
            _ => None,
        };
        let (messages, read_at) = match kept {
            Some(kept) => kept,
            None => {
                self.session_messages(&spec.session_key, &session_id)
                    .await?
            }
        };
        let transcript_at = TranscriptPosition::of(&messages, read_at);
        // The session file starts from the transcript as it is before this turn.
        self.ensure_session_file(&spec.session_key, &session_id);

        // 2. Host requirements, fail closed (the engine that would run, quarantined or not).
        let info = self.engine.info();
        check_host_requirements(
            &info,
            HostOperation::AgentRun,
            self.backend.label(),
            &self.backend.capabilities(),
        )?;

        // The engine serving this logical turn: a partial durable declaration degrades it.
        let serving: &QuarantineEngine = match self.durable_degradation(&info) {
            Some(reason) => {
                self.warn_once(
                    format!("degraded:{}:{reason}", info.id),
                    &format!(
                        "context engine \"{}\" degraded to \"legacy\" for this turn: {reason}",
                        info.id
                    ),
                );
                &self.legacy
            }
            None => &self.engine,
        };

        // 3. First encounter → bootstrap + maintain(bootstrap).
        let engine_id = serving.active_engine_id().to_string();
        let all_bootstrapped = known.as_ref().is_some_and(|f| f.all_bootstrapped);
        let mut bootstrapped = known.map(|f| f.bootstrapped).unwrap_or_default();
        // A session this turn starts (no transcript, no binding, bootstrapped just now) that
        // ends before the backend answers is forgotten again (see `forget_unanswered`).
        let mut starts_session = false;
        if !bootstrapped.contains(&engine_id) {
            let marked = self
                .bootstrap_if_new(serving, &spec.session_key, &session_id, all_bootstrapped)
                .await?;
            starts_session = marked && messages.is_empty() && stored.is_none();
            bootstrapped.push(engine_id);
        }
        // Whether what this turn learns of the session holds at its end (a compaction may name
        // a successor session id).
        let mut facts_hold = true;

        // 4. assemble (and the pre-turn overflow check on backends without native compaction).
        let mut assembled = self.assemble(serving, &spec, &session_id, &messages).await;
        if self.overflow_precheck(serving, &assembled, &messages) {
            tracing::info!(
                "assembled context exceeds the token budget; compacting before the turn"
            );
            facts_hold = false;
            if let Err(error) = self
                .compact_locked(
                    &backend,
                    &spec.session_key,
                    &session_id,
                    stored.as_deref(),
                    &guard,
                )
                .await
            {
                self.forget_unanswered(&guard, starts_session, &session_id);
                return Err(error);
            }
            assembled = self.assemble(serving, &spec, &session_id, &messages).await;
        }
        // Active = an engine other than legacy answers this turn. Comparing wrappers by pointer
        // is not enough: a harness configured with legacy has its own legacy wrapper.
        let prompt_build = self
            .before_prompt_build(serving, &spec, &session_id, &assembled)
            .await;
        let engine_active = serving.active_engine_id() != LEGACY_ENGINE_ID;
        let serving_info = serving.info();
        // The engine's tools (docs/engine-protocol.md#the-engine-process-protocol): only an active engine offers any (legacy has none, a
        // quarantined engine lists none); they go into the catalogue fingerprint, so a changed
        // tool list starts a new thread (`dynamic-tools-mismatch`).
        let engine_tool_specs = if engine_active {
            tool_specs(&serving.tools())
        } else {
            Vec::new()
        };
        let context_delivery = self.context_delivery().await;
        let ctx = TurnContext {
            spec: &spec,
            policy_fingerprint: self.policy_fingerprint(&serving_info),
            tools_fingerprint: catalogue_fingerprint(&self.cfg.tools, &engine_tool_specs),
            tools: with_caller_tools(
                turn_tools(
                    &self.engine,
                    engine_tool_specs,
                    &session_id,
                    &spec.session_key,
                ),
                &spec.tools,
            )
            .map_err(|name| HarnessError::ToolConflict {
                session: spec.session_key.clone(),
                name,
            })?,
            session_id,
            guard: &guard,
            serving,
            info: serving_info,
            engine_active,
            prompt_build,
            context_delivery,
            transcript_at,
        };

        // 5–6. Plan and run; on an overflow on a resumed thread or a lost thread, retry once on
        // a fresh thread with the projection cleared.
        let mut stored_view = stored.clone();
        let mut retried = false;
        let (plan, executed) = loop {
            let plan = self.plan(&ctx, &assembled, stored_view.as_deref());
            match self
                .execute(
                    backend.as_ref(),
                    &spec,
                    &plan,
                    &ctx.tools,
                    SessionSoFar {
                        had_thread: stored.is_some(),
                        // A compaction before the turn may have rewritten the transcript.
                        transcript_len: facts_hold.then_some(messages.len()),
                    },
                    events.clone(),
                )
                .await
            {
                Ok(executed) => break (plan, executed),
                Err(FailedTurn {
                    error,
                    fresh_thread,
                }) => {
                    let recoverable = match &error {
                        BackendError::ContextOverflow { .. } => !fresh_thread && engine_active,
                        BackendError::ThreadNotFound { .. } => true,
                        _ => false,
                    };
                    if retried || !recoverable {
                        self.forget_unanswered(&guard, starts_session, &ctx.session_id);
                        return Err(HarnessError::Backend {
                            session: spec.session_key.clone(),
                            source: error,
                        });
                    }
                    tracing::warn!(error = %error, "retrying the turn once on a fresh thread with the projection cleared");
                    retried = true;
                    self.clear_binding(&guard, &key).await?;
                    stored_view = None;
                }
            }
        };

        if let Some(answered) = &spec.on_answered {
            answered(&executed.outcome);
            tokio::task::yield_now().await;
        }
        // 7. The transcript and the binding, then the engine (commit or afterTurn, maintenance).
        let recorded = match self.record_turn(&ctx, &plan, &executed, retried).await {
            Ok(recorded) => recorded,
            // The backend answered: the reply goes back to the caller with the failure.
            Err(HarnessError::Store { source, .. }) => {
                return Err(HarnessError::NotRecorded {
                    session: spec.session_key.clone(),
                    thread_id: executed.outcome.thread_id.0.clone(),
                    reply: executed.outcome.reply.clone(),
                    source: Box::new(source),
                })
            }
            Err(e) => return Err(e),
        };
        if let Some(recorded) = &spec.on_recorded {
            recorded(&executed.outcome);
            tokio::task::yield_now().await;
        }
        let recorded_cursor = self
            .extend_cached_transcript(&ctx.session_id, &recorded.entries)
            .await;
        self.append_session_file(&ctx.session_id, &recorded.entries);
        let queued_commit = recorded.commit.is_some();
        self.notify_engine(&ctx, messages, recorded, &executed.outcome, retried)
            .await?;
        self.persist_quarantines();
        let facts = SessionFacts {
            session_id: ctx.session_id.clone(),
            outbox_empty: outbox_was_empty && !queued_commit,
            bootstrapped,
            all_bootstrapped,
            transcript: recorded_cursor,
            transcript_empty: false,
        };
        let report = turn_report(&ctx, plan, executed, retried);
        if facts_hold {
            guard.keep_facts(facts);
        }
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "could not release the session lease; it will expire");
        }
        Ok(report)
    }

    /// Why this turn must run on legacy (docs/architecture.md#durable-turns-committurn), if it must.
    pub(super) fn durable_degradation(&self, info: &EngineInfo) -> Option<String> {
        if self.engine.is_quarantined() {
            return None;
        }
        let declared_any = info.transcript_semantics.as_ref().is_some_and(|sem| {
            sem.current_turn_fence.is_some() || sem.turn_advancement_idempotency.is_some()
        });
        if !declared_any {
            // Legacy, the baseline, is never degraded.
            let required = self.cfg.require_durable_turns && info.id != LEGACY_ENGINE_ID;
            return required.then(|| {
                "current-turn transcript fencing is not declared (plugins.requireDurableTurns)"
                    .to_string()
            });
        }
        if !info.declares_durable_turns() {
            return Some(
                "durable turns need both transcriptSemantics.currentTurnFence = \"before-current-turn-entry-v1\" and turnAdvancementIdempotency = \"atomic-idempotent-v1\"".into(),
            );
        }
        if !self.engine.methods().contains(EngineMethod::CommitTurn) {
            return Some(
                "the engine declares durable turns but does not implement commitTurn".into(),
            );
        }
        None
    }

    /// Forgets a session whose first turn ended before the backend answered: its bootstrap
    /// mark and its place among the store's sessions go, so a turn that failed (Codex not
    /// logged in, a backend that is down) leaves no session behind, and the next turn starts
    /// it as new (the engine's `session_start` and `bootstrap` run again; both are meant to be
    /// repeatable). `starts_session` false: nothing to forget.
    fn forget_unanswered(&self, guard: &SessionGuard, starts_session: bool, session_id: &str) {
        if !starts_session {
            return;
        }
        match guard.store().delete_session(session_id) {
            Ok(_) => tracing::debug!(
                session_id,
                "forgot a session whose first turn was not answered"
            ),
            Err(error) => tracing::warn!(
                session_id,
                %error,
                "could not forget a session whose first turn was not answered; the retention sweep will"
            ),
        }
    }

    pub(super) async fn assemble(
        &self,
        serving: &QuarantineEngine,
        spec: &TurnSpec,
        session_id: &str,
        messages: &Messages,
    ) -> AssembleResult {
        let info = serving.info();
        let params = project_host_params(
            AssembleParams {
                session_id: session_id.to_string(),
                session_key: Some(spec.session_key.clone()),
                messages: messages.clone(),
                token_budget: Some(self.cfg.engine_token_budget()),
                available_tools: Some(available_tool_names(&self.cfg.tools, &serving.tools())),
                citations_mode: self.cfg.citations_mode.clone(),
                model: self.cfg.model.clone(),
                prompt: Some(spec.prompt.clone()),
                runtime_settings: Some(self.runtime_settings(serving, None)),
                runtime_context: Some(self.runtime_context(
                    &spec.session_key,
                    session_id,
                    None,
                    false,
                )),
            },
            &info,
        );
        match serving.assemble(params).await {
            Ok(r) => r,
            // The guard already fell back to legacy for failures; what is left is a cancellation.
            Err(e) => {
                tracing::warn!(error = %e, "assemble returned no result; using the transcript as is");
                AssembleResult {
                    messages: messages.clone(),
                    ..Default::default()
                }
            }
        }
    }

    /// The `ctx` of a session's hook call.
    pub(super) fn hook_ctx(&self, session_key: &str, session_id: &str) -> serde_json::Value {
        serde_json::json!({
            "agentId": self.cfg.agent_id,
            "sessionId": session_id,
            "sessionKey": session_key,
            "workspaceDir": self.cfg.cwd,
        })
    }

    /// Runs `before_prompt_build {prompt, messages}` after `assemble` when the engine listens
    /// to it. A failed call quarantines the engine (its wrapper answers `null`); an answer
    /// that is not the hook's result shape is logged and ignored.
    pub(super) async fn before_prompt_build(
        &self,
        serving: &QuarantineEngine,
        spec: &TurnSpec,
        session_id: &str,
        assembled: &AssembleResult,
    ) -> Option<PromptBuildResult> {
        if !serving
            .hooks()
            .iter()
            .any(|h| h == HOOK_BEFORE_PROMPT_BUILD)
        {
            return None;
        }
        let call = HookCall {
            event: serde_json::json!({"prompt": spec.prompt, "messages": assembled.messages}),
            ctx: self.hook_ctx(&spec.session_key, session_id),
        };
        let value = match serving.call_hook(HOOK_BEFORE_PROMPT_BUILD, call).await {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(error = %e, "before_prompt_build hook failed");
                return None;
            }
        };
        if value.is_null() || serving.is_quarantined() {
            return None;
        }
        match serde_json::from_value::<PromptBuildResult>(value) {
            Ok(result) => Some(result),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a malformed before_prompt_build result");
                None
            }
        }
    }

    /// docs/architecture.md#compaction-on-threaded-backends pre-turn overflow check: only on backends without native auto-compaction.
    pub(super) fn overflow_precheck(
        &self,
        serving: &QuarantineEngine,
        assembled: &AssembleResult,
        messages: &[AgentMessage],
    ) -> bool {
        if self.backend.has_native_auto_compaction() {
            return false;
        }
        let Some(budget) = self.cfg.token_budget else {
            return false;
        };
        let info = serving.info();
        let preassembly =
            assembled.prompt_authority == Some(PromptAuthority::PreassemblyMayOverflow);
        if info.owns_compaction() && !preassembly {
            return false;
        }
        let mut estimate = assembled.estimated_tokens;
        if preassembly {
            let chars: usize = messages
                .iter()
                .map(|m| m.plain_text().chars().count())
                .sum();
            estimate = estimate.max(estimate_tokens(chars));
        }
        estimate > budget as f64
    }

    /// Where this turn's rendered context goes: the configured delivery on a backend with the
    /// channel (else the turn input); unconfigured, additional context when the connected
    /// backend keeps it across compaction (Codex from 0.171.0).
    pub(super) async fn context_delivery(&self) -> ContextDelivery {
        if self.backend.profile().additional_context_bytes == 0 {
            return ContextDelivery::TurnInput;
        }
        match self.cfg.context_delivery {
            Some(configured) => configured,
            None if self.backend.keeps_additional_context().await => {
                ContextDelivery::AdditionalContext
            }
            None => ContextDelivery::TurnInput,
        }
    }

    /// Plans the turn with [`plan_turn`] and logs its warning and the projection decision.
    fn plan(
        &self,
        ctx: &TurnContext<'_>,
        assembled: &AssembleResult,
        stored: Option<&ThreadBinding>,
    ) -> TurnPlan {
        let plan = plan_turn(&PlanInput {
            prompt: &ctx.spec.prompt,
            engine_active: ctx.engine_active,
            engine_id: &ctx.info.id,
            policy_fingerprint: &ctx.policy_fingerprint,
            tools_fingerprint: &ctx.tools_fingerprint,
            assembled,
            stored,
            backend: self.backend.kind(),
            transcript_byte_limit: self.cfg.transcript_byte_limit,
            developer_instructions: self.cfg.developer_instructions.as_deref(),
            drift_policy: self.cfg.drift_policy,
            sends_instructions_per_request: self.backend.sends_instructions_per_request(),
            token_budget: self.cfg.token_budget,
            turn_input_limit: self.backend.turn_input_limit(),
            prompt_build: ctx.prompt_build.as_ref(),
            context_delivery: ctx.context_delivery,
            additional_context_limit: self.backend.profile().additional_context_bytes,
        });
        let prompt_chars = ctx.spec.prompt.chars().count();
        let limit = self.backend.turn_input_limit();
        if prompt_chars > limit && !plan.input.ends_with(ctx.spec.prompt.as_str()) {
            tracing::warn!(
                session = %ctx.session_key(),
                "the prompt ({prompt_chars} chars) is over the backend's turn-input limit ({limit} chars): it was cut to fit"
            );
        }
        let decision = &plan.decision;
        if let Some(w) = &decision.warning {
            tracing::warn!(session = %ctx.session_key(), "{w}");
        }
        tracing::info!(
            session = %ctx.session_key(),
            engine = %ctx.info.id,
            mode = %decision.mode,
            // Absent values are left out of the event (as `turn --json` has them null), not
            // written as empty strings.
            epoch = decision.epoch.as_deref(),
            fingerprint = decision.fingerprint.as_deref(),
            previous_thread = decision.previous_thread.as_ref().map(|t| t.as_str()),
            previous_epoch = decision.previous_epoch.as_deref(),
            projected = decision.projected(),
            reason = %decision.reason,
            rendered_chars = plan.rendered_context_chars,
            context_delivery = plan.context_delivery.map_or("none", ContextDelivery::as_str),
            bounded = plan.bounded,
            "projection decision"
        );
        let rendered = if decision.mode == EffectiveMode::None {
            0
        } else {
            plan.rendered_context_chars
        };
        self.metrics
            .projection_decided(decision.reason.as_str(), decision.projected(), rendered);
        plan
    }

    pub(super) fn policy_fingerprint(&self, info: &EngineInfo) -> String {
        policy_fingerprint(&PolicyInputs {
            engine_id: &info.id,
            engine_version: info.version.as_deref(),
            owns_compaction: info.owns_compaction(),
            turn_maintenance_mode: info.turn_maintenance_mode(),
            citations_mode: self.cfg.citations_mode.as_deref(),
            context_token_budget: self.cfg.token_budget,
            projection_max_chars: context_cap_chars(self.cfg.token_budget) as u64,
        })
    }

    /// Starts / resumes the thread, delivers drifted instructions and runs the turn.
    /// `had_thread`: the session had a bound thread before this turn (a new thread is then a
    /// rotation, also on a retry). Resuming is the backend's business: it knows whether its
    /// connection has the thread loaded, and resuming a loaded thread does nothing.
    async fn execute(
        &self,
        backend: &dyn ThreadedBackend,
        spec: &TurnSpec,
        plan: &TurnPlan,
        tools: &TurnTools,
        so_far: SessionSoFar,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Result<ExecutedTurn, FailedTurn> {
        let failed = |fresh_thread: bool| {
            move |error: BackendError| FailedTurn {
                error,
                fresh_thread,
            }
        };
        let mut backend_chars = 0usize;
        let (thread, action, started) = match &plan.decision.thread {
            ThreadChoice::New => {
                let thread = backend
                    .start_thread(StartThread {
                        base_instructions: self.cfg.base_instructions.clone(),
                        developer_instructions: plan.effective_instructions.clone(),
                        model: self.cfg.model.clone(),
                        tools: tools.specs.clone(),
                    })
                    .await
                    .map_err(failed(true))?;
                backend_chars += plan
                    .effective_instructions
                    .as_deref()
                    .map_or(0, |s| s.chars().count());
                let action = if so_far.had_thread {
                    ThreadAction::Rotated
                } else {
                    ThreadAction::Started
                };
                let started = ThreadStart {
                    thread: thread.clone(),
                    transcript_len: so_far.transcript_len,
                };
                (thread, action, Some(started))
            }
            ThreadChoice::Reuse(thread) => {
                backend
                    .resume_thread(
                        thread,
                        &ResumeThread {
                            base_instructions: self.cfg.base_instructions.clone(),
                            developer_instructions: plan.resume_instructions.clone(),
                        },
                    )
                    .await
                    .map_err(failed(false))?;
                if let InstructionDelivery::Inject(text) = &plan.delivery {
                    backend
                        .inject_developer_message(thread, text)
                        .await
                        .map_err(failed(false))?;
                    backend_chars += text.chars().count();
                }
                (thread.clone(), ThreadAction::Resumed, None)
            }
        };
        let (tx, mut rx) = mpsc::channel::<TurnEvent>(256);
        // Forwarded in this task rather than a spawned one: a spawn per turn costs a
        // cross-thread wake-up on the multi-thread runtime (docs/benchmarks.md).
        let forward = async move {
            while let Some(ev) = rx.recv().await {
                if let Some(out) = &events {
                    let _ = out.send(ev).await;
                }
            }
        };
        let turn_started = std::time::Instant::now();
        let (outcome, ()) = tokio::join!(
            backend.run_turn(
                TurnRequest {
                    thread_id: thread,
                    input: plan.input.clone(),
                    developer_instructions: plan.effective_instructions.clone(),
                    base_instructions: self.cfg.base_instructions.clone(),
                    tools: tools.clone(),
                    additional_context: plan.additional_context.clone(),
                    options: spec.options.clone(),
                },
                tx,
            ),
            forward
        );
        let backend_time = turn_started.elapsed();
        backend_chars += plan.input.chars().count()
            + plan
                .additional_context
                .as_deref()
                .map_or(0, |c| c.chars().count());
        let outcome = outcome.map_err(failed(started.is_some()))?;
        Ok(ExecutedTurn {
            outcome,
            action,
            started,
            backend_chars,
            backend_time,
        })
    }

    /// Appends the turn to the transcript and writes the binding, in one store transaction,
    /// right after the backend accepted the turn: the thread has received what the binding
    /// records. Written before the engine's commit/afterTurn/maintain, it survives ctxbridge
    /// dying in one of those (the restarted turn reuses the thread instead of re-projecting
    /// elsewhere).
    async fn record_turn(
        &self,
        ctx: &TurnContext<'_>,
        plan: &TurnPlan,
        executed: &ExecutedTurn,
        retried: bool,
    ) -> Result<RecordedTurn, HarnessError> {
        let outcome = &executed.outcome;
        let turn_id = uuid::Uuid::now_v7().simple().to_string();
        let now = now_ms();
        let mut user =
            AgentMessage::user(ctx.spec.prompt.clone()).with_id(format!("{turn_id}-user"));
        user.timestamp = Some(serde_json::json!(now));
        let mut assistant =
            AgentMessage::assistant(outcome.reply.clone()).with_id(format!("{turn_id}-assistant"));
        assistant.timestamp = Some(serde_json::json!(now));
        let binding = ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: self.binding_key_for(ctx.session_key()),
            backend: self.backend.kind(),
            thread_id: outcome.thread_id.clone(),
            engine: plan
                .decision
                .engine_binding(ctx.active_engine_id(), &ctx.policy_fingerprint),
            tools_fingerprint: ctx.tools_fingerprint.clone(),
            developer_instructions_sha256: developer_instructions_sha256(
                plan.effective_instructions.as_deref(),
            ),
            developer_instructions: plan.effective_instructions.clone(),
            // A compaction during the turn dropped the additional context it holds.
            context_refresh: outcome.auto_compaction.is_some()
                && plan.decision.mode == EffectiveMode::ThreadBootstrap
                && ctx.context_delivery == ContextDelivery::AdditionalContext,
            generation: ctx.guard.generation(),
            updated_at: now_ms(),
        };
        let entries = [
            TranscriptEntry {
                entry_id: format!("{turn_id}-user"),
                message: user,
            },
            TranscriptEntry {
                entry_id: format!("{turn_id}-assistant"),
                message: assistant,
            },
        ];
        let (commit, outbox_row) =
            match self.durable_commit(ctx, &turn_id, &entries, outcome, retried)? {
                Some((params, row)) => (Some(params), Some(row)),
                None => (None, None),
            };
        // Where the turn's new backend thread begins (read before the record can land) goes
        // beside the record: a store that groups writes runs both in one transaction.
        let thread_start = executed.started.as_ref().and_then(|started| {
            self.thread_start_write(ctx.session_key(), &started.thread, started.transcript_len)
                .map(|write| (write, &started.thread))
        });
        let thread_start = async {
            if let Some((write, thread)) = thread_start {
                if let Err(error) = ctx.guard.store().submit(write).await {
                    thread_start_unrecorded(ctx.session_key(), thread, &error);
                }
            }
        };
        let (recorded, ()) = tokio::join!(
            self.record_turn_state(&ctx.session_id, &entries, binding, outbox_row, ctx.guard),
            thread_start
        );
        recorded?;
        Ok(RecordedTurn { entries, commit })
    }
}

/// The `turn --json` report of a turn that went through.
fn turn_report(
    ctx: &TurnContext<'_>,
    plan: TurnPlan,
    executed: ExecutedTurn,
    retried: bool,
) -> TurnReport {
    let decision = &plan.decision;
    let delivery = match (&plan.delivery, executed.action) {
        (_, ThreadAction::Started | ThreadAction::Rotated) => "thread-start",
        (InstructionDelivery::Inject(_), _) => "inject",
        _ => "unchanged",
    };
    TurnReport {
        session_key: ctx.session_key().to_string(),
        engine_id: ctx.active_engine_id().to_string(),
        mode: decision.mode.as_str().to_string(),
        epoch: decision.epoch.clone(),
        fingerprint: decision.fingerprint.clone(),
        thread_id: executed.outcome.thread_id.0.clone(),
        thread_action: executed.action,
        projected: decision.projected(),
        reason: decision.reason.as_str().to_string(),
        prompt_chars: plan.input.chars().count(),
        developer_instructions_chars: plan
            .effective_instructions
            .as_deref()
            .map_or(0, |s| s.chars().count()),
        developer_instructions_delivery: delivery.to_string(),
        context_delivery: plan
            .context_delivery
            .map_or("none", ContextDelivery::as_str)
            .to_string(),
        metrics: TurnMetrics {
            backend_chars: executed.backend_chars,
            rendered_context_chars: if decision.mode == EffectiveMode::None {
                0
            } else {
                plan.rendered_context_chars
            },
            retried,
            auto_compacted: executed.outcome.auto_compaction.is_some(),
            backend_time: executed.backend_time,
            usage: executed.outcome.usage,
        },
        reply: executed.outcome.reply,
    }
}
