//! End-to-end behaviour against the real `codex app-server` (0.171.0 from npm, see the root
//! `package.json`), run offline against the loopback mock model server with `CODEX_HOME` in a
//! temporary directory. Each test skips, loudly, only when `locate_codex_binary()` finds no
//! binary (run `npm ci` at the workspace root, or set `CODEX_BIN`). One smoke test runs the
//! oldest tested Codex (0.169.0) installed beside it (`npm ci --prefix tests/codex-0.169`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use codex_app_server_client::{
    is_below_tested, locate_codex_binary, locate_codex_binary_in, offline_overrides,
    AdditionalContext, AppServerClient, AppServerConfig, AppServerError, ItemKind,
    ThreadResumeParams, ThreadStartParams, TurnEvent, TurnLimitKind, TurnLimits, TurnStartParams,
    TurnStatus, NEWEST_TESTED, OLDEST_TESTED,
};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest, ScriptedReply};
use futures::StreamExt;
use tempfile::TempDir;

const BASE: &str = "You are a test model. (e2e base instructions)";

struct Harness {
    binary: PathBuf,
    mock: MockModelServer,
    home: TempDir,
    workdir: TempDir,
}

impl Harness {
    /// `None` (after a loud message) when the Codex binary is not installed.
    async fn start(test: &str) -> Option<Self> {
        let Some(binary) = locate_codex_binary() else {
            eprintln!(
                "\n!!!!!!!! SKIPPED {test}: no codex binary (set CODEX_BIN or run `npm ci` at the workspace root) !!!!!!!!\n"
            );
            return None;
        };
        Some(Self::with_binary(binary).await)
    }

    async fn with_binary(binary: PathBuf) -> Self {
        let mock = MockModelServer::start(MockModelConfig::default())
            .await
            .unwrap();
        Self {
            binary,
            mock,
            home: tempfile::tempdir().unwrap(),
            workdir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self) -> AppServerConfig {
        AppServerConfig::new(self.home.path().join("codex-home"))
            .with_binary(&self.binary)
            .with_overrides(offline_overrides(&self.mock.base_url()))
            .with_cwd(self.workdir.path())
    }

    async fn client(&self) -> AppServerClient {
        AppServerClient::spawn(self.config()).await.unwrap()
    }

    async fn thread(&self, client: &AppServerClient, developer: Option<&str>) -> String {
        client
            .thread_start(ThreadStartParams {
                cwd: Some(self.workdir.path().to_owned()),
                base_instructions: Some(BASE.to_owned()),
                developer_instructions: developer.map(str::to_owned),
                ..ThreadStartParams::default()
            })
            .await
            .unwrap()
            .thread_id
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.mock.response_requests()
    }
}

async fn run_turn(
    client: &AppServerClient,
    thread: &str,
    text: &str,
) -> codex_app_server_client::TurnOutcome {
    client
        .turn_start(thread, text)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

/// The handshake works with `--strict-config`, which proves every key of `offline_overrides`
/// is one the pinned Codex knows; the server reports its version (the pinned one, parsed from
/// the user agent) and our `CODEX_HOME`.
#[tokio::test]
async fn handshake_with_strict_offline_config() {
    let Some(h) = Harness::start("handshake_with_strict_offline_config").await else {
        return;
    };
    let config = h.config().with_command([
        h.binary.display().to_string(),
        "app-server".to_owned(),
        "--strict-config".to_owned(),
    ]);
    let client = AppServerClient::spawn(config).await.unwrap();
    let info = client.server_info();
    assert!(
        info.user_agent.as_deref().unwrap().contains("0.171.0"),
        "{info:?}"
    );
    assert_eq!(client.codex_version(), Some(&NEWEST_TESTED));
    assert!(client.keeps_additional_context_across_compaction());
    assert_eq!(
        info.codex_home.as_deref(),
        Some(h.home.path().join("codex-home").as_path())
    );
    assert!(client.is_alive());
    client.shutdown().await;
}

/// Developer instructions given at thread start reach the model in the request body, after the
/// base instructions, and the turn streams back the mock's reply.
#[tokio::test]
async fn developer_instructions_reach_the_model() {
    let Some(h) = Harness::start("developer_instructions_reach_the_model").await else {
        return;
    };
    let client = h.client().await;
    let thread = h
        .thread(&client, Some("DEV-MARKER: always answer briefly"))
        .await;
    let outcome = run_turn(&client, &thread, "hello codex").await;
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.final_text, "mock reply to: hello codex");
    assert!(outcome.usage.is_some());

    let requests = h.requests();
    assert_eq!(requests.len(), 1);
    let developer = requests[0].input_texts("developer");
    assert_eq!(developer[0], BASE);
    assert!(
        developer
            .iter()
            .any(|t| t.contains("DEV-MARKER: always answer briefly")),
        "{developer:?}"
    );
    assert_eq!(requests[0].last_user_text().as_deref(), Some("hello codex"));
}

/// Two turns on one thread: the second request's input is the first request's input extended
/// (with the first reply and the new user message).
#[tokio::test]
async fn the_second_request_extends_the_first() {
    let Some(h) = Harness::start("the_second_request_extends_the_first").await else {
        return;
    };
    let client = h.client().await;
    let thread = h.thread(&client, Some("dev")).await;
    run_turn(&client, &thread, "turn one").await;
    let second = run_turn(&client, &thread, "turn two").await;
    assert_eq!(second.final_text, "mock reply to: turn two");

    let requests = h.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (&requests[0].input, &requests[1].input);
    assert!(second.len() > first.len());
    assert_eq!(&second[..first.len()], first.as_slice(), "prefix-extension");
    let added: Vec<String> = second[first.len()..]
        .iter()
        .filter_map(ctxbridge_mock_model::record::message_text)
        .collect();
    assert_eq!(
        added,
        vec!["mock reply to: turn one".to_owned(), "turn two".to_owned()]
    );
}

/// A developer message injected between turns is in the next model request, not before.
#[tokio::test]
async fn an_injected_developer_message_reaches_the_next_turn() {
    let Some(h) = Harness::start("an_injected_developer_message_reaches_the_next_turn").await
    else {
        return;
    };
    let client = h.client().await;
    let thread = h.thread(&client, None).await;
    run_turn(&client, &thread, "before").await;
    client
        .inject_developer_message(&thread, "INJECTED-MARKER: context from the engine")
        .await
        .unwrap();
    let outcome = run_turn(&client, &thread, "after").await;
    assert_eq!(outcome.status, TurnStatus::Completed);

    let requests = h.requests();
    assert_eq!(requests.len(), 2, "injection does not call the model");
    assert!(!requests[0].body_contains("INJECTED-MARKER"));
    let developer = requests[1].input_texts("developer");
    assert!(
        developer
            .iter()
            .any(|t| t == "INJECTED-MARKER: context from the engine"),
        "{developer:?}"
    );
}

/// A manual compaction runs as its own turn with a `contextCompaction` item; the model got the
/// checkpoint prompt, and the next turn carries the mock's summary instead of the old replies.
#[tokio::test]
async fn manual_compaction_emits_a_context_compaction_item() {
    let Some(h) = Harness::start("manual_compaction_emits_a_context_compaction_item").await else {
        return;
    };
    let client = h.client().await;
    let thread = h.thread(&client, Some("dev")).await;
    run_turn(&client, &thread, "something to compact").await;
    let compaction = client.thread_compact_start(&thread).await.unwrap();
    let outcome = compaction.collect().await.unwrap();
    assert!(outcome.compaction_seen);
    assert_eq!(outcome.status, TurnStatus::Completed);

    let after = run_turn(&client, &thread, "after compaction").await;
    assert_eq!(after.final_text, "mock reply to: after compaction");
    let requests = h.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1]
        .last_user_text()
        .unwrap()
        .contains("CONTEXT CHECKPOINT COMPACTION"));
    assert!(requests[2].body_contains("mock summary of 1 earlier user messages"));
    assert!(!requests[2].body_contains("mock reply to: something to compact"));
}

/// Killing the child fails nothing silently: the client is dead at once. A new client on the
/// same `CODEX_HOME` must `thread/resume` first, then continues the thread with its history.
#[tokio::test]
async fn a_killed_server_is_replaced_and_the_thread_resumed() {
    let Some(h) = Harness::start("a_killed_server_is_replaced_and_the_thread_resumed").await else {
        return;
    };
    let client = h.client().await;
    let thread = h.thread(&client, Some("dev")).await;
    run_turn(&client, &thread, "first life").await;
    client.kill().await;
    assert!(!client.is_alive());
    let error = client.turn_start(&thread, "too late").await.unwrap_err();
    assert!(error.is_transport());
    assert_eq!(error.method(), Some("turn/start"));

    let restarted = h.client().await;
    let error = restarted.turn_start(&thread, "not yet").await.unwrap_err();
    assert!(error.is_thread_not_found(), "{error}");
    let error = restarted
        .thread_resume("00000000-0000-7000-8000-000000000000")
        .await
        .unwrap_err();
    assert!(error.is_no_rollout_found(), "{error}");

    let resumed = restarted.thread_resume(&thread).await.unwrap();
    assert_eq!(resumed.thread_id, thread);
    let outcome = run_turn(&restarted, &thread, "second life").await;
    assert_eq!(outcome.final_text, "mock reply to: second life");
    let last = h.requests().pop().unwrap();
    assert_eq!(
        last.input_texts("user"),
        vec!["first life".to_owned(), "second life".to_owned()]
    );
    assert!(last
        .input_texts("assistant")
        .contains(&"mock reply to: first life".to_owned()));
    restarted.shutdown().await;
}

/// With retries at 0, a 500 from the model fails the turn after one request, and the thread
/// keeps working.
#[tokio::test]
async fn a_model_500_fails_the_turn_and_the_thread_survives() {
    let Some(h) = Harness::start("a_model_500_fails_the_turn_and_the_thread_survives").await else {
        return;
    };
    let client = h.client().await;
    let thread = h.thread(&client, None).await;
    h.mock.push_reply(ScriptedReply::http_error(500));
    let failed = run_turn(&client, &thread, "doomed").await;
    assert_eq!(failed.status, TurnStatus::Failed);
    assert!(failed.error.is_some());
    assert_eq!(h.requests().len(), 1, "no retries");

    let next = run_turn(&client, &thread, "recovered").await;
    assert_eq!(next.status, TurnStatus::Completed);
    assert_eq!(next.final_text, "mock reply to: recovered");
}

/// A stream dropped mid-way is retried by Codex (`error` with `willRetry: true`); the partial
/// text of the abandoned message is discarded and the turn ends with the retried reply only.
#[tokio::test]
async fn a_dropped_stream_is_retried_and_its_partial_text_discarded() {
    let Some(h) =
        Harness::start("a_dropped_stream_is_retried_and_its_partial_text_discarded").await
    else {
        return;
    };
    let client = AppServerClient::spawn(
        h.config()
            .with_override("model_providers.mock.stream_max_retries", 1i64),
    )
    .await
    .unwrap();
    let thread = h.thread(&client, None).await;
    h.mock
        .push_reply(ScriptedReply::drop_after_deltas(2).with_text("ABANDONED-PARTIAL-TEXT"));
    let mut turn = client.turn_start(&thread, "flaky").await.unwrap();
    let mut abandoned_items = Vec::new();
    let mut discarded = Vec::new();
    let mut completed_texts = Vec::new();
    let mut status = None;
    while let Some(event) = turn.next().await {
        match event.unwrap() {
            TurnEvent::TextDelta { item_id, delta }
                if "ABANDONED-PARTIAL-TEXT".contains(delta.as_str()) =>
            {
                abandoned_items.push(item_id);
            }
            TurnEvent::RetryError {
                discarded_item_ids, ..
            } => discarded.extend(discarded_item_ids),
            TurnEvent::ItemCompleted {
                kind: ItemKind::AgentMessage { text },
                ..
            } => completed_texts.push(text),
            TurnEvent::Completed { status: s, .. } => status = Some(s),
            _ => {}
        }
    }
    assert_eq!(status, Some(TurnStatus::Completed));
    abandoned_items.dedup();
    assert_eq!(
        abandoned_items.len(),
        1,
        "the partial text was streamed once"
    );
    assert_eq!(discarded, abandoned_items, "and discarded at the retry");
    assert_eq!(completed_texts, vec!["mock reply to: flaky".to_owned()]);
    assert_eq!(h.requests().len(), 2);
}

/// Index of the last message of `role` in `items` whose text satisfies `pred`.
fn position_of(
    items: &[serde_json::Value],
    role: &str,
    pred: impl Fn(&str) -> bool,
) -> Option<usize> {
    items.iter().rposition(|item| {
        item.get("role").and_then(serde_json::Value::as_str) == Some(role)
            && ctxbridge_mock_model::record::message_text(item).is_some_and(|t| pred(&t))
    })
}

/// `additionalContext` of kind `application` reaches the model as a developer item just before
/// the user message, which holds only the prompt; `thread/read` shows only the prompt. After a
/// manual compaction the next request still holds the context exactly when the version says
/// Codex keeps it (0.171.0 does; 0.169.0 dropped it).
#[tokio::test]
async fn additional_context_is_a_developer_item_before_the_prompt() {
    let Some(h) = Harness::start("additional_context_is_a_developer_item_before_the_prompt").await
    else {
        return;
    };
    const MARKER: &str = "CTX-MARKER: context from the engine";
    let client = h.client().await;
    let thread = h.thread(&client, Some("dev")).await;
    let turn = |text: &str| {
        TurnStartParams::text(text)
            .with_context("ctxbridge", AdditionalContext::application(MARKER))
    };
    let first = client
        .turn_start_with(&thread, turn("first prompt"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(first.status, TurnStatus::Completed);
    assert_eq!(first.final_text, "mock reply to: first prompt");

    let requests = h.requests();
    assert_eq!(requests.len(), 1);
    let input = &requests[0].input;
    let context_at = position_of(input, "developer", |t| t.contains(MARKER))
        .unwrap_or_else(|| panic!("no developer item with the context: {input:#?}"));
    let prompt_at = position_of(input, "user", |_| true).unwrap();
    assert_eq!(
        context_at + 1,
        prompt_at,
        "the context comes just before the prompt"
    );
    assert_eq!(
        requests[0].input_texts("user").last().map(String::as_str),
        Some("first prompt")
    );
    assert!(
        !requests[0]
            .input_texts("user")
            .iter()
            .any(|t| t.contains(MARKER)),
        "the user message holds only the prompt"
    );

    let read = client
        .request(
            "thread/read",
            serde_json::json!({"threadId": thread, "includeTurns": true}),
        )
        .await
        .unwrap();
    let user_texts: Vec<&str> = read["thread"]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|turn| turn["items"].as_array().unwrap())
        .filter(|item| item["type"] == "userMessage")
        .flat_map(|item| item["content"].as_array().unwrap())
        .filter_map(|part| part["text"].as_str())
        .collect();
    assert_eq!(user_texts, vec!["first prompt"]);
    assert!(!read.to_string().contains(MARKER), "{read}");

    let compaction = client.thread_compact_start(&thread).await.unwrap();
    assert!(compaction.collect().await.unwrap().compaction_seen);
    let after = client
        .turn_start_with(&thread, turn("after compaction"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(after.final_text, "mock reply to: after compaction");
    let last = h.requests().pop().unwrap();
    assert!(
        last.body_contains("mock summary of"),
        "the request is after the compaction"
    );
    assert_eq!(
        last.body_contains(MARKER),
        client.keeps_additional_context_across_compaction(),
        "context after compaction on {:?}",
        client.codex_version()
    );
    assert!(
        client.codex_version().unwrap() < &NEWEST_TESTED || last.body_contains(MARKER),
        "the pinned Codex keeps the context across compaction"
    );
}

/// Developer instructions across a cold resume: a thread started (with instructions) in one
/// app-server process and resumed in a second one keeps them in model requests after a
/// compaction when `thread/resume` re-sends them, and loses them when it does not.
#[tokio::test]
async fn a_cold_resume_must_resend_developer_instructions() {
    let Some(h) = Harness::start("a_cold_resume_must_resend_developer_instructions").await else {
        return;
    };
    const DEV_RESENT: &str = "DEV-RESENT: instructions re-sent on resume";
    const DEV_DROPPED: &str = "DEV-DROPPED: instructions not re-sent on resume";
    let first = h.client().await;
    let resent = h.thread(&first, Some(DEV_RESENT)).await;
    let dropped = h.thread(&first, Some(DEV_DROPPED)).await;
    run_turn(&first, &resent, "resent one").await;
    assert!(h.requests().pop().unwrap().body_contains(DEV_RESENT));
    run_turn(&first, &dropped, "dropped one").await;
    assert!(h.requests().pop().unwrap().body_contains(DEV_DROPPED));
    first.shutdown().await;

    let second = h.client().await;
    second
        .thread_resume_with(ThreadResumeParams {
            developer_instructions: Some(DEV_RESENT.to_owned()),
            ..ThreadResumeParams::new(resent.clone())
        })
        .await
        .unwrap();
    second.thread_resume(&dropped).await.unwrap();
    for thread in [&resent, &dropped] {
        let compaction = second.thread_compact_start(thread).await.unwrap();
        assert!(compaction.collect().await.unwrap().compaction_seen);
    }

    let outcome = run_turn(&second, &resent, "resent two").await;
    assert_eq!(outcome.final_text, "mock reply to: resent two");
    let request = h.requests().pop().unwrap();
    assert!(
        request.body_contains("mock summary of"),
        "after the compaction"
    );
    assert!(
        request.body_contains(DEV_RESENT),
        "re-sent instructions are kept"
    );

    let outcome = run_turn(&second, &dropped, "dropped two").await;
    assert_eq!(outcome.final_text, "mock reply to: dropped two");
    let request = h.requests().pop().unwrap();
    assert!(
        request.body_contains("mock summary of"),
        "after the compaction"
    );
    assert!(
        !request.body_contains(DEV_DROPPED),
        "instructions not re-sent are lost after compaction (openai/codex#19045)"
    );
    second.shutdown().await;
}

/// A model that never answers stalls the turn: the idle timeout ends it with a `TurnLimit`
/// error after `turn/interrupt`, and Codex really ended the turn — the next turn on the thread
/// is a turn of its own and completes normally.
#[tokio::test]
async fn a_stalled_model_hits_the_idle_timeout_and_codex_interrupts_the_turn() {
    let Some(h) =
        Harness::start("a_stalled_model_hits_the_idle_timeout_and_codex_interrupts_the_turn").await
    else {
        return;
    };
    let limits = TurnLimits {
        idle_timeout: Duration::from_millis(500),
        ..TurnLimits::default()
    };
    let client = AppServerClient::spawn(h.config().with_turn_limits(limits))
        .await
        .unwrap();
    let thread = h.thread(&client, None).await;
    h.mock
        .push_reply(ScriptedReply::text("never sent").with_delay(Duration::from_secs(3600)));
    let turn = client.turn_start(&thread, "stalled prompt").await.unwrap();
    let stalled_turn = turn.turn_id().unwrap().to_owned();
    let error = turn.collect().await.unwrap_err();
    match &error {
        AppServerError::TurnLimit {
            turn_id: Some(turn_id),
            limit: TurnLimitKind::Idle { .. },
            interrupted: true,
            ..
        } => assert_eq!(*turn_id, stalled_turn),
        other => panic!("expected an idle TurnLimit, got {other:?}"),
    }

    let next = client.turn_start(&thread, "next prompt").await.unwrap();
    assert_ne!(next.turn_id(), Some(stalled_turn.as_str()), "a new turn");
    let outcome = next.collect().await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.final_text, "mock reply to: next prompt");
    client.shutdown().await;
}

/// Where the oldest tested Codex is installed beside the pinned one.
fn oldest_install_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/codex-0.169")
}

/// Smoke run of the oldest tested Codex (0.169.0): the client parses its version, starts a
/// thread with developer instructions, runs a turn, and after a restart resumes the thread
/// (re-sending the instructions) and continues it with its history.
#[tokio::test]
async fn the_oldest_tested_codex_starts_turns_and_resumes() {
    let Some(binary) = locate_codex_binary_in(&oldest_install_dir()) else {
        eprintln!(
            "\n!!!!!!!! SKIPPED the_oldest_tested_codex_starts_turns_and_resumes: no codex in tests/codex-0.169 (run `npm ci --prefix tests/codex-0.169`) !!!!!!!!\n"
        );
        return;
    };
    let h = Harness::with_binary(binary).await;
    let client = h.client().await;
    assert_eq!(client.codex_version(), Some(&OLDEST_TESTED));
    assert!(!is_below_tested(client.codex_version().unwrap()));
    assert!(!client.keeps_additional_context_across_compaction());
    let thread = h.thread(&client, Some("DEV-OLD: be brief")).await;
    let outcome = run_turn(&client, &thread, "old one").await;
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.final_text, "mock reply to: old one");
    assert!(h
        .requests()
        .pop()
        .unwrap()
        .body_contains("DEV-OLD: be brief"));
    client.shutdown().await;

    let restarted = h.client().await;
    let resumed = restarted
        .thread_resume_with(ThreadResumeParams {
            developer_instructions: Some("DEV-OLD: be brief".to_owned()),
            ..ThreadResumeParams::new(thread.clone())
        })
        .await
        .unwrap();
    assert_eq!(resumed.thread_id, thread);
    let outcome = run_turn(&restarted, &thread, "old two").await;
    assert_eq!(outcome.final_text, "mock reply to: old two");
    let last = h.requests().pop().unwrap();
    assert_eq!(
        last.input_texts("user"),
        vec!["old one".to_owned(), "old two".to_owned()]
    );
    assert!(last.body_contains("DEV-OLD: be brief"));
    restarted.shutdown().await;
}
