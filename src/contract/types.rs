//! Engine info, method parameters and results (SPEC §1.1, §1.3). JSON names are the contract's
//! camelCase; unknown fields of the records an engine returns are kept in `extra`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::message::AgentMessage;
use super::runtime::RuntimeCallbacks;

/// `info.turnMaintenanceMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnMaintenanceMode {
    #[default]
    Foreground,
    Background,
}

/// Operations a host checks requirements for (SPEC §1.1, §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HostOperation {
    #[serde(rename = "agent-run")]
    AgentRun,
    #[serde(rename = "manual-compact")]
    ManualCompact,
    #[serde(rename = "subagent-spawn")]
    SubagentSpawn,
}

impl HostOperation {
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
    #[serde(default)]
    pub required_capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_message: Option<String>,
}

/// `info.transcriptSemantics` (SPEC §6).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptSemantics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_turn_fence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_advancement_idempotency: Option<String>,
}

/// The value of `currentTurnFence` that durable turns need.
pub const CURRENT_TURN_FENCE_V1: &str = "before-current-turn-entry-v1";
/// The value of `turnAdvancementIdempotency` that durable turns need.
pub const TURN_ADVANCEMENT_IDEMPOTENCY_V1: &str = "atomic-idempotent-v1";

/// `EngineInfo` (SPEC §1.1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owns_compaction: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_maintenance_mode: Option<TurnMaintenanceMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_requirements: Option<BTreeMap<HostOperation, HostRequirement>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_semantics: Option<TranscriptSemantics>,
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

    pub fn owns_compaction(&self) -> bool {
        self.owns_compaction.unwrap_or(false)
    }

    pub fn turn_maintenance_mode(&self) -> TurnMaintenanceMode {
        self.turn_maintenance_mode.unwrap_or_default()
    }

    /// Both durable-turn declarations of SPEC §6 are present.
    pub fn declares_durable_turns(&self) -> bool {
        self.transcript_semantics.as_ref().is_some_and(|t| {
            t.current_turn_fence.as_deref() == Some(CURRENT_TURN_FENCE_V1)
                && t.turn_advancement_idempotency.as_deref()
                    == Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1)
        })
    }
}

/// `sessionTarget`: where a session lives (SPEC §1.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

/// Host facts handed to an engine in `runtimeContext` (the serialisable half).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeFacts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    /// Prompt-cache usage reported by the backend for the last turn (opaque JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<Value>,
}

/// `runtimeContext`: host facts plus host callbacks. Serialises as the facts only; callbacks
/// reach out-of-process engines as engine→host requests (SPEC §13).
#[derive(Clone, Default)]
pub struct RuntimeContext {
    pub facts: RuntimeFacts,
    /// `rewriteTranscriptEntries`, `llm.complete`, delegated compaction. `None` when the host
    /// offers none (and the rewrite callback is refused in pre-turn hooks, SPEC §1.3).
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

/// The runtimeSettings snapshot (schemaVersion 1, SPEC §4). Built by
/// [`crate::runtime_settings`]; unknown values are `null`, never omitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    pub schema_version: u32,
    pub runtime: RuntimeInfo,
    pub context_engine_selection: ContextEngineSelection,
    pub execution_host: ExecutionHost,
    pub model: ModelInfo,
    pub limits: Limits,
    pub diagnostics: Diagnostics,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    Normal,
    Fallback,
    Degraded,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInfo {
    pub host: String,
    pub mode: RuntimeMode,
    pub harness_id: Option<String>,
    pub runtime_id: Option<String>,
}

/// Where the selected engine id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectionSource {
    Configured,
    Default,
    Unknown,
}

impl SelectionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionSource::Configured => "configured",
            SelectionSource::Default => "default",
            SelectionSource::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineSelection {
    pub selected_id: Option<String>,
    pub source: SelectionSource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionHost {
    pub id: Option<String>,
    pub label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub requested: Option<String>,
    pub resolved: Option<String>,
    pub provider: Option<String>,
    pub family: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub prompt_token_budget: Option<u64>,
    pub max_output_tokens: Option<u64>,
}

/// The closed set of fallback / degraded reasons (SPEC §4): never raw error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    ContextOverflow,
    RuntimeUnavailable,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    pub fallback_reason: Option<ReasonCode>,
    pub degraded_reason: Option<ReasonCode>,
}

// ------------------------------------------------------------------------------------------
// Method parameters and results
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    pub message: Option<AgentMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestResult {
    pub ingested: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    pub messages: Vec<AgentMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchResult {
    pub ingested_count: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapResult {
    pub bootstrapped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_messages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    pub messages: Vec<AgentMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// `promptAuthority` (SPEC §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptAuthority {
    #[default]
    Assembled,
    PreassemblyMayOverflow,
}

/// `contextProjection.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectionMode {
    PerTurn,
    ThreadBootstrap,
}

impl ProjectionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectionMode::PerTurn => "per_turn",
            ProjectionMode::ThreadBootstrap => "thread_bootstrap",
        }
    }
}

/// `contextProjection` (SPEC §1.3, §9.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextProjection {
    pub mode: ProjectionMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl ContextProjection {
    pub fn per_turn() -> Self {
        ContextProjection {
            mode: ProjectionMode::PerTurn,
            epoch: None,
            fingerprint: None,
        }
    }

    pub fn thread_bootstrap(epoch: impl Into<String>) -> Self {
        ContextProjection {
            mode: ProjectionMode::ThreadBootstrap,
            epoch: Some(epoch.into()),
            fingerprint: None,
        }
    }
}

/// `AssembleResult` (SPEC §1.3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleResult {
    pub messages: Vec<AgentMessage>,
    pub estimated_tokens: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_addition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_authority: Option<PromptAuthority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_projection: Option<ContextProjection>,
}

/// `compactionTarget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionTarget {
    Budget,
    Threshold,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_target: Option<CompactionTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
    /// The caller's cancellation (`abortSignal`); never serialised (out-of-process engines get
    /// `$/cancelRequest`).
    #[serde(skip)]
    pub abort: Option<CancellationToken>,
}

impl PartialEq for CompactParams {
    fn eq(&self, o: &Self) -> bool {
        self.session_id == o.session_id
            && self.session_key == o.session_key
            && self.session_target == o.session_target
            && self.token_budget == o.token_budget
            && self.force == o.force
            && self.current_token_count == o.current_token_count
            && self.compaction_target == o.compaction_target
            && self.custom_instructions == o.custom_instructions
            && self.runtime_settings == o.runtime_settings
            && self.runtime_context == o.runtime_context
            && self.abort.is_some() == o.abort.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    #[serde(default)]
    pub tokens_before: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
}

/// `CompactResult` (SPEC §1.3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactResult {
    pub ok: bool,
    pub compacted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactDetails>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AfterTurnParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    pub messages: Vec<AgentMessage>,
    pub pre_prompt_message_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// `maintain.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaintainReason {
    Bootstrap,
    Turn,
    Compaction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintainParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    pub reason: MaintainReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
}

/// The result of `maintain` and of `rewriteTranscriptEntries` (same shape, SPEC §8).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintainResult {
    pub changed: bool,
    pub bytes_freed: u64,
    pub rewritten_entries: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `rewriteTranscriptEntries` result.
pub type TranscriptRewriteResult = MaintainResult;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptReplacement {
    pub entry_id: String,
    pub message: AgentMessage,
}

/// `rewriteTranscriptEntries(request)` (SPEC §8).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRewriteRequest {
    pub replacements: Vec<TranscriptReplacement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_rewrite_suffix_entry_ids: Option<Vec<String>>,
}

/// `llm.complete(params)`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCompleteRequest {
    pub messages: Vec<AgentMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LlmCompleteResult {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitTurnParams {
    pub advancement_key: String,
    pub admission: AgentMessage,
    pub terminal: AgentMessage,
    pub messages: Vec<AgentMessage>,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<RuntimeContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `commitTurn` result. The status stays a string: anything but `committed` / `duplicate` is a
/// host error that keeps the outbox row queued (SPEC §6), not a malformed result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitTurnResult {
    pub status: String,
}

impl CommitTurnResult {
    pub fn committed() -> Self {
        CommitTurnResult {
            status: "committed".into(),
        }
    }
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
    Isolated,
    Fork,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrepareSubagentSpawnParams {
    pub parent_session_key: String,
    pub child_session_key: String,
    pub context_mode: SubagentContextMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Transcript ids / files and anything else the host passes along.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrepareSubagentSpawnResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSubagentSpawnParams {
    pub rollback_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentEndReason {
    Deleted,
    Completed,
    Swept,
    Released,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnSubagentEndedParams {
    pub child_session_key: String,
    pub reason: SubagentEndReason,
}
