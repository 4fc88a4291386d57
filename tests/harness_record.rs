//! An answered turn is never thrown away: when the store stays locked while the turn is
//! recorded, the harness retries, then fails with the reply kept in the error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use ctxbridge::backend::MockBackend;
use ctxbridge::harness::{HarnessError, TurnSpec};
use ctxbridge::store::{SqliteStore, StateStore, StoreError};
use support::*;

/// The store is locked by another connection after the engine assembled and before the turn is
/// recorded: the turn fails as `NotRecorded` carrying the backend's reply and the store's
/// "locked" error, and nothing of it reaches the transcript.
#[tokio::test(flavor = "multi_thread")]
async fn an_unrecordable_answered_turn_keeps_its_reply() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Arc::new(SqliteStore::open_with_timeout(&path, Duration::from_millis(20)).unwrap());
    let engine = ScriptEngine::bootstrap("e1");
    engine.script().block_assemble_at = Some(1);
    let harness = Arc::new(build_harness(
        Some(&engine),
        cfg(),
        store.clone(),
        MockBackend::new(),
    ));
    let running = {
        let harness = harness.clone();
        tokio::spawn(async move { harness.turn(TurnSpec::new("s", "hello")).await })
    };
    engine.assemble_entered().await;
    let locker = rusqlite::Connection::open(&path).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    engine.release_assemble();
    let err = running.await.unwrap().unwrap_err();
    locker.execute_batch("ROLLBACK").unwrap();
    match &err {
        HarnessError::NotRecorded { reply, source, .. } => {
            assert!(!reply.is_empty());
            assert!(matches!(**source, StoreError::Locked { .. }), "{source}");
        }
        other => panic!("expected NotRecorded, got {other:?}"),
    }
    assert!(err.to_string().contains("could not be recorded"), "{err}");
    assert!(store.load_transcript("s").unwrap().is_empty());
}
