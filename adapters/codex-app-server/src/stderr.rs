//! What the app-server writes to stderr: each line logged at the level it names, without its
//! colour codes, and the few lines worth quoting when it dies.

/// Stderr lines quoted in a death's reason at most.
const STDERR_SUMMARY_LINES: usize = 3;

/// `line` without ANSI escape sequences (colour and cursor codes, titles) and control
/// characters other than tabs. The escapes are parsed by `strip-ansi-escapes` (a VT
/// parser), not by hand.
pub fn strip_ansi(line: &str) -> String {
    strip_ansi_escapes::strip_str(line)
        .chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .collect()
}

/// The part of the stderr tail worth quoting when the app-server dies: the last lines that
/// report an error, a panic or a fatal condition, or else the last lines; at most
/// [`STDERR_SUMMARY_LINES`], without escape sequences.
pub(crate) fn summarize_stderr<'a>(tail: impl Iterator<Item = &'a str>) -> String {
    let lines: Vec<String> = tail
        .map(strip_ansi)
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let is_failure = |l: &String| {
        let lower = l.to_ascii_lowercase();
        ["error", "panic", "fatal"]
            .iter()
            .any(|w| lower.contains(w))
    };
    let failures: Vec<&String> = lines.iter().filter(|l| is_failure(l)).collect();
    let chosen: Vec<&String> = if failures.is_empty() {
        lines.iter().collect()
    } else {
        failures
    };
    let start = chosen.len().saturating_sub(STDERR_SUMMARY_LINES);
    let quoted: Vec<&str> = chosen[start..].iter().map(|s| s.as_str()).collect();
    if quoted.is_empty() {
        String::new()
    } else {
        format!("; last stderr: {}", quoted.join(" | "))
    }
}

/// The level a Codex log line was written at: the first of its leading words that names one
/// (`2025-… ERROR codex_core: …`, `WARN …`), after its colour codes are removed.
pub fn stderr_line_level(line: &str) -> Option<tracing::Level> {
    line.split_whitespace().take(3).find_map(|word| match word {
        "ERROR" => Some(tracing::Level::ERROR),
        "WARN" | "WARNING" => Some(tracing::Level::WARN),
        "INFO" => Some(tracing::Level::INFO),
        "DEBUG" => Some(tracing::Level::DEBUG),
        "TRACE" => Some(tracing::Level::TRACE),
        _ => None,
    })
}

/// Logs one line the app-server wrote to stderr at the level it was written at (INFO when it
/// names none), without its colour codes, naming `source` (which app-server).
pub fn log_stderr_line(source: &str, line: &str) {
    let text = strip_ansi(line);
    match stderr_line_level(&text).unwrap_or(tracing::Level::INFO) {
        tracing::Level::ERROR => {
            tracing::error!(target: "codex_app_server::stderr", source, "{text}")
        }
        tracing::Level::WARN => {
            tracing::warn!(target: "codex_app_server::stderr", source, "{text}")
        }
        tracing::Level::INFO => {
            tracing::info!(target: "codex_app_server::stderr", source, "{text}")
        }
        tracing::Level::DEBUG => {
            tracing::debug!(target: "codex_app_server::stderr", source, "{text}")
        }
        tracing::Level::TRACE => {
            tracing::trace!(target: "codex_app_server::stderr", source, "{text}")
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A Codex log line's level is the word that names it; a line naming none has none.
    #[test]
    fn stderr_levels_are_read() {
        let level = |line: &str| stderr_line_level(&strip_ansi(line));
        assert_eq!(
            level(
                "\u{1b}[2m2025-11-20T10:00:00Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m codex_core: boom"
            ),
            Some(tracing::Level::ERROR)
        );
        assert_eq!(level(" WARN x: y"), Some(tracing::Level::WARN));
        assert_eq!(level("2025 INFO a"), Some(tracing::Level::INFO));
        assert_eq!(level("panicked at src/x.rs: an ERROR later"), None);
    }

    /// Colour codes and other escape sequences are removed from quoted stderr.
    #[test]
    fn ansi_escapes_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2025\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m boom\u{1b}]0;title\u{7}"),
            "2025 ERROR boom"
        );
    }

    /// A death quotes the error lines of the stderr tail (not unrelated log lines), or the
    /// last lines when none reports an error, three at most.
    #[test]
    fn stderr_summary_prefers_error_lines() {
        let tail = [
            "\u{1b}[32m INFO\u{1b}[0m starting",
            "WARN unrelated: telemetry disabled",
            "\u{1b}[31mERROR\u{1b}[0m model unreachable",
            "INFO still going",
        ];
        assert_eq!(
            summarize_stderr(tail.into_iter()),
            "; last stderr: ERROR model unreachable"
        );
        let calm = ["a", "b", "c", "d"];
        assert_eq!(
            summarize_stderr(calm.into_iter()),
            "; last stderr: b | c | d"
        );
        assert_eq!(summarize_stderr(std::iter::empty()), "");
    }
}
