//! Fault isolation (docs/architecture.md#selection-fault-isolation-and-quarantine): a wrapper engine that quarantines the engine it wraps on its
//! first failure and serves every later call from legacy.
//!
//! [`QuarantineEngine`] implements [`ContextEngine`](crate::contract::ContextEngine) around any engine (tower style). Each
//! guarded call runs under a per-call timeout with panics caught; an error, a panic, a timeout
//! or a malformed result (see the `validate_*` functions) quarantines the engine in the shared
//! [`QuarantineBook`]: the first failure's operation and reason are kept and logged once at
//! error level. For the failing call itself, `compact` and `prepareSubagentSpawn` fail closed
//! (the error goes to the caller); every other method answers with legacy's result. A caller's
//! cancellation is never a failure.
//!
//! The legacy engine itself is never guarded: its errors (for example a failed delegated
//! compaction) go to the caller unchanged.

mod book;
mod engine;
mod lifecycle;
mod record;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod timeouts;
mod validate;

pub use book::QuarantineBook;
pub(crate) use engine::panic_message;
pub use engine::QuarantineEngine;
pub use record::{quarantine_message, FailedOperation, QuarantineRecord};
pub use timeouts::{CallTimeouts, DEFAULT_CALL_TIMEOUT, DEFAULT_COMPACT_TIMEOUT};
pub use validate::{
    validate_assemble_result, validate_compact_result, validate_ingest_batch_result,
    validate_tool_call_result, CallerSession,
};
