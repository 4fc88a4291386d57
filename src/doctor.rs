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

use std::fmt;
use std::path::Path;

use codex_app_server_client::{is_below_tested, CodexVersion, NEWEST_TESTED, OLDEST_TESTED};

use crate::backend::codex::CodexBackend;
use crate::backend::codex_home::CodexHome;
use crate::backend::ThreadedBackend;
use crate::config::{BackendConfig, Config};
use crate::contract::{ContextEngine, EngineMethod, HostOperation, SelectionSource};
use crate::host::capabilities::Capability;
use crate::host::node::{parse_node_version, NodeRange, NODE_SQLITE_MIN};
use crate::host::requirements::{
    check_host_requirements, declared_operations, HostRequirementError,
};
use crate::quarantine::QuarantineRecord;
use crate::registry::{EngineDirs, EngineRegistry};
use crate::store::{open_store, StateStore, StoreError, StoreStats, StoreTarget};
use crate::util::format_utc_ms;

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

/// Which Codex ctxbridge runs and where its state is.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexSetup {
    /// The Codex home and why it is there.
    pub home: CodexHome,
    /// The home holds a login (`auth.json`).
    pub logged_in: bool,
    /// The program started (`None`: `backend.url`, nothing is started).
    pub binary: Option<String>,
}

/// `n` and the noun in its number ("1 session", "2 sessions").
fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What doctor learned from the Codex app-server's `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub enum CodexCheck {
    /// The version Codex reported.
    Version(CodexVersion),
    /// Codex answered, with a user agent that names no version.
    Unknown,
    /// The app-server did not start or did not answer `initialize`.
    Unreachable { error: String },
}

/// Spawns the app-server once, reads the version from `initialize`, and shuts it down.
pub async fn check_codex(backend: &CodexBackend) -> CodexCheck {
    let check = match backend.codex_version().await {
        Ok(Some(version)) => CodexCheck::Version(version),
        Ok(None) => CodexCheck::Unknown,
        Err(error) => CodexCheck::Unreachable {
            error: error.to_string(),
        },
    };
    backend.shutdown().await;
    check
}

/// The selected engine's quarantine that makes legacy serve instead of it.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What doctor found in the state store that earlier runs wrote.
#[derive(Debug, Clone, PartialEq)]
pub enum PersistedState {
    /// The store was not looked at (a report built without one).
    NotInspected,
    /// The configured store file does not exist yet: no earlier run left anything.
    NoStore { path: String },
    /// Read from the store at `location`.
    Read {
        location: String,
        /// Quarantines persisted by earlier runs, by engine id.
        quarantines: Vec<crate::store::QuarantineRecord>,
        /// The harness's notes for doctor (also listed as warnings).
        notes: Vec<String>,
        /// Row counts and the oldest session (`None` when not counted).
        stats: Option<StoreStats>,
    },
    /// The store exists but cannot be used; the message names the file.
    Unusable { error: String },
    /// Another process holds the store's lock (the store itself may be fine).
    Locked { error: String },
}

impl PersistedState {
    /// False when the store exists and cannot be used.
    pub fn is_usable(&self) -> bool {
        !matches!(
            self,
            PersistedState::Unusable { .. } | PersistedState::Locked { .. }
        )
    }
}

/// The key of the harness's note about a no-op `compact` of `engine_id` (docs/architecture.md#compaction-on-threaded-backends), in the
/// documents namespace [`crate::harness::DOCTOR_NAMESPACE`].
pub fn no_op_compact_note_key(engine_id: &str) -> String {
    format!("noop-compact:{engine_id}")
}

/// Reads the persisted quarantines and the doctor notes of `engine_ids` from `store`.
pub fn read_persisted_state(
    store: &dyn StateStore,
    engine_ids: &[String],
) -> Result<PersistedState, StoreError> {
    let quarantines = store.quarantines()?;
    let mut notes = Vec::new();
    for id in engine_ids {
        let key = no_op_compact_note_key(id);
        if let Some(json) = store.load_document(crate::harness::DOCTOR_NAMESPACE, &key)? {
            // The harness stores the note as a JSON string; anything else is shown as stored.
            notes.push(serde_json::from_str::<String>(&json).unwrap_or(json));
        }
    }
    let stats = store.stats()?;
    Ok(PersistedState::Read {
        location: store.location(),
        quarantines,
        notes,
        stats: Some(stats),
    })
}

/// Opens the store at `path` if the file exists (never creating one) and reads what earlier
/// runs left there for `engine_ids`.
pub fn inspect_store(path: &Path, engine_ids: &[String]) -> PersistedState {
    inspect_sqlite(path, engine_ids, || {
        open_store(&StoreTarget::Sqlite(path.to_path_buf()))
    })
}

/// [`inspect_store`] for a SQLite store whose shard 0 is `path`, opened by `open`.
fn inspect_sqlite(
    path: &Path,
    engine_ids: &[String],
    open: impl FnOnce() -> Result<std::sync::Arc<dyn crate::store::StateStore>, StoreError>,
) -> PersistedState {
    match path.try_exists() {
        Ok(false) => PersistedState::NoStore {
            path: path.display().to_string(),
        },
        Err(error) => PersistedState::Unusable {
            error: format!(
                "state store {}: cannot check the file: {error}",
                path.display()
            ),
        },
        Ok(true) => open()
            .and_then(|store| read_persisted_state(store.as_ref(), engine_ids))
            .unwrap_or_else(|error| match error {
                StoreError::Locked { .. } => PersistedState::Locked {
                    error: error.to_string(),
                },
                _ => PersistedState::Unusable {
                    error: error.to_string(),
                },
            }),
    }
}

/// The Node check of one Node-hosted engine (`doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCheck {
    pub engine_id: String,
    /// The interpreter (`command[0]`).
    pub interpreter: String,
    /// `process.versions.node`, when the interpreter ran.
    pub version: Option<String>,
    /// The plugin's `package.json` `engines.node`, when found.
    pub required: Option<String>,
    /// Why the engine cannot run (doctor fails).
    pub problem: Option<String>,
    /// Something worth knowing that does not fail doctor.
    pub note: Option<String>,
}

/// A Node-hosted engine command: its interpreter and the plugin argument (the one after the
/// host script), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCommand {
    /// `command[0]` when it is `node`/`nodejs`; `node` when `command[0]` is itself a
    /// `.mjs`/`.cjs`/`.js` script (run through its shebang).
    pub interpreter: String,
    pub plugin: Option<String>,
}

/// Whether an engine command runs Node: `command[0]`'s file name is `node` (or `nodejs`), or
/// `command[0]` is a `.mjs`/`.cjs`/`.js` host script. A command that merely passes a script to
/// another program (a wrapper) is not judged.
pub fn node_hosted(command: &[String]) -> Option<NodeCommand> {
    let program = command.first()?;
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let is_script = |a: &String| a.ends_with(".mjs") || a.ends_with(".cjs") || a.ends_with(".js");
    let interpreter = if name == "node" || name == "nodejs" {
        program.clone()
    } else if is_script(program) {
        "node".to_string()
    } else {
        return None;
    };
    let script = command.iter().position(is_script);
    Some(NodeCommand {
        interpreter,
        plugin: script.and_then(|i| command.get(i + 1).cloned()),
    })
}

/// Judges a Node version against a plugin's `engines.node` (pure).
pub fn judge_node(
    version: Option<&str>,
    required: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(version) = version else {
        return (
            Some("the interpreter did not run (`-p process.versions.node` failed)".into()),
            None,
        );
    };
    let Some(have) = parse_node_version(version) else {
        return (
            None,
            Some(format!("cannot read the Node version {version:?}")),
        );
    };
    match required {
        Some(range) => match NodeRange::parse(range) {
            Some(range_ok) if !range_ok.matches(&have) => (
                Some(format!(
                    "Node {version} is not what the plugin requires (engines.node \"{range}\")"
                )),
                None,
            ),
            Some(_) => (None, None),
            None => (None, Some(format!("cannot check engines.node \"{range}\""))),
        },
        None if have < NODE_SQLITE_MIN => (
            None,
            Some(format!(
                "Node {version} lacks node:sqlite (Node >= 22.5); plugins that use it will not load"
            )),
        ),
        None => (None, None),
    }
}

/// The `engines.node` of the plugin at `plugin` (a package directory, or a file whose nearest
/// directory with a `package.json` is the package).
fn plugin_node_requirement(plugin: &Path) -> Option<String> {
    let mut dir = if plugin.is_dir() {
        Some(plugin.to_path_buf())
    } else {
        plugin.parent().map(Path::to_path_buf)
    };
    while let Some(d) = dir {
        let manifest = d.join("package.json");
        if manifest.is_file() {
            let text = std::fs::read_to_string(&manifest).ok()?;
            let value: serde_json::Value = serde_json::from_str(&text).ok()?;
            return value["engines"]["node"].as_str().map(str::to_string);
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    None
}

/// Runs `<command[0]> -p process.versions.node` for every configured Node-hosted engine and
/// judges it against its plugin's `engines.node`.
pub async fn node_checks(config: &Config) -> Vec<NodeCheck> {
    let mut checks = Vec::new();
    for (id, entry) in &config.plugins.entries {
        let Some(command) = &entry.command else {
            continue;
        };
        let Some(NodeCommand {
            interpreter,
            plugin,
        }) = node_hosted(command)
        else {
            continue;
        };
        let base = entry
            .cwd
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default();
        let mut run = tokio::process::Command::new(&interpreter);
        run.args(["-p", "process.versions.node"])
            .current_dir(&base)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let version =
            match tokio::time::timeout(std::time::Duration::from_secs(10), run.output()).await {
                Ok(Ok(out)) if out.status.success() => {
                    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
                }
                _ => None,
            };
        let required = plugin.and_then(|p| plugin_node_requirement(&base.join(p)));
        let (problem, note) = judge_node(version.as_deref(), required.as_deref());
        checks.push(NodeCheck {
            engine_id: id.clone(),
            interpreter,
            version,
            required,
            problem,
            note,
        });
    }
    checks
}

/// Connects to the configured store of any kind and reads what earlier runs left there; a
/// PostgreSQL store that cannot be reached is reported unusable (naming the URL without its
/// password), never created anew.
pub fn inspect_target(target: &StoreTarget, engine_ids: &[String]) -> PersistedState {
    match target {
        StoreTarget::Sqlite(path) => inspect_store(path, engine_ids),
        StoreTarget::ShardedSqlite { path, .. } => {
            inspect_sqlite(path, engine_ids, || open_store(target))
        }
        StoreTarget::Postgres { .. } => open_store(target)
            .and_then(|store| read_persisted_state(store.as_ref(), engine_ids))
            .unwrap_or_else(|error| PersistedState::Unusable {
                error: error.to_string(),
            }),
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
        self.can_run
            && self.persisted.is_usable()
            && self.config_errors.is_empty()
            && self.node_checks.iter().all(|c| c.problem.is_none())
            && self.backend_problems.is_empty()
            && self.degradation().is_none()
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
                    operation: q.operation.clone(),
                    reason: q.reason.clone(),
                    recorded_at_ms: Some(q.at_ms),
                }),
            _ => None,
        }
    }

    /// The report as JSON (`doctor --json`): the same facts as the text, with timestamps in
    /// milliseconds since the Unix epoch.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let persisted = match &self.persisted {
            PersistedState::NotInspected => json!({"state": "notInspected"}),
            PersistedState::NoStore { path } => json!({"state": "noStore", "path": path}),
            PersistedState::Read {
                location,
                quarantines,
                notes,
                stats,
            } => json!({
                "state": "read",
                "location": location,
                "quarantines": quarantines.iter().map(|q| json!({
                    "engineId": q.engine_id,
                    "operation": q.operation,
                    "reason": q.reason,
                    "atMs": q.at_ms,
                })).collect::<Vec<_>>(),
                "notes": notes,
                "stats": stats,
            }),
            PersistedState::Unusable { error } => json!({"state": "unusable", "error": error}),
            PersistedState::Locked { error } => json!({"state": "locked", "error": error}),
        };
        json!({
            "configFile": self.config_file.as_ref().map(|file| json!({
                "path": file.path.display().to_string(),
                "from": file.origin.as_str(),
            })),
            "selectedId": self.selected_id,
            "source": self.source.as_str(),
            "disabled": self.disabled,
            "activeEngineId": self.active_engine_id,
            "host": {
                "label": self.host_label,
                "capabilities": self.host_capabilities.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
            },
            "quarantines": self.quarantines.iter().map(|q| json!({
                "engineId": q.engine_id,
                "operation": q.operation.as_str(),
                "reason": q.reason,
            })).collect::<Vec<_>>(),
            "hostChecks": self.host_checks.iter().map(|c| json!({
                "operation": c.operation.to_string(),
                "ok": c.outcome.is_ok(),
                "error": c.outcome.as_ref().err().map(|e| e.to_string()),
            })).collect::<Vec<_>>(),
            "backendProblems": self.backend_problems,
            "unoffered": self.unoffered,
            "warnings": self.warnings,
            "canRun": self.can_run,
            "persisted": persisted,
            "retentionMs": self.retention.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            "codexSetup": self.codex_setup.as_ref().map(|setup| json!({
                "home": setup.home.path.display().to_string(),
                "homeFrom": setup.home.source.as_str(),
                "loggedIn": setup.logged_in,
                "binary": setup.binary,
            })),
            "codex": self.codex.as_ref().map(|check| match check {
                CodexCheck::Version(version) => json!({"state": "version", "version": version.to_string()}),
                CodexCheck::Unknown => json!({"state": "unknown"}),
                CodexCheck::Unreachable { error } => json!({"state": "unreachable", "error": error}),
            }),
            "degradation": self.degradation().map(|d| json!({
                "operation": d.operation,
                "reason": d.reason,
                "recordedAtMs": d.recorded_at_ms,
            })),
            "passes": self.passes(),
        })
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
                            describe_failure(&q.operation, &q.reason),
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
        if self.passes() {
            return writeln!(f, "status: ok");
        }
        if !self.can_run {
            writeln!(
                f,
                "status: context engine \"{}\" cannot run on {}",
                self.active_engine_id, self.host_label
            )?;
        }
        if !self.backend_problems.is_empty() {
            writeln!(
                f,
                "status: the backend cannot run turns; fix the problem above"
            )?;
        }
        match &self.persisted {
            PersistedState::Locked { .. } => writeln!(
                f,
                "status: the state store is locked by another process; it is not damaged — keep it, and retry once that process has finished (or stop it if it hangs)"
            )?,
            PersistedState::Unusable { .. } => writeln!(
                f,
                "status: the state store cannot be used; fix it or move it away before running turns"
            )?,
            _ => {}
        }
        if let Some(d) = self.degradation() {
            let when = match d.recorded_at_ms {
                None => "in this run".to_string(),
                Some(ms) => format!("recorded by an earlier run at {}", format_utc_ms(ms)),
            };
            writeln!(
                f,
                "status: degraded: context engine \"{}\" is quarantined ({when}): {}; \"{}\" serves instead",
                self.selected_id,
                describe_failure(&d.operation, &d.reason),
                crate::engines::LEGACY_ENGINE_ID
            )?;
        }
        if !self.config_errors.is_empty() {
            writeln!(
                f,
                "status: fix the engine configuration above before running turns"
            )?;
        }
        if self.node_checks.iter().any(|c| c.problem.is_some()) {
            writeln!(
                f,
                "status: a Node-hosted engine cannot run on its interpreter"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use crate::store::StateStoreExt;
    use async_trait::async_trait;

    use super::*;
    use crate::contract::*;
    use crate::engines::LegacyEngine;
    use crate::host::capabilities::HostKind;

    /// An engine with host requirements that needs prompt control for agent-run.
    struct Demanding;

    #[async_trait]
    impl ContextEngine for Demanding {
        fn info(&self) -> EngineInfo {
            let mut info = EngineInfo::new("demanding", "Demanding");
            let mut reqs = BTreeMap::new();
            reqs.insert(
                HostOperation::AgentRun,
                HostRequirement {
                    required_capabilities: vec!["assemble-before-prompt".into()],
                    unsupported_message: Some("Run it on Codex.".into()),
                },
            );
            reqs.insert(
                HostOperation::ManualCompact,
                HostRequirement {
                    required_capabilities: vec!["compact".into()],
                    unsupported_message: None,
                },
            );
            info.host_requirements = Some(reqs);
            info
        }
        async fn ingest(&self, p: IngestParams) -> Result<IngestResult, EngineError> {
            LegacyEngine.ingest(p).await
        }
        async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
            LegacyEngine.assemble(p).await
        }
        async fn compact(&self, p: CompactParams) -> Result<CompactResult, EngineError> {
            LegacyEngine.compact(p).await
        }
    }

    fn config(src: &str) -> Config {
        Config::parse(src, "c.json5").unwrap()
    }

    /// An empty config: legacy, default source, nothing quarantined, can run.
    #[tokio::test]
    async fn empty_config_reports_legacy_default() {
        let registry = EngineRegistry::new();
        let kind = HostKind::Mock;
        let report = report(
            &Config::default(),
            &registry,
            &kind.capabilities(),
            kind.label(),
        )
        .await;
        assert!(report.can_run);
        assert_eq!(report.selected_id, "legacy");
        let text = report.to_string();
        assert!(
            text.starts_with("context engine: legacy (default)\n"),
            "{text}"
        );
        assert!(text.contains("quarantined engines: none"), "{text}");
        assert!(text.ends_with("status: ok\n"), "{text}");
    }

    /// An engine needing prompt control cannot run on the CLI host: can_run is false and the
    /// report shows the docs/architecture.md#host-capabilities-and-requirements text for each declared operation.
    #[tokio::test]
    async fn unmet_requirements_block_running() {
        let registry = EngineRegistry::new();
        registry
            .register("demanding", "test", |_| async {
                Ok(Arc::new(Demanding) as Arc<dyn ContextEngine>)
            })
            .unwrap();
        let cfg = config("{plugins: {slots: {contextEngine: 'demanding'}}}");
        let kind = HostKind::Cli;
        let report = report(&cfg, &registry, &kind.capabilities(), kind.label()).await;
        assert!(!report.can_run);
        assert_eq!(report.host_checks.len(), 2);
        let text = report.to_string();
        assert!(
            text.starts_with("context engine: demanding (configured)\n"),
            "{text}"
        );
        assert!(text.contains(
            "  agent-run: Context engine \"demanding\" cannot run operation \"agent-run\" on a CLI host. Missing host capabilities: assemble-before-prompt. Required capabilities: assemble-before-prompt. Host capabilities: bootstrap, after-turn, maintain. Run it on Codex.\n"
        ), "{text}");
        assert!(text.contains("  manual-compact: Context engine"), "{text}");
        assert!(
            text.ends_with("status: context engine \"demanding\" cannot run on a CLI host\n"),
            "{text}"
        );

        let full = HostKind::Codex;
        let report = super::report(&cfg, &registry, &full.capabilities(), full.label()).await;
        assert!(report.can_run);
        assert!(report.to_string().contains("  agent-run: ok\n"));
    }

    /// An unknown id shows as a quarantine during resolve, and legacy runs.
    #[tokio::test]
    async fn unknown_engine_shows_quarantine() {
        let registry = EngineRegistry::new();
        let cfg = config("{plugins: {slots: {contextEngine: 'ghost'}}}");
        let report = report(&cfg, &registry, &Capability::ALL, "the mock backend").await;
        assert!(report.can_run);
        assert_eq!(report.active_engine_id, "legacy");
        let text = report.to_string();
        assert!(
            text.contains("context engine: ghost (configured)\nrunning: legacy\n"),
            "{text}"
        );
        assert!(
            text.contains("quarantined engines:\n  ghost: failed during resolve: not registered\n"),
            "{text}"
        );
    }

    /// A disabled engine is shown as configured-but-disabled with legacy running, no quarantine;
    /// harness warnings are listed.
    #[tokio::test]
    async fn disabled_engine_and_warnings() {
        let registry = EngineRegistry::new();
        let cfg =
            config("{plugins: {slots: {contextEngine: 'off'}, entries: {off: {enabled: false}}}}");
        let mut report = report(&cfg, &registry, &Capability::ALL, "the mock backend").await;
        report.warn_no_op_compact("off");
        let text = report.to_string();
        assert!(text.starts_with(
            "context engine: off (configured) — disabled by plugins.entries.off.enabled = false\nrunning: legacy\n"
        ), "{text}");
        assert!(text.contains("quarantined engines: none"), "{text}");
        assert!(
            text.contains("warning: context engine \"off\" does not own compaction"),
            "{text}"
        );
    }

    fn stored_quarantine(
        id: &str,
        operation: &str,
        reason: &str,
    ) -> crate::store::QuarantineRecord {
        crate::store::QuarantineRecord {
            engine_id: id.into(),
            operation: operation.into(),
            reason: reason.into(),
            at_ms: 1_700_000_000_000,
        }
    }

    /// Timestamps render as RFC 3339 UTC, leap days and the epoch included.
    #[test]
    fn utc_timestamps() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc_ms(1_700_000_000_999), "2023-11-14T22:13:20Z");
        assert_eq!(format_utc_ms(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }

    /// Persisted quarantines are read with operation and reason; the harness's no-op-compact
    /// note is found for the engine ids asked about (and only those), decoded from its JSON
    /// string form.
    #[test]
    fn reads_persisted_quarantines_and_notes() {
        let store = crate::store::SqliteStore::in_memory().unwrap();
        store
            .record_quarantine(&stored_quarantine("py", "assemble", "engine exploded"))
            .unwrap();
        store
            .save_document(
                crate::harness::DOCTOR_NAMESPACE,
                "noop-compact:lazy",
                &serde_json::to_string("lazy compact was a no-op").unwrap(),
            )
            .unwrap();
        store
            .save_document(
                crate::harness::DOCTOR_NAMESPACE,
                "noop-compact:other",
                "\"x\"",
            )
            .unwrap();
        let state = read_persisted_state(&store, &["lazy".into(), "py".into()]).unwrap();
        let PersistedState::Read {
            quarantines, notes, ..
        } = &state
        else {
            panic!("expected Read, got {state:?}");
        };
        assert_eq!(quarantines.len(), 1);
        assert_eq!(quarantines[0].operation, "assemble");
        assert_eq!(notes, &vec!["lazy compact was a no-op".to_string()]);
    }

    /// The report shows earlier runs' quarantines in their own section (the current-process
    /// section unchanged), the notes as warnings, and still passes.
    #[tokio::test]
    async fn persisted_state_is_reported() {
        let registry = EngineRegistry::new();
        let persisted = PersistedState::Read {
            location: "/tmp/s.db".into(),
            quarantines: vec![stored_quarantine("py", "assemble", "engine exploded")],
            notes: vec!["lazy compact was a no-op".into()],
            stats: None,
        };
        let report = report(
            &Config::default(),
            &registry,
            &Capability::ALL,
            "the mock backend",
        )
        .await
        .with_persisted_state(persisted);
        assert!(report.passes());
        let text = report.to_string();
        assert!(text.contains("quarantined engines: none\nquarantines seen in earlier runs (/tmp/s.db):\n  py: failed during assemble: engine exploded (recorded 2023-11-14T22:13:20Z)\n"), "{text}");
        assert!(
            text.contains("warning: lazy compact was a no-op\n"),
            "{text}"
        );
        assert!(text.ends_with("status: ok\n"), "{text}");
    }

    /// A missing store file is not created and means "nothing from earlier runs"; a file that
    /// is not a database is reported naming the file, and the report fails.
    #[tokio::test]
    async fn missing_and_corrupt_store_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("sub").join("state.db");
        let state = inspect_store(&missing, &[]);
        assert!(matches!(state, PersistedState::NoStore { .. }), "{state:?}");
        assert!(
            !dir.path().join("sub").exists(),
            "doctor created the store directory"
        );

        let corrupt = dir.path().join("state.db");
        std::fs::write(
            &corrupt,
            "this is not a database, it is a long enough line of text",
        )
        .unwrap();
        let state = inspect_store(&corrupt, &[]);
        let PersistedState::Unusable { error } = &state else {
            panic!("expected Unusable, got {state:?}");
        };
        assert!(error.contains(&corrupt.display().to_string()), "{error}");
        let registry = EngineRegistry::new();
        let report = report(
            &Config::default(),
            &registry,
            &Capability::ALL,
            "the mock backend",
        )
        .await
        .with_persisted_state(state);
        assert!(report.can_run);
        assert!(!report.passes());
        let text = report.to_string();
        assert!(
            text.contains("unusable state store: state store "),
            "{text}"
        );
        assert!(text.ends_with("status: the state store cannot be used; fix it or move it away before running turns\n"), "{text}");
    }

    /// Node-hosted commands are recognised by the interpreter (`node`) or a host script run
    /// directly; the argument after the script is the plugin; a wrapper is not judged.
    #[test]
    fn node_hosted_commands() {
        let cmd = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let node = |interpreter: &str, plugin: Option<&str>| {
            Some(NodeCommand {
                interpreter: interpreter.into(),
                plugin: plugin.map(str::to_string),
            })
        };
        assert_eq!(
            node_hosted(&cmd(&["node", "host.mjs", "plugin"])),
            node("node", Some("plugin"))
        );
        assert_eq!(
            node_hosted(&cmd(&["/opt/bin/node", "host.mjs"])),
            node("/opt/bin/node", None)
        );
        assert_eq!(
            node_hosted(&cmd(&["x/node_modules/.bin/node", "h.mjs", "p"])),
            node("x/node_modules/.bin/node", Some("p"))
        );
        assert_eq!(
            node_hosted(&cmd(&["./host.mjs", "p"])),
            node("node", Some("p"))
        );
        assert_eq!(node_hosted(&cmd(&["python3", "engine.py"])), None);
        assert_eq!(
            node_hosted(&cmd(&["python3", "wrap.py", "node", "host.mjs"])),
            None
        );
    }

    /// An interpreter outside the plugin's `engines.node` range (below it, or above an upper
    /// bound) is a problem; a range semver cannot read is a note; without a requirement an
    /// interpreter lacking node:sqlite is only a note; a newer one passes. (The range syntax
    /// itself is tested in `host::node`.)
    #[test]
    fn node_versions_are_judged_against_the_plugin_requirement() {
        let (problem, _) = judge_node(Some("20.20.2"), Some(">=22.5"));
        assert!(problem.unwrap().contains("not what the plugin requires"));
        let (problem, _) = judge_node(Some("25.1.0"), Some(">= 22.5.0 <25"));
        assert!(problem.is_some(), "an upper bound is checked too");
        let (problem, note) = judge_node(Some("22.23.3"), Some("latest"));
        assert!(problem.is_none());
        assert!(note.unwrap().contains("cannot check"));
        assert_eq!(judge_node(Some("22.23.3"), Some(">=22.5")), (None, None));
        let (problem, note) = judge_node(Some("20.20.2"), None);
        assert!(problem.is_none());
        assert!(note.unwrap().contains("node:sqlite"));
        let (problem, _) = judge_node(None, Some(">=22.5"));
        assert!(problem.is_some());
    }
}
