//! The `ContextEngine` trait (docs/architecture.md#members) and the errors its methods return.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::commands::{CommandCallParams, CommandReply, EngineCommand};
use super::compact::{CompactParams, CompactResult};
use super::hooks::HookCall;
use super::tools::{EngineTool, ToolCallParams, ToolCallResult};
use super::types::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, EngineInfo, IngestBatchParams, IngestBatchResult,
    IngestParams, IngestResult, MaintainParams, MaintainResult, OnSubagentEndedParams,
    PrepareSubagentSpawnParams, PrepareSubagentSpawnResult, RollbackSubagentSpawnParams,
};
use serde_json::Value;

/// The id the core reserves for the legacy engine, the baseline every host has: the default
/// when none is selected and the fallback for a quarantined one.
pub const LEGACY_ENGINE_ID: &str = "legacy";
/// Every lifecycle operation, named as in the contract (and in quarantine log lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EngineMethod {
    /// `info`: who the engine is (docs/architecture.md#members); out of process, the `initialize` handshake.
    Info,
    /// `ingest`: one new transcript message.
    Ingest,
    /// `ingestBatch`: several messages at once (optional).
    IngestBatch,
    /// `bootstrap`: import an existing session (optional).
    Bootstrap,
    /// `assemble`: build what the model sees this turn.
    Assemble,
    /// `compact`: shrink the session's context.
    Compact,
    /// `afterTurn`: the transcript after a successful turn (optional).
    AfterTurn,
    /// `maintain`: transcript maintenance (optional, docs/architecture.md#maintenance).
    Maintain,
    /// `commitTurn`: commit a turn durably (optional, docs/architecture.md#durable-turns-committurn).
    CommitTurn,
    /// `prepareSubagentSpawn` (optional, docs/architecture.md#subagents).
    PrepareSubagentSpawn,
    /// The rollback of a prepared subagent spawn (optional, docs/architecture.md#subagents).
    RollbackSubagentSpawn,
    /// `onSubagentEnded` (optional, docs/architecture.md#subagents).
    OnSubagentEnded,
    /// `dispose`: release the engine at shutdown or reload (optional).
    Dispose,
    /// `tools/call`: run one of the engine's tools (docs/engine-protocol.md#the-engine-process-protocol). Announced only by engines that
    /// list tools, so it is in neither [`EngineMethod::REQUIRED`] nor
    /// [`EngineMethod::OPTIONAL`].
    #[serde(rename = "tools/call")]
    CallTool,
    /// `hooks/<name>`: an OpenClaw hook the engine listens to (docs/engine-protocol.md#the-engine-process-protocol). Announced only by
    /// engines that list hooks; in neither [`EngineMethod::REQUIRED`] nor
    /// [`EngineMethod::OPTIONAL`].
    #[serde(rename = "hooks")]
    Hook,
    /// `commands/call`: run one of the engine's slash commands (docs/engine-protocol.md#the-engine-process-protocol). Announced only by
    /// engines that list commands; in neither [`EngineMethod::REQUIRED`] nor
    /// [`EngineMethod::OPTIONAL`].
    #[serde(rename = "commands/call")]
    CallCommand,
}

impl EngineMethod {
    /// The members every engine must have (docs/architecture.md#members).
    pub const REQUIRED: [EngineMethod; 4] = [
        EngineMethod::Info,
        EngineMethod::Ingest,
        EngineMethod::Assemble,
        EngineMethod::Compact,
    ];

    /// The optional members, whose presence changes what the host calls.
    pub const OPTIONAL: [EngineMethod; 9] = [
        EngineMethod::Bootstrap,
        EngineMethod::Maintain,
        EngineMethod::IngestBatch,
        EngineMethod::AfterTurn,
        EngineMethod::CommitTurn,
        EngineMethod::PrepareSubagentSpawn,
        EngineMethod::RollbackSubagentSpawn,
        EngineMethod::OnSubagentEnded,
        EngineMethod::Dispose,
    ];

    /// The contract's name of the member (`"afterTurn"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EngineMethod::Info => "info",
            EngineMethod::Ingest => "ingest",
            EngineMethod::IngestBatch => "ingestBatch",
            EngineMethod::Bootstrap => "bootstrap",
            EngineMethod::Assemble => "assemble",
            EngineMethod::Compact => "compact",
            EngineMethod::AfterTurn => "afterTurn",
            EngineMethod::Maintain => "maintain",
            EngineMethod::CommitTurn => "commitTurn",
            EngineMethod::PrepareSubagentSpawn => "prepareSubagentSpawn",
            EngineMethod::RollbackSubagentSpawn => "rollbackSubagentSpawn",
            EngineMethod::OnSubagentEnded => "onSubagentEnded",
            EngineMethod::Dispose => "dispose",
            EngineMethod::CallTool => "tools/call",
            EngineMethod::Hook => "hooks",
            EngineMethod::CallCommand => "commands/call",
        }
    }

    /// Parses a contract method name (`"afterTurn"`, `"tools/call"`, …).
    pub fn parse(name: &str) -> Option<Self> {
        Self::REQUIRED
            .iter()
            .chain(Self::OPTIONAL.iter())
            .chain(
                [
                    EngineMethod::CallTool,
                    EngineMethod::Hook,
                    EngineMethod::CallCommand,
                ]
                .iter(),
            )
            .copied()
            .find(|m| m.as_str() == name)
    }
}

impl fmt::Display for EngineMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The set of members an engine implements.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MethodSet(BTreeSet<EngineMethod>);

impl MethodSet {
    /// The required members plus `optional`.
    pub fn required_plus(optional: &[EngineMethod]) -> Self {
        let mut set: BTreeSet<_> = EngineMethod::REQUIRED.into_iter().collect();
        set.extend(optional.iter().copied());
        MethodSet(set)
    }

    /// Exactly `methods` (used for out-of-process engines that may lack required members).
    pub fn exactly(methods: impl IntoIterator<Item = EngineMethod>) -> Self {
        MethodSet(methods.into_iter().collect())
    }

    /// Whether the engine implements `m`.
    pub fn contains(&self, m: EngineMethod) -> bool {
        self.0.contains(&m)
    }

    /// Adds `m`.
    pub fn insert(&mut self, m: EngineMethod) {
        self.0.insert(m);
    }

    /// Removes `m`.
    pub fn remove(&mut self, m: EngineMethod) {
        self.0.remove(&m);
    }

    /// The members, in contract order.
    pub fn iter(&self) -> impl Iterator<Item = EngineMethod> + '_ {
        self.0.iter().copied()
    }

    /// The required members that are missing.
    pub fn missing_required(&self) -> Vec<EngineMethod> {
        EngineMethod::REQUIRED
            .into_iter()
            .filter(|m| !self.contains(*m))
            .collect()
    }
}

/// One problem an engine found in its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigIssue {
    /// The key, relative to the entry's `config` (`"keepRecent"`, `"a.b"`).
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

/// What went wrong in an engine call. The quarantine wrapper turns every kind but
/// `Cancelled` into a quarantine (docs/architecture.md#selection-fault-isolation-and-quarantine).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The engine reported an error.
    #[error("{method} failed: {message}")]
    Failed {
        /// The member that was called.
        method: EngineMethod,
        /// What the engine said.
        message: String,
    },
    /// The engine panicked (caught; never propagated).
    #[error("{method} panicked: {message}")]
    Panicked {
        /// The member that was called.
        method: EngineMethod,
        /// The panic message.
        message: String,
    },
    /// The call did not finish within its per-call timeout.
    #[error("{method} timed out after {}ms", after.as_millis())]
    Timeout {
        /// The member that was called.
        method: EngineMethod,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The result does not have the contract's shape.
    #[error("{method} returned a malformed result: {detail}")]
    Malformed {
        /// The member that was called.
        method: EngineMethod,
        /// What was wrong, for the quarantine reason.
        detail: String,
    },
    /// An out-of-process engine died or could not be reached.
    #[error("{method}: engine process unavailable: {detail}")]
    Process {
        /// The member that was called.
        method: EngineMethod,
        /// What was wrong, for the quarantine reason.
        detail: String,
    },
    /// The host called an optional member the engine does not implement (a host bug).
    #[error("{method} is not implemented by this engine")]
    NotImplemented {
        /// The member that was called.
        method: EngineMethod,
    },
    /// The caller cancelled: never a failure, never quarantines.
    #[error("{method} was cancelled by the caller")]
    Cancelled {
        /// The member that was cancelled.
        method: EngineMethod,
    },
    /// The engine rejected its configuration (`plugins.entries.<id>.config`); `issues` name
    /// the offending keys. Reported as a configuration error, not only a quarantine.
    #[error("{method}: invalid engine configuration: {message}")]
    InvalidConfig {
        /// The member that was called (usually `info`: the `initialize` handshake).
        method: EngineMethod,
        /// What the engine said (it names the keys).
        message: String,
        /// Each offending key with its problem.
        issues: Vec<ConfigIssue>,
    },
    /// A host-side refusal inside a callback (e.g. a rewrite outside the allowed suffix).
    #[error("{operation} refused: {message}")]
    Refused {
        /// The callback that refused.
        operation: String,
        /// Why it refused.
        message: String,
    },
}

impl EngineError {
    /// [`EngineError::Failed`] of `method`.
    pub fn failed(method: EngineMethod, message: impl Into<String>) -> Self {
        EngineError::Failed {
            method,
            message: message.into(),
        }
    }

    /// [`EngineError::Malformed`] of `method`.
    pub fn malformed(method: EngineMethod, detail: impl Into<String>) -> Self {
        EngineError::Malformed {
            method,
            detail: detail.into(),
        }
    }

    /// Whether the caller cancelled (never a failure, never a quarantine).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, EngineError::Cancelled { .. })
    }
}

/// A context engine (docs/architecture.md#the-engine-contract). Required members are plain methods; optional members have a
/// default body returning [`EngineError::NotImplemented`] and are announced by
/// [`ContextEngine::methods`], which the host consults before calling them.
#[async_trait]
pub trait ContextEngine: Send + Sync {
    /// Who the engine is and what it declares (docs/architecture.md#members).
    fn info(&self) -> EngineInfo;

    /// The members this engine implements. Rust engines list their optional members with
    /// [`MethodSet::required_plus`].
    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[])
    }

    /// Takes one new transcript message (required).
    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError>;

    /// Builds what the model sees this turn (required, docs/architecture.md#method-parameters-and-results).
    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError>;

    /// Shrinks the session's context (required); `params.abort` carries the caller's
    /// cancellation.
    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError>;

    /// Imports an existing session (optional).
    async fn bootstrap(&self, _params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Bootstrap,
        })
    }

    /// Transcript maintenance after bootstrap, a turn or a compaction (optional, docs/architecture.md#maintenance).
    async fn maintain(&self, _params: MaintainParams) -> Result<MaintainResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Maintain,
        })
    }

    /// Takes several messages at once (optional).
    async fn ingest_batch(
        &self,
        _params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::IngestBatch,
        })
    }

    /// Sees the transcript after a successful turn (optional; not called for engines
    /// whose turns are committed durably).
    async fn after_turn(&self, _params: AfterTurnParams) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::AfterTurn,
        })
    }

    /// Commits one accepted turn atomically and idempotently (optional, docs/architecture.md#durable-turns-committurn).
    async fn commit_turn(
        &self,
        _params: CommitTurnParams,
    ) -> Result<CommitTurnResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::CommitTurn,
        })
    }

    /// Prepares a subagent's context; may return a rollback handle (optional, docs/architecture.md#subagents).
    async fn prepare_subagent_spawn(
        &self,
        _params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::PrepareSubagentSpawn,
        })
    }

    /// Undoes a prepared spawn whose launch failed (optional, docs/architecture.md#subagents).
    async fn rollback_subagent_spawn(
        &self,
        _params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::RollbackSubagentSpawn,
        })
    }

    /// Cleans up after a subagent ended (optional, docs/architecture.md#subagents).
    async fn on_subagent_ended(&self, _params: OnSubagentEndedParams) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::OnSubagentEnded,
        })
    }

    /// Called at shutdown or engine reload, never per session.
    async fn dispose(&self) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Dispose,
        })
    }

    /// The tools this engine offers to the model (docs/engine-protocol.md#the-engine-process-protocol); none by default. An engine that
    /// lists tools announces [`EngineMethod::CallTool`] in [`ContextEngine::methods`].
    fn tools(&self) -> Vec<EngineTool> {
        Vec::new()
    }

    /// The hooks this engine listens to (`hooks/<name>`); none by default. An engine that
    /// lists hooks announces [`EngineMethod::Hook`] in [`ContextEngine::methods`].
    fn hooks(&self) -> Vec<String> {
        Vec::new()
    }

    /// Registration seams this engine used that its host does not offer (an OpenClaw plugin's
    /// `api.registerProvider`, a hook the host never fires, …): accepted and kept, so the
    /// engine loads, and listed by `doctor`. None by default.
    fn unoffered(&self) -> Vec<String> {
        Vec::new()
    }

    /// Runs hook `name` and waits for its result (`null` or an object).
    async fn call_hook(&self, _name: &str, _call: HookCall) -> Result<Value, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Hook,
        })
    }

    /// Fires hook `name` without waiting for a result.
    async fn notify_hook(&self, _name: &str, _call: HookCall) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Hook,
        })
    }

    /// The slash commands this engine registered (docs/engine-protocol.md#the-engine-process-protocol); none by default. An engine that
    /// lists commands announces [`EngineMethod::CallCommand`] in [`ContextEngine::methods`].
    fn commands(&self) -> Vec<EngineCommand> {
        Vec::new()
    }

    /// Runs one of the engine's commands (`commands/call`) and returns its reply.
    async fn call_command(&self, _params: CommandCallParams) -> Result<CommandReply, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::CallCommand,
        })
    }

    /// Runs one of the engine's tools (`tools/call`). A result with `is_error` is the tool's
    /// answer; an `Err` is an engine failure.
    async fn call_tool(&self, _params: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::CallTool,
        })
    }
}
