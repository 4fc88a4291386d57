//! `ctxbridge doctor` (docs/architecture.md#selection-fault-isolation-and-quarantine, §3, §14): which engine is selected and where the selection came
//! from, which engines are quarantined and why, and whether the engine's host requirements are
//! met by the configured backend.
//!
//! A quarantine lasts for the life of a process, and every `ctxbridge turn` is a process of its
//! own, so doctor also reads what earlier runs left in the state store (docs/architecture.md#failure-handling): the
//! quarantine records the harness persisted and its notes for doctor (a no-op `compact` on an
//! engine that does not own compaction, docs/architecture.md#compaction-on-threaded-backends). Doctor never creates the store: when the
//! configured file does not exist there is simply nothing from earlier runs. When the file
//! exists and cannot be used (corrupt, locked, from a newer build) doctor still prints its
//! report, names the file and the problem, and fails (exit 1): no turn can run on that store.

use codex_app_server_client::{is_below_tested, NEWEST_TESTED, OLDEST_TESTED};
use serde::Serialize;

use crate::config::{BackendConfig, Config};
use crate::contract::{ContextEngine, EngineMethod, HostOperation, SelectionSource};
use crate::host::capabilities::Capability;
use crate::host::requirements::{
    check_host_requirements, declared_operations, HostRequirementError,
};
use crate::quarantine::QuarantineRecord;
use crate::registry::{EngineDirs, EngineRegistry};

mod codex;
mod json;
mod node;
mod persisted;
mod problems;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod text;

pub use codex::{check_codex, CodexCheck, CodexSetup};
pub use node::{judge_node, node_checks, node_hosted, NodeCheck, NodeCommand};
pub use persisted::{
    inspect_store, inspect_target, no_op_compact_note_key, read_persisted_state, PersistedState,
};
pub use problems::{Problem, ProblemKind};

/// One operation's host-requirement check.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCheck {
    pub operation: HostOperation,
    pub outcome: Result<(), HostRequirementError>,
}

/// What `doctor` found.
#[derive(Debug, Clone, PartialEq)]
pub struct DoctorReport {
    /// The configuration file read and how it was found; `None`: none was found (defaults).
    pub config_file: Option<crate::config::discover::ConfigFile>,
    /// The id the configuration selects (the disabled id when the entry is disabled).
    pub selected_id: String,
    /// `configured` or `default`.
    pub source: SelectionSource,
    /// True when the selected engine is disabled in `plugins.entries` (legacy runs).
    pub disabled: bool,
    /// The engine that answers calls: the selected one, or `legacy`.
    pub active_engine_id: String,
    pub host_label: String,
    pub host_capabilities: Vec<Capability>,
    /// Every quarantine of this process, with operation and reason.
    pub quarantines: Vec<QuarantineRecord>,
    /// The checks for each operation the active engine declares requirements for.
    pub host_checks: Vec<HostCheck>,
    /// Registration seams the active engine used that this host does not offer (accepted;
    /// not a problem, but a feature of the plugin that does nothing here).
    pub unoffered: Vec<String>,
    /// Problems known to the harness (e.g. a no-op `compact` on a non-owning engine).
    pub warnings: Vec<String>,
    /// False when the active engine cannot run `agent-run` on this host.
    pub can_run: bool,
    /// What earlier runs left in the state store.
    pub persisted: PersistedState,
    /// Engines that rejected their configuration, each naming the keys (docs/config.md#configuration-reference: a config
    /// error, not only a quarantine).
    pub config_errors: Vec<String>,
    /// The Node version check of each Node-hosted engine.
    pub node_checks: Vec<NodeCheck>,
    /// Problems of the configured backend that would fail every turn (see
    /// [`backend_problems`]).
    pub backend_problems: Vec<String>,
    /// `store.retention` (`None`: idle state is kept forever). Doctor only reports it; the
    /// sweep runs in `turn`, `chat` and `serve` processes.
    pub retention: Option<std::time::Duration>,
    /// The Codex app-server's version check (Codex backend only).
    pub codex: Option<CodexCheck>,
    /// Which Codex runs, and with which home (Codex backend only).
    pub codex_setup: Option<CodexSetup>,
}

/// The selected engine's quarantine that makes legacy serve instead of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Degradation {
    /// What the engine was doing (`factory`, `resolve`, or a lifecycle method).
    pub operation: String,
    /// The error.
    pub reason: String,
    /// When an earlier run recorded it; `None` for a quarantine of this run.
    pub recorded_at_ms: Option<u64>,
}

/// How doctor labels a quarantine: a failure to load (the factory, e.g. an engine process
/// whose plugin did not load or register) is named as such; any other names the step or
/// lifecycle method (`resolve` covers an engine that is not registered or breaks the
/// contract).
pub fn describe_failure(operation: &str, reason: &str) -> String {
    match operation {
        "factory" => format!("failed to load (factory): {reason}"),
        method => format!("failed during {method}: {reason}"),
    }
}

/// The warning for a non-owning engine whose `compact` did nothing (docs/architecture.md#compaction-on-threaded-backends).
pub fn no_op_compact_warning(engine_id: &str) -> String {
    format!(
        "context engine \"{engine_id}\" does not own compaction, yet its compact returned without compacting or delegating to the runtime: manual compaction cannot free context"
    )
}

impl DoctorReport {
    /// Adds a warning the harness knows about.
    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Records that `engine_id` answered a manual compaction with a no-op while not owning
    /// compaction.
    pub fn warn_no_op_compact(&mut self, engine_id: &str) {
        self.warn(no_op_compact_warning(engine_id));
    }

    /// Attaches which Codex runs with which home; a home without a login is a warning (the
    /// model provider may need none: an offline `backend.config` works without).
    pub fn with_codex_setup(mut self, setup: CodexSetup) -> Self {
        if !setup.logged_in && setup.binary.is_some() {
            self.warn(format!(
                "the Codex home {} holds no login (auth.json); log in with `CODEX_HOME={} codex login`, or set backend.codexHome to the home you logged in with",
                setup.home.path.display(),
                setup.home.path.display()
            ));
        }
        self.codex_setup = Some(setup);
        self
    }

    /// Attaches the Codex version check; a version below the oldest tested one, an unknown
    /// version or an app-server that did not start is also a warning.
    pub fn with_codex_check(mut self, check: CodexCheck) -> Self {
        match &check {
            CodexCheck::Version(v) if is_below_tested(v) => self.warn(format!(
                "Codex {v} is older than {OLDEST_TESTED}, the oldest version ctxbridge is tested with; upgrade @openai/codex"
            )),
            CodexCheck::Version(_) => {}
            CodexCheck::Unknown => self.warn(format!(
                "the Codex app-server reported no version; ctxbridge is tested with {OLDEST_TESTED} to {NEWEST_TESTED}"
            )),
            CodexCheck::Unreachable { error } => {
                self.warn(format!("the Codex app-server did not start: {error}"))
            }
        }
        self.codex = Some(check);
        self
    }

    /// Names the configuration file the report was made from.
    pub fn with_config_file(mut self, file: Option<crate::config::discover::ConfigFile>) -> Self {
        self.config_file = file;
        self
    }

    /// Attaches what earlier runs left in the store; its notes become warnings.
    pub fn with_persisted_state(mut self, persisted: PersistedState) -> Self {
        if let PersistedState::Read { notes, .. } = &persisted {
            self.warnings.extend(notes.iter().cloned());
        }
        self.persisted = persisted;
        self
    }

    /// Attaches the backend's problems (see [`backend_problems`]).
    pub fn with_backend_problems(mut self, problems: Vec<String>) -> Self {
        self.backend_problems = problems;
        self
    }

    /// True when nothing keeps turns from running as configured: the active engine can run on
    /// the backend, the state store (if there is one) is usable, and the selected engine is not
    /// degraded to legacy by a quarantine. `ctxbridge doctor` exits 1 otherwise.
    pub fn passes(&self) -> bool {
        self.problems().is_empty()
    }

    /// Why the selected engine is degraded to legacy, if it is: its quarantine in this run,
    /// else one recorded by an earlier run (not cleared). `None` for legacy or a disabled
    /// engine (legacy is then what the configuration asks for).
    pub fn degradation(&self) -> Option<Degradation> {
        if self.disabled || self.selected_id == crate::engines::LEGACY_ENGINE_ID {
            return None;
        }
        if let Some(q) = self
            .quarantines
            .iter()
            .find(|q| q.engine_id == self.selected_id)
        {
            return Some(Degradation {
                operation: q.operation.as_str().to_string(),
                reason: q.reason.clone(),
                recorded_at_ms: None,
            });
        }
        match &self.persisted {
            PersistedState::Read { quarantines, .. } => quarantines
                .iter()
                .find(|q| q.engine_id == self.selected_id)
                .map(|q| Degradation {
                    operation: q.operation.as_str().to_string(),
                    reason: q.reason.clone(),
                    recorded_at_ms: Some(q.at_ms),
                }),
            _ => None,
        }
    }

    /// The `agent-run` check, if the engine declares one.
    pub fn agent_run_check(&self) -> Option<&HostCheck> {
        self.host_checks
            .iter()
            .find(|c| c.operation == HostOperation::AgentRun)
    }
}

/// Builds the report: resolves the selected engine through `registry` (quarantining it if it
/// cannot be created), then checks its host requirements against `host_capabilities`. The
/// engine is disposed afterwards.
pub async fn report(
    config: &Config,
    registry: &EngineRegistry,
    host_capabilities: &[Capability],
    host_label: &str,
) -> DoctorReport {
    let resolved = registry
        .resolve_selected(config, &EngineDirs::default())
        .await;
    let engine = &resolved.engine;
    let info = engine.info();
    let host_checks: Vec<HostCheck> = declared_operations(&info)
        .into_iter()
        .map(|operation| HostCheck {
            operation,
            outcome: check_host_requirements(&info, operation, host_label, host_capabilities),
        })
        .collect();
    let can_run = host_checks
        .iter()
        .filter(|c| c.operation == HostOperation::AgentRun)
        .all(|c| c.outcome.is_ok());
    let unoffered = engine.unoffered();
    if !engine.is_quarantined() && engine.methods().contains(EngineMethod::Dispose) {
        if let Err(error) = engine.dispose().await {
            tracing::warn!(
                "disposing context engine \"{}\" after doctor: {error}",
                engine.engine_id()
            );
        }
    }
    DoctorReport {
        config_file: None,
        selected_id: resolved
            .slot
            .disabled_id
            .clone()
            .unwrap_or_else(|| resolved.slot.engine_id.clone()),
        source: resolved.source(),
        disabled: resolved.slot.disabled_id.is_some(),
        active_engine_id: engine.active_engine_id().to_string(),
        host_label: host_label.to_string(),
        host_capabilities: host_capabilities.to_vec(),
        quarantines: registry.quarantine_book().records(),
        host_checks,
        unoffered,
        warnings: Vec::new(),
        can_run,
        persisted: PersistedState::NotInspected,
        retention: config.store.retention.duration(),
        config_errors: Vec::new(),
        node_checks: Vec::new(),
        codex: None,
        codex_setup: None,
        backend_problems: Vec::new(),
    }
}

/// What in the configured backend would fail every turn: a Codex program that cannot be
/// found, or a Responses `apiKeyEnv` variable that is unset or empty.
pub fn backend_problems(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    match &config.backend {
        BackendConfig::Mock => {}
        BackendConfig::Codex(codex) => match codex.command.first() {
            None => problems.push("backend.command is empty".to_string()),
            Some(program) if !crate::app::codex_program_found(program) => problems.push(format!(
                "the Codex program {program:?} (backend.command) was not found: it is not on PATH, not an existing file, and no installed @openai/codex was found"
            )),
            Some(_) => {}
        },
        BackendConfig::Responses(responses) => {
            if let Some(var) = &responses.api_key_env {
                if std::env::var_os(var).map_or(true, |v| v.is_empty()) {
                    problems.push(format!(
                        "the API key variable {var} (backend.apiKeyEnv) is not set: every request would be refused"
                    ));
                }
            }
        }
    }
    problems
}

/// The engine ids whose doctor notes are worth looking up: every registered engine, the
/// selected one and legacy (notes are keyed by the id of the engine that ran).
pub fn note_engine_ids(config: &Config, registry: &EngineRegistry) -> Vec<String> {
    let mut ids = registry.registered_ids();
    ids.extend(config.plugins.entries.keys().cloned());
    if let Some(selected) = &config.plugins.slots.context_engine {
        ids.push(selected.clone());
    }
    ids.push(crate::engines::LEGACY_ENGINE_ID.to_string());
    ids.sort();
    ids.dedup();
    ids
}
