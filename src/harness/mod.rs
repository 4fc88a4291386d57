//! The harness: the engine's whole lifecycle around every turn on a threaded backend
//! (SPEC §11), with the projection rules of §9, the compaction rules of §10, durable turns (§6),
//! subagent hooks (§7) and maintenance (§8).
//!
//! I/O lives here; every decision is delegated to the pure functions of
//! [`crate::projection`].

mod callbacks;
mod session;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::{
    BackendError, StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnOutcome, TurnRequest,
};
use crate::contract::*;
use crate::engines::LegacyEngine;
use crate::host::{check_host_requirements, HostRequirementError};
use crate::host_params::project_host_params;
use crate::projection::{
    binding_key, bound_assembled, context_cap_chars, decide, developer_instructions_sha256,
    effective_developer_instructions, plan_instruction_delivery, policy_fingerprint,
    render_turn_input, tools_fingerprint, DecisionInput, DriftPolicy, EffectiveMode,
    InstructionDelivery, PolicyInputs, ProjectionDecision, RenderMode, RenderOptions,
    ThreadBinding, ThreadChoice, BINDING_SCHEMA_VERSION,
};
use crate::quarantine::QuarantineEngine;
use crate::runtime_settings::RuntimeSettingsBuilder;
use crate::store::{OutboxRow, StateStore, StoreError, TranscriptEntry};

pub use callbacks::HostCallbacks;
pub use session::{now_ms, SessionLockError};
use session::{SessionGuard, SessionLocks};

/// Settings of a harness.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    pub agent_id: String,
    pub token_budget: Option<u64>,
    pub base_instructions: Option<String>,
    pub developer_instructions: Option<String>,
    pub model: Option<String>,
    pub drift_policy: DriftPolicy,
    /// The tool catalogue offered to the model (names).
    pub tools: Vec<String>,
    pub citations_mode: Option<String>,
    /// The host's transcript byte limit for a projected view (SPEC §9.3).
    pub transcript_byte_limit: usize,
    /// How long a session lease lives without being released (a dead process's lease expires).
    pub lease_ttl: Duration,
    /// How long a turn waits for another process's lease before failing as "session busy".
    pub lease_wait: Duration,
    /// How long shutdown waits for background maintenance.
    pub background_wait: Duration,
    /// Where the engine selection came from (for runtimeSettings).
    pub selection_source: SelectionSource,
    /// The working directory reported to engines.
    pub cwd: Option<String>,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            agent_id: "main".into(),
            token_budget: None,
            base_instructions: None,
            developer_instructions: None,
            model: None,
            drift_policy: DriftPolicy::Inject,
            tools: Vec::new(),
            citations_mode: None,
            transcript_byte_limit: 4 * 1024 * 1024,
            lease_ttl: Duration::from_secs(300),
            lease_wait: Duration::from_secs(30),
            background_wait: Duration::from_secs(30),
            selection_source: SelectionSource::Default,
            cwd: None,
        }
    }
}

/// Errors of a turn or a manual compaction. Each names the operation.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(transparent)]
    SessionBusy(#[from] SessionLockError),
    #[error("{operation}: {source}")]
    Store {
        operation: &'static str,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    HostRequirement(Box<HostRequirementError>),
    #[error("turn on session {session:?} failed: {source}")]
    Backend {
        session: String,
        #[source]
        source: BackendError,
    },
    #[error("{operation} failed for session {session:?}: {source}")]
    Engine {
        operation: &'static str,
        session: String,
        #[source]
        source: EngineError,
    },
    #[error("stored thread binding {key:?} is unreadable: {message}")]
    Binding { key: String, message: String },
    #[error("subagent launch failed: {0}")]
    SubagentLaunch(String),
}

impl From<HostRequirementError> for HarnessError {
    fn from(e: HostRequirementError) -> Self {
        HarnessError::HostRequirement(Box::new(e))
    }
}

fn store_err(operation: &'static str) -> impl FnOnce(StoreError) -> HarnessError {
    move |source| HarnessError::Store { operation, source }
}

/// What a caller asks for one turn.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    pub session_key: String,
    pub prompt: String,
    pub is_heartbeat: bool,
}

impl TurnSpec {
    pub fn new(session_key: impl Into<String>, prompt: impl Into<String>) -> Self {
        TurnSpec {
            session_key: session_key.into(),
            prompt: prompt.into(),
            is_heartbeat: false,
        }
    }
}

/// `threadAction` of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadAction {
    Started,
    Resumed,
    Rotated,
}

impl ThreadAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadAction::Started => "started",
            ThreadAction::Resumed => "resumed",
            ThreadAction::Rotated => "rotated",
        }
    }
}

/// The report of one turn: exactly the `turn --json` object of SPEC §14, plus metrics that are
/// not serialised.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReport {
    pub session_key: String,
    pub engine_id: String,
    pub mode: String,
    pub epoch: Option<String>,
    pub fingerprint: Option<String>,
    pub thread_id: String,
    pub thread_action: ThreadAction,
    pub projected: bool,
    pub reason: String,
    pub prompt_chars: usize,
    pub developer_instructions_chars: usize,
    pub developer_instructions_delivery: String,
    pub reply: String,
    #[serde(skip)]
    pub metrics: TurnMetrics,
}

/// Figures of one turn (for `demo` and `bench`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnMetrics {
    /// Characters ctxbridge sent to the backend this turn: the turn input, developer
    /// instructions on thread start, injected developer text.
    pub backend_chars: usize,
    /// Characters of rendered assembled context in the input.
    pub rendered_context_chars: usize,
    /// A retry happened on a fresh thread (overflow or lost thread).
    pub retried: bool,
    /// Native compaction observed during the turn.
    pub auto_compacted: bool,
}

/// The result of a manual compaction.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactReport {
    pub session_key: String,
    pub engine_id: String,
    pub result: CompactResult,
    /// The backend's native compaction ran (delegated by the engine or by the host).
    pub native_compaction: bool,
}

/// A subagent spawn request (SPEC §7).
#[derive(Debug, Clone)]
pub struct SubagentSpawn {
    pub parent_session_key: String,
    pub child_session_key: String,
    pub context_mode: SubagentContextMode,
    /// The caller asked for a light context: an `isolated` spawn then skips the hook.
    pub light_context: bool,
    pub ttl_ms: Option<u64>,
}

/// The namespace of session-id documents in the store (session key → current session id).
const SESSION_NAMESPACE: &str = "session";
/// The namespace of doctor notes.
pub const DOCTOR_NAMESPACE: &str = "doctor";

/// The harness. Cheap to share behind an `Arc`; turns of different sessions run concurrently.
pub struct Harness {
    cfg: HarnessConfig,
    backend: Arc<dyn ThreadedBackend>,
    store: Arc<dyn StateStore>,
    engine: Arc<QuarantineEngine>,
    legacy: Arc<QuarantineEngine>,
    bindings: moka::future::Cache<String, Option<Arc<ThreadBinding>>>,
    locks: Arc<SessionLocks>,
    holder: String,
    /// Threads attached to the backend by this process.
    attached: Mutex<HashSet<ThreadId>>,
    background: TaskTracker,
    warned: Mutex<HashSet<String>>,
    /// The lease generation this harness last held, per session (cache coherence across
    /// processes, see [`Harness::lock_session`]).
    lease_generations: Mutex<HashMap<String, u64>>,
    /// The selected engine's quarantine record from an earlier run was cleared.
    cleared_old_quarantine: AtomicBool,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("engine", &self.engine.engine_id())
            .field("backend", &self.backend.label())
            .finish_non_exhaustive()
    }
}

/// Everything one turn plans before it touches the backend.
struct Plan {
    decision: ProjectionDecision,
    input: String,
    rendered_context_chars: usize,
    effective_instructions: Option<String>,
    delivery: InstructionDelivery,
}

impl Harness {
    /// A harness running `engine` (already resolved and guarded) on `backend` with `store`.
    pub fn new(
        cfg: HarnessConfig,
        engine: Arc<QuarantineEngine>,
        backend: Arc<dyn ThreadedBackend>,
        store: Arc<dyn StateStore>,
    ) -> Self {
        let legacy = Arc::new(QuarantineEngine::legacy(engine.quarantine_book().clone()));
        Harness {
            cfg,
            backend,
            store,
            engine,
            legacy,
            bindings: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            locks: Arc::new(SessionLocks::default()),
            holder: format!(
                "ctxbridge-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
            attached: Mutex::new(HashSet::new()),
            background: TaskTracker::new(),
            warned: Mutex::new(HashSet::new()),
            lease_generations: Mutex::new(HashMap::new()),
            cleared_old_quarantine: AtomicBool::new(false),
        }
    }

    pub fn backend(&self) -> &Arc<dyn ThreadedBackend> {
        &self.backend
    }

    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    pub fn engine(&self) -> &Arc<QuarantineEngine> {
        &self.engine
    }

    pub fn config(&self) -> &HarnessConfig {
        &self.cfg
    }

    /// The binding key of a session.
    pub fn binding_key_for(&self, session_key: &str) -> String {
        binding_key(&self.cfg.agent_id, Some(session_key), session_key)
    }

    /// Takes the session: the in-process lock, then the store lease. The cached binding is
    /// dropped when another holder (another process sharing the store) may have written since
    /// this harness last held the session: every acquisition raises the lease generation by
    /// one, so a gap since the generation this harness last saw means someone else held it.
    async fn lock_session(&self, key: &str) -> Result<SessionGuard, HarnessError> {
        let guard = self
            .locks
            .acquire(
                &self.store,
                key,
                &self.holder,
                self.cfg.lease_ttl,
                self.cfg.lease_wait,
            )
            .await?;
        let generation = guard.generation();
        let previous = self
            .lease_generations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), generation);
        if previous.map_or(true, |seen| seen.saturating_add(1) != generation) {
            self.bindings.invalidate(key).await;
        }
        Ok(guard)
    }

    /// The stored binding of a session (cache, then store).
    pub async fn binding(&self, session_key: &str) -> Result<Option<ThreadBinding>, HarnessError> {
        let key = self.binding_key_for(session_key);
        Ok(self.load_binding(&key).await?.map(|b| (*b).clone()))
    }

    /// The session's mirrored transcript.
    pub fn transcript(&self, session_key: &str) -> Result<Vec<AgentMessage>, HarnessError> {
        let session_id = self.session_id(session_key)?;
        Ok(self
            .store
            .load_transcript(&session_id)
            .map_err(store_err("load transcript"))?
            .into_iter()
            .map(|e| e.message)
            .collect())
    }

    fn warn_once(&self, key: String, message: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.insert(key) {
            tracing::warn!("{message}");
        }
    }

    /// The current session id for a session key (a compaction may have named a successor).
    fn session_id(&self, session_key: &str) -> Result<String, HarnessError> {
        Ok(self
            .store
            .load_document(SESSION_NAMESPACE, session_key)
            .map_err(store_err("load session id"))?
            .unwrap_or_else(|| session_key.to_string()))
    }

    async fn load_binding(&self, key: &str) -> Result<Option<Arc<ThreadBinding>>, HarnessError> {
        let store = self.store.clone();
        let owned = key.to_string();
        // Single-flight: concurrent loads of one key share one store read.
        self.bindings
            .try_get_with(key.to_string(), async move {
                match store.load_binding(&owned) {
                    Ok(None) => Ok(None),
                    Ok(Some(stored)) => serde_json::from_str::<ThreadBinding>(&stored.json)
                        .map(|b| Some(Arc::new(b)))
                        .map_err(|e| HarnessError::Binding {
                            key: owned.clone(),
                            message: e.to_string(),
                        }),
                    Err(source) => Err(HarnessError::Store {
                        operation: "load binding",
                        source,
                    }),
                }
            })
            .await
            .map_err(|e: Arc<HarnessError>| match &*e {
                HarnessError::Binding { key, message } => HarnessError::Binding {
                    key: key.clone(),
                    message: message.clone(),
                },
                other => HarnessError::Binding {
                    key: key.to_string(),
                    message: other.to_string(),
                },
            })
    }

    async fn save_binding(
        &self,
        binding: ThreadBinding,
        guard: &SessionGuard,
    ) -> Result<(), HarnessError> {
        let json = serde_json::to_string(&binding).map_err(|e| HarnessError::Binding {
            key: binding.binding_key.clone(),
            message: e.to_string(),
        })?;
        self.store
            .save_binding(&binding.binding_key, &json, guard.generation())
            .map_err(store_err("save binding"))?;
        self.bindings
            .insert(binding.binding_key.clone(), Some(Arc::new(binding)))
            .await;
        Ok(())
    }

    async fn clear_binding(&self, key: &str) -> Result<(), HarnessError> {
        self.store
            .delete_binding(key)
            .map_err(store_err("delete binding"))?;
        self.bindings.insert(key.to_string(), None).await;
        Ok(())
    }

    fn runtime_settings(
        &self,
        serving: &QuarantineEngine,
        fallback: Option<ReasonCode>,
    ) -> RuntimeSettings {
        let mut b = RuntimeSettingsBuilder::new()
            .harness_id(Some("ctxbridge"))
            .runtime_id(Some(self.backend.kind().as_str()))
            .selection(Some(self.engine.engine_id()), self.cfg.selection_source)
            .execution_host(
                Some(self.backend.kind().as_str()),
                Some(self.backend.label()),
            )
            .model_requested(self.cfg.model.clone())
            .model_resolved(self.cfg.model.clone())
            .prompt_token_budget(self.cfg.token_budget);
        if serving.is_quarantined() && !std::ptr::eq(serving, &*self.legacy) {
            b = b.degraded_reason(ReasonCode::RuntimeUnavailable);
        }
        if let Some(reason) = fallback {
            b = b.fallback_reason(reason);
        }
        b.build()
    }

    fn facts(
        &self,
        session_key: &str,
        session_id: &str,
        thread: Option<&ThreadId>,
    ) -> RuntimeFacts {
        RuntimeFacts {
            token_budget: self.cfg.token_budget,
            current_token_count: None,
            cwd: self.cfg.cwd.clone(),
            session_target: Some(SessionTarget {
                agent_id: Some(self.cfg.agent_id.clone()),
                session_id: Some(session_id.to_string()),
                session_key: Some(session_key.to_string()),
                store_path: Some(self.store.location()),
                thread_id: thread.map(|t| t.0.clone()),
            }),
            prompt_cache: None,
        }
    }

    fn callbacks(
        &self,
        session_id: &str,
        thread: Option<&ThreadId>,
        allow_rewrite: bool,
    ) -> (Arc<HostCallbacks>, Arc<AtomicBool>) {
        let delegated = Arc::new(AtomicBool::new(false));
        let cb = Arc::new(HostCallbacks {
            store: self.store.clone(),
            backend: self.backend.clone(),
            session_id: session_id.to_string(),
            thread_id: thread.cloned(),
            allow_rewrite,
            delegated: delegated.clone(),
            rewrote: Arc::new(AtomicBool::new(false)),
        });
        (cb, delegated)
    }

    fn runtime_context(
        &self,
        session_key: &str,
        session_id: &str,
        thread: Option<&ThreadId>,
        allow_rewrite: bool,
    ) -> RuntimeContext {
        let (cb, _) = self.callbacks(session_id, thread, allow_rewrite);
        RuntimeContext {
            facts: self.facts(session_key, session_id, thread),
            callbacks: Some(cb),
        }
    }

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

    async fn turn_inner(
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
    fn durable_degradation(&self, info: &EngineInfo) -> Option<String> {
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

    async fn bootstrap_if_new(
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

    async fn assemble(
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
    fn overflow_precheck(
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

    fn plan(
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

    fn policy_fingerprint(&self, info: &EngineInfo) -> String {
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

    fn is_attached(&self, thread: &ThreadId) -> bool {
        self.attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(thread)
    }

    fn mark_attached(&self, thread: &ThreadId) {
        self.attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(thread.clone());
    }

    /// Starts / resumes the thread, delivers drifted instructions and runs the turn. The error
    /// side says whether the thread was fresh. `had_thread`: the session had a bound thread
    /// before this turn (a new thread is then a rotation, also on a retry).
    async fn execute(
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
    async fn finish_turn(
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
        self.store
            .append_transcript(
                session_id,
                &[
                    TranscriptEntry {
                        entry_id: format!("{turn_id}-user"),
                        message: user.clone(),
                    },
                    TranscriptEntry {
                        entry_id: format!("{turn_id}-assistant"),
                        message: assistant.clone(),
                    },
                ],
            )
            .map_err(store_err("append transcript"))?;
        // Write the binding now: the thread has received what it records. Writing it before
        // the engine's commit/afterTurn/maintain keeps it when ctxbridge dies in one of those
        // (the restarted turn then reuses the thread instead of re-projecting elsewhere).
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
        self.save_binding(binding, guard).await?;

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
                params_json: serde_json::to_string(&params).map_err(|e| HarnessError::Binding {
                    key: turn_id.clone(),
                    message: format!("cannot encode commitTurn params: {e}"),
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

    async fn commit_row(
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
    async fn flush_outbox(&self, session_key: &str, session_id: &str) {
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
    async fn maintain(
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
    fn persist_quarantines(&self) {
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

    /// Manual compaction of a session (`ctxbridge compact`, `/compact`; SPEC §10).
    pub async fn compact(&self, session_key: &str) -> Result<CompactReport, HarnessError> {
        let key = self.binding_key_for(session_key);
        let guard = self.lock_session(&key).await?;
        let session_id = self.session_id(session_key)?;
        let stored = self.load_binding(&key).await?;
        let report = self
            .compact_locked(session_key, &session_id, stored.as_deref())
            .await;
        if let Err(e) = guard.release() {
            tracing::warn!(error = %e, "could not release the session lease; it will expire");
        }
        report
    }

    async fn compact_locked(
        &self,
        session_key: &str,
        session_id: &str,
        stored: Option<&ThreadBinding>,
    ) -> Result<CompactReport, HarnessError> {
        let info = self.engine.info();
        check_host_requirements(
            &info,
            HostOperation::ManualCompact,
            self.backend.label(),
            &self.backend.capabilities(),
        )?;
        let mut thread = stored.map(|b| b.thread_id.clone());
        // Native compaction runs on the bound thread, which this process may not have attached
        // yet (a fresh `ctxbridge compact` invocation): resume it first, as a turn would.
        if let Some(t) = thread.clone().filter(|t| !self.is_attached(t)) {
            match self.backend.resume_thread(&t).await {
                Ok(()) => self.mark_attached(&t),
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
        let (cb, delegated) = self.callbacks(session_id, thread.as_ref(), true);
        let params = project_host_params(
            CompactParams {
                session_id: session_id.to_string(),
                session_key: Some(session_key.to_string()),
                session_target: self
                    .facts(session_key, session_id, thread.as_ref())
                    .session_target,
                token_budget: self.cfg.token_budget,
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
        // A successor session named by the engine becomes the session's id.
        let successor = result.result.as_ref().and_then(|r| {
            r.session_id
                .clone()
                .or_else(|| r.session_target.as_ref().and_then(|t| t.session_id.clone()))
        });
        if let Some(next) = successor.filter(|s| s != session_id) {
            self.store
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

    /// Spawns a subagent (SPEC §7): `prepareSubagentSpawn` (skipped for a light isolated spawn),
    /// then `launch`; if the launch fails after a successful prepare, the rollback runs.
    pub async fn spawn_subagent<T, E, F, Fut>(
        &self,
        spawn: SubagentSpawn,
        launch: F,
    ) -> Result<T, HarnessError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: std::fmt::Display,
    {
        let info = self.engine.info();
        check_host_requirements(
            &info,
            HostOperation::SubagentSpawn,
            self.backend.label(),
            &self.backend.capabilities(),
        )?;
        let skip = spawn.light_context && spawn.context_mode == SubagentContextMode::Isolated;
        let mut rollback = None;
        if !skip
            && self
                .engine
                .methods()
                .contains(EngineMethod::PrepareSubagentSpawn)
        {
            let prepared = self
                .engine
                .prepare_subagent_spawn(PrepareSubagentSpawnParams {
                    parent_session_key: spawn.parent_session_key.clone(),
                    child_session_key: spawn.child_session_key.clone(),
                    context_mode: spawn.context_mode,
                    parent_session_id: Some(self.session_id(&spawn.parent_session_key)?),
                    child_session_id: Some(spawn.child_session_key.clone()),
                    ttl_ms: spawn.ttl_ms,
                    extra: Default::default(),
                })
                .await
                .map_err(|source| HarnessError::Engine {
                    operation: "prepareSubagentSpawn",
                    session: spawn.parent_session_key.clone(),
                    source,
                })?;
            rollback = prepared.rollback_id;
        }
        match launch().await {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Some(rollback_id) = rollback {
                    if self
                        .engine
                        .methods()
                        .contains(EngineMethod::RollbackSubagentSpawn)
                    {
                        if let Err(err) = self
                            .engine
                            .rollback_subagent_spawn(RollbackSubagentSpawnParams { rollback_id })
                            .await
                        {
                            tracing::warn!(error = %err, "subagent spawn rollback failed");
                        }
                    }
                }
                Err(HarnessError::SubagentLaunch(e.to_string()))
            }
        }
    }

    /// Tells the engine a subagent ended.
    pub async fn end_subagent(&self, child_session_key: &str, reason: SubagentEndReason) {
        if self
            .engine
            .methods()
            .contains(EngineMethod::OnSubagentEnded)
        {
            if let Err(e) = self
                .engine
                .on_subagent_ended(OnSubagentEndedParams {
                    child_session_key: child_session_key.to_string(),
                    reason,
                })
                .await
            {
                tracing::warn!(error = %e, "onSubagentEnded failed");
            }
        }
    }

    /// Waits (bounded) for background maintenance, disposes the engine and stops the backend.
    pub async fn shutdown(&self) {
        self.background.close();
        if tokio::time::timeout(self.cfg.background_wait, self.background.wait())
            .await
            .is_err()
        {
            tracing::warn!("background maintenance still running at shutdown; giving up waiting");
        }
        // Quarantined engines are released too: an out-of-process one has a child to reap.
        self.engine.release().await;
        self.backend.shutdown().await;
    }
}

/// The legacy engine's info (for reports).
pub fn legacy_info() -> EngineInfo {
    LegacyEngine::engine_info()
}
