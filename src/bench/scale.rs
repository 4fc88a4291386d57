//! Scale: many sessions of a few turns each over the in-process mock on a multi-thread runtime
//! with 1 and then 2 worker threads; turns per second and resident memory; and the memory one
//! idle binding takes in the harness's binding cache.
//!
//! Setup: one in-memory `SqliteStore` (no file, so no disk I/O), the mock backend keeping its
//! threads in memory, the bench engine in thread_bootstrap mode with a 2 KB background (so the
//! mock's copies of every bootstrap input do not dominate memory), 5 turns per session (one
//! projection, then four reused turns), 64 sessions in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::process::{peak_rss_bytes, process_cpu_time, reset_peak_rss, rss_bytes};
use super::{
    bench_harness, bench_prompt, harness_err, BenchEngineConfig, BenchError, BenchMode,
    BENCH_AGENT_ID,
};
use crate::backend::{MockBackend, ThreadId};
use crate::harness::TurnSpec;
use crate::harness::{Harness, HarnessError};
use crate::projection::{binding_key, ThreadBinding};
use crate::store::{
    HeldTimes, PostgresOptions, PostgresStore, ShardedSqliteStore, SqliteStore, StateStore,
    StoreError,
};
use crate::util::error_chain;

pub use super::scale_report::{format_report, two_worker_bound};

/// Turns per session of the scale run.
pub const TURNS_PER_SESSION: usize = 5;
/// Sessions running at once.
pub const SESSIONS_IN_FLIGHT: usize = 64;
/// Background of the bench engine in the scale run.
pub const SCALE_BACKGROUND_CHARS: usize = 2_000;

/// The result of one scale run.
#[derive(Debug, Clone)]
pub struct ScaleResult {
    pub store: ScaleStore,
    pub workers: usize,
    pub sessions: usize,
    pub turns: usize,
    pub elapsed: Duration,
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    pub peak_rss: Option<u64>,
    /// Whether `peak_rss` is the peak of this run (the mark was reset at its start) rather than
    /// of the whole process.
    pub peak_is_this_run: bool,
    /// SQLite stores: how long their connections were held during the run.
    pub held: Option<HeldTimes>,
    /// CPU time the process used during the run (all threads; 10 ms resolution).
    pub cpu: Option<Duration>,
    /// Whether each worker ran on a runtime, harness and store of its own (the split run):
    /// nothing of ctxbridge shared between the cores.
    pub split: bool,
    /// SQLite: the databases the store was split over by session (1: one database).
    pub shards: usize,
    /// Whether the turns ran on lanes (a single-threaded runtime per worker, sharing one
    /// harness and store, as `serve --front responses` serves them) rather than on one
    /// multi-thread runtime.
    pub lanes: bool,
}

impl ScaleResult {
    /// The share of the run's wall time that no second worker can overlap: the writer's (on a
    /// file, readers run beside it), or the writer's and the readers' (in memory, where they
    /// exclude each other; an upper bound, readers may overlap one another).
    pub fn serial_share(&self) -> Option<f64> {
        let held = self.held?;
        let serial = match self.store {
            ScaleStore::Memory => held.writer + held.readers,
            _ => held.writer,
        };
        Some(serial.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9))
    }
}

impl ScaleResult {
    /// The run's name in the report: its worker count, `split` for the split run.
    pub fn label(&self) -> String {
        if self.split {
            format!("{} split", self.workers)
        } else {
            self.workers.to_string()
        }
    }

    pub fn turns_per_second(&self) -> f64 {
        self.turns as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Cores kept busy on average (process CPU time ÷ wall time).
    pub fn cores_busy(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// Process CPU time per turn, µs.
    pub fn cpu_per_turn_us(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / self.turns.max(1) as f64)
    }
}

/// Memory of idle bindings in a cache built like the harness's.
#[derive(Debug, Clone)]
pub struct BindingMemory {
    pub bindings: usize,
    pub rss_delta: Option<u64>,
    /// The binding's own heap and inline size (strings' capacities + the struct), computed.
    pub binding_heap_bytes: usize,
}

impl BindingMemory {
    pub fn per_binding(&self) -> Option<f64> {
        self.rss_delta
            .map(|d| d as f64 / self.bindings.max(1) as f64)
    }
}

fn scale_engine() -> BenchEngineConfig {
    BenchEngineConfig {
        background_chars: SCALE_BACKGROUND_CHARS,
        ..BenchEngineConfig::default()
    }
}

/// Where the scale run keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleStore {
    /// An in-memory SQLite database: ctxbridge's own cost, no disk I/O.
    Memory,
    /// A SQLite file in a temporary directory (WAL), as the CLI uses: adds the file writes and
    /// POSIX locks of three small write transactions per turn.
    File,
    /// The PostgreSQL store, in a fresh schema dropped afterwards (`--pg-url`).
    Postgres,
}

impl ScaleStore {
    pub fn describe(self) -> &'static str {
        match self {
            ScaleStore::Memory => "in-memory SqliteStore",
            ScaleStore::File => "file-backed SqliteStore (WAL, temporary directory)",
            ScaleStore::Postgres => "PostgresStore (fresh schema per run, dropped afterwards)",
        }
    }

    /// Sessions of the scale run when `--sessions` is not given: fewer on PostgreSQL, where
    /// every store call is a network round trip.
    pub fn default_sessions(self) -> usize {
        match self {
            ScaleStore::Memory | ScaleStore::File => DEFAULT_SESSIONS,
            ScaleStore::Postgres => POSTGRES_DEFAULT_SESSIONS,
        }
    }
}

/// Sessions of the scale run on SQLite when not configured.
pub const DEFAULT_SESSIONS: usize = 10_000;
/// Sessions of the scale run on PostgreSQL when not configured.
pub const POSTGRES_DEFAULT_SESSIONS: usize = 200;
/// The PostgreSQL server of the scale run when neither `--pg-url` nor `CTXBRIDGE_TEST_PG_URL`
/// names one.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL URL of the scale run: `explicit`, else `CTXBRIDGE_TEST_PG_URL`, else
/// [`DEFAULT_PG_URL`].
pub fn pg_url(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_string)
        .or_else(|| std::env::var("CTXBRIDGE_TEST_PG_URL").ok())
        .unwrap_or_else(|| DEFAULT_PG_URL.to_string())
}

/// Where a scale run keeps its state: the kind and, for PostgreSQL, the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleTarget {
    pub store: ScaleStore,
    /// The PostgreSQL URL ([`pg_url`]); unused by the SQLite stores.
    pub pg_url: String,
    /// SQLite stores: the databases the state is split over by session (`store.shards`; 1:
    /// one database).
    pub shards: usize,
}

impl ScaleTarget {
    /// A SQLite target (memory or file).
    pub fn sqlite(store: ScaleStore) -> Self {
        ScaleTarget {
            store,
            pg_url: pg_url(None),
            shards: 1,
        }
    }
}

/// Runs `sql` on a fresh connection to `url`, on a thread of its own with its own runtime (so
/// that it can be called from inside a runtime); the error's text with its causes.
fn pg_admin(url: &str, sql: &str) -> Result<(), String> {
    let (url, sql) = (url.to_string(), sql.to_string());
    let joined = std::thread::spawn(move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let mut config: tokio_postgres::Config = url.parse().map_err(|e| error_chain(&e))?;
            config.connect_timeout(Duration::from_secs(3));
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| error_chain(&e))?;
            let driver = tokio::spawn(connection);
            let result = client
                .batch_execute(&sql)
                .await
                .map_err(|e| error_chain(&e));
            drop(client);
            let _ = driver.await;
            result
        })
    })
    .join();
    joined.unwrap_or_else(|_| Err("the PostgreSQL admin thread panicked".to_string()))
}

/// Whether a PostgreSQL server answers at `url`; the reason when not.
pub fn postgres_answers(url: &str) -> Result<(), String> {
    pg_admin(url, "SELECT 1")
}

/// What must outlive a scale run's store: the temporary directory of a file store, or the
/// PostgreSQL schema, dropped (with everything in it) when this goes away.
pub(super) enum StoreHold {
    None,
    Dir(#[allow(dead_code)] tempfile::TempDir),
    PgSchema { url: String, schema: String },
}

impl Drop for StoreHold {
    fn drop(&mut self) {
        if let StoreHold::PgSchema { url, schema } = self {
            if let Err(e) = pg_admin(url, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")) {
                tracing::warn!(schema = %schema, error = %e, "could not drop the scale run's PostgreSQL schema");
            }
        }
    }
}

/// The scale run's store, what must outlive it, and its SQLite databases (for their held
/// times; none on PostgreSQL).
type OpenedStore = (Arc<dyn StateStore>, StoreHold, Vec<Arc<SqliteStore>>);

/// A SQLite scale store and its databases.
type SqliteParts = (Arc<dyn StateStore>, Vec<Arc<SqliteStore>>);

/// A SQLite scale store of `shards` databases: one [`SqliteStore`], or a
/// [`ShardedSqliteStore`] and its shards.
fn sqlite_store(
    shards: usize,
    one: impl FnOnce() -> Result<SqliteStore, StoreError>,
    sharded: impl FnOnce(usize) -> Result<ShardedSqliteStore, StoreError>,
) -> Result<SqliteParts, BenchError> {
    if shards <= 1 {
        let store = Arc::new(opened_sqlite(one())?);
        return Ok((store.clone(), vec![store]));
    }
    let store = sharded(shards).map_err(|source| BenchError::Store {
        operation: "open the scale store",
        source,
    })?;
    let parts = store.shards().to_vec();
    Ok((Arc::new(store), parts))
}

fn open_store(target: &ScaleTarget) -> Result<OpenedStore, BenchError> {
    let opened = |store: Result<Arc<dyn StateStore>, StoreError>| {
        store.map_err(|source| BenchError::Store {
            operation: "open the scale store",
            source,
        })
    };
    match target.store {
        ScaleStore::Memory => {
            let (store, parts) = sqlite_store(
                target.shards,
                SqliteStore::in_memory,
                ShardedSqliteStore::in_memory,
            )?;
            Ok((store, StoreHold::None, parts))
        }
        ScaleStore::File => {
            let dir = tempfile::tempdir().map_err(|e| BenchError::Runtime {
                operation: "create the scale store directory",
                message: e.to_string(),
            })?;
            let path = dir.path().join("state.db");
            let (store, parts) = sqlite_store(
                target.shards,
                || SqliteStore::open(&path),
                |n| ShardedSqliteStore::open(&path, n),
            )?;
            Ok((store, StoreHold::Dir(dir), parts))
        }
        ScaleStore::Postgres => {
            let schema = format!("ctxb_bench_{}", uuid::Uuid::new_v4().simple());
            // Held before connecting: a half-created schema is dropped too.
            let hold = StoreHold::PgSchema {
                url: target.pg_url.clone(),
                schema: schema.clone(),
            };
            let options = PostgresOptions::default().with_schema(schema);
            let store = opened(
                PostgresStore::connect(&target.pg_url, options)
                    .map(|s| Arc::new(s) as Arc<dyn StateStore>),
            )?;
            Ok((store, hold, Vec::new()))
        }
    }
}

fn opened_sqlite(store: Result<SqliteStore, StoreError>) -> Result<SqliteStore, BenchError> {
    store.map_err(|source| BenchError::Store {
        operation: "open the scale store",
        source,
    })
}

/// The scale harness and what must outlive it (a file store's directory, a schema).
pub(super) fn scale_harness(
    target: &ScaleTarget,
) -> Result<(Harness, StoreHold, Vec<Arc<SqliteStore>>), BenchError> {
    let (store, hold, sqlite) = open_store(target)?;
    let (harness, _) = bench_harness(
        BenchMode::ThreadBootstrap,
        scale_engine(),
        Arc::new(MockBackend::new()),
        store,
    );
    Ok((harness, hold, sqlite))
}

/// The [`TURNS_PER_SESSION`] turns of scale session `i`, one after the other.
async fn run_session(harness: &Harness, i: usize) -> Result<usize, HarnessError> {
    let key = format!("scale-session-{i}");
    for turn in 1..=TURNS_PER_SESSION {
        harness
            .turn(TurnSpec::new(key.clone(), bench_prompt(turn)))
            .await?;
    }
    Ok(TURNS_PER_SESSION)
}

/// Runs `sessions` × [`TURNS_PER_SESSION`] turns on the current runtime.
pub async fn run_sessions(harness: Arc<Harness>, sessions: usize) -> Result<usize, BenchError> {
    run_session_range(harness, 0..sessions, SESSIONS_IN_FLIGHT).await
}

/// Runs the sessions numbered `range`, `in_flight` at a time, each a task of the current
/// runtime (as a served connection is).
pub(super) async fn run_session_range(
    harness: Arc<Harness>,
    range: std::ops::Range<usize>,
    in_flight: usize,
) -> Result<usize, BenchError> {
    let mut turns = 0usize;
    let mut runs = futures::stream::iter(range)
        .map(|i| {
            let harness = harness.clone();
            tokio::spawn(async move { run_session(&harness, i).await })
        })
        .buffer_unordered(in_flight.max(1));
    while let Some(joined) = runs.next().await {
        let done = joined
            .map_err(|e| BenchError::Runtime {
                operation: "scale session task",
                message: e.to_string(),
            })?
            .map_err(harness_err("scale turn"))?;
        turns += done;
    }
    Ok(turns)
}

/// Builds a multi-thread runtime with `workers` worker threads on a thread of its own, runs the
/// scale sessions there and reports. Awaiting it does not block the caller's runtime.
/// With `lanes`, the sessions run on `workers` lanes instead
/// ([`super::scale_lanes::run_lanes`]).
pub async fn run_on_own_runtime(
    sessions: usize,
    workers: usize,
    target: ScaleTarget,
    lanes: bool,
) -> Result<ScaleResult, BenchError> {
    on_own_thread(format!("ctxbridge-bench-scale-{workers}"), move || {
        if lanes {
            super::scale_lanes::run_lanes(sessions, workers, &target)
        } else {
            run_blocking(sessions, workers, &target)
        }
    })
    .await
}

/// Runs `run` on a thread of its own (named `name`) and awaits its result without blocking the
/// caller's runtime.
async fn on_own_thread(
    name: String,
    run: impl FnOnce() -> Result<ScaleResult, BenchError> + Send + 'static,
) -> Result<ScaleResult, BenchError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let _ = tx.send(run());
        })
        .map_err(|e| BenchError::Runtime {
            operation: "start the scale thread",
            message: e.to_string(),
        })?;
    rx.await.map_err(|e| BenchError::Runtime {
        operation: "scale thread",
        message: e.to_string(),
    })?
}

/// A multi-thread runtime with `workers` worker threads (at least one).
pub(super) fn scale_runtime(workers: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()
        .map_err(|e| BenchError::Runtime {
            operation: "build the scale runtime",
            message: e.to_string(),
        })
}

fn run_blocking(
    sessions: usize,
    workers: usize,
    target: &ScaleTarget,
) -> Result<ScaleResult, BenchError> {
    let runtime = scale_runtime(workers)?;
    runtime.block_on(async move {
        let (harness, hold, sqlite) = scale_harness(target)?;
        let harness = Arc::new(harness);
        let marks = Marks::take(&sqlite);
        let cpu_before = process_cpu_time();
        // The sessions are driven from a task on the runtime's workers, as a server's
        // connections are, not from this thread: woken at every session's end, it would be
        // one thread more than the workers, taking turns with them on the cores.
        let driven = harness.clone();
        let (turns, elapsed) = tokio::spawn(async move {
            let started = Instant::now();
            let turns = run_sessions(driven.clone(), sessions).await?;
            // The leases kept after the last turns are released inside the measured time:
            // every lease write of the run is counted.
            driven.release_held_sessions().await;
            Ok::<_, BenchError>((turns, started.elapsed()))
        })
        .await
        .map_err(|e| BenchError::Runtime {
            operation: "scale driver task",
            message: e.to_string(),
        })??;
        let cpu = process_cpu_time()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        let measured = marks.measured(&sqlite, turns, elapsed, cpu);
        harness.shutdown().await;
        // The store goes before what it lives in (the directory, the schema).
        drop(harness);
        drop(hold);
        Ok(ScaleResult::of_run(
            target,
            workers,
            sessions,
            RunShape::Shared,
            measured,
        ))
    })
}

/// The sessions each of `workers` split workers runs: as even as can be, all of them in all.
pub fn split_sessions(sessions: usize, workers: usize) -> Vec<usize> {
    let workers = workers.max(1);
    (0..workers)
        .map(|w| sessions / workers + usize::from(w < sessions % workers))
        .collect()
}

/// The split run: `workers` threads, each with a single-thread runtime, a harness and a store
/// of its own, share the sessions ([`split_sessions`]); nothing of ctxbridge is shared between
/// them. Its throughput is what the machine gives two cores when no store, cache or runtime
/// is shared: the ceiling the shared run can approach.
pub async fn run_split_on_own_threads(
    sessions: usize,
    workers: usize,
    target: ScaleTarget,
) -> Result<ScaleResult, BenchError> {
    on_own_thread(format!("ctxbridge-bench-split-{workers}"), move || {
        run_split(sessions, workers, &target)
    })
    .await
}

/// One split worker: its own runtime, harness and store; sessions `first..first + count`.
fn split_worker(
    first: usize,
    count: usize,
    target: &ScaleTarget,
    start: &std::sync::Barrier,
) -> Result<usize, BenchError> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            start.wait();
            return Err(BenchError::Runtime {
                operation: "build a split worker's runtime",
                message: e.to_string(),
            });
        }
    };
    runtime.block_on(async move {
        let opened = scale_harness(target);
        // Every worker passes the barrier, opened or not, so none waits for ever.
        start.wait();
        let (harness, hold, _) = opened?;
        let mut turns = 0usize;
        let mut runs = futures::stream::iter(first..first + count)
            .map(|i| run_session(&harness, i))
            .buffer_unordered(SESSIONS_IN_FLIGHT);
        while let Some(done) = runs.next().await {
            turns += done.map_err(harness_err("split scale turn"))?;
        }
        drop(runs);
        harness.shutdown().await;
        // The store goes before what it lives in (the directory).
        drop(harness);
        drop(hold);
        Ok(turns)
    })
}

/// The marks a run of one shared store takes before its clock starts: the peak-memory mark
/// reset, resident memory and the stores' held times.
pub(super) struct Marks {
    peak_is_this_run: bool,
    rss_before: Option<u64>,
    held_before: Vec<HeldTimes>,
}

impl Marks {
    pub(super) fn take(stores: &[Arc<SqliteStore>]) -> Marks {
        Marks {
            peak_is_this_run: reset_peak_rss(),
            rss_before: rss_bytes(),
            held_before: stores.iter().map(|s| s.held_times()).collect(),
        }
    }

    /// What the run measured, read now, against these marks.
    pub(super) fn measured(
        self,
        stores: &[Arc<SqliteStore>],
        turns: usize,
        elapsed: Duration,
        cpu: Option<Duration>,
    ) -> Measured {
        Measured {
            turns,
            elapsed,
            rss_before: self.rss_before,
            rss_after: rss_bytes(),
            peak_is_this_run: self.peak_is_this_run,
            held: busiest_since(stores, self.held_before),
            cpu,
        }
    }
}

/// What one scale run measured, for [`ScaleResult::of_run`].
pub(super) struct Measured {
    pub turns: usize,
    pub elapsed: Duration,
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    pub peak_is_this_run: bool,
    pub held: Option<HeldTimes>,
    pub cpu: Option<Duration>,
}

/// How a scale run's turns ran: on one multi-thread runtime, split (nothing shared), or on
/// lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunShape {
    Shared,
    Split,
    Lanes,
}

impl ScaleResult {
    /// The result of a run of `sessions` on `workers` shaped as `shape`, into `target`.
    pub(super) fn of_run(
        target: &ScaleTarget,
        workers: usize,
        sessions: usize,
        shape: RunShape,
        measured: Measured,
    ) -> ScaleResult {
        ScaleResult {
            store: target.store,
            workers,
            sessions,
            turns: measured.turns,
            elapsed: measured.elapsed,
            rss_before: measured.rss_before,
            rss_after: measured.rss_after,
            peak_rss: peak_rss_bytes(),
            peak_is_this_run: measured.peak_is_this_run,
            held: measured.held,
            cpu: measured.cpu,
            split: shape == RunShape::Split,
            shards: target.shards,
            lanes: shape == RunShape::Lanes,
        }
    }
}

/// The held times since `before` of the busiest of `stores` (with shards, the others'
/// writers ran beside it).
fn busiest_since(stores: &[Arc<SqliteStore>], before: Vec<HeldTimes>) -> Option<HeldTimes> {
    stores
        .iter()
        .zip(before)
        .map(|(s, before)| s.held_times().since(&before))
        .max_by_key(|h| h.writer)
}

/// Runs `work(first, count, start)` on a thread per share of `shares` (the sessions numbered
/// from `first`); each passes `start` once ready, and the clock starts when all have. `then`
/// runs after they all end, inside the measured time. Returns each thread's outcome, the
/// wall time and the process's CPU time.
pub(super) fn timed_on_threads<T: Send>(
    shares: &[usize],
    work: impl Fn(usize, usize, &std::sync::Barrier) -> T + Sync,
    then: impl FnOnce(),
) -> (Vec<std::thread::Result<T>>, Duration, Option<Duration>) {
    let start = std::sync::Barrier::new(shares.len() + 1);
    std::thread::scope(|scope| {
        let mut first = 0;
        let handles: Vec<_> = shares
            .iter()
            .map(|&count| {
                let from = first;
                first += count;
                let (start, work) = (&start, &work);
                scope.spawn(move || work(from, count, start))
            })
            .collect();
        start.wait();
        let cpu_before = process_cpu_time();
        let started = Instant::now();
        let outcomes: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        then();
        let elapsed = started.elapsed();
        let cpu = process_cpu_time()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        (outcomes, elapsed, cpu)
    })
}

/// The turns the threads of a run completed; `what` names a thread in the error when one
/// panicked.
pub(super) fn turns_of(
    outcomes: Vec<std::thread::Result<Result<usize, BenchError>>>,
    what: &'static str,
) -> Result<usize, BenchError> {
    let mut turns = 0;
    for outcome in outcomes {
        turns += outcome.map_err(|_| BenchError::Runtime {
            operation: what,
            message: "the thread panicked".into(),
        })??;
    }
    Ok(turns)
}

fn run_split(
    sessions: usize,
    workers: usize,
    target: &ScaleTarget,
) -> Result<ScaleResult, BenchError> {
    let shares = split_sessions(sessions, workers);
    // The stores open before the clock starts: every worker waits at the barrier, and so
    // does this thread.
    let peak_is_this_run = reset_peak_rss();
    let rss_before = rss_bytes();
    let (outcomes, elapsed, cpu) = timed_on_threads(
        &shares,
        |from, count, start| split_worker(from, count, target, start),
        || (),
    );
    let rss_after = rss_bytes();
    let turns = turns_of(outcomes, "split scale worker")?;
    let measured = Measured {
        turns,
        elapsed,
        rss_before,
        rss_after,
        peak_is_this_run,
        // Several stores are not one resource: no serial share.
        held: None,
        cpu,
    };
    Ok(ScaleResult::of_run(
        target,
        workers,
        sessions,
        RunShape::Split,
        measured,
    ))
}

fn binding_heap_bytes(b: &ThreadBinding) -> usize {
    let projection = b.engine.projection.as_ref().map_or(0, |p| {
        p.epoch.capacity() + p.fingerprint.as_ref().map_or(0, String::capacity)
    });
    std::mem::size_of::<ThreadBinding>()
        + b.binding_key.capacity()
        + b.thread_id.0.capacity()
        + b.engine.engine_id.capacity()
        + b.engine.policy_fingerprint.capacity()
        + projection
        + b.tools_fingerprint.capacity()
        + b.developer_instructions_sha256.capacity()
}

/// Measures the resident memory of `n` idle bindings in a moka cache configured exactly like
/// the harness's (`String` → `Option<Arc<ThreadBinding>>`, capacity 100 000, 1 h idle expiry).
/// The bindings are copies of a real one written by a harness turn, each with its own key and
/// thread id. Run it before anything else allocates, so the growth is not hidden by freed memory
/// the allocator reuses.
pub async fn measure_binding_cache(n: usize) -> Result<BindingMemory, BenchError> {
    let template = {
        let (harness, _hold, _) = scale_harness(&ScaleTarget::sqlite(ScaleStore::Memory))?;
        harness
            .turn(TurnSpec::new("scale-session-0", bench_prompt(1)))
            .await
            .map_err(harness_err("binding template turn"))?;
        let binding = harness
            .binding("scale-session-0")
            .await
            .map_err(harness_err("read the template binding"))?;
        harness.shutdown().await;
        binding.ok_or(BenchError::Runtime {
            operation: "binding template turn",
            message: "the turn wrote no binding".into(),
        })?
    };
    let cache: moka::future::Cache<String, Option<Arc<ThreadBinding>>> =
        moka::future::Cache::builder()
            .max_capacity(100_000)
            .time_to_idle(Duration::from_secs(3600))
            .build();
    let before = rss_bytes();
    for i in 0..n {
        let key = binding_key(BENCH_AGENT_ID, Some(&format!("scale-session-{i}")), "");
        let binding = ThreadBinding {
            binding_key: key.clone(),
            thread_id: ThreadId(format!("mock-thread-{:032x}", i as u128 + 1)),
            ..template.clone()
        };
        cache.insert(key, Some(Arc::new(binding))).await;
    }
    cache.run_pending_tasks().await;
    let after = rss_bytes();
    let held = cache.entry_count();
    drop(cache);
    Ok(BindingMemory {
        bindings: usize::try_from(held).unwrap_or(n),
        rss_delta: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
        binding_heap_bytes: binding_heap_bytes(&template),
    })
}

/// A result of 1 000 sessions (5 000 turns) on `workers` in `seconds`, with `cpu_seconds` of
/// CPU when given, for the reports' tests.
#[cfg(test)]
pub(crate) fn test_result(
    store: ScaleStore,
    workers: usize,
    seconds: f64,
    cpu_seconds: Option<f64>,
) -> ScaleResult {
    ScaleResult {
        store,
        workers,
        sessions: 1000,
        turns: 5000,
        elapsed: Duration::from_secs_f64(seconds),
        rss_before: None,
        rss_after: None,
        peak_rss: None,
        peak_is_this_run: true,
        held: None,
        cpu: cpu_seconds.map(Duration::from_secs_f64),
        split: false,
        shards: 1,
        lanes: false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Split workers get every session once, as evenly as can be.
    #[test]
    fn split_sessions_share_every_session_evenly() {
        for sessions in 0..40 {
            for workers in 1..6 {
                let shares = split_sessions(sessions, workers);
                assert_eq!(shares.len(), workers);
                assert_eq!(shares.iter().sum::<usize>(), sessions);
                let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(max - min <= 1, "{sessions} over {workers}: {shares:?}");
            }
        }
        assert_eq!(split_sessions(5, 0), [5], "no workers counts as one");
    }

    /// A small split run completes every turn of every session, in memory and on a file.
    #[tokio::test]
    async fn small_split_run_completes_every_turn() {
        for store in [ScaleStore::Memory, ScaleStore::File] {
            let r = run_split_on_own_threads(21, 2, ScaleTarget::sqlite(store))
                .await
                .unwrap();
            assert_eq!(r.turns, 21 * TURNS_PER_SESSION);
            assert!(r.split && r.workers == 2 && r.held.is_none());
        }
    }

    fn bindings() -> BindingMemory {
        BindingMemory {
            bindings: 1,
            rss_delta: None,
            binding_heap_bytes: 0,
        }
    }

    /// A small scale run on its own runtime completes every turn of every session.
    #[tokio::test]
    async fn small_scale_run_completes_every_turn() {
        let r = run_on_own_runtime(20, 2, ScaleTarget::sqlite(ScaleStore::File), false)
            .await
            .unwrap();
        assert_eq!(r.turns, 20 * TURNS_PER_SESSION);
        assert_eq!(r.workers, 2);
        assert!(!r.lanes);
    }

    /// A small scale run on lanes completes every turn of every session, writes through the
    /// one shared store (its queue counts every lease, record and release), and says so in
    /// the report.
    #[tokio::test]
    async fn small_scale_run_on_lanes_completes_every_turn() {
        for store in [ScaleStore::Memory, ScaleStore::File] {
            let r = run_on_own_runtime(21, 2, ScaleTarget::sqlite(store), true)
                .await
                .unwrap();
            assert_eq!(r.turns, 21 * TURNS_PER_SESSION);
            assert!(r.lanes && r.workers == 2 && !r.split);
            let held = r.held.expect("one shared SQLite store");
            assert!(
                held.queued_writes >= r.turns as u64,
                "{} queued writes for {} turns",
                held.queued_writes,
                r.turns
            );
            let report = format_report(&[r], &bindings());
            assert!(report.contains("turns served on lanes"), "{report}");
        }
    }

    /// The binding-cache measurement holds every binding it inserted.
    #[tokio::test]
    async fn binding_cache_holds_every_binding() {
        let m = measure_binding_cache(500).await.unwrap();
        assert_eq!(m.bindings, 500);
        assert!(m.binding_heap_bytes > std::mem::size_of::<ThreadBinding>());
    }
}
