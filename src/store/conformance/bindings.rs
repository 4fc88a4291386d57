//! Conformance: bindings, fenced by the lease generation, and whole turns recorded with them.

use super::{acquire, assert_stale, entry, ids, outbox_row};
use crate::store::StateStoreExt;
use crate::store::{LeaseAttempt, StateStore};

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
