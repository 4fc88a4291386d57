//! The `ContextEngine` trait (SPEC §1.1) and the errors its methods return.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::types::*;

/// Every lifecycle operation, named as in the contract (and in quarantine log lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EngineMethod {
    Info,
    Ingest,
    IngestBatch,
    Bootstrap,
    Assemble,
    Compact,
    AfterTurn,
    Maintain,
    CommitTurn,
    PrepareSubagentSpawn,
    RollbackSubagentSpawn,
    OnSubagentEnded,
    Dispose,
}

impl EngineMethod {
    /// The members every engine must have (SPEC §1.1).
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
        }
    }

    /// Parses a contract method name (`"afterTurn"`, …).
    pub fn parse(name: &str) -> Option<Self> {
        Self::REQUIRED
            .iter()
            .chain(Self::OPTIONAL.iter())
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

    pub fn contains(&self, m: EngineMethod) -> bool {
        self.0.contains(&m)
    }

    pub fn insert(&mut self, m: EngineMethod) {
        self.0.insert(m);
    }

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

/// What went wrong in an engine call. The quarantine wrapper turns every kind but
/// `Cancelled` into a quarantine (SPEC §2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The engine reported an error.
    #[error("{method} failed: {message}")]
    Failed {
        method: EngineMethod,
        message: String,
    },
    /// The engine panicked (caught; never propagated).
    #[error("{method} panicked: {message}")]
    Panicked {
        method: EngineMethod,
        message: String,
    },
    /// The call did not finish within its per-call timeout.
    #[error("{method} timed out after {}ms", after.as_millis())]
    Timeout {
        method: EngineMethod,
        after: Duration,
    },
    /// The result does not have the contract's shape.
    #[error("{method} returned a malformed result: {detail}")]
    Malformed {
        method: EngineMethod,
        detail: String,
    },
    /// An out-of-process engine died or could not be reached.
    #[error("{method}: engine process unavailable: {detail}")]
    Process {
        method: EngineMethod,
        detail: String,
    },
    /// The host called an optional member the engine does not implement (a host bug).
    #[error("{method} is not implemented by this engine")]
    NotImplemented { method: EngineMethod },
    /// The caller cancelled: never a failure, never quarantines.
    #[error("{method} was cancelled by the caller")]
    Cancelled { method: EngineMethod },
    /// A host-side refusal inside a callback (e.g. a rewrite outside the allowed suffix).
    #[error("{operation} refused: {message}")]
    Refused { operation: String, message: String },
}

impl EngineError {
    pub fn failed(method: EngineMethod, message: impl Into<String>) -> Self {
        EngineError::Failed {
            method,
            message: message.into(),
        }
    }

    pub fn malformed(method: EngineMethod, detail: impl Into<String>) -> Self {
        EngineError::Malformed {
            method,
            detail: detail.into(),
        }
    }

    pub fn is_cancelled(&self) -> bool {
        matches!(self, EngineError::Cancelled { .. })
    }
}

/// A context engine (SPEC §1). Required members are plain methods; optional members have a
/// default body returning [`EngineError::NotImplemented`] and are announced by
/// [`ContextEngine::methods`], which the host consults before calling them.
#[async_trait]
pub trait ContextEngine: Send + Sync {
    fn info(&self) -> EngineInfo;

    /// The members this engine implements. Rust engines list their optional members with
    /// [`MethodSet::required_plus`].
    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[])
    }

    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError>;

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError>;

    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError>;

    async fn bootstrap(&self, _params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Bootstrap,
        })
    }

    async fn maintain(&self, _params: MaintainParams) -> Result<MaintainResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::Maintain,
        })
    }

    async fn ingest_batch(
        &self,
        _params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::IngestBatch,
        })
    }

    async fn after_turn(&self, _params: AfterTurnParams) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::AfterTurn,
        })
    }

    async fn commit_turn(
        &self,
        _params: CommitTurnParams,
    ) -> Result<CommitTurnResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::CommitTurn,
        })
    }

    async fn prepare_subagent_spawn(
        &self,
        _params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::PrepareSubagentSpawn,
        })
    }

    async fn rollback_subagent_spawn(
        &self,
        _params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented {
            method: EngineMethod::RollbackSubagentSpawn,
        })
    }

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
}
