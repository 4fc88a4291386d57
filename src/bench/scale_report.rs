//! The scale run's report: the table of runs, the ratio of two workers to one, where the
//! second worker's time went, and the most a second worker can give.

use std::fmt::Write as _;
use std::time::Duration;

use super::process::load_line;
use super::scale::{
    BindingMemory, ScaleResult, ScaleStore, POSTGRES_DEFAULT_SESSIONS, SCALE_BACKGROUND_CHARS,
    SESSIONS_IN_FLIGHT, TURNS_PER_SESSION,
};

/// The least CPU time of each run for the report to compare the two runs' CPU use.
const MIN_CPU_TO_COMPARE: Duration = Duration::from_millis(200);

/// The most a second worker can multiply throughput by when every turn needs one serial
/// resource (the store's writer) for `serial_share` of a 1-worker run's time: the turns are
/// independent, so one turn's serial part overlaps another's parallel part, and the resource
/// saturates at `1 / serial_share` times the 1-worker throughput (two cores at most double it).
pub fn two_worker_bound(serial_share: f64) -> f64 {
    (1.0 / serial_share.max(1e-9)).min(2.0)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "n/a".to_string(),
        |b| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    )
}

/// The scale report and the target lines.
pub fn format_report(results: &[ScaleResult], memory: &BindingMemory) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== Scale: sessions × {TURNS_PER_SESSION} turns, in-process mock, {}, bench engine (thread_bootstrap, {SCALE_BACKGROUND_CHARS}-char background), {SESSIONS_IN_FLIGHT} sessions in flight ==",
        results.first().map_or(ScaleStore::Memory, |r| r.store).describe()
    );
    if results.iter().any(|r| r.lanes) {
        let _ = writeln!(
            out,
            "turns served on lanes, as serve --front responses serves them: a single-threaded runtime per worker, all sharing one harness and one store"
        );
    }
    let shards = results.first().map_or(1, |r| r.shards);
    if shards > 1 {
        let _ = writeln!(
            out,
            "store split by session over {shards} SQLite databases (store.shards: {shards}), in every run; held times below are the busiest database's"
        );
    }
    let _ = writeln!(out, "{}", load_line());
    if results
        .first()
        .is_some_and(|r| r.store == ScaleStore::Postgres && r.sessions == POSTGRES_DEFAULT_SESSIONS)
    {
        let _ = writeln!(
            out,
            "(PostgreSQL: {POSTGRES_DEFAULT_SESSIONS} sessions by default — every store call is a round trip to the server; --sessions sets more)"
        );
    }
    let _ = writeln!(
        out,
        "{:>7} {:>9} {:>7} {:>10} {:>10} {:>12} {:>12} {:>10}",
        "workers", "sessions", "turns", "seconds", "turns/s", "RSS before", "RSS after", "peak RSS"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:>7} {:>9} {:>7} {:>10.2} {:>10.0} {:>12} {:>12} {:>10}",
            r.label(),
            r.sessions,
            r.turns,
            r.elapsed.as_secs_f64(),
            r.turns_per_second(),
            mib(r.rss_before),
            mib(r.rss_after),
            mib(r.peak_rss)
        );
    }
    let shared = |workers: usize| results.iter().find(|r| r.workers == workers && !r.split);
    if let (Some(one), Some(two)) = (shared(1), shared(2)) {
        let ratio = two.turns_per_second() / one.turns_per_second().max(1e-9);
        let _ = writeln!(out, "scaling 1 → 2 workers: {ratio:.2}×");
        if let Some(split) = results.iter().find(|r| r.workers == 2 && r.split) {
            let ceiling = split.turns_per_second() / one.turns_per_second().max(1e-9);
            let _ = writeln!(
                out,
                "2 workers sharing nothing (a runtime, harness and store each): {ceiling:.2}× one worker — the ceiling sharing one store can approach on this machine; the shared run reaches {:.0}% of it",
                100.0 * ratio / ceiling.max(1e-9)
            );
        }
    }
    for r in results {
        if let (Some(held), Some(share)) = (r.held, r.serial_share()) {
            let pct = |d: Duration| 100.0 * d.as_secs_f64() / r.elapsed.as_secs_f64().max(1e-9);
            let _ = writeln!(
                out,
                "{} worker(s): store writer held {:.0}% of the run ({:.1} µs per turn), readers {:.0}% (summed); serial share {:.0}%; {} queued writes in {} transactions ({:.1} per transaction)",
                r.label(),
                pct(held.writer),
                held.writer.as_secs_f64() * 1e6 / r.turns.max(1) as f64,
                pct(held.readers),
                100.0 * share,
                held.queued_writes,
                held.write_batches,
                held.queued_writes as f64 / held.write_batches.max(1) as f64
            );
        }
    }
    for r in results {
        if let (Some(cores), Some(per_turn)) = (r.cores_busy(), r.cpu_per_turn_us()) {
            let _ = writeln!(
                out,
                "{} worker(s): {cores:.2} cores busy on average, {per_turn:.0} µs of CPU per turn",
                r.label()
            );
        }
    }
    if let (Some(one), Some(two)) = (shared(1), shared(2)) {
        // Only runs long enough for the 10 ms ticks of the CPU clock to tell.
        let measured = |r: &ScaleResult| r.cpu.is_some_and(|c| c >= MIN_CPU_TO_COMPARE);
        if let (true, Some(c1), Some(c2), Some(t1), Some(t2)) = (
            measured(one) && measured(two),
            one.cores_busy(),
            two.cores_busy(),
            one.cpu_per_turn_us(),
            two.cpu_per_turn_us(),
        ) {
            let _ = writeln!(
                out,
                "where a second worker's gain goes: cores busy {c1:.2} → {c2:.2} ({}), CPU per turn {:+.0}% ({})",
                if c2 - c1 < 0.5 { "threads wait: idle, not working" } else { "the second core is used" },
                100.0 * (t2 / t1.max(1e-9) - 1.0),
                if t2 > 1.15 * t1 { "each turn costs more: contention" } else { "work per turn unchanged" }
            );
        }
    }
    if let Some(share) = shared(1).and_then(ScaleResult::serial_share) {
        let _ = writeln!(
            out,
            "serial share of the 1-worker run {:.0}% → at most {:.2}× from a second worker, if the serial work per turn stays what it was (it is one resource, busy that share of the time; indicative: held times are wall times, and a preempted writer keeps the lock, so load inflates them too)",
            100.0 * share,
            two_worker_bound(share)
        );
    }
    if results.iter().any(|r| !r.peak_is_this_run) {
        let _ = writeln!(
            out,
            "(peak RSS is the whole process's: the peak mark could not be reset per run)"
        );
    }
    // Only the first run's growth is clean: later runs reuse memory the earlier ones freed.
    if let Some((b, a, r)) = results
        .first()
        .and_then(|r| r.rss_before.zip(r.rss_after).map(|(b, a)| (b, a, r)))
    {
        let _ = writeln!(
            out,
            "RSS growth per session in the first run (store rows, mock threads and call log, transcripts, caches, session locks): {:.0} bytes",
            a.saturating_sub(b) as f64 / r.sessions.max(1) as f64
        );
    }
    let per = memory.per_binding();
    let _ = writeln!(
        out,
        "idle binding in the cache: {} bytes measured (RSS delta of {} cached bindings: {}); the binding itself is {} bytes (struct + strings), the rest is key, Arc and moka entry overhead",
        per.map_or_else(|| "n/a".into(), |p| format!("{p:.0}")),
        memory.bindings,
        mib(memory.rss_delta),
        memory.binding_heap_bytes
    );
    let best = results
        .iter()
        .map(ScaleResult::turns_per_second)
        .fold(0.0f64, f64::max);
    let _ = writeln!(out, "best throughput: {best:.0} turns/s");
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::bench::scale::test_result;

    fn run(workers: usize, seconds: f64, cpu_seconds: f64) -> ScaleResult {
        test_result(ScaleStore::Memory, workers, seconds, Some(cpu_seconds))
    }

    fn bindings() -> BindingMemory {
        BindingMemory {
            bindings: 1,
            rss_delta: None,
            binding_heap_bytes: 0,
        }
    }

    /// With a split run the report shows its row as "2 split", compares it with the shared
    /// 1-worker run as the ceiling, and keeps the shared ratio as it was.
    #[test]
    fn the_report_shows_the_split_ceiling() {
        let split = ScaleResult {
            split: true,
            shards: 1,
            ..run(2, 0.5, 0.95)
        };
        let report = format_report(&[run(1, 1.0, 1.0), run(2, 0.8, 1.5), split], &bindings());
        assert!(report.contains("scaling 1 → 2 workers: 1.25×"), "{report}");
        assert!(report.contains("2 workers sharing nothing (a runtime, harness and store each): 2.00× one worker — the ceiling sharing one store can approach on this machine; the shared run reaches 62% of it"), "{report}");
        assert!(
            report
                .lines()
                .any(|l| l.trim_start().starts_with("2 split ")),
            "{report}"
        );
        assert!(
            report.contains("2 split worker(s): 1.90 cores busy"),
            "{report}"
        );
        // The shared pair still explains its own second worker.
        assert!(report.contains("cores busy 1.00 → 1.88"), "{report}");
    }

    /// The report tells a second worker that waits (cores busy barely rise) from one whose
    /// turns cost more CPU, and compares nothing when the runs used too little CPU to tell.
    #[test]
    fn the_report_says_where_a_second_worker_went() {
        // 1 s at 1.0 core, then 1 s at 1.1 cores, CPU per turn +10 %: threads wait.
        let waiting = format_report(&[run(1, 1.0, 1.0), run(2, 1.0, 1.1)], &bindings());
        assert!(
            waiting.contains("1 worker(s): 1.00 cores busy on average, 200 µs of CPU per turn"),
            "{waiting}"
        );
        assert!(waiting.contains("cores busy 1.00 → 1.10 (threads wait: idle, not working), CPU per turn +10% (work per turn unchanged)"), "{waiting}");
        // 1 s at 1.0 core, then 1 s at 1.9 cores: the second core is used, each turn +90 %.
        let contended = format_report(&[run(1, 1.0, 1.0), run(2, 1.0, 1.9)], &bindings());
        assert!(contended.contains("cores busy 1.00 → 1.90 (the second core is used), CPU per turn +90% (each turn costs more: contention)"), "{contended}");
        let tiny = format_report(&[run(1, 0.01, 0.01), run(2, 0.01, 0.0)], &bindings());
        assert!(tiny.contains("2 worker(s): 0.00 cores busy"), "{tiny}");
        assert!(
            !tiny.contains("where a second worker's gain goes"),
            "{tiny}"
        );
    }

    /// Two workers at most double throughput; a serial resource busy half of a 1-worker run
    /// or less does not lower that, one busy 80 % caps it at 1.25×.
    #[test]
    fn two_worker_bound_is_the_saturated_resource_or_two_cores() {
        assert_eq!(two_worker_bound(0.0), 2.0);
        assert_eq!(two_worker_bound(0.25), 2.0);
        assert_eq!(two_worker_bound(0.5), 2.0);
        assert!((two_worker_bound(0.8) - 1.25).abs() < 1e-12);
        assert_eq!(two_worker_bound(1.0), 1.0);
    }
}
