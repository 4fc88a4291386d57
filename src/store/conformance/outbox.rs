//! Conformance: the durable-turn outbox (queueing, delivering once, moving to the next
//! session).

use super::outbox_row;
use super::retention::{sweep, tick_past, wall_ms};
use crate::store::StateStore;
use crate::store::StateStoreExt;

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
