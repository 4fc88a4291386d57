//! Per-call timeouts of a guarded engine.

use std::time::Duration;

use crate::contract::EngineMethod;

/// Default per-call timeout of a lifecycle method.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default per-call timeout of `compact` (compaction may summarise with a model).
pub const DEFAULT_COMPACT_TIMEOUT: Duration = Duration::from_secs(180);

/// Per-call timeouts of a guarded engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTimeouts {
    /// Every method but `compact` (and the engine's factory).
    pub default: Duration,
    /// `compact`.
    pub compact: Duration,
}

impl Default for CallTimeouts {
    fn default() -> Self {
        CallTimeouts {
            default: DEFAULT_CALL_TIMEOUT,
            compact: DEFAULT_COMPACT_TIMEOUT,
        }
    }
}

impl CallTimeouts {
    /// The same timeout for every call.
    pub fn uniform(timeout: Duration) -> Self {
        CallTimeouts {
            default: timeout,
            compact: timeout,
        }
    }

    /// From `plugins.entries.<id>.timeoutMs`: when set it applies to every call, `compact`
    /// included; otherwise the defaults.
    pub fn from_timeout_ms(timeout_ms: Option<u64>) -> Self {
        timeout_ms.map_or_else(Self::default, |ms| Self::uniform(Duration::from_millis(ms)))
    }

    pub fn for_method(&self, method: EngineMethod) -> Duration {
        match method {
            EngineMethod::Compact => self.compact,
            _ => self.default,
        }
    }
}
