//! End to end on the **real** Codex app-server (npm `@openai/codex` 0.171.0) driven offline
//! against the loopback mock model server: a 6-turn session with the sample thread_bootstrap
//! engine shows the projection exactly once per epoch, the bare prompt on reused turns, the
//! engine's `systemPromptAddition` inside the developer instructions and a rotation to a new
//! thread when the epoch changes; the same session in per-turn mode repeats the projection.
//! Skips loudly only when the Codex binary is absent (`.ci/run` installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use codex_app_server_client::{locate_codex_binary, offline_overrides};
use ctxbridge::backend::codex::{AppServerConfig, CodexBackend};
use ctxbridge::backend::ContextDelivery;
use ctxbridge::contract::ProjectionMode;
use ctxbridge::engines::sample::{SampleEngineConfig, SampleSummaryEngine, SAMPLE_ENGINE_ID};
use ctxbridge::harness::{Harness, HarnessConfig, TurnReport, TurnSpec};
use ctxbridge::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use ctxbridge::store::SqliteStore;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest};

const FRAME: &str = "<conversation_context>";
const ADDITION_MARK: &str = "Context comes from the sample summary engine";
const PROMPTS: [&str; 6] = [
    "alpha: what is a context engine?",
    "bravo: and a threaded backend?",
    "charlie: why project once per epoch?",
    "delta: what changes the epoch?",
    "echo: what happens on rotation?",
    "foxtrot: summarise all of it",
];

struct Run {
    reports: Vec<TurnReport>,
    requests: Vec<RecordedRequest>,
}

async fn run_session(mode: ProjectionMode) -> Option<Run> {
    // A 4-message window summarised in chunks of 4: the epoch changes once, at turn 5.
    let engine = Arc::new(SampleSummaryEngine::new(
        SampleEngineConfig {
            window_messages: 4,
            chunk_messages: 4,
            projection: mode,
        },
        None,
    ));
    let (harness, mock, _dir) = codex_harness(
        engine,
        SAMPLE_ENGINE_ID,
        ctxbridge::projection::DriftPolicy::Inject,
    )
    .await?;
    let reports = run_prompts(&harness).await;
    harness.shutdown().await;
    let requests = mock.response_requests();
    Some(Run { reports, requests })
}

async fn run_prompts(harness: &Harness) -> Vec<TurnReport> {
    let mut reports = Vec::new();
    for prompt in PROMPTS {
        reports.push(
            harness
                .turn(TurnSpec::new("codex-e2e", prompt))
                .await
                .unwrap(),
        );
    }
    reports
}

fn prompt_cache_key(r: &RecordedRequest) -> String {
    r.body
        .get("prompt_cache_key")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// thread_bootstrap on Codex: one projection per epoch, bare prompts in between, the addition in
/// the developer instructions, and a new thread when the epoch changes.
#[tokio::test]
async fn thread_bootstrap_projects_once_per_epoch_on_codex() {
    let Some(run) = run_session(ProjectionMode::ThreadBootstrap).await else {
        return;
    };
    let reasons: Vec<&str> = run.reports.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "missing-thread-binding",
            "matching-thread-bootstrap-binding",
            "matching-thread-bootstrap-binding",
            "matching-thread-bootstrap-binding",
            "projection-mismatch",
            "matching-thread-bootstrap-binding",
        ]
    );
    let actions: Vec<&str> = run
        .reports
        .iter()
        .map(|r| r.thread_action.as_str())
        .collect();
    assert_eq!(
        actions,
        ["started", "resumed", "resumed", "resumed", "rotated", "resumed"]
    );
    assert_eq!(run.reports[0].thread_id, run.reports[3].thread_id);
    assert_ne!(run.reports[3].thread_id, run.reports[4].thread_id);
    assert_eq!(run.reports[4].thread_id, run.reports[5].thread_id);

    // One model request per turn (no compaction, no retries).
    assert_eq!(run.requests.len(), 6, "one model request per turn");
    let last_user: Vec<String> = run
        .requests
        .iter()
        .map(|r| r.last_user_text().unwrap_or_default())
        .collect();
    // Reused turns send the bare prompt; only the rotation's turn carries the projection.
    for (i, text) in last_user.iter().enumerate() {
        if i == 4 {
            assert!(
                text.contains(FRAME),
                "turn 5 must carry the projection: {text}"
            );
            assert!(
                text.contains(PROMPTS[0].split(':').next().unwrap()),
                "the projection summarises the first turns"
            );
            assert!(text.ends_with(PROMPTS[4]), "the current request comes last");
        } else {
            assert_eq!(text, PROMPTS[i], "turn {} must send the bare prompt", i + 1);
        }
    }
    let framed_inputs = last_user.iter().filter(|t| t.contains(FRAME)).count();
    assert_eq!(
        framed_inputs, 1,
        "exactly one projection per epoch with context"
    );
    // The engine's systemPromptAddition is inside the developer instructions of every request.
    for r in &run.requests {
        let developer = r.input_texts("developer").join("\n");
        assert!(
            developer.contains("Base developer instructions."),
            "{developer}"
        );
        assert!(developer.contains(ADDITION_MARK), "{developer}");
    }
    // Codex keys its prompt cache by thread: the rotation shows as a new key.
    assert_eq!(
        prompt_cache_key(&run.requests[0]),
        prompt_cache_key(&run.requests[3])
    );
    assert_ne!(
        prompt_cache_key(&run.requests[3]),
        prompt_cache_key(&run.requests[4])
    );
    // The rotated thread was not fed the old turns as history: only its own turns are there.
    let turn6_users = run.requests[5].input_texts("user");
    assert!(
        !turn6_users.iter().any(|t| t == PROMPTS[0]),
        "old turns leaked into the new thread: {turn6_users:?}"
    );
}

/// per_turn on Codex: every turn after the first re-projects into the same thread, so the
/// projection is repeated and every request carries all earlier projections.
#[tokio::test]
async fn per_turn_repeats_the_projection_on_codex() {
    let Some(run) = run_session(ProjectionMode::PerTurn).await else {
        return;
    };
    assert!(run
        .reports
        .iter()
        .all(|r| r.reason == "per-turn-projection" && r.projected));
    assert!(
        run.reports
            .iter()
            .all(|r| r.thread_id == run.reports[0].thread_id),
        "one thread"
    );
    assert_eq!(run.requests.len(), 6);
    for (i, r) in run.requests.iter().enumerate().skip(1) {
        let text = r.last_user_text().unwrap_or_default();
        assert!(
            text.contains(FRAME),
            "turn {} must be framed: {text}",
            i + 1
        );
    }
    // The last request holds every earlier projection again (the cost per-turn mode pays).
    let frames_in_last = run.requests[5]
        .input_texts("user")
        .iter()
        .filter(|t| t.contains(FRAME))
        .count();
    assert_eq!(
        frames_in_last, 5,
        "turns 2–6 each added a projection to the thread"
    );
}

/// A test engine whose systemPromptAddition the test changes mid-session (one epoch).
struct AdditionEngine {
    addition: std::sync::Mutex<String>,
}

#[async_trait::async_trait]
impl ctxbridge::contract::ContextEngine for AdditionEngine {
    fn info(&self) -> ctxbridge::contract::EngineInfo {
        ctxbridge::contract::EngineInfo::new("addition-engine", "Addition Engine")
    }
    async fn ingest(
        &self,
        _: ctxbridge::contract::IngestParams,
    ) -> Result<ctxbridge::contract::IngestResult, ctxbridge::contract::EngineError> {
        Ok(ctxbridge::contract::IngestResult { ingested: false })
    }
    async fn assemble(
        &self,
        params: ctxbridge::contract::AssembleParams,
    ) -> Result<ctxbridge::contract::AssembleResult, ctxbridge::contract::EngineError> {
        Ok(ctxbridge::contract::AssembleResult {
            messages: params.messages,
            estimated_tokens: 0.0,
            system_prompt_addition: Some(self.addition.lock().unwrap().clone()),
            prompt_authority: None,
            context_projection: Some(ctxbridge::contract::ContextProjection::thread_bootstrap(
                "fixed",
            )),
        })
    }
    async fn compact(
        &self,
        _: ctxbridge::contract::CompactParams,
    ) -> Result<ctxbridge::contract::CompactResult, ctxbridge::contract::EngineError> {
        Ok(ctxbridge::contract::CompactResult {
            ok: true,
            compacted: false,
            reason: None,
            result: None,
        })
    }
}

/// A harness on the real Codex that delivers context in the turn input (what these tests
/// assert on); [`codex_harness_with`] chooses.
async fn codex_harness(
    engine: Arc<dyn ctxbridge::contract::ContextEngine>,
    engine_id: &str,
    drift: ctxbridge::projection::DriftPolicy,
) -> Option<(Harness, MockModelServer, tempfile::TempDir)> {
    codex_harness_with(engine, engine_id, drift, Some(ContextDelivery::TurnInput)).await
}

async fn codex_harness_with(
    engine: Arc<dyn ctxbridge::contract::ContextEngine>,
    engine_id: &str,
    drift: ctxbridge::projection::DriftPolicy,
    context_delivery: Option<ContextDelivery>,
) -> Option<(Harness, MockModelServer, tempfile::TempDir)> {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED harness_codex: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(CodexBackend::new(
        AppServerConfig::new(dir.path().join("codex-home"))
            .with_command(vec![binary.display().to_string(), "app-server".into()])
            .with_overrides(offline_overrides(&mock.base_url()))
            .with_cwd(dir.path().to_path_buf()),
    ));
    let harness = Harness::new(
        HarnessConfig {
            base_instructions: Some("You are a test model.".into()),
            developer_instructions: Some("Base developer instructions.".into()),
            drift_policy: drift,
            context_delivery,
            ..HarnessConfig::default()
        },
        Arc::new(QuarantineEngine::new(
            engine_id,
            engine,
            Arc::new(QuarantineBook::new()),
            CallTimeouts::default(),
        )),
        backend,
        Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap()),
    );
    Some((harness, mock, dir))
}

/// Codex fixes developer instructions at thread start; a changed systemPromptAddition on a
/// reused thread reaches the model as an injected developer message (policy `inject`), and
/// with policy `rotate` as the instructions of a new thread.
#[tokio::test]
async fn developer_instruction_drift_reaches_codex() {
    for drift in [
        ctxbridge::projection::DriftPolicy::Inject,
        ctxbridge::projection::DriftPolicy::Rotate,
    ] {
        let engine = Arc::new(AdditionEngine {
            addition: std::sync::Mutex::new("Remember: version one.".into()),
        });
        let Some((h, mock, _dir)) = codex_harness(engine.clone(), "addition-engine", drift).await
        else {
            return;
        };
        let t1 = h.turn(TurnSpec::new("d", "first")).await.unwrap();
        let t2 = h.turn(TurnSpec::new("d", "second")).await.unwrap();
        assert_eq!(t2.developer_instructions_delivery, "unchanged");
        *engine.addition.lock().unwrap() = "Remember: version two.".into();
        let t3 = h.turn(TurnSpec::new("d", "third")).await.unwrap();
        let requests = mock.response_requests();
        assert_eq!(requests.len(), 3);
        let developer = requests[2].input_texts("developer").join("\n---\n");
        assert!(
            developer.contains("Remember: version two."),
            "{drift:?}: {developer}"
        );
        match drift {
            ctxbridge::projection::DriftPolicy::Inject => {
                assert_eq!(t3.developer_instructions_delivery, "inject");
                assert_eq!(t3.thread_id, t1.thread_id);
                assert_eq!(t3.thread_action.as_str(), "resumed");
                // The old instructions stay in the thread; the new text follows them.
                assert!(developer.contains("Remember: version one."));
            }
            ctxbridge::projection::DriftPolicy::Rotate => {
                assert_eq!(t3.developer_instructions_delivery, "thread-start");
                assert_ne!(t3.thread_id, t1.thread_id);
                assert_eq!(t3.thread_action.as_str(), "rotated");
                assert!(!developer.contains("Remember: version one."), "{developer}");
            }
        }
        h.shutdown().await;
    }
}

/// A context-window overflow reported by the model on a resumed Codex thread: ctxbridge starts
/// a fresh thread, re-projects the engine's context and retries the turn once.
#[tokio::test]
async fn overflow_on_codex_retries_on_a_fresh_thread() {
    let engine = Arc::new(SampleSummaryEngine::new(
        SampleEngineConfig::default(),
        None,
    ));
    let Some((h, mock, _dir)) = codex_harness(
        engine,
        SAMPLE_ENGINE_ID,
        ctxbridge::projection::DriftPolicy::Inject,
    )
    .await
    else {
        return;
    };
    let t1 = h
        .turn(TurnSpec::new("o", "remember the pelican"))
        .await
        .unwrap();
    h.turn(TurnSpec::new("o", "and the heron")).await.unwrap();
    mock.push_reply(ctxbridge_mock_model::ScriptedReply::failed(
        "context_length_exceeded",
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
    ));
    let t3 = h.turn(TurnSpec::new("o", "what birds?")).await.unwrap();
    assert!(t3.metrics.retried, "{t3:?}");
    assert_eq!(t3.thread_action.as_str(), "rotated");
    assert_ne!(t3.thread_id, t1.thread_id);
    assert!(t3.projected);
    let last = mock.response_requests().last().cloned().unwrap();
    let input = last.last_user_text().unwrap();
    assert!(input.contains("<conversation_context>"), "{input}");
    assert!(input.contains("remember the pelican") && input.contains("and the heron"));
    assert!(input.ends_with("what birds?"));
    h.shutdown().await;
}

/// Every `text` of every `userMessage` item in a `thread/read` result (wherever it nests).
fn user_message_texts(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if map.get("type").and_then(|t| t.as_str()) == Some("userMessage") {
                let mut texts = Vec::new();
                collect_texts(
                    map.get("content").unwrap_or(&serde_json::Value::Null),
                    &mut texts,
                );
                out.push(texts.join(""));
                return;
            }
            map.values().for_each(|v| user_message_texts(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| user_message_texts(v, out)),
        _ => {}
    }
}

fn collect_texts(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(t) = map.get("text").and_then(|t| t.as_str()) {
                out.push(t.to_string());
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_texts(v, out)),
        _ => {}
    }
}

/// Issue 13.3 on the real Codex (0.171.0, where the default delivery is additional context):
/// the projecting turn sends its rendered context once as `additionalContext`, which reaches
/// the model as one developer item (`<ctxbridge>…</ctxbridge>`) and stays in the thread for the
/// epoch; every turn input is the bare prompt, so the thread's user messages (`thread/read`)
/// hold only the user's words.
#[tokio::test]
async fn additional_context_delivers_the_projection_once_per_epoch_on_codex() {
    use codex_app_server_client::{AppServerClient, AppServerConfig};
    let engine = Arc::new(SampleSummaryEngine::new(
        SampleEngineConfig {
            window_messages: 4,
            chunk_messages: 4,
            projection: ProjectionMode::ThreadBootstrap,
        },
        None,
    ));
    let Some((harness, mock, dir)) = codex_harness_with(
        engine,
        SAMPLE_ENGINE_ID,
        ctxbridge::projection::DriftPolicy::Inject,
        None,
    )
    .await
    else {
        return;
    };
    let reports = run_prompts(&harness).await;
    harness.shutdown().await;
    let deliveries: Vec<&str> = reports
        .iter()
        .map(|r| r.context_delivery.as_str())
        .collect();
    assert_eq!(
        deliveries,
        ["none", "none", "none", "none", "additional-context", "none"],
        "the connected Codex keeps the fragment across compaction: the default delivery"
    );
    assert!(reports[4].projected);
    assert_eq!(reports[4].thread_action.as_str(), "rotated");
    assert_eq!(reports[4].thread_id, reports[5].thread_id);
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 6, "one model request per turn");
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(
            r.last_user_text().as_deref(),
            Some(PROMPTS[i]),
            "turn {} sends the bare prompt",
            i + 1
        );
        let fragments: Vec<String> = r
            .input_texts("developer")
            .into_iter()
            .filter(|t| t.contains(FRAME))
            .collect();
        let expected = usize::from(i >= 4);
        assert_eq!(fragments.len(), expected, "turn {}: {fragments:?}", i + 1);
        for fragment in &fragments {
            assert!(
                fragment.starts_with("<ctxbridge>") && fragment.ends_with("</ctxbridge>"),
                "{fragment}"
            );
            assert!(fragment.contains("</conversation_context>"), "{fragment}");
            assert!(!fragment.contains("Current user request"), "{fragment}");
            assert!(
                fragment.contains(PROMPTS[0].split(':').next().unwrap()),
                "the projection summarises the first turns: {fragment}"
            );
        }
        assert!(
            !r.input_texts("user").iter().any(|t| t.contains(FRAME)),
            "turn {}: no context in user messages",
            i + 1
        );
    }
    // The fragment of turn 5 is the one turn 6 still carries (persisted, not re-sent).
    assert_eq!(
        requests[4]
            .input_texts("developer")
            .into_iter()
            .filter(|t| t.contains(FRAME))
            .collect::<Vec<_>>(),
        requests[5]
            .input_texts("developer")
            .into_iter()
            .filter(|t| t.contains(FRAME))
            .collect::<Vec<_>>()
    );

    // What a client sees: the thread's user messages are the prompts alone.
    let binary = locate_codex_binary().unwrap();
    let client = AppServerClient::spawn(
        AppServerConfig::new(dir.path().join("codex-home"))
            .with_binary(&binary)
            .with_overrides(offline_overrides(&mock.base_url()))
            .with_cwd(dir.path()),
    )
    .await
    .unwrap();
    let thread = reports[5].thread_id.clone();
    client.thread_resume(&thread).await.unwrap();
    let read = client
        .request(
            "thread/read",
            serde_json::json!({"threadId": thread, "includeTurns": true}),
        )
        .await
        .unwrap();
    let mut users = Vec::new();
    user_message_texts(&read, &mut users);
    assert_eq!(
        users,
        vec![PROMPTS[4].to_string(), PROMPTS[5].to_string()],
        "{read}"
    );

    client.shutdown().await;
}

/// A thread_bootstrap engine with one fixed epoch and fixed context (`filler` extra exchanges
/// of ~2 KB each), that leaves compaction to the backend (its `compact` is a no-op, it does not
/// own compaction).
struct FixedContextEngine {
    filler: usize,
}

const BICYCLE: &str = "the blue bicycle is in the shed";

#[async_trait::async_trait]
impl ctxbridge::contract::ContextEngine for FixedContextEngine {
    fn info(&self) -> ctxbridge::contract::EngineInfo {
        ctxbridge::contract::EngineInfo::new("fixed-context", "Fixed Context")
    }
    async fn ingest(
        &self,
        _: ctxbridge::contract::IngestParams,
    ) -> Result<ctxbridge::contract::IngestResult, ctxbridge::contract::EngineError> {
        Ok(ctxbridge::contract::IngestResult { ingested: false })
    }
    async fn assemble(
        &self,
        _: ctxbridge::contract::AssembleParams,
    ) -> Result<ctxbridge::contract::AssembleResult, ctxbridge::contract::EngineError> {
        let mut messages = Vec::new();
        for i in 0..self.filler {
            messages.push(ctxbridge::contract::AgentMessage::user(format!(
                "filler {i}: {}",
                "lorem ipsum dolor sit amet ".repeat(70)
            )));
            messages.push(ctxbridge::contract::AgentMessage::assistant("noted"));
        }
        messages.push(ctxbridge::contract::AgentMessage::user(BICYCLE));
        messages.push(ctxbridge::contract::AgentMessage::assistant("noted"));
        Ok(ctxbridge::contract::AssembleResult {
            messages: messages.into(),
            estimated_tokens: 0.0,
            system_prompt_addition: None,
            prompt_authority: None,
            context_projection: Some(ctxbridge::contract::ContextProjection::thread_bootstrap(
                "fixed-epoch",
            )),
        })
    }
    async fn compact(
        &self,
        _: ctxbridge::contract::CompactParams,
    ) -> Result<ctxbridge::contract::CompactResult, ctxbridge::contract::EngineError> {
        Ok(ctxbridge::contract::CompactResult {
            ok: true,
            compacted: false,
            reason: None,
            result: None,
        })
    }
}

fn fragments(r: &RecordedRequest) -> Vec<String> {
    r.input_texts("developer")
        .into_iter()
        .filter(|t| t.contains(FRAME))
        .collect()
}

/// Issue 13.3: the additional context survives a manual compaction on the real Codex 0.171.0.
/// Codex's compaction drops the developer item unless the next turn sends it again, so
/// ctxbridge records the compaction in the binding and the next turn re-sends the rendered
/// context (and only that turn): every request after the compaction holds it exactly once,
/// and the turn inputs stay the bare prompts.
#[tokio::test]
async fn additional_context_survives_manual_compaction_on_codex() {
    let Some((h, mock, _dir)) = codex_harness_with(
        Arc::new(FixedContextEngine { filler: 0 }),
        "fixed-context",
        ctxbridge::projection::DriftPolicy::Inject,
        Some(ContextDelivery::AdditionalContext),
    )
    .await
    else {
        return;
    };
    let t1 = h.turn(TurnSpec::new("c", "one")).await.unwrap();
    let t2 = h.turn(TurnSpec::new("c", "two")).await.unwrap();
    let compacted = h.compact("c").await.unwrap();
    assert!(compacted.native_compaction, "{compacted:?}");
    let t3 = h.turn(TurnSpec::new("c", "three")).await.unwrap();
    let t4 = h.turn(TurnSpec::new("c", "four")).await.unwrap();
    h.shutdown().await;
    let deliveries: Vec<&str> = [&t1, &t2, &t3, &t4]
        .iter()
        .map(|r| r.context_delivery.as_str())
        .collect();
    assert_eq!(
        deliveries,
        ["additional-context", "none", "additional-context", "none"]
    );
    assert!([&t2, &t3, &t4].iter().all(|t| t.thread_id == t1.thread_id));
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 5, "four turns and the compaction");
    let turns = [&requests[0], &requests[1], &requests[3], &requests[4]];
    for (r, prompt) in turns.iter().zip(["one", "two", "three", "four"]) {
        assert_eq!(r.last_user_text().as_deref(), Some(prompt));
        let found = fragments(r);
        assert_eq!(found.len(), 1, "{prompt}: {:?}", r.input_texts("developer"));
        assert!(found[0].contains(BICYCLE), "{}", found[0]);
    }
}

/// Codex 0.171.0 cuts an `additionalContext` value to about 1000 tokens; a rendered context
/// larger than ctxbridge's limit for the channel goes in the turn input instead, whole, even
/// with additional-context delivery configured (and `contextDelivery` says `turn-input`).
#[tokio::test]
async fn an_oversized_context_goes_in_the_turn_input_on_codex() {
    let Some((h, mock, _dir)) = codex_harness_with(
        Arc::new(FixedContextEngine { filler: 8 }),
        "fixed-context",
        ctxbridge::projection::DriftPolicy::Inject,
        Some(ContextDelivery::AdditionalContext),
    )
    .await
    else {
        return;
    };
    let t1 = h
        .turn(TurnSpec::new("big", "what is in the shed?"))
        .await
        .unwrap();
    h.shutdown().await;
    assert_eq!(t1.context_delivery, "turn-input");
    assert!(t1.metrics.rendered_context_chars > ctxbridge::backend::CODEX_ADDITIONAL_CONTEXT_BYTES);
    let requests = mock.response_requests();
    let input = requests[0].last_user_text().unwrap();
    assert!(input.contains(FRAME), "{input}");
    assert!(
        input.contains("filler 0: ") && input.contains("filler 7: "),
        "{input}"
    );
    assert!(input.contains(BICYCLE), "{input}");
    assert!(!input.contains("tokens truncated"), "{input}");
    assert!(input.ends_with("what is in the shed?"));
    assert!(fragments(&requests[0]).is_empty());
}
