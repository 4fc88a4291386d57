//! Conformance: the retention sweep (what it removes and keeps, reborn lease generations,
//! its bound) and the row counts of `stats`.

use super::{acquire, assert_stale, entry, ids, outbox_row};
use crate::store::StateStoreExt;
use crate::store::{StateStore, SweepReport, SweepRequest, SweptSession};

/// Milliseconds since the Unix epoch by this process's clock.
pub(super) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Waits until the clock has moved past `instant` by a few milliseconds (writes before and
/// after get distinct activity times, on the store's clock as on ours), then returns the time.
pub(super) fn tick_past(instant: u64) -> u64 {
    while wall_ms() <= instant + 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    wall_ms()
}

pub(super) fn sweep(store: &dyn StateStore, idle_before_ms: u64, limit: usize) -> SweepReport {
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
