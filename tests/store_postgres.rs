//! The PostgreSQL state store against a real server: the shared store conformance suite, the
//! multi-instance guarantees (two stores on one schema), migrations, time bounds, and two
//! harnesses sharing one database.
//!
//! The server comes from `CTXBRIDGE_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Each test works in its own schema, dropped at
//! the end, so tests run in parallel. Without a server the tests print a loud SKIPPED line and
//! pass, unless `CTXBRIDGE_TEST_PG_REQUIRED=1` (CI) makes a missing server a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ctxbridge::backend::{
    BackendError, BackendKind, BackendProfile, Completion, CompletionRequest, MockBackend,
    NativeCompaction, ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnOutcome,
    TurnRequest,
};
use ctxbridge::harness::{Harness, HarnessConfig, TurnSpec};
use ctxbridge::quarantine::{QuarantineBook, QuarantineEngine};
use ctxbridge::store::StateStoreExt;
use ctxbridge::store::{
    conformance, LeaseAttempt, PostgresOptions, PostgresStore, StateStore, StoreError,
};
use ctxbridge::util::now_ms;
use tokio::sync::{mpsc, Notify};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn url() -> String {
    std::env::var("CTXBRIDGE_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// Runs `sql` on a fresh connection to `url`, on a thread of its own (callable from sync tests
/// and from inside a runtime alike).
fn admin(url: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    let (url, sql) = (url.to_string(), sql.to_string());
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let mut config: tokio_postgres::Config = url.parse()?;
                config.connect_timeout(Duration::from_secs(3));
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                let driver = tokio::spawn(connection);
                let result = client.batch_execute(&sql).await;
                drop(client);
                let _ = driver.await;
                result
            })
    })
    .join()
    .unwrap()
}

/// One test's schema on the test server; dropped (with everything in it) when this goes away.
struct TestDb {
    url: String,
    schema: String,
}

impl TestDb {
    /// A fresh schema, or `None` (after a loud SKIPPED line) when no server answers.
    fn new(test: &str) -> Option<TestDb> {
        let url = url();
        if let Err(e) = admin(&url, "SELECT 1") {
            let mut reason = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                reason = format!("{reason}: {c}");
                cause = c.source();
            }
            let shown = ctxbridge::store::redact_url(&url);
            if std::env::var("CTXBRIDGE_TEST_PG_REQUIRED").as_deref() == Ok("1") {
                panic!("{test}: PostgreSQL is required but {shown} does not answer: {reason}");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no PostgreSQL answers at {shown} ({reason}).\n\
                 *** Start a server (e.g. `pg_ctlcluster <version> main start`) with a database \
                 the URL can reach, or point CTXBRIDGE_TEST_PG_URL at one.\n"
            );
            return None;
        }
        let schema = format!("ctxb_test_{}", uuid::Uuid::new_v4().simple());
        Some(TestDb { url, schema })
    }

    fn options(&self) -> PostgresOptions {
        PostgresOptions::default()
            .with_schema(self.schema.clone())
            .with_pool_size(4)
    }

    /// A store instance on this schema (each call is another instance).
    fn store(&self) -> Arc<PostgresStore> {
        Arc::new(PostgresStore::connect(&self.url, self.options()).unwrap())
    }

    fn dyn_store(&self) -> Arc<dyn StateStore> {
        self.store()
    }

    fn sql(&self, sql: &str) {
        admin(
            &self.url,
            &format!("SET search_path = {}; {sql}", self.schema),
        )
        .unwrap();
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Err(e) = admin(
            &self.url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        ) {
            eprintln!("could not drop test schema {}: {e}", self.schema);
        }
    }
}

macro_rules! conformance_tests {
    ($($check:ident),* $(,)?) => {
        /// The names this file runs, to compare with the suite's list.
        const RUN_HERE: &[&str] = &[$(stringify!($check)),*];

        mod suite {
            $(
                /// The PostgreSQL store passes the conformance check of this name.
                #[test]
                fn $check() {
                    let Some(db) = super::TestDb::new(stringify!($check)) else { return };
                    ctxbridge::store::conformance::$check(&*db.store());
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

/// This file runs every single-store check of the suite.
#[test]
fn every_check_runs() {
    let suite: Vec<&str> = conformance::CHECKS.iter().map(|(name, _)| *name).collect();
    assert_eq!(RUN_HERE, suite.as_slice());
}

/// Two PostgreSQL store instances on one schema: a lease held by one blocks the other; after
/// expiry the other takes over with a higher generation; the stale instance's late turn and
/// binding are refused with `StaleGeneration`; outbox rows completed by one instance are not
/// delivered again by the other.
#[test]
fn two_instances_share_leases_fencing_and_outbox() {
    let Some(db) = TestDb::new("two_instances_share_leases_fencing_and_outbox") else {
        return;
    };
    conformance::two_instances(&*db.store(), &*db.store());
}

/// Twenty holders race for one expired lease through three store instances: exactly one wins.
#[test]
fn lease_race_across_instances() {
    let Some(db) = TestDb::new("lease_race_across_instances") else {
        return;
    };
    conformance::lease_race(&[db.dyn_store(), db.dyn_store(), db.dyn_store()], 20);
}

/// Concurrent appends to one session's transcript from several instances lose nothing and
/// keep each append's entries together.
#[test]
fn concurrent_appends_across_instances() {
    let Some(db) = TestDb::new("concurrent_appends_across_instances") else {
        return;
    };
    let stores = [db.dyn_store(), db.dyn_store()];
    std::thread::scope(|scope| {
        for (i, store) in stores.iter().cycle().take(8).enumerate() {
            scope.spawn(move || {
                let entry = |n: usize| ctxbridge::store::TranscriptEntry {
                    entry_id: format!("w{i}-{n}"),
                    message: ctxbridge::contract::AgentMessage::user(format!("{i}/{n}")),
                };
                store.append_transcript("s", &[entry(0), entry(1)]).unwrap();
            });
        }
    });
    let ids: Vec<String> = stores[0]
        .load_transcript("s")
        .unwrap()
        .into_iter()
        .map(|e| e.entry_id)
        .collect();
    assert_eq!(ids.len(), 16);
    for pair in ids.chunks(2) {
        let writer = pair[0].trim_end_matches("-0");
        assert_eq!(pair[1], format!("{writer}-1"), "{ids:?}");
    }
}

/// Migrations are recorded once per version, a second start applies nothing, and starters
/// racing on a fresh schema all succeed.
#[test]
fn migrations_are_versioned_and_race_free() {
    let Some(db) = TestDb::new("migrations_are_versioned_and_race_free") else {
        return;
    };
    let stores: Vec<Arc<PostgresStore>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4).map(|_| scope.spawn(|| db.store())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    stores[0].save_document("ns", "k", "{}").unwrap();
    let again = db.store();
    assert_eq!(
        again.load_document("ns", "k").unwrap().as_deref(),
        Some("{}")
    );
    // Exactly one row per known version: a duplicate would make this insert-select differ.
    db.sql(&format!(
        "DO $$ BEGIN
           IF (SELECT count(*) FROM ctxbridge_schema_migrations) <> {v}
              OR (SELECT max(version) FROM ctxbridge_schema_migrations) <> {v} THEN
             RAISE EXCEPTION 'unexpected migration rows';
           END IF;
         END $$;",
        v = PostgresStore::schema_version()
    ));
}

/// A schema migrated by a newer build is refused with `SchemaTooNew`, naming the URL.
#[test]
fn newer_schema_is_refused() {
    let Some(db) = TestDb::new("newer_schema_is_refused") else {
        return;
    };
    drop(db.store());
    db.sql("INSERT INTO ctxbridge_schema_migrations (version) VALUES (999)");
    let err = PostgresStore::connect(&db.url, db.options()).unwrap_err();
    match &err {
        StoreError::SchemaTooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, 999);
            assert_eq!(*supported, PostgresStore::schema_version());
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert!(err.to_string().contains(&db.schema), "{err}");
}

/// A configured schema this role may not create in (here its owner revoked its own rights,
/// as a schema owned by another role would be) is refused naming the schema, the role and
/// the privileges missing, instead of PostgreSQL's "no schema has been selected to create in".
#[test]
fn a_schema_without_privileges_is_named() {
    let Some(db) = TestDb::new("a_schema_without_privileges_is_named") else {
        return;
    };
    admin(
        &db.url,
        &format!(
            "CREATE SCHEMA {schema}; REVOKE ALL ON SCHEMA {schema} FROM CURRENT_USER",
            schema = db.schema
        ),
    )
    .unwrap();
    let err = PostgresStore::connect(&db.url, db.options()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            StoreError::PostgresSetup {
                operation: "apply schema migrations",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        text.contains(&format!("schema \"{}\"", db.schema)),
        "{text}"
    );
    assert!(text.contains("lacks USAGE, CREATE"), "{text}");
    assert!(text.contains("GRANT USAGE, CREATE ON SCHEMA"), "{text}");
    assert!(!text.contains("no schema has been selected"), "{text}");
}

/// A statement blocked by another transaction's lock fails within the statement timeout with
/// an error naming the operation, instead of hanging the caller.
#[test]
fn blocked_statement_times_out_with_a_clear_error() {
    let Some(db) = TestDb::new("blocked_statement_times_out_with_a_clear_error") else {
        return;
    };
    let store = PostgresStore::connect(
        &db.url,
        db.options()
            .with_statement_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let lease = match store.try_acquire_lease("k", "a", 0, 1_000).unwrap() {
        ctxbridge::store::LeaseAttempt::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    // Another session holds the lease row for update (a takeover in progress) meanwhile.
    let url = db.url.clone();
    let schema = db.schema.clone();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let locker = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let (mut client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                let tx = client.transaction().await.unwrap();
                tx.batch_execute(&format!(
                    "SET LOCAL search_path = {schema};
                     SELECT * FROM ctxbridge_leases WHERE session = 'k' FOR UPDATE"
                ))
                .await
                .unwrap();
                locked_tx.send(()).unwrap();
                let _ = done_rx.await;
                tx.rollback().await.unwrap();
            })
    });
    locked_rx.recv().unwrap();
    let err = store.save_binding("k", "{}", lease.generation).unwrap_err();
    done_tx.send(()).unwrap();
    locker.join().unwrap();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(text.contains("save binding"), "{text}");
    assert!(text.contains("statement timeout"), "{text}");
    // Once the lock is gone the same write goes through.
    store.save_binding("k", "{}", lease.generation).unwrap();
}

/// The store is usable from inside a current-thread tokio runtime (the harness's setting) and
/// can be dropped there.
#[tokio::test(flavor = "current_thread")]
async fn usable_inside_a_current_thread_runtime() {
    let Some(db) = TestDb::new("usable_inside_a_current_thread_runtime") else {
        return;
    };
    let store = db.store();
    store.save_document("ns", "k", "{\"ok\":true}").unwrap();
    tokio::task::yield_now().await;
    assert_eq!(
        store.load_document("ns", "k").unwrap().as_deref(),
        Some("{\"ok\":true}")
    );
    drop(store);
}

/// An unreachable server gives a connect error naming the operation and the URL, with the
/// password redacted (this test needs no server: nothing listens on port 1).
#[test]
fn unreachable_server_is_a_clear_error() {
    let err = PostgresStore::connect(
        "postgres://ctxbridge:hunter2@127.0.0.1:1/state",
        PostgresOptions::default().with_connect_timeout(Duration::from_secs(2)),
    )
    .unwrap_err();
    let text = err.to_string();
    let no_connection = match &err {
        StoreError::Backend { message, .. } => {
            message.starts_with("cannot get a PostgreSQL connection")
        }
        StoreError::PostgresTimeout { .. } => true,
        _ => false,
    };
    assert!(no_connection, "{err:?}");
    assert!(
        text.contains("postgres://ctxbridge:***@127.0.0.1:1/state"),
        "{text}"
    );
    assert!(text.contains("apply schema migrations"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// Two harnesses, each with its own PostgreSQL store instance on one schema and sharing one
/// backend, run concurrent first turns of one session: exactly one backend thread is created
/// and every turn lands in the transcript once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_harnesses_single_flight_thread_creation() {
    let Some(db) = TestDb::new("two_harnesses_single_flight_thread_creation") else {
        return;
    };
    let store_a = db.dyn_store();
    let store_b = db.dyn_store();
    let backend = MockBackend::with_store(store_a.clone());
    let harness = |store: Arc<dyn StateStore>| {
        Arc::new(Harness::new(
            HarnessConfig {
                developer_instructions: Some("Base.".into()),
                lease_wait: Duration::from_secs(60),
                ..HarnessConfig::default()
            },
            Arc::new(QuarantineEngine::legacy(Arc::new(QuarantineBook::new()))),
            Arc::new(backend.clone()),
            store,
        ))
    };
    let (a, b) = (harness(store_a), harness(store_b));
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let h = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { h.turn(TurnSpec::new("s", format!("prompt {i}"))).await })
        })
        .collect();
    let mut threads = std::collections::BTreeSet::new();
    for task in tasks {
        threads.insert(task.await.unwrap().unwrap().thread_id);
    }
    assert_eq!(backend.threads_started(), 1);
    assert_eq!(threads.len(), 1);
    let transcript = b.transcript("s").unwrap();
    assert_eq!(transcript.len(), 20);
    let prompts: std::collections::BTreeSet<String> = transcript
        .iter()
        .map(|m| m.plain_text())
        .filter(|t| t.starts_with("prompt "))
        .collect();
    assert_eq!(prompts.len(), 10);
}

/// The lease holder id of a process of this host that does not exist (the harness's format,
/// `ctxbridge@HOST:PID:START:NONCE`).
fn dead_local_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("ctxbridge@{}:{}:1:deadbeef", host.trim(), u32::MAX - 1)
}

/// A lease on PostgreSQL left by a process of this host that no longer exists, with an hour to
/// run, is taken over at once: the harness's turn runs without waiting (its lease wait is far
/// shorter than the dead lease's expiry) and fences the dead holder's late writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_takes_over_a_dead_local_holder_at_once() {
    let Some(db) = TestDb::new("harness_takes_over_a_dead_local_holder_at_once") else {
        return;
    };
    let store = db.dyn_store();
    let harness = Harness::new(
        HarnessConfig {
            lease_wait: Duration::from_millis(200),
            ..HarnessConfig::default()
        },
        Arc::new(QuarantineEngine::legacy(Arc::new(QuarantineBook::new()))),
        Arc::new(MockBackend::with_store(store.clone())),
        store.clone(),
    );
    let key = harness.binding_key_for("s");
    let dead = match store
        .try_acquire_lease(&key, &dead_local_holder(), now_ms(), 3_600_000)
        .unwrap()
    {
        LeaseAttempt::Acquired(lease) => lease,
        busy => panic!("{busy:?}"),
    };
    harness
        .turn(TurnSpec::new("s", "after the dead one"))
        .await
        .unwrap();
    assert_eq!(harness.transcript("s").unwrap().len(), 2);
    let late = store.save_binding(&key, "{}", dead.generation);
    assert!(
        matches!(late, Err(StoreError::StaleGeneration { held, .. }) if held == dead.generation),
        "{late:?}"
    );
}

/// The mock backend, whose turns wait until they are let go.
#[derive(Clone)]
struct HeldBackend {
    inner: MockBackend,
    go: Arc<Notify>,
}

#[async_trait]
impl ThreadedBackend for HeldBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn label(&self) -> &str {
        self.inner.label()
    }
    fn profile(&self) -> BackendProfile {
        self.inner.profile()
    }
    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        self.inner.start_thread(request).await
    }
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        self.inner.resume_thread(thread_id, resume).await
    }
    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        self.inner.inject_developer_message(thread_id, text).await
    }
    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        self.go.notified().await;
        self.inner.run_turn(request, events).await
    }
    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        self.inner.compact_thread(thread_id).await
    }
    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        self.inner.complete(request).await
    }
}

/// The harness's heartbeat renews its lease on PostgreSQL: while a turn runs longer than the
/// lease TTL, another instance keeps seeing the lease held by the harness, with an expiry that
/// moves on, and the turn's writes (same generation) succeed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_heartbeat_renews_on_postgres() {
    let Some(db) = TestDb::new("harness_heartbeat_renews_on_postgres") else {
        return;
    };
    let store = db.dyn_store();
    let other = db.dyn_store();
    let backend = HeldBackend {
        inner: MockBackend::with_store(store.clone()),
        go: Arc::new(Notify::new()),
    };
    let harness = Arc::new(Harness::new(
        HarnessConfig {
            lease_ttl: Duration::from_secs(3),
            ..HarnessConfig::default()
        },
        Arc::new(QuarantineEngine::legacy(Arc::new(QuarantineBook::new()))),
        Arc::new(backend.clone()),
        store,
    ));
    let key = harness.binding_key_for("s");
    let running = {
        let harness = harness.clone();
        tokio::spawn(async move { harness.turn(TurnSpec::new("s", "long turn")).await })
    };
    // Whoever looks while the turn runs finds the harness holding the session.
    let held = || match other
        .try_acquire_lease(&key, "probe", now_ms(), 1_000)
        .unwrap()
    {
        LeaseAttempt::Busy {
            holder,
            expires_at_ms,
        } => (holder, expires_at_ms),
        LeaseAttempt::Acquired(lease) => panic!("the running turn's lease was free: {lease:?}"),
    };
    let (holder, first_expiry) = loop {
        match other.try_acquire_lease(&key, "probe", 0, 0).unwrap() {
            LeaseAttempt::Busy {
                holder,
                expires_at_ms,
            } => break (holder, expires_at_ms),
            // Not taken yet (the probe's lease expires at 0, so it never blocks the turn).
            LeaseAttempt::Acquired(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert!(holder.starts_with("ctxbridge@"), "{holder}");
    let renewed = loop {
        let (now_holder, expiry) = held();
        assert_eq!(now_holder, holder);
        if expiry > first_expiry {
            break expiry;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(renewed > first_expiry);
    backend.go.notify_one();
    let reply = running.await.unwrap().unwrap();
    assert_eq!(reply.reason, "legacy-engine");
    assert_eq!(harness.transcript("s").unwrap().len(), 2);
}

/// Runs `ctxbridge turn --json` in `dir` and returns its JSON object.
fn cli_turn(dir: &std::path::Path, session: &str, prompt: &str) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir)
        .args(["turn", "--session", session, "--json", prompt])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "turn failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `store: {kind: "postgres", url, schema}` in the config file: separate `ctxbridge turn`
/// processes share the session through PostgreSQL — the second continues the first one's
/// thread with the bare prompt (binding and mock threads live in the database), and no SQLite
/// state file is created.
#[test]
fn cli_turns_share_state_through_postgres() {
    let Some(db) = TestDb::new("cli_turns_share_state_through_postgres") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "plugins": {
            "slots": {"contextEngine": "sample-summary"},
            "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": 2}}}
        },
        "backend": {"kind": "mock"},
        "store": {"kind": "postgres", "url": db.url, "schema": db.schema},
    });
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    let first = cli_turn(dir.path(), "pg", "first over postgres");
    let second = cli_turn(dir.path(), "pg", "second over postgres");
    assert_eq!(first["threadAction"], "started");
    assert_eq!(second["threadAction"], "resumed");
    assert_eq!(first["threadId"], second["threadId"]);
    assert_eq!(second["reason"], "matching-thread-bootstrap-binding");
    assert!(!dir.path().join(".ctxbridge").join("state.db").exists());
}

/// `store.kind: "postgres"` without `store.url` is refused with a message naming the key.
#[test]
fn postgres_store_without_url_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        r#"{ store: { kind: "postgres" } }"#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir.path())
        .args(["turn", "--session", "s", "hello"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store.url is required"), "{stderr}");
}
