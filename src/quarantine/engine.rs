//! The wrapper: [`QuarantineEngine`], its guarded call and legacy's stand-in answers.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::contract::{
    BootstrapResult, ContextEngine, EngineError, EngineMethod, IngestBatchParams,
    IngestBatchResult, IngestParams, MaintainResult, MethodSet,
};
use crate::engines::{LegacyEngine, LEGACY_ENGINE_ID};

use super::book::QuarantineBook;
use super::record::{FailedOperation, QuarantineRecord};
use super::timeouts::CallTimeouts;

/// How a guarded call ended when it did not succeed.
pub(super) enum Failure {
    /// The caller cancelled, or the host called an undeclared method: back to the caller,
    /// no quarantine.
    PassThrough(EngineError),
    /// The engine failed; it is now quarantined. The error is what fail-closed methods return.
    Quarantined(EngineError),
}

/// The reason recorded for a failure (without the method name, which the log line carries).
fn failure_reason(error: &EngineError) -> String {
    match error {
        EngineError::Failed { message, .. } => message.clone(),
        EngineError::Panicked { message, .. } => format!("panicked: {message}"),
        EngineError::Timeout { after, .. } => format!("timed out after {}ms", after.as_millis()),
        EngineError::Malformed { detail, .. } => format!("malformed result: {detail}"),
        EngineError::Process { detail, .. } => format!("engine process unavailable: {detail}"),
        EngineError::NotImplemented { .. } => {
            "declared the method but does not implement it".to_string()
        }
        EngineError::Cancelled { .. } => "cancelled".to_string(),
        EngineError::Refused { operation, message } => format!("{operation} refused: {message}"),
        EngineError::InvalidConfig { message, .. } => format!("invalid configuration: {message}"),
    }
}

/// The text of a caught panic payload (`panic!` with a literal or a formatted message), for
/// quarantine reasons and logs; other payload types say so.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// The reason legacy gives where it has no such member.
const LEGACY_HAS_NO_MEMBER: &str = "the legacy engine has no such member";

/// A context engine guarded by quarantine (docs/architecture.md#selection-fault-isolation-and-quarantine). Same trait as what it wraps.
pub struct QuarantineEngine {
    pub(super) engine_id: String,
    pub(super) inner: Arc<dyn ContextEngine>,
    pub(super) legacy: LegacyEngine,
    pub(super) book: Arc<QuarantineBook>,
    pub(super) timeouts: CallTimeouts,
    /// This wrapper's own engine failed (or never existed). Stays set even when the book entry
    /// is cleared by a re-registration: that registration yields a new wrapper.
    pub(super) tripped: AtomicBool,
}

impl fmt::Debug for QuarantineEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuarantineEngine")
            .field("engine_id", &self.engine_id)
            .field("quarantined", &self.is_quarantined())
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl QuarantineEngine {
    /// Guards `inner`, registered as `engine_id`.
    pub fn new(
        engine_id: impl Into<String>,
        inner: Arc<dyn ContextEngine>,
        book: Arc<QuarantineBook>,
        timeouts: CallTimeouts,
    ) -> Self {
        QuarantineEngine {
            engine_id: engine_id.into(),
            inner,
            legacy: LegacyEngine,
            book,
            timeouts,
            tripped: AtomicBool::new(false),
        }
    }

    /// The legacy engine (never guarded, never quarantined).
    pub fn legacy(book: Arc<QuarantineBook>) -> Self {
        Self::new(
            LEGACY_ENGINE_ID,
            Arc::new(LegacyEngine),
            book,
            CallTimeouts::default(),
        )
    }

    /// Stands in for `engine_id`, which is already quarantined (or could not be created): every
    /// call goes to legacy.
    pub fn quarantined(engine_id: impl Into<String>, book: Arc<QuarantineBook>) -> Self {
        let engine = Self::new(
            engine_id,
            Arc::new(LegacyEngine),
            book,
            CallTimeouts::default(),
        );
        engine.tripped.store(true, Ordering::SeqCst);
        engine
    }

    /// The id the engine was selected and registered under.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    pub(super) fn is_legacy(&self) -> bool {
        self.engine_id == LEGACY_ENGINE_ID
    }

    /// Whether calls now go to legacy.
    pub fn is_quarantined(&self) -> bool {
        !self.is_legacy()
            && (self.tripped.load(Ordering::SeqCst) || self.book.is_quarantined(&self.engine_id))
    }

    /// The id of the engine that answers calls: the wrapped one, or `legacy`.
    pub fn active_engine_id(&self) -> &str {
        if self.is_quarantined() {
            LEGACY_ENGINE_ID
        } else {
            &self.engine_id
        }
    }

    /// The recorded first failure of this engine, if any.
    pub fn quarantine_record(&self) -> Option<QuarantineRecord> {
        self.book.get(&self.engine_id)
    }

    pub fn timeouts(&self) -> CallTimeouts {
        self.timeouts
    }

    pub fn quarantine_book(&self) -> &Arc<QuarantineBook> {
        &self.book
    }

    /// Releases the wrapped engine at shutdown, quarantined or not: a quarantined
    /// out-of-process engine still has a child process to reap. A healthy engine gets its
    /// guarded `dispose`; a quarantined one gets the inner `dispose` bounded by the call
    /// timeout, with failures only logged (it is quarantined already).
    pub async fn release(&self) {
        if self.is_legacy() {
            return;
        }
        let inner_methods =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.inner.methods()));
        let Ok(inner_methods) = inner_methods else {
            tracing::warn!(engine = %self.engine_id, "methods() panicked at shutdown; not disposing");
            return;
        };
        if !inner_methods.contains(EngineMethod::Dispose) {
            return;
        }
        if !self.is_quarantined() {
            if let Err(e) = self.dispose().await {
                tracing::warn!(engine = %self.engine_id, error = %e, "dispose failed at shutdown");
            }
            return;
        }
        let timeout = self.timeouts.for_method(EngineMethod::Dispose);
        let call = std::panic::AssertUnwindSafe(self.inner.dispose()).catch_unwind();
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(engine = %self.engine_id, error = %e, "quarantined engine: dispose failed at shutdown")
            }
            Ok(Err(_)) => {
                tracing::warn!(engine = %self.engine_id, "quarantined engine: dispose panicked at shutdown")
            }
            Err(_) => {
                tracing::warn!(engine = %self.engine_id, "quarantined engine: dispose timed out at shutdown")
            }
        }
    }

    pub(super) fn trip(&self, operation: FailedOperation, reason: String) {
        self.tripped.store(true, Ordering::SeqCst);
        self.book.quarantine(&self.engine_id, operation, reason);
    }

    /// Runs `call` on the inner engine with the guards. `check` validates a successful result.
    pub(super) async fn guarded<T, Fut>(
        &self,
        method: EngineMethod,
        call: impl FnOnce() -> Fut + Send,
        abort: Option<&CancellationToken>,
        check: impl FnOnce(&T) -> Result<(), String> + Send,
    ) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T, EngineError>> + Send,
        T: Send,
    {
        if !EngineMethod::REQUIRED.contains(&method) && !self.inner_methods().contains(method) {
            // The host should not call members the engine does not list (a host bug, not an
            // engine failure).
            return Err(Failure::PassThrough(EngineError::NotImplemented { method }));
        }
        let timeout = self.timeouts.for_method(method);
        // Building the future runs engine code too, so it happens inside the panic guard.
        let run = AssertUnwindSafe(async move { call().await }).catch_unwind();
        let timed = tokio::time::timeout(timeout, run);
        let outcome = match abort {
            Some(token) => {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => {
                        return Err(Failure::PassThrough(EngineError::Cancelled { method }));
                    }
                    outcome = timed => outcome,
                }
            }
            None => timed.await,
        };
        let error = match outcome {
            Ok(Ok(Ok(value))) => match check(&value) {
                Ok(()) => return Ok(value),
                Err(detail) => EngineError::Malformed { method, detail },
            },
            Ok(Ok(Err(error))) => error,
            Ok(Err(payload)) => EngineError::Panicked {
                method,
                message: panic_message(payload.as_ref()),
            },
            Err(_elapsed) => EngineError::Timeout {
                method,
                after: timeout,
            },
        };
        if error.is_cancelled() || abort.is_some_and(CancellationToken::is_cancelled) {
            return Err(Failure::PassThrough(EngineError::Cancelled { method }));
        }
        self.trip(FailedOperation::Method(method), failure_reason(&error));
        Err(Failure::Quarantined(error))
    }

    /// The inner engine's member list, guarding against a panic in it.
    pub(super) fn inner_methods(&self) -> MethodSet {
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.methods())) {
            Ok(methods) => methods,
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Info),
                    format!("panicked: {}", panic_message(payload.as_ref())),
                );
                self.legacy.methods()
            }
        }
    }

    // Legacy's answers for members legacy does not have (the failing call of a guarded
    // engine, or a call after quarantine that the caller planned before it).

    pub(super) async fn legacy_ingest_batch(&self, params: IngestBatchParams) -> IngestBatchResult {
        let mut ingested_count = 0;
        for message in params.messages {
            let single = IngestParams {
                session_id: params.session_id.clone(),
                session_key: params.session_key.clone(),
                message: Some(message),
                is_heartbeat: params.is_heartbeat,
            };
            if matches!(self.legacy.ingest(single).await, Ok(r) if r.ingested) {
                ingested_count += 1;
            }
        }
        IngestBatchResult { ingested_count }
    }

    pub(super) fn legacy_bootstrap() -> BootstrapResult {
        BootstrapResult {
            bootstrapped: false,
            imported_messages: None,
            reason: Some(LEGACY_HAS_NO_MEMBER.to_string()),
        }
    }

    pub(super) fn legacy_maintain() -> MaintainResult {
        MaintainResult {
            changed: false,
            bytes_freed: 0,
            rewritten_entries: 0,
            reason: Some(LEGACY_HAS_NO_MEMBER.to_string()),
        }
    }
}

pub(super) fn route<T>(result: Result<T, Failure>) -> Result<Option<T>, EngineError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Failure::PassThrough(error)) => Err(error),
        Err(Failure::Quarantined(_)) => Ok(None),
    }
}
