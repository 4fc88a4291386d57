//! Tests of the SQLite store's own behaviour: durability, schema upgrades, corrupt and locked
//! files, incremental transcript reads, leases, concurrent opens, the write queue and the
//! activity dates.

use super::schema::SCHEMA_VERSION;
use super::*;
use crate::contract::AgentMessage;
use crate::store::{LeaseAttempt, StateStoreExt, WriteOutcome};
use crate::util::lock;

/// A queued acquire of session `k`'s lease by `holder` at `now_ms`, for a minute.
fn acquire_k(holder: &str, now_ms: u64) -> TurnWrite {
    TurnWrite::acquire("k", holder, None, now_ms, 60_000, None)
}

fn entry(id: &str, text: &str) -> TranscriptEntry {
    TranscriptEntry {
        entry_id: id.into(),
        message: AgentMessage::user(text),
    }
}

// The store-generic checks (transcript, rewrite, leases and fencing, record_turn, outbox)
// are in the shared conformance suite, `store::conformance`, run on every store.

/// State survives reopening the file.
#[test]
fn durable_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/state.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        s.save_binding("k", "{\"a\":1}", 0).unwrap();
        assert!(s.mark_bootstrapped("sess", "eng").unwrap());
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.load_binding("k").unwrap().unwrap().json, "{\"a\":1}");
    assert!(!s.mark_bootstrapped("sess", "eng").unwrap());
}

/// A file an earlier build wrote (schema 2, no lease floor) opens with its state intact,
/// gains the (empty) lease floor table and is marked schema 3.
#[test]
fn schema_2_file_gains_the_lease_floor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        s.save_binding("k", "{\"a\":1}", 0).unwrap();
    }
    {
        let old = Connection::open(&path).unwrap();
        old.execute_batch("DROP TABLE lease_floor; PRAGMA user_version=2;")
            .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.load_binding("k").unwrap().unwrap().json, "{\"a\":1}");
    let version: i64 = s
        .with_reader("read version", |c| {
            c.query_row("PRAGMA user_version", [], |r| r.get(0))
        })
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let floor: i64 = s
        .with_reader("count floor rows", |c| {
            c.query_row("SELECT count(*) FROM lease_floor", [], |r| r.get(0))
        })
        .unwrap();
    assert_eq!(floor, 0, "no sweep yet: no floor");
}

/// A file that is not a database is refused with an error naming it, and left untouched.
#[test]
fn corrupt_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let garbage = vec![b'x'; 8192];
    std::fs::write(&path, &garbage).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("state.db"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

/// A database held under an exclusive lock by another connection gives `Locked`.
#[test]
fn locked_database_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s = SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let err = s.save_binding("k", "{}", 0).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("locked"), "{err}");
}

/// An incremental read returns only the entries appended after the cursor; after a
/// rewrite the old cursor is stale and the whole (rewritten) transcript comes back.
#[test]
fn transcript_since_reads_increments_and_notices_rewrites() {
    let s = SqliteStore::in_memory().unwrap();
    s.append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    let first = s.transcript_since("s", None).unwrap();
    assert!(!first.appended);
    assert_eq!(first.entries.len(), 2);
    let cursor = first.cursor.unwrap();
    let none_new = s.transcript_since("s", Some(cursor)).unwrap();
    assert!(none_new.appended);
    assert!(none_new.entries.is_empty());
    s.append_transcript("s", &[entry("c", "3")]).unwrap();
    let more = s.transcript_since("s", Some(cursor)).unwrap();
    assert!(more.appended);
    let ids: Vec<_> = more.entries.iter().map(|e| e.entry_id.as_str()).collect();
    assert_eq!(ids, ["c"]);
    let cursor = more.cursor.unwrap();
    s.replace_transcript_entries("s", &[entry("a", "one")])
        .unwrap();
    let after = s.transcript_since("s", Some(cursor)).unwrap();
    assert!(!after.appended, "a rewrite invalidates the cursor");
    assert_eq!(after.entries.len(), 3);
    assert_eq!(after.entries[0].message.plain_text(), "one");
}

/// A copy whose entries were removed (a reset, or a retention sweep of the idle session)
/// is stale: the next read returns the whole new transcript, not only what follows the
/// old cursor (numbering starts again after a removal).
#[test]
fn transcript_since_notices_removed_entries() {
    let s = SqliteStore::in_memory().unwrap();
    s.append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    let cursor = s.transcript_since("s", None).unwrap().cursor.unwrap();
    assert_eq!(s.delete_session("s").unwrap(), 2);
    s.append_transcript("s", &[entry("c", "3")]).unwrap();
    let read = s.transcript_since("s", Some(cursor)).unwrap();
    assert!(!read.appended, "a copy of removed entries was continued");
    let ids: Vec<_> = read.entries.iter().map(|e| e.entry_id.as_str()).collect();
    assert_eq!(ids, ["c"]);
}

/// A lease held by a holder known to be dead is taken over (with a higher generation);
/// one held by anyone else is not. A renewal extends only the current holder's lease.
#[test]
fn leases_are_taken_over_and_renewed() {
    let s = SqliteStore::in_memory().unwrap();
    let LeaseAttempt::Acquired(dead) = s.try_acquire_lease("k", "dead", 0, 10_000).unwrap() else {
        panic!("lease refused");
    };
    assert!(matches!(
        s.take_over_lease("k", "someone-else", "p2", 10, 10_000)
            .unwrap(),
        LeaseAttempt::Busy { .. }
    ));
    let LeaseAttempt::Acquired(new) = s.take_over_lease("k", "dead", "p2", 10, 1_000).unwrap()
    else {
        panic!("dead holder's lease not taken over");
    };
    assert!(new.generation > dead.generation);
    assert!(!s.renew_lease(&dead, 20, 10_000).unwrap());
    assert!(s.renew_lease(&new, 20, 10_000).unwrap());
    // Renewed to 20 + 10 000: still held at 5 000.
    assert!(matches!(
        s.try_acquire_lease("k", "p3", 5_000, 1_000).unwrap(),
        LeaseAttempt::Busy { .. }
    ));
}

/// Several connections opening one fresh file at once all succeed (the schema is created
/// under the write lock, and the others wait for it).
#[test]
fn concurrent_opens_of_a_fresh_file_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let s = SqliteStore::open(&path)?;
                s.save_binding(&format!("k{i}"), "{}", 0)?;
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    for i in 0..8 {
        assert!(s.load_binding(&format!("k{i}")).unwrap().is_some());
    }
}

/// A write transaction that must wait for another connection's write lock waits for it
/// (instead of failing at once) and then commits.
#[test]
fn writes_wait_for_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s = SqliteStore::open(&path).unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        tx.send(()).unwrap();
        s.record_turn("sess", &[entry("a", "1")], "k", "{}", 0)
            .map(|()| s)
    });
    rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    other.execute_batch("COMMIT").unwrap();
    let s = writer.join().unwrap().unwrap();
    assert_eq!(s.load_transcript("sess").unwrap().len(), 1);
}

/// Writes queued while another thread runs the queue wait for it (their submitters go on
/// meanwhile), then run in one batch in submission order, each as if alone: a fenced record
/// is refused and writes nothing, a release queued before an acquire of
/// the same session frees it for that acquire, and the other writes land.
#[tokio::test]
async fn queued_writes_run_as_one_batch_in_order() {
    let s = SqliteStore::in_memory().unwrap();
    let LeaseAttempt::Acquired(old) = s.try_acquire_lease("k", "p1", 0, 60_000).unwrap() else {
        panic!("lease refused");
    };
    // Another thread is running the queue: submissions only queue.
    s.combining.store(true, Ordering::SeqCst);
    let record = |session: &str, key: &str, generation: u64| TurnWrite::RecordTurn {
        session_id: session.into(),
        entries: vec![entry(&format!("{session}-e"), "x")],
        binding_key: key.into(),
        binding_json: format!("{{\"by\":\"{session}\"}}"),
        lease_generation: generation,
        commit: None,
    };
    let released = s.submit(TurnWrite::ReleaseLease(old.clone()));
    let acquired = s.submit(acquire_k("p2", 10));
    // p1's write after p2 took the session: fenced.
    let stale = s.submit(record("stale", "k", old.generation));
    let other = s.submit(record("other", "k2", 0));
    assert!(
        s.load_binding("k2").unwrap().is_none(),
        "ran before its turn"
    );
    assert_eq!(lock(&s.queue).len(), 4);

    s.combining.store(false, Ordering::SeqCst);
    s.combine();
    assert!(lock(&s.queue).is_empty());
    released.await.unwrap();
    let WriteOutcome::Lease(LeaseAttempt::Acquired(new)) = acquired.await.unwrap() else {
        panic!("the release queued first did not free the session");
    };
    assert_eq!(new.generation, old.generation + 1);
    let err = stale.await.unwrap_err();
    assert!(
        matches!(err, StoreError::StaleGeneration { held, current, .. } if held == old.generation && current == new.generation),
        "{err:?}"
    );
    other.await.unwrap();
    assert!(
        s.load_transcript("stale").unwrap().is_empty(),
        "fenced write kept"
    );
    assert!(
        s.load_binding("k").unwrap().is_none(),
        "fenced binding kept"
    );
    assert_eq!(s.load_transcript("other").unwrap().len(), 1);
    assert_eq!(
        s.load_binding("k2").unwrap().unwrap().json,
        "{\"by\":\"other\"}"
    );
}

/// A write that fails inside a batch (here a transcript entry id the session already has)
/// gets its own error; the writes batched with it land as if alone, its binding included
/// neither half-written nor lost for the others.
#[tokio::test]
async fn a_failing_write_in_a_batch_fails_alone() {
    let s = SqliteStore::in_memory().unwrap();
    s.append_transcript("dup", &[entry("e1", "x")]).unwrap();
    s.combining.store(true, Ordering::SeqCst);
    let record = |session: &str, entry_id: &str| TurnWrite::RecordTurn {
        session_id: session.into(),
        entries: vec![entry(entry_id, "y")],
        binding_key: format!("k-{session}"),
        binding_json: "{}".into(),
        lease_generation: 0,
        commit: None,
    };
    let first = s.submit(record("a", "a1"));
    let failing = s.submit(record("dup", "e1"));
    let last = s.submit(record("b", "b1"));
    s.combining.store(false, Ordering::SeqCst);
    s.combine();
    first.await.unwrap();
    assert!(failing.await.is_err());
    last.await.unwrap();
    assert_eq!(s.load_transcript("a").unwrap().len(), 1);
    assert_eq!(s.load_transcript("b").unwrap().len(), 1);
    assert_eq!(s.load_transcript("dup").unwrap().len(), 1);
    assert!(
        s.load_binding("k-dup").unwrap().is_none(),
        "half a failed write kept"
    );
    assert!(s.load_binding("k-a").unwrap().is_some());
}

/// A turn's record of session `session` (binding `k-{session}`, one entry), as the queue runs it.
fn record_of(session: &str) -> TurnWrite {
    TurnWrite::RecordTurn {
        session_id: session.into(),
        entries: vec![entry(&format!("{session}-1"), "x")],
        binding_key: format!("k-{session}"),
        binding_json: "{}".into(),
        lease_generation: 0,
        commit: None,
    }
}

/// Submits `write` from a lane (a thread with a single-threaded runtime) while another thread
/// runs the queue; returns once the write is queued and its submitter, finding the queue
/// being run, waits for its answer (the lane's thread joins with that answer).
fn submit_from_a_lane(
    s: &SqliteStore,
    write: TurnWrite,
) -> std::thread::JoinHandle<Result<WriteOutcome, StoreError>> {
    let (waiting, waits) = std::sync::mpsc::channel();
    let s = s.clone();
    let lane = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut answer = s.submit(write);
            // It yields to the ready tasks, then finds the queue being run and waits.
            for _ in 0..2 {
                assert!(futures::poll!(&mut answer).is_pending());
            }
            waiting.send(()).unwrap();
            answer.await
        })
    });
    waits.recv().unwrap();
    lane
}

/// What is left queued after a batch is handed to a task on the runtime of the turn that
/// waits for it (a lane), not run by the thread that ran the batch: here that thread has no
/// runtime at all and runs nothing, and the write is answered on the waiting lane.
#[test]
fn a_batch_hands_the_queue_to_the_lane_that_waits_for_it() {
    let s = SqliteStore::in_memory().unwrap();
    // Another thread is running a batch: the lane's write stays queued.
    s.combining.store(true, Ordering::SeqCst);
    let lane = submit_from_a_lane(&s, record_of("b"));
    // That batch is done.
    s.combining.store(false, Ordering::SeqCst);
    assert!(s.hand_off(), "nothing handed off");
    lane.join().unwrap().unwrap();
    assert!(lock(&s.queue).is_empty());
    assert_eq!(s.load_transcript("b").unwrap().len(), 1);
}

/// The task a batch hands the queue to runs it when first polled: yielding first left the
/// turns the batch answered to the thread that ran it while the runtime's other worker idled.
#[test]
fn the_handed_task_runs_the_queue_when_first_polled() {
    let s = SqliteStore::in_memory().unwrap();
    s.combining.store(true, Ordering::SeqCst);
    let answer = s.submit(record_of("next"));
    s.combining.store(false, Ordering::SeqCst);
    let mut task = Box::pin(group_commit::next_batch(QueueRunner::new(s.clone())));
    let first = futures::executor::block_on(async { futures::poll!(&mut task) });
    assert!(
        first.is_ready(),
        "the handed task yielded before running the queue"
    );
    assert!(lock(&s.queue).is_empty(), "the queue was not run");
    futures::executor::block_on(answer).unwrap();
    assert_eq!(s.load_transcript("next").unwrap().len(), 1);
}

/// A write a thread may be blocked waiting for (`WriteMode::Now`, the synchronous calls) is
/// never handed to a task, which could need that very thread: the queue is run by the
/// thread that ran the batch, every write in it answered.
#[test]
fn a_write_waited_for_by_a_blocked_thread_is_not_handed_off() {
    let s = SqliteStore::in_memory().unwrap();
    s.combining.store(true, Ordering::SeqCst);
    let lane = submit_from_a_lane(&s, record_of("grouped"));
    let now = s.write(record_of("now"), WriteMode::Now);
    assert_eq!(lock(&s.queue).len(), 2);
    s.combining.store(false, Ordering::SeqCst);
    assert!(!s.hand_off(), "a blocking write was handed to a task");
    s.combine();
    assert!(lock(&s.queue).is_empty());
    futures::executor::block_on(now).unwrap();
    lane.join().unwrap().unwrap();
    assert_eq!(s.load_transcript("now").unwrap().len(), 1);
    assert_eq!(s.load_transcript("grouped").unwrap().len(), 1);
}

/// A queue handed to a runtime that shuts down before running it is still run, as the
/// handed task drops: no write is left waiting for a submitter that never comes.
#[test]
fn a_queue_handed_to_a_runtime_that_shuts_down_is_still_run() {
    let s = SqliteStore::in_memory().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    s.combining.store(true, Ordering::SeqCst);
    // Submitted on the runtime (so the write names it), awaited later off it.
    let answer = {
        let _on = runtime.enter();
        s.submit(record_of("late"))
    };
    s.combining.store(false, Ordering::SeqCst);
    assert!(s.hand_off());
    // The runtime never ran: its tasks are dropped unrun.
    drop(runtime);
    assert!(lock(&s.queue).is_empty(), "the handed queue was left");
    futures::executor::block_on(answer).unwrap();
    assert_eq!(s.load_transcript("late").unwrap().len(), 1);
}

/// A lease acquired for a submitter that stopped waiting (its turn was cancelled while the
/// acquire was queued) is released by the queue: nobody would otherwise hold it until it
/// expires.
#[test]
fn a_lease_acquired_for_a_cancelled_turn_is_released() {
    let s = SqliteStore::in_memory().unwrap();
    s.combining.store(true, Ordering::SeqCst);
    let acquire = s.submit(acquire_k("p1", 0));
    drop(acquire);
    s.combining.store(false, Ordering::SeqCst);
    s.combine();
    assert!(lock(&s.queue).is_empty());
    let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("k", "p2", 10, 60_000).unwrap() else {
        panic!("the cancelled turn's lease was left held");
    };
    assert_eq!(
        lease.generation, 2,
        "the cancelled turn's lease was never taken"
    );
}

/// A batch that cannot take the write lock (another process holds it past the busy
/// timeout) answers each of its writes `Locked`, under the write's own operation.
#[tokio::test]
async fn a_locked_batch_answers_each_write_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s = SqliteStore::open_with_timeout(&path, Duration::from_millis(50)).unwrap();
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    s.combining.store(true, Ordering::SeqCst);
    let acquire = s.submit(acquire_k("p1", 0));
    let complete = s.submit(TurnWrite::CompleteOutbox {
        session_id: "s".into(),
        advancement_key: "turn-1".into(),
    });
    s.combining.store(false, Ordering::SeqCst);
    s.combine();
    for (answer, operation) in [
        (acquire.await, "acquire session lease"),
        (complete.await, "complete outbox row"),
    ] {
        match answer {
            Err(StoreError::Locked { operation: op, .. }) => assert_eq!(op, operation),
            other => panic!("{operation}: {other:?}"),
        }
    }
    other.execute_batch("COMMIT").unwrap();
}

/// Writes submitted by tasks that are ready in the same round of the scheduler run in one
/// transaction, also on a single-threaded runtime: each submitter first lets the others run.
#[tokio::test(flavor = "current_thread")]
async fn writes_of_one_scheduler_round_share_a_transaction() {
    let s = Arc::new(SqliteStore::in_memory().unwrap());
    let before = s.held_times();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                s.submit(TurnWrite::RecordTurn {
                    session_id: format!("s{i}"),
                    entries: vec![entry(&format!("e{i}"), "x")],
                    binding_key: format!("k{i}"),
                    binding_json: "{}".into(),
                    lease_generation: 0,
                    commit: None,
                })
                .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let run = s.held_times().since(&before);
    assert_eq!((run.queued_writes, run.write_batches), (8, 1));
    assert!((0..8).all(|i| s.load_transcript(&format!("s{i}")).unwrap().len() == 1));
}

/// A session's first turn writes its bootstrap mark and its thread history beside its record:
/// all three join the queue's batch (one transaction), and the mark answers whether it is new.
#[tokio::test(flavor = "current_thread")]
async fn bootstrap_marks_and_documents_join_the_batch() {
    let s = Arc::new(SqliteStore::in_memory().unwrap());
    let before = s.held_times();
    let submit = |write: TurnWrite| {
        let s = s.clone();
        tokio::spawn(async move { s.submit(write).await })
    };
    let mark = || TurnWrite::MarkBootstrapped {
        session_id: "s1".into(),
        engine_id: "eng".into(),
    };
    let tasks = vec![
        submit(mark()),
        submit(TurnWrite::SaveDocument {
            namespace: "threads".into(),
            key: "s1".into(),
            json: "[1]".into(),
        }),
        submit(TurnWrite::RecordTurn {
            session_id: "s1".into(),
            entries: vec![entry("e1", "x")],
            binding_key: "k1".into(),
            binding_json: "{}".into(),
            lease_generation: 0,
            commit: None,
        }),
    ];
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().unwrap());
    }
    let run = s.held_times().since(&before);
    assert_eq!((run.queued_writes, run.write_batches), (3, 1));
    assert_eq!(answers[0], WriteOutcome::Applied(true));
    assert!(s.is_bootstrapped("s1", "eng").unwrap());
    assert_eq!(
        s.load_document("threads", "s1").unwrap().as_deref(),
        Some("[1]")
    );
    // Marked again: queued too, and answered as not new.
    assert_eq!(
        s.submit(mark()).await.unwrap(),
        WriteOutcome::Applied(false)
    );
    assert!(!s.mark_bootstrapped("s1", "eng").unwrap());
}

/// A submitted write whose caller stops waiting before the write ran (its future dropped
/// unpolled, as when a turn is cancelled) is still written.
#[test]
fn a_write_whose_caller_stopped_waiting_still_runs() {
    let s = SqliteStore::in_memory().unwrap();
    let row = OutboxRow {
        session_id: "s".into(),
        advancement_key: "turn-1".into(),
        engine_id: "e".into(),
        params_json: "{}".into(),
        attempts: 0,
        last_error: None,
    };
    drop(s.submit(TurnWrite::EnqueueOutbox(row.clone())));
    assert!(lock(&s.queue).is_empty());
    assert_eq!(s.pending_outbox("s").unwrap(), [row]);
}

/// A detached write (nobody waits for it) runs too: at once when the queue is free, else
/// with the running batch.
#[test]
fn detached_writes_run() {
    let s = SqliteStore::in_memory().unwrap();
    let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("k", "p1", 0, 60_000).unwrap() else {
        panic!("lease refused");
    };
    s.submit_detached(TurnWrite::ReleaseLease(lease));
    assert!(matches!(
        s.try_acquire_lease("k", "p2", 10, 60_000).unwrap(),
        LeaseAttempt::Acquired(_)
    ));
}

/// The activity (retention) time of `key` in `scope`, if dated.
fn activity(path: &Path, scope: &str, key: &str) -> Option<i64> {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT last_active_ms FROM activity WHERE scope = ?1 AND key = ?2",
            params![scope, key],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
}

/// Every write path dates its key in the activity table (sessions by their transcript,
/// bootstrap marks and outbox; bindings by binding, lease and renewal; documents by
/// namespace), and the triggers an earlier build kept it with are dropped on open.
#[test]
fn every_write_path_dates_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    // An earlier build's trigger.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER activity_transcript_insert AFTER INSERT ON transcript BEGIN
                 INSERT INTO activity (scope, key, last_active_ms) VALUES ('s', NEW.session_id, 0)
                 ON CONFLICT(scope, key) DO UPDATE SET last_active_ms = 0; END;",
        )
        .unwrap();
    let s = SqliteStore::open(&path).unwrap();
    let triggers: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(triggers, 0, "old activity triggers left in place");

    let started = i64::try_from(crate::util::now_ms()).unwrap() - 1;
    let dated = |scope: &str, key: &str| {
        let at = activity(&path, scope, key);
        assert!(
            at.is_some_and(|at| at >= started),
            "{scope}/{key} not dated: {at:?}"
        );
    };
    s.append_transcript("s-append", &[entry("a", "1")]).unwrap();
    dated("s", "s-append");
    s.record_turn("s-record", &[entry("r", "1")], "b-record", "{}", 0)
        .unwrap();
    dated("s", "s-record");
    dated("b", "b-record");
    s.mark_bootstrapped("s-boot", "eng").unwrap();
    dated("s", "s-boot");
    let row = OutboxRow {
        session_id: "s-outbox".into(),
        advancement_key: "k".into(),
        engine_id: "eng".into(),
        params_json: "{}".into(),
        attempts: 0,
        last_error: None,
    };
    s.enqueue_outbox(&row).unwrap();
    dated("s", "s-outbox");
    s.save_binding("b-save", "{}", 0).unwrap();
    dated("b", "b-save");
    let LeaseAttempt::Acquired(lease) = s.try_acquire_lease("b-lease", "h", 0, 60_000).unwrap()
    else {
        panic!("lease refused");
    };
    dated("b", "b-lease");
    s.save_document("mock-thread", "t", "{}").unwrap();
    dated("d:mock-thread", "t");

    // Later writes move the time on: a rewrite, a renewal, a delivered commit.
    let conn = Connection::open(&path).unwrap();
    conn.execute("UPDATE activity SET last_active_ms = 1", [])
        .unwrap();
    s.replace_transcript_entries("s-append", &[entry("a", "one")])
        .unwrap();
    dated("s", "s-append");
    assert!(s.renew_lease(&lease, 10, 60_000).unwrap());
    dated("b", "b-lease");
    s.complete_outbox("s-outbox", "k").unwrap();
    dated("s", "s-outbox");
    // A release or a failed delivery does not date anything.
    conn.execute("UPDATE activity SET last_active_ms = 1", [])
        .unwrap();
    s.release_lease(&lease).unwrap();
    assert_eq!(activity(&path, "b", "b-lease"), Some(1));
}

/// Under writes and reads that never pause, the WAL is started over by the checkpointer (under
/// the writer lock) long before it reaches the writer's own checkpoint: a passive checkpoint
/// alone never let SQLite start it over, it grew to that size, and then the writer
/// checkpointed, with two `fsync`s, on nearly every commit.
#[test]
fn the_wal_is_started_over_under_steady_reads_and_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s = SqliteStore::open(&path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    s.load_binding(&format!("k-s{}", (reads * 7 + t) % 500))
                        .unwrap();
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let wal = path.with_extension("db-wal");
    let wal_bytes = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    let ceiling = u64::from(super::checkpointer::WRITER_AUTOCHECKPOINT_PAGES) * 4096;
    let mut largest = 0;
    // Some 40 000 WAL frames in all: well past the writer's own checkpoint.
    const COMMITS: u64 = 6_000;
    for i in 0..COMMITS {
        let session = format!("s{}", i % 500);
        let e = entry(&format!("e{i}"), &"x".repeat(300));
        s.record_turn(&session, &[e], &format!("k-{session}"), "{}", 0)
            .unwrap();
        if i % 50 == 0 {
            largest = largest.max(wal_bytes());
        }
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0, "a reader never read");
    }
    largest = largest.max(wal_bytes());
    assert!(
        largest < ceiling * 7 / 8,
        "the WAL reached {largest} bytes after {COMMITS} commits (the writer checkpoints at {ceiling})"
    );
}
