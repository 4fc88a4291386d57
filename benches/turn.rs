//! The whole turn path (`Harness::turn`) on the in-process mock backend with the bench engine
//! (about 20 KB of assembled context), in-memory SqliteStore:
//! - `reused_thread`: a thread_bootstrap session's second turn — matching binding, bare prompt
//!   into the reused thread;
//! - `projecting_new_thread`: a thread_bootstrap session's first turn — the context rendered in
//!   bootstrap mode onto a new thread;
//! - `projecting_per_turn`: a per_turn session's second turn — the context rendered again into
//!   the same thread.
//!
//! Each sample gets a fresh harness and fresh sessions (primed outside the timing), so every
//! timed turn sees the same state however many iterations criterion asks for.
//!
//! Run: `cargo bench --bench turn -- --warm-up-time 1 --measurement-time 5`
// A benchmark whose setup fails has nothing to measure: aborting with the error is the outcome.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ctxbridge::backend::MockBackend;
use ctxbridge::bench::{bench_harness, bench_prompt, BenchEngineConfig, BenchMode};
use ctxbridge::harness::TurnSpec;
use ctxbridge::store::{SqliteStore, StateStore};

#[derive(Clone, Copy)]
enum Case {
    Reused,
    ProjectingNewThread,
    ProjectingPerTurn,
}

/// Times one turn on each of `iters` fresh sessions.
async fn timed_turns(iters: u64, case: Case) -> Duration {
    let mode = match case {
        Case::Reused | Case::ProjectingNewThread => BenchMode::ThreadBootstrap,
        Case::ProjectingPerTurn => BenchMode::PerTurn,
    };
    let store: Arc<dyn StateStore> =
        Arc::new(SqliteStore::in_memory().expect("in-memory store opens"));
    let (harness, _) = bench_harness(
        mode,
        BenchEngineConfig::default(),
        Arc::new(MockBackend::new()),
        store,
    );
    let sessions: Vec<String> = (0..iters).map(|i| format!("bench-{i}")).collect();
    let primed = !matches!(case, Case::ProjectingNewThread);
    if primed {
        for key in &sessions {
            harness
                .turn(TurnSpec::new(key.clone(), bench_prompt(1)))
                .await
                .expect("priming turn");
        }
    }
    let turn = if primed { 2 } else { 1 };
    let started = Instant::now();
    for key in &sessions {
        harness
            .turn(TurnSpec::new(key.clone(), bench_prompt(turn)))
            .await
            .expect("timed turn");
    }
    let elapsed = started.elapsed();
    harness.shutdown().await;
    elapsed
}

fn turn_path(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("turn_mock");
    for (name, case) in [
        ("reused_thread", Case::Reused),
        ("projecting_new_thread", Case::ProjectingNewThread),
        ("projecting_per_turn", Case::ProjectingPerTurn),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| runtime.block_on(timed_turns(iters, case)))
        });
    }
    group.finish();
}

criterion_group!(benches, turn_path);
criterion_main!(benches);
