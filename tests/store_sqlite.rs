//! The SQLite state store, in memory and on disk, runs the shared store conformance suite
//! (`store::conformance`), including the multi-instance checks on one database file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ctxbridge::store::{conformance, SqliteStore, StateStore};

/// A fresh on-disk store in its own temporary directory (kept alive with the store).
struct FileStore {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: Arc<dyn StateStore>,
}

impl FileStore {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        FileStore {
            _dir: dir,
            path,
            store,
        }
    }

    /// Another handle on the same file (another process).
    fn reopen(&self) -> Arc<dyn StateStore> {
        Arc::new(SqliteStore::open(&self.path).unwrap())
    }
}

fn memory() -> Arc<dyn StateStore> {
    Arc::new(SqliteStore::in_memory().unwrap())
}

macro_rules! conformance_tests {
    ($($check:ident),* $(,)?) => {
        /// The names this file runs, to compare with the suite's list.
        const RUN_HERE: &[&str] = &[$(stringify!($check)),*];

        mod memory {
            $(
                /// The in-memory SQLite store passes the conformance check of this name.
                #[test]
                fn $check() {
                    ctxbridge::store::conformance::$check(&*super::memory());
                }
            )*
        }

        mod file {
            $(
                /// The file-backed SQLite store passes the conformance check of this name.
                #[test]
                fn $check() {
                    ctxbridge::store::conformance::$check(&*super::FileStore::new().store);
                }
            )*
        }
    };
}

conformance_tests!(
    binding_round_trip,
    fenced_save_is_refused,
    record_turn_is_atomic_and_fenced,
    record_turn_queues_its_commit,
    transcript_appends_in_order,
    transcript_rewrite_is_atomic,
    outbox_queue,
    outbox_delivers_once,
    quarantine_records,
    bootstrap_marks,
    delete_session,
    outbox_moves_to_the_next_session,
    lease_lifecycle,
    dead_holder_is_taken_over_at_once,
    heartbeat_extends_expiry,
    documents,
    retention_sweep,
    sweep_is_bounded,
    swept_lease_is_reborn_above_its_generations,
    store_stats,
    submitted_writes,
);

/// This file runs every single-store check of the suite (none added there and forgotten here).
#[test]
fn every_check_runs() {
    let suite: Vec<&str> = conformance::CHECKS.iter().map(|(name, _)| *name).collect();
    assert_eq!(RUN_HERE, suite.as_slice());
}

/// Two handles on one SQLite file behave as two instances: leases, fencing and the outbox hold
/// across them.
#[test]
fn two_instances_on_one_file() {
    let db = FileStore::new();
    conformance::two_instances(&*db.store, &*db.reopen());
}

/// Racing holders on one expired lease, through three handles on one file: exactly one wins.
#[test]
fn lease_race_on_one_file() {
    let db = FileStore::new();
    conformance::lease_race(&[db.store.clone(), db.reopen(), db.reopen()], 12);
}

/// Racing holders on one expired lease through one shared in-memory store: exactly one wins.
#[test]
fn lease_race_in_memory() {
    conformance::lease_race(&[memory()], 12);
}
