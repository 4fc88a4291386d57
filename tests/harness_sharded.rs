//! The harness on a SQLite store split by session (`store.shards`): every session's state —
//! lease, binding, transcript, outbox, session id — lives on the one shard its key hashes to,
//! turns continue across instances sharing the files, a reset and the durable-turn outbox stay
//! on the session's shard, and retention and row counts cover every shard.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxbridge::backend::MockBackend;
use ctxbridge::contract::*;
use ctxbridge::harness::{Harness, TurnSpec};
use ctxbridge::store::StateStoreExt;
use ctxbridge::store::{shard_index, ShardedSqliteStore, StateStore, SweepRequest};
use support::*;

/// A two-shard store in a temp dir, with a mock backend keeping its threads on shard 0.
struct ShardedRig {
    dir: tempfile::TempDir,
    store: Arc<ShardedSqliteStore>,
    backend: MockBackend,
}

impl ShardedRig {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ShardedSqliteStore::open(dir.path().join("state.db"), 2).unwrap());
        let backend = MockBackend::with_store(store.clone());
        ShardedRig {
            dir,
            store,
            backend,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    /// A harness on the rig's store (another store handle on the same files when `reopen`:
    /// another process).
    fn harness(&self, engine: Option<&Arc<ScriptEngine>>, reopen: bool) -> Harness {
        let store: Arc<dyn StateStore> = if reopen {
            Arc::new(ShardedSqliteStore::open(self.path(), 2).unwrap())
        } else {
            self.store.clone()
        };
        build_harness_on(engine, cfg(), store, self.backend.clone())
    }

    /// The shard holding `key`, and the other one.
    fn shards_of(&self, key: &str) -> (&dyn StateStore, &dyn StateStore) {
        let i = shard_index(key, 2);
        let shards = self.store.shards();
        (&*shards[i], &*shards[1 - i])
    }
}

/// Session keys `sharded-0`, `sharded-1`, … up to `n`.
fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("sharded-{i}")).collect()
}

fn binding_key(h: &Harness, key: &str) -> String {
    h.binding_key_for(key)
}

async fn turn_on(h: &Harness, key: &str, prompt: &str) -> ctxbridge::harness::TurnReport {
    h.turn(TurnSpec::new(key, prompt))
        .await
        .unwrap_or_else(|e| panic!("turn {prompt:?} of {key} failed: {e}"))
}

fn exists(path: &Path) -> bool {
    path.try_exists().unwrap()
}

/// Sessions land on both shards; each keeps one thread projected once for its epoch, and its
/// binding, transcript and lease are on its own shard only; the store's row counts add up the
/// shards.
#[tokio::test]
async fn sessions_spread_over_the_shards_each_whole_on_its_own() {
    let rig = ShardedRig::new();
    assert!(exists(&rig.path()) && exists(&rig.dir.path().join("state.shard1.db")));
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), false);
    let keys = keys(12);
    for key in &keys {
        let mut threads = Vec::new();
        for (i, prompt) in ["one", "two", "three"].iter().enumerate() {
            let report = turn_on(&h, key, prompt).await;
            assert_eq!(report.projected, i == 0, "{key} turn {i}");
            threads.push(report.thread_id);
        }
        assert!(
            threads.windows(2).all(|w| w[0] == w[1]),
            "{key}: {threads:?}"
        );
        assert_eq!(h.transcript(key).unwrap().len(), 6, "{key}");

        let (own, other) = rig.shards_of(key);
        let bkey = binding_key(&h, key);
        assert!(own.load_binding(&bkey).unwrap().is_some(), "{key}");
        assert!(other.load_binding(&bkey).unwrap().is_none(), "{key}");
        assert_eq!(own.load_transcript(key).unwrap().len(), 6, "{key}");
        assert!(other.load_transcript(key).unwrap().is_empty(), "{key}");
        assert!(own.is_bootstrapped(key, ENGINE_ID).unwrap(), "{key}");
        assert!(
            !other.is_bootstrapped(key, ENGINE_ID).unwrap(),
            "{key}: bootstrap mark on the wrong shard"
        );
    }
    let per_shard: Vec<u64> = rig
        .store
        .shards()
        .iter()
        .map(|s| s.stats().unwrap().bindings)
        .collect();
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");
    let expected: Vec<u64> = (0..2)
        .map(|i| keys.iter().filter(|k| shard_index(k, 2) == i).count() as u64)
        .collect();
    assert_eq!(per_shard, expected);
    let total = rig.store.stats().unwrap();
    assert_eq!(total.bindings, 12);
    assert_eq!(total.transcript_entries, 12 * 6);
    assert!(total.oldest_session_ms.is_some());
}

/// Two instances on the same shard files take turns on one session: the session keeps its
/// thread, the second instance reuses the first's projection, and the transcript holds every
/// turn once.
#[tokio::test]
async fn instances_sharing_the_shards_continue_each_others_sessions() {
    let rig = ShardedRig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let a = rig.harness(Some(&engine), false);
    let b = rig.harness(Some(&engine), true);
    for key in keys(4) {
        let first = turn_on(&a, &key, "one").await;
        let second = turn_on(&b, &key, "two").await;
        let third = turn_on(&a, &key, "three").await;
        assert!(
            first.projected && !second.projected && !third.projected,
            "{key}"
        );
        assert_eq!(first.thread_id, second.thread_id, "{key}");
        assert_eq!(second.thread_id, third.thread_id, "{key}");
        assert_eq!(b.transcript(&key).unwrap().len(), 6, "{key}");
        let (own, _) = rig.shards_of(&key);
        let lease = own
            .try_acquire_lease(&binding_key(&a, &key), "probe", u64::MAX / 4, 1_000)
            .unwrap();
        assert!(
            matches!(lease, ctxbridge::store::LeaseAttempt::Acquired(ref l) if l.generation > 3),
            "{key}: the session's leases were taken on its own shard: {lease:?}"
        );
    }
}

/// A durable engine that does not settle the first two commits: a reset delivers what it can,
/// carries the undelivered commit to the next session id on the same shard, and the next turn
/// delivers it; the next session id is kept on the session's shard.
#[tokio::test]
async fn a_reset_keeps_the_session_on_its_shard() {
    let rig = ShardedRig::new();
    let engine = ScriptEngine::bootstrap("e1");
    engine.add_methods(&[EngineMethod::CommitTurn]);
    engine.script().info.transcript_semantics = Some(TranscriptSemantics {
        current_turn_fence: Some(CURRENT_TURN_FENCE_V1.into()),
        turn_advancement_idempotency: Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1.into()),
    });
    for _ in 0..2 {
        engine
            .script()
            .commit_statuses
            .push_back("accepted-later".into());
    }
    let h = rig.harness(Some(&engine), false);
    let key = "sharded-reset";
    let (own, other) = rig.shards_of(key);
    turn_on(&h, key, "one").await;
    assert_eq!(own.pending_outbox(key).unwrap().len(), 1);

    let report = h.reset_session(key).await.unwrap();
    let next = report.next_session_id.clone();
    assert!(own.pending_outbox(key).unwrap().is_empty());
    assert_eq!(own.pending_outbox(&next).unwrap().len(), 1);
    assert!(other.pending_outbox(&next).unwrap().is_empty());
    assert_eq!(
        own.load_document("session", key).unwrap().as_deref(),
        Some(next.as_str())
    );
    assert_eq!(other.load_document("session", key).unwrap(), None);

    let after = turn_on(&h, key, "two").await;
    assert!(after.projected, "a reset session starts a new thread");
    assert!(own.pending_outbox(&next).unwrap().is_empty());
    assert_eq!(own.load_transcript(&next).unwrap().len(), 2);
    assert!(own.load_transcript(key).unwrap().is_empty());
    let committed = engine
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::CommitTurn { status, .. } if status == "committed"))
        .count();
    assert_eq!(committed, 2, "the carried commit and the new turn's");
}

/// A retention sweep through the sharded store removes idle sessions of every shard, within
/// one batch limit over all of them, and names each swept session.
#[tokio::test]
async fn a_retention_sweep_covers_every_shard() {
    let rig = ShardedRig::new();
    let h = rig.harness(None, false);
    let keys = keys(6);
    for key in &keys {
        turn_on(&h, key, "one").await;
    }
    let everything = SweepRequest {
        idle_before_ms: u64::MAX / 2,
        limit: 1,
        document_namespaces: Vec::new(),
    };
    let one = rig.store.sweep_idle(&everything).unwrap();
    assert_eq!(one.keys, 1, "{one:?}");
    let rest = rig
        .store
        .sweep_idle(&SweepRequest {
            limit: 1_000,
            ..everything
        })
        .unwrap();
    assert!(rest.keys < 1_000);
    let mut swept: Vec<String> = one
        .swept_sessions
        .iter()
        .chain(&rest.swept_sessions)
        .map(|s| s.session_id.clone())
        .collect();
    swept.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(swept, expected);
    assert_eq!(one.bindings + rest.bindings, 6);
    for shard in rig.store.shards() {
        let stats = shard.stats().unwrap();
        assert_eq!((stats.bindings, stats.transcript_entries), (0, 0));
    }
}
