//! The text view of a [`DoctorReport`] (`ctxbridge doctor`).

use std::fmt;

use codex_app_server_client::{NEWEST_TESTED, OLDEST_TESTED};

use crate::util::format_utc_ms;

use super::{describe_failure, CodexCheck, DoctorReport, PersistedState};

/// `n` and the noun in its number ("1 session", "2 sessions").
fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "context engine: {} ({})",
            self.selected_id,
            self.source.as_str()
        )?;
        if self.disabled {
            write!(
                f,
                " — disabled by plugins.entries.{}.enabled = false",
                self.selected_id
            )?;
        }
        writeln!(f)?;
        if self.active_engine_id != self.selected_id {
            writeln!(f, "running: {}", self.active_engine_id)?;
        }
        let capabilities: Vec<&str> = self.host_capabilities.iter().map(|c| c.as_str()).collect();
        writeln!(
            f,
            "host: {} (capabilities: {})",
            self.host_label,
            if capabilities.is_empty() {
                "none".to_string()
            } else {
                capabilities.join(", ")
            }
        )?;
        match &self.config_file {
            Some(file) => writeln!(
                f,
                "config: {} (from {})",
                file.path.display(),
                file.origin.as_str()
            )?,
            None => writeln!(f, "config: none found (defaults)")?,
        }
        if let Some(setup) = &self.codex_setup {
            writeln!(
                f,
                "codex home: {} (from {}; {})",
                setup.home.path.display(),
                setup.home.source.as_str(),
                if setup.logged_in {
                    "logged in"
                } else {
                    "no login"
                }
            )?;
            match &setup.binary {
                Some(binary) => writeln!(f, "codex binary: {binary}")?,
                None => writeln!(f, "codex binary: none started (backend.url)")?,
            }
        }
        match &self.codex {
            None => {}
            Some(CodexCheck::Version(v)) => {
                writeln!(f, "codex: {v} (tested: {OLDEST_TESTED} to {NEWEST_TESTED})")?
            }
            Some(CodexCheck::Unknown) => writeln!(f, "codex: version unknown")?,
            Some(CodexCheck::Unreachable { .. }) => writeln!(f, "codex: not reachable")?,
        }
        if !self.unoffered.is_empty() {
            writeln!(
                f,
                "registered but not offered by this host: {}",
                self.unoffered.join(", ")
            )?;
        }
        if self.quarantines.is_empty() {
            writeln!(f, "quarantined engines: none")?;
        } else {
            writeln!(f, "quarantined engines:")?;
            for q in &self.quarantines {
                writeln!(
                    f,
                    "  {}: {}",
                    q.engine_id,
                    describe_failure(q.operation.as_str(), &q.reason)
                )?;
            }
        }
        match &self.persisted {
            PersistedState::NotInspected => {}
            PersistedState::NoStore { path } => writeln!(
                f,
                "quarantines seen in earlier runs: none (no state store at {path} yet)"
            )?,
            PersistedState::Read {
                location,
                quarantines,
                stats,
                ..
            } => {
                if quarantines.is_empty() {
                    writeln!(f, "quarantines seen in earlier runs: none ({location})")?;
                } else {
                    writeln!(f, "quarantines seen in earlier runs ({location}):")?;
                    for q in quarantines {
                        writeln!(
                            f,
                            "  {}: {} (recorded {})",
                            q.engine_id,
                            describe_failure(q.operation.as_str(), &q.reason),
                            format_utc_ms(q.at_ms)
                        )?;
                    }
                }
                if let Some(stats) = stats {
                    writeln!(
                        f,
                        "state store: {}, {}, {}, {}, {}",
                        counted(stats.sessions, "session", "sessions"),
                        counted(stats.bindings, "binding", "bindings"),
                        counted(
                            stats.transcript_entries,
                            "transcript entry",
                            "transcript entries"
                        ),
                        counted(stats.outbox_pending, "queued commit", "queued commits"),
                        counted(stats.documents, "document", "documents")
                    )?;
                    if let Some(oldest) = stats.oldest_session_ms {
                        writeln!(f, "oldest session: last active {}", format_utc_ms(oldest))?;
                    }
                }
                match self.retention {
                    Some(retention) => writeln!(
                        f,
                        "retention: sessions idle longer than {} are swept by running bridges (doctor does not sweep)",
                        String::from(crate::config::Retention::new(retention))
                    )?,
                    None => writeln!(f, "retention: off (idle state is kept)")?,
                }
            }
            PersistedState::Locked { error } => {
                writeln!(f, "busy state store: {error}")?;
                writeln!(
                    f,
                    "quarantines seen in earlier runs: unknown (the state store is locked)"
                )?;
            }
            PersistedState::Unusable { error } => {
                writeln!(f, "unusable state store: {error}")?;
                writeln!(
                    f,
                    "quarantines seen in earlier runs: unknown (the state store cannot be read)"
                )?;
            }
        }
        if self.host_checks.is_empty() {
            writeln!(
                f,
                "host requirements: none declared by {}",
                self.active_engine_id
            )?;
        } else {
            writeln!(f, "host requirements:")?;
            for check in &self.host_checks {
                match &check.outcome {
                    Ok(()) => writeln!(f, "  {}: ok", check.operation)?,
                    Err(e) => writeln!(f, "  {}: {e}", check.operation)?,
                }
            }
        }
        for check in &self.node_checks {
            write!(
                f,
                "node for {}: {} ({})",
                check.engine_id,
                check.version.as_deref().unwrap_or("unknown"),
                check.interpreter
            )?;
            if let Some(required) = &check.required {
                write!(f, ", plugin requires {required}")?;
            }
            writeln!(f)?;
            if let Some(problem) = &check.problem {
                writeln!(f, "  error: {problem}")?;
            }
            if let Some(note) = &check.note {
                writeln!(f, "  warning: {note}")?;
            }
        }
        if !self.config_errors.is_empty() {
            writeln!(f, "configuration errors:")?;
            for error in &self.config_errors {
                writeln!(f, "  {error}")?;
            }
        }
        for problem in &self.backend_problems {
            writeln!(f, "backend problem: {problem}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        // One line when there is one problem (or none); a count and a list otherwise.
        match self.problems().as_slice() {
            [] => writeln!(f, "status: ok")?,
            [one] => writeln!(f, "status: {}", one.message)?,
            many => {
                writeln!(f, "status: {} problems:", many.len())?;
                for problem in many {
                    writeln!(f, "  - {}", problem.message)?;
                }
            }
        }
        Ok(())
    }
}
