//! Conformance: several store handles on one database (two instances, a lease race).

use std::sync::{Arc, Barrier};

use super::{acquire, assert_stale, entry, ids, outbox_row};
use crate::store::StateStoreExt;
use crate::store::{Lease, LeaseAttempt, StateStore};

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
