//! Where each backend thread of a session begins in its transcript (the thread history that
//! `serve` shows a client its whole conversation from): a turn that starts a new thread records
//! it with the turn's own record, in the same store transaction, not in a write of its own
//! before the model is asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use ctxbridge::backend::MockBackend;
use ctxbridge::store::SqliteStore;
use support::*;

/// A turn on a reused thread and a turn that rotates to a new epoch's thread run the same
/// number of write transactions; the rotating turn's one more write (the history) joins its
/// record, and the history says where the new thread begins: after the four messages of the
/// two turns before it.
#[tokio::test]
async fn a_new_threads_start_is_recorded_with_its_first_turn() {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let engine = ScriptEngine::bootstrap("e1");
    engine.set_epoch("e1", None);
    let h = build_harness_on(Some(&engine), cfg(), store.clone(), MockBackend::new());
    let t1 = turn(&h, "one").await;
    let before = store.held_times();
    let t2 = turn(&h, "two").await;
    let reused = store.held_times().since(&before);
    assert_eq!(t2.thread_id, t1.thread_id);
    assert!(
        h.thread_history("s").unwrap().threads.is_empty(),
        "a session's first thread begins at 0: nothing recorded"
    );

    engine.set_epoch("e2", None);
    let before = store.held_times();
    let t3 = turn(&h, "three").await;
    let rotated = store.held_times().since(&before);
    assert_ne!(t3.thread_id, t2.thread_id, "a new epoch, a new thread");
    assert_eq!(
        rotated.queued_writes,
        reused.queued_writes + 1,
        "the history is one more queued write"
    );
    assert_eq!(
        rotated.write_batches, reused.write_batches,
        "and no more transactions: it joins the record's"
    );
    let history = h.thread_history("s").unwrap();
    assert_eq!(
        history.threads.into_iter().collect::<Vec<_>>(),
        vec![(t3.thread_id.clone(), 4)]
    );
    h.shutdown().await;
}
