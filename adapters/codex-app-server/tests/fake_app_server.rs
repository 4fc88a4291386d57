//! Deterministic behaviour of the client against `fake-app-server`, a scripted stand-in for
//! `codex app-server` built from this crate (see `src/bin/fake-app-server.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use codex_app_server_client::{
    is_below_tested, AdditionalContext, AppServerClient, AppServerConfig, AppServerError,
    CodexVersion, ItemKind, ThreadResumeParams, ThreadStartParams, TurnEvent, TurnLimitKind,
    TurnLimits, TurnStartParams, TurnStatus,
};
use futures::StreamExt;
use serde_json::{json, Value};

fn config(home: &Path) -> AppServerConfig {
    AppServerConfig::new(home)
        .with_command([env!("CARGO_BIN_EXE_fake-app-server")])
        .with_request_timeout(Duration::from_secs(10))
}

async fn spawn(home: &Path) -> AppServerClient {
    AppServerClient::spawn(config(home)).await.unwrap()
}

async fn new_thread(client: &AppServerClient) -> String {
    client
        .thread_start(ThreadStartParams::default())
        .await
        .unwrap()
        .thread_id
}

/// The handshake sends clientInfo and the experimental capability, then `initialized`; the
/// child gets `CODEX_HOME` (created when missing), the extra environment, and `-c` overrides
/// with strings quoted as TOML.
#[tokio::test]
async fn handshake_passes_identity_home_env_and_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("nested").join("codex-home");
    let client = AppServerClient::spawn(
        config(&home)
            .with_override("model", "say \"hi\"")
            .with_override("model_providers.mock.request_max_retries", 0i64)
            .with_env("FAKE_ENV", "present"),
    )
    .await
    .unwrap();
    assert!(home.is_dir());
    assert_eq!(
        client.server_info().codex_home.as_deref(),
        Some(home.as_path())
    );
    assert!(client.is_alive());

    let state = client.request("fake/state", json!({})).await.unwrap();
    assert_eq!(state["initialized"], true);
    assert_eq!(state["initializeParams"]["clientInfo"]["name"], "ctxbridge");
    assert_eq!(
        state["initializeParams"]["capabilities"]["experimentalApi"],
        true
    );
    assert_eq!(state["fakeEnv"], "present");
    assert_eq!(
        state["args"],
        json!([
            "-c",
            "model=\"say \\\"hi\\\"\"",
            "-c",
            "model_providers.mock.request_max_retries=0"
        ])
    );
}

/// Responses are matched to requests by id even when they arrive in another order.
#[tokio::test]
async fn responses_are_matched_by_id_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let held = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .request("fake/echo", json!({"value": "first", "hold": true}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = client
        .request("fake/echo", json!({"value": "second"}))
        .await
        .unwrap();
    let first = held.await.unwrap().unwrap();
    assert_eq!(first["echo"], "first");
    assert_eq!(second["echo"], "second");
}

/// JSON-RPC errors keep the method, code and message; the helper predicates recognise the two
/// "unknown thread" messages.
#[tokio::test]
async fn server_errors_name_the_method() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;

    let error = client.turn_start("thr-missing", "hi").await.unwrap_err();
    assert!(error.is_thread_not_found(), "{error}");
    assert_eq!(error.method(), Some("turn/start"));
    assert!(
        matches!(&error, AppServerError::Server { code: -32600, message, .. } if message == "thread not found: thr-missing")
    );

    let error = client.thread_resume("thr-missing").await.unwrap_err();
    assert!(error.is_no_rollout_found(), "{error}");
    assert!(!error.is_thread_not_found());
    assert_eq!(error.method(), Some("thread/resume"));

    let error = client
        .request("no/such/method", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(error, AppServerError::Server { code: -32601, .. }));
    // A failed turn/start leaves no route behind: a turn on a real thread still works.
    let thread = new_thread(&client).await;
    assert_eq!(
        client
            .turn_start(&thread, "ok")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
            .status,
        TurnStatus::Completed
    );
}

/// A turn streams its events in order and ends after `Completed`.
#[tokio::test]
async fn a_turn_streams_typed_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let mut turn = client.turn_start(&thread, "hello").await.unwrap();
    let turn_id = turn.turn_id().unwrap().to_owned();

    let mut events = Vec::new();
    while let Some(event) = turn.next().await {
        events.push(event.unwrap());
    }
    assert_eq!(events.len(), 9, "{events:#?}");
    assert_eq!(
        events[0],
        TurnEvent::Started {
            turn_id: turn_id.clone()
        }
    );
    assert!(
        matches!(&events[1], TurnEvent::ItemStarted { kind: ItemKind::UserMessage { text }, .. } if text == "hello")
    );
    assert!(matches!(
        &events[2],
        TurnEvent::ItemCompleted {
            kind: ItemKind::UserMessage { .. },
            ..
        }
    ));
    assert!(
        matches!(&events[3], TurnEvent::ItemStarted { kind: ItemKind::AgentMessage { text }, .. } if text.is_empty())
    );
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "fake reply to: hello");
    assert!(
        matches!(&events[6], TurnEvent::ItemCompleted { kind: ItemKind::AgentMessage { text }, .. } if text == "fake reply to: hello")
    );
    assert!(
        matches!(&events[7], TurnEvent::TokenUsage(usage) if usage["total"]["totalTokens"] == 10)
    );
    assert_eq!(
        events[8],
        TurnEvent::Completed {
            turn_id,
            status: TurnStatus::Completed,
            error: None
        }
    );
    assert!(turn.next().await.is_none());
}

/// Garbage lines, a JSON array, an unknown notification, a notification for another thread,
/// a line over `max_line_bytes` and a server request neither break the reader nor leak into
/// the turn; the server request is declined with an error reply.
#[tokio::test]
async fn noisy_output_is_skipped_and_server_requests_are_declined() {
    let dir = tempfile::tempdir().unwrap();
    let client = AppServerClient::spawn(
        config(dir.path())
            .with_max_line_bytes(16 * 1024)
            .with_env("FAKE_HUGE_BYTES", "200000"),
    )
    .await
    .unwrap();
    let thread = new_thread(&client).await;
    let mut turn = client.turn_start(&thread, "noisy hello").await.unwrap();
    let mut deltas = String::new();
    let mut status = None;
    while let Some(event) = turn.next().await {
        match event.unwrap() {
            TurnEvent::TextDelta { delta, .. } => deltas.push_str(&delta),
            TurnEvent::Completed { status: s, .. } => status = Some(s),
            _ => {}
        }
    }
    assert_eq!(status, Some(TurnStatus::Completed));
    assert_eq!(deltas, "fake reply to: noisy hello");
    assert!(client.is_alive());

    let state = client.request("fake/state", json!({})).await.unwrap();
    let replies = state["serverRequestReplies"].as_array().unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["id"], "srv-1");
    assert_eq!(replies[0]["error"]["code"], -32601);
}

/// Two turns on two threads whose notifications interleave are each routed to their own
/// handle.
#[tokio::test]
async fn interleaved_turns_are_routed_by_thread() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread_a = new_thread(&client).await;
    let thread_b = new_thread(&client).await;
    let turn_a = client.turn_start(&thread_a, "hold on").await.unwrap();
    let turn_b = client.turn_start(&thread_b, "go").await.unwrap();
    let (a, b) = tokio::join!(turn_a.collect(), turn_b.collect());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.final_text, "held and released");
    assert_eq!(a.status, TurnStatus::Completed);
    assert_eq!(b.final_text, "fake reply to: go");
    assert_ne!(a.turn_id, b.turn_id);
}

/// A retried failure (`willRetry: true`) discards the partial text of the abandoned item; the
/// outcome keeps only the retried message.
#[tokio::test]
async fn a_retry_discards_the_abandoned_partial_text() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let mut turn = client.turn_start(&thread, "retry please").await.unwrap();
    let mut abandoned = None;
    let mut discarded = None;
    while let Some(event) = turn.next().await {
        match event.unwrap() {
            TurnEvent::TextDelta { item_id, delta } if delta == "abandoned partial" => {
                assert_eq!(
                    turn.partial_text().get(&item_id).map(String::as_str),
                    Some("abandoned partial")
                );
                abandoned = Some(item_id);
            }
            TurnEvent::RetryError {
                message,
                discarded_item_ids,
            } => {
                assert_eq!(message, "Reconnecting... 1/5");
                assert!(turn.partial_text().is_empty());
                discarded = Some(discarded_item_ids);
            }
            _ => {}
        }
    }
    assert_eq!(discarded, Some(vec![abandoned.unwrap()]));

    let outcome = client
        .turn_start(&thread, "retry again")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome.final_text, "fake reply to: retry again");
    assert_eq!(
        outcome.agent_messages,
        vec!["fake reply to: retry again".to_owned()]
    );
    assert_eq!(outcome.retries, vec!["Reconnecting... 1/5".to_owned()]);
}

/// A failed turn reports status and error; the thread keeps working afterwards.
#[tokio::test]
async fn a_failed_turn_reports_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let outcome = client
        .turn_start(&thread, "fail now")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::Failed);
    assert!(outcome.error.unwrap().contains("500"));
    assert_eq!(outcome.final_text, "");
    let next = client
        .turn_start(&thread, "again")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(next.status, TurnStatus::Completed);
}

/// While a turn streams, a second `turn/start` on the same thread is refused (Codex would steer
/// it into the running turn); `turn/interrupt` ends the running turn as interrupted.
#[tokio::test]
async fn one_turn_per_thread_and_interrupt() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let turn = client.turn_start(&thread, "hold it").await.unwrap();
    let error = client.turn_start(&thread, "steer?").await.unwrap_err();
    assert!(
        matches!(&error, AppServerError::TurnActive { method, thread_id } if method == "turn/start" && *thread_id == thread)
    );

    let turn_id = turn.turn_id().unwrap().to_owned();
    client.turn_interrupt(&thread, &turn_id).await.unwrap();
    let outcome = turn.collect().await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert_eq!(outcome.turn_id.as_deref(), Some(turn_id.as_str()));
    // The route is released: a new turn can start.
    let next = client
        .turn_start(&thread, "after")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(next.final_text, "fake reply to: after");
}

/// Injected items reach the thread (the fake counts them into its next reply), and a manual
/// compaction is a turn of its own with a `contextCompaction` item.
#[tokio::test]
async fn injection_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    client
        .inject_developer_message(&thread, "remember X")
        .await
        .unwrap();
    let outcome = client
        .turn_start(&thread, "hi")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome.final_text, "fake reply to: hi (injected 1)");

    let compaction = client.thread_compact_start(&thread).await.unwrap();
    assert_eq!(compaction.turn_id(), None);
    let outcome = compaction.collect().await.unwrap();
    assert!(outcome.compaction_seen);
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert!(outcome.turn_id.is_some());

    let error = client
        .inject_developer_message("thr-missing", "x")
        .await
        .unwrap_err();
    assert!(error.is_thread_not_found());
}

/// The child dying mid-turn fails the turn at once with a transport error naming `turn/start`
/// and the exit, later calls fail the same way, and a new client on the same `CODEX_HOME` can
/// resume the thread (which it does not know before `thread/resume`) and continue it.
#[tokio::test]
async fn child_death_mid_turn_then_restart_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let started = Instant::now();
    let error = client
        .turn_start(&thread, "die now")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.is_transport());
    assert_eq!(error.method(), Some("turn/start"));
    let text = error.to_string();
    assert!(text.contains("exited"), "{text}");
    assert!(text.contains("dying on purpose"), "stderr tail in {text}");
    assert!(!client.is_alive());
    assert!(client.death_reason().is_some());

    let error = client
        .thread_start(ThreadStartParams::default())
        .await
        .unwrap_err();
    assert!(error.is_transport());
    assert_eq!(error.method(), Some("thread/start"));

    let restarted = spawn(dir.path()).await;
    let error = restarted
        .turn_start(&thread, "before resume")
        .await
        .unwrap_err();
    assert!(error.is_thread_not_found());
    let resumed = restarted.thread_resume(&thread).await.unwrap();
    assert_eq!(resumed.thread_id, thread);
    assert_eq!(resumed.raw["excludeTurns"], true);
    let outcome = restarted
        .turn_start(&thread, "after resume")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome.final_text, "fake reply to: after resume");
}

/// A pending call fails as soon as the child exits, not at the request timeout.
#[tokio::test]
async fn a_pending_call_fails_when_the_child_exits() {
    let dir = tempfile::tempdir().unwrap();
    let client =
        AppServerClient::spawn(config(dir.path()).with_request_timeout(Duration::from_secs(30)))
            .await
            .unwrap();
    let started = Instant::now();
    let error = client.request("fake/exit", json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&error, AppServerError::Transport { method, .. } if method == "fake/exit"),
        "{error}"
    );
}

/// A request without an answer times out naming its method; the connection stays usable.
#[tokio::test]
async fn an_unanswered_request_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let client =
        AppServerClient::spawn(config(dir.path()).with_request_timeout(Duration::from_millis(300)))
            .await
            .unwrap();
    let error = client.request("fake/never", json!({})).await.unwrap_err();
    assert!(matches!(&error, AppServerError::Timeout { method, .. } if method == "fake/never"));
    let echo = client
        .request("fake/echo", json!({"value": 1}))
        .await
        .unwrap();
    assert_eq!(echo["echo"], 1);
}

/// A child that exits before answering `initialize` makes `spawn` fail with a transport error
/// carrying its stderr; a missing program is a spawn error.
#[tokio::test]
async fn spawn_failures_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let error = AppServerClient::spawn(config(dir.path()).with_env("FAKE_EXIT_AT_START", "1"))
        .await
        .unwrap_err();
    assert_eq!(error.method(), Some("initialize"));
    assert!(error.is_transport());
    assert!(error.to_string().contains("exiting at start"), "{error}");

    let error = AppServerClient::spawn(
        AppServerConfig::new(dir.path()).with_command(["/nonexistent/codex"]),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, AppServerError::Spawn { .. }));
}

/// `kill` fails a streaming turn and marks the client dead; `shutdown` ends the child cleanly.
#[tokio::test]
async fn kill_and_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let turn = client.turn_start(&thread, "hold forever").await.unwrap();
    client.kill().await;
    assert!(!client.is_alive());
    let error = turn.collect().await.unwrap_err();
    assert_eq!(error.method(), Some("turn/start"));

    let client = spawn(dir.path()).await;
    let observer = client.clone();
    client.shutdown().await;
    assert!(!observer.is_alive());
    let reason = observer.death_reason().unwrap();
    assert!(reason.contains("exit status: 0"), "{reason}");
}

/// Many concurrent requests over one child all get their own answers.
#[tokio::test]
async fn concurrent_requests_share_one_child() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let calls = (0..50).map(|i| {
        let client = client.clone();
        async move {
            client
                .request("fake/echo", json!({"value": i}))
                .await
                .unwrap()
        }
    });
    let results: Vec<Value> = futures::future::join_all(calls).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["echo"], i);
    }
}

/// Drive a turn until its stream ends; the events before the end and the error it ended with.
async fn until_error(
    mut turn: codex_app_server_client::TurnHandle,
) -> (Vec<TurnEvent>, Option<AppServerError>) {
    let mut events = Vec::new();
    while let Some(event) = turn.next().await {
        match event {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(
                    turn.next().await.is_none(),
                    "the stream ends after the error"
                );
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

/// The `turn/interrupt` params the fake received.
async fn interrupts(client: &AppServerClient) -> Value {
    client.request("fake/state", json!({})).await.unwrap()["interrupts"].clone()
}

/// A turn that stops producing events hits the idle timeout: the client sends `turn/interrupt`
/// for it, the stream ends with a `TurnLimit` error naming the limit, and the thread is free
/// for the next turn.
#[tokio::test]
async fn a_stalled_turn_hits_the_idle_timeout_and_is_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let limits = TurnLimits {
        idle_timeout: Duration::from_millis(200),
        ..TurnLimits::default()
    };
    let client = AppServerClient::spawn(config(dir.path()).with_turn_limits(limits))
        .await
        .unwrap();
    assert_eq!(client.turn_limits(), limits);
    let thread = new_thread(&client).await;
    let turn = client.turn_start(&thread, "hold forever").await.unwrap();
    let turn_id = turn.turn_id().unwrap().to_owned();
    let (events, error) = until_error(turn).await;
    assert!(events
        .iter()
        .any(|e| matches!(e, TurnEvent::TextDelta { delta, .. } if delta == "held ")));
    assert!(!events
        .iter()
        .any(|e| matches!(e, TurnEvent::Completed { .. })));
    let error = error.expect("the turn ends with an error");
    match &error {
        AppServerError::TurnLimit {
            method,
            thread_id,
            turn_id: Some(stopped),
            limit: TurnLimitKind::Idle { after },
            interrupted: true,
        } => {
            assert_eq!(method, "turn/start");
            assert_eq!(*thread_id, thread);
            assert_eq!(*stopped, turn_id);
            assert_eq!(*after, Duration::from_millis(200));
        }
        other => panic!("expected an idle TurnLimit, got {other:?}"),
    }
    assert!(error.to_string().contains("idle timeout"), "{error}");
    assert_eq!(
        interrupts(&client).await,
        json!([{"threadId": thread, "turnId": turn_id}])
    );
    let next = client
        .turn_start(&thread, "after the stall")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(next.final_text, "fake reply to: after the stall");
}

/// A turn that keeps streaming but never ends hits the turn deadline (the idle timeout never
/// fires because events keep coming); it is interrupted and ends with a `TurnLimit` error.
#[tokio::test]
async fn an_endless_turn_hits_the_deadline_and_is_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let limits = TurnLimits {
        idle_timeout: Duration::from_secs(60),
        turn_deadline: Duration::from_millis(300),
        ..TurnLimits::default()
    };
    let client = AppServerClient::spawn(config(dir.path()).with_turn_limits(limits))
        .await
        .unwrap();
    let thread = new_thread(&client).await;
    let turn = client.turn_start(&thread, "endless story").await.unwrap();
    let turn_id = turn.turn_id().unwrap().to_owned();
    let error = turn.collect().await.unwrap_err();
    assert_eq!(
        error.turn_limit(),
        Some(&TurnLimitKind::Deadline {
            after: Duration::from_millis(300)
        }),
        "{error:?}"
    );
    assert!(matches!(
        error,
        AppServerError::TurnLimit {
            interrupted: true,
            ..
        }
    ));
    assert_eq!(
        interrupts(&client).await,
        json!([{"threadId": thread, "turnId": turn_id}])
    );
}

/// A reply growing past the size cap stops the turn: the stream ends with a `TurnLimit` error
/// carrying the cap and the bytes received, without delivering the delta that crossed it, and
/// the turn is interrupted.
#[tokio::test]
async fn a_runaway_reply_hits_the_size_cap_and_is_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let limits = TurnLimits {
        idle_timeout: Duration::from_secs(60),
        turn_deadline: Duration::from_secs(600),
        max_reply_bytes: 64,
    };
    let client = AppServerClient::spawn(config(dir.path()).with_turn_limits(limits))
        .await
        .unwrap();
    let thread = new_thread(&client).await;
    let turn = client.turn_start(&thread, "endless flood").await.unwrap();
    let turn_id = turn.turn_id().unwrap().to_owned();
    let (events, error) = until_error(turn).await;
    let delivered: usize = events
        .iter()
        .map(|e| match e {
            TurnEvent::TextDelta { delta, .. } => delta.len(),
            _ => 0,
        })
        .sum();
    assert!(delivered <= 64, "{delivered} bytes delivered");
    match error.expect("the turn ends with an error") {
        AppServerError::TurnLimit {
            limit: TurnLimitKind::ReplyTooLarge { limit, received },
            interrupted: true,
            turn_id: Some(stopped),
            ..
        } => {
            assert_eq!(limit, 64);
            assert!(received > 64, "{received}");
            assert_eq!(stopped, turn_id);
        }
        other => panic!("expected a ReplyTooLarge TurnLimit, got {other:?}"),
    }
    assert_eq!(
        interrupts(&client).await,
        json!([{"threadId": thread, "turnId": turn_id}])
    );
}

/// `turn_start_with` sends `additionalContext` by key (`kind`, `value`; no `name` unless set);
/// a plain `turn_start` leaves the field out. `thread_resume_with` sends the instructions it is
/// given, always with `excludeTurns: true`, and `thread_resume` sends neither.
#[tokio::test]
async fn additional_context_and_resume_instructions_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn(dir.path()).await;
    let thread = new_thread(&client).await;
    let params = TurnStartParams::text("with context")
        .with_context("ctxbridge", AdditionalContext::application("CTX value"));
    let outcome = client
        .turn_start_with(&thread, params)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome.final_text, "fake reply to: with context");
    client
        .turn_start(&thread, "plain")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    client
        .thread_resume_with(ThreadResumeParams {
            developer_instructions: Some("DEV again".to_owned()),
            base_instructions: Some("BASE again".to_owned()),
            ..ThreadResumeParams::new(thread.clone())
        })
        .await
        .unwrap();
    client.thread_resume(&thread).await.unwrap();

    let state = client.request("fake/state", json!({})).await.unwrap();
    let starts = state["turnStartParams"].as_array().unwrap();
    assert_eq!(starts.len(), 2);
    assert_eq!(
        starts[0]["additionalContext"],
        json!({"ctxbridge": {"kind": "application", "value": "CTX value"}})
    );
    assert_eq!(starts[0]["input"][0]["text"], "with context");
    assert!(
        starts[1].get("additionalContext").is_none(),
        "{}",
        starts[1]
    );
    assert_eq!(
        state["resumeParams"],
        json!([
            {"threadId": thread, "excludeTurns": true, "developerInstructions": "DEV again", "baseInstructions": "BASE again"},
            {"threadId": thread, "excludeTurns": true},
        ])
    );
}

/// The version comes from the handshake's user agent; a server too old (or without a version)
/// is reported as such, and only 0.171.0 or later keeps `additionalContext` across compaction.
#[tokio::test]
async fn the_codex_version_is_parsed_from_the_user_agent() {
    let dir = tempfile::tempdir().unwrap();
    let old = spawn(dir.path()).await;
    let version = old.codex_version().unwrap().clone();
    assert_eq!(version, CodexVersion::new(0, 0, 0));
    assert!(is_below_tested(&version));
    assert!(!old.keeps_additional_context_across_compaction());

    let current = AppServerClient::spawn(config(dir.path()).with_env(
        "FAKE_USER_AGENT",
        "ctxbridge/0.171.0 (Debian 12.0.0; x86_64) xterm (ctxbridge; 0.1.0)",
    ))
    .await
    .unwrap();
    assert_eq!(current.codex_version(), Some(&CodexVersion::new(0, 171, 0)));
    assert!(current.keeps_additional_context_across_compaction());

    let unknown = AppServerClient::spawn(config(dir.path()).with_env("FAKE_USER_AGENT", "mystery"))
        .await
        .unwrap();
    assert_eq!(unknown.codex_version(), None);
    assert!(!unknown.keeps_additional_context_across_compaction());
}
