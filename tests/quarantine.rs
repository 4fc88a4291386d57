//! Fault isolation (docs/architecture.md#selection-fault-isolation-and-quarantine): every guarded method × every failure kind, the log line,
//! first-failure-wins, cancellation, undeclared members and re-registration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctxbridge::contract::*;
use ctxbridge::engines::LegacyEngine;
use ctxbridge::quarantine::{
    quarantine_message, CallTimeouts, FailedOperation, QuarantineBook, QuarantineEngine,
};
use ctxbridge::registry::{EngineFactoryContext, EngineRegistry};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

mod support;
use support::engine_calls::{self, fails_closed};

/// How the faulty engine misbehaves in one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Error,
    /// Yields once, then errors (to overlap with another failing call).
    ErrorAfterYield,
    Panic,
    Hang,
    Malformed,
    Cancelled,
}

/// An engine implementing every member, healthy except for the configured faults. Its healthy
/// answers differ from legacy's so the tests can tell who answered.
struct FaultyEngine {
    id: String,
    faults: HashMap<EngineMethod, Fault>,
    methods: MethodSet,
    calls: Mutex<Vec<EngineMethod>>,
    panic_in_info: bool,
}

impl FaultyEngine {
    fn new(faults: &[(EngineMethod, Fault)]) -> Self {
        FaultyEngine {
            id: "faulty".into(),
            faults: faults.iter().copied().collect(),
            methods: {
                let mut methods = MethodSet::required_plus(&EngineMethod::OPTIONAL);
                methods.insert(EngineMethod::CallTool);
                methods
            },
            calls: Mutex::new(Vec::new()),
            panic_in_info: false,
        }
    }

    fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    async fn act<T>(
        &self,
        method: EngineMethod,
        healthy: impl FnOnce() -> T,
        malformed: impl FnOnce() -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        self.calls.lock().unwrap().push(method);
        match self.faults.get(&method) {
            None => Ok(healthy()),
            Some(Fault::Error) => Err(EngineError::failed(method, "engine said no")),
            Some(Fault::ErrorAfterYield) => {
                tokio::task::yield_now().await;
                Err(EngineError::failed(method, "late failure"))
            }
            Some(Fault::Panic) => panic!("bug in {method}"),
            Some(Fault::Hang) => std::future::pending().await,
            Some(Fault::Malformed) => malformed(),
            Some(Fault::Cancelled) => Err(EngineError::Cancelled { method }),
        }
    }
}

/// What an out-of-process adapter reports for a result of the wrong shape.
fn wrong_shape<T>(method: EngineMethod) -> Result<T, EngineError> {
    Err(EngineError::malformed(
        method,
        "invalid type: string, expected a map",
    ))
}

#[async_trait]
impl ContextEngine for FaultyEngine {
    fn info(&self) -> EngineInfo {
        if self.panic_in_info {
            panic!("info is broken");
        }
        EngineInfo::new(self.id.clone(), "Faulty Engine")
    }

    fn methods(&self) -> MethodSet {
        self.methods.clone()
    }

    async fn ingest(&self, _: IngestParams) -> Result<IngestResult, EngineError> {
        let m = EngineMethod::Ingest;
        self.act(m, || IngestResult { ingested: true }, || wrong_shape(m))
            .await
    }

    async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
        let healthy = AssembleResult {
            messages: p.messages.clone(),
            estimated_tokens: 42.0,
            system_prompt_addition: Some("from the faulty engine".into()),
            ..Default::default()
        };
        let malformed = AssembleResult {
            estimated_tokens: f64::NAN,
            ..healthy.clone()
        };
        self.act(EngineMethod::Assemble, || healthy, || Ok(malformed))
            .await
    }

    async fn compact(&self, _: CompactParams) -> Result<CompactResult, EngineError> {
        let healthy = CompactResult {
            ok: true,
            compacted: true,
            reason: Some("faulty compacted".into()),
            result: None,
        };
        // A successor in another session key than the caller's "k".
        let malformed = CompactResult {
            ok: true,
            compacted: true,
            reason: None,
            result: Some(CompactDetails {
                tokens_before: 100.0,
                session_target: Some(SessionTarget {
                    session_key: Some("someone-else".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        self.act(EngineMethod::Compact, || healthy, || Ok(malformed))
            .await
    }

    async fn bootstrap(&self, _: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        let m = EngineMethod::Bootstrap;
        let healthy = BootstrapResult {
            bootstrapped: true,
            imported_messages: Some(3),
            reason: None,
        };
        self.act(m, || healthy, || wrong_shape(m)).await
    }

    async fn maintain(&self, _: MaintainParams) -> Result<MaintainResult, EngineError> {
        let m = EngineMethod::Maintain;
        let healthy = MaintainResult {
            changed: true,
            bytes_freed: 10,
            rewritten_entries: 1,
            reason: None,
        };
        self.act(m, || healthy, || wrong_shape(m)).await
    }

    async fn ingest_batch(&self, p: IngestBatchParams) -> Result<IngestBatchResult, EngineError> {
        let n = p.messages.len() as u64;
        self.act(
            EngineMethod::IngestBatch,
            || IngestBatchResult { ingested_count: n },
            || {
                Ok(IngestBatchResult {
                    ingested_count: n + 5,
                })
            },
        )
        .await
    }

    async fn after_turn(&self, _: AfterTurnParams) -> Result<(), EngineError> {
        let m = EngineMethod::AfterTurn;
        self.act(m, || (), || wrong_shape(m)).await
    }

    async fn commit_turn(&self, _: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        let m = EngineMethod::CommitTurn;
        self.act(m, CommitTurnResult::duplicate, || wrong_shape(m))
            .await
    }

    async fn prepare_subagent_spawn(
        &self,
        _: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        let m = EngineMethod::PrepareSubagentSpawn;
        let healthy = PrepareSubagentSpawnResult {
            rollback_id: Some("rb-1".into()),
        };
        self.act(m, || healthy, || wrong_shape(m)).await
    }

    async fn rollback_subagent_spawn(
        &self,
        _: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        let m = EngineMethod::RollbackSubagentSpawn;
        self.act(m, || (), || wrong_shape(m)).await
    }

    async fn on_subagent_ended(&self, _: OnSubagentEndedParams) -> Result<(), EngineError> {
        let m = EngineMethod::OnSubagentEnded;
        self.act(m, || (), || wrong_shape(m)).await
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        let m = EngineMethod::Dispose;
        self.act(m, || (), || wrong_shape(m)).await
    }

    fn tools(&self) -> Vec<EngineTool> {
        vec![EngineTool {
            name: "probe".into(),
            description: "Probes the faulty engine".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    async fn call_tool(&self, p: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        // A content part that is not an object is what a broken engine would send.
        let malformed = ToolCallResult {
            content: vec![json!("bare string")],
            is_error: false,
        };
        let answer = if p.arguments["soft"] == json!(true) {
            ToolCallResult::error("the tool says no")
        } else {
            ToolCallResult::from_text(format!("probed {}", p.arguments))
        };
        self.act(EngineMethod::CallTool, || answer, || Ok(malformed))
            .await
    }
}

/// Every member the wrapper guards (all but `info`).
const GUARDED: [EngineMethod; 12] = [
    EngineMethod::Ingest,
    EngineMethod::IngestBatch,
    EngineMethod::Bootstrap,
    EngineMethod::Assemble,
    EngineMethod::Compact,
    EngineMethod::AfterTurn,
    EngineMethod::Maintain,
    EngineMethod::CommitTurn,
    EngineMethod::PrepareSubagentSpawn,
    EngineMethod::RollbackSubagentSpawn,
    EngineMethod::OnSubagentEnded,
    EngineMethod::Dispose,
];

fn compact_params(abort: Option<CancellationToken>) -> CompactParams {
    CompactParams {
        session_id: "s".into(),
        session_key: Some("k".into()),
        session_target: Some(SessionTarget {
            agent_id: Some("main".into()),
            session_key: Some("k".into()),
            ..Default::default()
        }),
        force: Some(true),
        abort,
        ..Default::default()
    }
}

async fn call(engine: &dyn ContextEngine, method: EngineMethod) -> Result<Value, EngineError> {
    engine_calls::call(engine, method, tool_call("probe", json!({}))).await
}

fn tool_call(name: &str, arguments: Value) -> ToolCallParams {
    ToolCallParams {
        session_id: "s".into(),
        session_key: Some("k".into()),
        name: name.into(),
        arguments,
        tool_call_id: Some("call-1".into()),
    }
}

const FAST: Duration = Duration::from_millis(50);

fn guarded(engine: Arc<FaultyEngine>, book: &Arc<QuarantineBook>) -> QuarantineEngine {
    QuarantineEngine::new(
        "faulty",
        engine,
        Arc::clone(book),
        CallTimeouts::uniform(FAST),
    )
}

async fn legacy_answer(method: EngineMethod) -> Result<Value, EngineError> {
    engine_calls::legacy_answer(method, tool_call("probe", json!({}))).await
}

/// Every guarded method × error, panic, timeout and malformed result: the engine is
/// quarantined with the method as operation and a reason naming the kind; compact and
/// prepareSubagentSpawn return the error, the others legacy's answer; afterwards every call
/// goes to legacy (the engine is never called again) and info/methods report legacy.
#[tokio::test]
async fn every_method_every_failure_kind_quarantines() {
    for method in GUARDED {
        for fault in [Fault::Error, Fault::Panic, Fault::Hang, Fault::Malformed] {
            let case = format!("{method} × {fault:?}");
            let book = Arc::new(QuarantineBook::new());
            let inner = Arc::new(FaultyEngine::new(&[(method, fault)]));
            let engine = guarded(Arc::clone(&inner), &book);

            let answer = call(&engine, method).await;
            if fails_closed(method) {
                let error = answer.expect_err(&case);
                let kind_matches = match fault {
                    Fault::Error => matches!(error, EngineError::Failed { .. }),
                    Fault::Panic => matches!(error, EngineError::Panicked { .. }),
                    Fault::Hang => matches!(error, EngineError::Timeout { .. }),
                    _ => matches!(error, EngineError::Malformed { .. }),
                };
                assert!(kind_matches, "{case}: {error:?}");
            } else {
                assert_eq!(answer, legacy_answer(method).await, "{case}");
            }

            let record = book.get("faulty").expect(&case);
            assert_eq!(record.operation, FailedOperation::Method(method), "{case}");
            let reason_ok = match fault {
                Fault::Error => record.reason == "engine said no",
                Fault::Panic => record.reason == format!("panicked: bug in {method}"),
                Fault::Hang => record.reason == "timed out after 50ms",
                _ => record.reason.starts_with("malformed result: "),
            };
            assert!(reason_ok, "{case}: {}", record.reason);

            assert!(engine.is_quarantined(), "{case}");
            assert_eq!(engine.active_engine_id(), "legacy", "{case}");
            assert_eq!(engine.info(), LegacyEngine.info(), "{case}");
            assert_eq!(engine.methods(), LegacyEngine.methods(), "{case}");
            let calls_before = inner.calls();
            for later in GUARDED {
                let answer = call(&engine, later).await;
                assert_eq!(answer, legacy_answer(later).await, "{case}, then {later}");
            }
            assert_eq!(
                inner.calls(),
                calls_before,
                "{case}: engine called after quarantine"
            );
        }
    }
}

/// Malformed results are recognised by the result checks: NaN estimatedTokens, a successor
/// in another session key, more messages ingested than given.
#[tokio::test]
async fn malformed_results_name_the_problem() {
    let cases = [
        (
            EngineMethod::Assemble,
            "malformed result: estimatedTokens must be a finite number, got NaN",
        ),
        (
            EngineMethod::Compact,
            "malformed result: successor sessionTarget names session key \"someone-else\", not the caller's \"k\"",
        ),
        (
            EngineMethod::IngestBatch,
            "malformed result: ingestedCount 7 exceeds the 2 messages given",
        ),
    ];
    for (method, reason) in cases {
        let book = Arc::new(QuarantineBook::new());
        let engine = guarded(
            Arc::new(FaultyEngine::new(&[(method, Fault::Malformed)])),
            &book,
        );
        let _ = call(&engine, method).await;
        assert_eq!(book.get("faulty").unwrap().reason, reason, "{method}");
    }
}

/// A healthy engine answers every call itself and is never quarantined.
#[tokio::test]
async fn healthy_engine_answers_itself() {
    let book = Arc::new(QuarantineBook::new());
    let inner = Arc::new(FaultyEngine::new(&[]));
    let engine = guarded(Arc::clone(&inner), &book);
    for method in GUARDED {
        let answer = call(&engine, method).await;
        assert!(answer.is_ok(), "{method}: {answer:?}");
    }
    assert_eq!(inner.calls(), GUARDED.len());
    assert!(!engine.is_quarantined());
    assert!(book.records().is_empty());
    assert_eq!(engine.info().id, "faulty");
    assert_eq!(engine.active_engine_id(), "faulty");
    let assembled = call(&engine, EngineMethod::Assemble).await.unwrap();
    assert_eq!(assembled["estimatedTokens"], json!(42.0));
}

/// A shared in-memory writer for capturing tracing output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn error_lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(|l| l.trim().to_string())
            .collect()
    }
}

fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let guard = support::set_capturing_default(subscriber);
    (captured, guard)
}

/// A captured thread sees an event whose callsite another thread, with no subscriber, hit first
/// (tracing decides a callsite's interest once, for the whole process).
#[test]
fn a_capture_sees_a_callsite_first_hit_on_a_thread_without_one() {
    fn log() {
        tracing::error!("logged on two threads");
    }
    let (logs, guard) = capture_logs();
    std::thread::spawn(log).join().unwrap();
    log();
    drop(guard);
    assert_eq!(logs.error_lines(), ["ERROR logged on two threads"]);
}

/// Two overlapping failures of one engine: the first is kept, and exactly one error line is
/// logged, in the documented exact text.
#[tokio::test]
async fn first_failure_wins_and_logs_once() {
    let (logs, _guard) = capture_logs();
    let book = Arc::new(QuarantineBook::new());
    let inner = Arc::new(FaultyEngine::new(&[
        (EngineMethod::Assemble, Fault::ErrorAfterYield),
        (EngineMethod::Ingest, Fault::Error),
    ]));
    let engine = guarded(Arc::clone(&inner), &book);
    // assemble starts first and fails second; ingest fails in between.
    let (assembled, ingested) = tokio::join!(
        call(&engine, EngineMethod::Assemble),
        call(&engine, EngineMethod::Ingest)
    );
    assert_eq!(inner.calls(), 2, "both calls reached the engine");
    assert_eq!(assembled, legacy_answer(EngineMethod::Assemble).await);
    assert_eq!(ingested, legacy_answer(EngineMethod::Ingest).await);
    let record = book.get("faulty").unwrap();
    assert_eq!(
        record.operation,
        FailedOperation::Method(EngineMethod::Ingest)
    );
    assert_eq!(record.reason, "engine said no");

    // A second wrapper of the same id shares the book: already quarantined, nothing logged.
    let other = guarded(Arc::new(FaultyEngine::new(&[])), &book);
    assert!(other.is_quarantined());
    let _ = call(&other, EngineMethod::Compact).await;

    let lines = logs.error_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        lines[0],
        "ERROR context engine \"faulty\" failed during ingest: engine said no; quarantined for this process, falling back to \"legacy\""
    );
    assert_eq!(
        quarantine_message("faulty", record.operation, &record.reason),
        lines[0].trim_start_matches("ERROR ")
    );
}

/// An engine reporting a cancellation is not quarantined; the caller gets the cancellation.
#[tokio::test]
async fn engine_reported_cancellation_never_quarantines() {
    for method in GUARDED {
        let book = Arc::new(QuarantineBook::new());
        let engine = guarded(
            Arc::new(FaultyEngine::new(&[(method, Fault::Cancelled)])),
            &book,
        );
        let answer = call(&engine, method).await;
        assert!(
            matches!(answer, Err(EngineError::Cancelled { .. })),
            "{method}: {answer:?}"
        );
        assert!(!engine.is_quarantined(), "{method}");
        assert!(book.records().is_empty(), "{method}");
    }
}

/// Cancelling compact's abort token while the engine hangs returns Cancelled without a
/// quarantine; an already cancelled token does not even reach the engine.
#[tokio::test]
async fn compact_abort_never_quarantines() {
    let book = Arc::new(QuarantineBook::new());
    let inner = Arc::new(FaultyEngine::new(&[(EngineMethod::Compact, Fault::Hang)]));
    let engine = QuarantineEngine::new(
        "faulty",
        Arc::clone(&inner) as Arc<dyn ContextEngine>,
        Arc::clone(&book),
        CallTimeouts::uniform(Duration::from_secs(3600)),
    );
    let token = CancellationToken::new();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            token.cancel();
        })
    };
    let result = engine.compact(compact_params(Some(token))).await;
    canceller.await.unwrap();
    assert!(
        matches!(result, Err(EngineError::Cancelled { .. })),
        "{result:?}"
    );
    assert_eq!(inner.calls(), 1);
    assert!(!engine.is_quarantined());

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let result = engine.compact(compact_params(Some(cancelled))).await;
    assert!(matches!(result, Err(EngineError::Cancelled { .. })));
    assert_eq!(
        inner.calls(),
        1,
        "a cancelled call does not reach the engine"
    );
    assert!(book.records().is_empty());
}

/// Optional members the engine does not implement are reported by methods() unchanged, and a
/// host that calls one anyway gets NotImplemented without quarantining the engine.
#[tokio::test]
async fn undeclared_members_pass_through() {
    let book = Arc::new(QuarantineBook::new());
    let mut faulty = FaultyEngine::new(&[]);
    faulty.methods = MethodSet::required_plus(&[EngineMethod::AfterTurn]);
    let inner = Arc::new(faulty);
    let engine = guarded(Arc::clone(&inner), &book);
    assert_eq!(
        engine.methods(),
        MethodSet::required_plus(&[EngineMethod::AfterTurn])
    );
    let answer = call(&engine, EngineMethod::Maintain).await;
    assert!(
        matches!(
            answer,
            Err(EngineError::NotImplemented {
                method: EngineMethod::Maintain
            })
        ),
        "{answer:?}"
    );
    assert_eq!(inner.calls(), 0);
    assert!(!engine.is_quarantined());
}

/// An engine that lists a member but does not implement it fails when it is called.
#[tokio::test]
async fn declared_but_unimplemented_member_quarantines() {
    struct Liar;
    #[async_trait]
    impl ContextEngine for Liar {
        fn info(&self) -> EngineInfo {
            EngineInfo::new("liar", "Liar")
        }
        fn methods(&self) -> MethodSet {
            MethodSet::required_plus(&[EngineMethod::Maintain])
        }
        async fn ingest(&self, _: IngestParams) -> Result<IngestResult, EngineError> {
            Ok(IngestResult { ingested: true })
        }
        async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
            LegacyEngine.assemble(p).await
        }
        async fn compact(&self, p: CompactParams) -> Result<CompactResult, EngineError> {
            LegacyEngine.compact(p).await
        }
    }
    let book = Arc::new(QuarantineBook::new());
    let engine = QuarantineEngine::new(
        "liar",
        Arc::new(Liar),
        Arc::clone(&book),
        CallTimeouts::default(),
    );
    let answer = call(&engine, EngineMethod::Maintain).await;
    assert_eq!(answer, legacy_answer(EngineMethod::Maintain).await);
    let record = book.get("liar").unwrap();
    assert_eq!(
        record.operation,
        FailedOperation::Method(EngineMethod::Maintain)
    );
    assert_eq!(
        record.reason,
        "declared the method but does not implement it"
    );
}

/// A panic in info() quarantines under `info` and info() then reports legacy.
#[tokio::test]
async fn info_panic_quarantines() {
    let book = Arc::new(QuarantineBook::new());
    let mut faulty = FaultyEngine::new(&[]);
    faulty.panic_in_info = true;
    let engine = guarded(Arc::new(faulty), &book);
    assert_eq!(engine.info(), LegacyEngine.info());
    let record = book.get("faulty").unwrap();
    assert_eq!(
        record.operation,
        FailedOperation::Method(EngineMethod::Info)
    );
    assert_eq!(record.reason, "panicked: info is broken");
}

/// The legacy engine is never guarded: its errors reach the caller and nothing is quarantined.
#[tokio::test]
async fn legacy_errors_pass_through() {
    struct FailingRuntime;
    #[async_trait]
    impl RuntimeCallbacks for FailingRuntime {
        async fn rewrite_transcript_entries(
            &self,
            _: TranscriptRewriteRequest,
        ) -> Result<TranscriptRewriteResult, EngineError> {
            Err(EngineError::failed(EngineMethod::Maintain, "unused"))
        }
        async fn llm_complete(
            &self,
            _: LlmCompleteRequest,
        ) -> Result<LlmCompleteResult, EngineError> {
            Err(EngineError::failed(EngineMethod::Compact, "unused"))
        }
        async fn delegate_compaction(
            &self,
            _: CompactParams,
        ) -> Result<CompactResult, EngineError> {
            Err(EngineError::failed(
                EngineMethod::Compact,
                "backend compaction failed",
            ))
        }
    }
    let book = Arc::new(QuarantineBook::new());
    let engine = QuarantineEngine::legacy(Arc::clone(&book));
    let mut params = compact_params(None);
    params.runtime_context = Some(RuntimeContext {
        facts: RuntimeFacts::default(),
        callbacks: Some(Arc::new(FailingRuntime)),
    });
    let result = engine.compact(params).await;
    assert_eq!(
        result,
        Err(EngineError::failed(
            EngineMethod::Compact,
            "backend compaction failed"
        ))
    );
    assert!(book.records().is_empty());
    assert!(!engine.is_quarantined());
    assert_eq!(engine.active_engine_id(), "legacy");
}

/// Re-registration: another owner cannot replace a quarantined engine; its owner can, which
/// clears the quarantine so the next resolve runs the new engine (the old wrapper stays on
/// legacy).
#[tokio::test]
async fn re_registration_clears_quarantine() {
    let registry = EngineRegistry::new();
    let broken = |_: EngineFactoryContext| async {
        Ok(
            Arc::new(FaultyEngine::new(&[(EngineMethod::Assemble, Fault::Error)]))
                as Arc<dyn ContextEngine>,
        )
    };
    let fixed = |_: EngineFactoryContext| async {
        Ok(Arc::new(FaultyEngine::new(&[])) as Arc<dyn ContextEngine>)
    };
    registry.register("faulty", "plugin-a", broken).unwrap();
    let first = registry
        .resolve(
            "faulty",
            EngineFactoryContext::default(),
            CallTimeouts::default(),
        )
        .await;
    assert!(!first.is_quarantined());
    let _ = call(first.as_ref(), EngineMethod::Assemble).await;
    assert!(first.is_quarantined());

    assert!(registry.register("faulty", "plugin-b", fixed).is_err());
    assert!(registry.quarantine_book().is_quarantined("faulty"));

    registry.register("faulty", "plugin-a", fixed).unwrap();
    assert!(!registry.quarantine_book().is_quarantined("faulty"));
    let second = registry
        .resolve(
            "faulty",
            EngineFactoryContext::default(),
            CallTimeouts::default(),
        )
        .await;
    assert!(!second.is_quarantined());
    let assembled = call(second.as_ref(), EngineMethod::Assemble).await.unwrap();
    assert_eq!(assembled["estimatedTokens"], json!(42.0));
    assert!(
        first.is_quarantined(),
        "the failed instance stays on legacy"
    );
}

/// Persisted records restored at start-up keep an engine quarantined without logging again,
/// and the registry does not build it.
#[tokio::test]
async fn restored_records_keep_engines_quarantined() {
    let (logs, _guard) = capture_logs();
    let previous_process = QuarantineBook::new();
    previous_process.quarantine(
        "faulty",
        FailedOperation::Method(EngineMethod::Compact),
        "timed out after 180000ms",
    );
    let persisted = serde_json::to_string(&previous_process.records()).unwrap();

    let registry = EngineRegistry::new();
    let built = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&built);
    registry
        .register("faulty", "p", move |_| {
            *counter.lock().unwrap() += 1;
            async { Ok(Arc::new(FaultyEngine::new(&[])) as Arc<dyn ContextEngine>) }
        })
        .unwrap();
    let restored = registry
        .quarantine_book()
        .restore(serde_json::from_str::<Vec<_>>(&persisted).unwrap());
    assert_eq!(restored, 1);
    let engine = registry
        .resolve(
            "faulty",
            EngineFactoryContext::default(),
            CallTimeouts::default(),
        )
        .await;
    assert!(engine.is_quarantined());
    assert_eq!(
        engine.quarantine_record().unwrap().reason,
        "timed out after 180000ms"
    );
    assert_eq!(*built.lock().unwrap(), 0, "factory not run");
    assert_eq!(
        logs.error_lines().len(),
        1,
        "only the original quarantine logged"
    );
}

/// `tools/call` × error, panic, timeout and malformed result: the engine is quarantined with
/// operation `tools/call`, the caller still gets an answer for the model (an `isError` result
/// naming the failure), the engine's tools disappear (legacy registers none) and a later call
/// is answered without reaching the engine.
#[tokio::test]
async fn tool_call_failures_quarantine_and_answer_with_an_error_result() {
    for fault in [Fault::Error, Fault::Panic, Fault::Hang, Fault::Malformed] {
        let case = format!("tools/call × {fault:?}");
        let book = Arc::new(QuarantineBook::new());
        let inner = Arc::new(FaultyEngine::new(&[(EngineMethod::CallTool, fault)]));
        let engine = guarded(Arc::clone(&inner), &book);
        assert_eq!(engine.tools().len(), 1, "{case}");
        assert!(engine.methods().contains(EngineMethod::CallTool), "{case}");

        let answer = engine
            .call_tool(tool_call("probe", json!({})))
            .await
            .expect(&case);
        assert!(answer.is_error, "{case}: {answer:?}");
        assert!(
            answer.text().starts_with("tool \"probe\" failed: "),
            "{case}: {}",
            answer.text()
        );
        let record = book.get("faulty").expect(&case);
        assert_eq!(
            record.operation,
            FailedOperation::Method(EngineMethod::CallTool),
            "{case}"
        );
        assert!(engine.is_quarantined(), "{case}");
        assert!(engine.tools().is_empty(), "{case}");
        assert!(!engine.methods().contains(EngineMethod::CallTool), "{case}");

        let calls_before = inner.calls();
        let later = engine
            .call_tool(tool_call("probe", json!({})))
            .await
            .expect(&case);
        assert!(later.is_error, "{case}");
        assert!(
            later.text().contains("quarantined"),
            "{case}: {}",
            later.text()
        );
        assert_eq!(
            inner.calls(),
            calls_before,
            "{case}: engine called after quarantine"
        );
    }
}

/// A tool's own error answer (`isError: true`) is a result, not a failure; a healthy call
/// reaches the engine with its arguments; a tool name the engine does not list is answered
/// with an error result without reaching the engine, and quarantines nothing.
#[tokio::test]
async fn tool_errors_and_unknown_tools_do_not_quarantine() {
    let book = Arc::new(QuarantineBook::new());
    let inner = Arc::new(FaultyEngine::new(&[]));
    let engine = guarded(Arc::clone(&inner), &book);

    let ok = engine
        .call_tool(tool_call("probe", json!({"q": 1})))
        .await
        .unwrap();
    assert!(!ok.is_error);
    assert_eq!(ok.text(), r#"probed {"q":1}"#);

    let soft = engine
        .call_tool(tool_call("probe", json!({"soft": true})))
        .await
        .unwrap();
    assert!(soft.is_error);
    assert_eq!(soft.text(), "the tool says no");

    let calls = inner.calls();
    let unknown = engine
        .call_tool(tool_call("made_up", json!({})))
        .await
        .unwrap();
    assert!(unknown.is_error);
    assert!(
        unknown.text().contains("unknown tool \"made_up\""),
        "{}",
        unknown.text()
    );
    assert_eq!(inner.calls(), calls, "an unknown tool reached the engine");

    assert!(!engine.is_quarantined());
    assert!(book.records().is_empty());
    assert_eq!(engine.tools()[0].name, "probe");
}

/// An engine that lists no tools does not announce `tools/call`; calling it anyway is a host
/// bug (NotImplemented), not a quarantine. A persisted record with operation `tools/call`
/// round-trips.
#[tokio::test]
async fn engines_without_tools_do_not_announce_tools_call() {
    let book = Arc::new(QuarantineBook::new());
    let mut faulty = FaultyEngine::new(&[]);
    faulty.methods = MethodSet::required_plus(&[]);
    let engine = guarded(Arc::new(faulty), &book);
    assert!(!engine.methods().contains(EngineMethod::CallTool));
    let answer = engine.call_tool(tool_call("probe", json!({}))).await;
    assert!(
        matches!(
            answer,
            Err(EngineError::NotImplemented {
                method: EngineMethod::CallTool
            })
        ),
        "{answer:?}"
    );
    assert!(!engine.is_quarantined());
    assert_eq!(
        FailedOperation::parse("tools/call"),
        Some(FailedOperation::Method(EngineMethod::CallTool))
    );
    assert_eq!(EngineMethod::CallTool.as_str(), "tools/call");
    assert!(!EngineMethod::OPTIONAL.contains(&EngineMethod::CallTool));
}
