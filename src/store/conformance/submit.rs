//! Conformance: writes submitted to the queue (`submit`, `submit_detached`) do what the
//! synchronous methods do.

use super::{assert_stale, entry, ids, outbox_row};
use crate::store::StateStoreExt;
use crate::store::{LeaseAttempt, OutboxRow, StateStore, TurnWrite};

/// Writes submitted through [`StateStore::submit`] (and detached) do what the synchronous
/// methods do: a lease is acquired (busy for another holder), a recorded turn queues its
/// commit, a stale holder's record is refused, a commit is completed or its failure counted,
/// and a released lease frees the session.
pub fn submitted_writes(store: &dyn StateStore) {
    let at = store.location();
    let run = |write: TurnWrite| futures::executor::block_on(store.submit(write));
    let acquire = |holder: &str, now_ms: u64| {
        run(TurnWrite::acquire("k", holder, None, now_ms, 60_000, None))
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

/// The blocking conveniences answer when called on a runtime's own thread (a current-thread
/// runtime, as in a `#[tokio::test]` or the harness's heartbeat): `WriteMode::Now` needs no
/// runtime to answer, so a store that waited on the caller's runtime would hang here. A
/// grouped write submitted on the same thread is answered too.
pub fn blocking_writes_on_a_runtime_thread(store: &dyn StateStore) {
    let at = store.location();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let LeaseAttempt::Acquired(lease) = store.try_acquire_lease("k", "p1", 0, 60_000).unwrap()
        else {
            panic!("{at}: lease refused");
        };
        assert!(store.renew_lease(&lease, 1, 60_000).unwrap(), "{at}");
        store.save_document("ns", "key", "\"v\"").unwrap();
        assert!(store.mark_bootstrapped("s", "e").unwrap(), "{at}");
        let grouped = store
            .submit(TurnWrite::RecordTurn {
                session_id: "s".into(),
                entries: vec![entry("s-1", "hello")],
                binding_key: "k".into(),
                binding_json: "{}".into(),
                lease_generation: lease.generation,
                commit: None,
            })
            .await;
        assert!(grouped.is_ok(), "{at}: {grouped:?}");
        store.release_lease(&lease).unwrap();
    });
    assert_eq!(ids(store, "s"), ["s-1"], "{at}");
    assert_eq!(
        store.load_document("ns", "key").unwrap().as_deref(),
        Some("\"v\""),
        "{at}"
    );
}
