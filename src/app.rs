//! Wiring a configuration into a running harness: the state store, the backend, the engine
//! registry (built-in engines plus out-of-process engines from `plugins.entries.<id>.command`)
//! and the selected engine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use codex_app_server_client::locate_codex_binary;

use crate::backend::codex::{AppServerConfig, CodexBackend};
use crate::backend::codex_config::app_server_config;
use crate::backend::responses::{
    ResponsesBackend, ResponsesBackendConfig, ResponsesBackendConfigError, ResponsesThreads,
};
use crate::backend::{ContextDelivery, MockBackend, ThreadedBackend};
use crate::config::{
    self, BackendConfig, CodexContextDelivery, Config, DeveloperInstructionDrift,
    ResponsesThreadKind, StoreKind,
};
use crate::contract::{ConfigIssue, ContextEngine, EngineError, RuntimeCallbacks};
use crate::engines::process::protocol::error_code;
use crate::engines::process::{HostIdentity, ProcessEngine, ProcessEngineConfig};
use crate::engines::sample::{SampleSummaryEngine, SAMPLE_ENGINE_ID};
use crate::harness::{Harness, HarnessConfig, HostLlmCallbacks};
use crate::projection::DriftPolicy;
use crate::registry::{EngineDirs, EngineRegistry, ResolvedEngine, CORE_OWNER};
use crate::store::{
    open_store, PostgresOptions, RetentionSweeper, StateStore, StoreError, StoreTarget,
    SweepListener, MAX_SHARDS, SWEEP_INTERVAL,
};

/// The owner of engines declared in the configuration file.
pub const CONFIG_OWNER: &str = "config";

/// Why the application could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The state store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `backend.command` of the Codex backend names no program.
    #[error("backend: backend.command is empty")]
    EmptyCodexCommand,
    /// `store.shards` out of range.
    #[error("store: store.shards is {shards}; it must be 1 to {MAX_SHARDS}")]
    BadShards { shards: usize },
    /// `store.shards` with a PostgreSQL store (its server already writes in parallel).
    #[error("store: store.shards applies to the SQLite store only; PostgreSQL writes sessions in parallel without it — remove store.shards")]
    ShardsOnPostgres,
    /// `store.kind: "postgres"` without `store.url`.
    #[error(
        "store: store.url is required with store.kind \"postgres\" (postgres://user@host:5432/db)"
    )]
    MissingStoreUrl,
    /// `backend.url` outside `serve`: the Codex backend of the other commands starts its own
    /// app-server child.
    #[error("backend: backend.url ({url}) is used by `ctxbridge serve` only; the other commands start their own `codex app-server` (remove backend.url, or run the turn through serve)")]
    BackendUrlNeedsServe { url: String },
    /// The Responses backend could not be built from its configuration.
    #[error("backend: {source}")]
    Responses {
        #[source]
        source: ResponsesBackendConfigError,
    },
}

/// The host identity engines are told about in `initialize`.
pub fn host_identity(config: &Config) -> HostIdentity {
    let host = config.backend.host_kind();
    HostIdentity {
        id: format!("ctxbridge-{}", host.as_str()),
        label: host.label().to_string(),
        capabilities: host.capabilities().to_vec(),
    }
}

/// An engine that rejected its configuration (`-32010` from `initialize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfigError {
    pub engine_id: String,
    /// What the engine said (it names the keys).
    pub message: String,
    /// Each offending key, relative to `plugins.entries.<id>.config`.
    pub issues: Vec<ConfigIssue>,
}

impl std::fmt::Display for EngineConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid configuration of context engine \"{}\" (plugins.entries.{}.config)",
            self.engine_id, self.engine_id
        )?;
        if self.issues.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            for (i, issue) in self.issues.iter().enumerate() {
                let sep = if i == 0 { ": " } else { "; " };
                write!(
                    f,
                    "{sep}plugins.entries.{}.config.{}: {}",
                    self.engine_id, issue.key, issue.message
                )?;
            }
            Ok(())
        }
    }
}

impl std::error::Error for EngineConfigError {}

/// Collects the configuration errors engines report while their factories run.
#[derive(Debug, Clone, Default)]
pub struct EngineConfigErrors(Arc<Mutex<Vec<EngineConfigError>>>);

impl EngineConfigErrors {
    fn push(&self, error: EngineConfigError) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(error);
    }

    /// Every error reported so far.
    pub fn all(&self) -> Vec<EngineConfigError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The error `engine_id` reported, if any.
    pub fn of(&self, engine_id: &str) -> Option<EngineConfigError> {
        self.all().into_iter().find(|e| e.engine_id == engine_id)
    }
}

/// The OpenClaw-shaped config an engine sees as `api.config` (`initialize.openclawConfig`):
/// `{plugins: {slots, entries: {<id>: {enabled?, config?}}}}`. ctxbridge's own entry fields
/// (`command`, `env`, `cwd`, `timeoutMs`) stay out of it.
pub fn openclaw_config(config: &Config) -> Value {
    let mut slots = Map::new();
    if let Some(engine) = &config.plugins.slots.context_engine {
        slots.insert("contextEngine".into(), json!(engine));
    }
    if let Some(memory) = &config.plugins.slots.memory {
        slots.insert("memory".into(), json!(memory));
    }
    let entries: Map<String, Value> = config
        .plugins
        .entries
        .iter()
        .map(|(id, entry)| {
            let mut e = Map::new();
            if let Some(enabled) = entry.enabled {
                e.insert("enabled".into(), json!(enabled));
            }
            if let Some(c) = &entry.config {
                e.insert("config".into(), c.clone());
            }
            (id.clone(), Value::Object(e))
        })
        .collect();
    json!({"plugins": {"slots": slots, "entries": entries}})
}

/// The state dir of engine `engine_id`: `<state dir>/engines/<engineId>`, absolute (the
/// engine may run in another working directory).
pub fn engine_state_dir(config: &Config, engine_id: &str) -> PathBuf {
    absolute(config.state_dir().join("engines").join(engine_id))
}

/// `path` made absolute against the current directory (unchanged if that fails).
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// The model engines are told about (`initialize.model`): `agent.model`, else the Responses
/// backend's model.
pub fn default_model(config: &Config) -> Option<String> {
    config
        .agent
        .model
        .clone()
        .or_else(|| match &config.backend {
            BackendConfig::Responses(r) => Some(r.model.clone()),
            _ => None,
        })
}

/// The registry with every engine ctxbridge knows: the sample engine, and each configured
/// entry with a `command` as an out-of-process engine (docs/engine-protocol.md#the-engine-process-protocol). Legacy is built in.
pub fn registry(config: &Config) -> EngineRegistry {
    registry_with(config, None, &EngineConfigErrors::default())
}

/// As [`registry`]; out-of-process engines get `host_callbacks` for `runtime/llmComplete`
/// outside lifecycle calls, and their configuration errors are collected in `config_errors`.
pub fn registry_with(
    config: &Config,
    host_callbacks: Option<Arc<dyn RuntimeCallbacks>>,
    config_errors: &EngineConfigErrors,
) -> EngineRegistry {
    let registry = EngineRegistry::new();
    let registered = registry.register(SAMPLE_ENGINE_ID, CORE_OWNER, |ctx| async move {
        SampleSummaryEngine::from_config(&ctx.config, ctx.agent_dir)
            .map(|e| Arc::new(e) as Arc<dyn ContextEngine>)
    });
    if let Err(e) = registered {
        tracing::error!(error = %e, "cannot register the sample engine");
    }
    let host = host_identity(config);
    for (id, entry) in &config.plugins.entries {
        let Some(command) = entry.command.clone() else {
            continue;
        };
        let id_owned = id.clone();
        let env = entry.env.clone().unwrap_or_default();
        let cwd = entry.cwd.clone();
        let timeout_ms = entry.timeout_ms;
        let host = host.clone();
        let state_dir = engine_state_dir(config, id);
        let openclaw = openclaw_config(config);
        let model = default_model(config);
        let host_callbacks = host_callbacks.clone();
        let config_errors = config_errors.clone();
        let result = registry.register(id, CONFIG_OWNER, move |ctx| {
            let mut cfg = ProcessEngineConfig::new(id_owned.clone(), command.clone(), host.clone());
            cfg.env = env.clone();
            cfg.cwd = cwd.clone();
            if let Some(ms) = timeout_ms {
                cfg = cfg.with_call_timeout(Duration::from_millis(ms));
            }
            cfg.config = ctx.config;
            cfg.agent_dir = ctx.agent_dir;
            cfg.workspace_dir = ctx.workspace_dir;
            cfg.state_dir = Some(state_dir.clone());
            cfg.openclaw_config = Some(openclaw.clone());
            cfg.model = model.clone();
            let host_callbacks = host_callbacks.clone();
            let config_errors = config_errors.clone();
            let engine_id = id_owned.clone();
            async move {
                if let Some(dir) = &cfg.state_dir {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        format!("cannot create the engine state dir {}: {e}", dir.display())
                    })?;
                }
                match ProcessEngine::spawn(cfg).await {
                    Ok(engine) => {
                        if let Some(callbacks) = host_callbacks {
                            engine.set_host_callbacks(callbacks);
                        }
                        Ok(Arc::new(engine) as Arc<dyn ContextEngine>)
                    }
                    Err(error) => {
                        if let EngineError::InvalidConfig {
                            message, issues, ..
                        } = &error
                        {
                            config_errors.push(EngineConfigError {
                                engine_id,
                                message: message.clone(),
                                issues: issues.clone(),
                            });
                        }
                        Err(load_failure(error))
                    }
                }
            }
        });
        if let Err(e) = result {
            tracing::error!(engine = %id, error = %e, "cannot register a configured engine");
        }
    }
    registry
}

/// The quarantine reason of an engine process that did not come up: an `initialize` the
/// process answered with an error (a configuration error included, which is also reported as
/// such) means its plugin failed to load or register (the host reports why); anything else is
/// the process itself.
fn load_failure(error: EngineError) -> String {
    match error {
        EngineError::Failed { message, .. } => format!(
            "the engine process could not load or register the plugin (initialize failed): {message}"
        ),
        EngineError::InvalidConfig { message, .. } => format!(
            "the engine process could not load or register the plugin (initialize failed): {message} (JSON-RPC error {})",
            error_code::CONFIG_ERROR
        ),
        other => format!("the engine process did not start: {other}"),
    }
}

/// The directories handed to engine factories.
pub fn engine_dirs(config: &Config) -> EngineDirs {
    EngineDirs {
        agent_dir: Some(config.state_dir().join("agents").join(&config.agent.id)),
        workspace_dir: std::env::current_dir().ok(),
    }
}

fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// How to run the configured Codex app-server: the command (`codex` found in `node_modules`
/// when not on `PATH`), `CODEX_HOME` (default: beside the state store), the `-c` overrides and
/// the turn limits.
pub fn codex_backend_config(
    config: &Config,
    codex: &crate::config::CodexBackendConfig,
) -> Result<AppServerConfig, AppError> {
    if let Some(url) = &codex.url {
        return Err(AppError::BackendUrlNeedsServe {
            url: url.to_string(),
        });
    }
    let command = codex_command(codex);
    if command.is_empty() {
        return Err(AppError::EmptyCodexCommand);
    }
    Ok(app_server_config(config, codex, command))
}

/// `backend.command`, with a bare `codex` that is not on `PATH` replaced by the one `npm ci`
/// installed in node_modules, when there is one.
pub fn codex_command(codex: &crate::config::CodexBackendConfig) -> Vec<String> {
    let mut command = codex.command.clone();
    if command.first().is_some_and(|p| p == "codex") && !on_path("codex") {
        if let Some(binary) = locate_codex_binary() {
            command[0] = binary.display().to_string();
        }
    }
    command
}

/// The Codex binary when no configuration names one (`ctxbridge bench`): `CODEX_BIN` when it
/// names a file, else `codex` on `PATH`, else the npm install in `node_modules` (as `turn`,
/// `doctor` and `serve` find `codex`).
pub fn find_codex_binary() -> Option<PathBuf> {
    let named = std::env::var_os("CODEX_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    named
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("codex"))
                    .find(|p| p.is_file())
            })
        })
        .or_else(locate_codex_binary)
}

/// Whether the Codex program of `backend.command` can be started: an existing path, a name on
/// `PATH`, or `codex` installed from npm.
pub fn codex_program_found(program: &str) -> bool {
    on_path(program) || (program == "codex" && locate_codex_binary().is_some())
}

/// Builds the configured backend. The mock keeps its threads in `store`.
pub fn backend(
    config: &Config,
    store: Arc<dyn StateStore>,
) -> Result<Arc<dyn ThreadedBackend>, AppError> {
    match &config.backend {
        BackendConfig::Mock => Ok(Arc::new(MockBackend::with_store(store))),
        BackendConfig::Codex(codex) => Ok(Arc::new(CodexBackend::new(codex_backend_config(
            config, codex,
        )?))),
        BackendConfig::Responses(r) => ResponsesBackend::new(responses_backend_config(r))
            .map(|b| Arc::new(b) as Arc<dyn ThreadedBackend>)
            .map_err(|source| AppError::Responses { source }),
    }
}

/// The harness settings a configuration implies.
pub fn harness_config(config: &Config, resolved: &ResolvedEngine) -> HarnessConfig {
    HarnessConfig {
        agent_id: config.agent.id.clone(),
        token_budget: config.agent.token_budget,
        base_instructions: config.agent.base_instructions.clone(),
        developer_instructions: config.agent.developer_instructions.clone(),
        model: config.agent.model.clone(),
        drift_policy: drift_policy(config.projection.developer_instruction_drift),
        context_delivery: config
            .projection
            .codex_context_delivery
            .map(context_delivery),
        selection_source: resolved.source(),
        cwd: std::env::current_dir()
            .ok()
            .map(|p| p.display().to_string()),
        session_dir: Some(absolute(config.state_dir().join("sessions"))),
        lease_ttl: config
            .store
            .lease_ttl_ms
            .map_or(crate::harness::DEFAULT_LEASE_TTL, Duration::from_millis),
        lease_wait: config
            .store
            .lease_wait_ms
            .map_or(crate::harness::DEFAULT_LEASE_WAIT, Duration::from_millis),
        lease_linger: config
            .store
            .lease_linger_ms
            .map_or(crate::harness::DEFAULT_LEASE_LINGER, Duration::from_millis),
        require_durable_turns: config.plugins.require_durable_turns == Some(true),
        ..HarnessConfig::default()
    }
}

/// The projection's drift policy for the configured `projection.developerInstructionDrift`.
pub fn drift_policy(drift: DeveloperInstructionDrift) -> DriftPolicy {
    match drift {
        DeveloperInstructionDrift::Inject => DriftPolicy::Inject,
        DeveloperInstructionDrift::Rotate => DriftPolicy::Rotate,
    }
}

/// The delivery the configured `projection.codexContextDelivery` names.
pub fn context_delivery(delivery: CodexContextDelivery) -> ContextDelivery {
    match delivery {
        CodexContextDelivery::TurnInput => ContextDelivery::TurnInput,
        CodexContextDelivery::AdditionalContext => ContextDelivery::AdditionalContext,
    }
}

/// A running application: the harness and what it was built from.
pub struct App {
    pub harness: Harness,
    pub resolved: ResolvedEngine,
    /// The background retention sweep of the store (`store.retention`), when [`open`] started
    /// one; it stops when the app is dropped.
    pub sweeper: Option<RetentionSweeper>,
    /// Configuration errors engines reported while being created (the selected engine is
    /// then quarantined; commands report these as configuration errors).
    pub config_errors: Vec<EngineConfigError>,
}

impl App {
    /// The quarantine of the selected engine when `legacy` answers in its place; `None` when
    /// it runs, or when legacy is what the configuration asks for (selected, or the selected
    /// engine disabled).
    pub fn degradation(&self) -> Option<crate::quarantine::QuarantineRecord> {
        let selected = self.resolved.selected_id();
        if selected == crate::engines::LEGACY_ENGINE_ID || self.resolved.slot.disabled_id.is_some()
        {
            return None;
        }
        self.resolved.engine.quarantine_book().get(selected)
    }

    /// Where the state is kept, as errors name it (a file path, or a redacted URL).
    pub fn store_location(&self) -> String {
        self.harness.store().location()
    }

    /// The configuration error of the selected engine, if it reported one.
    pub fn selected_config_error(&self) -> Option<&EngineConfigError> {
        self.config_errors
            .iter()
            .find(|e| e.engine_id == self.resolved.selected_id())
    }
}

/// Opens the store, builds the backend, resolves the selected engine and returns the harness.
pub async fn open(config: &Config) -> Result<App, AppError> {
    let store = open_store(&store_target(config)?)?;
    let mut app = open_with_store(config, store.clone()).await?;
    // The sweep fires `session_end` on the engine for the sessions it removes.
    app.sweeper = retention_sweeper_with(config, store, Some(app.harness.sweep_listener()));
    Ok(app)
}

/// Starts the background retention sweep `store.retention` asks for (none when it is off):
/// idle sessions' bindings, transcripts, bootstrap marks and the mock backend's threads go; an
/// undelivered commit never does. Call inside a tokio runtime.
pub fn retention_sweeper(config: &Config, store: Arc<dyn StateStore>) -> Option<RetentionSweeper> {
    retention_sweeper_with(config, store, None)
}

/// As [`retention_sweeper`], telling `listener` what each sweep removed.
pub fn retention_sweeper_with(
    config: &Config,
    store: Arc<dyn StateStore>,
    listener: Option<SweepListener>,
) -> Option<RetentionSweeper> {
    let retention = config.store.retention.duration()?;
    Some(RetentionSweeper::spawn_with_listener(
        store,
        retention,
        SWEEP_INTERVAL,
        vec![crate::backend::mock::THREADS_NAMESPACE.to_string()],
        listener,
    ))
}

/// As [`open`] with a given store (tests, the demo's in-memory store).
pub async fn open_with_store(config: &Config, store: Arc<dyn StateStore>) -> Result<App, AppError> {
    let backend = backend(config, store.clone())?;
    Ok(open_with_backend(config, store, backend).await)
}

/// As [`open_with_store`] with a given backend (the demo keeps a handle on its mock).
pub async fn open_with_backend(
    config: &Config,
    store: Arc<dyn StateStore>,
    backend: Arc<dyn ThreadedBackend>,
) -> App {
    let config_errors = EngineConfigErrors::default();
    let host_callbacks: Arc<dyn RuntimeCallbacks> =
        Arc::new(HostLlmCallbacks::new(backend.clone()));
    let registry = registry_with(config, Some(host_callbacks), &config_errors);
    let resolved = registry
        .resolve_selected(config, &engine_dirs(config))
        .await;
    let harness = Harness::new(
        harness_config(config, &resolved),
        resolved.engine.clone(),
        backend,
        store,
    );
    harness.gateway_start().await;
    App {
        harness,
        resolved,
        sweeper: None,
        config_errors: config_errors.all(),
    }
}

/// The Responses backend's settings from the config file's `backend` section: the thread kind,
/// and the stream limits where the file sets them (the backend's defaults otherwise).
pub fn responses_backend_config(r: &config::ResponsesBackendConfig) -> ResponsesBackendConfig {
    let mut out = ResponsesBackendConfig::new(r.base_url.clone(), r.model.clone());
    out.api_key_env = r.api_key_env.clone();
    out.threads = match r.threads {
        ResponsesThreadKind::Conversation => ResponsesThreads::Conversation,
        ResponsesThreadKind::Chain => ResponsesThreads::Chain,
    };
    if let Some(ms) = r.idle_timeout_ms {
        out.idle_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = r.turn_timeout_ms {
        out.turn_timeout = Duration::from_millis(ms);
    }
    if let Some(bytes) = r.max_reply_bytes {
        out.max_reply_bytes = bytes;
    }
    if let Some(bytes) = r.max_event_bytes {
        out.max_event_bytes = bytes;
    }
    out
}

/// Where the configured state lives: the SQLite file at `store.path`, or the PostgreSQL
/// database at `store.url` (in `store.schema` when set).
pub fn store_target(config: &Config) -> Result<StoreTarget, AppError> {
    match config.store.kind {
        StoreKind::Sqlite => match config.store.shards {
            None | Some(1) => Ok(StoreTarget::Sqlite(config.store.path.clone())),
            Some(shards) if (2..=MAX_SHARDS).contains(&shards) => Ok(StoreTarget::ShardedSqlite {
                path: config.store.path.clone(),
                shards,
            }),
            Some(shards) => Err(AppError::BadShards { shards }),
        },
        StoreKind::Postgres if config.store.shards.is_some() => Err(AppError::ShardsOnPostgres),
        StoreKind::Postgres => {
            let url = config.store.url.clone().ok_or(AppError::MissingStoreUrl)?;
            let mut options = PostgresOptions::default();
            if let Some(schema) = &config.store.schema {
                options = options.with_schema(schema.clone());
            }
            Ok(StoreTarget::Postgres { url, options })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Outside `serve`, `backend.url` is refused with an error naming it (the Codex backend of
    /// the other commands starts its own child).
    #[test]
    fn backend_url_is_serve_only() {
        let config = Config::parse(
            "{ backend: { kind: 'codex', url: 'ws://127.0.0.1:4501' } }",
            "c.json5",
        )
        .unwrap();
        let BackendConfig::Codex(codex) = &config.backend else {
            panic!("not codex")
        };
        let error = codex_backend_config(&config, codex).unwrap_err();
        assert!(matches!(error, AppError::BackendUrlNeedsServe { .. }));
        let text = error.to_string();
        assert!(
            text.contains("backend.url (ws://127.0.0.1:4501/)")
                && text.contains("`ctxbridge serve` only"),
            "{text}"
        );
    }

    /// Each configured `developerInstructionDrift` maps to the projection policy of the same
    /// name (the two enums serialize alike).
    #[test]
    fn drift_setting_maps_to_the_policy_of_the_same_name() {
        for drift in [
            DeveloperInstructionDrift::Inject,
            DeveloperInstructionDrift::Rotate,
        ] {
            assert_eq!(
                serde_json::to_value(drift).unwrap(),
                serde_json::to_value(drift_policy(drift)).unwrap()
            );
        }
        assert_eq!(
            drift_policy(DeveloperInstructionDrift::Rotate),
            DriftPolicy::Rotate
        );
        assert_eq!(
            drift_policy(DeveloperInstructionDrift::default()),
            DriftPolicy::default()
        );
    }

    /// The OpenClaw-shaped config carries the slot and each entry's `enabled`/`config`, and
    /// none of ctxbridge's own entry fields (command, env, cwd, timeoutMs).
    #[test]
    fn openclaw_config_has_only_openclaw_fields() {
        let config = Config::parse(
            r#"{ plugins: { slots: { contextEngine: "s" }, entries: { s: {
                enabled: true, command: ["node", "h.mjs"], env: { SECRET: "x" },
                timeoutMs: 5, config: { keepRecent: 2 } } } } }"#,
            "c.json5",
        )
        .unwrap();
        assert_eq!(
            openclaw_config(&config),
            json!({"plugins": {"slots": {"contextEngine": "s"},
                   "entries": {"s": {"enabled": true, "config": {"keepRecent": 2}}}}})
        );
    }

    /// A configuration error names the entry and each key with its problem.
    #[test]
    fn engine_config_error_names_the_keys() {
        let error = EngineConfigError {
            engine_id: "s".into(),
            message: "bad".into(),
            issues: vec![ConfigIssue {
                key: "keepRecent".into(),
                message: "must be >= 1".into(),
            }],
        };
        assert_eq!(
            error.to_string(),
            "invalid configuration of context engine \"s\" (plugins.entries.s.config): plugins.entries.s.config.keepRecent: must be >= 1"
        );
    }

    /// Each configured `codexContextDelivery` maps to the delivery of the same name, and an
    /// unset one leaves the choice to the connected backend.
    #[test]
    fn context_delivery_setting_maps_to_the_delivery_of_the_same_name() {
        for delivery in [
            CodexContextDelivery::TurnInput,
            CodexContextDelivery::AdditionalContext,
        ] {
            assert_eq!(
                serde_json::to_value(delivery).unwrap(),
                serde_json::to_value(context_delivery(delivery)).unwrap()
            );
        }
        let config = Config::parse(
            "{projection: {codexContextDelivery: 'additional-context'}}",
            "c",
        )
        .unwrap();
        assert_eq!(
            config
                .projection
                .codex_context_delivery
                .map(context_delivery),
            Some(ContextDelivery::AdditionalContext)
        );
        assert_eq!(Config::default().projection.codex_context_delivery, None);
    }

    /// The host identity engines see is named after the configured backend's host kind.
    #[test]
    fn host_identity_names_the_backend_kind() {
        let mut config = Config::default();
        let mock = host_identity(&config);
        assert_eq!(mock.id, "ctxbridge-mock");
        assert_eq!(mock.label, "the mock backend");
        config.backend = BackendConfig::Codex(crate::config::CodexBackendConfig::default());
        assert_eq!(host_identity(&config).id, "ctxbridge-codex");
    }
}
