//! Fault isolation (docs/architecture.md#selection-fault-isolation-and-quarantine): a wrapper engine that quarantines the engine it wraps on its
//! first failure and serves every later call from legacy.
//!
//! [`QuarantineEngine`] implements [`ContextEngine`] around any engine (tower style). Each
//! guarded call runs under a per-call timeout with panics caught; an error, a panic, a timeout
//! or a malformed result (see the `validate_*` functions) quarantines the engine in the shared
//! [`QuarantineBook`]: the first failure's operation and reason are kept and logged once at
//! error level. For the failing call itself, `compact` and `prepareSubagentSpawn` fail closed
//! (the error goes to the caller); every other method answers with legacy's result. A caller's
//! cancellation is never a failure.
//!
//! The legacy engine itself is never guarded: its errors (for example a failed delegated
//! compaction) go to the caller unchanged.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommandCallParams, CommandReply, CommitTurnParams, CommitTurnResult, CompactParams,
    CompactResult, ContextEngine, EngineCommand, EngineError, EngineInfo, EngineMethod, EngineTool,
    HookCall, IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, MethodSet, OnSubagentEndedParams, PrepareSubagentSpawnParams,
    PrepareSubagentSpawnResult, RollbackSubagentSpawnParams, ToolCallParams, ToolCallResult,
};
use crate::engines::{LegacyEngine, LEGACY_ENGINE_ID};

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

/// The first failure of a quarantined engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub engine_id: String,
    pub operation: FailedOperation,
    pub reason: String,
}

/// The docs/architecture.md#selection-fault-isolation-and-quarantine log line for a quarantine.
pub fn quarantine_message(engine_id: &str, operation: FailedOperation, reason: &str) -> String {
    format!(
        "context engine \"{engine_id}\" failed during {operation}: {reason}; quarantined for this process, falling back to \"{LEGACY_ENGINE_ID}\""
    )
}

impl QuarantineRecord {
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

/// The process-wide record of quarantined engines, shared by the registry, every
/// [`QuarantineEngine`] and `doctor`. The first failure of an engine wins.
#[derive(Debug, Default)]
pub struct QuarantineBook {
    records: Mutex<BTreeMap<String, QuarantineRecord>>,
    /// Told of every quarantine recorded (`serve`'s metrics); none by default.
    metrics: std::sync::OnceLock<Arc<dyn crate::metrics::MetricsSink>>,
}

impl QuarantineBook {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, QuarantineRecord>> {
        // A panic while holding this lock leaves the map intact (single inserts/removes), so a
        // poisoned lock is still safe to use.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Quarantines `engine_id` unless it already is (or is legacy, which never is). Returns
    /// whether this call recorded it; only then is the error line logged.
    pub fn quarantine(
        &self,
        engine_id: &str,
        operation: FailedOperation,
        reason: impl Into<String>,
    ) -> bool {
        if engine_id == LEGACY_ENGINE_ID {
            return false;
        }
        let mut records = self.lock();
        if records.contains_key(engine_id) {
            return false;
        }
        let record = QuarantineRecord {
            engine_id: engine_id.to_string(),
            operation,
            reason: reason.into(),
        };
        tracing::error!(
            "{}",
            quarantine_message(&record.engine_id, record.operation, &record.reason)
        );
        if let Some(sink) = self.metrics.get() {
            sink.engine_quarantined(&record.engine_id, record.operation.as_str());
        }
        records.insert(engine_id.to_string(), record);
        true
    }

    /// Reports every quarantine to `sink` (the first sink set stays): those recorded before —
    /// an engine that failed while the process started, before its metrics existed — at once,
    /// and those recorded from now on as they happen.
    pub fn report_to(&self, sink: Arc<dyn crate::metrics::MetricsSink>) {
        let records = self.lock();
        if self.metrics.set(sink.clone()).is_ok() {
            for record in records.values() {
                sink.engine_quarantined(&record.engine_id, record.operation.as_str());
            }
        }
    }

    pub fn is_quarantined(&self, engine_id: &str) -> bool {
        self.lock().contains_key(engine_id)
    }

    pub fn get(&self, engine_id: &str) -> Option<QuarantineRecord> {
        self.lock().get(engine_id).cloned()
    }

    /// Every record, by engine id (for doctor, and for a harness that persists them).
    pub fn records(&self) -> Vec<QuarantineRecord> {
        self.lock().values().cloned().collect()
    }

    /// Adds persisted records without logging them again; an engine already recorded keeps its
    /// record. Returns how many were added.
    pub fn restore(&self, records: impl IntoIterator<Item = QuarantineRecord>) -> usize {
        let mut map = self.lock();
        let mut added = 0;
        for record in records {
            if record.engine_id == LEGACY_ENGINE_ID || map.contains_key(&record.engine_id) {
                continue;
            }
            map.insert(record.engine_id.clone(), record);
            added += 1;
        }
        added
    }

    /// Forgets the quarantine of `engine_id` (a new registration of the id).
    pub fn clear(&self, engine_id: &str) -> Option<QuarantineRecord> {
        self.lock().remove(engine_id)
    }
}

// ------------------------------------------------------------------------------------------
// Result validation (malformed results are lifecycle failures)
// ------------------------------------------------------------------------------------------

/// Who called `compact`: a successor session must stay with the same agent and session key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallerSession {
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
}

impl CallerSession {
    /// The caller as `compact`'s params describe it (`sessionKey`, else
    /// `sessionTarget.sessionKey`; `sessionTarget.agentId`).
    pub fn of_compact(params: &CompactParams) -> Self {
        let target = params.session_target.as_ref();
        CallerSession {
            agent_id: target.and_then(|t| t.agent_id.clone()),
            session_key: params
                .session_key
                .clone()
                .or_else(|| target.and_then(|t| t.session_key.clone())),
        }
    }
}

fn check_count(name: &str, value: f64) -> Result<(), String> {
    if !value.is_finite() {
        Err(format!("{name} must be a finite number, got {value}"))
    } else if value < 0.0 {
        Err(format!("{name} must not be negative, got {value}"))
    } else {
        Ok(())
    }
}

/// `AssembleResult`: `estimatedTokens` finite and ≥ 0.
pub fn validate_assemble_result(result: &AssembleResult) -> Result<(), String> {
    check_count("estimatedTokens", result.estimated_tokens)
}

/// `IngestBatchResult`: an engine cannot ingest more messages than it was given.
pub fn validate_ingest_batch_result(
    result: &IngestBatchResult,
    message_count: usize,
) -> Result<(), String> {
    if result.ingested_count > message_count as u64 {
        return Err(format!(
            "ingestedCount {} exceeds the {} messages given",
            result.ingested_count, message_count
        ));
    }
    Ok(())
}

/// `CompactResult` (docs/architecture.md#method-parameters-and-results): consistent flags, finite token counts, and a successor
/// `sessionTarget` that names neither another agent nor another session key than the caller's
/// (compared where the caller's value is known), with `result.sessionId` mirroring its id.
pub fn validate_compact_result(
    result: &CompactResult,
    caller: &CallerSession,
) -> Result<(), String> {
    if result.compacted && !result.ok {
        return Err("compacted is true but ok is false".to_string());
    }
    let Some(details) = &result.result else {
        return Ok(());
    };
    check_count("result.tokensBefore", details.tokens_before)?;
    if let Some(after) = details.tokens_after {
        check_count("result.tokensAfter", after)?;
    }
    if let Some(successor) = &details.session_target {
        if let (Some(theirs), Some(ours)) = (&successor.agent_id, &caller.agent_id) {
            if theirs != ours {
                return Err(format!(
                    "successor sessionTarget names agent {theirs:?}, not the caller's {ours:?}"
                ));
            }
        }
        if let (Some(theirs), Some(ours)) = (&successor.session_key, &caller.session_key) {
            if theirs != ours {
                return Err(format!(
                    "successor sessionTarget names session key {theirs:?}, not the caller's {ours:?}"
                ));
            }
        }
        if let (Some(mirror), Some(id)) = (&details.session_id, &successor.session_id) {
            if mirror != id {
                return Err(format!(
                    "result.sessionId {mirror:?} does not mirror sessionTarget.sessionId {id:?}"
                ));
            }
        }
    }
    Ok(())
}

/// `tools/call` result: every content part is an object with a string `type`.
pub fn validate_tool_call_result(result: &ToolCallResult) -> Result<(), String> {
    for (index, part) in result.content.iter().enumerate() {
        if part
            .get("type")
            .and_then(serde_json::Value::as_str)
            .is_none()
        {
            return Err(format!(
                "content[{index}] is not a content part (an object with a string `type`)"
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// The wrapper
// ------------------------------------------------------------------------------------------

/// How a guarded call ended when it did not succeed.
enum Failure {
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
    engine_id: String,
    inner: Arc<dyn ContextEngine>,
    legacy: LegacyEngine,
    book: Arc<QuarantineBook>,
    timeouts: CallTimeouts,
    /// This wrapper's own engine failed (or never existed). Stays set even when the book entry
    /// is cleared by a re-registration: that registration yields a new wrapper.
    tripped: AtomicBool,
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

    fn is_legacy(&self) -> bool {
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

    fn trip(&self, operation: FailedOperation, reason: String) {
        self.tripped.store(true, Ordering::SeqCst);
        self.book.quarantine(&self.engine_id, operation, reason);
    }

    /// Runs `call` on the inner engine with the guards. `check` validates a successful result.
    async fn guarded<T, Fut>(
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
    fn inner_methods(&self) -> MethodSet {
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

    async fn legacy_ingest_batch(&self, params: IngestBatchParams) -> IngestBatchResult {
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

    fn legacy_bootstrap() -> BootstrapResult {
        BootstrapResult {
            bootstrapped: false,
            imported_messages: None,
            reason: Some(LEGACY_HAS_NO_MEMBER.to_string()),
        }
    }

    fn legacy_maintain() -> MaintainResult {
        MaintainResult {
            changed: false,
            bytes_freed: 0,
            rewritten_entries: 0,
            reason: Some(LEGACY_HAS_NO_MEMBER.to_string()),
        }
    }
}

fn route<T>(result: Result<T, Failure>) -> Result<Option<T>, EngineError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Failure::PassThrough(error)) => Err(error),
        Err(Failure::Quarantined(_)) => Ok(None),
    }
}

#[async_trait]
impl ContextEngine for QuarantineEngine {
    /// The wrapped engine's info, or legacy's after quarantine.
    fn info(&self) -> EngineInfo {
        if self.is_legacy() {
            return self.inner.info();
        }
        if self.is_quarantined() {
            return LegacyEngine::engine_info();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.info())) {
            Ok(info) => info,
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Info),
                    format!("panicked: {}", panic_message(payload.as_ref())),
                );
                LegacyEngine::engine_info()
            }
        }
    }

    /// The wrapped engine's members unchanged (the host does not call the others), or
    /// legacy's after quarantine.
    fn methods(&self) -> MethodSet {
        if self.is_legacy() {
            return self.inner.methods();
        }
        if self.is_quarantined() {
            return self.legacy.methods();
        }
        let methods = self.inner_methods();
        if self.is_quarantined() {
            return self.legacy.methods();
        }
        methods
    }

    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError> {
        if self.is_legacy() {
            return self.inner.ingest(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::Ingest,
                    || self.inner.ingest(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return self.legacy.ingest(retry).await,
            }
        }
        self.legacy.ingest(params).await
    }

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        if self.is_legacy() {
            return self.inner.assemble(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::Assemble,
                    || self.inner.assemble(params),
                    None,
                    validate_assemble_result,
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return self.legacy.assemble(retry).await,
            }
        }
        self.legacy.assemble(params).await
    }

    /// Fails closed: the failing call's error goes to the caller.
    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        if self.is_legacy() {
            return self.inner.compact(params).await;
        }
        if self.is_quarantined() {
            return self.legacy.compact(params).await;
        }
        let caller = CallerSession::of_compact(&params);
        let abort = params.abort.clone();
        let outcome = self
            .guarded(
                EngineMethod::Compact,
                || self.inner.compact(params),
                abort.as_ref(),
                |result| validate_compact_result(result, &caller),
            )
            .await;
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::PassThrough(error) | Failure::Quarantined(error)) => Err(error),
        }
    }

    async fn bootstrap(&self, params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        if self.is_legacy() {
            return self.inner.bootstrap(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Bootstrap,
                    || self.inner.bootstrap(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(Self::legacy_bootstrap())
    }

    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        if self.is_legacy() {
            return self.inner.maintain(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Maintain,
                    || self.inner.maintain(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(Self::legacy_maintain())
    }

    async fn ingest_batch(
        &self,
        params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        if self.is_legacy() {
            return self.inner.ingest_batch(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let count = params.messages.len();
            let outcome = self
                .guarded(
                    EngineMethod::IngestBatch,
                    || self.inner.ingest_batch(params),
                    None,
                    |result| validate_ingest_batch_result(result, count),
                )
                .await;
            match route(outcome)? {
                Some(value) => return Ok(value),
                None => return Ok(self.legacy_ingest_batch(retry).await),
            }
        }
        Ok(self.legacy_ingest_batch(params).await)
    }

    async fn after_turn(&self, params: AfterTurnParams) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.after_turn(params).await;
        }
        if !self.is_quarantined() {
            let retry = params.clone();
            let outcome = self
                .guarded(
                    EngineMethod::AfterTurn,
                    || self.inner.after_turn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            match route(outcome)? {
                Some(()) => return Ok(()),
                None => return self.legacy.after_turn(retry).await,
            }
        }
        self.legacy.after_turn(params).await
    }

    /// Legacy keeps every turn in the host transcript, so on legacy a turn is committed: the
    /// outbox row of a quarantined engine is settled rather than retried against legacy.
    async fn commit_turn(&self, params: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        if self.is_legacy() {
            return self.inner.commit_turn(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::CommitTurn,
                    || self.inner.commit_turn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            if let Some(value) = route(outcome)? {
                return Ok(value);
            }
        }
        Ok(CommitTurnResult::committed())
    }

    /// Fails closed: the failing call's error goes to the caller (and the spawn fails). After
    /// quarantine legacy prepares nothing.
    async fn prepare_subagent_spawn(
        &self,
        params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        if self.is_legacy() {
            return self.inner.prepare_subagent_spawn(params).await;
        }
        if self.is_quarantined() {
            return Ok(PrepareSubagentSpawnResult::default());
        }
        let outcome = self
            .guarded(
                EngineMethod::PrepareSubagentSpawn,
                || self.inner.prepare_subagent_spawn(params),
                None,
                |_| Ok(()),
            )
            .await;
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::PassThrough(error) | Failure::Quarantined(error)) => Err(error),
        }
    }

    async fn rollback_subagent_spawn(
        &self,
        params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.rollback_subagent_spawn(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::RollbackSubagentSpawn,
                    || self.inner.rollback_subagent_spawn(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            route(outcome)?;
        }
        Ok(())
    }

    async fn on_subagent_ended(&self, params: OnSubagentEndedParams) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.on_subagent_ended(params).await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::OnSubagentEnded,
                    || self.inner.on_subagent_ended(params),
                    None,
                    |_| Ok(()),
                )
                .await;
            route(outcome)?;
        }
        Ok(())
    }

    /// The wrapped engine's tools; none once quarantined (legacy registers no tools).
    fn tools(&self) -> Vec<EngineTool> {
        if self.is_legacy() {
            return self.inner.tools();
        }
        if self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.tools())) {
            Ok(tools) if !self.is_quarantined() => tools,
            Ok(_) => Vec::new(),
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Info),
                    format!("tools() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// The wrapped engine's registrations its host does not offer; none once quarantined. A
    /// list the engine reported at start-up, read without calling into it: nothing to isolate.
    fn unoffered(&self) -> Vec<String> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        self.inner.unoffered()
    }

    /// The wrapped engine's hooks; none once quarantined (legacy listens to none).
    fn hooks(&self) -> Vec<String> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.hooks())) {
            Ok(hooks) if !self.is_quarantined() => hooks,
            Ok(_) => Vec::new(),
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::Hook),
                    format!("hooks() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// Runs a hook the engine listens to (a hook it does not list answers `null` unsent). A
    /// failure (error, panic, timeout, dead process,
    /// malformed result) is a lifecycle failure: the engine is quarantined and the call
    /// answers `null` (legacy has no hooks), as it does after quarantine.
    async fn call_hook(
        &self,
        name: &str,
        call: HookCall,
    ) -> Result<serde_json::Value, EngineError> {
        if self.is_legacy() || self.is_quarantined() || !self.hooks().iter().any(|h| h == name) {
            return Ok(serde_json::Value::Null);
        }
        let outcome = self
            .guarded(
                EngineMethod::Hook,
                || self.inner.call_hook(name, call),
                None,
                |_| Ok(()),
            )
            .await;
        Ok(route(outcome)?.unwrap_or(serde_json::Value::Null))
    }

    /// Fires a hook the engine listens to; a failure to send quarantines it.
    async fn notify_hook(&self, name: &str, call: HookCall) -> Result<(), EngineError> {
        if self.is_legacy() || self.is_quarantined() || !self.hooks().iter().any(|h| h == name) {
            return Ok(());
        }
        let outcome = self
            .guarded(
                EngineMethod::Hook,
                || self.inner.notify_hook(name, call),
                None,
                |_| Ok(()),
            )
            .await;
        route(outcome)?;
        Ok(())
    }

    /// The wrapped engine's commands; none once quarantined (legacy registers none).
    fn commands(&self) -> Vec<EngineCommand> {
        if self.is_legacy() || self.is_quarantined() {
            return Vec::new();
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.commands())) {
            Ok(commands) => commands,
            Err(payload) => {
                self.trip(
                    FailedOperation::Method(EngineMethod::CallCommand),
                    format!("commands() panicked: {}", panic_message(payload.as_ref())),
                );
                Vec::new()
            }
        }
    }

    /// Runs a command the engine registered. A command is run by the user, not by a turn: its
    /// failure (error, timeout, malformed reply, panic) is the user's answer and does not
    /// quarantine the engine. A command the engine does not list, or any command once the
    /// engine is quarantined, is refused unsent.
    async fn call_command(&self, params: CommandCallParams) -> Result<CommandReply, EngineError> {
        let method = EngineMethod::CallCommand;
        if self.is_legacy() || self.is_quarantined() {
            return Err(EngineError::failed(
                method,
                format!(
                    "/{} is not available: context engine \"{}\" is quarantined",
                    params.name, self.engine_id
                ),
            ));
        }
        if !self.commands().iter().any(|c| c.name == params.name) {
            return Err(EngineError::NotImplemented { method });
        }
        match AssertUnwindSafe(self.inner.call_command(params))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(payload) => Err(EngineError::Panicked {
                method,
                message: panic_message(payload.as_ref()),
            }),
        }
    }

    /// Runs an engine tool. The caller (the backend's tool loop) always gets an answer for
    /// the model: a failure of the engine (error, panic, timeout, dead process, malformed
    /// result) quarantines it and comes back as an `is_error` result, as does a call after
    /// quarantine or of a tool the engine does not list (which is not sent to the engine: a
    /// model's made-up name must not quarantine it). `Err` only for a caller's cancellation
    /// or an engine without tools (a host bug).
    async fn call_tool(&self, params: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        if self.is_legacy() {
            return self.inner.call_tool(params).await;
        }
        let name = params.name.clone();
        if self.is_quarantined() {
            return Ok(ToolCallResult::error(format!(
                "tool \"{name}\" is not available: context engine \"{}\" is quarantined",
                self.engine_id
            )));
        }
        if self.inner_methods().contains(EngineMethod::CallTool)
            && !self.tools().iter().any(|tool| tool.name == name)
        {
            return Ok(ToolCallResult::error(format!(
                "unknown tool \"{name}\": context engine \"{}\" has no such tool",
                self.engine_id
            )));
        }
        let outcome = self
            .guarded(
                EngineMethod::CallTool,
                || self.inner.call_tool(params),
                None,
                validate_tool_call_result,
            )
            .await;
        match outcome {
            Ok(result) => Ok(result),
            Err(Failure::PassThrough(error)) => Err(error),
            Err(Failure::Quarantined(error)) => Ok(ToolCallResult::error(format!(
                "tool \"{name}\" failed: {error}"
            ))),
        }
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        if self.is_legacy() {
            return self.inner.dispose().await;
        }
        if !self.is_quarantined() {
            let outcome = self
                .guarded(
                    EngineMethod::Dispose,
                    || self.inner.dispose(),
                    None,
                    |_| Ok(()),
                )
                .await;
            if route(outcome)?.is_some() {
                return Ok(());
            }
        }
        self.legacy.dispose().await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::{CompactDetails, SessionTarget};

    /// A record round-trips through JSON with the operation as its contract name.
    #[test]
    fn records_serialize_with_operation_names() {
        let record = QuarantineRecord {
            engine_id: "e".into(),
            operation: FailedOperation::Method(EngineMethod::AfterTurn),
            reason: "boom".into(),
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"engineId": "e", "operation": "afterTurn", "reason": "boom"})
        );
        assert_eq!(
            serde_json::from_value::<QuarantineRecord>(json).unwrap(),
            record
        );
        assert_eq!(
            FailedOperation::parse("resolve"),
            Some(FailedOperation::Resolve)
        );
        assert_eq!(FailedOperation::parse("nope"), None);
    }

    /// The book keeps the first failure, never records legacy, and restores without overwriting.
    #[test]
    fn book_first_failure_wins() {
        let book = QuarantineBook::new();
        assert!(book.quarantine("e", FailedOperation::Resolve, "first"));
        assert!(!book.quarantine("e", FailedOperation::Factory, "second"));
        assert_eq!(book.get("e").unwrap().reason, "first");
        assert!(!book.quarantine("legacy", FailedOperation::Resolve, "x"));
        assert!(!book.is_quarantined("legacy"));
        let added = book.restore([
            QuarantineRecord {
                engine_id: "e".into(),
                operation: FailedOperation::Factory,
                reason: "old".into(),
            },
            QuarantineRecord {
                engine_id: "f".into(),
                operation: FailedOperation::Method(EngineMethod::Compact),
                reason: "old".into(),
            },
        ]);
        assert_eq!(added, 1);
        assert_eq!(book.get("e").unwrap().reason, "first");
        assert_eq!(book.records().len(), 2);
        assert!(book.clear("f").is_some());
        assert!(!book.is_quarantined("f"));
    }

    /// estimatedTokens must be finite and non-negative.
    #[test]
    fn assemble_validation() {
        let mut r = AssembleResult::default();
        assert!(validate_assemble_result(&r).is_ok());
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            r.estimated_tokens = bad;
            assert!(validate_assemble_result(&r).is_err(), "{bad}");
        }
    }

    /// A successor naming another agent or session key is rejected; the same ones pass; the
    /// mirrored session id must agree.
    #[test]
    fn compact_successor_validation() {
        let caller = CallerSession {
            agent_id: Some("main".into()),
            session_key: Some("k".into()),
        };
        let result = |target: SessionTarget, session_id: Option<&str>| CompactResult {
            ok: true,
            compacted: true,
            reason: None,
            result: Some(CompactDetails {
                tokens_before: 10.0,
                session_id: session_id.map(str::to_string),
                session_target: Some(target),
                ..Default::default()
            }),
        };
        let same = SessionTarget {
            agent_id: Some("main".into()),
            session_key: Some("k".into()),
            session_id: Some("s2".into()),
            ..Default::default()
        };
        assert!(validate_compact_result(&result(same.clone(), Some("s2")), &caller).is_ok());
        let other_agent = SessionTarget {
            agent_id: Some("ops".into()),
            ..same.clone()
        };
        let e = validate_compact_result(&result(other_agent, None), &caller).unwrap_err();
        assert!(e.contains("agent \"ops\""), "{e}");
        let other_key = SessionTarget {
            session_key: Some("k2".into()),
            ..same.clone()
        };
        assert!(validate_compact_result(&result(other_key, None), &caller).is_err());
        assert!(validate_compact_result(&result(same.clone(), Some("s3")), &caller).is_err());
        let bad_flags = CompactResult {
            ok: false,
            compacted: true,
            reason: None,
            result: None,
        };
        assert!(validate_compact_result(&bad_flags, &caller).is_err());
        let mut negative = result(same, None);
        if let Some(d) = negative.result.as_mut() {
            d.tokens_after = Some(-5.0);
        }
        assert!(validate_compact_result(&negative, &caller).is_err());
    }

    /// Per-entry timeoutMs applies to every method; defaults are 60 s and 180 s for compact.
    #[test]
    fn timeouts() {
        let d = CallTimeouts::default();
        assert_eq!(
            d.for_method(EngineMethod::Assemble),
            Duration::from_secs(60)
        );
        assert_eq!(
            d.for_method(EngineMethod::Compact),
            Duration::from_secs(180)
        );
        let t = CallTimeouts::from_timeout_ms(Some(250));
        assert_eq!(
            t.for_method(EngineMethod::Compact),
            Duration::from_millis(250)
        );
        assert_eq!(CallTimeouts::from_timeout_ms(None), d);
    }
}
