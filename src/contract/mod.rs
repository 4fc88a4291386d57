//! The context-engine contract (docs/architecture.md#the-engine-contract): messages, method parameters and results, the
//! `ContextEngine` trait, and the host callbacks of `runtimeContext`.
//!
//! Every public item here documents its contract meaning; the lint below keeps it so.

#![warn(missing_docs)]

mod anchor;
mod commands;
mod compact;
mod engine;
mod hooks;
pub mod js_number;
mod json_size;
mod message;
mod messages;
mod runtime;
mod tokens;
mod tools;
mod types;

pub use anchor::{TranscriptEntryAnchor, TranscriptTurnAdmission};
pub use commands::{parse_command_line, CommandCallParams, CommandReply, EngineCommand};
pub use compact::{CompactDetails, CompactParams, CompactResult, CompactionTarget};
pub use engine::{
    ConfigIssue, ContextEngine, EngineError, EngineMethod, MethodSet, LEGACY_ENGINE_ID,
};
pub use hooks::{
    join_blocks, HookCall, PromptBuildResult, SessionEndReason, HOOK_BEFORE_PROMPT_BUILD,
    HOOK_BEFORE_RESET, HOOK_GATEWAY_START, HOOK_GATEWAY_STOP, HOOK_SESSION_END, HOOK_SESSION_START,
};
pub use json_size::{message_json_bytes, transcript_json_bytes};
pub use message::{json_kind, AgentMessage, ContentPart, ContentPartError, MessageContent, Role};
pub use messages::Messages;
pub use runtime::RuntimeCallbacks;
pub use tokens::{estimate_tokens, CHARS_PER_TOKEN};
pub use tools::{EngineTool, ToolCallParams, ToolCallResult};
pub use types::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, ContextEngineSelection, ContextProjection, Diagnostics,
    EngineInfo, ExecutionHost, HostOperation, HostRequirement, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, Limits, LlmCompleteRequest, LlmCompleteResult,
    LlmUsage, MaintainParams, MaintainReason, MaintainResult, ModelInfo, OnSubagentEndedParams,
    PrepareSubagentSpawnParams, PrepareSubagentSpawnResult, ProjectionMode, PromptAuthority,
    ReasonCode, RollbackSubagentSpawnParams, RuntimeContext, RuntimeFacts, RuntimeInfo,
    RuntimeMode, RuntimeSettings, SelectionSource, SessionTarget, SubagentContextMode,
    SubagentEndReason, TranscriptReplacement, TranscriptRewriteRequest, TranscriptRewriteResult,
    TranscriptSemantics, TurnMaintenanceMode, CURRENT_TURN_FENCE_V1,
    TURN_ADVANCEMENT_IDEMPOTENCY_V1,
};
