//! Conformance: session leases (lifecycle, takeover of a dead holder, heartbeat).

use super::{acquire, assert_stale};
use crate::store::StateStoreExt;
use crate::store::{LeaseAttempt, StateStore};

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
