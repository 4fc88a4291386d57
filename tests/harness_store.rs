//! State store failures (docs/architecture.md#failure-handling): a corrupt or locked store gives a clear error naming the
//! file, and nothing starts over.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use ctxbridge::app;
use ctxbridge::config::Config;
use ctxbridge::harness::{HarnessError, TurnSpec};
use ctxbridge::store::{SqliteStore, StoreError};
use support::*;

/// A file that is not a database is refused with its path named, by `SqliteStore::open` and by
/// `app::open`; the file is left exactly as it was.
#[tokio::test]
async fn corrupt_store_is_a_clear_error_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let garbage = b"this is not a sqlite database, but somebody's notes\n".repeat(200);
    std::fs::write(&path, &garbage).unwrap();

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("refusing to start over"), "{text}");

    let mut config = Config::default();
    config.store.path = path.clone();
    let err = app::open(&config).await.err().expect("app::open must fail");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

/// A store locked by another process gives a "locked" error naming the file, for a turn and for
/// opening; once the lock is gone the earlier state is all there.
#[tokio::test]
async fn locked_store_is_a_clear_error_and_loses_nothing() {
    let rig = Rig::new();
    let path = rig.path();
    let before = {
        let h = rig.harness(None, cfg());
        turn(&h, "one").await
    };

    let store = std::sync::Arc::new(
        SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap(),
    );
    let h = build_harness(None, cfg(), store, rig.backend.clone());
    let locker = rusqlite::Connection::open(&path).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let err = h.turn(TurnSpec::new("s", "two")).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("locked"), "{text}");
    assert!(
        matches!(
            &err,
            HarnessError::SessionBusy(_) | HarnessError::Store { .. }
        ),
        "{err:?}"
    );

    let err = SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));

    locker.execute_batch("ROLLBACK").unwrap();
    let after = turn(&h, "two").await;
    assert_eq!(after.thread_id, before.thread_id);
    assert_eq!(h.transcript("s").unwrap().len(), 4);
}
