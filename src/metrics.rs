//! Operational metrics: the narrow [`MetricsSink`] interface the harness, the quarantine book
//! and `serve` emit through, and [`Registry`], the in-process counters and histograms behind
//! `serve`'s `GET /metrics` (Prometheus text exposition format 0.0.4).
//!
//! The harness never knows where its figures go: it is given a sink ([`NoMetrics`] unless the
//! caller sets one), so CLI runs are unaffected. The registry and its text encoding are the
//! Prometheus project's own Rust client, `prometheus-client`.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// How a harness turn ended (the `outcome` label of `ctxbridge_turns_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcomeKind {
    /// The backend answered and the turn was recorded.
    Completed,
    /// The backend failed the turn (after the one retry, when it applied).
    BackendError,
    /// Another holder kept the session's lease.
    SessionBusy,
    /// The backend answered but the turn could not be recorded.
    NotRecorded,
    /// Any other failure (store, engine, host requirements).
    Error,
}

impl TurnOutcomeKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcomeKind::Completed => "completed",
            TurnOutcomeKind::BackendError => "backend_error",
            TurnOutcomeKind::SessionBusy => "session_busy",
            TurnOutcomeKind::NotRecorded => "not_recorded",
            TurnOutcomeKind::Error => "error",
        }
    }
}

/// Where the harness (and the quarantine book) report what happened. Every method defaults to
/// doing nothing, so a sink implements only what it keeps.
pub trait MetricsSink: Send + Sync + std::fmt::Debug {
    /// A turn ended: `total` is its wall time in the harness, `backend` the part spent inside
    /// the backend's turn (the model's time included); the difference is ctxbridge's overhead.
    fn turn_finished(&self, _outcome: TurnOutcomeKind, _total: Duration, _backend: Duration) {}
    /// A projection decision (docs/architecture.md#the-project-or-reuse-decision) with its reason, whether the input carried the
    /// rendered context, and the rendered characters.
    fn projection_decided(&self, _reason: &str, _projected: bool, _rendered_chars: usize) {}
    /// An engine was quarantined after failing in `method`.
    fn engine_quarantined(&self, _engine: &str, _method: &str) {}
    /// A session lease was taken: `waited` for another holder first (zero when free at once),
    /// `took_over` when a dead holder's lease was taken over.
    fn lease_acquired(&self, _waited: Duration, _took_over: bool) {}
}

/// The sink that keeps nothing (CLI runs).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl MetricsSink for NoMetrics {}

/// Upper bounds (seconds) of the turn latency histogram.
/// Served turns may run up to `backend.turnTimeoutMs` (30 min by default): the buckets reach it.
pub const TURN_SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0,
];
/// Upper bounds (seconds) of the bridge overhead histogram.
pub const OVERHEAD_SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A family of counters by label set (label names with their values, in order).
type Labelled = Family<Vec<(&'static str, String)>, Counter>;

/// The process's metrics as `serve` exports them, in a `prometheus-client` registry. Shared
/// behind an `Arc`; every update is an atomic add, or a short lock of one label family.
#[derive(Debug)]
pub struct Registry {
    registry: prometheus_client::registry::Registry,
    turns: Labelled,
    projections: Labelled,
    projected_chars: Counter,
    quarantines: Labelled,
    lease_waits: Counter,
    lease_wait_seconds: Counter<f64, AtomicU64>,
    lease_takeovers: Counter,
    upstream_restarts: Counter,
    clients: Gauge,
    turn_seconds: Histogram,
    overhead_seconds: Histogram,
    responses: Labelled,
    responses_unkept: Counter,
}

/// How a response of the Responses front ended (the `outcome` label of
/// `ctxbridge_responses_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// The model answered.
    Answered,
    /// The model called the client's functions; the turn waits for their outputs.
    FunctionCalls,
    /// The turn failed (the client heard why).
    Failed,
}

impl ResponseOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseOutcome::Answered => "answered",
            ResponseOutcome::FunctionCalls => "function_calls",
            ResponseOutcome::Failed => "failed",
        }
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// Empty metrics.
    pub fn new() -> Registry {
        let mut registry = prometheus_client::registry::Registry::default();
        let turns = Labelled::default();
        registry.register("ctxbridge_turns", "Harness turns by outcome", turns.clone());
        let turn_seconds = Histogram::new(TURN_SECONDS_BUCKETS.iter().copied());
        registry.register(
            "ctxbridge_turn_duration_seconds",
            "Wall time of a harness turn, the backend's (model's) time included",
            turn_seconds.clone(),
        );
        let overhead_seconds = Histogram::new(OVERHEAD_SECONDS_BUCKETS.iter().copied());
        registry.register(
            "ctxbridge_bridge_overhead_seconds",
            "Time of a harness turn spent outside the backend's turn (locking, engine calls, projection, recording)",
            overhead_seconds.clone(),
        );
        let projections = Labelled::default();
        registry.register(
            "ctxbridge_projection_decisions",
            "Projection decisions by reason and whether the input carried the rendered context",
            projections.clone(),
        );
        let projected_chars = Counter::default();
        registry.register(
            "ctxbridge_projected_chars",
            "Characters of rendered context sent in projecting turns",
            projected_chars.clone(),
        );
        let quarantines = Labelled::default();
        registry.register(
            "ctxbridge_engine_quarantines",
            "Context engines quarantined, by engine and the method that failed",
            quarantines.clone(),
        );
        let lease_waits = Counter::default();
        registry.register(
            "ctxbridge_lease_waits",
            "Session lease acquisitions that had to wait for another holder",
            lease_waits.clone(),
        );
        let lease_wait_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "ctxbridge_lease_wait_seconds",
            "Time spent waiting for session leases held by others",
            lease_wait_seconds.clone(),
        );
        let lease_takeovers = Counter::default();
        registry.register(
            "ctxbridge_lease_takeovers",
            "Session leases taken over from a holder that no longer runs",
            lease_takeovers.clone(),
        );
        let upstream_restarts = Counter::default();
        registry.register(
            "ctxbridge_upstream_restarts",
            "Restarts of the upstream codex app-server child after the first start",
            upstream_restarts.clone(),
        );
        let clients = Gauge::default();
        registry.register(
            "ctxbridge_connected_clients",
            "Client connections open now",
            clients.clone(),
        );
        let responses = Labelled::default();
        registry.register(
            "ctxbridge_responses",
            "Responses of the Responses front, by how they ended",
            responses.clone(),
        );
        let responses_unkept = Counter::default();
        registry.register(
            "ctxbridge_responses_unkept",
            "Responses of the Responses front that reached their client but could not be kept (the failure is in the log)",
            responses_unkept.clone(),
        );
        Registry {
            registry,
            responses,
            responses_unkept,
            turns,
            projections,
            projected_chars,
            quarantines,
            lease_waits,
            lease_wait_seconds,
            lease_takeovers,
            upstream_restarts,
            clients,
            turn_seconds,
            overhead_seconds,
        }
    }

    /// The upstream app-server child was started again after the first one.
    pub fn upstream_restarted(&self) {
        self.upstream_restarts.inc();
    }

    /// A response of the Responses front ended.
    pub fn response_ended(&self, outcome: ResponseOutcome) {
        self.responses
            .get_or_create(&vec![("outcome", outcome.as_str().to_owned())])
            .inc();
    }

    /// A response of the Responses front reached its client but could not be kept.
    pub fn response_unkept(&self) {
        self.responses_unkept.inc();
    }

    /// A client connection opened (`+1`) or closed (`-1`).
    pub fn client_connections(&self, delta: i64) {
        self.clients.inc_by(delta);
    }

    /// The text exposition of every series, as `prometheus-client` encodes it (OpenMetrics
    /// text; Prometheus reads it as its text format too).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Encoding into a `String` cannot fail (its `fmt::Write` never errors).
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl MetricsSink for Registry {
    fn turn_finished(&self, outcome: TurnOutcomeKind, total: Duration, backend: Duration) {
        self.turns
            .get_or_create(&vec![("outcome", outcome.as_str().to_owned())])
            .inc();
        self.turn_seconds.observe(total.as_secs_f64());
        if outcome == TurnOutcomeKind::Completed {
            self.overhead_seconds
                .observe(total.saturating_sub(backend).as_secs_f64());
        }
    }

    fn projection_decided(&self, reason: &str, projected: bool, rendered_chars: usize) {
        let projected_label = if projected { "true" } else { "false" };
        self.projections
            .get_or_create(&vec![
                ("reason", reason.to_owned()),
                ("projected", projected_label.to_owned()),
            ])
            .inc();
        if projected {
            self.projected_chars
                .inc_by(u64::try_from(rendered_chars).unwrap_or(u64::MAX));
        }
    }

    fn engine_quarantined(&self, engine: &str, method: &str) {
        self.quarantines
            .get_or_create(&vec![
                ("engine", engine.to_owned()),
                ("method", method.to_owned()),
            ])
            .inc();
    }

    fn lease_acquired(&self, waited: Duration, took_over: bool) {
        if !waited.is_zero() {
            self.lease_waits.inc();
            self.lease_wait_seconds.inc_by(waited.as_secs_f64());
        }
        if took_over {
            self.lease_takeovers.inc();
        }
    }
}

/// The value of one sample in a text exposition (`name` with its exact label set as written,
/// e.g. `ctxbridge_turns_total{outcome="completed"}`), for tests and tools reading `/metrics`.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Counters, label sets and histogram buckets render as the text format wants them, with
    /// the values recorded.
    #[test]
    fn renders_what_was_recorded() {
        let r = Registry::new();
        r.turn_finished(
            TurnOutcomeKind::Completed,
            Duration::from_millis(30),
            Duration::from_millis(29),
        );
        r.turn_finished(
            TurnOutcomeKind::BackendError,
            Duration::from_secs(200),
            Duration::ZERO,
        );
        r.projection_decided("per-turn-projection", true, 120);
        r.projection_decided("matching-thread-bootstrap-binding", false, 99);
        r.engine_quarantined("sample \"x\"", "assemble");
        r.lease_acquired(Duration::from_millis(500), true);
        r.lease_acquired(Duration::ZERO, false);
        r.upstream_restarted();
        r.client_connections(2);
        r.client_connections(-1);
        let text = r.render();
        let value =
            |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}\n{text}"));
        assert_eq!(value("ctxbridge_turns_total{outcome=\"completed\"}"), 1.0);
        assert_eq!(
            value("ctxbridge_turns_total{outcome=\"backend_error\"}"),
            1.0
        );
        assert_eq!(
            value("ctxbridge_turn_duration_seconds_bucket{le=\"0.025\"}"),
            0.0
        );
        assert_eq!(
            value("ctxbridge_turn_duration_seconds_bucket{le=\"0.05\"}"),
            1.0
        );
        assert_eq!(
            value("ctxbridge_turn_duration_seconds_bucket{le=\"120.0\"}"),
            1.0
        );
        assert_eq!(
            value("ctxbridge_turn_duration_seconds_bucket{le=\"300.0\"}"),
            2.0
        );
        assert_eq!(
            value("ctxbridge_turn_duration_seconds_bucket{le=\"+Inf\"}"),
            2.0
        );
        assert_eq!(value("ctxbridge_turn_duration_seconds_count"), 2.0);
        assert!((value("ctxbridge_turn_duration_seconds_sum") - 200.03).abs() < 1e-6);
        // Only completed turns have an overhead: 1 ms.
        assert_eq!(
            value("ctxbridge_bridge_overhead_seconds_bucket{le=\"0.0005\"}"),
            0.0
        );
        assert_eq!(
            value("ctxbridge_bridge_overhead_seconds_bucket{le=\"0.001\"}"),
            1.0
        );
        assert_eq!(value("ctxbridge_bridge_overhead_seconds_count"), 1.0);
        assert_eq!(
            value("ctxbridge_projection_decisions_total{reason=\"per-turn-projection\",projected=\"true\"}"),
            1.0
        );
        assert_eq!(
            value("ctxbridge_projection_decisions_total{reason=\"matching-thread-bootstrap-binding\",projected=\"false\"}"),
            1.0
        );
        assert_eq!(value("ctxbridge_projected_chars_total"), 120.0);
        assert_eq!(
            value("ctxbridge_engine_quarantines_total{engine=\"sample \\\"x\\\"\",method=\"assemble\"}"),
            1.0
        );
        assert_eq!(value("ctxbridge_lease_waits_total"), 1.0);
        assert_eq!(value("ctxbridge_lease_wait_seconds_total"), 0.5);
        assert_eq!(value("ctxbridge_lease_takeovers_total"), 1.0);
        assert_eq!(value("ctxbridge_upstream_restarts_total"), 1.0);
        assert_eq!(value("ctxbridge_connected_clients"), 1.0);
        assert!(text.contains("# TYPE ctxbridge_turn_duration_seconds histogram"));
        assert!(text.contains("# TYPE ctxbridge_connected_clients gauge"));
    }

    /// The quarantine book reports a quarantine it records (once: the first failure wins) to
    /// the sink it was given, by engine and method.
    #[test]
    fn quarantine_book_reports_to_the_sink() {
        use crate::contract::EngineMethod;
        use crate::quarantine::{FailedOperation, QuarantineBook};
        let registry = std::sync::Arc::new(Registry::new());
        let book = QuarantineBook::new();
        book.report_to(registry.clone());
        assert!(book.quarantine(
            "flaky",
            FailedOperation::Method(EngineMethod::Assemble),
            "boom"
        ));
        assert!(!book.quarantine(
            "flaky",
            FailedOperation::Method(EngineMethod::Ingest),
            "again"
        ));
        assert!(!book.quarantine("legacy", FailedOperation::Factory, "never"));
        let text = registry.render();
        assert_eq!(
            sample(
                &text,
                "ctxbridge_engine_quarantines_total{engine=\"flaky\",method=\"assemble\"}"
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            text.matches("ctxbridge_engine_quarantines_total{").count(),
            1,
            "{text}"
        );
    }
}
