//! Conformance: session leases (lifecycle, takeover of a dead holder, heartbeat).

use super::{acquire, assert_stale, entry, outbox_row};
use crate::store::StateStoreExt;
use crate::store::{LeaseAttempt, SessionRead, SessionSnapshot, StateStore, TurnWrite};

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

/// A lease taken with a [`SessionRead`] answers, from its own transaction, what separate reads
/// of the session say once it is held: the session id (its document, or the key without
/// one), whether the outbox is empty, every bootstrap mark (sorted), the binding under the
/// lease's key, whether the transcript is empty and, for an empty one, the cursor
/// `transcript_since` hands out. A busy attempt reads nothing; a takeover reads as well.
pub fn acquisition_reads_its_session(store: &dyn StateStore) {
    let at = store.location();
    let read = |key: &str| SessionRead {
        session_key: key.into(),
        id_namespace: "ids".into(),
    };
    let acquire_reading = |key: &str, holder: &str, dead: Option<&str>, now_ms: u64| {
        let write = TurnWrite::acquire(key, holder, dead, now_ms, 100, Some(&read(key)));
        futures::executor::block_on(store.submit(write))
            .unwrap()
            .into_session_lease()
    };
    // What separate reads say of session key `key` with session id `id`.
    let separately = |key: &str, id: &str| {
        let transcript = store.transcript_since(id, None).unwrap();
        let mut bootstrapped: Vec<String> = ["alpha", "zeta", "other"]
            .into_iter()
            .filter(|engine| store.is_bootstrapped(id, engine).unwrap())
            .map(str::to_owned)
            .collect();
        bootstrapped.sort();
        SessionSnapshot {
            session_id: store
                .load_document("ids", key)
                .unwrap()
                .unwrap_or_else(|| key.to_owned()),
            outbox_empty: store.pending_outbox(id).unwrap().is_empty(),
            bootstrapped,
            binding: store.load_binding(key).unwrap(),
            transcript_empty: transcript.entries.is_empty(),
            empty_transcript_cursor: transcript.cursor.filter(|_| transcript.entries.is_empty()),
        }
    };

    // A session with everything: its id document, a recorded turn with a queued commit and a
    // binding, two bootstrap marks.
    store.save_document("ids", "k", "sid-2").unwrap();
    let first = acquire(store, "k", "a", 1_000, 100);
    store
        .record_turn_with_commit(
            "sid-2",
            &[entry("u1", "hello"), entry("a1", "hi")],
            "k",
            "{\"thread\":\"t\"}",
            first.generation,
            &outbox_row("sid-2", "turn-1"),
        )
        .unwrap();
    store.mark_bootstrapped("sid-2", "zeta").unwrap();
    store.mark_bootstrapped("sid-2", "alpha").unwrap();
    store.release_lease(&first).unwrap();
    let (attempt, snapshot) = acquire_reading("k", "b", None, 1_010);
    let LeaseAttempt::Acquired(held) = attempt else {
        panic!("{at}: a free lease was refused: {attempt:?}");
    };
    assert_eq!(held.generation, first.generation + 1, "{at}");
    let snapshot = snapshot.unwrap_or_else(|| panic!("{at}: a lease taken read nothing"));
    assert_eq!(
        snapshot,
        separately("k", "sid-2"),
        "{at}: a session with state"
    );
    assert_eq!(
        (
            snapshot.session_id.as_str(),
            snapshot.outbox_empty,
            snapshot.bootstrapped.as_slice(),
            snapshot.transcript_empty,
            snapshot.empty_transcript_cursor,
        ),
        (
            "sid-2",
            false,
            ["alpha", "zeta"].map(String::from).as_slice(),
            false,
            None
        ),
        "{at}"
    );
    assert_eq!(
        snapshot.binding.map(|b| (b.json, b.generation)),
        Some(("{\"thread\":\"t\"}".to_owned(), first.generation)),
        "{at}"
    );

    // Held by another: busy, nothing read.
    let (busy, nothing) = acquire_reading("k", "c", None, 1_020);
    assert!(
        matches!(busy, LeaseAttempt::Busy { ref holder, .. } if holder == "b"),
        "{at}: a held lease was handed out: {busy:?}"
    );
    assert_eq!(nothing, None, "{at}: a busy attempt read the session");

    // A session nobody wrote: its key is its id, everything is empty.
    let (attempt, snapshot) = acquire_reading("new", "c", None, 1_030);
    assert!(matches!(attempt, LeaseAttempt::Acquired(_)), "{at}");
    let snapshot = snapshot.unwrap_or_else(|| panic!("{at}: a lease taken read nothing"));
    assert_eq!(snapshot, separately("new", "new"), "{at}: a new session");
    assert!(
        snapshot.transcript_empty && snapshot.outbox_empty && snapshot.binding.is_none(),
        "{at}: {snapshot:?}"
    );

    // A session reset (its transcript removed, the outbox delivered), taken over from its
    // holder, known dead: read as well, and the empty transcript's cursor is where the store
    // numbers its next entry.
    store.delete_session("sid-2").unwrap();
    store.complete_outbox("sid-2", "turn-1").unwrap();
    let (attempt, snapshot) = acquire_reading("k", "d", Some("b"), 1_040);
    assert!(
        matches!(attempt, LeaseAttempt::Acquired(ref l) if l.holder == "d"),
        "{at}: the dead holder's lease was not taken over: {attempt:?}"
    );
    let snapshot = snapshot.unwrap_or_else(|| panic!("{at}: a takeover read nothing"));
    assert_eq!(snapshot, separately("k", "sid-2"), "{at}: a reset session");
    assert!(
        snapshot.transcript_empty && snapshot.outbox_empty && snapshot.bootstrapped.is_empty(),
        "{at}: {snapshot:?}"
    );
}
