//! This process's own figures for the reports — resident memory, its peak, CPU time — and the
//! machine's load, read through `procfs` on Linux; `None` (or false) elsewhere.

use std::time::Duration;

/// Current resident set size in bytes.
pub fn rss_bytes() -> Option<u64> {
    imp::status_kb(|status| status.vmrss).map(|kb| kb * 1024)
}

/// Peak resident set size in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    imp::status_kb(|status| status.vmhwm).map(|kb| kb * 1024)
}

/// Resets the peak-RSS mark (`VmHWM`) to the current RSS (Linux `clear_refs` value 5), so a
/// later [`peak_rss_bytes`] is the peak since now; false where that is not supported.
pub fn reset_peak_rss() -> bool {
    imp::reset_peak_rss()
}

/// CPU time (user + system) this process, all its threads, has used so far.
pub fn process_cpu_time() -> Option<Duration> {
    imp::process_cpu_time()
}

/// The machine's load averages over 1, 5 and 15 minutes, as `/proc/loadavg` writes them (for
/// the reports: absolute figures mean little on a loaded machine).
pub fn load_average() -> Option<String> {
    imp::load_average().map(|(one, five, fifteen)| format!("{one:.2} {five:.2} {fifteen:.2}"))
}

/// The load line printed under a report's heading.
pub fn load_line() -> String {
    match load_average() {
        Some(load) => format!("machine load average (1/5/15 min): {load}"),
        None => "machine load average: not available".to_string(),
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::time::Duration;

    use procfs::process::{ClearRefs, Process, Status};
    use procfs::{Current, LoadAverage};

    pub(super) fn status_kb(field: impl Fn(&Status) -> Option<u64>) -> Option<u64> {
        field(&Process::myself().ok()?.status().ok()?)
    }

    pub(super) fn reset_peak_rss() -> bool {
        Process::myself()
            .and_then(|me| me.clear_refs(ClearRefs::PeakRSS))
            .is_ok()
    }

    pub(super) fn process_cpu_time() -> Option<Duration> {
        let stat = Process::myself().ok()?.stat().ok()?;
        let ticks = stat.utime + stat.stime;
        let per_second = procfs::ticks_per_second().max(1);
        Some(Duration::from_millis(ticks * 1000 / per_second))
    }

    pub(super) fn load_average() -> Option<(f32, f32, f32)> {
        let load = LoadAverage::current().ok()?;
        Some((load.one, load.five, load.fifteen))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::time::Duration;

    pub(super) fn status_kb(_field: impl Fn(&()) -> Option<u64>) -> Option<u64> {
        None
    }

    pub(super) fn reset_peak_rss() -> bool {
        false
    }

    pub(super) fn process_cpu_time() -> Option<Duration> {
        None
    }

    pub(super) fn load_average() -> Option<(f32, f32, f32)> {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{load_average, peak_rss_bytes, process_cpu_time, rss_bytes};

    /// On Linux the RSS figures are read and the peak is at least the current RSS.
    #[test]
    fn reads_rss_and_cpu_time_on_linux() {
        if !cfg!(target_os = "linux") {
            eprintln!("SKIPPED: process figures are read on Linux only");
            return;
        }
        let rss = rss_bytes().unwrap();
        let peak = peak_rss_bytes().unwrap();
        assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
        // Burn a little CPU: the process's time goes forward and is counted.
        let before = process_cpu_time().unwrap();
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(process_cpu_time().unwrap() > before);
    }

    #[test]
    fn load_average_has_three_figures() {
        if !cfg!(target_os = "linux") {
            eprintln!("SKIPPED: the load average is read on Linux only");
            return;
        }
        let load = load_average().unwrap();
        assert_eq!(load.split(' ').count(), 3, "{load}");
        assert!(load.split(' ').all(|f| f.parse::<f32>().is_ok()), "{load}");
    }
}
