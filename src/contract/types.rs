//! Engine info, method parameters and results (docs/architecture.md#members, §1.3). JSON names are the contract's
//! camelCase; unknown fields of the records an engine returns are kept in `extra`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::AgentMessage;
use super::messages::Messages;
use super::runtime::RuntimeCallbacks;

/// `info.turnMaintenanceMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnMaintenanceMode {
    /// Turn maintenance runs before the reply is returned (the default).
    #[default]
    Foreground,
    /// Turn maintenance runs as deferred work after the reply is returned (docs/architecture.md#maintenance).
    Background,
}

/// Operations a host checks requirements for (docs/architecture.md#members, §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HostOperation {
    /// Running an agent turn (`"agent-run"`).
    #[serde(rename = "agent-run")]
    AgentRun,
    /// A compaction the user asked for (`"manual-compact"`).
    #[serde(rename = "manual-compact")]
    ManualCompact,
    /// Spawning a subagent (`"subagent-spawn"`).
    #[serde(rename = "subagent-spawn")]
    SubagentSpawn,
}

impl HostOperation {
    /// The contract's name of the operation.
    pub fn as_str(self) -> &'static str {
        match self {
            HostOperation::AgentRun => "agent-run",
            HostOperation::ManualCompact => "manual-compact",
            HostOperation::SubagentSpawn => "subagent-spawn",
        }
    }
}

impl fmt::Display for HostOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `hostRequirements[operation]`. Capabilities stay strings: an engine may require one this
/// host has never heard of, and that must read as "missing", not as a parse failure.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostRequirement {
    /// Capabilities the host must offer before the operation may start (docs/architecture.md#host-capabilities-and-requirements).
    #[serde(default)]
    pub required_capabilities: Vec<String>,
    /// Appended to the fail-closed error when a capability is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_message: Option<String>,
}

/// `info.transcriptSemantics` (docs/architecture.md#durable-turns-committurn).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptSemantics {
    /// Must be [`CURRENT_TURN_FENCE_V1`] for durable turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_turn_fence: Option<String>,
    /// Must be [`TURN_ADVANCEMENT_IDEMPOTENCY_V1`] for durable turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_advancement_idempotency: Option<String>,
}

/// The value of `currentTurnFence` that durable turns need.
pub const CURRENT_TURN_FENCE_V1: &str = "before-current-turn-entry-v1";
/// The value of `turnAdvancementIdempotency` that durable turns need.
pub const TURN_ADVANCEMENT_IDEMPOTENCY_V1: &str = "atomic-idempotent-v1";

/// `EngineInfo` (docs/architecture.md#members).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    /// The engine id (non-empty; the id it is registered and configured under).
    #[serde(default)]
    pub id: String,
    /// A human name (non-empty).
    #[serde(default)]
    pub name: String,
    /// The engine's version, if it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether the engine compacts its own context (then the host does not run the
    /// overflow pre-check on its behalf unless the prompt authority says so, docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owns_compaction: Option<bool>,
    /// When turn maintenance runs (foreground when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_maintenance_mode: Option<TurnMaintenanceMode>,
    /// Capabilities the engine needs per host operation (docs/architecture.md#host-capabilities-and-requirements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_requirements: Option<BTreeMap<HostOperation, HostRequirement>>,
    /// The host-added param keys the engine accepts; absent means all of them (docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<String>>,
    /// The durable-turn declarations (docs/architecture.md#durable-turns-committurn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_semantics: Option<TranscriptSemantics>,
    /// Members this host does not know, kept for a round trip.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EngineInfo {
    /// A minimal info with an id and a name.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        EngineInfo {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// `ownsCompaction`, false when absent.
    pub fn owns_compaction(&self) -> bool {
        self.owns_compaction.unwrap_or(false)
    }

    /// `turnMaintenanceMode`, foreground when absent.
    pub fn turn_maintenance_mode(&self) -> TurnMaintenanceMode {
        self.turn_maintenance_mode.unwrap_or_default()
    }

    /// Both durable-turn declarations of docs/architecture.md#durable-turns-committurn are present.
    pub fn declares_durable_turns(&self) -> bool {
        self.transcript_semantics.as_ref().is_some_and(|t| {
            t.current_turn_fence.as_deref() == Some(CURRENT_TURN_FENCE_V1)
                && t.turn_advancement_idempotency.as_deref()
                    == Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1)
        })
    }
}

/// `sessionTarget`: where a session lives (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTarget {
    /// The agent the session belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Where the session's transcript is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_path: Option<String>,
    /// The backend thread the session is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

/// Host facts handed to an engine in `runtimeContext` (the serialisable half).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeFacts {
    /// The prompt token budget of the turn, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The tokens the session currently holds, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    /// The working directory of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Where the session lives (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// Prompt-cache usage reported by the backend for the last turn (opaque JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<Value>,
}

/// `runtimeContext`: host facts plus host callbacks. Serialises as the facts only; callbacks
/// reach out-of-process engines as engine→host requests (docs/engine-protocol.md#the-engine-process-protocol).
#[derive(Clone, Default)]
pub struct RuntimeContext {
    /// The serialisable host facts.
    pub facts: RuntimeFacts,
    /// `rewriteTranscriptEntries`, `llm.complete`, delegated compaction. `None` when the host
    /// offers none (and the rewrite callback is refused in pre-turn hooks, docs/architecture.md#method-parameters-and-results).
    pub callbacks: Option<Arc<dyn RuntimeCallbacks>>,
}

impl fmt::Debug for RuntimeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeContext")
            .field("facts", &self.facts)
            .field("callbacks", &self.callbacks.is_some())
            .finish()
    }
}

impl PartialEq for RuntimeContext {
    fn eq(&self, other: &Self) -> bool {
        self.facts == other.facts && self.callbacks.is_some() == other.callbacks.is_some()
    }
}

impl Serialize for RuntimeContext {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.facts.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RuntimeContext {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RuntimeContext {
            facts: RuntimeFacts::deserialize(d)?,
            callbacks: None,
        })
    }
}

/// The runtimeSettings snapshot (schemaVersion 1, docs/architecture.md#runtimesettings). Built by
/// the host's `runtime_settings`; unknown values are `null`, never omitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    /// Always 1.
    pub schema_version: u32,
    /// The host and the mode it runs in.
    pub runtime: RuntimeInfo,
    /// Which engine is selected and why.
    pub context_engine_selection: ContextEngineSelection,
    /// The backend the turn runs on.
    pub execution_host: ExecutionHost,
    /// The model asked for and the one that answered.
    pub model: ModelInfo,
    /// Token limits of the turn.
    pub limits: Limits,
    /// Why the mode is not normal, as closed reason codes.
    pub diagnostics: Diagnostics,
}

/// `runtime.mode`: how the host runs this call (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// Running as configured.
    Normal,
    /// Running with a fallback reason, or on another model than requested (docs/architecture.md#runtimesettings).
    Fallback,
    /// Running with a degraded reason (docs/architecture.md#runtimesettings).
    Degraded,
}

/// `runtimeSettings.runtime` (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInfo {
    /// Always `"ctxbridge"`.
    pub host: String,
    /// Derived from the diagnostics and the model (docs/architecture.md#runtimesettings); never null.
    pub mode: RuntimeMode,
    /// The harness instance, when known.
    pub harness_id: Option<String>,
    /// The runtime (backend kind), when known.
    pub runtime_id: Option<String>,
}

/// Where the selected engine id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectionSource {
    /// Set in `plugins.slots.contextEngine`.
    Configured,
    /// No engine configured: legacy by default.
    Default,
    /// The source is not known.
    Unknown,
}

impl SelectionSource {
    /// The contract's name of the source.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionSource::Configured => "configured",
            SelectionSource::Default => "default",
            SelectionSource::Unknown => "unknown",
        }
    }
}

/// `runtimeSettings.contextEngineSelection` (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineSelection {
    /// The selected engine id.
    pub selected_id: Option<String>,
    /// Where the selection came from; never null.
    pub source: SelectionSource,
}

/// `runtimeSettings.executionHost` (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionHost {
    /// The id of the execution host (the backend host the turn runs on), when known.
    pub id: Option<String>,
    /// A human label of the execution host.
    pub label: Option<String>,
}

/// `runtimeSettings.model`: requested and resolved model (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The model the configuration asked for.
    pub requested: Option<String>,
    /// The model that actually answered.
    pub resolved: Option<String>,
    /// The model provider.
    pub provider: Option<String>,
    /// The model family.
    pub family: Option<String>,
}

/// `runtimeSettings.limits` (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Tokens the prompt may take.
    pub prompt_token_budget: Option<u64>,
    /// Tokens the reply may take.
    pub max_output_tokens: Option<u64>,
}

/// The closed set of fallback / degraded reasons (docs/architecture.md#runtimesettings): never raw error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The model provider timed out.
    ProviderTimeout,
    /// The model provider could not be reached.
    ProviderUnavailable,
    /// The model provider rate-limited the request.
    RateLimited,
    /// The model's context window overflowed.
    ContextOverflow,
    /// The backend runtime could not be reached.
    RuntimeUnavailable,
    /// Any other reason.
    Unknown,
}

/// `runtimeSettings.diagnostics`: the reasons behind a fallback or degraded mode
/// (docs/architecture.md#runtimesettings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    /// Set only when the mode is fallback.
    pub fallback_reason: Option<ReasonCode>,
    /// Set only when the mode is degraded.
    pub degraded_reason: Option<ReasonCode>,
}

// ------------------------------------------------------------------------------------------
// Method parameters and results
// ------------------------------------------------------------------------------------------

/// `ingest` params (docs/architecture.md#method-parameters-and-results): one message of the session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The message to ingest.
    pub message: Option<AgentMessage>,
    /// Whether the turn is a heartbeat (a host-initiated keep-alive turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `ingest` result (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestResult {
    /// False when the message was a duplicate or ingesting it was a no-op.
    pub ingested: bool,
}

/// `ingestBatch` params (docs/architecture.md#method-parameters-and-results): several messages at once.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The messages to ingest, in order.
    pub messages: Vec<AgentMessage>,
    /// Whether the turn is a heartbeat (a host-initiated keep-alive turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `ingestBatch` result (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchResult {
    /// How many of the messages were ingested.
    pub ingested_count: u64,
}

/// `bootstrap` params (docs/architecture.md#method-parameters-and-results): the engine may import an existing session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The path of the session's OpenClaw-format JSONL transcript (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// Where the session lives (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// `bootstrap` result (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapResult {
    /// Whether the engine bootstrapped the session.
    pub bootstrapped: bool,
    /// How many messages the bootstrap imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_messages: Option<u64>,
    /// Why the engine did not bootstrap, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `assemble` params (docs/architecture.md#method-parameters-and-results): build what the model sees this turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The session's messages (the host's transcript), shared: cloning them is O(1).
    pub messages: Messages,
    /// The prompt token budget of the turn, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The names of the tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_tools: Option<Vec<String>>,
    /// The host's citations mode, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations_mode: Option<String>,
    /// The model the turn runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The user's prompt of this turn (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// `promptAuthority` (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptAuthority {
    /// The overflow pre-check uses the assembled estimate (the default).
    #[default]
    Assembled,
    /// The overflow pre-check uses the larger of the assembled estimate and the
    /// whole un-windowed history; what the model sees is unchanged (docs/architecture.md#method-parameters-and-results).
    PreassemblyMayOverflow,
}

/// `contextProjection.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectionMode {
    /// Render the assembled context into every turn's input.
    PerTurn,
    /// Render it once into a new backend thread, which then carries it (docs/architecture.md#the-project-or-reuse-decision).
    ThreadBootstrap,
}

impl ProjectionMode {
    /// The contract's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectionMode::PerTurn => "per_turn",
            ProjectionMode::ThreadBootstrap => "thread_bootstrap",
        }
    }
}

/// `contextProjection` (docs/architecture.md#method-parameters-and-results, §9.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextProjection {
    /// Per turn or thread bootstrap.
    pub mode: ProjectionMode,
    /// The bootstrap epoch: a new epoch asks for a new thread (docs/architecture.md#the-project-or-reuse-decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// The engine's fingerprint of the projected context, if it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl ContextProjection {
    /// A per-turn projection (no epoch, no fingerprint).
    pub fn per_turn() -> Self {
        ContextProjection {
            mode: ProjectionMode::PerTurn,
            epoch: None,
            fingerprint: None,
        }
    }

    /// A thread-bootstrap projection of `epoch`.
    pub fn thread_bootstrap(epoch: impl Into<String>) -> Self {
        ContextProjection {
            mode: ProjectionMode::ThreadBootstrap,
            epoch: Some(epoch.into()),
            fingerprint: None,
        }
    }
}

/// `AssembleResult` (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleResult {
    /// What the model sees, in order (shared: an engine may return the transcript it was
    /// given, or a view it keeps, without copying it).
    pub messages: Messages,
    /// The engine's token estimate of `messages`.
    pub estimated_tokens: f64,
    /// Text prepended to the system prompt; on threaded backends it goes into the
    /// developer instructions (docs/architecture.md#developer-instruction-delivery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_addition: Option<String>,
    /// Which estimate the overflow pre-check trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_authority: Option<PromptAuthority>,
    /// How the context reaches a threaded backend (docs/architecture.md#projection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_projection: Option<ContextProjection>,
}

/// `afterTurn` params (docs/architecture.md#method-parameters-and-results): the transcript after a successful turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AfterTurnParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The path of the session's OpenClaw-format JSONL transcript (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// Where the session lives (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// The whole transcript after the turn.
    pub messages: Vec<AgentMessage>,
    /// How many of `messages` existed before this turn's prompt.
    pub pre_prompt_message_count: u64,
    /// The summary of a native compaction the backend ran during the turn (docs/architecture.md#compaction-on-threaded-backends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_summary: Option<String>,
    /// Whether the turn is a heartbeat (a host-initiated keep-alive turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
    /// The prompt token budget of the turn, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// `maintain.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaintainReason {
    /// After a bootstrap.
    Bootstrap,
    /// After a successful turn.
    Turn,
    /// After a compaction.
    Compaction,
}

/// `maintain` params (docs/architecture.md#method-parameters-and-results, §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintainParams {
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The path of the session's OpenClaw-format JSONL transcript (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// What the maintenance follows.
    pub reason: MaintainReason,
    /// Where the session lives (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// The result of `maintain` and of `rewriteTranscriptEntries` (same shape, docs/architecture.md#maintenance).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintainResult {
    /// Whether the transcript changed.
    pub changed: bool,
    /// Bytes the rewrite freed.
    pub bytes_freed: u64,
    /// How many entries were rewritten.
    pub rewritten_entries: u64,
    /// Why nothing changed, if the engine says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `rewriteTranscriptEntries` result.
pub type TranscriptRewriteResult = MaintainResult;

/// One entry of a `rewriteTranscriptEntries` request (docs/architecture.md#maintenance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptReplacement {
    /// The transcript entry to replace.
    pub entry_id: String,
    /// Its new message.
    pub message: AgentMessage,
}

/// `rewriteTranscriptEntries(request)` (docs/architecture.md#maintenance).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRewriteRequest {
    /// The entries to replace.
    pub replacements: Vec<TranscriptReplacement>,
    /// The entries the rewrite may touch; any other is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_rewrite_suffix_entry_ids: Option<Vec<String>>,
}

/// `llm.complete(params)` (`runtime/llmComplete`, docs/engine-protocol.md#the-engine-process-protocol). Fields this host does not use
/// (`temperature`, `reasoning`, `responseFormat`, `agentId`, …) are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCompleteRequest {
    /// The session of the call the request runs in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The conversation to complete.
    pub messages: Vec<AgentMessage>,
    /// The system prompt of the completion (the backend's instructions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A model override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the completion is for (logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// The most tokens the completion may produce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Other fields, kept as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token usage of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from the prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
}

/// `llm.complete` result: the completion text, and the model and usage when known.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCompleteResult {
    /// The completion text.
    pub text: String,
    /// The model that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<LlmUsage>,
}

/// `commitTurn` params (docs/architecture.md#durable-turns-committurn): one accepted turn to commit durably.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitTurnParams {
    /// The logical turn id: the same key on a retry (docs/architecture.md#durable-turns-committurn).
    pub advancement_key: String,
    /// Where the admitted user entry of the turn sits (OpenClaw's `TranscriptTurnAdmission`).
    pub admission: super::anchor::TranscriptTurnAdmission,
    /// Where the accepted terminal entry of the turn sits (`TranscriptEntryAnchor`).
    pub terminal: super::anchor::TranscriptEntryAnchor,
    /// Only the turn's range, from `admission` to `terminal` inclusive.
    pub messages: Vec<AgentMessage>,
    /// The session the call is about.
    pub session_id: String,
    /// The host's stable key of the session (a host param, docs/architecture.md#host-added-parameters-acceptedhostparams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Where the session lives (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
    /// Whether the turn is a heartbeat (a host-initiated keep-alive turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `commitTurn` result. The status stays a string: anything but `committed` / `duplicate` is a
/// host error that keeps the outbox row queued (docs/architecture.md#durable-turns-committurn), not a malformed result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitTurnResult {
    /// `committed`, `duplicate`, or anything else (a host error).
    pub status: String,
}

impl CommitTurnResult {
    /// The first commit of a turn.
    pub fn committed() -> Self {
        CommitTurnResult {
            status: "committed".into(),
        }
    }
    /// A retry of a turn the engine already committed.
    pub fn duplicate() -> Self {
        CommitTurnResult {
            status: "duplicate".into(),
        }
    }
    /// `committed` or `duplicate`: the row may leave the outbox.
    pub fn is_settled(&self) -> bool {
        self.status == "committed" || self.status == "duplicate"
    }
}

/// `contextMode` of a subagent spawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentContextMode {
    /// The child starts with its own empty context.
    Isolated,
    /// The child starts from a fork of the parent's context.
    Fork,
}

/// `prepareSubagentSpawn` params (docs/architecture.md#subagents).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrepareSubagentSpawnParams {
    /// The session spawning the subagent.
    pub parent_session_key: String,
    /// The subagent's session.
    pub child_session_key: String,
    /// How the child's context starts.
    pub context_mode: SubagentContextMode,
    /// The parent's session id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// The child's session id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    /// How long the prepared spawn stays valid, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Transcript ids / files and anything else the host passes along.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `prepareSubagentSpawn` result (docs/architecture.md#subagents): an optional rollback handle.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrepareSubagentSpawnResult {
    /// The handle the host passes to the rollback if the launch fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_id: Option<String>,
}

/// The rollback of a prepared spawn whose launch failed (docs/architecture.md#subagents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSubagentSpawnParams {
    /// The handle `prepareSubagentSpawn` returned.
    pub rollback_id: String,
}

/// `onSubagentEnded.reason` (docs/architecture.md#subagents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentEndReason {
    /// The child session was deleted.
    Deleted,
    /// The child finished its work.
    Completed,
    /// The child expired and was swept.
    Swept,
    /// The parent released the child.
    Released,
}

/// `onSubagentEnded` params (docs/architecture.md#subagents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnSubagentEndedParams {
    /// The subagent's session.
    pub child_session_key: String,
    /// Why the child ended.
    pub reason: SubagentEndReason,
}
