//! The SQLite state store, in memory and on disk, runs the shared store conformance suite
//! (`store::conformance`), including the multi-instance checks on one database file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ctxbridge::store::StateStoreExt;
use ctxbridge::store::{
    conformance, open_store, shard_index, ShardedSqliteStore, SqliteStore, StateStore, StoreError,
    StoreTarget, SweepRequest, TranscriptEntry,
};

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

/// A fresh two-shard store on disk (kept alive with the store).
struct ShardedFile {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: Arc<ShardedSqliteStore>,
}

impl ShardedFile {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Arc::new(ShardedSqliteStore::open(&path, 2).unwrap());
        ShardedFile {
            _dir: dir,
            path,
            store,
        }
    }

    /// Another handle on the same files (another process).
    fn reopen(&self) -> Arc<ShardedSqliteStore> {
        Arc::new(ShardedSqliteStore::open(&self.path, 2).unwrap())
    }
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

        mod sharded {
            $(
                /// A two-shard store on disk passes the conformance check of this name, on
                /// itself (calls made on the sharded store go to shard 0; its row counts and
                /// sweeps cover both) and on the shard of a session key.
                #[test]
                fn $check() {
                    let db = super::ShardedFile::new();
                    ctxbridge::store::conformance::$check(&*db.store);
                    let db = super::ShardedFile::new();
                    let shard = ctxbridge::store::StateStore::session_shard(&*db.store, "k").unwrap();
                    ctxbridge::store::conformance::$check(&*shard);
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
    acquisition_reads_its_session,
    documents,
    retention_sweep,
    sweep_is_bounded,
    swept_lease_is_reborn_above_its_generations,
    store_stats,
    submitted_writes,
    blocking_writes_on_a_runtime_thread,
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

/// Two handles on one sharded store behave as two instances on each shard, reached as the
/// shard of a session key.
#[test]
fn two_instances_on_one_sharded_store() {
    let db = ShardedFile::new();
    let other = db.reopen();
    for shard in 0..2 {
        let key = (0..)
            .map(|i| format!("key-{i}"))
            .find(|k| shard_index(k, 2) == shard)
            .unwrap();
        conformance::two_instances(
            &*db.store.session_shard(&key).unwrap(),
            &*other.session_shard(&key).unwrap(),
        );
    }
}

/// Racing holders on one expired lease through three handles on one sharded store: exactly
/// one wins, on the session's shard.
#[test]
fn lease_race_on_one_sharded_store() {
    let db = ShardedFile::new();
    let shard = |s: &Arc<ShardedSqliteStore>| s.session_shard("race").unwrap();
    conformance::lease_race(
        &[shard(&db.store), shard(&db.reopen()), shard(&db.reopen())],
        12,
    );
}

fn layout_error<T>(result: Result<T, StoreError>) -> String {
    match result {
        Err(e @ StoreError::ShardLayout { .. }) => e.to_string(),
        Err(other) => panic!("expected a shard layout error, got {other:?}"),
        Ok(_) => panic!("expected a shard layout error, the store opened"),
    }
}

/// The shard count is fixed when the store is created: another count, or opening it
/// unsharded, is refused naming the file and the recorded count; the same count opens.
#[test]
fn the_shard_count_cannot_change() {
    let db = ShardedFile::new();
    let path = db.path.display().to_string();
    let text = layout_error(ShardedSqliteStore::open(&db.path, 3));
    assert!(
        text.contains(&path) && text.contains("created with 2 shards"),
        "{text}"
    );
    assert!(text.contains("store.shards: 2"), "{text}");
    let text = layout_error(open_store(&StoreTarget::Sqlite(db.path.clone())));
    assert!(
        text.contains(&path) && text.contains("store.shards: 2"),
        "{text}"
    );
    assert!(open_store(&StoreTarget::ShardedSqlite {
        path: db.path.clone(),
        shards: 2,
    })
    .is_ok());
    for bad in [0, 1, ctxbridge::store::MAX_SHARDS + 1] {
        let text = layout_error(ShardedSqliteStore::open(&db.path, bad));
        assert!(text.contains(&format!("not {bad}")), "{text}");
    }
}

/// A file holding an unsharded store's sessions does not become shard 0 (its sessions would
/// be looked for on other shards); an unsharded store's file that holds none may.
#[test]
fn an_unsharded_store_with_sessions_is_not_sharded() {
    let dir = tempfile::tempdir().unwrap();
    let used = dir.path().join("used.db");
    {
        let store = SqliteStore::open(&used).unwrap();
        store
            .append_transcript(
                "s",
                &[TranscriptEntry {
                    entry_id: "e1".into(),
                    message: ctxbridge::contract::AgentMessage::user("hi"),
                }],
            )
            .unwrap();
    }
    let text = layout_error(ShardedSqliteStore::open(&used, 2));
    assert!(text.contains("unsharded store"), "{text}");
    assert!(!dir.path().join("used.shard1.db").exists());
    // Still usable unsharded, with its session.
    let store = open_store(&StoreTarget::Sqlite(used.clone())).unwrap();
    assert_eq!(store.load_transcript("s").unwrap().len(), 1);

    let empty = dir.path().join("empty.db");
    drop(SqliteStore::open(&empty).unwrap());
    assert!(ShardedSqliteStore::open(&empty, 4).is_ok());
    assert!(dir.path().join("empty.shard3.db").exists());
}

/// In memory too, the sharded store puts each key's state on its shard, and its row counts and
/// sweeps add up all shards.
#[test]
fn in_memory_shards_count_and_sweep_together() {
    let store = ShardedSqliteStore::in_memory(2).unwrap();
    let keys: Vec<String> = (0..8).map(|i| format!("key-{i}")).collect();
    for key in &keys {
        let shard = store.session_shard(key).unwrap();
        shard
            .append_transcript(
                key,
                &[TranscriptEntry {
                    entry_id: "e1".into(),
                    message: ctxbridge::contract::AgentMessage::user("hi"),
                }],
            )
            .unwrap();
    }
    for (i, shard) in store.shards().iter().enumerate() {
        let here = keys.iter().filter(|k| shard_index(k, 2) == i).count() as u64;
        assert_eq!(shard.stats().unwrap().sessions, here);
    }
    assert_eq!(store.stats().unwrap().sessions, 8);
    let report = store
        .sweep_idle(&SweepRequest {
            idle_before_ms: u64::MAX / 2,
            limit: 100,
            document_namespaces: Vec::new(),
        })
        .unwrap();
    assert_eq!(report.sessions, 8);
    assert_eq!(store.stats().unwrap().sessions, 0);
}
