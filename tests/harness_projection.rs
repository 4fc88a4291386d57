//! The project-or-reuse decision of docs/architecture.md#the-project-or-reuse-decision through real `Harness::turn` calls on the mock
//! backend and a SQLite store: every row of the table, developer-instruction drift (§9.6),
//! overflow and lost-thread recovery (§10), quarantine mid-session (§2), restart (§9.4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ctxbridge::backend::mock::{MockCall, MockFault};
use ctxbridge::backend::{BackendError, MockBackend};
use ctxbridge::contract::ContextProjection;
use ctxbridge::harness::{HarnessConfig, HarnessError, ThreadAction, TurnSpec};
use ctxbridge::projection::DriftPolicy;
use support::*;
use tracing::Level;

const FRAME: &str = "<conversation_context>";

/// Row 1: no stored thread → the first turn projects on a new thread (`missing-thread-binding`),
/// the input carrying the rendered context and the prompt.
#[tokio::test]
async fn missing_thread_binding_projects_on_a_new_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let r = turn(&h, "hello").await;
    assert_eq!(r.reason, "missing-thread-binding");
    assert_eq!(r.mode, "thread_bootstrap");
    assert_eq!(r.epoch.as_deref(), Some("e1"));
    assert!(r.projected);
    assert_eq!(r.thread_action, ThreadAction::Started);
    assert_eq!(r.engine_id, ENGINE_ID);
    let (thread, input) = last_turn(&rig.backend);
    assert_eq!(thread, r.thread_id);
    assert!(input.contains(FRAME), "{input}");
    assert!(
        input.contains("engine memory: the user likes tea"),
        "{input}"
    );
    assert!(input.ends_with("Current user request:\nhello"), "{input}");
    assert_eq!(rig.backend.threads_started(), 1);
    let binding = h.binding("s").await.unwrap().unwrap();
    assert_eq!(binding.thread_id.as_str(), r.thread_id);
    assert_eq!(
        binding.engine.projection.as_ref().map(|p| p.epoch.as_str()),
        Some("e1")
    );
}

/// Row 6: a matching binding reuses the thread and the mock receives exactly the bare prompt.
#[tokio::test]
async fn matching_binding_reuses_thread_with_bare_prompt() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let first = turn(&h, "hello").await;
    let second = turn(&h, "and now?").await;
    assert_eq!(second.reason, "matching-thread-bootstrap-binding");
    assert!(!second.projected);
    assert_eq!(second.thread_action, ThreadAction::Resumed);
    assert_eq!(second.thread_id, first.thread_id);
    assert_eq!(second.prompt_chars, "and now?".len());
    let (thread, input) = last_turn(&rig.backend);
    assert_eq!(thread, first.thread_id);
    assert_eq!(input, "and now?");
    assert_eq!(rig.backend.threads_started(), 1);
}

/// `assemble` runs on every turn, also when the thread is reused and its result is not sent.
#[tokio::test]
async fn assemble_runs_every_turn_even_on_reuse() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    for (i, prompt) in ["a", "b", "c"].into_iter().enumerate() {
        let r = turn(&h, prompt).await;
        assert_eq!(r.projected, i == 0);
    }
    let seen = engine.assembled_message_counts();
    assert_eq!(seen, vec![0, 2, 4]);
}

/// Row 2: a per-turn thread has no projection in its binding; switching to thread_bootstrap
/// projects on a new thread (`missing-projection-binding`) with the whole history.
#[tokio::test]
async fn per_turn_to_bootstrap_switch_is_missing_projection_binding() {
    let rig = Rig::new();
    let engine = ScriptEngine::plain();
    let h = rig.harness(Some(&engine), cfg());
    let first = turn(&h, "first question").await;
    assert_eq!(first.reason, "per-turn-projection");
    engine.set_epoch("e1", None);
    let second = turn(&h, "second question").await;
    assert_eq!(second.reason, "missing-projection-binding");
    assert!(second.projected);
    assert_ne!(second.thread_id, first.thread_id);
    assert_eq!(second.thread_action, ThreadAction::Rotated);
    let (_, input) = last_turn(&rig.backend);
    assert!(input.contains("first question"), "{input}");
    assert!(input.contains(FRAME));
}

/// Row 3: a different engine id, engine version or token budget (policy fingerprint) between
/// harness instances on one store projects on a new thread (`context-engine-binding-mismatch`).
#[tokio::test]
async fn engine_or_policy_change_is_context_engine_binding_mismatch() {
    type Change = fn(&ScriptEngine, &mut HarnessConfig);
    let changes: [(&str, Change); 3] = [
        ("token budget", |_, c| c.token_budget = Some(200_000)),
        ("engine version", |e, _| {
            e.script().info.version = Some("2.0.0".into())
        }),
        ("engine id", |e, _| {
            e.script().info.id = "other-engine".into()
        }),
    ];
    for (what, change) in changes {
        let rig = Rig::new();
        let engine = ScriptEngine::bootstrap("e1");
        let first = turn(&rig.harness(Some(&engine), cfg()), "hi").await;
        let mut next_cfg = cfg();
        change(&engine, &mut next_cfg);
        let h2 = rig.harness(Some(&engine), next_cfg);
        let r = turn(&h2, "again").await;
        assert_eq!(r.reason, "context-engine-binding-mismatch", "{what}");
        assert!(r.projected, "{what}");
        assert_ne!(r.thread_id, first.thread_id, "{what}");
        assert!(last_turn(&rig.backend)
            .1
            .contains("Current user request:\nagain"));
    }
}

/// Row 4: a changed tool catalogue projects on a new thread (`dynamic-tools-mismatch`).
#[tokio::test]
async fn tool_catalogue_change_is_dynamic_tools_mismatch() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let first = turn(&rig.harness(Some(&engine), cfg()), "hi").await;
    let mut more_tools = cfg();
    more_tools.tools.push("write_file".into());
    let r = turn(&rig.harness(Some(&engine), more_tools), "again").await;
    assert_eq!(r.reason, "dynamic-tools-mismatch");
    assert!(r.projected);
    assert_ne!(r.thread_id, first.thread_id);
}

/// Row 5: a new epoch, then a new fingerprint, each project on a new thread
/// (`projection-mismatch`); an unchanged projection then reuses.
#[tokio::test]
async fn epoch_or_fingerprint_change_is_projection_mismatch() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_epoch("e1", Some("f1"));
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    engine.set_epoch("e2", Some("f1"));
    let t2 = turn(&h, "two").await;
    assert_eq!(t2.reason, "projection-mismatch");
    assert_ne!(t2.thread_id, t1.thread_id);
    engine.set_epoch("e2", Some("f2"));
    let t3 = turn(&h, "three").await;
    assert_eq!(t3.reason, "projection-mismatch");
    assert_eq!(t3.fingerprint.as_deref(), Some("f2"));
    assert_ne!(t3.thread_id, t2.thread_id);
    let t4 = turn(&h, "four").await;
    assert_eq!(t4.reason, "matching-thread-bootstrap-binding");
    assert_eq!(t4.thread_id, t3.thread_id);
    assert_eq!(rig.backend.threads_started(), 3);
    let (_, input) = last_turn(&rig.backend);
    assert_eq!(input, "four");
}

/// Per-turn mode projects every turn into the same thread, the input framed each time.
#[tokio::test]
async fn per_turn_projects_every_turn_into_the_same_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::plain();
    engine.set_projection(Some(ContextProjection::per_turn()));
    let h = rig.harness(Some(&engine), cfg());
    let mut threads = Vec::new();
    for prompt in ["one", "two", "three"] {
        let r = turn(&h, prompt).await;
        assert_eq!(r.reason, "per-turn-projection");
        assert_eq!(r.mode, "per_turn");
        assert!(r.projected);
        threads.push(r.thread_id);
        let (_, input) = last_turn(&rig.backend);
        assert!(
            input.starts_with("Assembled context for this turn:"),
            "{input}"
        );
        assert!(input.ends_with(&format!("Current user request:\n{prompt}")));
    }
    assert!(threads.iter().all(|t| *t == threads[0]));
    assert_eq!(rig.backend.threads_started(), 1);
    let (_, input) = last_turn(&rig.backend);
    assert!(
        input.contains("two"),
        "history is re-sent per turn: {input}"
    );
}

/// A thread_bootstrap projection with a blank epoch is treated as per-turn, with a warning.
#[tokio::test]
async fn blank_epoch_is_per_turn_with_a_warning() {
    let (logs, _guard) = capture();
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("   ");
    let h = rig.harness(Some(&engine), cfg());
    let r1 = turn(&h, "one").await;
    let r2 = turn(&h, "two").await;
    for r in [&r1, &r2] {
        assert_eq!(r.reason, "per-turn-projection");
        assert_eq!(r.mode, "per_turn");
        assert!(r.projected);
        assert_eq!(r.epoch, None);
    }
    assert_eq!(r2.thread_id, r1.thread_id);
    let warnings = logs.at(Level::WARN);
    assert!(
        warnings.iter().any(|w| w.contains("blank")),
        "no blank-epoch warning in {warnings:?}"
    );
}

/// The legacy engine sends the bare prompt every turn on one thread (`legacy-engine`).
#[tokio::test]
async fn legacy_engine_sends_bare_prompt() {
    let rig = Rig::new();
    let h = rig.harness(None, cfg());
    let r1 = turn(&h, "one").await;
    let r2 = turn(&h, "two").await;
    for (r, prompt) in [(&r1, "one"), (&r2, "two")] {
        assert_eq!(r.reason, "legacy-engine");
        assert_eq!(r.mode, "none");
        assert_eq!(r.engine_id, "legacy");
        assert!(!r.projected);
        assert_eq!(r.prompt_chars, prompt.len());
    }
    assert_eq!(r2.thread_id, r1.thread_id);
    assert_eq!(r2.thread_action, ThreadAction::Resumed);
    let inputs: Vec<String> = rig
        .backend
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::Turn { input, .. } => Some(input),
            _ => None,
        })
        .collect();
    assert_eq!(inputs, vec!["one", "two"]);
}

/// An engine that becomes inactive (legacy selected on the same store) retires its bootstrap
/// binding: a new thread, the bare prompt, and nothing of the mirrored history.
#[tokio::test]
async fn inactive_engine_retires_bootstrap_binding_without_history() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_addition(Some("Engine addition."));
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "secret history one").await;
    turn(&h, "secret history two").await;
    let legacy = rig.harness(None, cfg());
    let r = turn(&legacy, "fresh start").await;
    assert_eq!(r.reason, "legacy-engine");
    assert_ne!(r.thread_id, t1.thread_id);
    assert_eq!(r.thread_action, ThreadAction::Rotated);
    let received = everything_received(&rig.backend, &r.thread_id);
    assert_eq!(received.len(), 2, "{received:?}");
    assert_eq!(received[1], "fresh start");
    for text in &received {
        assert!(!text.contains(FRAME), "{text}");
        assert!(!text.contains("secret history"), "{text}");
        assert!(!text.contains("engine memory"), "{text}");
        assert!(!text.contains("Engine addition."), "{text}");
    }
    assert_eq!(
        started_with(&rig.backend, &r.thread_id).as_deref(),
        Some("Base.")
    );
}

/// A model change alone does not rotate the thread.
#[tokio::test]
async fn model_change_alone_does_not_rotate() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let with_model = |m: &str| HarnessConfig {
        model: Some(m.into()),
        ..cfg()
    };
    let t1 = turn(&rig.harness(Some(&engine), with_model("model-a")), "one").await;
    let t2 = turn(&rig.harness(Some(&engine), with_model("model-b")), "two").await;
    assert_eq!(t2.reason, "matching-thread-bootstrap-binding");
    assert_eq!(t2.thread_id, t1.thread_id);
    assert!(!t2.projected);
    assert_eq!(rig.backend.threads_started(), 1);
}

/// Drift under `inject`: the thread starts with base + "\n\n" + addition; a changed addition on
/// a reused thread is injected as a developer message (`inject`), then `unchanged`.
#[tokio::test]
async fn changed_addition_is_injected_on_a_reused_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_addition(Some("  Remember A.  "));
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    assert_eq!(t1.developer_instructions_delivery, "thread-start");
    assert_eq!(
        started_with(&rig.backend, &t1.thread_id).as_deref(),
        Some("Base.\n\nRemember A.")
    );
    assert_eq!(
        t1.developer_instructions_chars,
        "Base.\n\nRemember A.".len()
    );
    engine.set_addition(Some("Remember B."));
    let t2 = turn(&h, "two").await;
    assert_eq!(t2.thread_id, t1.thread_id);
    assert_eq!(t2.developer_instructions_delivery, "inject");
    assert_eq!(
        injections(&rig.backend),
        vec![(t1.thread_id.clone(), "Base.\n\nRemember B.".to_string())]
    );
    assert_eq!(last_turn(&rig.backend).1, "two");
    let t3 = turn(&h, "three").await;
    assert_eq!(t3.developer_instructions_delivery, "unchanged");
    assert_eq!(injections(&rig.backend).len(), 1);
    assert_eq!(t3.thread_id, t1.thread_id);
}

/// Drift under `rotate`: a changed addition starts a new thread with the new instructions,
/// and nothing is injected.
#[tokio::test]
async fn changed_addition_rotates_under_rotate_policy() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_addition(Some("Remember A."));
    let rotate = HarnessConfig {
        drift_policy: DriftPolicy::Rotate,
        ..cfg()
    };
    let h = rig.harness(Some(&engine), rotate);
    let t1 = turn(&h, "one").await;
    engine.set_addition(Some("Remember B."));
    let t2 = turn(&h, "two").await;
    assert_ne!(t2.thread_id, t1.thread_id);
    assert_eq!(t2.thread_action, ThreadAction::Rotated);
    assert_eq!(t2.developer_instructions_delivery, "thread-start");
    assert!(t2.projected, "a new thread gets the projection");
    assert_eq!(
        started_with(&rig.backend, &t2.thread_id).as_deref(),
        Some("Base.\n\nRemember B.")
    );
    assert!(injections(&rig.backend).is_empty());
    let t3 = turn(&h, "three").await;
    assert_eq!(t3.thread_id, t2.thread_id);
    assert_eq!(t3.developer_instructions_delivery, "unchanged");
}

/// An overflow on a resumed thread with an active engine: a fresh thread, the projection
/// re-rendered, one retry that succeeds, and the binding rewritten.
#[tokio::test]
async fn overflow_on_resumed_thread_retries_once_on_a_fresh_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    rig.backend.push_fault(MockFault::Overflow);
    let t2 = turn(&h, "two").await;
    assert!(t2.metrics.retried);
    assert_ne!(t2.thread_id, t1.thread_id);
    assert_eq!(t2.thread_action, ThreadAction::Rotated);
    assert!(t2.projected);
    let turns: Vec<(String, String)> = rig
        .backend
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::Turn {
                thread_id, input, ..
            } => Some((thread_id, input)),
            _ => None,
        })
        .collect();
    assert_eq!(turns.len(), 3, "one failed attempt, one retry");
    assert_eq!(turns[1], (t1.thread_id.clone(), "two".to_string()));
    assert_eq!(turns[2].0, t2.thread_id);
    assert!(turns[2].1.contains(FRAME) && turns[2].1.contains("one"));
    let binding = h.binding("s").await.unwrap().unwrap();
    assert_eq!(binding.thread_id.as_str(), t2.thread_id);
    assert_eq!(h.transcript("s").unwrap().len(), 4);
    let t3 = turn(&h, "three").await;
    assert_eq!(t3.thread_id, t2.thread_id);
    assert_eq!(t3.reason, "matching-thread-bootstrap-binding");
}

/// An overflow on a fresh thread is surfaced to the caller (no retry, nothing recorded); so is
/// an overflow on a resumed thread under legacy (no engine to re-project).
#[tokio::test]
async fn overflow_on_fresh_thread_is_surfaced() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    rig.backend.push_fault(MockFault::Overflow);
    let err = h.turn(TurnSpec::new("s", "one")).await.unwrap_err();
    assert!(
        matches!(
            err,
            HarnessError::Backend {
                source: BackendError::ContextOverflow { .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(rig.backend.threads_started(), 1);
    assert!(h.binding("s").await.unwrap().is_none());
    assert!(h.transcript("s").unwrap().is_empty());

    let legacy_rig = Rig::new();
    let legacy = legacy_rig.harness(None, cfg());
    turn(&legacy, "one").await;
    legacy_rig.backend.push_fault(MockFault::Overflow);
    let err = legacy.turn(TurnSpec::new("s", "two")).await.unwrap_err();
    assert!(err.to_string().contains("context window"), "{err}");
    assert_eq!(legacy_rig.backend.threads_started(), 1);
}

/// A thread the backend lost: a new thread, the context re-projected, the binding rewritten.
#[tokio::test]
async fn lost_thread_starts_a_new_thread_and_rewrites_the_binding() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    rig.backend.lose_thread(&t1.thread_id);
    let t2 = turn(&h, "two").await;
    assert_ne!(t2.thread_id, t1.thread_id);
    assert!(t2.projected);
    let (thread, input) = last_turn(&rig.backend);
    assert_eq!(thread, t2.thread_id);
    assert!(input.contains(FRAME) && input.contains("one"), "{input}");
    let binding = h.binding("s").await.unwrap().unwrap();
    assert_eq!(binding.thread_id.as_str(), t2.thread_id);
    // A restarted harness (fresh cache, same store) sees the rewritten binding too.
    let again = rig.harness(Some(&engine), cfg());
    let t3 = turn(&again, "three").await;
    assert_eq!(t3.thread_id, t2.thread_id);
    assert_eq!(t3.reason, "matching-thread-bootstrap-binding");
}

/// An engine failing in `assemble` on turn 3 (error, and separately a panic): turn 3 completes
/// on legacy with a bare prompt on a new thread without stale bootstrap context, with exactly
/// one error line; turn 4 stays on that thread.
#[tokio::test]
async fn assemble_failure_mid_session_falls_back_to_legacy_on_a_new_thread() {
    for kind in [FailKind::Error, FailKind::Panic] {
        let (logs, _guard) = capture();
        let rig = Rig::new();
        let engine = ScriptEngine::bootstrap("e1");
        engine.set_addition(Some("Engine addition."));
        engine.script().fail_assemble_at = Some((3, kind));
        let h = rig.harness(Some(&engine), cfg());
        let t1 = turn(&h, "history one").await;
        let t2 = turn(&h, "history two").await;
        assert_eq!(t2.thread_id, t1.thread_id);
        let t3 = turn(&h, "third").await;
        assert_eq!(t3.engine_id, "legacy", "{kind:?}");
        assert_eq!(t3.reason, "legacy-engine");
        assert_eq!(t3.mode, "none");
        assert!(!t3.projected);
        assert_ne!(t3.thread_id, t1.thread_id, "{kind:?}");
        let received = everything_received(&rig.backend, &t3.thread_id);
        assert_eq!(received.last().map(String::as_str), Some("third"));
        for text in &received {
            assert!(!text.contains(FRAME), "{kind:?}: {text}");
            assert!(!text.contains("history one"), "{kind:?}: {text}");
            assert!(!text.contains("Engine addition."), "{kind:?}: {text}");
        }
        let t4 = turn(&h, "fourth").await;
        assert_eq!(t4.thread_id, t3.thread_id);
        assert_eq!(t4.engine_id, "legacy");
        assert_eq!(last_turn(&rig.backend).1, "fourth");
        let errors = logs.at(Level::ERROR);
        assert_eq!(errors.len(), 1, "{kind:?}: {errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "context engine \"{ENGINE_ID}\" failed during assemble:"
            )),
            "{}",
            errors[0]
        );
        assert!(errors[0].ends_with("quarantined for this process, falling back to \"legacy\""));
        assert_eq!(h.transcript("s").unwrap().len(), 8);
    }
}

/// A restart of the whole harness (new store connection, new backend instance keeping its
/// threads in the store, new engine instance) reuses the thread without re-projecting, and
/// the resume re-sends the thread's developer instructions.
#[tokio::test]
async fn restart_reuses_the_thread_without_reprojecting() {
    let rig = Rig::new();
    let first_thread = {
        let engine = ScriptEngine::bootstrap("e1");
        let h = rig.harness(Some(&engine), cfg());
        let t1 = turn(&h, "one").await;
        turn(&h, "two").await;
        h.shutdown().await;
        t1.thread_id
    };
    let store = rig.reopen();
    let backend = MockBackend::with_store(store.clone());
    let engine = ScriptEngine::bootstrap("e1");
    let h = build_harness(Some(&engine), cfg(), store, backend.clone());
    let r = turn(&h, "after restart").await;
    assert_eq!(r.reason, "matching-thread-bootstrap-binding");
    assert!(!r.projected);
    assert_eq!(r.thread_action, ThreadAction::Resumed);
    assert_eq!(r.thread_id, first_thread);
    let calls = backend.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(
        calls[0],
        MockCall::Resume {
            thread_id: first_thread.clone(),
            developer_instructions: Some("Base.".into()),
        }
    );
    assert!(
        matches!(&calls[1], MockCall::Turn { thread_id, input, .. }
            if *thread_id == first_thread && input == "after restart"),
        "{calls:?}"
    );
    assert_eq!(engine.count("bootstrap"), 0, "not a first encounter");
    assert_eq!(h.transcript("s").unwrap().len(), 6);
}

/// Attachment is the backend's knowledge: a harness resumes a stored thread only when the
/// backend does not have it loaded. After a restart the first turn resumes once; later turns
/// of that process, and a second harness on the same backend, resume nothing.
#[tokio::test]
async fn a_loaded_thread_is_resumed_once() {
    let rig = Rig::new();
    {
        let engine = ScriptEngine::bootstrap("e1");
        let h = rig.harness(Some(&engine), cfg());
        turn(&h, "one").await;
        h.shutdown().await;
    }
    let store = rig.reopen();
    let backend = MockBackend::with_store(store.clone());
    let engine = ScriptEngine::bootstrap("e1");
    let h = build_harness(Some(&engine), cfg(), store, backend.clone());
    let resumes = |backend: &MockBackend| {
        backend
            .calls()
            .iter()
            .filter(|c| matches!(c, MockCall::Resume { .. }))
            .count()
    };
    let first = turn(&h, "two").await;
    assert_eq!(first.thread_action, ThreadAction::Resumed);
    assert_eq!(resumes(&backend), 1);
    let second = turn(&h, "three").await;
    assert_eq!(second.thread_id, first.thread_id);
    let other = build_harness(Some(&engine), cfg(), rig.reopen(), backend.clone());
    let third = turn(&other, "four").await;
    assert_eq!(third.thread_id, first.thread_id);
    assert_eq!(third.thread_action, ThreadAction::Resumed);
    assert_eq!(resumes(&backend), 1, "{:?}", backend.calls());
    assert_eq!(backend.threads_started(), 0);
}

/// Two harness instances sharing one store (and one backend) take turns on a session: each
/// sees the binding the other wrote, so continuity survives a rotation made by the other.
#[tokio::test]
async fn instances_sharing_a_store_see_each_others_bindings() {
    let rig = Rig::new();
    let a = build_harness(None, cfg(), rig.reopen(), rig.backend.clone());
    let b = build_harness(None, cfg(), rig.reopen(), rig.backend.clone());
    let t1 = turn(&a, "one").await;
    let t2 = turn(&b, "two").await;
    assert_eq!(t2.thread_id, t1.thread_id);
    rig.backend.lose_thread(&t1.thread_id);
    let t3 = turn(&a, "three").await;
    assert_ne!(t3.thread_id, t1.thread_id);
    let t4 = turn(&b, "four").await;
    assert_eq!(t4.thread_id, t3.thread_id, "b must see a's new binding");
    assert!(!t4.metrics.retried);
    assert_eq!(rig.backend.threads_started(), 2);
}
