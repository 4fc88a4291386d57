//! One turn of one session (SPEC §11): lock, bootstrap, assemble, bound/decide/render, the
//! backend turn with its one retry on a fresh thread, then commit or afterTurn, maintenance and
//! the binding.

use super::*;

impl Harness {
    /// Runs one turn of one session (SPEC §11).
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
        self.turn_inner(spec, events).instrument(span).await
    }

    pub(super) async fn turn_inner(
        &self,
        spec: TurnSpec,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Result<TurnReport, HarnessError> {
        // 1. Lock the session; load binding and transcript.
        let key = self.binding_key_for(&spec.session_key);
        let guard = self.lock_session(&key).await?;
        let session_id = self.session_id(&spec.session_key)?;
        self.flush_outbox(&spec.session_key, &session_id).await;
        let stored = self.load_binding(&key).await?;
        let transcript = self
            .store
            .load_transcript(&session_id)
            .map_err(store_err("load transcript"))?;
        let messages: Vec<AgentMessage> = transcript.into_iter().map(|e| e.message).collect();

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
        self.bootstrap_if_new(serving, &spec.session_key, &session_id)
            .await?;

        // 4. assemble (and the pre-turn overflow check on backends without native compaction).
        let mut assembled = self.assemble(serving, &spec, &session_id, &messages).await;
        if self.overflow_precheck(serving, &assembled, &messages) {
            tracing::info!(
                "assembled context exceeds the token budget; compacting before the turn"
            );
            self.compact_locked(&spec.session_key, &session_id, stored.as_deref())
                .await?;
            assembled = self.assemble(serving, &spec, &session_id, &messages).await;
        }
        // Active = an engine other than legacy answers this turn. Comparing wrappers by pointer
        // is not enough: a harness configured with legacy has its own legacy wrapper.
        let engine_active = serving.active_engine_id() != crate::engines::LEGACY_ENGINE_ID;
        let serving_info = serving.info();

        // 5–8. Plan, run, and on an overflow on a resumed thread or a lost thread, retry once on
        // a fresh thread with the projection cleared.
        let mut stored_view = stored.clone();
        let mut retried = false;
        loop {
            let plan = self.plan(
                &spec,
                &serving_info,
                engine_active,
                &assembled,
                stored_view.as_deref(),
            );
            match self
                .execute(&spec, &plan, stored.is_some(), events.clone())
                .await
            {
                Ok((outcome, action, backend_chars)) => {
                    let report = self
                        .finish_turn(
                            &spec,
                            &session_id,
                            &guard,
                            serving,
                            &serving_info,
                            engine_active,
                            messages,
                            plan,
                            outcome,
                            action,
                            backend_chars,
                            retried,
                        )
                        .await?;
                    if let Err(e) = guard.release() {
                        tracing::warn!(error = %e, "could not release the session lease; it will expire");
                    }
                    return Ok(report);
                }
                Err((error, fresh_thread)) => {
                    let recoverable = match &error {
                        BackendError::ContextOverflow { .. } => !fresh_thread && engine_active,
                        BackendError::ThreadNotFound { .. } => true,
                        _ => false,
                    };
                    if retried || !recoverable {
                        return Err(HarnessError::Backend {
                            session: spec.session_key.clone(),
                            source: error,
                        });
                    }
                    tracing::warn!(error = %error, "retrying the turn once on a fresh thread with the projection cleared");
                    retried = true;
                    self.clear_binding(&key).await?;
                    stored_view = None;
                }
            }
        }
    }

    /// Why this turn must run on legacy (SPEC §6), if it must.
    pub(super) fn durable_degradation(&self, info: &EngineInfo) -> Option<String> {
        if self.engine.is_quarantined() {
            return None;
        }
        let sem = info.transcript_semantics.as_ref()?;
        let declared_any =
            sem.current_turn_fence.is_some() || sem.turn_advancement_idempotency.is_some();
        if !declared_any {
            return None;
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

    pub(super) async fn bootstrap_if_new(
        &self,
        serving: &QuarantineEngine,
        session_key: &str,
        session_id: &str,
    ) -> Result<(), HarnessError> {
        let engine_id = serving.active_engine_id().to_string();
        let done = self
            .store
            .is_bootstrapped(session_id, &engine_id)
            .map_err(store_err("read bootstrap mark"))?;
        if done {
            return Ok(());
        }
        let info = serving.info();
        let methods = serving.methods();
        if methods.contains(EngineMethod::Bootstrap) {
            let params = project_host_params(
                BootstrapParams {
                    session_id: session_id.to_string(),
                    session_key: Some(session_key.to_string()),
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
        self.store
            .mark_bootstrapped(session_id, &engine_id)
            .map_err(store_err("mark bootstrapped"))?;
        Ok(())
    }

    pub(super) async fn assemble(
        &self,
        serving: &QuarantineEngine,
        spec: &TurnSpec,
        session_id: &str,
        messages: &[AgentMessage],
    ) -> AssembleResult {
        let info = serving.info();
        let params = project_host_params(
            AssembleParams {
                session_id: session_id.to_string(),
                session_key: Some(spec.session_key.clone()),
                messages: messages.to_vec(),
                token_budget: self.cfg.token_budget,
                available_tools: Some(self.cfg.tools.clone()),
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
                    messages: messages.to_vec(),
                    ..Default::default()
                }
            }
        }
    }

    /// SPEC §10 pre-turn overflow check: only on backends without native auto-compaction.
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
            estimate = estimate.max(chars as f64 / 4.0);
        }
        estimate > budget as f64
    }

    pub(super) fn plan(
        &self,
        spec: &TurnSpec,
        info: &EngineInfo,
        engine_active: bool,
        assembled: &AssembleResult,
        stored: Option<&ThreadBinding>,
    ) -> Plan {
        let policy = self.policy_fingerprint(info);
        let tools = tools_fingerprint(&self.cfg.tools);
        let bounded = bound_assembled(assembled, self.cfg.transcript_byte_limit);
        let requested = if engine_active {
            bounded.projection()
        } else {
            None
        };
        let mut decision = decide(&DecisionInput {
            engine_active,
            engine_id: &info.id,
            policy_fingerprint: &policy,
            tools_fingerprint: &tools,
            requested,
            stored,
            backend: self.backend.kind(),
        });
        if let Some(w) = &decision.warning {
            tracing::warn!(session = %spec.session_key, "{w}");
        }
        let addition = if engine_active {
            bounded.system_prompt_addition
        } else {
            None
        };
        let effective =
            effective_developer_instructions(self.cfg.developer_instructions.as_deref(), addition);
        let thread_is_new = matches!(decision.thread, ThreadChoice::New);
        let mut delivery = plan_instruction_delivery(
            effective.as_deref(),
            stored.map(|b| b.developer_instructions_sha256.as_str()),
            self.cfg.drift_policy,
            thread_is_new,
            self.backend.sends_instructions_per_request(),
        );
        if delivery == InstructionDelivery::Rotate {
            decision = decision.force_new_thread();
            delivery = InstructionDelivery::ThreadStart;
        }
        let render_mode = decision.render_mode();
        let messages: &[AgentMessage] = if render_mode.is_some() {
            bounded.messages
        } else {
            &[]
        };
        let rendered = render_turn_input(
            messages,
            &spec.prompt,
            &RenderOptions {
                mode: render_mode.unwrap_or(RenderMode::PerTurn),
                token_budget: self.cfg.token_budget,
                turn_input_limit: self.backend.turn_input_limit(),
            },
        );
        tracing::info!(
            session = %spec.session_key,
            engine = %info.id,
            mode = %decision.mode,
            epoch = decision.epoch.as_deref().unwrap_or(""),
            fingerprint = decision.fingerprint.as_deref().unwrap_or(""),
            previous_thread = decision.previous_thread.as_ref().map_or("", |t| t.as_str()),
            previous_epoch = decision.previous_epoch.as_deref().unwrap_or(""),
            projected = decision.projected(),
            reason = %decision.reason,
            rendered_chars = rendered.context_chars,
            bounded = bounded.bounded,
            "projection decision"
        );
        Plan {
            rendered_context_chars: rendered.context_chars,
            input: rendered.text,
            decision,
            effective_instructions: effective,
            delivery,
        }
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

    pub(super) fn is_attached(&self, thread: &ThreadId) -> bool {
        self.attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(thread)
    }

    pub(super) fn mark_attached(&self, thread: &ThreadId) {
        self.attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(thread.clone());
    }

    /// Starts / resumes the thread, delivers drifted instructions and runs the turn. The error
    /// side says whether the thread was fresh. `had_thread`: the session had a bound thread
    /// before this turn (a new thread is then a rotation, also on a retry).
    pub(super) async fn execute(
        &self,
        spec: &TurnSpec,
        plan: &Plan,
        had_thread: bool,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Result<(TurnOutcome, ThreadAction, usize), (BackendError, bool)> {
        let mut backend_chars = 0usize;
        let (thread, action, fresh) = match &plan.decision.thread {
            ThreadChoice::New => {
                let thread = self
                    .backend
                    .start_thread(StartThread {
                        base_instructions: self.cfg.base_instructions.clone(),
                        developer_instructions: plan.effective_instructions.clone(),
                        model: self.cfg.model.clone(),
                    })
                    .await
                    .map_err(|e| (e, true))?;
                self.mark_attached(&thread);
                backend_chars += plan
                    .effective_instructions
                    .as_deref()
                    .map_or(0, |s| s.chars().count());
                let action = if had_thread {
                    ThreadAction::Rotated
                } else {
                    ThreadAction::Started
                };
                (thread, action, true)
            }
            ThreadChoice::Reuse(thread) => {
                if !self.is_attached(thread) {
                    self.backend
                        .resume_thread(thread)
                        .await
                        .map_err(|e| (e, false))?;
                    self.mark_attached(thread);
                }
                if let InstructionDelivery::Inject(text) = &plan.delivery {
                    self.backend
                        .inject_developer_message(thread, text)
                        .await
                        .map_err(|e| (e, false))?;
                    backend_chars += text.chars().count();
                }
                (thread.clone(), ThreadAction::Resumed, false)
            }
        };
        let (tx, mut rx) = mpsc::channel::<TurnEvent>(256);
        // Forwarded in this task rather than a spawned one: a spawn per turn costs a
        // cross-thread wake-up on the multi-thread runtime (see README, Benchmarks).
        let forward = async move {
            while let Some(ev) = rx.recv().await {
                if let Some(out) = &events {
                    let _ = out.send(ev).await;
                }
            }
        };
        let (outcome, ()) = tokio::join!(
            self.backend.run_turn(
                TurnRequest {
                    thread_id: thread,
                    input: plan.input.clone(),
                    developer_instructions: plan.effective_instructions.clone(),
                    base_instructions: self.cfg.base_instructions.clone(),
                },
                tx,
            ),
            forward
        );
        backend_chars += plan.input.chars().count();
        let _ = &spec;
        outcome
            .map(|o| (o, action, backend_chars))
            .map_err(|e| (e, fresh))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_turn(
        &self,
        spec: &TurnSpec,
        session_id: &str,
        guard: &SessionGuard,
        serving: &QuarantineEngine,
        info: &EngineInfo,
        engine_active: bool,
        mut messages: Vec<AgentMessage>,
        plan: Plan,
        outcome: TurnOutcome,
        action: ThreadAction,
        backend_chars: usize,
        retried: bool,
    ) -> Result<TurnReport, HarnessError> {
        // 7. Transcript append.
        let turn_id = uuid::Uuid::now_v7().simple().to_string();
        let now = now_ms();
        let mut user = AgentMessage::user(spec.prompt.clone()).with_id(format!("{turn_id}-user"));
        user.timestamp = Some(serde_json::json!(now));
        let mut assistant =
            AgentMessage::assistant(outcome.reply.clone()).with_id(format!("{turn_id}-assistant"));
        assistant.timestamp = Some(serde_json::json!(now));
        // The transcript and the binding advance together, in one store transaction, right
        // after the backend accepted the turn: the thread has received what the binding
        // records. Writing it before the engine's commit/afterTurn/maintain keeps it when
        // ctxbridge dies in one of those (the restarted turn reuses the thread instead of
        // re-projecting elsewhere).
        let decision = &plan.decision;
        let active_id = if engine_active {
            info.id.as_str()
        } else {
            crate::engines::LEGACY_ENGINE_ID
        };
        let policy = self.policy_fingerprint(info);
        let binding = ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: self.binding_key_for(&spec.session_key),
            backend: self.backend.kind(),
            thread_id: outcome.thread_id.clone(),
            engine: decision.engine_binding(active_id, &policy),
            tools_fingerprint: tools_fingerprint(&self.cfg.tools),
            developer_instructions_sha256: developer_instructions_sha256(
                plan.effective_instructions.as_deref(),
            ),
            generation: guard.generation(),
            updated_at: now_ms(),
        };
        let entries = [
            TranscriptEntry {
                entry_id: format!("{turn_id}-user"),
                message: user.clone(),
            },
            TranscriptEntry {
                entry_id: format!("{turn_id}-assistant"),
                message: assistant.clone(),
            },
        ];
        self.record_turn_state(session_id, &entries, binding, guard)
            .await?;

        let pre_prompt = messages.len();
        messages.push(user.clone());
        messages.push(assistant.clone());

        let fallback = retried.then_some(ReasonCode::ContextOverflow);
        let auto_summary = outcome
            .auto_compaction
            .as_ref()
            .and_then(|c| c.summary.clone());

        // Durable engines → outbox + commitTurn; others → afterTurn / ingestBatch / ingest.
        let methods = serving.methods();
        let durable = engine_active
            && info.declares_durable_turns()
            && methods.contains(EngineMethod::CommitTurn);
        if durable {
            let params = CommitTurnParams {
                advancement_key: turn_id.clone(),
                admission: user.clone(),
                terminal: assistant.clone(),
                messages: vec![user, assistant],
                session_id: session_id.to_string(),
                session_key: Some(spec.session_key.clone()),
                session_target: self
                    .facts(&spec.session_key, session_id, Some(&outcome.thread_id))
                    .session_target,
                runtime_settings: Some(self.runtime_settings(serving, fallback)),
                runtime_context: None,
                is_heartbeat: spec.is_heartbeat.then_some(true),
            };
            let row = OutboxRow {
                session_id: session_id.to_string(),
                advancement_key: turn_id.clone(),
                engine_id: info.id.clone(),
                params_json: serde_json::to_string(&params).map_err(|e| HarnessError::Encode {
                    what: "commitTurn params",
                    message: e.to_string(),
                })?,
                attempts: 0,
                last_error: None,
            };
            self.store
                .enqueue_outbox(&row)
                .map_err(store_err("enqueue outbox row"))?;
            self.commit_row(serving, &spec.session_key, session_id, params)
                .await;
        } else if methods.contains(EngineMethod::AfterTurn) {
            let params = project_host_params(
                AfterTurnParams {
                    session_id: session_id.to_string(),
                    session_key: Some(spec.session_key.clone()),
                    session_target: self
                        .facts(&spec.session_key, session_id, Some(&outcome.thread_id))
                        .session_target,
                    messages: messages.clone(),
                    pre_prompt_message_count: pre_prompt as u64,
                    auto_compaction_summary: auto_summary.clone(),
                    is_heartbeat: spec.is_heartbeat.then_some(true),
                    token_budget: self.cfg.token_budget,
                    runtime_settings: Some(self.runtime_settings(serving, fallback)),
                    runtime_context: Some(self.runtime_context(
                        &spec.session_key,
                        session_id,
                        Some(&outcome.thread_id),
                        true,
                    )),
                },
                info,
            );
            if let Err(e) = serving.after_turn(params).await {
                tracing::warn!(error = %e, "afterTurn failed");
            }
        } else if methods.contains(EngineMethod::IngestBatch) {
            let params = project_host_params(
                IngestBatchParams {
                    session_id: session_id.to_string(),
                    session_key: Some(spec.session_key.clone()),
                    messages: messages[pre_prompt..].to_vec(),
                    is_heartbeat: spec.is_heartbeat.then_some(true),
                },
                info,
            );
            if let Err(e) = serving.ingest_batch(params).await {
                tracing::warn!(error = %e, "ingestBatch failed");
            }
        } else {
            for message in &messages[pre_prompt..] {
                let params = project_host_params(
                    IngestParams {
                        session_id: session_id.to_string(),
                        session_key: Some(spec.session_key.clone()),
                        message: Some(message.clone()),
                        is_heartbeat: spec.is_heartbeat.then_some(true),
                    },
                    info,
                );
                if let Err(e) = serving.ingest(params).await {
                    tracing::warn!(error = %e, "ingest failed");
                }
            }
        }

        // Maintenance after the turn, and after native compaction.
        self.maintain(
            serving,
            &spec.session_key,
            session_id,
            MaintainReason::Turn,
            Some(&outcome.thread_id),
        )
        .await;
        if outcome.auto_compaction.is_some() {
            self.maintain(
                serving,
                &spec.session_key,
                session_id,
                MaintainReason::Compaction,
                Some(&outcome.thread_id),
            )
            .await;
        }

        self.persist_quarantines();

        let delivery = match (&plan.delivery, action) {
            (_, ThreadAction::Started | ThreadAction::Rotated) => "thread-start",
            (InstructionDelivery::Inject(_), _) => "inject",
            _ => "unchanged",
        };
        Ok(TurnReport {
            session_key: spec.session_key.clone(),
            engine_id: active_id.to_string(),
            mode: decision.mode.as_str().to_string(),
            epoch: decision.epoch.clone(),
            fingerprint: decision.fingerprint.clone(),
            thread_id: outcome.thread_id.0.clone(),
            thread_action: action,
            projected: decision.projected(),
            reason: decision.reason.as_str().to_string(),
            prompt_chars: plan.input.chars().count(),
            developer_instructions_chars: plan
                .effective_instructions
                .as_deref()
                .map_or(0, |s| s.chars().count()),
            developer_instructions_delivery: delivery.to_string(),
            reply: outcome.reply,
            metrics: TurnMetrics {
                backend_chars,
                rendered_context_chars: if decision.mode == EffectiveMode::None {
                    0
                } else {
                    plan.rendered_context_chars
                },
                retried,
                auto_compacted: outcome.auto_compaction.is_some(),
            },
        })
    }
}
