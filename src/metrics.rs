//! Operational metrics: the narrow [`MetricsSink`] interface the harness, the quarantine book
//! and `serve` emit through, and [`Registry`], the in-process counters and histograms behind
//! `serve`'s `GET /metrics` (Prometheus text exposition format 0.0.4).
//!
//! The harness never knows where its figures go: it is given a sink ([`NoMetrics`] unless the
//! caller sets one), so CLI runs are unaffected. The registry is hand-written (atomic counters,
//! fixed-bucket histograms, label sets in a mutex-guarded ordered map): the handful of series
//! `serve` exports does not need a client library, and rendering is pure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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
pub const TURN_SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Upper bounds (seconds) of the bridge overhead histogram.
pub const OVERHEAD_SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A cumulative histogram with fixed upper bounds; sums kept in nanoseconds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, plus `+Inf`.
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let slot = self
            .bounds
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds.len());
        if let Some(count) = self.counts.get(slot) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(bound) => format_float(*bound),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {}", format_float(sum));
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// A counter family keyed by its label values (in the order of the family's label names).
#[derive(Debug, Default)]
struct LabelledCounter {
    values: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl LabelledCounter {
    fn add(&self, labels: &[&str], by: u64) {
        // Only counts live behind the lock; a panic elsewhere cannot leave them half-written.
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let key: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        *values.entry(key).or_insert(0) += by;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label_names: &[&str]) {
        header(out, name, help, "counter");
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        for (labels, value) in values.iter() {
            let mut set = String::new();
            for (i, (label, value)) in label_names.iter().zip(labels).enumerate() {
                if i > 0 {
                    set.push(',');
                }
                let _ = write!(set, "{label}=\"{}\"", escape_label(value));
            }
            let _ = writeln!(out, "{name}{{{set}}} {value}");
        }
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    header(out, name, help, "counter");
    let _ = writeln!(out, "{name} {value}");
}

/// A label value escaped per the text format (backslash, double quote, newline).
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// A float as the text format writes it (no exponent for the bounds used here).
fn format_float(value: f64) -> String {
    let text = format!("{value}");
    if text.contains('.') || text.contains('e') || text.contains("inf") || text.contains("NaN") {
        text
    } else {
        format!("{text}.0")
    }
}

/// The process's metrics as `serve` exports them. Shared behind an `Arc`; every update is a
/// relaxed atomic add or a short lock of one label map.
#[derive(Debug)]
pub struct Registry {
    turns: LabelledCounter,
    projections: LabelledCounter,
    projected_chars: AtomicU64,
    quarantines: LabelledCounter,
    lease_waits: AtomicU64,
    lease_wait_nanos: AtomicU64,
    lease_takeovers: AtomicU64,
    upstream_restarts: AtomicU64,
    clients: AtomicI64,
    turn_seconds: Histogram,
    overhead_seconds: Histogram,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// Empty metrics.
    pub fn new() -> Registry {
        Registry {
            turns: LabelledCounter::default(),
            projections: LabelledCounter::default(),
            projected_chars: AtomicU64::new(0),
            quarantines: LabelledCounter::default(),
            lease_waits: AtomicU64::new(0),
            lease_wait_nanos: AtomicU64::new(0),
            lease_takeovers: AtomicU64::new(0),
            upstream_restarts: AtomicU64::new(0),
            clients: AtomicI64::new(0),
            turn_seconds: Histogram::new(TURN_SECONDS_BUCKETS),
            overhead_seconds: Histogram::new(OVERHEAD_SECONDS_BUCKETS),
        }
    }

    /// The upstream app-server child was started again after the first one.
    pub fn upstream_restarted(&self) {
        self.upstream_restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// A client connection opened (`+1`) or closed (`-1`).
    pub fn client_connections(&self, delta: i64) {
        self.clients.fetch_add(delta, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4) of every series.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.turns.render(
            &mut out,
            "ctxbridge_turns_total",
            "Harness turns by outcome.",
            &["outcome"],
        );
        self.turn_seconds.render(
            &mut out,
            "ctxbridge_turn_duration_seconds",
            "Wall time of a harness turn, the backend's (model's) time included.",
        );
        self.overhead_seconds.render(
            &mut out,
            "ctxbridge_bridge_overhead_seconds",
            "Time of a harness turn spent outside the backend's turn (locking, engine calls, projection, recording).",
        );
        self.projections.render(
            &mut out,
            "ctxbridge_projection_decisions_total",
            "Projection decisions by reason and whether the input carried the rendered context.",
            &["reason", "projected"],
        );
        counter(
            &mut out,
            "ctxbridge_projected_chars_total",
            "Characters of rendered context sent in projecting turns.",
            self.projected_chars.load(Ordering::Relaxed),
        );
        self.quarantines.render(
            &mut out,
            "ctxbridge_engine_quarantines_total",
            "Context engines quarantined, by engine and the method that failed.",
            &["engine", "method"],
        );
        counter(
            &mut out,
            "ctxbridge_lease_waits_total",
            "Session lease acquisitions that had to wait for another holder.",
            self.lease_waits.load(Ordering::Relaxed),
        );
        header(
            &mut out,
            "ctxbridge_lease_wait_seconds_total",
            "Time spent waiting for session leases held by others.",
            "counter",
        );
        let waited = self.lease_wait_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "ctxbridge_lease_wait_seconds_total {}",
            format_float(waited)
        );
        counter(
            &mut out,
            "ctxbridge_lease_takeovers_total",
            "Session leases taken over from a holder that no longer runs.",
            self.lease_takeovers.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ctxbridge_upstream_restarts_total",
            "Restarts of the upstream codex app-server child after the first start.",
            self.upstream_restarts.load(Ordering::Relaxed),
        );
        header(
            &mut out,
            "ctxbridge_connected_clients",
            "Client connections open now.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "ctxbridge_connected_clients {}",
            self.clients.load(Ordering::Relaxed)
        );
        out
    }
}

impl MetricsSink for Registry {
    fn turn_finished(&self, outcome: TurnOutcomeKind, total: Duration, backend: Duration) {
        self.turns.add(&[outcome.as_str()], 1);
        self.turn_seconds.observe(total);
        if outcome == TurnOutcomeKind::Completed {
            self.overhead_seconds.observe(total.saturating_sub(backend));
        }
    }

    fn projection_decided(&self, reason: &str, projected: bool, rendered_chars: usize) {
        let projected_label = if projected { "true" } else { "false" };
        self.projections.add(&[reason, projected_label], 1);
        if projected {
            self.projected_chars
                .fetch_add(rendered_chars as u64, Ordering::Relaxed);
        }
    }

    fn engine_quarantined(&self, engine: &str, method: &str) {
        self.quarantines.add(&[engine, method], 1);
    }

    fn lease_acquired(&self, waited: Duration, took_over: bool) {
        if !waited.is_zero() {
            self.lease_waits.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            self.lease_wait_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        if took_over {
            self.lease_takeovers.fetch_add(1, Ordering::Relaxed);
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
