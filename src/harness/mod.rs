//! The harness: the engine's whole lifecycle around every turn on a threaded backend
//! (docs/architecture.md#the-turn-algorithm), with the projection rules of §9, the compaction rules of §10, durable turns (§6),
//! subagent hooks (§7) and maintenance (§8).
//!
//! I/O lives here; every decision is delegated to the pure functions of
//! [`crate::projection`] (a turn's whole plan is one call, [`crate::projection::plan_turn`]).
//! Layout:
//! - this file: the types ([`Harness`], [`HarnessConfig`], [`TurnSpec`], [`TurnReport`], errors)
//!   and the shared plumbing (bindings behind the moka cache, runtime settings and context);
//! - `turn`: the turn algorithm (lock, bootstrap, assemble, plan, run with one retry, record,
//!   report) over a per-turn context; `lifecycle`: telling the engine about a turn (commits
//!   and the outbox, afterTurn, ingest), maintenance, quarantine records; `compact`: manual
//!   compaction; `subagent`: subagent hooks;
//! - `session`: per-session locks and store leases; `callbacks`: the host side of
//!   `runtimeContext`.
//!
//! Whether a backend thread is loaded on the backend's connection is the backend's knowledge:
//! the harness resumes a stored thread before using it, and the backend makes that a no-op when
//! the thread is already attached.

mod callbacks;
mod compact;
mod lease_read;
mod lifecycle;
mod parking;
mod session;
mod session_end;
mod session_file;
mod subagent;
mod thread_history;
mod tools;
mod transcript_cache;
mod turn;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio_util::task::TaskTracker;

use crate::backend::{
    BackendError, ContextDelivery, ThreadId, ThreadedBackend, TurnOptions, TurnOutcome, TurnTools,
    Usage,
};
use crate::contract::{
    AgentMessage, CompactResult, ContextEngine, EngineError, EngineInfo, HookCall, ReasonCode,
    RuntimeContext, RuntimeFacts, RuntimeSettings, SelectionSource, SessionTarget,
    SubagentContextMode, HOOK_GATEWAY_START, HOOK_GATEWAY_STOP,
};
use crate::engines::LegacyEngine;
use crate::host::requirements::HostRequirementError;
use crate::metrics::{MetricsSink, NoMetrics};
use crate::projection::{binding_key, DriftPolicy, ThreadBinding};
use crate::quarantine::QuarantineEngine;
use crate::runtime_settings::RuntimeSettingsBuilder;
use crate::store::{
    OutboxRow, SessionRead, StateStore, StoreError, StoredBinding, TranscriptEntry, TurnWrite,
};

use crate::store::StateStoreExt;
use crate::util::lock;
pub use callbacks::{complete_through, completion_request, HostCallbacks, HostLlmCallbacks};
pub use session::SessionLockError;
use session::{SessionGuard, SessionLocks};
pub use session_end::{fire_swept_session_ends, ResetReport};
pub use thread_history::{ThreadHistory, THREAD_HISTORY_NAMESPACE};
use transcript_cache::TranscriptCache;

/// The default session lease TTL (renewed every third of it while a turn runs).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// The default wait for a session another process holds.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(30);
/// Default [`HarnessConfig::lease_linger`].
pub const DEFAULT_LEASE_LINGER: Duration = Duration::from_secs(2);

/// Settings of a harness.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// The agent id of binding keys and session targets.
    pub agent_id: String,
    /// The prompt token budget given to the engine (and the context cap derived from it).
    pub token_budget: Option<u64>,
    /// Base instructions of new threads.
    pub base_instructions: Option<String>,
    /// The configured developer instructions (the engine's `systemPromptAddition` is added).
    pub developer_instructions: Option<String>,
    /// The model requested from the backend.
    pub model: Option<String>,
    /// What to do when the developer instructions drift from a thread's (docs/architecture.md#developer-instruction-delivery).
    pub drift_policy: DriftPolicy,
    /// The tool catalogue offered to the model (names).
    pub tools: Vec<String>,
    /// The host's citations mode, passed to the engine.
    pub citations_mode: Option<String>,
    /// The host's transcript byte limit for a projected view (docs/architecture.md#bounding).
    pub transcript_byte_limit: usize,
    /// How long a session lease lives without being renewed or released. A running turn
    /// renews it every third of this; a holder that died on this host is taken over at once,
    /// so this only bounds a vanished holder on another host.
    pub lease_ttl: Duration,
    /// How long a turn waits for another process's lease before failing as "session busy".
    pub lease_wait: Duration,
    /// How long a session's lease is kept after its turn, so that the session's next turn in
    /// this process takes it back without a store write; another process wanting the session
    /// waits at most this long for it. Zero releases it with each turn.
    pub lease_linger: Duration,
    /// How long shutdown waits for background maintenance.
    pub background_wait: Duration,
    /// Where the engine selection came from (for runtimeSettings).
    pub selection_source: SelectionSource,
    /// The working directory reported to engines.
    pub cwd: Option<String>,
    /// Where each session's OpenClaw-format transcript file is kept (`sessionFile`,
    /// docs/architecture.md#method-parameters-and-results); `None` keeps none.
    pub session_dir: Option<std::path::PathBuf>,
    /// Where a projecting turn puts its rendered context (`projection.codexContextDelivery`);
    /// `None`: additional context when the backend keeps it across compaction, else the turn
    /// input. Backends without the channel always get the turn input.
    pub context_delivery: Option<ContextDelivery>,
    /// `plugins.requireDurableTurns`: an engine other than legacy that does not declare durable
    /// turns is served by legacy, one turn at a time.
    pub require_durable_turns: bool,
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
            lease_ttl: DEFAULT_LEASE_TTL,
            lease_wait: DEFAULT_LEASE_WAIT,
            lease_linger: DEFAULT_LEASE_LINGER,
            background_wait: Duration::from_secs(30),
            selection_source: SelectionSource::Default,
            cwd: None,
            session_dir: None,
            require_durable_turns: false,
            context_delivery: None,
        }
    }
}

/// The prompt token budget engines get when `agent.tokenBudget` is not configured (a
/// conservative context window for an unknown model). Only the engine-facing calls use it;
/// the projection's context cap and the pre-turn overflow check follow the configured value.
pub const DEFAULT_TOKEN_BUDGET: u64 = 128_000;

impl HarnessConfig {
    /// The budget every engine call that takes one gets (`assemble`, `compact`, `afterTurn`,
    /// `maintain`'s runtime facts, `runtimeSettings.limits.promptTokenBudget`): the configured
    /// one, else [`DEFAULT_TOKEN_BUDGET`].
    pub fn engine_token_budget(&self) -> u64 {
        self.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET)
    }
}

/// Errors of a turn or a manual compaction. Each names the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The session could not be taken (another process holds it, or the store failed).
    #[error(transparent)]
    SessionBusy(#[from] SessionLockError),
    /// A store operation failed.
    #[error("{operation}: {source}")]
    Store {
        /// What the harness was doing.
        operation: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The engine needs host capabilities the backend does not offer (fails closed).
    #[error(transparent)]
    HostRequirement(Box<HostRequirementError>),
    /// The backend failed the turn (after the one retry, when it applied).
    #[error("turn on session {session:?} failed: {source}")]
    Backend {
        /// The session key.
        session: String,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// An engine call whose failure the caller must see failed (e.g. a manual compaction).
    #[error("{operation} failed for session {session:?}: {source}")]
    Engine {
        /// The engine method.
        operation: &'static str,
        /// The session key.
        session: String,
        /// The engine's error.
        #[source]
        source: EngineError,
    },
    /// The stored thread binding is not valid JSON of a binding.
    #[error("stored thread binding {key:?} is unreadable: {source}")]
    Binding {
        /// The binding key.
        key: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A session's stored thread history is not valid JSON of one.
    #[error("the stored thread history of session {session:?} is unreadable: {source}")]
    ThreadHistory {
        /// The session key.
        session: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The caller offered a tool with the name of one of the engine's tools: the model's
    /// calls of it could not be told apart.
    #[error("session {session:?}: the caller's tool {name:?} has the name of one of the context engine's tools")]
    ToolConflict {
        /// The session key.
        session: String,
        /// The tool's name.
        name: String,
    },
    /// The failure of an operation whose result several waiters shared (single-flight).
    #[error("{operation}: {message}")]
    Shared {
        /// The shared operation.
        operation: &'static str,
        /// The text of the error the first waiter got.
        message: String,
    },
    /// A record could not be encoded as JSON.
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The caller's subagent launch failed (after the engine's rollback, when there was one).
    #[error("subagent launch failed: {0}")]
    SubagentLaunch(String),
    /// The backend answered, but the turn could not be written to the store (after retries).
    /// The reply is kept here so that the caller can still show it.
    #[error("turn on session {session:?}: the backend answered on thread {thread_id}, but the turn could not be recorded: {source}. The reply was still delivered; the backend thread holds this exchange and the session's transcript does not. Check that the state store is writable and not held by a stuck process, then continue the session; repeat the prompt if the engine must see it")]
    NotRecorded {
        /// The session key.
        session: String,
        /// The thread that answered.
        thread_id: String,
        /// The model's reply.
        reply: String,
        /// The store's last error.
        #[source]
        source: Box<StoreError>,
    },
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
#[derive(Clone)]
pub struct TurnSpec {
    /// The session the turn belongs to.
    pub session_key: String,
    /// The user's prompt.
    pub prompt: String,
    /// A heartbeat turn (passed on to the engine as `isHeartbeat`).
    pub is_heartbeat: bool,
    /// The backend this call's thread work runs on, instead of the harness's own: ctxbridge
    /// serve hands in the Codex backend over the connection serving the client's request (the
    /// same kind of backend; the harness's own still reports what the backend is and offers).
    pub backend: Option<Arc<dyn ThreadedBackend>>,
    /// Called with the backend's answer once it is recorded (transcript and binding written),
    /// before the engine hears of the turn: from then on the turn has succeeded whatever the
    /// engine does with it, so ctxbridge serve's Codex front tells its client the turn ended
    /// (`turn/completed`) while the engine's `afterTurn` and maintenance run, and its Responses
    /// front lets reads of the response go on. The harness yields right after the call, so that
    /// the caller's answer goes out before that work runs on the same thread.
    pub on_recorded: Option<RecordedHook>,
    /// Called with the backend's answer as soon as the turn has it, before it is recorded:
    /// ctxbridge serve's Responses front ends its client's response with it there, and the
    /// record follows. The harness yields right after the call.
    pub on_answered: Option<RecordedHook>,
    /// The caller's own tools, offered beside the engine's and executed by the caller's
    /// executor (ctxbridge serve's Responses front: its client's function tools). They are
    /// sent with the turn's requests, not fed into the thread's tool catalogue (a
    /// per-request backend needs no new thread when they change). None by default.
    pub tools: TurnTools,
    /// The caller's settings for the model on this turn (none by default).
    pub options: TurnOptions,
}

/// See [`TurnSpec::on_recorded`] and [`TurnSpec::on_answered`].
pub type RecordedHook = Arc<dyn Fn(&TurnOutcome) + Send + Sync>;

impl std::fmt::Debug for TurnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSpec")
            .field("session_key", &self.session_key)
            .field("prompt", &self.prompt)
            .field("is_heartbeat", &self.is_heartbeat)
            .field(
                "backend",
                &self.backend.as_ref().map(|b| b.label().to_owned()),
            )
            .field("on_recorded", &self.on_recorded.is_some())
            .field("on_answered", &self.on_answered.is_some())
            .field("tools", &self.tools)
            .field("options", &self.options)
            .finish()
    }
}

impl TurnSpec {
    /// A (non-heartbeat) turn of `session_key` with `prompt`.
    pub fn new(session_key: impl Into<String>, prompt: impl Into<String>) -> Self {
        TurnSpec {
            session_key: session_key.into(),
            prompt: prompt.into(),
            is_heartbeat: false,
            backend: None,
            on_recorded: None,
            on_answered: None,
            tools: TurnTools::default(),
            options: TurnOptions::default(),
        }
    }

    /// The caller's `tools` are offered beside the engine's (see [`TurnSpec::tools`]).
    pub fn with_tools(mut self, tools: TurnTools) -> Self {
        self.tools = tools;
        self
    }

    /// The caller's settings for the model (see [`TurnSpec::options`]).
    pub fn with_options(mut self, options: TurnOptions) -> Self {
        self.options = options;
        self
    }

    /// `recorded` is called once the turn is recorded (see [`TurnSpec::on_recorded`]).
    pub fn when_recorded(mut self, recorded: RecordedHook) -> Self {
        self.on_recorded = Some(recorded);
        self
    }

    /// `answered` is called once the backend has answered (see [`TurnSpec::on_answered`]).
    pub fn when_answered(mut self, answered: RecordedHook) -> Self {
        self.on_answered = Some(answered);
        self
    }

    /// The turn's thread work runs on `backend` (see [`TurnSpec::backend`]).
    pub fn on(mut self, backend: Arc<dyn ThreadedBackend>) -> Self {
        self.backend = Some(backend);
        self
    }
}

/// `threadAction` of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadAction {
    /// The session's first thread was started.
    Started,
    /// The session's bound thread was continued.
    Resumed,
    /// A new thread replaced the session's bound one.
    Rotated,
}

impl ThreadAction {
    /// The wire name: `started`, `resumed` or `rotated`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadAction::Started => "started",
            ThreadAction::Resumed => "resumed",
            ThreadAction::Rotated => "rotated",
        }
    }
}

/// The report of one turn: exactly the `turn --json` object of docs/config.md#configuration-reference, plus metrics that are
/// not serialised.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReport {
    /// The session key.
    pub session_key: String,
    /// The engine that served the turn (`legacy` when inactive or degraded).
    pub engine_id: String,
    /// The projection mode (`none`, `per_turn`, `thread_bootstrap`).
    pub mode: String,
    /// The bootstrap epoch, in thread_bootstrap mode.
    pub epoch: Option<String>,
    /// The bootstrap fingerprint, in thread_bootstrap mode when the engine gave one.
    pub fingerprint: Option<String>,
    /// The backend thread the turn ran on.
    pub thread_id: String,
    /// Whether the thread was started, resumed or rotated.
    pub thread_action: ThreadAction,
    /// Whether the turn input carried the rendered context.
    pub projected: bool,
    /// The decision's reason (docs/architecture.md#the-project-or-reuse-decision).
    pub reason: String,
    /// Characters of the turn input.
    pub prompt_chars: usize,
    /// Characters of the effective developer instructions.
    pub developer_instructions_chars: usize,
    /// How the instructions reached the thread: `thread-start`, `inject` or `unchanged`.
    pub developer_instructions_delivery: String,
    /// How the rendered context reached the thread: `turn-input`, `additional-context`, or
    /// `none` when the turn projected nothing.
    pub context_delivery: String,
    /// The model's reply.
    pub reply: String,
    /// Figures of the turn (not serialised).
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
    /// Time spent inside the backend's turn (the model's time included).
    pub backend_time: Duration,
    /// The tokens of the turn's last model response, as the backend reported them.
    pub usage: Option<Usage>,
}

/// The result of a manual compaction.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactReport {
    /// The session key.
    pub session_key: String,
    /// The engine that compacted.
    pub engine_id: String,
    /// The engine's compaction result.
    pub result: CompactResult,
    /// The backend's native compaction ran (delegated by the engine or by the host).
    pub native_compaction: bool,
}

/// A subagent spawn request (docs/architecture.md#subagents).
#[derive(Debug, Clone)]
pub struct SubagentSpawn {
    /// The spawning session.
    pub parent_session_key: String,
    /// The subagent's session.
    pub child_session_key: String,
    /// How much of the parent's context the child gets.
    pub context_mode: SubagentContextMode,
    /// The caller asked for a light context: an `isolated` spawn then skips the hook.
    pub light_context: bool,
    /// How long the engine should keep the spawn's preparation, in milliseconds.
    pub ttl_ms: Option<u64>,
}

/// How often recording an answered turn is attempted before giving up (each attempt waits up
/// to the store's busy timeout for its write lock).
const RECORD_ATTEMPTS: u32 = 4;

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
    /// Session transcripts as last read, per session id: a turn reads only the entries
    /// appended since (a rewrite anywhere makes the store hand out the whole transcript).
    transcripts: TranscriptCache,
    locks: Arc<SessionLocks>,
    holder: String,
    background: TaskTracker,
    warned: Mutex<HashSet<String>>,
    /// The lease generation this harness last held, per session (cache coherence across
    /// processes, see [`Harness::lock_session`]).
    lease_generations: Mutex<HashMap<String, u64>>,
    /// The selected engine's quarantine record from an earlier run was cleared.
    cleared_old_quarantine: AtomicBool,
    /// Where turn, projection and lease figures go ([`NoMetrics`] unless set).
    metrics: Arc<dyn MetricsSink>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("engine", &self.engine.engine_id())
            .field("backend", &self.backend.label())
            .finish_non_exhaustive()
    }
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
        let locks = Arc::new(SessionLocks::with_linger(cfg.lease_linger));
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
            transcripts: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            locks,
            holder: session::HolderId::for_this_process().render(),
            background: TaskTracker::new(),
            warned: Mutex::new(HashSet::new()),
            lease_generations: Mutex::new(HashMap::new()),
            cleared_old_quarantine: AtomicBool::new(false),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Reports turns, projection decisions, lease waits and (through the engine's quarantine
    /// book) quarantines to `sink` (`serve`'s `/metrics`).
    pub fn with_metrics(mut self, sink: Arc<dyn MetricsSink>) -> Self {
        self.engine.quarantine_book().report_to(sink.clone());
        self.metrics = sink;
        self
    }

    /// The backend the turns run on.
    pub fn backend(&self) -> &Arc<dyn ThreadedBackend> {
        &self.backend
    }

    /// The state store (bindings, transcripts, leases, outbox).
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// The selected engine, behind its quarantine guard.
    pub fn engine(&self) -> &Arc<QuarantineEngine> {
        &self.engine
    }

    /// The quarantine of the selected engine while `legacy` answers in its place; `None` when
    /// it runs, or when the selected engine is `legacy` itself.
    pub fn degradation(&self) -> Option<crate::quarantine::QuarantineRecord> {
        let engine = &self.engine;
        if engine.engine_id() == crate::engines::LEGACY_ENGINE_ID {
            return None;
        }
        engine.quarantine_book().get(engine.engine_id())
    }

    /// The harness's settings.
    pub fn config(&self) -> &HarnessConfig {
        &self.cfg
    }

    /// The store holding session key `session_key`'s state (its shard when the store is
    /// split by session; see [`StateStore::session_shard`]).
    pub fn store_for(&self, session_key: &str) -> Arc<dyn StateStore> {
        self.store
            .session_shard(session_key)
            .unwrap_or_else(|| self.store.clone())
    }

    /// The binding key of a session.
    pub fn binding_key_for(&self, session_key: &str) -> String {
        binding_key(&self.cfg.agent_id, Some(session_key), session_key)
    }

    /// Takes the session: the in-process lock, then the store lease. The cached binding is
    /// dropped when another holder (another process sharing the store) may have written since
    /// this harness last held the session: every acquisition raises the lease generation by
    /// one, so a gap since the generation this harness last saw means someone else held it.
    async fn lock_session(
        &self,
        session_key: &str,
        key: &str,
    ) -> Result<SessionGuard, HarnessError> {
        let mut guard = self
            .locks
            .acquire(
                &self.store_for(session_key),
                &SessionRead {
                    session_key: session_key.to_string(),
                    id_namespace: SESSION_NAMESPACE.to_string(),
                },
                key,
                &self.holder,
                self.cfg.lease_ttl,
                self.cfg.lease_wait,
            )
            .await?;
        self.metrics
            .lease_acquired(guard.waited(), guard.took_over());
        let generation = guard.generation();
        let previous = lock(&self.lease_generations).insert(key.to_string(), generation);
        // A lease kept from this harness's own last turn has the generation it last saw.
        let continues = |seen: u64| {
            seen.saturating_add(1) == generation || (guard.reused() && seen == generation)
        };
        if !previous.is_some_and(continues) {
            self.bindings.invalidate(key).await;
        }
        self.adopt_snapshot(&mut guard, key).await;
        Ok(guard)
    }

    /// The stored binding of a session (cache, then store).
    pub async fn binding(&self, session_key: &str) -> Result<Option<ThreadBinding>, HarnessError> {
        let key = self.binding_key_for(session_key);
        Ok(self
            .load_binding(session_key, &key)
            .await?
            .map(|b| (*b).clone()))
    }

    /// The session's mirrored transcript.
    pub fn transcript(&self, session_key: &str) -> Result<Vec<AgentMessage>, HarnessError> {
        let session_id = self.session_id(session_key)?;
        Ok(self
            .store_for(session_key)
            .load_transcript(&session_id)
            .map_err(store_err("load transcript"))?
            .into_iter()
            .map(|e| e.message)
            .collect())
    }

    fn warn_once(&self, key: String, message: &str) {
        let mut warned = lock(&self.warned);
        if warned.insert(key) {
            tracing::warn!("{message}");
        }
    }

    /// The current session id for a session key (a compaction may have named a successor).
    fn session_id(&self, session_key: &str) -> Result<String, HarnessError> {
        Ok(self
            .store_for(session_key)
            .load_document(SESSION_NAMESPACE, session_key)
            .map_err(store_err("load session id"))?
            .unwrap_or_else(|| session_key.to_string()))
    }

    /// The binding `key` of session key `session_key` (cache, then the session's store).
    async fn load_binding(
        &self,
        session_key: &str,
        key: &str,
    ) -> Result<Option<Arc<ThreadBinding>>, HarnessError> {
        let store = self.store_for(session_key);
        let owned = key.to_string();
        // Single-flight: concurrent loads of one key share one store read.
        self.bindings
            .try_get_with(key.to_string(), async move {
                match store.load_binding(&owned) {
                    Ok(None) => Ok(None),
                    Ok(Some(stored)) => decode_binding(&stored).map(Some),
                    Err(source) => Err(HarnessError::Store {
                        operation: "load binding",
                        source,
                    }),
                }
            })
            .await
            // The error is shared with every caller that waited on the same load; the last
            // holder gets it whole, the others its text.
            .map_err(|e: Arc<HarnessError>| {
                Arc::try_unwrap(e).unwrap_or_else(|shared| HarnessError::Shared {
                    operation: "load binding",
                    message: shared.to_string(),
                })
            })
    }

    /// Appends the turn to the transcript and writes the binding, atomically (see
    /// [`StateStore::record_turn`]), then caches the binding.
    async fn record_turn_state(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
        binding: ThreadBinding,
        commit: Option<OutboxRow>,
        guard: &SessionGuard,
    ) -> Result<(), HarnessError> {
        let json = serde_json::to_string(&binding).map_err(|source| HarnessError::Encode {
            what: "the thread binding",
            source,
        })?;
        let mut attempt = 1;
        loop {
            let write = TurnWrite::RecordTurn {
                session_id: session_id.to_owned(),
                entries: entries.to_vec(),
                binding_key: binding.binding_key.clone(),
                binding_json: json.clone(),
                lease_generation: guard.generation(),
                commit: commit.clone(),
            };
            match guard.store().submit(write).await.map(|_| ()) {
                Ok(()) => break,
                Err(StoreError::Locked { .. }) if attempt < RECORD_ATTEMPTS => {
                    tracing::warn!(
                        attempt,
                        "the state store is busy; retrying to record the answered turn"
                    );
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    attempt += 1;
                }
                Err(source) => {
                    return Err(HarnessError::Store {
                        operation: "record turn",
                        source,
                    })
                }
            }
        }
        self.bindings
            .insert(binding.binding_key.clone(), Some(Arc::new(binding)))
            .await;
        Ok(())
    }

    async fn clear_binding(&self, guard: &SessionGuard, key: &str) -> Result<(), HarnessError> {
        guard
            .store()
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
            .prompt_token_budget(Some(self.cfg.engine_token_budget()));
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
            token_budget: Some(self.cfg.engine_token_budget()),
            current_token_count: None,
            cwd: self.cfg.cwd.clone(),
            session_target: Some(SessionTarget {
                agent_id: Some(self.cfg.agent_id.clone()),
                session_id: Some(session_id.to_string()),
                session_key: Some(session_key.to_string()),
                store_path: Some(self.store_for(session_key).location()),
                thread_id: thread.map(|t| t.0.clone()),
            }),
            prompt_cache: None,
        }
    }

    /// The engine's host callbacks; a delegated native compaction and `llm.complete` run on
    /// `backend`.
    fn callbacks(
        &self,
        backend: &Arc<dyn ThreadedBackend>,
        session_key: &str,
        session_id: &str,
        thread: Option<&ThreadId>,
        allow_rewrite: bool,
    ) -> (Arc<HostCallbacks>, Arc<AtomicBool>) {
        let delegated = Arc::new(AtomicBool::new(false));
        let cb = Arc::new(HostCallbacks {
            store: self.store_for(session_key),
            backend: backend.clone(),
            session_id: session_id.to_string(),
            thread_id: thread.cloned(),
            allow_rewrite,
            delegated: delegated.clone(),
            rewrote: Arc::new(AtomicBool::new(false)),
            transcripts: self.transcripts.clone(),
            session_file: self.session_file_path(session_id),
            cwd: self.cfg.cwd.clone().unwrap_or_else(|| ".".to_string()),
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
        let (cb, _) = self.callbacks(
            &self.backend,
            session_key,
            session_id,
            thread,
            allow_rewrite,
        );
        RuntimeContext {
            facts: self.facts(session_key, session_id, thread),
            callbacks: Some(cb),
        }
    }

    /// Fires `gateway_start` (a notification, `{port: null}`: no gateway port behind the CLI)
    /// when the engine listens to it; call once after the engine is initialised.
    pub async fn gateway_start(&self) {
        if self.engine.hooks().iter().any(|h| h == HOOK_GATEWAY_START) {
            let call = HookCall {
                event: serde_json::json!({"port": null}),
                ctx: serde_json::json!({"agentId": self.cfg.agent_id}),
            };
            if let Err(e) = self.engine.notify_hook(HOOK_GATEWAY_START, call).await {
                tracing::warn!(error = %e, "gateway_start hook failed");
            }
        }
    }

    /// Releases, in the store, the leases kept after their turns (see
    /// [`HarnessConfig::lease_linger`]), so other processes can take those sessions at once.
    /// [`Harness::shutdown`] does this too.
    pub async fn release_held_sessions(&self) {
        self.locks.release_parked().await;
    }

    /// Waits (bounded) for background maintenance, releases the leases kept after their turns,
    /// fires `gateway_stop`, disposes the engine and stops the backend.
    pub async fn shutdown(&self) {
        self.background.close();
        if tokio::time::timeout(self.cfg.background_wait, self.background.wait())
            .await
            .is_err()
        {
            tracing::warn!("background maintenance still running at shutdown; giving up waiting");
        }
        self.release_held_sessions().await;
        if self.engine.hooks().iter().any(|h| h == HOOK_GATEWAY_STOP) {
            let call = HookCall {
                event: serde_json::json!({"reason": "shutdown"}),
                ctx: serde_json::json!({"agentId": self.cfg.agent_id}),
            };
            if let Err(e) = self.engine.call_hook(HOOK_GATEWAY_STOP, call).await {
                tracing::warn!(error = %e, "gateway_stop hook failed");
            }
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

/// A stored binding decoded; one that is not valid JSON of a binding is named by its key.
fn decode_binding(stored: &StoredBinding) -> Result<Arc<ThreadBinding>, HarnessError> {
    serde_json::from_str::<ThreadBinding>(&stored.json)
        .map(Arc::new)
        .map_err(|source| HarnessError::Binding {
            key: stored.binding_key.clone(),
            source,
        })
}
