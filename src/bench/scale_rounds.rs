//! Scale rounds: the 1-worker and 2-worker scale runs repeated in turn (`--scale-rounds`), so
//! that the ratio of two workers to one is read from several pairs instead of one. On a noisy
//! machine one worker's own figure swings between runs; each round's ratio compares runs made
//! side by side, and the median of the rounds is the figure to quote.

use std::fmt::Write as _;

use super::scale::ScaleResult;

/// One round: the 1-worker run and the 2-worker run made right after it.
#[derive(Debug, Clone)]
pub struct ScaleRound {
    pub one: ScaleResult,
    pub two: ScaleResult,
}

impl ScaleRound {
    /// Two workers' turns per second over one worker's.
    pub fn ratio(&self) -> f64 {
        self.two.turns_per_second() / self.one.turns_per_second().max(1e-9)
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// The rounds' table: each round's turns/s on one and two workers and its ratio, then the
/// median ratio and the range of each column.
pub fn format_rounds(rounds: &[ScaleRound]) -> String {
    let mut out = String::new();
    if rounds.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n== Scale rounds: 1 and 2 workers in turn, {} round{} ==",
        rounds.len(),
        if rounds.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(out, "round   1 worker turns/s   2 workers turns/s    1 → 2");
    for (i, round) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:>5}   {:>16.0}   {:>17.0}   {:>5.2}×",
            i + 1,
            round.one.turns_per_second(),
            round.two.turns_per_second(),
            round.ratio()
        );
    }
    let ratios: Vec<f64> = rounds.iter().map(ScaleRound::ratio).collect();
    let range = |values: Vec<f64>| {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    };
    let (one_min, one_max) = range(rounds.iter().map(|r| r.one.turns_per_second()).collect());
    let (two_min, two_max) = range(rounds.iter().map(|r| r.two.turns_per_second()).collect());
    let (ratio_min, ratio_max) = range(ratios.clone());
    if let Some(median) = median(&ratios) {
        let _ = writeln!(
            out,
            "median 1 → 2: {median:.2}× (rounds {ratio_min:.2}–{ratio_max:.2}×; one worker {one_min:.0}–{one_max:.0} turns/s, two workers {two_min:.0}–{two_max:.0})"
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::bench::scale::{test_result, ScaleStore};

    fn run(workers: usize, seconds: f64) -> ScaleResult {
        test_result(ScaleStore::File, workers, seconds, None)
    }

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(
            median(&[f64::NAN, 2.0]),
            Some(2.0),
            "a ratio that is not a number is left out"
        );
    }

    /// Each round's ratio is its own two runs'; the median is quoted with the ranges.
    #[test]
    fn the_rounds_report_each_ratio_and_their_median() {
        let rounds = vec![
            ScaleRound {
                one: run(1, 1.0),
                two: run(2, 0.5),
            },
            ScaleRound {
                one: run(1, 0.8),
                two: run(2, 0.5),
            },
            ScaleRound {
                one: run(1, 1.0),
                two: run(2, 0.8),
            },
        ];
        let ratios: Vec<f64> = rounds.iter().map(ScaleRound::ratio).collect();
        assert!((ratios[0] - 2.0).abs() < 1e-9);
        assert!((ratios[1] - 1.6).abs() < 1e-9);
        assert!((ratios[2] - 1.25).abs() < 1e-9);
        let report = format_rounds(&rounds);
        assert!(report.contains("3 rounds"), "{report}");
        assert!(
            report.contains("    2               6250               10000    1.60×"),
            "{report}"
        );
        assert!(report.contains("median 1 → 2: 1.60× (rounds 1.25–2.00×; one worker 5000–6250 turns/s, two workers 6250–10000)"), "{report}");
        assert_eq!(format_rounds(&[]), "");
    }
}
