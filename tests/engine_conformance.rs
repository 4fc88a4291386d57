//! One behaviour suite for the engine contract (docs/architecture.md#the-engine-contract), run against an in-process Rust
//! engine, the Python example engine (`examples/python-engine/engine.py`) and the OpenClaw
//! sample plugin served by the Node host (`hosts/openclaw-node/`), the last two
//! through `ProcessEngine`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ctxbridge::contract::*;
use ctxbridge::engines::process::{HostIdentity, ProcessEngine, ProcessEngineConfig};
use ctxbridge::host::capabilities::Capability;
use serde_json::json;

// ------------------------------------------------------------------------------------------
// The in-process reference engine: the Python engine's behaviour, in Rust.
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct ReferenceSession {
    messages: Vec<AgentMessage>,
    summary: String,
    epoch: u64,
    committed_keys: Vec<String>,
}

impl ReferenceSession {
    fn add(&mut self, message: AgentMessage) -> bool {
        if let Some(id) = &message.id {
            if self.messages.iter().any(|m| m.id.as_ref() == Some(id)) {
                return false;
            }
        }
        self.messages.push(message);
        true
    }
}

/// Stores messages per session, assembles summary + kept messages under a thread_bootstrap
/// projection whose epoch moves when it compacts, owns compaction, commits turns idempotently.
struct ReferenceEngine {
    keep_recent: usize,
    sessions: Mutex<HashMap<String, ReferenceSession>>,
}

impl ReferenceEngine {
    fn new(keep_recent: usize) -> Self {
        ReferenceEngine {
            keep_recent,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn with_session<T>(&self, id: &str, f: impl FnOnce(&mut ReferenceSession) -> T) -> T {
        let mut sessions = self.sessions.lock().unwrap();
        let session = sessions
            .entry(id.to_string())
            .or_insert_with(|| ReferenceSession {
                epoch: 1,
                ..Default::default()
            });
        f(session)
    }
}

fn estimate_tokens(messages: &[AgentMessage], summary: &str) -> f64 {
    let chars: usize = summary.len() + messages.iter().map(|m| m.plain_text().len()).sum::<usize>();
    chars.div_ceil(4) as f64
}

#[async_trait]
impl ContextEngine for ReferenceEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            owns_compaction: Some(true),
            accepted_host_params: Some(vec!["sessionKey".into(), "prompt".into()]),
            transcript_semantics: Some(TranscriptSemantics {
                current_turn_fence: Some(CURRENT_TURN_FENCE_V1.into()),
                turn_advancement_idempotency: Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1.into()),
            }),
            ..EngineInfo::new("rust-reference", "Rust reference engine")
        }
    }

    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[
            EngineMethod::IngestBatch,
            EngineMethod::CommitTurn,
            EngineMethod::Maintain,
            EngineMethod::Dispose,
        ])
    }

    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError> {
        let ingested = match params.message {
            Some(message) if params.is_heartbeat != Some(true) => {
                self.with_session(&params.session_id, |s| s.add(message))
            }
            _ => false,
        };
        Ok(IngestResult { ingested })
    }

    async fn ingest_batch(
        &self,
        params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let count = self.with_session(&params.session_id, |s| {
            params
                .messages
                .into_iter()
                .filter(|m| s.add(m.clone()))
                .count()
        });
        Ok(IngestBatchResult {
            ingested_count: count as u64,
        })
    }

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        Ok(self.with_session(&params.session_id, |s| {
            let source = if s.messages.is_empty() {
                params.messages.to_vec()
            } else {
                s.messages.clone()
            };
            let mut messages = Vec::new();
            if !s.summary.is_empty() {
                messages.push(AgentMessage::compaction_summary(s.summary.clone()));
            }
            let estimated_tokens = estimate_tokens(&source, &s.summary);
            messages.extend(source);
            AssembleResult {
                messages: messages.into(),
                estimated_tokens,
                system_prompt_addition: Some(
                    "Context is curated by the Rust reference engine.".into(),
                ),
                prompt_authority: None,
                context_projection: Some(ContextProjection::thread_bootstrap(format!(
                    "epoch-{}",
                    s.epoch
                ))),
            }
        }))
    }

    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        let keep = self.keep_recent;
        Ok(self.with_session(&params.session_id, |s| {
            if params.force != Some(true) || s.messages.len() <= keep {
                return CompactResult {
                    ok: true,
                    compacted: false,
                    reason: Some("nothing to compact".into()),
                    result: None,
                };
            }
            let tokens_before = estimate_tokens(&s.messages, &s.summary);
            let kept = s.messages.split_off(s.messages.len() - keep);
            let folded = std::mem::replace(&mut s.messages, kept);
            let mut lines: Vec<String> = Vec::new();
            if !s.summary.is_empty() {
                lines.push(s.summary.clone());
            }
            lines.extend(
                folded
                    .iter()
                    .map(|m| format!("{}: {}", m.role.as_str(), m.plain_text())),
            );
            s.summary = lines.join("\n");
            s.epoch += 1;
            CompactResult {
                ok: true,
                compacted: true,
                reason: None,
                result: Some(CompactDetails {
                    summary: Some(s.summary.clone()),
                    tokens_before,
                    tokens_after: Some(estimate_tokens(&s.messages, &s.summary)),
                    ..Default::default()
                }),
            }
        }))
    }

    async fn commit_turn(&self, params: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        Ok(self.with_session(&params.session_id, |s| {
            if s.committed_keys.contains(&params.advancement_key) {
                return CommitTurnResult::duplicate();
            }
            for message in params.messages {
                s.add(message);
            }
            s.committed_keys.push(params.advancement_key);
            CommitTurnResult::committed()
        }))
    }

    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        let stored = self.with_session(&params.session_id, |s| s.messages.len());
        Ok(MaintainResult {
            changed: false,
            bytes_freed: 0,
            rewritten_entries: 0,
            reason: Some(format!("{stored} messages stored")),
        })
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        self.sessions.lock().unwrap().clear();
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------
// The suite
// ------------------------------------------------------------------------------------------

/// Host runtime compaction for the suite: a non-owning engine's `compact` must hand over to it.
struct DelegatingCallbacks;

#[async_trait]
impl RuntimeCallbacks for DelegatingCallbacks {
    async fn rewrite_transcript_entries(
        &self,
        _request: TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        Err(EngineError::Refused {
            operation: "rewriteTranscriptEntries".into(),
            message: "not offered by the conformance suite".into(),
        })
    }

    async fn llm_complete(
        &self,
        _request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        Ok(LlmCompleteResult {
            text: "summary".into(),
            ..Default::default()
        })
    }

    async fn delegate_compaction(
        &self,
        params: CompactParams,
    ) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: true,
            compacted: true,
            reason: Some(format!("runtime compacted {}", params.session_id)),
            result: None,
        })
    }
}

fn texts(messages: &[AgentMessage]) -> Vec<String> {
    messages.iter().map(AgentMessage::plain_text).collect()
}

fn ingest(session: &str, message: AgentMessage) -> IngestParams {
    IngestParams {
        session_id: session.into(),
        message: Some(message),
        ..Default::default()
    }
}

fn assemble(session: &str, messages: Vec<AgentMessage>) -> AssembleParams {
    AssembleParams {
        session_id: session.into(),
        messages: messages.into(),
        token_budget: Some(100_000),
        ..Default::default()
    }
}

/// The contract-level behaviour every engine here shares.
async fn conformance_suite(engine: Arc<dyn ContextEngine>) {
    let info = engine.info();
    let label = info.id.clone();
    assert!(!info.id.is_empty(), "info.id is empty");
    assert!(!info.name.is_empty(), "{label}: info.name is empty");
    let methods = engine.methods();
    assert!(
        methods.missing_required().is_empty(),
        "{label}: missing {:?}",
        methods.missing_required()
    );

    // Ingest stores, deduplicated by id; assemble gives the stored messages back in order.
    let first = AgentMessage::user("first question").with_id("m1");
    let second = AgentMessage::assistant("first answer").with_id("m2");
    assert!(
        engine
            .ingest(ingest("conf-a", first.clone()))
            .await
            .unwrap()
            .ingested,
        "{label}"
    );
    assert!(
        !engine
            .ingest(ingest("conf-a", first))
            .await
            .unwrap()
            .ingested,
        "{label}: a known message id was ingested twice"
    );
    assert!(
        engine
            .ingest(ingest("conf-a", second))
            .await
            .unwrap()
            .ingested,
        "{label}"
    );
    let assembled = engine.assemble(assemble("conf-a", vec![])).await.unwrap();
    let got = texts(&assembled.messages);
    let at = |needle: &str| got.iter().position(|t| t == needle);
    assert!(
        matches!((at("first question"), at("first answer")), (Some(q), Some(a)) if q < a),
        "{label}: assembled {got:?}"
    );
    assert!(assembled.estimated_tokens >= 0.0, "{label}");

    // Sessions are separate; an engine with nothing stored uses the host's transcript.
    let other = engine
        .assemble(assemble(
            "conf-b",
            vec![AgentMessage::user("other session")],
        ))
        .await
        .unwrap();
    let other_texts = texts(&other.messages);
    assert!(
        other_texts.contains(&"other session".to_string()),
        "{label}: {other_texts:?}"
    );
    assert!(
        !other_texts.contains(&"first question".to_string()),
        "{label}: sessions leak"
    );

    // A thread_bootstrap projection has a non-blank epoch that is stable while nothing changes.
    let again = engine.assemble(assemble("conf-a", vec![])).await.unwrap();
    if let Some(projection) = &assembled.context_projection {
        if projection.mode == ProjectionMode::ThreadBootstrap {
            let epoch = projection.epoch.as_deref().unwrap_or("");
            assert!(!epoch.trim().is_empty(), "{label}: blank epoch");
            assert_eq!(
                assembled.context_projection, again.context_projection,
                "{label}: epoch moved without a change"
            );
        }
    }

    if methods.contains(EngineMethod::IngestBatch) {
        let batch = engine
            .ingest_batch(IngestBatchParams {
                session_id: "conf-c".into(),
                session_key: None,
                messages: vec![
                    AgentMessage::user("batch one"),
                    AgentMessage::assistant("batch two"),
                ],
                is_heartbeat: None,
            })
            .await
            .unwrap();
        assert_eq!(batch.ingested_count, 2, "{label}");
        let got = texts(
            &engine
                .assemble(assemble("conf-c", vec![]))
                .await
                .unwrap()
                .messages,
        );
        assert!(got.contains(&"batch two".to_string()), "{label}: {got:?}");
    }

    // compact(force) succeeds. A non-owning engine hands over to the runtime's compaction;
    // an owning one that compacted under thread_bootstrap moves to a new epoch.
    for i in 0..10 {
        let message = AgentMessage::user(format!("message {i}")).with_id(format!("c{i}"));
        engine.ingest(ingest("conf-d", message)).await.unwrap();
    }
    let before = engine.assemble(assemble("conf-d", vec![])).await.unwrap();
    let compacted = engine
        .compact(CompactParams {
            session_id: "conf-d".into(),
            force: Some(true),
            token_budget: Some(100_000),
            runtime_context: Some(RuntimeContext {
                facts: RuntimeFacts::default(),
                callbacks: Some(Arc::new(DelegatingCallbacks)),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(compacted.ok, "{label}: compact not ok: {compacted:?}");
    if info.owns_compaction() {
        let after = engine.assemble(assemble("conf-d", vec![])).await.unwrap();
        let got = texts(&after.messages);
        assert!(
            got.contains(&"message 9".to_string()),
            "{label}: newest message lost: {got:?}"
        );
        let bootstrap = before
            .context_projection
            .as_ref()
            .is_some_and(|p| p.mode == ProjectionMode::ThreadBootstrap);
        if compacted.compacted && bootstrap {
            assert_ne!(
                before.context_projection, after.context_projection,
                "{label}: compaction kept the epoch"
            );
        }
    } else {
        assert_eq!(
            compacted.reason.as_deref(),
            Some("runtime compacted conf-d"),
            "{label}: a non-owning engine did not delegate compaction"
        );
    }

    // Durable turns: committed once, duplicate on a retry with the same key.
    if info.declares_durable_turns() && methods.contains(EngineMethod::CommitTurn) {
        let question = AgentMessage::user("durable question").with_id("t1-u");
        let answer = AgentMessage::assistant("durable answer").with_id("t1-a");
        let anchor = |entry_id: &str, seq: u64, parent: Option<&str>| TranscriptEntryAnchor {
            agent_id: "main".into(),
            session_id: "conf-e".into(),
            session_key: "conf-e".into(),
            store_path: "state.db".into(),
            generation: "0".into(),
            entry_id: entry_id.into(),
            raw_seq: seq,
            effective_parent_id: parent.map(str::to_string),
            active_message_position: seq,
            idempotency_key: None,
        };
        let commit = CommitTurnParams {
            advancement_key: "turn-1".into(),
            admission: TranscriptTurnAdmission {
                anchor: anchor("t1-u", 0, None),
                logical_turn_id: "turn-1".into(),
                role: "user".into(),
            },
            terminal: anchor("t1-a", 1, Some("t1-u")),
            messages: vec![question, answer],
            session_id: "conf-e".into(),
            session_key: None,
            session_target: None,
            runtime_settings: None,
            runtime_context: None,
            is_heartbeat: None,
        };
        assert_eq!(
            engine.commit_turn(commit.clone()).await.unwrap().status,
            "committed",
            "{label}"
        );
        assert_eq!(
            engine.commit_turn(commit).await.unwrap().status,
            "duplicate",
            "{label}"
        );
        let got = texts(
            &engine
                .assemble(assemble("conf-e", vec![]))
                .await
                .unwrap()
                .messages,
        );
        assert_eq!(
            got.iter().filter(|t| *t == "durable answer").count(),
            1,
            "{label}: {got:?}"
        );
    }

    if methods.contains(EngineMethod::Dispose) {
        engine.dispose().await.unwrap();
    }
}

// ------------------------------------------------------------------------------------------
// The engines
// ------------------------------------------------------------------------------------------

#[path = "support/programs.rs"]
mod programs;

fn tool_available(program: &str) -> bool {
    programs::program_here(program, "this conformance run")
}

fn process_config(
    engine_id: &str,
    command: Vec<String>,
    config: serde_json::Value,
) -> ProcessEngineConfig {
    let mut process = ProcessEngineConfig::new(
        engine_id,
        command,
        HostIdentity {
            id: "conformance".into(),
            label: "the conformance suite".into(),
            capabilities: Capability::ALL.to_vec(),
        },
    )
    .with_call_timeout(Duration::from_secs(20));
    process.init_timeout = Duration::from_secs(20);
    process.cwd = Some(Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf());
    process.config = config;
    process
}

/// The in-process Rust reference engine satisfies the suite.
#[tokio::test]
async fn rust_reference_engine_conforms() {
    conformance_suite(Arc::new(ReferenceEngine::new(4))).await;
}

/// The Python example engine, over the process protocol, satisfies the suite (and keeps its
/// state in the configured directory).
#[tokio::test]
async fn python_engine_conforms() {
    if !tool_available("python3") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let engine = ProcessEngine::spawn(process_config(
        "python-engine",
        vec!["python3".into(), "examples/python-engine/engine.py".into()],
        json!({"keepRecent": 4, "stateDir": state.path()}),
    ))
    .await
    .unwrap();
    assert_eq!(engine.info().id, "python-engine");
    assert!(engine.info().declares_durable_turns());
    conformance_suite(Arc::new(engine)).await;
    let files = std::fs::read_dir(state.path()).unwrap().count();
    assert!(
        files >= 4,
        "expected one state file per session, found {files}"
    );
}

/// The OpenClaw sample plugin, served by the Node host over the process protocol, satisfies
/// the suite.
#[tokio::test]
async fn node_hosted_openclaw_plugin_conforms() {
    if !tool_available("node") {
        return;
    }
    let engine = ProcessEngine::spawn(process_config(
        "recent-window",
        vec![
            "node".into(),
            "hosts/openclaw-node/host.mjs".into(),
            "hosts/openclaw-node/sample-plugin/index.mjs".into(),
        ],
        json!({"windowSize": 32, "projection": "thread_bootstrap"}),
    ))
    .await
    .unwrap();
    assert_eq!(engine.info().id, "recent-window");
    assert!(!engine.info().owns_compaction());
    conformance_suite(Arc::new(engine)).await;
}
