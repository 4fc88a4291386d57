//! The measurements behind `ctxbridge bench` (whose arguments and report live in the CLI): what
//! projection costs, what the harness adds per turn, and how it scales.
//!
//! Layout:
//! - [`engine`]: the bench engine — about 20 KB of assembled context growing by one exchange a
//!   turn, an epoch change every 10 turns, per_turn or thread_bootstrap by configuration.
//! - [`timed`]: [`TimedBackend`], a timing decorator for any [`ThreadedBackend`].
//! - [`timed_store`]: [`timed_store::TimedStore`], a timing decorator for any state store.
//! - [`projection_cost`]: one scripted session run as legacy, per_turn and thread_bootstrap
//!   against the in-process mock, the real Codex app-server, or the Responses backend (chain and
//!   conversation threads) on the stateful mock model server; per-turn and cumulative sizes, the
//!   ratio to the minimum a model must receive; table and CSV.
//! - [`chart`]: the SVG chart of cumulative model-request bytes.
//! - [`overhead`]: the time ctxbridge adds per turn over the backend's own time.
//! - [`scale`]: many sessions on a multi-thread runtime; turns/s, RSS, memory per cached binding.
//! - [`serve`]: `bench --serve` — `serve`'s added latency, relay throughput, memory per idle
//!   connection and concurrent clients, in front of the real Codex app-server.
//!
//! Figures are printed, never asserted: the tests check behaviour only.

pub mod chart;
pub mod engine;
pub mod engines;
pub mod overhead;
mod peer;
pub mod process;
pub mod projection_cost;
pub mod scale;
mod scale_lanes;
mod scale_report;
pub mod scale_rounds;
pub mod serve;
mod serve_engine;
pub mod serve_responses;
pub mod timed;
pub mod timed_store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;

use crate::backend::{BackendError, ContextDelivery, ThreadedBackend};
use crate::contract::{ContextEngine, ProjectionMode};
use crate::harness::{Harness, HarnessConfig, HarnessError};
use crate::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use crate::store::{StateStore, StoreError};

pub use engine::{bench_prompt, BenchEngine, BenchEngineConfig, BenchView, BENCH_ENGINE_ID};
pub use process::{load_average, load_line};
pub use timed::TimedBackend;

/// The agent id of every bench harness.
pub const BENCH_AGENT_ID: &str = "bench";
/// The token budget of every bench harness (large enough that nothing is truncated).
pub const BENCH_TOKEN_BUDGET: u64 = 400_000;
/// Base instructions of every bench thread (short, so Codex does not send its ~17 KB default).
pub const BENCH_BASE_INSTRUCTIONS: &str =
    "You are the ctxbridge benchmark assistant. Answer briefly.";
/// Configured developer instructions of every bench harness.
pub const BENCH_DEVELOPER_INSTRUCTIONS: &str =
    "Follow the project's conventions and say which part of the context you relied on.";

/// The backend of the projection-cost run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// The in-process mock backend (Codex-like model requests, counted in characters).
    Mock,
    /// The real Codex app-server, offline against the loopback mock model server.
    Codex,
    /// The Responses API backend over HTTP to the loopback mock model server in its stateful
    /// mode, once with chain threads and once with conversation threads.
    Responses,
}

impl BenchBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            BenchBackend::Mock => "mock",
            BenchBackend::Codex => "codex",
            BenchBackend::Responses => "responses",
        }
    }
}

/// How a bench session is projected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BenchMode {
    /// The legacy engine: no projection, bare prompts, the backend thread owns continuity.
    Legacy,
    /// The bench engine asking for per_turn projection.
    PerTurn,
    /// The bench engine asking for thread_bootstrap projection.
    ThreadBootstrap,
    /// thread_bootstrap with the context delivered as Codex `additionalContext` (a developer
    /// item) instead of in the turn input; measured on the Codex backend only.
    ThreadBootstrapAdditionalContext,
}

impl BenchMode {
    pub const ALL: [BenchMode; 3] = [
        BenchMode::Legacy,
        BenchMode::PerTurn,
        BenchMode::ThreadBootstrap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BenchMode::Legacy => "legacy",
            BenchMode::PerTurn => "per_turn",
            BenchMode::ThreadBootstrap => "thread_bootstrap",
            BenchMode::ThreadBootstrapAdditionalContext => "thread_bootstrap_ac",
        }
    }

    /// Where the mode's projections go: the turn input, except for
    /// [`BenchMode::ThreadBootstrapAdditionalContext`].
    pub fn context_delivery(self) -> ContextDelivery {
        match self {
            BenchMode::ThreadBootstrapAdditionalContext => ContextDelivery::AdditionalContext,
            _ => ContextDelivery::TurnInput,
        }
    }

    fn projection(self) -> Option<ProjectionMode> {
        match self {
            BenchMode::Legacy => None,
            BenchMode::PerTurn => Some(ProjectionMode::PerTurn),
            BenchMode::ThreadBootstrap | BenchMode::ThreadBootstrapAdditionalContext => {
                Some(ProjectionMode::ThreadBootstrap)
            }
        }
    }
}

/// Why a benchmark could not run. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("{operation}: {source}")]
    Harness {
        operation: &'static str,
        #[source]
        source: Box<HarnessError>,
    },
    #[error("{operation}: {source}")]
    Store {
        operation: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("{operation}: {source}")]
    Backend {
        operation: &'static str,
        #[source]
        source: BackendError,
    },
    #[error("{operation} {path}: {source}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("drawing the chart {path}: {message}")]
    Chart { path: PathBuf, message: String },
    #[error("{operation}: {source}")]
    MockModel {
        operation: &'static str,
        #[source]
        source: ctxbridge_mock_model::MockModelError,
    },
    #[error("no Codex binary found: `codex` is not on PATH nor installed in node_modules (`npm ci` at the repository root), and CODEX_BIN names no file")]
    NoCodexBinary,
    #[error("{operation}: {message}")]
    Runtime {
        operation: &'static str,
        message: String,
    },
}

/// Maps a harness error of `operation`.
pub fn harness_err(operation: &'static str) -> impl FnOnce(HarnessError) -> BenchError {
    move |source| BenchError::Harness {
        operation,
        source: Box::new(source),
    }
}

/// The harness settings every bench run uses.
pub fn bench_harness_config() -> HarnessConfig {
    HarnessConfig {
        agent_id: BENCH_AGENT_ID.into(),
        token_budget: Some(BENCH_TOKEN_BUDGET),
        base_instructions: Some(BENCH_BASE_INSTRUCTIONS.into()),
        developer_instructions: Some(BENCH_DEVELOPER_INSTRUCTIONS.into()),
        lease_wait: Duration::from_secs(5),
        ..HarnessConfig::default()
    }
}

/// A harness running `mode` on `backend` with `store`. The bench engine (absent for legacy) is
/// returned too, for its assemble timing.
pub fn bench_harness(
    mode: BenchMode,
    engine_config: BenchEngineConfig,
    backend: Arc<dyn ThreadedBackend>,
    store: Arc<dyn StateStore>,
) -> (Harness, Option<Arc<BenchEngine>>) {
    let book = Arc::new(QuarantineBook::new());
    let (guarded, engine) = match mode.projection() {
        None => (QuarantineEngine::legacy(book), None),
        Some(projection) => {
            let engine = Arc::new(BenchEngine::new(BenchEngineConfig {
                projection,
                ..engine_config
            }));
            let guarded = QuarantineEngine::new(
                BENCH_ENGINE_ID,
                engine.clone() as Arc<dyn ContextEngine>,
                book,
                CallTimeouts::default(),
            );
            (guarded, Some(engine))
        }
    };
    let config = HarnessConfig {
        context_delivery: Some(mode.context_delivery()),
        ..bench_harness_config()
    };
    let harness = Harness::new(config, Arc::new(guarded), backend, store);
    (harness, engine)
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted values; `None` when empty.
pub fn percentile(sorted: &[Duration], p: usize) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p.min(100) * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Nearest-rank percentiles: p50 of 1..=100 is 50, p99 is 99, p100 the maximum.
    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 50), Some(Duration::from_micros(50)));
        assert_eq!(percentile(&v, 99), Some(Duration::from_micros(99)));
        assert_eq!(percentile(&v, 100), Some(Duration::from_micros(100)));
        assert_eq!(percentile(&v[..1], 99), Some(Duration::from_micros(1)));
        assert_eq!(percentile(&[], 50), None);
    }
}
