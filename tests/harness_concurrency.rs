//! Concurrent turns (docs/architecture.md#the-thread-binding-and-its-fingerprints): single-flight thread creation, serialised turns of one
//! session in one process and across processes sharing one store (the session lease).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ctxbridge::contract::Role;
use ctxbridge::harness::{HarnessConfig, HarnessError, SessionLockError, ThreadAction, TurnSpec};
use ctxbridge::store::LeaseAttempt;
use ctxbridge::store::StateStoreExt;
use support::*;

/// 100 concurrent first turns of one session and epoch create exactly one backend thread, and
/// all 100 turns land in the transcript (200 messages, none lost or duplicated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_first_turns_create_one_thread() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = Arc::new(rig.harness(Some(&engine), cfg()));
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move { h.turn(TurnSpec::new("s", format!("prompt {i}"))).await })
        })
        .collect();
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(task.await.unwrap().unwrap());
    }
    assert_eq!(rig.backend.threads_started(), 1);
    let threads: BTreeSet<&str> = reports.iter().map(|r| r.thread_id.as_str()).collect();
    assert_eq!(threads.len(), 1);
    let started: Vec<_> = reports
        .iter()
        .filter(|r| r.thread_action == ThreadAction::Started)
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].reason, "missing-thread-binding");
    assert!(reports
        .iter()
        .filter(|r| r.thread_action != ThreadAction::Started)
        .all(|r| r.reason == "matching-thread-bootstrap-binding" && !r.projected));
    let transcript = h.transcript("s").unwrap();
    assert_eq!(transcript.len(), 200);
    let prompts: BTreeSet<String> = transcript
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.plain_text())
        .collect();
    assert_eq!(prompts.len(), 100);
    assert!((0..100).all(|i| prompts.contains(&format!("prompt {i}"))));
    // Turns were serialised: user and assistant alternate.
    assert!(transcript
        .chunks(2)
        .all(|pair| pair[0].role == Role::User && pair[1].role == Role::Assistant));
    assert_eq!(engine.count("bootstrap"), 1);
}

/// Two harness instances sharing one store file serialise a session through the lease: while
/// one runs a turn, the other fails with "session busy" after a short wait, or with a long
/// wait runs after it (and sees its turn).
#[tokio::test]
async fn two_instances_serialise_a_session_through_the_lease() {
    let rig = Rig::new();
    let engine_a = ScriptEngine::bootstrap("e1");
    engine_a.script().block_assemble_at = Some(1);
    let engine_short = ScriptEngine::bootstrap("e1");
    let engine_long = ScriptEngine::bootstrap("e1");
    let a = Arc::new(build_harness(
        Some(&engine_a),
        cfg(),
        rig.reopen(),
        rig.backend.clone(),
    ));
    let short = build_harness(
        Some(&engine_short),
        HarnessConfig {
            lease_wait: Duration::from_millis(100),
            ..cfg()
        },
        rig.reopen(),
        rig.backend.clone(),
    );
    let long = Arc::new(build_harness(
        Some(&engine_long),
        HarnessConfig {
            lease_wait: Duration::from_secs(30),
            ..cfg()
        },
        rig.reopen(),
        rig.backend.clone(),
    ));

    let a_turn = {
        let a = a.clone();
        tokio::spawn(async move { a.turn(TurnSpec::new("s", "from a")).await })
    };
    engine_a.assemble_entered().await;
    // `a` now holds the session.
    let long_turn = {
        let long = long.clone();
        tokio::spawn(async move { long.turn(TurnSpec::new("s", "from long")).await })
    };
    let err = short
        .turn(TurnSpec::new("s", "from short"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            HarnessError::SessionBusy(SessionLockError::Busy { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("is busy"), "{err}");
    assert!(engine_short.calls().is_empty());
    assert!(
        engine_long.calls().is_empty(),
        "the long waiter must still wait"
    );

    engine_a.release_assemble();
    let ra = a_turn.await.unwrap().unwrap();
    let rl = long_turn.await.unwrap().unwrap();
    let seen = engine_long
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::Assemble { messages, .. } => Some(messages),
            _ => None,
        })
        .unwrap();
    assert_eq!(seen, 2, "the waiting instance ran after a's turn");
    assert_eq!(rl.thread_id, ra.thread_id);
    assert_eq!(a.transcript("s").unwrap().len(), 4);
}

/// A lease left by a dead process expires: the next turn waits for the expiry and runs.
#[tokio::test]
async fn a_dead_holders_lease_expires() {
    let rig = Rig::new();
    let h = rig.harness(None, cfg());
    let key = h.binding_key_for("s");
    let now = ctxbridge::util::now_ms();
    let taken = rig
        .store
        .try_acquire_lease(&key, "dead-process", now, 50)
        .unwrap();
    assert!(matches!(taken, LeaseAttempt::Acquired(_)));
    let r = turn(&h, "after the dead one").await;
    assert_eq!(r.reason, "legacy-engine");
    assert_eq!(h.transcript("s").unwrap().len(), 2);
}

/// The harness reports lease figures to its metrics sink: waiting for another holder's lease
/// until it expires is one lease wait; a lease held by a process of this host that no longer
/// runs is taken over at once (no wait) and counted as a takeover; both turns complete.
#[tokio::test]
async fn lease_waits_and_takeovers_reach_the_metrics() {
    let Some(host) = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
    else {
        eprintln!("\n!!!!!!!! SKIPPED lease metrics: no /proc hostname !!!!!!!!\n");
        return;
    };
    let rig = Rig::new();
    let registry = Arc::new(ctxbridge::metrics::Registry::new());
    let h = rig.harness(None, cfg()).with_metrics(registry.clone());
    let key = h.binding_key_for("s");
    let taken = rig
        .store
        .try_acquire_lease(&key, "another-process", ctxbridge::util::now_ms(), 50)
        .unwrap();
    assert!(matches!(taken, LeaseAttempt::Acquired(_)));
    turn(&h, "after the wait").await;
    // The harness keeps the lease for its next turn; let it go, as it does after the linger.
    h.release_held_sessions().await;
    // This process's pid with another start time: a holder that died (its pid reused).
    let dead = format!("ctxbridge@{host}:{}:1:deadbeef0000", std::process::id());
    let taken = rig
        .store
        .try_acquire_lease(&key, &dead, ctxbridge::util::now_ms(), 600_000)
        .unwrap();
    assert!(matches!(taken, LeaseAttempt::Acquired(_)));
    turn(&h, "after the takeover").await;
    let text = registry.render();
    let value = |series: &str| ctxbridge::metrics::sample(&text, series);
    assert_eq!(value("ctxbridge_lease_waits_total"), Some(1.0), "{text}");
    assert!(
        value("ctxbridge_lease_wait_seconds_total").unwrap() > 0.0,
        "{text}"
    );
    assert_eq!(
        value("ctxbridge_lease_takeovers_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value("ctxbridge_turns_total{outcome=\"completed\"}"),
        Some(2.0),
        "{text}"
    );
}

/// A session's lease is kept after its turn for the linger: the next turn here takes it back
/// (the same fencing generation, no new acquisition), another process finds the session held
/// meanwhile, and once the kept lease is released the other process takes the session.
#[tokio::test]
async fn the_lease_is_kept_between_turns_for_the_linger() {
    let rig = Rig::new();
    let h = rig.harness(
        None,
        HarnessConfig {
            lease_linger: Duration::from_secs(30),
            ..cfg()
        },
    );
    let key = h.binding_key_for("s");
    turn(&h, "one").await;
    let first = h.binding("s").await.unwrap().unwrap().generation;
    let now = ctxbridge::util::now_ms();
    let other = rig
        .store
        .try_acquire_lease(&key, "another-process", now, 60_000)
        .unwrap();
    assert!(matches!(other, LeaseAttempt::Busy { .. }), "{other:?}");
    turn(&h, "two").await;
    let second = h.binding("s").await.unwrap().unwrap().generation;
    assert_eq!(second, first, "the lease was taken back, not taken anew");
    h.release_held_sessions().await;
    let now = ctxbridge::util::now_ms();
    let other = rig
        .store
        .try_acquire_lease(&key, "another-process", now, 60_000)
        .unwrap();
    assert!(matches!(other, LeaseAttempt::Acquired(_)), "{other:?}");
}

/// Without a linger each turn releases its lease; with a short one, the kept lease is released
/// in the store when the linger is over.
#[tokio::test]
async fn a_kept_lease_is_released_at_once_or_when_the_linger_ends() {
    for (linger, pause) in [
        (Duration::ZERO, Duration::ZERO),
        (Duration::from_millis(50), Duration::from_millis(400)),
    ] {
        let rig = Rig::new();
        let h = rig.harness(
            None,
            HarnessConfig {
                lease_linger: linger,
                ..cfg()
            },
        );
        let key = h.binding_key_for("s");
        turn(&h, "one").await;
        tokio::time::sleep(pause).await;
        let now = ctxbridge::util::now_ms();
        let other = rig
            .store
            .try_acquire_lease(&key, "another-process", now, 10)
            .unwrap();
        assert!(
            matches!(other, LeaseAttempt::Acquired(_)),
            "linger {linger:?}: {other:?}"
        );
    }
}

/// Two processes alternating on one session: the second waits out the first's kept lease and
/// runs after it; the first, taking the session anew, sees the second's turn (its kept facts
/// and cached binding are not trusted across another holder's generation).
#[tokio::test]
async fn another_process_runs_after_a_kept_lease_and_is_seen() {
    let rig = Rig::new();
    let engine_a = ScriptEngine::bootstrap("e1");
    let engine_b = ScriptEngine::bootstrap("e1");
    let a = build_harness(
        Some(&engine_a),
        HarnessConfig {
            lease_linger: Duration::from_millis(200),
            ..cfg()
        },
        rig.reopen(),
        rig.backend.clone(),
    );
    let b = build_harness(
        Some(&engine_b),
        HarnessConfig {
            lease_linger: Duration::ZERO,
            lease_wait: Duration::from_secs(30),
            ..cfg()
        },
        rig.reopen(),
        rig.backend.clone(),
    );
    let ra = turn(&a, "from a").await;
    let rb = turn(&b, "from b").await;
    assert_eq!(rb.thread_id, ra.thread_id);
    assert_eq!(b.transcript("s").unwrap().len(), 4);
    turn(&a, "from a again").await;
    let seen = engine_a.assembled_message_counts();
    assert_eq!(seen, [0, 4], "a's second turn sees b's turn");
    assert_eq!(a.transcript("s").unwrap().len(), 6);
}
