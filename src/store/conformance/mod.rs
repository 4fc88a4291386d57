//! The shared state-store conformance suite (in the manner of object_store's `integration.rs`):
//! every [`StateStore`] — SQLite in memory, SQLite on disk, PostgreSQL — runs these same checks
//! from its own test file, so the guarantees the harness relies on are stated once.
//!
//! Each check takes a fresh, empty store (the multi-instance checks take several handles on one
//! database) and panics with a message naming the store and what it did wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bindings;
mod instances;
mod leases;
mod outbox;
mod records;
mod retention;
mod submit;
mod transcript;

use std::sync::Arc;

use crate::contract::AgentMessage;

use super::{Lease, LeaseAttempt, OutboxRow, StateStore, StoreError, StoreStats, TranscriptEntry};

use crate::store::StateStoreExt;
pub use bindings::{
    binding_round_trip, fenced_save_is_refused, record_turn_is_atomic_and_fenced,
    record_turn_queues_its_commit,
};
pub use instances::{lease_race, two_instances};
pub use leases::{
    acquisition_reads_its_session, dead_holder_is_taken_over_at_once, heartbeat_extends_expiry,
    lease_lifecycle,
};
pub use outbox::{outbox_delivers_once, outbox_moves_to_the_next_session, outbox_queue};
pub use records::{bootstrap_marks, documents, quarantine_records};
pub use retention::{
    retention_sweep, store_stats, sweep_is_bounded, swept_lease_is_reborn_above_its_generations,
};
pub use submit::{blocking_writes_on_a_runtime_thread, submitted_writes};
pub use transcript::{delete_session, transcript_appends_in_order, transcript_rewrite_is_atomic};

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
    (
        "acquisition_reads_its_session",
        acquisition_reads_its_session,
    ),
    ("documents", documents),
    ("retention_sweep", retention_sweep),
    ("sweep_is_bounded", sweep_is_bounded),
    (
        "swept_lease_is_reborn_above_its_generations",
        swept_lease_is_reborn_above_its_generations,
    ),
    ("store_stats", store_stats),
    ("submitted_writes", submitted_writes),
    (
        "blocking_writes_on_a_runtime_thread",
        blocking_writes_on_a_runtime_thread,
    ),
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
