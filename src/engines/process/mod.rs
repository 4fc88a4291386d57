//! Engines that run as a child process, in any language, over the engine process protocol
//! (docs/engine-protocol.md#the-engine-process-protocol).
//!
//! [`ProcessEngine::spawn`] starts the command, sends `initialize` and keeps what it answered:
//! [`ContextEngine::info`] is the engine's `info`, [`ContextEngine::methods`] is exactly what it
//! declared (see [`protocol::decode_initialize`] for the rule about required members). Every
//! lifecycle call is then one JSON-RPC request with the contract's camelCase params, serialised
//! straight from the params struct it was given, so whatever the host left out (docs/architecture.md#host-added-parameters-acceptedhostparams) is
//! absent from the JSON. Calls from different sessions run concurrently; replies are matched
//! by id.
//!
//! How failures map onto [`EngineError`] (the quarantine wrapper does the rest, docs/architecture.md#selection-fault-isolation-and-quarantine):
//!
//! | what happened | error |
//! |---|---|
//! | the engine answered with a JSON-RPC error | `Failed { method }` |
//! | the result does not decode into the contract's result type | `Malformed { method }` |
//! | no answer within the per-call timeout (`$/cancelRequest` is sent) | `Timeout { method }` |
//! | the caller aborted `compact` (`$/cancelRequest` is sent) | `Cancelled { method: Compact }` |
//! | the process exited, could not start, or never answered `initialize` | `Process { method }` |
//! | a stdout line that is not a JSON-RPC message | `Process { method }` for every call in flight, and the engine is killed: once framing is broken no later line can be trusted |
//! | the host calls a member the engine did not declare | `NotImplemented { method }`, nothing is sent |
//!
//! Failures of the handshake name [`EngineMethod::Info`] (`initialize` is where `info` comes
//! from). stderr lines are forwarded to tracing (target `ctxbridge::engine_stderr`, field
//! `engine`); the last few are appended to the detail of a process failure.
//!
//! The child is reaped in every path: [`ContextEngine::dispose`] sends `dispose`, closes stdin,
//! waits up to [`ProcessEngineConfig::shutdown_grace`] and then kills; dropping the engine kills
//! it and the connection task waits for it; the child is also spawned with `kill_on_drop`.

mod connection;
pub mod protocol;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::connection::{CallRoute, Connection};
use crate::contract::{
    json_kind, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommandCallParams, CommandReply, CommitTurnParams, CommitTurnResult, CompactParams,
    CompactResult, ContextEngine, EngineError, EngineInfo, EngineMethod, EngineTool, HookCall,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, MethodSet, OnSubagentEndedParams, PrepareSubagentSpawnParams,
    PrepareSubagentSpawnResult, RollbackSubagentSpawnParams, RuntimeContext, ToolCallParams,
    ToolCallResult,
};
use crate::host::capabilities::Capability;

/// Default per-call timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default timeout of `compact` (it may summarise through a model).
pub const DEFAULT_COMPACT_TIMEOUT: Duration = Duration::from_secs(180);
/// Default bound on the `initialize` handshake.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a disposed engine gets to exit after stdin closes, before it is killed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The child's environment variable naming its state dir (OpenClaw's name for it).
pub const STATE_DIR_ENV: &str = "OPENCLAW_STATE_DIR";

/// Who the host is, as told to the engine in `initialize.params.host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub id: String,
    pub label: String,
    pub capabilities: Vec<Capability>,
}

/// Everything needed to start one engine process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEngineConfig {
    /// The id the engine is configured under (`plugins.entries.<id>`), sent as `engineId`.
    pub engine_id: String,
    /// Program and arguments; must not be empty.
    pub command: Vec<String>,
    /// Added to the inherited environment.
    pub env: BTreeMap<String, String>,
    /// Working directory of the child (the host's when `None`).
    pub cwd: Option<PathBuf>,
    /// Per-call timeout of every lifecycle call but `compact`.
    pub call_timeout: Duration,
    /// Per-call timeout of `compact`.
    pub compact_timeout: Duration,
    /// Bound on the `initialize` handshake.
    pub init_timeout: Duration,
    /// How long a disposed engine may take to exit once stdin closes.
    pub shutdown_grace: Duration,
    /// `plugins.entries.<id>.config`, passed as `initialize.params.config`.
    pub config: Value,
    pub agent_dir: Option<PathBuf>,
    pub workspace_dir: Option<PathBuf>,
    /// The engine's own state directory, passed as `initialize.params.stateDir` and as the
    /// child's `OPENCLAW_STATE_DIR`; the caller creates it.
    pub state_dir: Option<PathBuf>,
    /// `initialize.params.openclawConfig`: `{plugins: {slots, entries}}`.
    pub openclaw_config: Option<Value>,
    /// `initialize.params.model`: the backend's default model.
    pub model: Option<String>,
    pub host: HostIdentity,
}

impl ProcessEngineConfig {
    /// A config with the default timeouts, no extra environment and `config: {}`.
    pub fn new(engine_id: impl Into<String>, command: Vec<String>, host: HostIdentity) -> Self {
        ProcessEngineConfig {
            engine_id: engine_id.into(),
            command,
            env: BTreeMap::new(),
            cwd: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            compact_timeout: DEFAULT_COMPACT_TIMEOUT,
            init_timeout: DEFAULT_INIT_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            config: Value::Object(Default::default()),
            agent_dir: None,
            workspace_dir: None,
            state_dir: None,
            openclaw_config: None,
            model: None,
            host,
        }
    }

    /// Applies a configured `timeoutMs`: every call gets `timeout`, `compact` three times
    /// as much (the default ratio, 60 s / 180 s).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self.compact_timeout = timeout.saturating_mul(3);
        self
    }
}

/// A context engine served by a child process over the engine process protocol.
pub struct ProcessEngine {
    engine_id: String,
    info: EngineInfo,
    methods: MethodSet,
    tools: Vec<EngineTool>,
    hooks: Vec<String>,
    commands: Vec<protocol::EngineCommand>,
    unoffered: Vec<String>,
    pid: Option<u32>,
    call_timeout: Duration,
    compact_timeout: Duration,
    shutdown_grace: Duration,
    connection: Connection,
}

impl std::fmt::Debug for ProcessEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessEngine")
            .field("engine_id", &self.engine_id)
            .field("pid", &self.pid)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl ProcessEngine {
    /// Starts the engine process and runs the `initialize` handshake. Every failure is an
    /// [`EngineError`] naming [`EngineMethod::Info`]: `Process` when the command cannot start,
    /// exits, writes garbage or does not answer within `init_timeout`; `Failed` when it answers
    /// `initialize` with an error; `Malformed` when the answer has the wrong shape. A child
    /// that fails the handshake is killed and reaped.
    pub async fn spawn(config: ProcessEngineConfig) -> Result<Self, EngineError> {
        let method = EngineMethod::Info;
        let process_error = |detail: String| EngineError::Process { method, detail };
        let (program, args) = config
            .command
            .split_first()
            .ok_or_else(|| process_error("the engine command is empty".into()))?;
        let mut command = tokio::process::Command::new(program);
        command.args(args).envs(&config.env);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        if let Some(state_dir) = &config.state_dir {
            command.env(STATE_DIR_ENV, state_dir);
        }
        // Piped stdio, killed when the connection lets go of it.
        let piped = ctxbridge_jsonrpc::spawn_piped(command).map_err(|e| {
            process_error(format!(
                "cannot start engine \"{}\" with {:?}: {e}",
                config.engine_id, config.command
            ))
        })?;
        let pid = piped.child.id();
        let connection = Connection::start(config.engine_id.clone(), piped);
        tracing::debug!(engine = %config.engine_id, ?pid, command = ?config.command, "engine process started");

        let params = protocol::InitializeParams {
            protocol_version: protocol::PROTOCOL_VERSION,
            host: protocol::InitializeHost {
                id: &config.host.id,
                label: &config.host.label,
                capabilities: &config.host.capabilities,
                hooks: &crate::host::capabilities::FIRED_HOOKS,
            },
            engine_id: &config.engine_id,
            config: &config.config,
            agent_dir: config
                .agent_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            workspace_dir: config
                .workspace_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            state_dir: config
                .state_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            openclaw_config: config.openclaw_config.as_ref(),
            model: config.model.as_deref(),
        };
        // On any error below `connection` is dropped, which kills and reaps the child.
        let result = connection
            .request(
                method,
                protocol::METHOD_INITIALIZE,
                &params,
                CallRoute::default(),
                config.init_timeout,
                None,
            )
            .await
            .map_err(|e| match e {
                EngineError::Timeout { after, .. } => process_error(format!(
                    "engine did not answer initialize within {}ms",
                    after.as_millis()
                )),
                other => other,
            })?;
        let outcome = protocol::decode_initialize(result)
            .map_err(|detail| EngineError::malformed(method, format!("initialize: {detail}")))?;
        if !outcome.unknown_methods.is_empty() {
            tracing::warn!(engine = %config.engine_id, unknown = ?outcome.unknown_methods, "engine declared methods this host does not know; ignoring them");
        }
        if outcome.info.id != config.engine_id {
            tracing::warn!(engine = %config.engine_id, info_id = %outcome.info.id, "engine info.id differs from the configured engine id");
        }
        Ok(ProcessEngine {
            engine_id: config.engine_id,
            info: outcome.info,
            methods: outcome.methods,
            tools: outcome.tools,
            hooks: outcome.hooks,
            commands: outcome.commands,
            unoffered: outcome.unoffered,
            pid,
            call_timeout: config.call_timeout,
            compact_timeout: config.compact_timeout,
            shutdown_grace: config.shutdown_grace,
            connection,
        })
    }

    /// The configured engine id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// Serves `runtime/llmComplete` requests made outside any lifecycle call (from a tool, a
    /// hook or a command, or naming no session) through `callbacks`.
    pub fn set_host_callbacks(&self, callbacks: Arc<dyn crate::contract::RuntimeCallbacks>) {
        self.connection.set_host_callbacks(callbacks);
    }

    /// The hooks the engine listed in `initialize` (`hooks/<name>`).
    pub fn hooks(&self) -> &[String] {
        &self.hooks
    }

    /// The child's process id (while it was running).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Why the connection to the engine ended, if it did (exit, protocol violation, disposal).
    pub fn closed_reason(&self) -> Option<String> {
        self.connection.closed_reason()
    }

    /// Ends the process without the `dispose` request: closes stdin, waits up to
    /// `shutdown_grace`, kills, and returns once the child is reaped. For engines that do not
    /// declare `dispose`; [`ContextEngine::dispose`] does this after the request.
    pub async fn shutdown(&self) -> Option<ExitStatus> {
        self.connection.shutdown(self.shutdown_grace).await
    }

    async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: EngineMethod,
        params: &P,
        route: CallRoute,
    ) -> Result<R, EngineError> {
        let value = self
            .send(method, params, route, self.call_timeout, None)
            .await?;
        decode_result(method, value)
    }

    async fn call_unit<P: Serialize>(
        &self,
        method: EngineMethod,
        params: &P,
        route: CallRoute,
    ) -> Result<(), EngineError> {
        let value = self
            .send(method, params, route, self.call_timeout, None)
            .await?;
        protocol::check_unit_result(&value).map_err(|detail| EngineError::malformed(method, detail))
    }

    async fn send<P: Serialize>(
        &self,
        method: EngineMethod,
        params: &P,
        route: CallRoute,
        timeout: Duration,
        abort: Option<&CancellationToken>,
    ) -> Result<Value, EngineError> {
        if !self.methods.contains(method) {
            return Err(EngineError::NotImplemented { method });
        }
        self.connection
            .request(method, method.as_str(), params, route, timeout, abort)
            .await
    }
}

/// Decodes a result strictly into the contract type: an object, whose mismatches name the
/// JSON path. Public only for the fuzz targets.
#[doc(hidden)]
pub fn decode_result<R: DeserializeOwned>(
    method: EngineMethod,
    value: Value,
) -> Result<R, EngineError> {
    // Every result type is a struct, which serde would also read from an array of its fields
    // in order (`["committed"]` as `{status: "committed"}`); the protocol sends objects.
    if !value.is_object() {
        return Err(EngineError::malformed(
            method,
            format!("expected an object, got {}", json_kind(&value)),
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let detail = if path == "." {
            e.inner().to_string()
        } else {
            format!("at `{path}`: {}", e.inner())
        };
        EngineError::malformed(method, detail)
    })
}

/// The callbacks of a call come from its `runtimeContext`; engine → host requests naming its
/// session are served through them.
fn call_route(session_id: &str, runtime_context: Option<&RuntimeContext>) -> CallRoute {
    CallRoute {
        session_id: Some(session_id.to_string()),
        callbacks: runtime_context.and_then(|ctx| ctx.callbacks.clone()),
    }
}

#[async_trait]
impl ContextEngine for ProcessEngine {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    /// The declared members, plus `dispose`: its host side (closing the pipes and reaping the
    /// child) is always there, and the `dispose` request is sent only if the engine declared it.
    fn methods(&self) -> MethodSet {
        let mut methods = self.methods.clone();
        methods.insert(EngineMethod::Dispose);
        methods
    }

    async fn ingest(&self, params: IngestParams) -> Result<IngestResult, EngineError> {
        let route = call_route(&params.session_id, None);
        self.call(EngineMethod::Ingest, &params, route).await
    }

    /// A result without `estimatedTokens` (OpenClaw does not require it) gets ctxbridge's
    /// estimate ([`protocol::fill_estimated_tokens`]).
    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        let method = EngineMethod::Assemble;
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        let mut value = self
            .send(method, &params, route, self.call_timeout, None)
            .await?;
        if protocol::fill_estimated_tokens(&mut value) {
            tracing::debug!(engine = %self.engine_id, "assemble gave no estimatedTokens; estimated from its messages");
        }
        decode_result(method, value)
    }

    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        let method = EngineMethod::Compact;
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        let value = self
            .send(
                method,
                &params,
                route,
                self.compact_timeout,
                params.abort.as_ref(),
            )
            .await?;
        decode_result(method, value)
    }

    async fn bootstrap(&self, params: BootstrapParams) -> Result<BootstrapResult, EngineError> {
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        self.call(EngineMethod::Bootstrap, &params, route).await
    }

    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        self.call(EngineMethod::Maintain, &params, route).await
    }

    async fn ingest_batch(
        &self,
        params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let route = call_route(&params.session_id, None);
        self.call(EngineMethod::IngestBatch, &params, route).await
    }

    async fn after_turn(&self, params: AfterTurnParams) -> Result<(), EngineError> {
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        self.call_unit(EngineMethod::AfterTurn, &params, route)
            .await
    }

    async fn commit_turn(&self, params: CommitTurnParams) -> Result<CommitTurnResult, EngineError> {
        let route = call_route(&params.session_id, params.runtime_context.as_ref());
        self.call(EngineMethod::CommitTurn, &params, route).await
    }

    async fn prepare_subagent_spawn(
        &self,
        params: PrepareSubagentSpawnParams,
    ) -> Result<PrepareSubagentSpawnResult, EngineError> {
        self.call(
            EngineMethod::PrepareSubagentSpawn,
            &params,
            CallRoute::default(),
        )
        .await
    }

    async fn rollback_subagent_spawn(
        &self,
        params: RollbackSubagentSpawnParams,
    ) -> Result<(), EngineError> {
        self.call_unit(
            EngineMethod::RollbackSubagentSpawn,
            &params,
            CallRoute::default(),
        )
        .await
    }

    async fn on_subagent_ended(&self, params: OnSubagentEndedParams) -> Result<(), EngineError> {
        self.call_unit(EngineMethod::OnSubagentEnded, &params, CallRoute::default())
            .await
    }

    fn tools(&self) -> Vec<EngineTool> {
        self.tools.clone()
    }

    fn hooks(&self) -> Vec<String> {
        self.hooks.clone()
    }

    fn unoffered(&self) -> Vec<String> {
        self.unoffered.clone()
    }

    /// Sends the request `hooks/<name>` (only for a hook the engine listed).
    async fn call_hook(&self, name: &str, call: HookCall) -> Result<Value, EngineError> {
        let method = EngineMethod::Hook;
        if !self.hooks.iter().any(|h| h == name) {
            return Err(EngineError::NotImplemented { method });
        }
        let session = call
            .ctx
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_string);
        let route = CallRoute {
            session_id: session,
            callbacks: None,
        };
        let value = self
            .connection
            .request(
                method,
                &format!("hooks/{name}"),
                &call,
                route,
                self.call_timeout,
                None,
            )
            .await?;
        match value {
            Value::Null | Value::Object(_) => Ok(value),
            other => Err(EngineError::malformed(
                method,
                format!(
                    "hooks/{name} answered {}, expected null or an object",
                    json_kind(&other)
                ),
            )),
        }
    }

    /// Sends the notification `hooks/<name>` (only for a hook the engine listed).
    async fn notify_hook(&self, name: &str, call: HookCall) -> Result<(), EngineError> {
        let method = EngineMethod::Hook;
        if !self.hooks.iter().any(|h| h == name) {
            return Err(EngineError::NotImplemented { method });
        }
        self.connection
            .notify(method, &format!("hooks/{name}"), &call)
    }

    fn commands(&self) -> Vec<protocol::EngineCommand> {
        self.commands.clone()
    }

    /// Sends `commands/call`; the result must be null (an empty reply) or an object.
    async fn call_command(&self, params: CommandCallParams) -> Result<CommandReply, EngineError> {
        let method = EngineMethod::CallCommand;
        let route = CallRoute {
            session_id: params.session_id.clone(),
            callbacks: None,
        };
        let value = self
            .send(method, &params, route, self.call_timeout, None)
            .await?;
        match value {
            Value::Null => Ok(CommandReply(Value::Object(Default::default()))),
            Value::Object(_) => Ok(CommandReply(value)),
            other => Err(EngineError::malformed(
                method,
                format!(
                    "commands/call answered {}, expected null or an object",
                    json_kind(&other)
                ),
            )),
        }
    }

    /// Sends `tools/call`. A JSON-RPC error, a timeout, a dead process or a result that is not
    /// `{content: [...], isError?}` is an `Err`; `isError: true` is the tool's answer.
    async fn call_tool(&self, params: ToolCallParams) -> Result<ToolCallResult, EngineError> {
        let route = call_route(&params.session_id, None);
        self.call(EngineMethod::CallTool, &params, route).await
    }

    /// Sends `dispose`, then closes stdin and reaps the child (killing it after
    /// `shutdown_grace`). The process is ended even when the request fails.
    async fn dispose(&self) -> Result<(), EngineError> {
        let method = EngineMethod::Dispose;
        let request = if self.methods.contains(method) {
            self.call_unit(method, &protocol::empty_params(), CallRoute::default())
                .await
        } else {
            Ok(())
        };
        let status = self.shutdown().await;
        tracing::debug!(engine = %self.engine_id, ?status, "engine process disposed");
        request
    }
}
