//! The scale run on lanes: the sessions' turns served as `serve --front responses` serves
//! them, on a single-threaded runtime per worker, all sharing one harness and one store.

use std::sync::Arc;

use super::scale::{
    run_session_range, scale_harness, scale_runtime, split_sessions, timed_on_threads, turns_of,
    Marks, RunShape, ScaleResult, ScaleTarget, SESSIONS_IN_FLIGHT,
};
use super::BenchError;

/// Runs the scale sessions on `workers` lanes, as `serve --front responses` serves turns:
/// each lane a thread with a single-threaded runtime, all sharing one harness and one store;
/// the sessions are dealt out in equal shares, each lane keeping its share of the sessions in
/// flight. The harness is built on a runtime of its own, as the server's is.
pub(super) fn run_lanes(
    sessions: usize,
    workers: usize,
    target: &ScaleTarget,
) -> Result<ScaleResult, BenchError> {
    let outer = scale_runtime(1)?;
    let (harness, hold, sqlite) = {
        let _enter = outer.enter();
        scale_harness(target)?
    };
    let harness = Arc::new(harness);
    let shares = split_sessions(sessions, workers);
    let in_flight = SESSIONS_IN_FLIGHT / shares.len().max(1);
    let marks = Marks::take(&sqlite);
    let (outcomes, elapsed, cpu) = timed_on_threads(
        &shares,
        |from, count, start| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| BenchError::Runtime {
                    operation: "build a lane",
                    message: e.to_string(),
                });
            // Every lane passes the barrier, built or not, so none waits for ever.
            start.wait();
            runtime?.block_on(run_session_range(
                harness.clone(),
                from..from + count,
                in_flight,
            ))
        },
        // The leases kept after the last turns are released inside the measured time.
        || outer.block_on(harness.release_held_sessions()),
    );
    let turns = turns_of(outcomes, "lane of the scale run")?;
    let measured = marks.measured(&sqlite, turns, elapsed, cpu);
    outer.block_on(harness.shutdown());
    // The store goes before what it lives in (the directory, the schema).
    drop(harness);
    drop(hold);
    Ok(ScaleResult::of_run(
        target,
        workers,
        sessions,
        RunShape::Lanes,
        measured,
    ))
}
