//! Overhead: the time ctxbridge adds to a turn over the backend's own time.
//!
//! The in-process mock backend is wrapped in [`TimedBackend`]; each turn's wall time minus the
//! time spent inside the backend is the overhead (store reads and writes, session lease,
//! assemble, bounding, fingerprints, decision, rendering, transcript append, binding write,
//! engine hooks). Turns run one at a time so the backend timer is attributable. The bench
//! engine's assemble time is reported beside it (it is part of the overhead, but it is the
//! engine's, not the harness's).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::timed_store::{OpTotals, TimedStore};
use super::{
    bench_harness, bench_prompt, harness_err, percentile, BenchEngineConfig, BenchError, BenchMode,
    TimedBackend,
};
use crate::backend::MockBackend;
use crate::harness::TurnSpec;
use crate::store::SqliteStore;

/// What kind of turn a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnKind {
    /// thread_bootstrap, matching binding: the bare prompt into the reused thread.
    Reused,
    /// thread_bootstrap at a new epoch (or first turn): rendered context on a new thread.
    ProjectingNewThread,
    /// per_turn: rendered context into the same thread, every turn.
    ProjectingPerTurn,
    /// legacy: bare prompt, no projection.
    Legacy,
}

impl TurnKind {
    pub const ALL: [TurnKind; 4] = [
        TurnKind::Reused,
        TurnKind::ProjectingNewThread,
        TurnKind::ProjectingPerTurn,
        TurnKind::Legacy,
    ];

    pub fn label(self) -> &'static str {
        match self {
            TurnKind::Reused => "reused (thread_bootstrap)",
            TurnKind::ProjectingNewThread => "projecting, new thread (thread_bootstrap)",
            TurnKind::ProjectingPerTurn => "projecting, same thread (per_turn)",
            TurnKind::Legacy => "legacy (bare prompt)",
        }
    }
}

/// One timed turn.
#[derive(Debug, Clone, Copy)]
pub struct OverheadSample {
    pub kind: TurnKind,
    pub total: Duration,
    pub backend: Duration,
    pub engine: Duration,
    pub store: Duration,
}

impl OverheadSample {
    pub fn overhead(&self) -> Duration {
        self.total.saturating_sub(self.backend)
    }
}

/// Percentiles of one kind of turn.
#[derive(Debug, Clone)]
pub struct OverheadSummary {
    pub kind: TurnKind,
    pub samples: usize,
    pub overhead_p50: Duration,
    pub overhead_p99: Duration,
    pub backend_p50: Duration,
    pub engine_p50: Duration,
    pub store_p50: Duration,
    pub total_p50: Duration,
}

/// The overhead run: summaries per kind of turn and the store's time per operation.
#[derive(Debug, Clone)]
pub struct OverheadReport {
    pub summaries: Vec<OverheadSummary>,
    /// Store calls and time per operation over every timed turn of every mode.
    pub store_ops: Vec<OpTotals>,
    pub timed_turns: usize,
}

/// Summarises samples per kind (kinds without samples are left out).
pub fn summarise(samples: &[OverheadSample]) -> Vec<OverheadSummary> {
    TurnKind::ALL
        .iter()
        .filter_map(|kind| {
            let of_kind: Vec<&OverheadSample> =
                samples.iter().filter(|s| s.kind == *kind).collect();
            let sorted = |f: &dyn Fn(&OverheadSample) -> Duration| {
                let mut v: Vec<Duration> = of_kind.iter().map(|s| f(s)).collect();
                v.sort_unstable();
                v
            };
            let overhead = sorted(&|s| s.overhead());
            Some(OverheadSummary {
                kind: *kind,
                samples: of_kind.len(),
                overhead_p50: percentile(&overhead, 50)?,
                overhead_p99: percentile(&overhead, 99)?,
                backend_p50: percentile(&sorted(&|s| s.backend), 50)?,
                engine_p50: percentile(&sorted(&|s| s.engine), 50)?,
                store_p50: percentile(&sorted(&|s| s.store), 50)?,
                total_p50: percentile(&sorted(&|s| s.total), 50)?,
            })
        })
        .collect()
}

/// Times `sessions` sessions of `turns` turns per mode (after one warm-up session per mode).
pub async fn run(sessions: usize, turns: usize) -> Result<OverheadReport, BenchError> {
    let mut samples = Vec::new();
    let mut store_ops: Vec<OpTotals> = Vec::new();
    for mode in BenchMode::ALL {
        let backend = Arc::new(TimedBackend::new(MockBackend::new()));
        let store = timed_memory_store()?;
        let (harness, engine) = bench_harness(
            mode,
            BenchEngineConfig::default(),
            backend.clone(),
            store.clone(),
        );
        // Store totals of the warm-up session are left out.
        let mut warm_up_ops: Vec<OpTotals> = Vec::new();
        for session in 0..=sessions {
            let key = format!("overhead-{session}");
            for turn in 1..=turns {
                let backend_before = backend.elapsed();
                let store_before = store.elapsed();
                let engine_before = engine.as_ref().map_or(0, |e| e.assemble_nanos());
                let started = Instant::now();
                let report = harness
                    .turn(TurnSpec::new(key.clone(), bench_prompt(turn)))
                    .await
                    .map_err(harness_err("overhead turn"))?;
                let total = started.elapsed();
                if session == 0 {
                    if turn == turns {
                        warm_up_ops = store.totals();
                    }
                    continue;
                }
                let kind = match (mode, report.projected) {
                    (BenchMode::Legacy, _) => TurnKind::Legacy,
                    (BenchMode::PerTurn, _) => TurnKind::ProjectingPerTurn,
                    (
                        BenchMode::ThreadBootstrap | BenchMode::ThreadBootstrapAdditionalContext,
                        true,
                    ) => TurnKind::ProjectingNewThread,
                    (
                        BenchMode::ThreadBootstrap | BenchMode::ThreadBootstrapAdditionalContext,
                        false,
                    ) => TurnKind::Reused,
                };
                let engine_nanos = engine
                    .as_ref()
                    .map_or(0, |e| e.assemble_nanos())
                    .saturating_sub(engine_before);
                samples.push(OverheadSample {
                    kind,
                    total,
                    backend: backend.elapsed().saturating_sub(backend_before),
                    engine: Duration::from_nanos(engine_nanos),
                    store: store.elapsed().saturating_sub(store_before),
                });
            }
        }
        harness.shutdown().await;
        for t in store.totals() {
            let warm = warm_up_ops.iter().find(|w| w.op == t.op);
            let calls = t.calls - warm.map_or(0, |w| w.calls);
            let time = t
                .time
                .saturating_sub(warm.map_or(Duration::ZERO, |w| w.time));
            match store_ops.iter_mut().find(|o| o.op == t.op) {
                Some(o) => {
                    o.calls += calls;
                    o.time += time;
                }
                None => store_ops.push(OpTotals {
                    op: t.op,
                    calls,
                    time,
                }),
            }
        }
    }
    store_ops.sort_by_key(|o| std::cmp::Reverse(o.time));
    Ok(OverheadReport {
        summaries: summarise(&samples),
        store_ops,
        timed_turns: samples.len(),
    })
}

/// A fresh in-memory SQLite store, timed per operation.
fn timed_memory_store() -> Result<Arc<TimedStore>, BenchError> {
    let store = SqliteStore::in_memory().map_err(|source| BenchError::Store {
        operation: "open an in-memory store",
        source,
    })?;
    Ok(Arc::new(TimedStore::new(store)))
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// The overhead table and the target line.
pub fn format_table(report: &OverheadReport, sessions: usize, turns: usize) -> String {
    let summaries = &report.summaries;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== Overhead per turn (in-process mock wrapped in a timing decorator; {sessions} sessions × {turns} turns per mode, turns one at a time; µs) =="
    );
    let _ = writeln!(
        out,
        "{:<42} {:>8} {:>13} {:>13} {:>11} {:>11} {:>12} {:>10}",
        "turn kind",
        "samples",
        "overhead p50",
        "overhead p99",
        "store p50",
        "engine p50",
        "backend p50",
        "total p50"
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "{:<42} {:>8} {:>13} {:>13} {:>11} {:>11} {:>12} {:>10}",
            s.kind.label(),
            s.samples,
            us(s.overhead_p50),
            us(s.overhead_p99),
            us(s.store_p50),
            us(s.engine_p50),
            us(s.backend_p50),
            us(s.total_p50)
        );
    }
    let store_total: Duration = report.store_ops.iter().map(|o| o.time).sum();
    let _ = writeln!(
        out,
        "store time by operation (in-memory SqliteStore, all {} timed turns): {}",
        report.timed_turns,
        report
            .store_ops
            .iter()
            .map(|o| format!(
                "{} {:.2}/turn × {:.1} µs ({:.0}%)",
                o.op.as_str(),
                o.calls as f64 / report.timed_turns.max(1) as f64,
                o.time.as_secs_f64() * 1e6 / o.calls.max(1) as f64,
                100.0 * o.time.as_secs_f64() / store_total.as_secs_f64().max(1e-12)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(reused) = summaries.iter().find(|s| s.kind == TurnKind::Reused) {
        let _ = writeln!(
            out,
            "reused-turn overhead: p50 {} µs",
            us(reused.overhead_p50)
        );
    }
    out
}

/// The turns of one long session at which [`long_session`] reports the reused-turn overhead.
pub const LONG_SESSION_CHECKPOINTS: [usize; 4] = [10, 100, 1_000, 2_000];

/// Reused turns on each side of a checkpoint whose median is reported for it.
const CHECKPOINT_WINDOW: usize = 5;

/// The reused-turn overhead around one turn of a long session.
#[derive(Debug, Clone, Copy)]
pub struct LongSessionPoint {
    /// The turn number.
    pub turn: usize,
    /// Median overhead of the reused turns within ±5 turns of it.
    pub overhead_p50: Duration,
    /// Median store time of the same turns.
    pub store_p50: Duration,
    /// Median engine (assemble) time of the same turns.
    pub engine_p50: Duration,
}

/// Runs one thread_bootstrap session up to the last of `checkpoints` (plus the window after
/// it) and reports the reused-turn overhead around each checkpoint: whether per-turn cost
/// grows with the session's length.
pub async fn long_session(checkpoints: &[usize]) -> Result<Vec<LongSessionPoint>, BenchError> {
    let backend = Arc::new(TimedBackend::new(MockBackend::new()));
    let store = timed_memory_store()?;
    let (harness, engine) = bench_harness(
        BenchMode::ThreadBootstrap,
        BenchEngineConfig::default(),
        backend.clone(),
        store.clone(),
    );
    let last = checkpoints.iter().copied().max().unwrap_or(0) + CHECKPOINT_WINDOW;
    let mut samples: Vec<(usize, OverheadSample)> = Vec::new();
    for turn in 1..=last {
        let near = checkpoints
            .iter()
            .any(|c| turn + CHECKPOINT_WINDOW >= *c && turn <= c + CHECKPOINT_WINDOW);
        let backend_before = backend.elapsed();
        let store_before = store.elapsed();
        let engine_before = engine.as_ref().map_or(0, |e| e.assemble_nanos());
        let started = Instant::now();
        let report = harness
            .turn(TurnSpec::new("long-session", bench_prompt(turn)))
            .await
            .map_err(harness_err("long-session turn"))?;
        let total = started.elapsed();
        if !near || report.projected {
            continue;
        }
        let engine_nanos = engine
            .as_ref()
            .map_or(0, |e| e.assemble_nanos())
            .saturating_sub(engine_before);
        samples.push((
            turn,
            OverheadSample {
                kind: TurnKind::Reused,
                total,
                backend: backend.elapsed().saturating_sub(backend_before),
                engine: Duration::from_nanos(engine_nanos),
                store: store.elapsed().saturating_sub(store_before),
            },
        ));
    }
    harness.shutdown().await;
    let points = checkpoints
        .iter()
        .filter_map(|c| {
            let around: Vec<&OverheadSample> = samples
                .iter()
                .filter(|(t, _)| t + CHECKPOINT_WINDOW >= *c && *t <= c + CHECKPOINT_WINDOW)
                .map(|(_, s)| s)
                .collect();
            let median = |f: &dyn Fn(&OverheadSample) -> Duration| {
                let mut v: Vec<Duration> = around.iter().map(|s| f(s)).collect();
                v.sort_unstable();
                percentile(&v, 50)
            };
            Some(LongSessionPoint {
                turn: *c,
                overhead_p50: median(&|s| s.overhead())?,
                store_p50: median(&|s| s.store)?,
                engine_p50: median(&|s| s.engine)?,
            })
        })
        .collect();
    Ok(points)
}

/// The long-session table: overhead per checkpoint and its ratio to the first checkpoint.
pub fn format_long_session(points: &[LongSessionPoint]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== Reused-turn overhead along one session (thread_bootstrap, in-memory store; median of the reused turns within ±{CHECKPOINT_WINDOW}; µs) =="
    );
    let _ = writeln!(out, "{}", super::load_line());
    let _ = writeln!(
        out,
        "{:>6} {:>10} {:>8} {:>8} {:>10}",
        "turn", "overhead", "store", "engine", "vs first"
    );
    let first = points.first().map(|p| p.overhead_p50);
    for p in points {
        let ratio = first.map_or(1.0, |f| {
            p.overhead_p50.as_secs_f64() / f.as_secs_f64().max(1e-9)
        });
        let _ = writeln!(
            out,
            "{:>6} {:>10} {:>8} {:>8} {:>9.2}×",
            p.turn,
            us(p.overhead_p50),
            us(p.store_p50),
            us(p.engine_p50),
            ratio
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A short run yields every kind of turn, and the overhead never counts backend time.
    #[tokio::test]
    async fn run_classifies_every_kind_of_turn() {
        let report = run(1, 12).await.unwrap();
        let summaries = &report.summaries;
        let kinds: Vec<TurnKind> = summaries.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, TurnKind::ALL.to_vec());
        let reused = &summaries[0];
        // 12 turns: turn 1 and turn 11 project, the other 10 reuse the thread.
        assert_eq!(reused.samples, 10);
        assert_eq!(summaries[1].samples, 2);
        assert!(summaries
            .iter()
            .all(|s| s.overhead_p50 <= s.total_p50 && s.overhead_p50 <= s.overhead_p99));
        // A session's run of turns takes the session lease in the store once, not once per
        // turn: the lease is kept between the turns (one timed session per mode).
        let lease = report
            .store_ops
            .iter()
            .find(|o| o.op == crate::bench::timed_store::StoreOp::TryAcquireLease)
            .unwrap();
        assert_eq!(lease.calls as usize, BenchMode::ALL.len());
        assert_eq!(report.timed_turns, 12 * BenchMode::ALL.len());
    }

    /// The long-session run reports every checkpoint asked for, and each point's store time is
    /// part of its overhead.
    #[tokio::test]
    async fn long_session_reports_every_checkpoint() {
        let points = long_session(&[10, 30]).await.unwrap();
        let turns: Vec<usize> = points.iter().map(|p| p.turn).collect();
        assert_eq!(turns, [10, 30]);
        assert!(points.iter().all(|p| p.store_p50 <= p.overhead_p50));
    }
}
