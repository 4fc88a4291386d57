//! The `compact` method's params and result (docs/architecture.md#method-parameters-and-results).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::types::{RuntimeContext, RuntimeSettings, SessionTarget};

/// `compactionTarget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionTarget {
    /// Compact down to the token budget.
    Budget,
    /// Compact down to the engine's threshold.
    Threshold,
}

/// `compact` params (docs/architecture.md#method-parameters-and-results). Compared without the abort token's identity.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactParams {
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
    /// The prompt token budget of the turn, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Compact even when the engine would not need to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// The tokens the session currently holds, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    /// What to compact down to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_target: Option<CompactionTarget>,
    /// The user's instructions for the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// The runtimeSettings snapshot of this call (docs/architecture.md#runtimesettings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host facts and callbacks (docs/architecture.md#method-parameters-and-results).
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

/// `CompactResult.result` (docs/architecture.md#method-parameters-and-results): what the compaction did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactDetails {
    /// The summary that replaced the compacted entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The first transcript entry the compaction kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    /// Tokens before compaction.
    #[serde(default, serialize_with = "super::js_number::serialize")]
    pub tokens_before: f64,
    /// Tokens after compaction, when known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::js_number::serialize_option"
    )]
    pub tokens_after: Option<f64>,
    /// Engine-specific details (opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Mirrors the id of `session_target` when compaction moved the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The successor session the next retry or turn must use, when compaction
    /// changed the live session (docs/architecture.md#method-parameters-and-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<SessionTarget>,
}

/// `CompactResult` (docs/architecture.md#method-parameters-and-results).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactResult {
    /// False when compaction failed.
    pub ok: bool,
    /// Whether anything was compacted.
    pub compacted: bool,
    /// Why nothing was compacted, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the compaction did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactDetails>,
}
