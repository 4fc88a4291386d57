//! The shared state-store conformance suite (in the manner of object_store's `integration.rs`):
//! every [`StateStore`] — SQLite in memory, SQLite on disk, PostgreSQL — runs these same checks
//! from its own test file, so the guarantees the harness relies on are stated once.
//!
//! Each check takes a fresh, empty store (the multi-instance checks take several handles on one
//! database) and panics with a message naming the store and what it did wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};

use crate::contract::AgentMessage;

use super::{
    Lease, LeaseAttempt, OutboxRow, QuarantineRecord, StateStore, StoreError, SweepReport,
    SweepRequest, SweptSession, TranscriptEntry, TurnWrite,
};

/// One single-store check: panics when the store breaks the guarantee.
pub type Check = fn(&dyn StateStore);

/// Every single-store check, by name, for [`run_all`] and for test files that want one test
/// per check.
pub const CHECKS: &[(&str, Check)] = &[
    ("binding_round_trip", binding_round_trip),
    ("fenced_save_is_refused", fenced_save_is_refused),
    (
        "record_turn_is_atomic_and_fenced",
        record_turn_is_atomic_and_fenced,
    ),
    (
        "record_turn_queues_its_commit",
        record_turn_queues_its_commit,
    ),
    ("transcript_appends_in_order", transcript_appends_in_order),
    ("transcript_rewrite_is_atomic", transcript_rewrite_is_atomic),
    ("outbox_queue", outbox_queue),
    ("outbox_delivers_once", outbox_delivers_once),
    ("quarantine_records", quarantine_records),
    ("bootstrap_marks", bootstrap_marks),
    ("delete_session", delete_session),
    (
        "outbox_moves_to_the_next_session",
        outbox_moves_to_the_next_session,
    ),
    ("lease_lifecycle", lease_lifecycle),
    (
        "dead_holder_is_taken_over_at_once",
        dead_holder_is_taken_over_at_once,
    ),
    ("heartbeat_extends_expiry", heartbeat_extends_expiry),
    ("documents", documents),
    ("retention_sweep", retention_sweep),
    ("sweep_is_bounded", sweep_is_bounded),
    (
        "swept_lease_is_reborn_above_its_generations",
        swept_lease_is_reborn_above_its_generations,
    ),
    ("store_stats", store_stats),
    ("submitted_writes", submitted_writes),
];

/// Runs every single-store check, each on a fresh store from `fresh`.
pub fn run_all(fresh: &dyn Fn() -> Arc<dyn StateStore>) {
    for (name, check) in CHECKS {
        let store = fresh();
        tracing::debug!(check = name, store = %store.location(), "store conformance check");
        check(&*store);
    }
}

fn entry(id: &str, text: &str) -> TranscriptEntry {
    TranscriptEntry {
        entry_id: id.into(),
        message: AgentMessage::user(text),
    }
}

fn ids(store: &dyn StateStore, session: &str) -> Vec<String> {
    store
        .load_transcript(session)
        .unwrap()
        .into_iter()
        .map(|e| e.entry_id)
        .collect()
}

fn acquire(store: &dyn StateStore, session: &str, holder: &str, now: u64, ttl: u64) -> Lease {
    match store.try_acquire_lease(session, holder, now, ttl).unwrap() {
        LeaseAttempt::Acquired(lease) => lease,
        LeaseAttempt::Busy { holder: other, .. } => panic!(
            "{}: lease on {session:?} for {holder:?} at {now} refused (held by {other:?})",
            store.location()
        ),
    }
}

fn assert_stale(store: &dyn StateStore, result: Result<(), StoreError>, held: u64, current: u64) {
    match result {
        Err(StoreError::StaleGeneration {
            held: h,
            current: c,
            ..
        }) => {
            assert_eq!(
                (h, c),
                (held, current),
                "{}: stale generations",
                store.location()
            )
        }
        other => panic!(
            "{}: a write with stale generation {held} (current {current}) gave {other:?}",
            store.location()
        ),
    }
}

fn outbox_row(session: &str, key: &str) -> OutboxRow {
    OutboxRow {
        session_id: session.into(),
        advancement_key: key.into(),
        engine_id: "engine".into(),
        params_json: format!("{{\"advancementKey\":\"{key}\"}}"),
        attempts: 0,
        last_error: None,
    }
}

/// Writes submitted through [`StateStore::submit`] (and detached) do what the synchronous
/// methods do: a lease is acquired (busy for another holder), a recorded turn queues its
/// commit, a stale holder's record is refused, a commit is completed or its failure counted,
/// and a released lease frees the session.
pub fn submitted_writes(store: &dyn StateStore) {
    let at = store.location();
    let run = |write: TurnWrite| futures::executor::block_on(store.submit(write));
    let acquire = |holder: &str, now_ms: u64| {
        run(TurnWrite::AcquireLease {
            session: "k".into(),
            holder: holder.into(),
            dead_holder: None,
            now_ms,
            ttl_ms: 60_000,
        })
        .unwrap()
        .into_lease()
    };
    let LeaseAttempt::Acquired(lease) = acquire("p1", 0) else {
        panic!("{at}: submitted lease refused");
    };
    assert!(
        matches!(acquire("p2", 10), LeaseAttempt::Busy { ref holder, .. } if holder == "p1"),
        "{at}: a held lease was handed to another holder"
    );
    let record =
        |session: &str, generation: u64, commit: Option<OutboxRow>| TurnWrite::RecordTurn {
            session_id: session.into(),
            entries: vec![entry(&format!("{session}-1"), "hello")],
            binding_key: "k".into(),
            binding_json: format!("{{\"session\":\"{session}\"}}"),
            lease_generation: generation,
            commit,
        };
    run(record(
        "s",
        lease.generation,
        Some(outbox_row("s", "turn-1")),
    ))
    .unwrap();
    assert_eq!(ids(store, "s"), ["s-1"], "{at}");
    assert_eq!(store.pending_outbox("s").unwrap().len(), 1, "{at}");
    let stale = run(record("late", lease.generation - 1, None)).map(|_| ());
    assert_stale(store, stale, lease.generation - 1, lease.generation);
    assert!(
        ids(store, "late").is_empty(),
        "{at}: a fenced record landed"
    );

    run(TurnWrite::EnqueueOutbox(outbox_row("s", "turn-2"))).unwrap();
    run(TurnWrite::FailOutbox {
        session_id: "s".into(),
        advancement_key: "turn-2".into(),
        error: "engine down".into(),
    })
    .unwrap();
    run(TurnWrite::CompleteOutbox {
        session_id: "s".into(),
        advancement_key: "turn-1".into(),
    })
    .unwrap();
    let pending = store.pending_outbox("s").unwrap();
    assert_eq!(pending.len(), 1, "{at}: {pending:?}");
    assert_eq!(
        (pending[0].attempts, pending[0].last_error.as_deref()),
        (1, Some("engine down")),
        "{at}"
    );

    store.submit_detached(TurnWrite::ReleaseLease(lease));
    // A detached write may finish after the call returns: wait for the session to be free.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !matches!(acquire("p2", 20), LeaseAttempt::Acquired(_)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: a detached release never freed the session"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A binding is absent until saved, reads back with its JSON and generation, is overwritten by
/// a later save and is gone after delete.
pub fn binding_round_trip(store: &dyn StateStore) {
    let at = store.location();
    assert_eq!(store.load_binding("k").unwrap(), None, "{at}");
    store.save_binding("k", "{\"thread\":\"t1\"}", 0).unwrap();
    let loaded = store.load_binding("k").unwrap().expect("saved binding");
    assert_eq!(loaded.binding_key, "k", "{at}");
    assert_eq!(loaded.json, "{\"thread\":\"t1\"}", "{at}");
    assert_eq!(loaded.generation, 0, "{at}");
    store.save_binding("k", "{\"thread\":\"t2\"}", 3).unwrap();
    let loaded = store.load_binding("k").unwrap().unwrap();
    assert_eq!(
        (loaded.json.as_str(), loaded.generation),
        ("{\"thread\":\"t2\"}", 3),
        "{at}"
    );
    assert_eq!(store.load_binding("other").unwrap(), None, "{at}");
    store.delete_binding("k").unwrap();
    assert_eq!(store.load_binding("k").unwrap(), None, "{at}");
    store.delete_binding("k").unwrap();
}

/// A second holder is refused while the lease is live and gets it after expiry with a higher
/// generation that fences the first holder's binding writes; the stale write changes nothing.
pub fn fenced_save_is_refused(store: &dyn StateStore) {
    let at = store.location();
    let first = acquire(store, "k", "p1", 1_000, 500);
    assert!(
        matches!(
            store.try_acquire_lease("k", "p2", 1_200, 500).unwrap(),
            LeaseAttempt::Busy { .. }
        ),
        "{at}: live lease given away"
    );
    let second = acquire(store, "k", "p2", 1_600, 500);
    assert!(second.generation > first.generation, "{at}");
    store.save_binding("k", "{}", second.generation).unwrap();
    let result = store.save_binding("k", "{\"stale\":1}", first.generation);
    assert_stale(store, result, first.generation, second.generation);
    let binding = store.load_binding("k").unwrap().unwrap();
    assert_eq!(binding.json, "{}", "{at}: a fenced write landed");
    assert_eq!(binding.generation, second.generation, "{at}");
    store.release_lease(&second).unwrap();
    acquire(store, "k", "p1", 1_700, 500);
}

/// A turn's transcript entries and binding are written together, or — for a holder whose lease
/// generation is stale — not at all.
pub fn record_turn_is_atomic_and_fenced(store: &dyn StateStore) {
    let at = store.location();
    let old = acquire(store, "k", "p1", 0, 10);
    store
        .record_turn(
            "sess",
            &[entry("a", "1"), entry("b", "2")],
            "k",
            "{\"t\":1}",
            old.generation,
        )
        .unwrap();
    assert_eq!(ids(store, "sess"), ["a", "b"], "{at}");
    assert_eq!(
        store.load_binding("k").unwrap().unwrap().json,
        "{\"t\":1}",
        "{at}"
    );
    let new = acquire(store, "k", "p2", 100, 10);
    assert!(new.generation > old.generation, "{at}");
    let result = store.record_turn("sess", &[entry("c", "3")], "k", "{\"t\":2}", old.generation);
    assert_stale(store, result, old.generation, new.generation);
    assert_eq!(
        ids(store, "sess"),
        ["a", "b"],
        "{at}: no entry from a fenced holder"
    );
    assert_eq!(
        store.load_binding("k").unwrap().unwrap().json,
        "{\"t\":1}",
        "{at}"
    );
    store
        .record_turn("sess", &[entry("c", "3")], "k", "{\"t\":2}", new.generation)
        .unwrap();
    assert_eq!(ids(store, "sess"), ["a", "b", "c"], "{at}");
    assert_eq!(
        store.load_binding("k").unwrap().unwrap().json,
        "{\"t\":2}",
        "{at}"
    );
}

/// A turn recorded with its durable commit queues the commit with the entries and binding; a
/// fenced holder's turn queues nothing; recording a commit's advancement key again keeps one
/// queued row.
pub fn record_turn_queues_its_commit(store: &dyn StateStore) {
    let at = store.location();
    let old = acquire(store, "k", "p1", 0, 10);
    store
        .record_turn_with_commit(
            "sess",
            &[entry("u1", "1"), entry("a1", "2")],
            "k",
            "{\"t\":1}",
            old.generation,
            &outbox_row("sess", "turn-1"),
        )
        .unwrap();
    assert_eq!(ids(store, "sess"), ["u1", "a1"], "{at}");
    assert_eq!(
        store.pending_outbox("sess").unwrap(),
        vec![outbox_row("sess", "turn-1")],
        "{at}"
    );
    let new = acquire(store, "k", "p2", 100, 10);
    let result = store.record_turn_with_commit(
        "sess",
        &[entry("u2", "late")],
        "k",
        "{\"t\":\"stale\"}",
        old.generation,
        &outbox_row("sess", "turn-stale"),
    );
    assert_stale(store, result, old.generation, new.generation);
    assert_eq!(ids(store, "sess"), ["u1", "a1"], "{at}: fenced entries");
    assert_eq!(
        store.pending_outbox("sess").unwrap(),
        vec![outbox_row("sess", "turn-1")],
        "{at}: a fenced holder queued a commit"
    );
    assert_eq!(
        store.load_binding("k").unwrap().unwrap().json,
        "{\"t\":1}",
        "{at}"
    );
    store
        .record_turn_with_commit(
            "sess",
            &[entry("u3", "3")],
            "k",
            "{\"t\":3}",
            new.generation,
            &outbox_row("sess", "turn-1"),
        )
        .unwrap();
    assert_eq!(ids(store, "sess"), ["u1", "a1", "u3"], "{at}");
    assert_eq!(
        store.pending_outbox("sess").unwrap().len(),
        1,
        "{at}: duplicate advancement key"
    );
}

/// Transcript entries come back in append order with their messages, across appends; sessions
/// are separate.
pub fn transcript_appends_in_order(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    store.append_transcript("s", &[]).unwrap();
    store
        .append_transcript(
            "s",
            &[TranscriptEntry {
                entry_id: "c".into(),
                message: AgentMessage::assistant("three"),
            }],
        )
        .unwrap();
    store
        .append_transcript("t", &[entry("x", "other")])
        .unwrap();
    let loaded = store.load_transcript("s").unwrap();
    assert_eq!(
        loaded,
        vec![
            entry("a", "1"),
            entry("b", "2"),
            TranscriptEntry {
                entry_id: "c".into(),
                message: AgentMessage::assistant("three"),
            },
        ],
        "{at}"
    );
    assert_eq!(ids(store, "t"), ["x"], "{at}");
    assert!(store.load_transcript("none").unwrap().is_empty(), "{at}");
}

/// A rewrite naming one unknown entry changes nothing (all or none) and names the entry; a
/// valid rewrite replaces the message in place.
pub fn transcript_rewrite_is_atomic(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    let err = store
        .replace_transcript_entries("s", &[entry("a", "changed"), entry("zzz", "x")])
        .unwrap_err();
    assert!(err.to_string().contains("zzz"), "{at}: {err}");
    let t = store.load_transcript("s").unwrap();
    assert_eq!(t[0].message.plain_text(), "1", "{at}: partial rewrite");
    store
        .replace_transcript_entries("s", &[entry("b", "two")])
        .unwrap();
    let t = store.load_transcript("s").unwrap();
    assert_eq!(
        t.iter().map(|e| e.entry_id.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{at}: order kept"
    );
    assert_eq!(t[1].message.plain_text(), "two", "{at}");
}

/// Outbox rows stay queued until completed, in enqueue order, per session; a duplicate enqueue
/// keeps one row; failures count attempts and keep the last error.
pub fn outbox_queue(store: &dyn StateStore) {
    let at = store.location();
    let row = outbox_row("s", "t1");
    store.enqueue_outbox(&row).unwrap();
    store.enqueue_outbox(&row).unwrap();
    store.enqueue_outbox(&outbox_row("other", "t9")).unwrap();
    store.enqueue_outbox(&outbox_row("s", "t0")).unwrap();
    store.fail_outbox("s", "t1", "boom").unwrap();
    store.fail_outbox("s", "t1", "bang").unwrap();
    let rows = store.pending_outbox("s").unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r.advancement_key.as_str())
            .collect::<Vec<_>>(),
        ["t1", "t0"],
        "{at}: enqueue order"
    );
    assert_eq!(rows[0].attempts, 2, "{at}");
    assert_eq!(rows[0].last_error.as_deref(), Some("bang"), "{at}");
    assert_eq!(rows[0].params_json, row.params_json, "{at}");
    assert_eq!(rows[0].engine_id, "engine", "{at}");
    assert_eq!(rows[1], outbox_row("s", "t0"), "{at}");
    store.complete_outbox("s", "t1").unwrap();
    assert_eq!(
        store.pending_outbox("s").unwrap(),
        vec![outbox_row("s", "t0")],
        "{at}"
    );
    assert_eq!(store.pending_outbox("other").unwrap().len(), 1, "{at}");
}

/// A committed turn is delivered once: after completion it is never pending again, even when
/// the same advancement key is enqueued again or completed twice.
pub fn outbox_delivers_once(store: &dyn StateStore) {
    let at = store.location();
    store.enqueue_outbox(&outbox_row("s", "turn-1")).unwrap();
    store.enqueue_outbox(&outbox_row("s", "turn-2")).unwrap();
    let mut delivered = Vec::new();
    for _ in 0..3 {
        for row in store.pending_outbox("s").unwrap() {
            delivered.push(row.advancement_key.clone());
            store
                .complete_outbox(&row.session_id, &row.advancement_key)
                .unwrap();
        }
    }
    assert_eq!(delivered, ["turn-1", "turn-2"], "{at}");
    store.complete_outbox("s", "turn-1").unwrap();
    assert!(store.pending_outbox("s").unwrap().is_empty(), "{at}");
}

/// Quarantine records are upserted per engine, listed by engine id, and cleared one by one.
pub fn quarantine_records(store: &dyn StateStore) {
    let at = store.location();
    assert!(store.quarantines().unwrap().is_empty(), "{at}");
    let record = |engine: &str, reason: &str, at_ms: u64| QuarantineRecord {
        engine_id: engine.into(),
        operation: "assemble".into(),
        reason: reason.into(),
        at_ms,
    };
    store
        .record_quarantine(&record("zeta", "crashed", 5))
        .unwrap();
    store
        .record_quarantine(&record("alpha", "timeout", 7))
        .unwrap();
    store
        .record_quarantine(&record("zeta", "crashed again", 1_700_000_000_000))
        .unwrap();
    assert_eq!(
        store.quarantines().unwrap(),
        vec![
            record("alpha", "timeout", 7),
            record("zeta", "crashed again", 1_700_000_000_000)
        ],
        "{at}"
    );
    store.clear_quarantine("alpha").unwrap();
    store.clear_quarantine("never-quarantined").unwrap();
    assert_eq!(
        store.quarantines().unwrap(),
        vec![record("zeta", "crashed again", 1_700_000_000_000)],
        "{at}"
    );
}

/// A bootstrap mark is new once per (session, engine) and then reads as set.
pub fn bootstrap_marks(store: &dyn StateStore) {
    let at = store.location();
    assert!(!store.is_bootstrapped("s", "e").unwrap(), "{at}");
    assert!(
        store.mark_bootstrapped("s", "e").unwrap(),
        "{at}: first mark"
    );
    assert!(
        !store.mark_bootstrapped("s", "e").unwrap(),
        "{at}: repeat mark"
    );
    assert!(store.is_bootstrapped("s", "e").unwrap(), "{at}");
    assert!(!store.is_bootstrapped("s", "other").unwrap(), "{at}");
    assert!(!store.is_bootstrapped("other", "e").unwrap(), "{at}");
    assert!(store.mark_bootstrapped("other", "e").unwrap(), "{at}");
}

/// Deleting a session (a reset) removes its transcript and bootstrap marks and says how many
/// entries went; its queued outbox rows and other sessions stay; an unknown session is 0.
pub fn delete_session(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("1", "x"), entry("2", "y")])
        .unwrap();
    store.mark_bootstrapped("s", "e").unwrap();
    store.enqueue_outbox(&outbox_row("s", "turn-1")).unwrap();
    store
        .append_transcript("other", &[entry("1", "z")])
        .unwrap();
    assert_eq!(store.delete_session("s").unwrap(), 2, "{at}");
    assert!(ids(store, "s").is_empty(), "{at}: transcript kept");
    assert!(!store.is_bootstrapped("s", "e").unwrap(), "{at}: mark kept");
    assert_eq!(store.pending_outbox("s").unwrap().len(), 1, "{at}");
    assert_eq!(ids(store, "other"), ["1"], "{at}: another session touched");
    assert_eq!(store.stats().unwrap().transcript_entries, 1, "{at}");
    assert_eq!(store.delete_session("missing").unwrap(), 0, "{at}");
    store
        .append_transcript("s", &[entry("3", "again")])
        .unwrap();
    assert_eq!(ids(store, "s"), ["3"], "{at}: the id is usable again");
}

/// A reset's undelivered commits move to the next session id in their order, params
/// unchanged; a key the next session already holds stays behind; other sessions are untouched;
/// the moved rows keep the next session from the retention sweep.
pub fn outbox_moves_to_the_next_session(store: &dyn StateStore) {
    let at = store.location();
    for (session, key) in [
        ("old", "k1"),
        ("old", "k2"),
        ("next", "k2"),
        ("other", "k3"),
    ] {
        store.enqueue_outbox(&outbox_row(session, key)).unwrap();
    }
    store.fail_outbox("old", "k1", "engine down").unwrap();
    assert_eq!(store.move_outbox("old", "next").unwrap(), 1, "{at}");
    let next = store.pending_outbox("next").unwrap();
    let keys: Vec<&str> = next.iter().map(|r| r.advancement_key.as_str()).collect();
    assert_eq!(keys, ["k1", "k2"], "{at}: queue order kept");
    assert_eq!(next[0].session_id, "next", "{at}");
    assert_eq!(
        next[0].params_json,
        outbox_row("old", "k1").params_json,
        "{at}"
    );
    assert_eq!(next[0].attempts, 1, "{at}: attempts kept");
    assert_eq!(next[0].last_error.as_deref(), Some("engine down"), "{at}");
    let left: Vec<String> = store
        .pending_outbox("old")
        .unwrap()
        .into_iter()
        .map(|r| r.advancement_key)
        .collect();
    assert_eq!(left, ["k2"], "{at}: a key the next session holds stays");
    assert_eq!(store.pending_outbox("other").unwrap().len(), 1, "{at}");
    assert_eq!(store.move_outbox("missing", "next").unwrap(), 0, "{at}");

    let cutoff = tick_past(wall_ms());
    sweep(store, cutoff, 100);
    assert_eq!(
        store.pending_outbox("next").unwrap().len(),
        2,
        "{at}: swept"
    );
    store.complete_outbox("next", "k1").unwrap();
    assert_eq!(store.pending_outbox("next").unwrap().len(), 1, "{at}");
}

/// Leases: the first acquisition has generation 1; the holder renews with the next generation;
/// another holder is busy (told who holds it and until when) up to the expiry instant and takes
/// over at it; a stale release changes nothing; a current release frees the lease at once.
pub fn lease_lifecycle(store: &dyn StateStore) {
    let at = store.location();
    let first = acquire(store, "s", "a", 1_000, 100);
    assert_eq!(first.generation, 1, "{at}");
    assert_eq!(first.expires_at_ms, 1_100, "{at}");
    assert_eq!((first.session.as_str(), first.holder.as_str()), ("s", "a"));
    let renewed = acquire(store, "s", "a", 1_050, 100);
    assert_eq!(renewed.generation, 2, "{at}: renewal bumps the generation");
    assert_eq!(
        store.try_acquire_lease("s", "b", 1_149, 100).unwrap(),
        LeaseAttempt::Busy {
            holder: "a".into(),
            expires_at_ms: 1_150
        },
        "{at}"
    );
    acquire(store, "other", "b", 1_149, 100);
    let taken = acquire(store, "s", "b", 1_150, 100);
    assert_eq!(taken.generation, 3, "{at}: takeover bumps the generation");
    store.release_lease(&renewed).unwrap();
    assert!(
        matches!(
            store.try_acquire_lease("s", "a", 1_160, 100).unwrap(),
            LeaseAttempt::Busy { ref holder, .. } if holder == "b"
        ),
        "{at}: a stale release freed the lease"
    );
    store.release_lease(&taken).unwrap();
    let again = acquire(store, "s", "a", 1_160, 100);
    assert_eq!(
        again.generation, 4,
        "{at}: release keeps the generation counting"
    );
}

/// A lease whose holder is known to have died (the harness's liveness check) is taken over at
/// once, long before it expires, with the next generation: the dead holder's late binding
/// write is refused, its renewal fails and its release changes nothing. A takeover naming a
/// holder that no longer holds the lease is busy.
pub fn dead_holder_is_taken_over_at_once(store: &dyn StateStore) {
    let at = store.location();
    let dead = acquire(store, "s", "dead", 1_000, 3_600_000);
    store
        .save_binding("s", "{\"thread\":\"t\"}", dead.generation)
        .unwrap();
    let taken = match store.take_over_lease("s", "dead", "b", 1_010, 100).unwrap() {
        LeaseAttempt::Acquired(lease) => lease,
        busy => panic!("{at}: a dead holder's live lease was not taken over: {busy:?}"),
    };
    assert_eq!(
        (taken.holder.as_str(), taken.generation, taken.expires_at_ms),
        ("b", dead.generation + 1, 1_110),
        "{at}: a takeover bumps the generation"
    );
    let late = store.save_binding("s", "{\"thread\":\"late\"}", dead.generation);
    assert_stale(store, late, dead.generation, taken.generation);
    assert_eq!(
        store.load_binding("s").unwrap().unwrap().json,
        "{\"thread\":\"t\"}",
        "{at}: the dead holder's late write landed"
    );
    assert!(
        !store.renew_lease(&dead, 1_020, 3_600_000).unwrap(),
        "{at}: the dead holder renewed a lease taken over"
    );
    store.release_lease(&dead).unwrap();
    assert_eq!(
        store.take_over_lease("s", "dead", "c", 1_030, 100).unwrap(),
        LeaseAttempt::Busy {
            holder: "b".into(),
            expires_at_ms: 1_110
        },
        "{at}: a takeover from a holder that no longer holds the lease"
    );
    store
        .save_binding("s", "{\"thread\":\"t2\"}", taken.generation)
        .unwrap();
}

/// The holder's heartbeat (`renew_lease`) moves the expiry and keeps the generation, so the
/// holder's writes stay valid and nobody takes the session at the first expiry; once a renewed
/// lease expires it is taken with the next generation, after which the old holder can neither
/// renew nor write.
pub fn heartbeat_extends_expiry(store: &dyn StateStore) {
    let at = store.location();
    let lease = acquire(store, "s", "a", 1_000, 100);
    assert!(store.renew_lease(&lease, 1_080, 100).unwrap(), "{at}");
    assert_eq!(
        store.try_acquire_lease("s", "b", 1_150, 100).unwrap(),
        LeaseAttempt::Busy {
            holder: "a".into(),
            expires_at_ms: 1_180
        },
        "{at}: a renewed lease was given away at its first expiry"
    );
    store.save_binding("s", "{}", lease.generation).unwrap();
    let taken = acquire(store, "s", "b", 1_180, 100);
    assert_eq!(
        taken.generation,
        lease.generation + 1,
        "{at}: renewals must not bump the generation"
    );
    assert!(
        !store.renew_lease(&lease, 1_190, 100).unwrap(),
        "{at}: a renewal revived a lease taken over"
    );
    assert_eq!(
        store.try_acquire_lease("s", "c", 1_200, 100).unwrap(),
        LeaseAttempt::Busy {
            holder: "b".into(),
            expires_at_ms: 1_280
        },
        "{at}: the old holder's renewal changed the new lease"
    );
    let late = store.save_binding("s", "{\"stale\":1}", lease.generation);
    assert_stale(store, late, lease.generation, taken.generation);
}

/// Documents round-trip per (namespace, key) and are overwritten by a later save.
pub fn documents(store: &dyn StateStore) {
    let at = store.location();
    assert_eq!(store.load_document("ns", "k").unwrap(), None, "{at}");
    store.save_document("ns", "k", "{\"v\":1}").unwrap();
    store.save_document("other", "k", "{\"v\":2}").unwrap();
    assert_eq!(
        store.load_document("ns", "k").unwrap().as_deref(),
        Some("{\"v\":1}"),
        "{at}"
    );
    store.save_document("ns", "k", "{\"v\":3}").unwrap();
    assert_eq!(
        store.load_document("ns", "k").unwrap().as_deref(),
        Some("{\"v\":3}"),
        "{at}"
    );
    assert_eq!(
        store.load_document("other", "k").unwrap().as_deref(),
        Some("{\"v\":2}"),
        "{at}"
    );
    assert_eq!(store.load_document("ns", "missing").unwrap(), None, "{at}");
}

/// Milliseconds since the Unix epoch by this process's clock.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Waits until the clock has moved past `instant` by a few milliseconds (writes before and
/// after get distinct activity times, on the store's clock as on ours), then returns the time.
fn tick_past(instant: u64) -> u64 {
    while wall_ms() <= instant + 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    wall_ms()
}

fn sweep(store: &dyn StateStore, idle_before_ms: u64, limit: usize) -> SweepReport {
    store
        .sweep_idle(&SweepRequest {
            idle_before_ms,
            limit,
            document_namespaces: vec!["mock-thread".into()],
        })
        .unwrap()
}

/// The retention sweep removes the state of keys idle since before the cutoff — a session's
/// transcript and bootstrap marks, a binding with its expired lease, documents of the swept
/// namespaces — and keeps what was written after it, documents of other namespaces, and every
/// session with an undelivered commit (until it is delivered). A second sweep finds nothing.
pub fn retention_sweep(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("old", &[entry("o1", "a"), entry("o2", "b")])
        .unwrap();
    assert!(store.mark_bootstrapped("old", "engine").unwrap(), "{at}");
    let lease = acquire(store, "b-old", "holder", 0, 10);
    store
        .save_binding("b-old", "{\"thread\":\"t-old\"}", lease.generation)
        .unwrap();
    store.release_lease(&lease).unwrap();
    store.save_document("mock-thread", "t-old", "{}").unwrap();
    store
        .save_document("serve.thread-map", "c-old", "{}")
        .unwrap();
    store
        .append_transcript("pending", &[entry("p1", "queued")])
        .unwrap();
    store
        .enqueue_outbox(&outbox_row("pending", "turn-1"))
        .unwrap();

    let cutoff = tick_past(wall_ms());
    tick_past(cutoff);
    store.append_transcript("new", &[entry("n1", "c")]).unwrap();
    store.save_binding("b-new", "{}", 0).unwrap();
    store.save_document("mock-thread", "t-new", "{}").unwrap();

    let report = sweep(store, cutoff, 100);
    assert_eq!(
        report,
        SweepReport {
            keys: 3,
            sessions: 1,
            transcript_entries: 2,
            bootstrap_marks: 1,
            bindings: 1,
            leases: 1,
            documents: 1,
            swept_sessions: vec![SweptSession {
                session_id: "old".into(),
                transcript_entries: 2,
            }],
        },
        "{at}: what the sweep removed"
    );
    assert!(ids(store, "old").is_empty(), "{at}: idle transcript kept");
    assert!(store.mark_bootstrapped("old", "engine").unwrap(), "{at}");
    assert_eq!(store.load_binding("b-old").unwrap(), None, "{at}");
    assert_eq!(
        store.load_document("mock-thread", "t-old").unwrap(),
        None,
        "{at}"
    );
    assert_eq!(
        store
            .load_document("serve.thread-map", "c-old")
            .unwrap()
            .as_deref(),
        Some("{}"),
        "{at}: a namespace not asked for was swept"
    );
    assert_eq!(
        ids(store, "pending"),
        ["p1"],
        "{at}: undelivered session swept"
    );
    assert_eq!(store.pending_outbox("pending").unwrap().len(), 1, "{at}");
    assert_eq!(ids(store, "new"), ["n1"], "{at}: active transcript swept");
    assert!(store.load_binding("b-new").unwrap().is_some(), "{at}");
    assert!(
        store
            .load_document("mock-thread", "t-new")
            .unwrap()
            .is_some(),
        "{at}"
    );
    assert_eq!(
        sweep(store, cutoff, 100),
        SweepReport::default(),
        "{at}: second sweep"
    );

    // Once delivered, the session is swept after its own idle time.
    store.complete_outbox("pending", "turn-1").unwrap();
    let later = tick_past(wall_ms());
    let report = sweep(store, later, 100);
    // `old` again (its bootstrap mark was re-created above), `pending` and `new`.
    assert_eq!(report.sessions, 3, "{at}: once idle: {report:?}");
    assert_eq!(report.bootstrap_marks, 1, "{at}: {report:?}");
    assert!(ids(store, "pending").is_empty(), "{at}");
    assert!(ids(store, "new").is_empty(), "{at}");
    // A swept session starts again from nothing.
    store
        .append_transcript("old", &[entry("o3", "again")])
        .unwrap();
    assert_eq!(ids(store, "old"), ["o3"], "{at}");
}

/// A lease the retention sweep removed is taken again two generations above the highest it
/// had, and so is any other session's first lease: a holder from before the sweep can write
/// neither on the empty row nor after the new holder, and never sees its own generation
/// continued by one (the harness's test for "nobody else held it"). A write that was never
/// leased (generation 0) is not fenced by the floor.
pub fn swept_lease_is_reborn_above_its_generations(store: &dyn StateStore) {
    let at = store.location();
    let mut old = acquire(store, "b-gen", "old-holder", 0, 10);
    for _ in 0..2 {
        store.release_lease(&old).unwrap();
        old = acquire(store, "b-gen", "old-holder", 0, 10);
    }
    assert_eq!(old.generation, 3, "{at}: three takes of one lease");
    store
        .save_binding("b-gen", "{\"thread\":\"t-1\"}", old.generation)
        .unwrap();
    let cutoff = tick_past(wall_ms());
    let report = sweep(store, cutoff, 100);
    assert_eq!((report.bindings, report.leases), (1, 1), "{at}: {report:?}");

    // The old holder, late, on the empty row: fenced at the floor the sweep left.
    let late = store.save_binding("b-gen", "{\"thread\":\"late\"}", old.generation);
    assert_stale(store, late, 3, 3);
    assert_eq!(
        store.load_binding("b-gen").unwrap(),
        None,
        "{at}: late write kept"
    );

    let reborn = acquire(store, "b-gen", "new-holder", wall_ms(), 60_000);
    assert_eq!(reborn.generation, 5, "{at}: reborn lease generation");
    store
        .save_binding("b-gen", "{\"thread\":\"t-2\"}", reborn.generation)
        .unwrap();
    let late = store.save_binding("b-gen", "{\"thread\":\"late\"}", old.generation);
    assert_stale(store, late, 3, 5);
    let stored = store.load_binding("b-gen").unwrap().unwrap();
    assert_eq!(
        (stored.json.as_str(), stored.generation),
        ("{\"thread\":\"t-2\"}", 5),
        "{at}"
    );

    // Every other session's first lease starts above the floor too; unleased writes pass.
    let first = acquire(store, "b-other", "new-holder", wall_ms(), 60_000);
    assert_eq!(first.generation, 5, "{at}: a new session's first lease");
    store.save_binding("b-unleased", "{}", 0).unwrap();

    // The next sweep raises the floor to the highest generation it removes.
    store.release_lease(&first).unwrap();
    let next = acquire(store, "b-next", "holder", 0, 10);
    assert_eq!(next.generation, 5, "{at}");
    let cutoff = tick_past(wall_ms());
    sweep(store, cutoff, 100);
    let again = acquire(store, "b-next", "holder", wall_ms(), 60_000);
    assert_eq!(again.generation, 7, "{at}: reborn after the second sweep");
}

/// One sweep removes at most its limit of idle keys, oldest first; the next call goes on.
pub fn sweep_is_bounded(store: &dyn StateStore) {
    let at = store.location();
    for session in ["s1", "s2", "s3"] {
        store
            .append_transcript(session, &[entry("e", "x")])
            .unwrap();
        tick_past(wall_ms());
    }
    let cutoff = tick_past(wall_ms());
    let first = sweep(store, cutoff, 2);
    assert_eq!((first.keys, first.sessions), (2, 2), "{at}: {first:?}");
    assert!(ids(store, "s1").is_empty(), "{at}: oldest first");
    assert!(ids(store, "s2").is_empty(), "{at}: oldest first");
    assert_eq!(ids(store, "s3"), ["e"], "{at}");
    let second = sweep(store, cutoff, 2);
    assert_eq!((second.keys, second.sessions), (1, 1), "{at}: {second:?}");
    assert!(ids(store, "s3").is_empty(), "{at}");
}

/// `stats` counts sessions, bindings, transcript entries, queued commits and documents, and
/// dates the longest-idle session by its last write.
pub fn store_stats(store: &dyn StateStore) {
    let at = store.location();
    let empty = store.stats().unwrap();
    assert_eq!(empty, super::StoreStats::default(), "{at}: empty store");
    let before = wall_ms();
    store
        .append_transcript("a", &[entry("1", "x"), entry("2", "y")])
        .unwrap();
    let first_done = tick_past(wall_ms());
    store.append_transcript("b", &[entry("1", "z")]).unwrap();
    store.enqueue_outbox(&outbox_row("b", "turn-1")).unwrap();
    store.save_binding("session:main:a", "{}", 0).unwrap();
    store.save_document("mock-thread", "t", "{}").unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(
        (
            stats.sessions,
            stats.bindings,
            stats.transcript_entries,
            stats.outbox_pending,
            stats.documents
        ),
        (2, 1, 3, 1, 1),
        "{at}: {stats:?}"
    );
    let oldest = stats.oldest_session_ms.expect("an oldest session");
    // Session `a` was written between `before` and `first_done` (one second of slack for a
    // database server's clock).
    assert!(
        oldest + 1_000 >= before && oldest <= first_done + 1_000,
        "{at}: oldest {oldest} not within [{before}, {first_done}]"
    );
}

/// Two instances on one database: a lease held by A blocks B; after expiry B takes over with a
/// higher generation; A's late turn and binding writes are refused and change nothing; each
/// instance sees the other's writes; an outbox row completed by one instance is never delivered
/// by the other.
pub fn two_instances(a: &dyn StateStore, b: &dyn StateStore) {
    let at = a.location();
    let held = acquire(a, "sess", "instance-a", 10_000, 1_000);
    a.record_turn(
        "sess",
        &[entry("u1", "hi"), entry("a1", "hello")],
        "sess",
        "{\"thread\":\"t1\"}",
        held.generation,
    )
    .unwrap();
    a.enqueue_outbox(&outbox_row("sess", "turn-1")).unwrap();
    assert!(a.mark_bootstrapped("sess", "engine").unwrap(), "{at}");
    assert!(
        matches!(
            b.try_acquire_lease("sess", "instance-b", 10_500, 1_000).unwrap(),
            LeaseAttempt::Busy { ref holder, expires_at_ms: 11_000 } if holder == "instance-a"
        ),
        "{at}: B got a lease A holds"
    );

    // A delivers its committed turn; B must not see it again.
    for row in a.pending_outbox("sess").unwrap() {
        a.complete_outbox(&row.session_id, &row.advancement_key)
            .unwrap();
    }
    assert!(b.pending_outbox("sess").unwrap().is_empty(), "{at}");
    assert!(!b.mark_bootstrapped("sess", "engine").unwrap(), "{at}");

    // A stalls past its expiry; B takes over and writes.
    let taken = acquire(b, "sess", "instance-b", 11_000, 1_000);
    assert!(taken.generation > held.generation, "{at}");
    assert_eq!(ids(b, "sess"), ["u1", "a1"], "{at}: B sees A's turn");
    b.record_turn(
        "sess",
        &[entry("u2", "again")],
        "sess",
        "{\"thread\":\"t2\"}",
        taken.generation,
    )
    .unwrap();
    b.enqueue_outbox(&outbox_row("sess", "turn-2")).unwrap();

    // A wakes up and tries to finish its stale turn.
    let result = a.record_turn(
        "sess",
        &[entry("u-late", "late")],
        "sess",
        "{\"thread\":\"stale\"}",
        held.generation,
    );
    assert_stale(a, result, held.generation, taken.generation);
    let result = a.save_binding("sess", "{\"thread\":\"stale\"}", held.generation);
    assert_stale(a, result, held.generation, taken.generation);
    assert_eq!(ids(a, "sess"), ["u1", "a1", "u2"], "{at}");
    assert_eq!(
        a.load_binding("sess").unwrap().unwrap().json,
        "{\"thread\":\"t2\"}",
        "{at}"
    );
    a.release_lease(&held).unwrap();
    assert!(
        matches!(
            a.try_acquire_lease("sess", "instance-a", 11_500, 1_000)
                .unwrap(),
            LeaseAttempt::Busy { .. }
        ),
        "{at}: A's stale release freed B's lease"
    );

    // B delivers its turn; afterwards neither instance has anything pending.
    let pending: Vec<_> = a
        .pending_outbox("sess")
        .unwrap()
        .into_iter()
        .map(|r| r.advancement_key)
        .collect();
    assert_eq!(pending, ["turn-2"], "{at}");
    b.complete_outbox("sess", "turn-2").unwrap();
    assert!(a.pending_outbox("sess").unwrap().is_empty(), "{at}");
    assert!(b.pending_outbox("sess").unwrap().is_empty(), "{at}");
}

/// Many holders race for one expired lease at the same instant, through the given store
/// handles (threads share them round-robin): exactly one wins, and its generation is one above
/// the previous holder's.
pub fn lease_race(stores: &[Arc<dyn StateStore>], racers: usize) {
    let at = stores[0].location();
    let old = acquire(&*stores[0], "race", "previous", 0, 10);
    let barrier = Barrier::new(racers);
    let outcomes: Vec<LeaseAttempt> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..racers)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    store
                        .try_acquire_lease("race", &format!("racer-{i}"), 100, 1_000)
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|o| match o {
            LeaseAttempt::Acquired(lease) => Some(lease),
            LeaseAttempt::Busy { .. } => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{at}: winners {winners:?}");
    assert_eq!(winners[0].generation, old.generation + 1, "{at}");
    for outcome in &outcomes {
        if let LeaseAttempt::Busy { holder, .. } = outcome {
            assert_eq!(holder, &winners[0].holder, "{at}: busy names the winner");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    /// The in-memory SQLite store passes every single-store check (the integration tests run
    /// the suite on every store; this keeps `--lib` runs covering it too).
    #[test]
    fn sqlite_memory_passes() {
        run_all(&|| Arc::new(SqliteStore::in_memory().unwrap()) as Arc<dyn StateStore>);
    }
}
