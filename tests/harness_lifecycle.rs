//! The engine lifecycle around real `Harness::turn` calls on the mock backend: durable turns
//! (docs/architecture.md#durable-turns-committurn), compaction (§10), the order of lifecycle calls and maintenance (§8, §11),
//! accepted host params (§5) and subagent hooks (§7).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ctxbridge::backend::mock::{MockCall, MockFault};
use ctxbridge::backend::{BackendError, MockBackend};
#[cfg(feature = "bench")]
use ctxbridge::bench::timed_store::{StoreOp, TimedStore};
use ctxbridge::contract::*;
use ctxbridge::harness::{HarnessConfig, HarnessError, SubagentSpawn, TurnSpec, DOCTOR_NAMESPACE};
use ctxbridge::store::{SqliteStore, StateStore};
use support::*;
use tracing::Level;

/// A thread_bootstrap engine that declares durable turns and implements `commitTurn` (and
/// `afterTurn`, which it must then not get).
fn durable_engine() -> std::sync::Arc<ScriptEngine> {
    let engine = ScriptEngine::bootstrap("e1");
    engine.add_methods(&[EngineMethod::CommitTurn]);
    engine.script().info.transcript_semantics = Some(TranscriptSemantics {
        current_turn_fence: Some(CURRENT_TURN_FENCE_V1.into()),
        turn_advancement_idempotency: Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1.into()),
    });
    engine
}

/// A durable engine whose first `n` `commitTurn` calls answer the unknown status
/// "accepted-later" (the row stays queued).
fn durable_engine_deferring(n: usize) -> std::sync::Arc<ScriptEngine> {
    let engine = durable_engine();
    for _ in 0..n {
        engine
            .script()
            .commit_statuses
            .push_back("accepted-later".into());
    }
    engine
}

/// Whether the store's outbox holds nothing for `session`.
fn nothing_queued(rig: &Rig, session: &str) -> bool {
    rig.store.pending_outbox(session).unwrap().is_empty()
}

/// The `commitTurn` calls so far: (key, status).
fn commits(engine: &ScriptEngine) -> Vec<(String, String)> {
    engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::CommitTurn { key, status, .. } => Some((key, status)),
            _ => None,
        })
        .collect()
}

/// A durable engine gets `commitTurn` (not `afterTurn`) with the advancement key, the admitted
/// user entry and the accepted terminal entry as OpenClaw's anchors (entry ids, positions,
/// parent, the turn id), and only that range; the outbox is then empty.
#[tokio::test]
async fn durable_engine_gets_commit_turn_instead_of_after_turn() {
    let rig = Rig::new();
    let engine = durable_engine();
    let h = rig.harness(Some(&engine), cfg());
    let r = turn(&h, "remember this").await;
    let call = engine
        .calls()
        .into_iter()
        .find(|c| matches!(c, Call::CommitTurn { .. }))
        .expect("commitTurn was called");
    let Call::CommitTurn {
        key,
        admission,
        terminal,
        messages,
        token_budget,
        thread,
        status,
    } = call
    else {
        unreachable!()
    };
    assert!(!key.is_empty());
    assert_eq!(messages, ["remember this", r.reply.as_str()]);
    assert_eq!(
        (token_budget, thread.as_deref()),
        (Some(100_000), Some(r.thread_id.as_str())),
        "the turn's own facts in runtimeContext: its token budget and its thread"
    );
    assert_eq!(status, "committed");
    assert_eq!(engine.count("afterTurn"), 0);
    assert_eq!(engine.count("maintain(turn)"), 1);
    assert!(rig.store.pending_outbox("s").unwrap().is_empty());
    let transcript = rig.store.load_transcript("s").unwrap();
    assert_eq!(transcript[0].entry_id, format!("{key}-user"));
    assert_eq!(admission.logical_turn_id, key);
    assert_eq!(admission.role, "user");
    assert_eq!(admission.anchor.entry_id, transcript[0].entry_id);
    assert_eq!(terminal.entry_id, transcript[1].entry_id);
    assert_eq!(
        (admission.anchor.raw_seq, terminal.raw_seq),
        (0, 1),
        "the first turn's entries open the transcript"
    );
    assert_eq!(admission.anchor.effective_parent_id, None);
    assert_eq!(
        terminal.effective_parent_id.as_deref(),
        Some(transcript[0].entry_id.as_str())
    );
    assert_eq!(
        (
            admission.anchor.agent_id.as_str(),
            admission.anchor.session_key.as_str()
        ),
        ("main", "s")
    );

    // The second turn's anchors continue where the first left off.
    turn(&h, "and this").await;
    let second = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::CommitTurn {
                admission,
                terminal,
                ..
            } => Some((admission, terminal)),
            _ => None,
        })
        .nth(1)
        .expect("a second commitTurn");
    let transcript = rig.store.load_transcript("s").unwrap();
    assert_eq!((second.0.anchor.raw_seq, second.1.raw_seq), (2, 3));
    assert_eq!(second.0.anchor.active_message_position, 2);
    assert_eq!(
        second.0.anchor.effective_parent_id.as_deref(),
        Some(transcript[1].entry_id.as_str())
    );
    assert_eq!(second.1.entry_id, transcript[3].entry_id);
}

/// Exactly once across a crash between commit and acknowledgement: the engine records the
/// commit and hangs, the turn is dropped; a restarted harness retries the queued row before
/// its next turn, the engine answers `duplicate`, and every key is committed exactly once.
#[tokio::test]
async fn durable_commit_is_exactly_once_across_a_crash() {
    let rig = Rig::new();
    let engine = durable_engine();
    engine.script().commit_hang_once = true;
    let first_thread = {
        let h = rig.harness(Some(&engine), cfg());
        tokio::select! {
            r = h.turn(TurnSpec::new("s", "one")) => panic!("the turn should hang in commitTurn: {r:?}"),
            () = engine.commit_recorded() => {}
        }
        // The turn future is dropped here: ctxbridge "crashed" before the acknowledgement.
        let binding = h.binding("s").await.unwrap();
        binding.map(|b| b.thread_id.0)
    };
    let queued = rig.store.pending_outbox("s").unwrap();
    assert_eq!(queued.len(), 1);
    let crashed_key = queued[0].advancement_key.clone();
    assert_eq!(engine.script().committed_keys, vec![crashed_key.clone()]);

    // Restart: a new store connection, a new backend instance, a new harness.
    let store = rig.reopen();
    let backend = MockBackend::with_store(store.clone());
    let h = build_harness(Some(&engine), cfg(), store.clone(), backend);
    let r = turn(&h, "two").await;
    let log = commits(&engine);
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], (crashed_key.clone(), "committed".to_string()));
    assert_eq!(log[1], (crashed_key.clone(), "duplicate".to_string()));
    assert_eq!(log[2].1, "committed");
    let keys = engine.script().committed_keys.clone();
    assert_eq!(keys, vec![crashed_key, log[2].0.clone()]);
    assert!(store.pending_outbox("s").unwrap().is_empty());
    assert_eq!(engine.count("afterTurn"), 0);
    assert_eq!(h.transcript("s").unwrap().len(), 4);
    // The thread that received turn one stays bound: the binding was written before the
    // commit, so the restarted turn reuses it without re-projecting.
    assert_eq!(Some(r.thread_id), first_thread);
    assert_eq!(r.reason, "matching-thread-bootstrap-binding");
}

/// A commit queued by an earlier build (its admitted and terminal entries as messages, not
/// anchors) is still delivered after an upgrade: the entries' anchors are found in the stored
/// transcript.
#[tokio::test]
async fn a_commit_queued_by_an_earlier_build_is_delivered_with_anchors() {
    let rig = Rig::new();
    let engine = durable_engine();
    engine.script().commit_hang_once = true;
    {
        let h = rig.harness(Some(&engine), cfg());
        tokio::select! {
            r = h.turn(TurnSpec::new("s", "one")) => panic!("the turn should hang in commitTurn: {r:?}"),
            () = engine.commit_recorded() => {}
        }
    }
    let queued = rig.store.pending_outbox("s").unwrap();
    let key = queued[0].advancement_key.clone();
    // The row as the earlier build wrote it.
    let mut legacy: serde_json::Value = serde_json::from_str(&queued[0].params_json).unwrap();
    legacy["admission"] = serde_json::json!({"role": "user", "content": "one"});
    legacy["terminal"] = serde_json::json!({"role": "assistant", "content": "reply"});
    rusqlite::Connection::open(rig.path())
        .unwrap()
        .execute(
            "UPDATE outbox SET params = ?1 WHERE advancement_key = ?2",
            rusqlite::params![legacy.to_string(), key],
        )
        .unwrap();

    let store = rig.reopen();
    let h = build_harness(
        Some(&engine),
        cfg(),
        store.clone(),
        MockBackend::with_store(store.clone()),
    );
    turn(&h, "two").await;
    let redelivered = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::CommitTurn {
                key: k,
                admission,
                terminal,
                status,
                ..
            } if k == key => Some((admission, terminal, status)),
            _ => None,
        })
        .nth(1)
        .unwrap_or_else(|| {
            panic!(
                "the queued commit was not delivered again: {:?}",
                engine.call_names()
            )
        });
    assert_eq!(redelivered.2, "duplicate");
    assert_eq!(redelivered.0.anchor.entry_id, format!("{key}-user"));
    assert_eq!(redelivered.0.logical_turn_id, key);
    assert_eq!(
        (redelivered.0.anchor.raw_seq, redelivered.1.raw_seq),
        (0, 1)
    );
    assert_eq!(redelivered.1.entry_id, format!("{key}-assistant"));
    assert!(store.pending_outbox("s").unwrap().is_empty());
}

/// A durable turn's commit is queued in the same store write as the recorded turn (one
/// `record_turn`, no separate enqueue), so a crash between the two cannot leave the turn
/// recorded without its commit; the queued row carries the turn's advancement key.
#[cfg(feature = "bench")]
#[tokio::test]
async fn durable_commit_is_queued_with_the_recorded_turn() {
    let engine = durable_engine();
    // The commit hangs: the row is still queued when the turn is dropped.
    engine.script().commit_hang_once = true;
    let store = std::sync::Arc::new(TimedStore::new(SqliteStore::in_memory().unwrap()));
    let h = build_harness_on(
        Some(&engine),
        cfg(),
        store.clone() as std::sync::Arc<dyn StateStore>,
        MockBackend::new(),
    );
    tokio::select! {
        r = h.turn(TurnSpec::new("s", "one")) => panic!("the turn should hang in commitTurn: {r:?}"),
        () = engine.commit_recorded() => {}
    }
    let calls = |op: StoreOp| {
        store
            .totals()
            .iter()
            .find(|t| t.op == op)
            .map_or(0, |t| t.calls)
    };
    assert_eq!(calls(StoreOp::RecordTurn), 1);
    assert_eq!(
        calls(StoreOp::EnqueueOutbox),
        0,
        "the commit was queued on its own"
    );
    let queued = store.pending_outbox("s").unwrap();
    assert_eq!(queued.len(), 1);
    let transcript = store.load_transcript("s").unwrap();
    assert_eq!(
        transcript[0].entry_id,
        format!("{}-user", queued[0].advancement_key)
    );
}

/// An engine with only part of the durable declaration, or without `commitTurn`, runs that
/// turn on legacy with one warning; it is not quarantined and is tried again next turn.
#[tokio::test]
async fn partial_durable_declaration_degrades_one_turn_to_legacy() {
    for missing_method in [false, true] {
        let (logs, _guard) = capture();
        let rig = Rig::new();
        let engine = durable_engine();
        if missing_method {
            engine.set_methods(&[EngineMethod::Bootstrap, EngineMethod::Maintain]);
        } else {
            engine
                .script()
                .info
                .transcript_semantics
                .as_mut()
                .unwrap()
                .turn_advancement_idempotency = None;
        }
        let h = rig.harness(Some(&engine), cfg());
        let r1 = turn(&h, "one").await;
        assert_eq!(r1.engine_id, "legacy", "missing method: {missing_method}");
        assert_eq!(r1.reason, "legacy-engine");
        assert_eq!(engine.count("assemble"), 0);
        assert_eq!(engine.count("commitTurn"), 0);
        assert!(!h.engine().is_quarantined());
        let warnings: Vec<String> = logs
            .at(Level::WARN)
            .into_iter()
            .filter(|w| w.contains("degraded to \"legacy\" for this turn"))
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with(&format!("context engine \"{ENGINE_ID}\" degraded")));
        assert!(logs.at(Level::ERROR).is_empty());

        // Repaired: the next turn runs on the engine, durably.
        engine.add_methods(&[EngineMethod::CommitTurn]);
        engine.script().info.transcript_semantics = durable_engine().info().transcript_semantics;
        let r2 = turn(&h, "two").await;
        assert_eq!(r2.engine_id, ENGINE_ID);
        assert_eq!(engine.count("commitTurn"), 1);
        assert_eq!(engine.count("assemble"), 1);
    }
}

/// A `commitTurn` status other than committed/duplicate keeps the outbox row queued; the row
/// is retried before the next turn of the session.
#[tokio::test]
async fn unknown_commit_status_keeps_the_row_queued() {
    let rig = Rig::new();
    let engine = durable_engine_deferring(1);
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "one").await;
    let queued = rig.store.pending_outbox("s").unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].attempts, 1);
    assert!(
        queued[0]
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("accepted-later"),
        "{:?}",
        queued[0].last_error
    );
    let first_key = queued[0].advancement_key.clone();
    turn(&h, "two").await;
    let log = commits(&engine);
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], (first_key.clone(), "accepted-later".to_string()));
    assert_eq!(log[1], (first_key, "committed".to_string()));
    assert_ne!(log[2].0, log[1].0);
    assert!(rig.store.pending_outbox("s").unwrap().is_empty());
}

/// A reset first retries the session's queued commits: the engine commits the old session's
/// turn before the session ends, and nothing stays queued under either id.
#[tokio::test]
async fn a_reset_delivers_the_queued_commits_first() {
    let rig = Rig::new();
    let engine = durable_engine_deferring(1);
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "one").await;
    let key = rig.store.pending_outbox("s").unwrap()[0]
        .advancement_key
        .clone();
    let report = h.reset_session("s").await.unwrap();
    assert_eq!(report.session_id, "s");
    let log = commits(&engine);
    assert_eq!(
        log,
        [
            (key.clone(), "accepted-later".to_string()),
            (key, "committed".to_string())
        ]
    );
    assert!(nothing_queued(&rig, "s"));
    assert!(nothing_queued(&rig, &report.next_session_id));
}

/// A commit the engine still does not settle at the reset moves to the next session id and is
/// retried before that session's first turn (its params still name the old session); the
/// reset loses no answered turn's commit.
#[tokio::test]
async fn a_reset_carries_an_undelivered_commit_to_the_next_session() {
    let rig = Rig::new();
    let engine = durable_engine_deferring(2);
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "one").await;
    let report = h.reset_session("s").await.unwrap();
    assert!(nothing_queued(&rig, "s"));
    let carried = rig.store.pending_outbox(&report.next_session_id).unwrap();
    assert_eq!(carried.len(), 1, "{carried:?}");
    assert_eq!(carried[0].attempts, 2);
    let params: serde_json::Value = serde_json::from_str(&carried[0].params_json).unwrap();
    assert_eq!(params["sessionId"], "s", "{params}");
    let key = carried[0].advancement_key.clone();

    turn(&h, "two").await;
    let log = commits(&engine);
    assert_eq!(log.len(), 4, "{log:?}");
    assert_eq!(log[2], (key, "committed".to_string()));
    assert_eq!(log[3].1, "committed");
    assert!(nothing_queued(&rig, &report.next_session_id));
}

/// Native auto-compaction during a turn keeps the binding (same thread next turn); the turn's
/// `afterTurn` gets the summary and `maintain(reason "compaction")` runs.
#[tokio::test]
async fn native_auto_compaction_keeps_the_binding_and_runs_the_lifecycle() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    rig.backend
        .push_fault(MockFault::AutoCompact("native summary".into()));
    let t2 = turn(&h, "two").await;
    assert!(t2.metrics.auto_compacted);
    assert_eq!(t2.thread_id, t1.thread_id);
    let after_turns: Vec<Option<String>> = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::AfterTurn {
                auto_compaction_summary,
                ..
            } => Some(auto_compaction_summary),
            _ => None,
        })
        .collect();
    assert_eq!(after_turns, vec![None, Some("native summary".to_string())]);
    assert_eq!(engine.count("maintain(compaction)"), 1);
    let t3 = turn(&h, "three").await;
    assert_eq!(t3.thread_id, t1.thread_id);
    assert_eq!(t3.reason, "matching-thread-bootstrap-binding");
    assert_eq!(last_turn(&rig.backend).1, "three");
}

fn native_compactions(backend: &MockBackend) -> Vec<String> {
    backend
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::Compact { thread_id } => Some(thread_id),
            _ => None,
        })
        .collect()
}

/// Manual compaction on legacy delegates to the backend's native compaction of the bound thread.
#[tokio::test]
async fn manual_compact_on_legacy_runs_native_compaction() {
    let rig = Rig::new();
    let h = rig.harness(None, cfg());
    let t1 = turn(&h, "one").await;
    let report = h.compact("s").await.unwrap();
    assert!(report.native_compaction);
    assert_eq!(report.engine_id, "legacy");
    assert!(report.result.compacted);
    assert_eq!(native_compactions(&rig.backend), vec![t1.thread_id]);
}

/// A non-owning engine that delegates gets exactly one native compaction (the host does not
/// run a second one), after `compact({force: true})`.
#[tokio::test]
async fn manual_compact_on_a_delegating_engine_compacts_natively_once() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    let report = h.compact("s").await.unwrap();
    assert!(report.native_compaction);
    assert_eq!(native_compactions(&rig.backend), vec![t1.thread_id]);
    assert!(engine
        .calls()
        .contains(&Call::Compact { force: Some(true) }));
    assert_eq!(engine.count("maintain(compaction)"), 1);
}

/// An engine that owns compaction gets `compact({force: true})`, the backend is not compacted,
/// and the next assemble's new epoch rotates the thread.
#[tokio::test]
async fn manual_compact_on_an_owning_engine_rotates_via_the_new_epoch() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().info.owns_compaction = Some(true);
    engine.script().compact_mode = CompactMode::OwnNewEpoch("e2".into());
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    let report = h.compact("s").await.unwrap();
    assert!(!report.native_compaction);
    assert!(report.result.compacted);
    assert_eq!(report.engine_id, ENGINE_ID);
    assert!(engine
        .calls()
        .contains(&Call::Compact { force: Some(true) }));
    assert!(native_compactions(&rig.backend).is_empty());
    assert_eq!(engine.count("maintain(compaction)"), 1);
    let t2 = turn(&h, "two").await;
    assert_eq!(t2.reason, "projection-mismatch");
    assert_eq!(t2.epoch.as_deref(), Some("e2"));
    assert_ne!(t2.thread_id, t1.thread_id);
    assert!(t2.projected);
}

/// A non-owning engine whose `compact` is a no-op: the host runs the native compaction and
/// stores a doctor note.
#[tokio::test]
async fn noop_compact_on_a_non_owning_engine_falls_back_to_native_with_a_doctor_note() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().compact_mode = CompactMode::NoOp;
    let h = rig.harness(Some(&engine), cfg());
    let t1 = turn(&h, "one").await;
    let report = h.compact("s").await.unwrap();
    assert!(report.native_compaction);
    assert_eq!(native_compactions(&rig.backend), vec![t1.thread_id]);
    let note = rig
        .store
        .load_document(DOCTOR_NAMESPACE, &format!("noop-compact:{ENGINE_ID}"))
        .unwrap()
        .expect("a doctor note");
    assert!(note.contains("no-op"), "{note}");
}

/// bootstrap + maintain(bootstrap) run once on first encounter, then every turn assemble,
/// afterTurn, maintain(turn), in that order.
#[tokio::test]
async fn lifecycle_order_bootstrap_once_then_per_turn() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "one").await;
    turn(&h, "two").await;
    let per_turn = [
        "assemble",
        "afterTurn",
        "maintain(turn)",
        "maintainDone(turn)",
    ];
    let mut expected = vec![
        "bootstrap",
        "maintain(bootstrap)",
        "maintainDone(bootstrap)",
    ];
    expected.extend(per_turn);
    expected.extend(per_turn);
    assert_eq!(engine.call_names(), expected);
    let after: Vec<(usize, u64)> = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::AfterTurn {
                messages,
                pre_prompt_message_count,
                ..
            } => Some((messages, pre_prompt_message_count)),
            _ => None,
        })
        .collect();
    assert_eq!(after, vec![(2, 0), (4, 2)]);
}

/// Without `afterTurn` the host calls `ingestBatch` with the turn's two messages; without
/// either, `ingest` once per message.
#[tokio::test]
async fn after_turn_else_ingest_batch_else_ingest() {
    let cases: [(&[EngineMethod], &[&str]); 3] = [
        (
            &[EngineMethod::AfterTurn, EngineMethod::IngestBatch],
            &["afterTurn"],
        ),
        (&[EngineMethod::IngestBatch], &["ingestBatch"]),
        (&[], &["ingest", "ingest"]),
    ];
    for (methods, expected) in cases {
        let rig = Rig::new();
        let engine = ScriptEngine::bootstrap("e1");
        engine.set_methods(methods);
        let h = rig.harness(Some(&engine), cfg());
        turn(&h, "one").await;
        let names: Vec<String> = engine
            .call_names()
            .into_iter()
            .filter(|n| n != "assemble")
            .collect();
        assert_eq!(names, expected, "{methods:?}");
        if methods == [EngineMethod::IngestBatch] {
            assert!(engine.calls().contains(&Call::IngestBatch(2)));
        }
    }
}

/// A failed turn gets no afterTurn, no maintenance, no transcript entries and no binding change.
#[tokio::test]
async fn failed_turn_gets_no_maintenance() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "one").await;
    let before = engine.calls().len();
    let binding_before = h.binding("s").await.unwrap();
    rig.backend
        .push_fault(MockFault::Fail("model exploded".into()));
    let err = h.turn(TurnSpec::new("s", "two")).await.unwrap_err();
    assert!(
        matches!(
            &err,
            HarnessError::Backend {
                source: BackendError::TurnFailed { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("model exploded"));
    let names: Vec<String> = engine.calls()[before..].iter().map(Call::name).collect();
    assert_eq!(names, vec!["assemble"]);
    assert_eq!(h.transcript("s").unwrap().len(), 2);
    assert_eq!(h.binding("s").await.unwrap(), binding_before);
}

/// `turnMaintenanceMode: "background"`: the turn returns while maintain(turn) is still
/// running, and `shutdown()` waits for it before calling `dispose`.
#[tokio::test]
async fn background_maintenance_runs_after_the_reply_and_shutdown_waits() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().info.turn_maintenance_mode = Some(TurnMaintenanceMode::Background);
    engine.script().block_maintain_turn = true;
    let h = rig.harness(Some(&engine), cfg());
    let r = tokio::time::timeout(Duration::from_secs(10), h.turn(TurnSpec::new("s", "one")))
        .await
        .expect("the turn must not wait for background maintenance")
        .unwrap();
    assert!(!r.reply.is_empty());
    assert_eq!(engine.count("maintainDone(turn)"), 0);
    let release = async {
        // Give shutdown every chance to run ahead; it must still be waiting.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            engine.count("dispose"),
            0,
            "dispose ran before maintenance ended"
        );
        assert_eq!(engine.count("maintain(turn)"), 1);
        engine.release_maintain();
    };
    tokio::join!(h.shutdown(), release);
    let names = engine.call_names();
    let done = names
        .iter()
        .position(|n| n == "maintainDone(turn)")
        .unwrap();
    let dispose = names.iter().position(|n| n == "dispose").unwrap();
    assert!(done < dispose, "{names:?}");
}

/// Shutdown's wait for background maintenance is bounded: it gives up and still disposes.
#[tokio::test]
async fn shutdown_wait_for_background_maintenance_is_bounded() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().info.turn_maintenance_mode = Some(TurnMaintenanceMode::Background);
    engine.script().block_maintain_turn = true;
    let h = rig.harness(
        Some(&engine),
        HarnessConfig {
            background_wait: Duration::from_millis(20),
            ..cfg()
        },
    );
    turn(&h, "one").await;
    h.shutdown().await;
    assert_eq!(engine.count("dispose"), 1);
    assert_eq!(engine.count("maintainDone(turn)"), 0);
}

/// `rewriteTranscriptEntries` from maintain rewrites the stored transcript; the same callback
/// is refused in assemble.
#[tokio::test]
async fn maintain_rewrites_the_transcript_and_assemble_cannot() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().rewrite_in_maintain = Some(RewritePlan::ReplaceFirst("[redacted]".into()));
    engine.script().rewrite_in_assemble = true;
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "my password is hunter2").await;
    turn(&h, "two").await;
    let transcript = h.transcript("s").unwrap();
    assert_eq!(transcript.len(), 4);
    assert_eq!(transcript[0].plain_text(), "[redacted]");
    assert_eq!(transcript[2].plain_text(), "two");
    assert!(transcript
        .iter()
        .all(|m| m.plain_text() != "rewritten in assemble"));
    let rewrites: Vec<(&'static str, Result<u64, String>)> = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Rewrite { during, result } => Some((during, result)),
            _ => None,
        })
        .collect();
    assert_eq!(rewrites.len(), 3, "{rewrites:?}");
    assert_eq!(rewrites[0], ("maintain", Ok(1)));
    assert_eq!(rewrites[1].0, "assemble");
    let refused = rewrites[1].1.as_ref().unwrap_err();
    assert!(refused.contains("refused"), "{refused}");
    assert_eq!(rewrites[2], ("maintain", Ok(1)));
}

/// A rewrite naming one existing and one unknown entry is refused as a whole: nothing changes.
#[tokio::test]
async fn transcript_rewrite_is_atomic() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().rewrite_in_maintain =
        Some(RewritePlan::ReplaceFirstAndUnknown("[redacted]".into()));
    let h = rig.harness(Some(&engine), cfg());
    turn(&h, "keep me").await;
    let transcript = h.transcript("s").unwrap();
    assert_eq!(transcript[0].plain_text(), "keep me");
    let result = engine
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::Rewrite { result, .. } => Some(result),
            _ => None,
        })
        .unwrap();
    assert!(result.unwrap_err().contains("no-such-entry"));
}

/// `acceptedHostParams: []` strips every host key (the engine sees no prompt, runtimeSettings,
/// sessionKey or runtimeContext); without the declaration it gets them all.
#[tokio::test]
async fn accepted_host_params_strip_host_keys() {
    for declared in [None, Some(vec![]), Some(vec!["prompt".to_string()])] {
        let rig = Rig::new();
        let engine = ScriptEngine::bootstrap("e1");
        engine.script().info.accepted_host_params = declared.clone();
        let h = rig.harness(Some(&engine), cfg());
        turn(&h, "hi").await;
        let assemble = engine
            .calls()
            .into_iter()
            .find(|c| matches!(c, Call::Assemble { .. }))
            .unwrap();
        let all = declared.is_none();
        let prompt_ok = all || declared.as_ref().is_some_and(|d| !d.is_empty());
        assert_eq!(
            assemble,
            Call::Assemble {
                messages: 0,
                prompt: prompt_ok.then(|| "hi".to_string()),
                has_session_key: all,
                has_runtime_settings: all,
                has_runtime_context: all,
            },
            "{declared:?}"
        );
    }
}

fn spawn_request(child: &str, mode: SubagentContextMode, light: bool) -> SubagentSpawn {
    SubagentSpawn {
        parent_session_key: "s".into(),
        child_session_key: child.into(),
        context_mode: mode,
        light_context: light,
        ttl_ms: None,
    }
}

/// A spawn calls `prepareSubagentSpawn`, launches, and `onSubagentEnded` reaches the engine;
/// a light isolated spawn skips the hook (a light fork does not).
#[tokio::test]
async fn subagent_prepare_launch_and_end() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), cfg());
    let launched = h
        .spawn_subagent(
            spawn_request("child-1", SubagentContextMode::Fork, false),
            || async { Ok::<_, String>(7) },
        )
        .await
        .unwrap();
    assert_eq!(launched, 7);
    assert_eq!(
        engine.calls(),
        vec![Call::Prepare {
            child: "child-1".into(),
            mode: SubagentContextMode::Fork
        }]
    );
    h.end_subagent("child-1", SubagentEndReason::Completed)
        .await;
    assert_eq!(
        engine.calls().last(),
        Some(&Call::SubagentEnded(
            "child-1".into(),
            SubagentEndReason::Completed
        ))
    );

    h.spawn_subagent(
        spawn_request("light", SubagentContextMode::Isolated, true),
        || async { Ok::<_, String>(()) },
    )
    .await
    .unwrap();
    h.spawn_subagent(
        spawn_request("light-fork", SubagentContextMode::Fork, true),
        || async { Ok::<_, String>(()) },
    )
    .await
    .unwrap();
    let prepared: Vec<String> = engine
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Prepare { child, .. } => Some(child),
            _ => None,
        })
        .collect();
    assert_eq!(prepared, vec!["child-1", "light-fork"]);
}

/// A launch failure after a successful prepare calls the engine's rollback with its handle.
#[tokio::test]
async fn subagent_launch_failure_rolls_back() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().rollback_id = Some("rb-1".into());
    let h = rig.harness(Some(&engine), cfg());
    let err = h
        .spawn_subagent(
            spawn_request("child", SubagentContextMode::Isolated, false),
            || async { Err::<(), _>("no capacity") },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HarnessError::SubagentLaunch(m) if m == "no capacity"),
        "{err}"
    );
    assert_eq!(engine.calls().last(), Some(&Call::Rollback("rb-1".into())));
    assert!(!h.engine().is_quarantined());
}

/// A failing prepare quarantines the engine and fails the spawn without launching.
#[tokio::test]
async fn failing_prepare_quarantines_and_fails_the_spawn() {
    let (logs, _guard) = capture();
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().fail_prepare = true;
    let h = rig.harness(Some(&engine), cfg());
    let launched = AtomicBool::new(false);
    let err = h
        .spawn_subagent(
            spawn_request("child", SubagentContextMode::Fork, false),
            || async {
                launched.store(true, Ordering::SeqCst);
                Ok::<_, String>(())
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            HarnessError::Engine {
                operation: "prepareSubagentSpawn",
                ..
            }
        ),
        "{err}"
    );
    assert!(!launched.load(Ordering::SeqCst));
    assert!(h.engine().is_quarantined());
    let errors = logs.at(Level::ERROR);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("failed during prepareSubagentSpawn"));
    // The next turn runs on legacy.
    let r = turn(&h, "after").await;
    assert_eq!(r.engine_id, "legacy");
}

/// A session's first encounter is marked only after `bootstrap` ran: a crash in the middle of
/// it (the turn dropped, the process gone) bootstraps again on the next turn.
#[tokio::test]
async fn bootstrap_interrupted_by_a_crash_runs_again() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().bootstrap_hang_once = true;
    {
        let h = rig.harness(Some(&engine), cfg());
        let crashed = tokio::time::timeout(
            Duration::from_millis(300),
            h.turn(TurnSpec::new("s", "one")),
        )
        .await;
        assert!(crashed.is_err(), "the first bootstrap never returns");
    }
    assert_eq!(engine.count("bootstrap"), 1);
    let h = rig.harness(Some(&engine), cfg());
    let r = h.turn(TurnSpec::new("s", "one")).await.unwrap();
    assert!(!r.reply.is_empty());
    assert_eq!(engine.count("bootstrap"), 2, "{:?}", engine.call_names());
    h.turn(TurnSpec::new("s", "two")).await.unwrap();
    assert_eq!(
        engine.count("bootstrap"),
        2,
        "bootstrap runs once per session"
    );
}

/// Background maintenance belongs to its session: the session's next turn waits until it has
/// finished, so the two never overlap (the reply itself never waits for it).
#[tokio::test]
async fn background_maintenance_never_overlaps_the_next_turn() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().info.turn_maintenance_mode = Some(TurnMaintenanceMode::Background);
    engine.script().block_maintain_turn = true;
    let h = rig.harness(Some(&engine), cfg());
    h.turn(TurnSpec::new("s", "one")).await.unwrap();
    let release = async {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            engine.count("assemble"),
            1,
            "the next turn started while maintenance ran"
        );
        engine.release_maintain();
    };
    let (second, ()) = tokio::join!(h.turn(TurnSpec::new("s", "two")), release);
    second.unwrap();
    let names = engine.call_names();
    let done = names
        .iter()
        .position(|n| n == "maintainDone(turn)")
        .unwrap();
    let second_assemble = names
        .iter()
        .enumerate()
        .filter(|(_, n)| *n == "assemble")
        .nth(1)
        .map(|(i, _)| i)
        .unwrap();
    assert!(done < second_assemble, "{names:?}");
    engine.release_maintain();
    h.shutdown().await;
}
