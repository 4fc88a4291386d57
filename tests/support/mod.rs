//! Shared helpers for the harness behaviour tests: a scriptable context engine that records
//! every call, a rig (temp-dir SQLite store + in-process mock backend) that builds harnesses,
//! and a tracing capture.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod engine_calls;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Once};

use async_trait::async_trait;
use ctxbridge::backend::mock::MockCall;
use ctxbridge::backend::MockBackend;
use ctxbridge::contract::*;
use ctxbridge::harness::{Harness, HarnessConfig, TurnReport, TurnSpec};
use ctxbridge::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use ctxbridge::store::{SqliteStore, StateStore};
use tokio::sync::Notify;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The id the scriptable engine registers under.
pub const ENGINE_ID: &str = "script";

/// How a scripted call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    Error,
    Panic,
}

/// What the engine's `compact` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactMode {
    /// Delegate to the host runtime (`runtimeContext.callbacks.delegateCompaction`).
    Delegate,
    /// Report `compacted: false` and do nothing.
    NoOp,
    /// Compact its own state: the next `assemble` reports this epoch.
    OwnNewEpoch(String),
}

/// What the engine's `maintain(reason "turn")` asks `rewriteTranscriptEntries` to do, with the
/// messages it last saw in `afterTurn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewritePlan {
    /// Replace the first message's text.
    ReplaceFirst(String),
    /// Replace the first message's text and an entry that does not exist (must be refused
    /// as a whole).
    ReplaceFirstAndUnknown(String),
}

/// One call the engine received.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Bootstrap,
    Assemble {
        messages: usize,
        prompt: Option<String>,
        has_session_key: bool,
        has_runtime_settings: bool,
        has_runtime_context: bool,
    },
    Ingest,
    IngestBatch(usize),
    AfterTurn {
        messages: usize,
        pre_prompt_message_count: u64,
        auto_compaction_summary: Option<String>,
    },
    Maintain(MaintainReason),
    MaintainDone(MaintainReason),
    CommitTurn {
        key: String,
        /// Where the admitted user entry sits.
        admission: Box<TranscriptTurnAdmission>,
        /// Where the terminal entry sits.
        terminal: Box<TranscriptEntryAnchor>,
        /// The plain text of each message of the turn's range.
        messages: Vec<String>,
        /// `runtimeContext.tokenBudget`.
        token_budget: Option<u64>,
        /// `runtimeContext.sessionTarget.threadId`.
        thread: Option<String>,
        status: String,
    },
    Compact {
        force: Option<bool>,
    },
    Prepare {
        child: String,
        mode: SubagentContextMode,
    },
    Rollback(String),
    SubagentEnded(String, SubagentEndReason),
    Dispose,
    /// A `rewriteTranscriptEntries` attempt and its outcome (rewritten entries, or the error).
    Rewrite {
        during: &'static str,
        result: Result<u64, String>,
    },
}

impl Call {
    /// The call's lifecycle name (for order assertions).
    pub fn name(&self) -> String {
        match self {
            Call::Bootstrap => "bootstrap".into(),
            Call::Assemble { .. } => "assemble".into(),
            Call::Ingest => "ingest".into(),
            Call::IngestBatch(_) => "ingestBatch".into(),
            Call::AfterTurn { .. } => "afterTurn".into(),
            Call::Maintain(r) => format!("maintain({})", reason_name(*r)),
            Call::MaintainDone(r) => format!("maintainDone({})", reason_name(*r)),
            Call::CommitTurn { .. } => "commitTurn".into(),
            Call::Compact { .. } => "compact".into(),
            Call::Prepare { .. } => "prepareSubagentSpawn".into(),
            Call::Rollback(_) => "rollbackSubagentSpawn".into(),
            Call::SubagentEnded(..) => "onSubagentEnded".into(),
            Call::Dispose => "dispose".into(),
            Call::Rewrite { during, .. } => format!("rewrite({during})"),
        }
    }
}

fn reason_name(r: MaintainReason) -> &'static str {
    match r {
        MaintainReason::Bootstrap => "bootstrap",
        MaintainReason::Turn => "turn",
        MaintainReason::Compaction => "compaction",
    }
}

/// The engine's script and record.
pub struct Script {
    pub info: EngineInfo,
    pub methods: MethodSet,
    /// Prepended to the assembled messages (the engine's own memory), so a projection renders
    /// something even on the first turn.
    pub preamble: Vec<AgentMessage>,
    pub projection: Option<ContextProjection>,
    pub addition: Option<String>,
    assemble_count: u32,
    /// The transcript messages the last `assemble` call was given.
    pub last_assembled: Vec<AgentMessage>,
    /// Fail the n-th (1-based) `assemble` call.
    pub fail_assemble_at: Option<(u32, FailKind)>,
    /// Block the n-th (1-based) `assemble` call until [`ScriptEngine::release_assemble`].
    pub block_assemble_at: Option<u32>,
    /// Block `maintain(reason "turn")` until [`ScriptEngine::release_maintain`].
    pub block_maintain_turn: bool,
    /// On the first `commitTurn`, record the key durably, then hang (a crash before the
    /// acknowledgement).
    pub commit_hang_once: bool,
    /// Statuses to answer instead of the real one, first in first out.
    pub commit_statuses: VecDeque<String>,
    /// The engine's durable record of committed advancement keys (in commit order).
    pub committed_keys: Vec<String>,
    pub compact_mode: CompactMode,
    pub rewrite_in_maintain: Option<RewritePlan>,
    /// `assemble` tries a transcript rewrite through its runtime context.
    pub rewrite_in_assemble: bool,
    pub fail_prepare: bool,
    /// The first `bootstrap` records itself and then never returns (a crash mid-bootstrap).
    pub bootstrap_hang_once: bool,
    pub rollback_id: Option<String>,
    last_after_turn_messages: Vec<AgentMessage>,
    pub calls: Vec<Call>,
    /// The tools the engine offers to the model (see [`ScriptEngine::set_tools`]).
    pub tools: Vec<EngineTool>,
    /// Every `tools/call` received, in order; each answers `tool <name> ran with <arguments>`.
    pub tool_calls: Vec<ToolCallParams>,
}

/// A context engine whose answers are scripted per test and which records every call.
pub struct ScriptEngine {
    script: Mutex<Script>,
    assemble_entered: Notify,
    assemble_release: Notify,
    maintain_release: Notify,
    commit_recorded: Notify,
}

impl ScriptEngine {
    /// A `thread_bootstrap` engine (epoch `e1`) with bootstrap, maintain, afterTurn, dispose and
    /// the subagent hooks; its memory is one summary message.
    pub fn bootstrap(epoch: &str) -> Arc<Self> {
        let engine = Self::plain();
        engine.script().projection = Some(ContextProjection::thread_bootstrap(epoch));
        engine
    }

    /// A per-turn engine (no `contextProjection`).
    pub fn plain() -> Arc<Self> {
        Arc::new(ScriptEngine {
            script: Mutex::new(Script {
                info: EngineInfo {
                    version: Some("1.0.0".into()),
                    ..EngineInfo::new(ENGINE_ID, "Script Engine")
                },
                methods: MethodSet::required_plus(&[
                    EngineMethod::Bootstrap,
                    EngineMethod::Maintain,
                    EngineMethod::AfterTurn,
                    EngineMethod::Dispose,
                    EngineMethod::PrepareSubagentSpawn,
                    EngineMethod::RollbackSubagentSpawn,
                    EngineMethod::OnSubagentEnded,
                ]),
                preamble: vec![AgentMessage::compaction_summary(
                    "engine memory: the user likes tea",
                )],
                projection: None,
                addition: None,
                assemble_count: 0,
                last_assembled: Vec::new(),
                fail_assemble_at: None,
                block_assemble_at: None,
                block_maintain_turn: false,
                commit_hang_once: false,
                commit_statuses: VecDeque::new(),
                committed_keys: Vec::new(),
                compact_mode: CompactMode::Delegate,
                rewrite_in_maintain: None,
                rewrite_in_assemble: false,
                fail_prepare: false,
                bootstrap_hang_once: false,
                rollback_id: None,
                last_after_turn_messages: Vec::new(),
                calls: Vec::new(),
                tools: Vec::new(),
                tool_calls: Vec::new(),
            }),
            assemble_entered: Notify::new(),
            assemble_release: Notify::new(),
            maintain_release: Notify::new(),
            commit_recorded: Notify::new(),
        })
    }

    /// Offers these tools to the model (and announces `tools/call`).
    pub fn set_tools(&self, tools: Vec<EngineTool>) {
        let mut script = self.script();
        script.tools = tools;
        script.methods.insert(EngineMethod::CallTool);
    }

    /// Every tool call the engine executed.
    pub fn tool_calls(&self) -> Vec<ToolCallParams> {
        self.script().tool_calls.clone()
    }

    /// The script, to change or inspect.
    pub fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_projection(&self, projection: Option<ContextProjection>) {
        self.script().projection = projection;
    }

    pub fn set_epoch(&self, epoch: &str, fingerprint: Option<&str>) {
        self.script().projection = Some(ContextProjection {
            fingerprint: fingerprint.map(str::to_string),
            ..ContextProjection::thread_bootstrap(epoch)
        });
    }

    pub fn set_addition(&self, addition: Option<&str>) {
        self.script().addition = addition.map(str::to_string);
    }

    pub fn add_methods(&self, methods: &[EngineMethod]) {
        let mut s = self.script();
        for m in methods {
            s.methods.insert(*m);
        }
    }

    pub fn set_methods(&self, optional: &[EngineMethod]) {
        self.script().methods = MethodSet::required_plus(optional);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.script().calls.clone()
    }

    /// How many transcript messages each `assemble` call so far was given.
    pub fn assembled_message_counts(&self) -> Vec<usize> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Assemble { messages, .. } => Some(messages),
                _ => None,
            })
            .collect()
    }

    /// The lifecycle names of every call so far.
    pub fn call_names(&self) -> Vec<String> {
        self.calls().iter().map(Call::name).collect()
    }

    /// How many calls have this name.
    pub fn count(&self, name: &str) -> usize {
        self.calls().iter().filter(|c| c.name() == name).count()
    }

    /// Waits until a blocked `assemble` has been entered.
    pub async fn assemble_entered(&self) {
        self.assemble_entered.notified().await;
    }

    pub fn release_assemble(&self) {
        self.assemble_release.notify_one();
    }

    pub fn release_maintain(&self) {
        self.maintain_release.notify_one();
    }

    /// Waits until the hanging `commitTurn` has recorded its key.
    pub async fn commit_recorded(&self) {
        self.commit_recorded.notified().await;
    }

    fn record(&self, call: Call) {
        self.script().calls.push(call);
    }

    async fn try_rewrite(
        &self,
        during: &'static str,
        ctx: Option<&RuntimeContext>,
        request: TranscriptRewriteRequest,
    ) {
        let result = match ctx.and_then(|c| c.callbacks.clone()) {
            Some(cb) => cb
                .rewrite_transcript_entries(request)
                .await
                .map(|r| r.rewritten_entries)
                .map_err(|e| e.to_string()),
            None => Err("no runtime context".to_string()),
        };
        self.record(Call::Rewrite { during, result });
    }
}

#[async_trait]
impl ContextEngine for ScriptEngine {
    fn info(&self) -> EngineInfo {
        self.script().info.clone()
    }

    fn methods(&self) -> MethodSet {
        self.script().methods.clone()
    }

    async fn ingest(&self, _params: IngestParams) -> Result<IngestResult, EngineError> {
        self.record(Call::Ingest);
        Ok(IngestResult { ingested: true })
    }

    async fn ingest_batch(
        &self,
        params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        self.record(Call::IngestBatch(params.messages.len()));
        Ok(IngestBatchResult {
            ingested_count: params.messages.len() as u64,
        })
    }

    async fn bootstrap(&self, _params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        self.record(Call::Bootstrap);
        let hang = std::mem::take(&mut self.script().bootstrap_hang_once);
        if hang {
            std::future::pending::<()>().await;
        }
        Ok(BootstrapResult {
            bootstrapped: true,
            imported_messages: Some(0),
            reason: None,
        })
    }

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        let (n, fail, block, rewrite) = {
            let mut s = self.script();
            s.assemble_count += 1;
            s.last_assembled = params.messages.iter().cloned().collect();
            s.calls.push(Call::Assemble {
                messages: params.messages.len(),
                prompt: params.prompt.clone(),
                has_session_key: params.session_key.is_some(),
                has_runtime_settings: params.runtime_settings.is_some(),
                has_runtime_context: params.runtime_context.is_some(),
            });
            let n = s.assemble_count;
            (
                n,
                s.fail_assemble_at
                    .filter(|(at, _)| *at == n)
                    .map(|(_, k)| k),
                s.block_assemble_at == Some(n),
                s.rewrite_in_assemble,
            )
        };
        if block {
            self.assemble_entered.notify_one();
            self.assemble_release.notified().await;
        }
        match fail {
            Some(FailKind::Error) => {
                return Err(EngineError::failed(
                    EngineMethod::Assemble,
                    format!("scripted failure on assemble #{n}"),
                ))
            }
            Some(FailKind::Panic) => panic!("scripted panic on assemble #{n}"),
            None => {}
        }
        if rewrite {
            if let Some(first) = params.messages.first() {
                let request = TranscriptRewriteRequest {
                    replacements: vec![TranscriptReplacement {
                        entry_id: first.id.clone().unwrap_or_default(),
                        message: AgentMessage::user("rewritten in assemble"),
                    }],
                    allowed_rewrite_suffix_entry_ids: None,
                };
                self.try_rewrite("assemble", params.runtime_context.as_ref(), request)
                    .await;
            }
        }
        let s = self.script();
        let mut messages = s.preamble.clone();
        messages.extend(params.messages.iter().cloned());
        Ok(AssembleResult {
            messages: messages.into(),
            estimated_tokens: 10.0,
            system_prompt_addition: s.addition.clone(),
            prompt_authority: None,
            context_projection: s.projection.clone(),
        })
    }

    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        self.record(Call::Compact {
            force: params.force,
        });
        let mode = self.script().compact_mode.clone();
        match mode {
            CompactMode::Delegate => {
                let cb = params
                    .runtime_context
                    .as_ref()
                    .and_then(|c| c.callbacks.clone());
                match cb {
                    Some(cb) => cb.delegate_compaction(params).await,
                    None => Err(EngineError::failed(
                        EngineMethod::Compact,
                        "no runtime to delegate to",
                    )),
                }
            }
            CompactMode::NoOp => Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("nothing to do".into()),
                result: None,
            }),
            CompactMode::OwnNewEpoch(epoch) => {
                self.script().projection = Some(ContextProjection::thread_bootstrap(epoch));
                Ok(CompactResult {
                    ok: true,
                    compacted: true,
                    reason: None,
                    result: Some(CompactDetails {
                        summary: Some("summarised by the engine".into()),
                        tokens_before: 100.0,
                        tokens_after: Some(10.0),
                        ..Default::default()
                    }),
                })
            }
        }
    }

    async fn after_turn(&self, params: AfterTurnParams) -> Result<(), EngineError> {
        let mut s = self.script();
        s.calls.push(Call::AfterTurn {
            messages: params.messages.len(),
            pre_prompt_message_count: params.pre_prompt_message_count,
            auto_compaction_summary: params.auto_compaction_summary.clone(),
        });
        s.last_after_turn_messages = params.messages;
        Ok(())
    }

    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        self.record(Call::Maintain(params.reason));
        let (block, plan, seen) = {
            let s = self.script();
            (
                s.block_maintain_turn && params.reason == MaintainReason::Turn,
                s.rewrite_in_maintain.clone(),
                s.last_after_turn_messages.clone(),
            )
        };
        if block {
            self.maintain_release.notified().await;
        }
        if let (Some(plan), MaintainReason::Turn, Some(first)) = (plan, params.reason, seen.first())
        {
            let entry_id = first.id.clone().unwrap_or_default();
            let mut replacements = Vec::new();
            let text = match &plan {
                RewritePlan::ReplaceFirst(t) | RewritePlan::ReplaceFirstAndUnknown(t) => t.clone(),
            };
            replacements.push(TranscriptReplacement {
                entry_id,
                message: AgentMessage::user(text),
            });
            if matches!(plan, RewritePlan::ReplaceFirstAndUnknown(_)) {
                replacements.push(TranscriptReplacement {
                    entry_id: "no-such-entry".into(),
                    message: AgentMessage::user("ghost"),
                });
            }
            let request = TranscriptRewriteRequest {
                replacements,
                allowed_rewrite_suffix_entry_ids: None,
            };
            self.try_rewrite("maintain", params.runtime_context.as_ref(), request)
                .await;
        }
        self.record(Call::MaintainDone(params.reason));
        Ok(MaintainResult::default())
    }

    async fn commit_turn(&self, params: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        let hang = {
            let mut s = self.script();
            let known = s.committed_keys.contains(&params.advancement_key);
            if !known {
                s.committed_keys.push(params.advancement_key.clone());
            }
            let status = s.commit_statuses.pop_front().unwrap_or_else(|| {
                if known {
                    "duplicate".into()
                } else {
                    "committed".into()
                }
            });
            // A scripted odd status means the write did not happen.
            if status != "committed" && status != "duplicate" && !known {
                s.committed_keys.retain(|k| k != &params.advancement_key);
            }
            s.calls.push(Call::CommitTurn {
                key: params.advancement_key.clone(),
                admission: Box::new(params.admission.clone()),
                terminal: Box::new(params.terminal.clone()),
                messages: params.messages.iter().map(|m| m.plain_text()).collect(),
                token_budget: params
                    .runtime_context
                    .as_ref()
                    .and_then(|c| c.facts.token_budget),
                thread: params
                    .runtime_context
                    .as_ref()
                    .and_then(|c| c.facts.session_target.as_ref())
                    .and_then(|t| t.thread_id.clone()),
                status: status.clone(),
            });
            let hang = s.commit_hang_once;
            s.commit_hang_once = false;
            if hang {
                None
            } else {
                Some(status)
            }
        };
        match hang {
            Some(status) => Ok(CommitTurnResult { status }),
            None => {
                self.commit_recorded.notify_one();
                std::future::pending().await
            }
        }
    }

    async fn prepare_subagent_spawn(
        &self,
        params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        self.record(Call::Prepare {
            child: params.child_session_key.clone(),
            mode: params.context_mode,
        });
        let s = self.script();
        if s.fail_prepare {
            return Err(EngineError::failed(
                EngineMethod::PrepareSubagentSpawn,
                "scripted prepare failure",
            ));
        }
        Ok(PrepareSubagentSpawnResult {
            rollback_id: s.rollback_id.clone(),
        })
    }

    async fn rollback_subagent_spawn(
        &self,
        params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        self.record(Call::Rollback(params.rollback_id));
        Ok(())
    }

    async fn on_subagent_ended(&self, params: OnSubagentEndedParams) -> Result<(), EngineError> {
        self.record(Call::SubagentEnded(params.child_session_key, params.reason));
        Ok(())
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        self.record(Call::Dispose);
        Ok(())
    }

    fn tools(&self) -> Vec<EngineTool> {
        self.script().tools.clone()
    }

    async fn call_tool(&self, params: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        let text = format!("tool {} ran with {}", params.name, params.arguments);
        self.script().tool_calls.push(params);
        Ok(ToolCallResult::from_text(text))
    }
}

/// A state store in a temp dir plus a mock backend over it; builds harnesses.
pub struct Rig {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub backend: MockBackend,
}

impl Rig {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap());
        let backend = MockBackend::with_store(store.clone());
        Rig {
            dir,
            store,
            backend,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    /// Another connection to the same store file (another process).
    pub fn reopen(&self) -> Arc<SqliteStore> {
        Arc::new(SqliteStore::open(self.path()).unwrap())
    }

    /// A harness on the rig's store and backend, with a fresh quarantine book (a process).
    pub fn harness(&self, engine: Option<&Arc<ScriptEngine>>, cfg: HarnessConfig) -> Harness {
        build_harness(engine, cfg, self.store.clone(), self.backend.clone())
    }
}

impl Default for Rig {
    fn default() -> Self {
        Self::new()
    }
}

/// A harness running `engine` (legacy when `None`) on `backend` and `store`.
pub fn build_harness(
    engine: Option<&Arc<ScriptEngine>>,
    cfg: HarnessConfig,
    store: Arc<SqliteStore>,
    backend: MockBackend,
) -> Harness {
    build_harness_on(engine, cfg, store, backend)
}

/// As [`build_harness`] on any store.
pub fn build_harness_on(
    engine: Option<&Arc<ScriptEngine>>,
    cfg: HarnessConfig,
    store: Arc<dyn StateStore>,
    backend: MockBackend,
) -> Harness {
    let book = Arc::new(QuarantineBook::new());
    let guarded = match engine {
        Some(e) => QuarantineEngine::new(
            ENGINE_ID,
            e.clone() as Arc<dyn ContextEngine>,
            book,
            CallTimeouts::default(),
        ),
        None => QuarantineEngine::legacy(book),
    };
    Harness::new(cfg, Arc::new(guarded), Arc::new(backend), store)
}

/// A config with base developer instructions and one tool.
pub fn cfg() -> HarnessConfig {
    HarnessConfig {
        developer_instructions: Some("Base.".into()),
        tools: vec!["read_file".into()],
        token_budget: Some(100_000),
        ..HarnessConfig::default()
    }
}

/// Runs one turn on session `s`, panicking on an error.
pub async fn turn(h: &Harness, prompt: &str) -> TurnReport {
    h.turn(TurnSpec::new("s", prompt))
        .await
        .unwrap_or_else(|e| panic!("turn {prompt:?} failed: {e}"))
}

/// The input of the mock's last turn call, with its thread.
pub fn last_turn(backend: &MockBackend) -> (String, String) {
    backend
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            MockCall::Turn {
                thread_id, input, ..
            } => Some((thread_id, input)),
            _ => None,
        })
        .expect("no turn call")
}

/// Every text a thread received: its instructions at start, injections and turn inputs.
pub fn everything_received(backend: &MockBackend, thread: &str) -> Vec<String> {
    backend
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::StartThread {
                thread_id,
                base_instructions,
                developer_instructions,
            } if thread_id == thread => Some(format!(
                "{}\n{}",
                base_instructions.unwrap_or_default(),
                developer_instructions.unwrap_or_default()
            )),
            MockCall::Inject { thread_id, text } if thread_id == thread => Some(text),
            MockCall::Turn {
                thread_id, input, ..
            } if thread_id == thread => Some(input),
            _ => None,
        })
        .collect()
}

/// The developer instructions a thread was started with.
pub fn started_with(backend: &MockBackend, thread: &str) -> Option<String> {
    backend.calls().into_iter().find_map(|c| match c {
        MockCall::StartThread {
            thread_id,
            developer_instructions,
            ..
        } if thread_id == thread => Some(developer_instructions.unwrap_or_default()),
        _ => None,
    })
}

/// Injections so far (thread, text).
pub fn injections(backend: &MockBackend) -> Vec<(String, String)> {
    backend
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::Inject { thread_id, text } => Some((thread_id, text)),
            _ => None,
        })
        .collect()
}

/// One captured tracing event.
#[derive(Debug, Clone)]
pub struct Captured {
    pub level: Level,
    /// The message and every other field, `key=value`, space separated.
    pub text: String,
}

/// The events captured on this thread since [`capture`].
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<Captured>>>);

impl Capture {
    pub fn events(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }

    pub fn at(&self, level: Level) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| e.level == level)
            .map(|e| e.text)
            .collect()
    }
}

struct CaptureLayer(Capture);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        } else {
            self.0.push_str(&format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.0.push_str(&format!("{}={value}", field.name()));
        }
    }
}

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0 .0.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            text: fields.0,
        });
    }
}

/// Captures tracing events of the current thread until the guard drops. Use with a
/// current-thread runtime (the `#[tokio::test]` default) so every task logs here.
pub fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(CaptureLayer(capture.clone()));
    let guard = set_capturing_default(subscriber);
    (capture, guard)
}

/// Installs `subscriber` for the current thread so that it sees every event logged here, even
/// while sibling tests log the same callsites on threads without a subscriber.
///
/// tracing caches each callsite's interest process-wide, decided when the callsite is first hit:
/// a sibling thread with no subscriber would cache "never" and the capturing test would see
/// nothing (it happened in CI, `quarantine::first_failure_wins_and_logs_once`). A global default
/// that answers "sometimes" for every callsite makes each event ask the current thread's
/// subscriber instead; it enables nothing itself.
pub fn set_capturing_default(
    subscriber: impl Subscriber + Send + Sync + 'static,
) -> tracing::subscriber::DefaultGuard {
    static ANCHOR: Once = Once::new();
    ANCHOR.call_once(|| {
        // A filter without a callsite function answers "sometimes"; this one enables nothing.
        let ask_each_time = tracing_subscriber::registry().with(filter_fn(|_| false));
        // Fails only if this test binary set a global default already; that one decides then.
        let _ = tracing::subscriber::set_global_default(ask_each_time);
        tracing::callsite::rebuild_interest_cache();
    });
    tracing::subscriber::set_default(subscriber)
}
