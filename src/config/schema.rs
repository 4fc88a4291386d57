//! The configuration's schema (docs/config.md#configuration-reference): the typed sections, their defaults and the engine slot
//! they select. Config owns these types; the harness, the projection and the backends are built
//! from them by the application wiring.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::SelectionSource;
use crate::contract::LEGACY_ENGINE_ID;
use crate::host::capabilities::HostKind;

/// `agent.id` when none is configured.
pub const DEFAULT_AGENT_ID: &str = "main";
/// `store.path` when none is configured.
pub const DEFAULT_STORE_PATH: &str = ".ctxbridge/state.db";

/// The whole configuration. `Config::default()` is what an empty (or absent default) file means.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub plugins: PluginsConfig,
    pub agent: AgentConfig,
    pub backend: BackendConfig,
    pub store: StoreConfig,
    pub projection: ProjectionConfig,
    pub serve: ServeConfig,
}

/// The OpenClaw `plugins` section. ctxbridge acts on `slots.contextEngine` and `entries`; the
/// other OpenClaw keys (`enabled`, `allow`, `deny`, `load`, `installs`, `slots.memory`) are
/// accepted so an OpenClaw section can be pasted unchanged, and otherwise ignored.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginsConfig {
    pub slots: SlotsConfig,
    pub entries: BTreeMap<String, PluginEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub installs: Option<Value>,
    /// ctxbridge's own key: a selected engine that is quarantined fails the command (`turn`
    /// exits 1 naming why) instead of `legacy` answering in its place. Off by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// ctxbridge's own key: OpenClaw 2026.9's rule for a turn whose transcript is recorded
    /// (every ctxbridge turn): an engine that does not declare durable turns
    /// (`transcriptSemantics` and `commitTurn`) is served by `legacy` for that turn, and tried
    /// again the next. Off by default: such an engine serves with `afterTurn`, as on an
    /// OpenClaw run without a transcript recorder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_durable_turns: Option<bool>,
}

/// `plugins.slots`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SlotsConfig {
    /// The selected context engine id; missing, empty or `"legacy"` selects legacy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_engine: Option<String>,
    /// OpenClaw's memory slot (accepted, not used by ctxbridge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// `plugins.entries.<id>`: whether the engine is enabled, and how to run it out of process.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginEntry {
    /// `false` disables the engine (legacy runs instead; not a failure). Default `true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The command of an out-of-process engine (docs/engine-protocol.md#the-engine-process-protocol): program and arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Extra environment for the engine process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory of the engine process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Per-call timeout for this engine's lifecycle calls, in milliseconds (all methods).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The engine's own configuration, handed to its factory unchanged (free-form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
}

impl PluginEntry {
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// `agent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentConfig {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_instructions: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            id: DEFAULT_AGENT_ID.to_string(),
            token_budget: None,
            developer_instructions: None,
            base_instructions: None,
            model: None,
        }
    }
}

/// `backend`, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendConfig {
    /// The embedded in-process mock backend (the default).
    #[default]
    Mock,
    /// The Codex app-server over stdio.
    Codex(CodexBackendConfig),
    /// The OpenAI Responses API.
    Responses(ResponsesBackendConfig),
}

impl BackendConfig {
    /// The host kind whose capabilities this backend offers (docs/architecture.md#host-capabilities-and-requirements).
    pub fn host_kind(&self) -> HostKind {
        match self {
            BackendConfig::Mock => HostKind::Mock,
            BackendConfig::Codex(_) => HostKind::Codex,
            BackendConfig::Responses(_) => HostKind::Responses,
        }
    }
}

/// `backend: {kind: "mock"}` has no other keys.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MockBackendConfig {}

/// `backend: {kind: "codex", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CodexBackendConfig {
    /// Program and arguments; default `["codex", "app-server"]`.
    pub command: Vec<String>,
    /// `CODEX_HOME` for the child; unset, Codex's own default (`$CODEX_HOME`, else `~/.codex`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codex_home: Option<PathBuf>,
    /// Dotted Codex config keys, each passed as `-c key=<TOML value>`.
    pub config: BTreeMap<String, CodexConfigValue>,
    /// The longest wait for the next event of a turn, in milliseconds, before the turn is
    /// interrupted and fails (a stalled model). Default 300000 (5 minutes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// The longest a whole turn may run, in milliseconds. Default 1800000 (30 minutes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_timeout_ms: Option<u64>,
    /// The most reply text (UTF-8 bytes) a turn may produce. Default 16777216 (16 MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_reply_bytes: Option<u64>,
    /// An already running app-server (`codex app-server --listen ws://…|unix://…`) to use
    /// instead of spawning `command` (`serve` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<BackendUrl>,
}

/// `backend.url`: where an already running Codex app-server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendUrl {
    /// `ws://HOST:PORT[/PATH]`: a WebSocket, one JSON-RPC message per text frame.
    Ws(String),
    /// `unix://PATH`: a unix socket (Codex speaks the same WebSocket protocol over it).
    Unix(PathBuf),
}

impl BackendUrl {
    /// Parses and checks a `backend.url` value; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<BackendUrl, String> {
        if let Some(path) = text.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(format!(
                    "`{text}`: a unix:// URL needs the socket's path (unix:///run/codex.sock)"
                ));
            }
            return Ok(BackendUrl::Unix(PathBuf::from(path)));
        }
        let url = url::Url::parse(text).map_err(|e| {
            format!("`{text}` is not a URL ({e}); expected ws://HOST:PORT or unix://PATH")
        })?;
        match url.scheme() {
            "ws" => {}
            "wss" => {
                return Err(format!(
                    "`{text}`: wss:// is not supported (the Codex app-server listens on plain ws:// on loopback; reach a remote one through an SSH tunnel)"
                ))
            }
            other => {
                return Err(format!(
                    "`{text}`: unsupported scheme `{other}`; expected ws://HOST:PORT or unix://PATH"
                ))
            }
        }
        if url.host_str().map_or(true, str::is_empty) {
            return Err(format!("`{text}`: the URL names no host"));
        }
        if url.port().is_none() {
            return Err(format!(
                "`{text}`: the URL names no port (the app-server prints it: `listening on: ws://127.0.0.1:PORT`)"
            ));
        }
        Ok(BackendUrl::Ws(url.to_string()))
    }
}

impl fmt::Display for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendUrl::Ws(url) => f.write_str(url),
            BackendUrl::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl Serialize for BackendUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BackendUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        BackendUrl::parse(&text).map_err(de::Error::custom)
    }
}

impl Default for CodexBackendConfig {
    fn default() -> Self {
        CodexBackendConfig {
            command: vec!["codex".to_string(), "app-server".to_string()],
            codex_home: None,
            config: BTreeMap::new(),
            idle_timeout_ms: None,
            turn_timeout_ms: None,
            max_reply_bytes: None,
            url: None,
        }
    }
}

/// A value of `backend.config` (Codex): a string, a number or a boolean.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CodexConfigValue {
    String(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl<'de> Deserialize<'de> for CodexConfigValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = CodexConfigValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(CodexConfigValue::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(CodexConfigValue::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(CodexConfigValue::Integer)
                    .map_err(|_| E::custom(format!("integer {v} is too large for TOML")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(CodexConfigValue::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CodexConfigValue::String(v.to_string()))
            }
        }
        d.deserialize_any(ScalarVisitor)
    }
}

/// `backend: {kind: "responses", baseUrl, model, apiKeyEnv?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResponsesBackendConfig {
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// What a backend thread is (default: a Conversations API object).
    #[serde(default)]
    pub threads: ResponsesThreadKind,
    /// The longest wait for the next stream event, in ms (default 120 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// The longest one response may take in all, in ms (default 1 200 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_timeout_ms: Option<u64>,
    /// The longest reply text, in bytes (default 8 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reply_bytes: Option<usize>,
    /// The longest event-stream line or event, in bytes (default 16 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_bytes: Option<usize>,
}

/// `backend.threads` for `kind: "responses"`: what a backend thread is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponsesThreadKind {
    /// A Conversations API object: a stable id, items kept without the 30-day limit.
    #[default]
    Conversation,
    /// A `previous_response_id` chain; the thread id is the chain's head and changes every turn.
    Chain,
}

/// `store`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Which store keeps the state: the embedded SQLite file (default) or PostgreSQL.
    pub kind: StoreKind,
    /// The SQLite state database. A relative path in a configuration file is relative to that
    /// file's directory; the default (no `store.path`) is relative to the working directory.
    /// Must not be empty.
    pub path: PathBuf,
    /// The PostgreSQL connection URL (`postgres://user:pass@host:5432/db`), for `kind: "postgres"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The PostgreSQL schema holding ctxbridge's tables (created if missing; default: the
    /// server's search path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// How long a session lease lives without being renewed, in milliseconds (default 30 000;
    /// a running turn renews it every third of this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<u64>,
    /// How long a turn waits for a session another process holds, in milliseconds (default
    /// 30 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_wait_ms: Option<u64>,
    /// How long a session's lease is kept after its turn, in milliseconds (default 2 000): the
    /// session's next turn in this process then takes no lease write, and another process
    /// wanting the session waits at most this long. 0 releases the lease with every turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_linger_ms: Option<u64>,
    /// SQLite only: how many database files the state is split over by session (default 1; 2
    /// to 64). Each file has a writer of its own, so turns of different sessions write in
    /// parallel — set it to the number of cores when one writer limits throughput. Shard 0 is
    /// `store.path`, shard `i` sits beside it as `<stem>.shard<i>.<ext>`. Fixed when the store
    /// is created: opening it with another count is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    /// How long a session may stay idle before a background sweep removes its binding,
    /// transcript, bootstrap marks and mock threads (never an undelivered commit): a duration
    /// such as `"30d"`, `"12h"`, `"90m"`, `"45s"` or `"500ms"`; `"off"` or `"0"` keeps
    /// everything. Default `"30d"`.
    pub retention: Retention,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Sqlite,
            path: PathBuf::from(DEFAULT_STORE_PATH),
            url: None,
            schema: None,
            lease_ttl_ms: None,
            lease_wait_ms: None,
            lease_linger_ms: None,
            shards: None,
            retention: Retention::default(),
        }
    }
}

/// `store.retention`: how long idle session state is kept (`None`: forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Retention(Option<std::time::Duration>);

/// The default `store.retention`: 30 days.
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

impl Default for Retention {
    fn default() -> Self {
        Retention(Some(DEFAULT_RETENTION))
    }
}

/// A `store.retention` value that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a duration (a number with a unit ms, s, m, h or d, like \"30d\"; or \"off\")"
)]
pub struct RetentionError {
    /// The value as written.
    pub value: String,
}

impl Retention {
    /// Keeps everything.
    pub const OFF: Retention = Retention(None);

    /// A retention of `duration` (zero keeps everything).
    pub fn new(duration: std::time::Duration) -> Retention {
        Retention(Some(duration).filter(|d| !d.is_zero()))
    }

    /// How long idle state is kept; `None` when sweeping is off.
    pub fn duration(&self) -> Option<std::time::Duration> {
        self.0
    }

    /// Parses `"30d"`, `"12h"`, `"90m"`, `"45s"`, `"500ms"`, `"off"` or `"0"`.
    pub fn parse(text: &str) -> Result<Retention, RetentionError> {
        let err = || RetentionError {
            value: text.to_string(),
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("off") || trimmed == "0" {
            return Ok(Retention::OFF);
        }
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(err)?;
        let (number, unit) = trimmed.split_at(split);
        let n: u64 = number.parse().map_err(|_| err())?;
        let ms_per_unit: u64 = match unit.trim() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(err()),
        };
        let ms = n.checked_mul(ms_per_unit).ok_or_else(err)?;
        Ok(Retention::new(std::time::Duration::from_millis(ms)))
    }
}

impl TryFrom<String> for Retention {
    type Error = RetentionError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Retention::parse(&text)
    }
}

impl From<Retention> for String {
    fn from(retention: Retention) -> String {
        match retention.0 {
            None => "off".to_string(),
            Some(d) => {
                let ms = d.as_millis();
                [
                    (86_400_000, "d"),
                    (3_600_000, "h"),
                    (60_000, "m"),
                    (1_000, "s"),
                ]
                .iter()
                .find(|(unit, _)| ms % unit == 0)
                .map_or_else(
                    || format!("{ms}ms"),
                    |(unit, name)| format!("{}{name}", ms / unit),
                )
            }
        }
    }
}

/// `store.kind`: which store keeps bindings, transcripts, the outbox and leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The embedded SQLite file at `store.path` (one machine).
    #[default]
    Sqlite,
    /// A PostgreSQL database at `store.url`, shared by a fleet of bridges.
    Postgres,
}

/// `projection`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProjectionConfig {
    pub developer_instruction_drift: DeveloperInstructionDrift,
    /// Where a projecting turn on the Codex backend puts its rendered context; unset: the
    /// additional context when the connected Codex keeps it across compaction (0.171.0 and
    /// later), else the turn input. Other backends always use the turn input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codex_context_delivery: Option<CodexContextDelivery>,
}

/// `projection.codexContextDelivery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodexContextDelivery {
    /// The framed context before the prompt in the turn input (docs/architecture.md#rendering).
    TurnInput,
    /// The framed context as one `turn/start.additionalContext` entry (a developer item before
    /// the user message); the turn input is the bare prompt.
    AdditionalContext,
}

/// `serve` (docs/serve.md#the-serve-command).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Which client threads run the harness: absent means `all` when an engine other than
    /// `legacy` is selected, else `none` ([`ServeConfig::engine_threads_for`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_threads: Option<EngineThreads>,
    /// The Responses front (`serve --front responses`).
    pub responses: ResponsesFrontConfig,
}

/// `serve.responses` (docs/serve.md#the-responses-front).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ResponsesFrontConfig {
    /// How long a turn whose model called the client's functions waits for the response
    /// that brings their outputs before it is cancelled (nothing of it kept).
    pub tool_output_timeout_secs: u64,
    /// The client's `Authorization` goes on to the upstream, which checks it (instead of the
    /// front checking a capability token and sending `backend.apiKeyEnv`'s key). With an
    /// engine, each key's responses are its own, and `backend.threads` must be `"chain"`.
    pub pass_through_auth: bool,
}

impl Default for ResponsesFrontConfig {
    fn default() -> Self {
        ResponsesFrontConfig {
            tool_output_timeout_secs: 600,
            pass_through_auth: false,
        }
    }
}

/// `serve.engineThreads`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineThreads {
    /// Every non-ephemeral client thread is a session served by the harness.
    All,
    /// Sessions pass through unchanged (only honoured with `legacy` selected, docs/serve.md#the-serve-command).
    None,
}

impl ServeConfig {
    /// Whether sessions run the harness when `engine_id` is selected: always with an engine
    /// other than `legacy`; with `legacy`, when `engineThreads` is `all`.
    pub fn engine_threads_for(&self, engine_id: &str) -> bool {
        engine_id != LEGACY_ENGINE_ID || self.engine_threads == Some(EngineThreads::All)
    }
}

/// How drifted developer instructions reach a thread that already has some (docs/architecture.md#developer-instruction-delivery):
/// `inject` (a developer message through `thread/inject_items`) or `rotate` (a new thread).
/// The harness reads it as the projection's drift policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeveloperInstructionDrift {
    /// Deliver the new instructions as a `developer` message (`thread/inject_items`).
    #[default]
    Inject,
    /// Start a new thread with the new instructions.
    Rotate,
}

/// Where the selected engine id came from (docs/architecture.md#selection-fault-isolation-and-quarantine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSlot {
    /// The id that runs when nothing fails: the configured id, or `legacy`.
    pub engine_id: String,
    /// `true` when `plugins.slots.contextEngine` names an engine (even `"legacy"`).
    pub configured: bool,
    /// Set when the configured engine is disabled by `plugins.entries.<id>.enabled: false`:
    /// the id that was configured (legacy runs instead).
    pub disabled_id: Option<String>,
}

impl EngineSlot {
    /// `configured` when the slot names an engine, else `default` (for runtimeSettings, doctor).
    pub fn source(&self) -> SelectionSource {
        if self.configured {
            SelectionSource::Configured
        } else {
            SelectionSource::Default
        }
    }
}

impl Config {
    /// The directory of the state store (engines get `<dir>/agents/<agentId>` as agent directory).
    pub fn state_dir(&self) -> PathBuf {
        self.store
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }

    /// The engine slot (docs/architecture.md#selection-fault-isolation-and-quarantine): missing, empty or `"legacy"` selects legacy; an engine
    /// disabled in `plugins.entries` yields legacy too (not a failure).
    pub fn engine_slot(&self) -> EngineSlot {
        let configured_id = self
            .plugins
            .slots
            .context_engine
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty());
        match configured_id {
            None => EngineSlot {
                engine_id: LEGACY_ENGINE_ID.to_string(),
                configured: false,
                disabled_id: None,
            },
            Some(id) if id != LEGACY_ENGINE_ID && !self.plugin_entry_enabled(id) => EngineSlot {
                engine_id: LEGACY_ENGINE_ID.to_string(),
                configured: true,
                disabled_id: Some(id.to_string()),
            },
            Some(id) => EngineSlot {
                engine_id: id.to_string(),
                configured: true,
                disabled_id: None,
            },
        }
    }

    /// `plugins.entries.<id>.enabled`, default `true` (also when there is no entry).
    pub fn plugin_entry_enabled(&self, id: &str) -> bool {
        self.plugins
            .entries
            .get(id)
            .map_or(true, PluginEntry::is_enabled)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// `store.retention` parses every unit and "off"/"0", refuses other text, and prints back
    /// in the largest whole unit.
    #[test]
    fn retention_parses_and_prints() {
        let ms = |text: &str| {
            Retention::parse(text)
                .unwrap()
                .duration()
                .map(|d| d.as_millis())
        };
        assert_eq!(ms("30d"), Some(30 * 86_400_000));
        assert_eq!(ms("12h"), Some(12 * 3_600_000));
        assert_eq!(ms("90m"), Some(90 * 60_000));
        assert_eq!(ms("45s"), Some(45_000));
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("off"), None);
        assert_eq!(ms("0"), None);
        assert_eq!(ms("0d"), None);
        for bad in ["", "d", "30", "30 days", "-1d", "1.5h", "soon"] {
            assert!(Retention::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(Retention::default().duration(), Some(DEFAULT_RETENTION));
        assert_eq!(String::from(Retention::default()), "30d");
        assert_eq!(String::from(Retention::parse("90m").unwrap()), "90m");
        assert_eq!(String::from(Retention::parse("1500ms").unwrap()), "1500ms");
        assert_eq!(String::from(Retention::OFF), "off");
    }

    /// Slot resolution: missing / empty / "legacy" / configured / disabled.
    #[test]
    fn engine_slot_rules() {
        let slot = |src: &str| Config::parse(src, "c").unwrap().engine_slot();
        assert_eq!(
            slot("{}"),
            EngineSlot {
                engine_id: "legacy".into(),
                configured: false,
                disabled_id: None
            }
        );
        assert!(!slot("{plugins: {slots: {contextEngine: ''}}}").configured);
        assert_eq!(
            slot("{plugins: {slots: {contextEngine: '  '}}}").engine_id,
            "legacy"
        );
        let s = slot("{plugins: {slots: {contextEngine: 'legacy'}}}");
        assert_eq!((s.engine_id.as_str(), s.configured), ("legacy", true));
        let s = slot("{plugins: {slots: {contextEngine: 'x'}}}");
        assert_eq!((s.engine_id.as_str(), s.configured), ("x", true));
        let s = slot("{plugins: {slots: {contextEngine: 'x'}, entries: {x: {enabled: false}}}}");
        assert_eq!(
            s,
            EngineSlot {
                engine_id: "legacy".into(),
                configured: true,
                disabled_id: Some("x".into())
            }
        );
    }
}
