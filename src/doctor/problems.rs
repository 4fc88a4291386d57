//! Why a [`DoctorReport`] does not pass: one [`Problem`] per reason, in a fixed order. The text
//! view prints them after `status:`, the JSON view lists them as `problems`, and
//! [`DoctorReport::passes`] is their absence, so `passes: false` always comes with its why.

use serde::Serialize;

use crate::util::format_utc_ms;

use super::{describe_failure, DoctorReport, PersistedState};

/// What kind of problem: the JSON view's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProblemKind {
    /// The active engine cannot run `agent-run` on this host (`canRun: false`).
    EngineCannotRun,
    /// The backend cannot run turns.
    Backend,
    /// Another process holds the state store's lock.
    StoreLocked,
    /// The state store exists and cannot be used.
    StoreUnusable,
    /// The selected engine is quarantined and legacy serves instead.
    Degraded,
    /// An engine rejected its configuration.
    EngineConfig,
    /// A Node-hosted engine cannot run on its interpreter.
    NodeInterpreter,
}

/// One reason the report does not pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// What is wrong and what to do, as the text view prints it after `status:`.
    pub message: String,
}

impl DoctorReport {
    /// Every reason turns cannot run as configured; empty when the report passes.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut add = |kind, message: String| problems.push(Problem { kind, message });
        if !self.can_run {
            add(
                ProblemKind::EngineCannotRun,
                format!(
                    "context engine \"{}\" cannot run on {}",
                    self.active_engine_id, self.host_label
                ),
            );
        }
        if !self.backend_problems.is_empty() {
            add(
                ProblemKind::Backend,
                "the backend cannot run turns; fix the problem above".to_string(),
            );
        }
        match &self.persisted {
            PersistedState::Locked { .. } => add(
                ProblemKind::StoreLocked,
                "the state store is locked by another process; it is not damaged — keep it, and retry once that process has finished (or stop it if it hangs)".to_string(),
            ),
            PersistedState::Unusable { .. } => add(
                ProblemKind::StoreUnusable,
                "the state store cannot be used; fix it or move it away before running turns"
                    .to_string(),
            ),
            _ => {}
        }
        if let Some(d) = self.degradation() {
            let when = match d.recorded_at_ms {
                None => "in this run".to_string(),
                Some(ms) => format!("recorded by an earlier run at {}", format_utc_ms(ms)),
            };
            add(
                ProblemKind::Degraded,
                format!(
                    "degraded: context engine \"{}\" is quarantined ({when}): {}; \"{}\" serves instead",
                    self.selected_id,
                    describe_failure(&d.operation, &d.reason),
                    crate::engines::LEGACY_ENGINE_ID
                ),
            );
        }
        if !self.config_errors.is_empty() {
            add(
                ProblemKind::EngineConfig,
                "fix the engine configuration above before running turns".to_string(),
            );
        }
        if self.node_checks.iter().any(|c| c.problem.is_some()) {
            add(
                ProblemKind::NodeInterpreter,
                "a Node-hosted engine cannot run on its interpreter".to_string(),
            );
        }
        problems
    }
}
