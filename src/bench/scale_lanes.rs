//! The scale run on lanes: the sessions' turns served as `serve --front responses` serves
//! them, on a single-threaded runtime per worker, all sharing one harness and one store.

use std::sync::Arc;
use std::time::Instant;

use super::process::{peak_rss_bytes, process_cpu_time, reset_peak_rss, rss_bytes};
use super::scale::{
    run_session_range, scale_harness, split_sessions, ScaleResult, ScaleTarget, SESSIONS_IN_FLIGHT,
};
use super::BenchError;
use crate::store::HeldTimes;

/// Runs the scale sessions on `workers` lanes, as `serve --front responses` serves turns:
/// each lane a thread with a single-threaded runtime, all sharing one harness and one store;
/// the sessions are dealt out in equal shares, each lane keeping its share of the sessions in
/// flight. The harness is built on a runtime of its own, as the server's is.
pub(super) fn run_lanes(
    sessions: usize,
    workers: usize,
    target: &ScaleTarget,
) -> Result<ScaleResult, BenchError> {
    let outer = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| BenchError::Runtime {
            operation: "build the scale runtime",
            message: e.to_string(),
        })?;
    let (harness, hold, sqlite) = {
        let _enter = outer.enter();
        scale_harness(target)?
    };
    let harness = Arc::new(harness);
    let shares = split_sessions(sessions, workers);
    let in_flight = SESSIONS_IN_FLIGHT / shares.len().max(1);
    let start = std::sync::Barrier::new(shares.len() + 1);
    let peak_is_this_run = reset_peak_rss();
    let rss_before = rss_bytes();
    let held_before: Vec<HeldTimes> = sqlite.iter().map(|s| s.held_times()).collect();
    let (outcomes, elapsed, cpu) = std::thread::scope(|scope| {
        let mut first = 0;
        let handles: Vec<_> = shares
            .iter()
            .map(|&count| {
                let from = first;
                first += count;
                let start = &start;
                let harness = harness.clone();
                scope.spawn(move || -> Result<usize, BenchError> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| BenchError::Runtime {
                            operation: "build a lane",
                            message: e.to_string(),
                        });
                    start.wait();
                    let runtime = runtime?;
                    runtime.block_on(run_session_range(harness, from..from + count, in_flight))
                })
            })
            .collect();
        start.wait();
        let cpu_before = process_cpu_time();
        let started = Instant::now();
        let outcomes: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        outer.block_on(harness.release_held_sessions());
        let elapsed = started.elapsed();
        let cpu = process_cpu_time()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        (outcomes, elapsed, cpu)
    });
    let held = sqlite
        .iter()
        .zip(held_before)
        .map(|(s, before)| s.held_times().since(&before))
        .max_by_key(|h| h.writer);
    let rss_after = rss_bytes();
    let mut turns = 0;
    for outcome in outcomes {
        turns += outcome.map_err(|_| BenchError::Runtime {
            operation: "lane scale worker",
            message: "the lane thread panicked".into(),
        })??;
    }
    outer.block_on(harness.shutdown());
    drop(harness);
    drop(hold);
    Ok(ScaleResult {
        store: target.store,
        workers,
        sessions,
        turns,
        elapsed,
        rss_before,
        rss_after,
        peak_rss: peak_rss_bytes(),
        peak_is_this_run,
        held,
        cpu,
        split: false,
        shards: target.shards,
        lanes: true,
    })
}
