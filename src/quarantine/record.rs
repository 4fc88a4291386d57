//! What a quarantine records: the failed operation and the first failure's reason.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::contract::EngineMethod;
use crate::engines::LEGACY_ENGINE_ID;

/// What an engine was doing when it failed: a registry step or a lifecycle method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailedOperation {
    /// Looking the engine up and validating its contract.
    Resolve,
    /// Running its factory.
    Factory,
    /// A lifecycle method.
    Method(EngineMethod),
}

impl FailedOperation {
    pub fn as_str(self) -> &'static str {
        match self {
            FailedOperation::Resolve => "resolve",
            FailedOperation::Factory => "factory",
            FailedOperation::Method(m) => m.as_str(),
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "resolve" => Some(FailedOperation::Resolve),
            "factory" => Some(FailedOperation::Factory),
            other => EngineMethod::parse(other).map(FailedOperation::Method),
        }
    }
}

impl fmt::Display for FailedOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FailedOperation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailedOperation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        FailedOperation::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown operation {name:?}")))
    }
}

/// The first failure of a quarantined engine: in a process's [`QuarantineBook`], and as the
/// state store persists it for `doctor` across invocations (`store::QuarantineRecord` is this
/// type). Its JSON form is `{engineId, operation, reason}`, without the time.
///
/// [`QuarantineBook`]: super::QuarantineBook
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub engine_id: String,
    pub operation: FailedOperation,
    pub reason: String,
    /// Milliseconds since the Unix epoch: when the book recorded the failure, or, for a
    /// persisted record, when the harness last wrote it to the store.
    #[serde(skip)]
    pub at_ms: u64,
}

/// The docs/architecture.md#selection-fault-isolation-and-quarantine log line for a quarantine.
pub fn quarantine_message(engine_id: &str, operation: FailedOperation, reason: &str) -> String {
    format!(
        "context engine \"{engine_id}\" failed during {operation}: {reason}; quarantined for this process, falling back to \"{LEGACY_ENGINE_ID}\""
    )
}

impl QuarantineRecord {
    /// A record read back from a store row; the operation is stored by its name
    /// ([`FailedOperation::as_str`]). Errs with a message when the name is not an operation.
    pub(crate) fn from_row(
        engine_id: String,
        operation: &str,
        reason: String,
        at_ms: u64,
    ) -> Result<Self, String> {
        let operation = FailedOperation::parse(operation)
            .ok_or_else(|| format!("unknown quarantine operation {operation:?}"))?;
        Ok(QuarantineRecord {
            engine_id,
            operation,
            reason,
            at_ms,
        })
    }

    /// The record as `turn --json` and serve's `/readyz` report a degradation:
    /// `{engine, operation, error}`.
    pub fn degraded_json(&self) -> serde_json::Value {
        serde_json::json!({
            "engine": self.engine_id,
            "operation": self.operation.as_str(),
            "error": self.reason,
        })
    }
}
