//! The engine fault matrix (docs/architecture.md#selection-fault-isolation-and-quarantine, §13): every guarded lifecycle method × every failure
//! kind {error, panic or crash, timeout, malformed result, process death}, for an in-process
//! and an out-of-process engine. Each cell must be answered like this: the failing call
//! returns legacy's answer (`compact` and `prepareSubagentSpawn` fail closed: the error
//! reaches the caller), exactly one quarantine record is kept and it names the method, and
//! `info` then reports legacy.
//!
//! One table ([`MATRIX`]) drives one test per engine kind; each test runs every cell and
//! lists all broken cells before failing.
//!
//! How the faults are produced:
//!
//! | fault | in-process ([`TaskEngine`]) | out-of-process (`fault_matrix_engine.py`) |
//! |---|---|---|
//! | error | the engine returns `Failed` | a JSON-RPC error reply |
//! | panic or crash | the engine panics in the caller's task | an uncaught exception: the process exits with status 1 |
//! | timeout | no answer; the quarantine's short per-call timeout fires | no answer; the adapter's short per-call timeout fires (and sends `$/cancelRequest`) |
//! | malformed | a result that fails decoding or the host's result checks | the same results, over the wire |
//! | process death | the engine's worker task dies mid-call (it panics inside `tokio::spawn`, so the reply channel is dropped): the handle reports `Process`, as a dead child does | the process is killed by SIGKILL mid-call |
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctxbridge::contract::*;
use ctxbridge::engines::process::decode_result;
use ctxbridge::engines::process::protocol::check_unit_result;
use ctxbridge::engines::{HostIdentity, LegacyEngine, ProcessEngine, ProcessEngineConfig};
use ctxbridge::host::capabilities::Capability;
use ctxbridge::quarantine::{CallTimeouts, FailedOperation, QuarantineBook, QuarantineEngine};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

mod support;
use support::engine_calls::{self, fails_closed};

/// How the engine fails in the method under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Error,
    /// A panic (in-process) or the process exiting on its own (out-of-process).
    Crash,
    Timeout,
    Malformed,
    /// The engine's worker task (in-process) or process (out-of-process) dies mid-call.
    Death,
}

impl Fault {
    /// The fault's name as the out-of-process fixture takes it.
    fn as_str(self) -> &'static str {
        match self {
            Fault::Error => "error",
            Fault::Crash => "crash",
            Fault::Timeout => "timeout",
            Fault::Malformed => "malformed",
            Fault::Death => "death",
        }
    }
}

/// Every lifecycle member the quarantine wrapper guards (all but `info`, which has no call).
const METHODS: [EngineMethod; 12] = [
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

const FAULTS: [Fault; 5] = [
    Fault::Error,
    Fault::Crash,
    Fault::Timeout,
    Fault::Malformed,
    Fault::Death,
];

const CELLS: usize = METHODS.len() * FAULTS.len();

const fn matrix() -> [(EngineMethod, Fault); CELLS] {
    let mut cells = [(EngineMethod::Ingest, Fault::Error); CELLS];
    let mut i = 0;
    while i < CELLS {
        cells[i] = (METHODS[i / FAULTS.len()], FAULTS[i % FAULTS.len()]);
        i += 1;
    }
    cells
}

/// The table: (method, fault) for every guarded method and every fault.
const MATRIX: [(EngineMethod, Fault); CELLS] = matrix();

/// Per-call timeout of the cells whose engine never answers.
const SHORT: Duration = Duration::from_millis(300);
/// Per-call timeout of every other cell: generous, so a loaded machine cannot turn an
/// answer into a timeout.
const GENEROUS: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------------------------------
// The calls
// ------------------------------------------------------------------------------------------

/// The `tools/call` params of the matrix's cells.
fn lookup_call() -> ToolCallParams {
    ToolCallParams {
        session_id: "s".into(),
        session_key: Some("k".into()),
        name: "lookup".into(),
        ..Default::default()
    }
}

async fn call(engine: &dyn ContextEngine, method: EngineMethod) -> Result<Value, EngineError> {
    engine_calls::call(engine, method, lookup_call()).await
}

async fn legacy_answer(method: EngineMethod) -> Result<Value, EngineError> {
    engine_calls::legacy_answer(method, lookup_call()).await
}

/// Whether a fail-closed call's error is the fault's kind of error, naming `method`. A crash
/// is a panic in-process and a process failure out-of-process.
fn error_fits(error: &EngineError, method: EngineMethod, fault: Fault, in_process: bool) -> bool {
    match fault {
        Fault::Error => matches!(error, EngineError::Failed { method: m, .. } if *m == method),
        Fault::Crash if in_process => {
            matches!(error, EngineError::Panicked { method: m, .. } if *m == method)
        }
        Fault::Crash | Fault::Death => {
            matches!(error, EngineError::Process { method: m, .. } if *m == method)
        }
        Fault::Timeout => matches!(error, EngineError::Timeout { method: m, .. } if *m == method),
        Fault::Malformed => {
            matches!(error, EngineError::Malformed { method: m, .. } if *m == method)
        }
    }
}

/// Runs one cell against `engine` (already wrapped) and returns what is wrong with it.
async fn check_cell(
    engine: &QuarantineEngine,
    book: &QuarantineBook,
    method: EngineMethod,
    fault: Fault,
    in_process: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let answer = call(engine, method).await;
    if fails_closed(method) {
        match &answer {
            Err(error) if error_fits(error, method, fault, in_process) => {}
            other => problems.push(format!(
                "fails closed, so expected the {fault:?} error of {method}, got {other:?}"
            )),
        }
    } else {
        let legacy = legacy_answer(method).await;
        if answer != legacy {
            problems.push(format!("answered {answer:?}, legacy answers {legacy:?}"));
        }
    }
    let records = book.records();
    match records.as_slice() {
        [record]
            if record.operation == FailedOperation::Method(method)
                && record.engine_id == engine.engine_id() => {}
        other => problems.push(format!(
            "expected one quarantine record for {method}, got {other:?}"
        )),
    }
    let info = engine.info();
    if info != LegacyEngine::engine_info() || engine.active_engine_id() != "legacy" {
        problems.push(format!(
            "info reports {:?} (active {}), not legacy",
            info.id,
            engine.active_engine_id()
        ));
    }
    problems
}

fn report(kind: &str, broken: Vec<String>) {
    assert!(
        broken.is_empty(),
        "{kind}: {} of {CELLS} cells broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

// ------------------------------------------------------------------------------------------
// In-process: an engine whose work runs in a worker task
// ------------------------------------------------------------------------------------------

/// One call handed to the worker task.
struct Job {
    method: EngineMethod,
    messages: usize,
    reply: oneshot::Sender<Result<Value, EngineError>>,
}

/// An in-process engine whose calls run in a worker task behind a channel (as an engine
/// owning a runtime or a connection would), answering JSON that the handle decodes into the
/// contract types exactly as the out-of-process adapter does. `fault` applies to `method`
/// only; every other call is answered healthily.
struct TaskEngine {
    method: EngineMethod,
    fault: Fault,
    jobs: mpsc::UnboundedSender<Job>,
}

impl TaskEngine {
    fn new(method: EngineMethod, fault: Fault) -> Self {
        let (jobs, mut inbox) = mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            // Replies of calls that never get an answer are kept, so the caller waits.
            let mut unanswered = Vec::new();
            while let Some(job) = inbox.recv().await {
                if job.method != method {
                    let _ = job.reply.send(Ok(healthy(job.method, job.messages)));
                    continue;
                }
                match fault {
                    Fault::Error => {
                        let _ = job
                            .reply
                            .send(Err(EngineError::failed(method, "engine said no")));
                    }
                    Fault::Timeout => unanswered.push(job.reply),
                    Fault::Malformed => {
                        let _ = job.reply.send(Ok(malformed(method)));
                    }
                    Fault::Death => panic!("the worker of the engine died during {method}"),
                    // Raised in the caller's task, see `TaskEngine::run`.
                    Fault::Crash => unreachable!("crashes happen before the job is sent"),
                }
            }
        });
        TaskEngine {
            method,
            fault,
            jobs,
        }
    }

    async fn run(&self, method: EngineMethod, messages: usize) -> Result<Value, EngineError> {
        if method == self.method && self.fault == Fault::Crash {
            panic!("bug in {method}");
        }
        let (reply, answer) = oneshot::channel();
        let dead = |detail: &str| EngineError::Process {
            method,
            detail: detail.to_string(),
        };
        self.jobs
            .send(Job {
                method,
                messages,
                reply,
            })
            .map_err(|_| dead("the engine's worker task has ended"))?;
        answer
            .await
            .map_err(|_| dead("the engine's worker task died mid-call"))?
    }

    async fn decoded<R: serde::de::DeserializeOwned>(
        &self,
        method: EngineMethod,
        messages: usize,
    ) -> Result<R, EngineError> {
        decode_result(method, self.run(method, messages).await?)
    }

    async fn unit(&self, method: EngineMethod) -> Result<(), EngineError> {
        let value = self.run(method, 0).await?;
        check_unit_result(&value).map_err(|detail| EngineError::malformed(method, detail))
    }
}

/// A healthy answer of each method (what the out-of-process fixture answers too).
fn healthy(method: EngineMethod, messages: usize) -> Value {
    match method {
        EngineMethod::Ingest => json!({"ingested": true}),
        EngineMethod::IngestBatch => json!({"ingestedCount": messages}),
        EngineMethod::Bootstrap => json!({"bootstrapped": true}),
        EngineMethod::Assemble => json!({"messages": [], "estimatedTokens": 1}),
        EngineMethod::Compact => json!({"ok": true, "compacted": false}),
        EngineMethod::Maintain => json!({"changed": false, "bytesFreed": 0, "rewrittenEntries": 0}),
        EngineMethod::CommitTurn => json!({"status": "committed"}),
        EngineMethod::PrepareSubagentSpawn => json!({}),
        _ => Value::Null,
    }
}

/// A result that breaks the contract: the wrong shape, or for assemble, ingestBatch and
/// compact a well-typed result the host's checks reject (negative tokens, more messages
/// ingested than given, a successor in another session key). The same as the fixture's.
fn malformed(method: EngineMethod) -> Value {
    match method {
        EngineMethod::Ingest => json!({"ingested": "yes"}),
        EngineMethod::IngestBatch => json!({"ingestedCount": 99}),
        EngineMethod::Bootstrap => json!({"bootstrapped": "maybe"}),
        EngineMethod::Assemble => json!({"messages": [], "estimatedTokens": -1}),
        EngineMethod::Compact => json!({
            "ok": true,
            "compacted": true,
            "result": {"tokensBefore": 10, "sessionTarget": {"sessionKey": "someone-else"}},
        }),
        EngineMethod::Maintain => json!({"changed": 1}),
        EngineMethod::CommitTurn => json!(["committed"]),
        EngineMethod::PrepareSubagentSpawn => json!({"rollbackId": 7}),
        EngineMethod::AfterTurn => json!("done"),
        EngineMethod::RollbackSubagentSpawn => json!(1),
        EngineMethod::OnSubagentEnded => json!([]),
        _ => json!(true),
    }
}

#[async_trait]
impl ContextEngine for TaskEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo::new("matrix", "Fault matrix engine")
    }

    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&EngineMethod::OPTIONAL)
    }

    async fn ingest(&self, _: IngestParams) -> Result<IngestResult, EngineError> {
        self.decoded(EngineMethod::Ingest, 1).await
    }

    async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
        self.decoded(EngineMethod::Assemble, p.messages.len()).await
    }

    async fn compact(&self, _: CompactParams) -> Result<CompactResult, EngineError> {
        self.decoded(EngineMethod::Compact, 0).await
    }

    async fn bootstrap(&self, _: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        self.decoded(EngineMethod::Bootstrap, 0).await
    }

    async fn maintain(&self, _: MaintainParams) -> Result<MaintainResult, EngineError> {
        self.decoded(EngineMethod::Maintain, 0).await
    }

    async fn ingest_batch(&self, p: IngestBatchParams) -> Result<IngestBatchResult, EngineError> {
        self.decoded(EngineMethod::IngestBatch, p.messages.len())
            .await
    }

    async fn after_turn(&self, _: AfterTurnParams) -> Result<(), EngineError> {
        self.unit(EngineMethod::AfterTurn).await
    }

    async fn commit_turn(&self, _: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        self.decoded(EngineMethod::CommitTurn, 0).await
    }

    async fn prepare_subagent_spawn(
        &self,
        _: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        self.decoded(EngineMethod::PrepareSubagentSpawn, 0).await
    }

    async fn rollback_subagent_spawn(
        &self,
        _: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        self.unit(EngineMethod::RollbackSubagentSpawn).await
    }

    async fn on_subagent_ended(&self, _: OnSubagentEndedParams) -> Result<(), EngineError> {
        self.unit(EngineMethod::OnSubagentEnded).await
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        self.unit(EngineMethod::Dispose).await
    }
}

/// The 60 cells against an in-process engine: each answered by legacy (or failing closed
/// with the fault's error), with exactly one quarantine record naming the method, and `info`
/// reporting legacy afterwards.
#[tokio::test]
async fn in_process_engine_fault_matrix() {
    let mut broken = Vec::new();
    for (method, fault) in MATRIX {
        let timeout = if fault == Fault::Timeout {
            SHORT
        } else {
            GENEROUS
        };
        let book = Arc::new(QuarantineBook::new());
        let engine = QuarantineEngine::new(
            "matrix",
            Arc::new(TaskEngine::new(method, fault)),
            Arc::clone(&book),
            CallTimeouts::uniform(timeout),
        );
        for problem in check_cell(&engine, &book, method, fault, true).await {
            broken.push(format!("{method} × {fault:?}: {problem}"));
        }
    }
    report("in-process", broken);
}

// ------------------------------------------------------------------------------------------
// Out-of-process: a child process over the engine process protocol
// ------------------------------------------------------------------------------------------

#[path = "support/programs.rs"]
mod programs;

fn python3_available() -> bool {
    programs::program_here("python3", "the out-of-process fault matrix")
}

fn process_config(method: EngineMethod, fault: Fault) -> ProcessEngineConfig {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines/fault_matrix_engine.py");
    let call_timeout = if fault == Fault::Timeout {
        SHORT
    } else {
        GENEROUS
    };
    let mut config = ProcessEngineConfig::new(
        "matrix",
        vec![
            "python3".into(),
            script.to_string_lossy().into_owned(),
            method.as_str().into(),
            fault.as_str().into(),
        ],
        HostIdentity {
            id: "test-host".into(),
            label: "the test host".into(),
            capabilities: Capability::ALL.to_vec(),
        },
    )
    .with_call_timeout(call_timeout);
    config.init_timeout = GENEROUS;
    config.shutdown_grace = Duration::from_secs(5);
    config
}

/// The 60 cells against an engine process: the same answers as in-process, where a crash is
/// the process exiting and a death is the process being killed mid-call. The adapter's own
/// per-call timeout (short in the timeout cells) produces the timeouts; the quarantine's is
/// generous.
#[tokio::test]
async fn out_of_process_engine_fault_matrix() {
    if !python3_available() {
        return;
    }
    let mut broken = Vec::new();
    for (method, fault) in MATRIX {
        let cell = format!("{method} × {fault:?}");
        let inner = match ProcessEngine::spawn(process_config(method, fault)).await {
            Ok(engine) => engine,
            Err(error) => {
                broken.push(format!("{cell}: the engine did not start: {error}"));
                continue;
            }
        };
        let book = Arc::new(QuarantineBook::new());
        let engine = QuarantineEngine::new(
            "matrix",
            Arc::new(inner),
            Arc::clone(&book),
            CallTimeouts::uniform(GENEROUS),
        );
        for problem in check_cell(&engine, &book, method, fault, false).await {
            broken.push(format!("{cell}: {problem}"));
        }
        // Reap the child (a quarantined engine gets a bounded dispose).
        engine.release().await;
    }
    report("out-of-process", broken);
}
