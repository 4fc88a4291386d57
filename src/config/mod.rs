//! The ctxbridge configuration file (SPEC §14): JSON5, default path `ctxbridge.json5`, with the
//! OpenClaw `plugins` section accepted unchanged.
//!
//! Loading happens in three steps so that every error names a file, a line, a column and a key
//! path: `json5` parses the text into a `serde_json::Value` (its syntax errors carry a location),
//! `serde_path_to_error` deserializes the typed structs from that value (its errors carry the key
//! path), and [`locate`] walks the JSON5 text to find where that key path sits in the file.
//! Unknown keys are rejected everywhere except inside the free-form maps
//! `plugins.entries.<id>.config` and `backend.config`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::host::capabilities::HostKind;
use crate::contract::SelectionSource;
use crate::engines::LEGACY_ENGINE_ID;

/// The file read when no `--config` is given. Its absence means "all defaults".
pub const DEFAULT_CONFIG_PATH: &str = "ctxbridge.json5";
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
    /// The command of an out-of-process engine (SPEC §13): program and arguments.
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
    /// The host kind whose capabilities this backend offers (SPEC §3).
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
struct MockBackendConfig {}

/// `backend: {kind: "codex", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CodexBackendConfig {
    /// Program and arguments; default `["codex", "app-server"]`.
    pub command: Vec<String>,
    /// `CODEX_HOME` for the child, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codex_home: Option<PathBuf>,
    /// Dotted Codex config keys, each passed as `-c key=<TOML value>`.
    pub config: BTreeMap<String, CodexConfigValue>,
}

impl Default for CodexBackendConfig {
    fn default() -> Self {
        CodexBackendConfig {
            command: vec!["codex".to_string(), "app-server".to_string()],
            codex_home: None,
            config: BTreeMap::new(),
        }
    }
}

impl CodexBackendConfig {
    /// The `-c key=value` arguments for the configured overrides, in key order.
    pub fn config_overrides(&self) -> Vec<String> {
        self.config
            .iter()
            .flat_map(|(key, value)| ["-c".to_string(), format!("{key}={}", value.to_toml())])
            .collect()
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

impl CodexConfigValue {
    /// The value as the Codex client passes it (`-c key=<TOML>`).
    pub fn to_codex(&self) -> codex_app_server_client::ConfigValue {
        use codex_app_server_client::ConfigValue;
        match self {
            CodexConfigValue::String(s) => ConfigValue::String(s.clone()),
            CodexConfigValue::Integer(i) => ConfigValue::Integer(*i),
            CodexConfigValue::Float(f) => ConfigValue::Float(*f),
            CodexConfigValue::Bool(b) => ConfigValue::Bool(*b),
        }
    }

    /// The value as a TOML literal (strings quoted and escaped).
    pub fn to_toml(&self) -> String {
        self.to_codex().to_toml()
    }
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
}

/// `store`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The state database; relative paths are relative to the working directory.
    pub path: PathBuf,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: PathBuf::from(DEFAULT_STORE_PATH),
        }
    }
}

/// `projection`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProjectionConfig {
    pub developer_instruction_drift: DeveloperInstructionDrift,
}

/// How drifted developer instructions reach a thread that already has some (SPEC §9.6):
/// `inject` (a developer message through `thread/inject_items`) or `rotate` (a new thread).
pub use crate::projection::DriftPolicy as DeveloperInstructionDrift;

/// Where the selected engine id came from (SPEC §2).
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
    /// Reads the configuration. `None` reads [`DEFAULT_CONFIG_PATH`] if it exists (a missing
    /// default file means all defaults); an explicitly given file must exist.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(source) => Config::parse(&source, &path.display().to_string()),
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Parses JSON5 `source`; `file` names it in error messages.
    pub fn parse(source: &str, file: &str) -> Result<Config, ConfigError> {
        let value: Value = json5::from_str(source).map_err(|e| syntax_error(file, e))?;
        if value.is_null() {
            return Ok(Config::default());
        }
        let raw: RawConfig = deserialize_at(value, &[]).map_err(|e| e.locate(source, file))?;
        let backend = match raw.backend {
            None => BackendConfig::default(),
            Some(v) => parse_backend(v).map_err(|e| e.locate(source, file))?,
        };
        Ok(Config {
            plugins: raw.plugins,
            agent: raw.agent,
            backend,
            store: raw.store,
            projection: raw.projection,
        })
    }

    /// The engine slot (SPEC §2): missing, empty or `"legacy"` selects legacy; an engine
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

/// Pass one: everything typed except `backend`, whose shape depends on its `kind`. Internally
/// tagged enums buffer their content and would lose the key path of errors inside them, so the
/// backend is deserialized in a second pass by [`parse_backend`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
#[derive(Default)]
struct RawConfig {
    plugins: PluginsConfig,
    agent: AgentConfig,
    backend: Option<Value>,
    store: StoreConfig,
    projection: ProjectionConfig,
}

fn parse_backend(value: Value) -> Result<BackendConfig, UnlocatedError> {
    let backend_path = [PathSegment::Key("backend".to_string())];
    let Value::Object(mut map) = value else {
        return Err(UnlocatedError {
            path: backend_path.to_vec(),
            message: format!(
                "invalid type: {}, expected a map with a `kind`",
                crate::contract::json_kind(&value)
            ),
        });
    };
    let kind = match map.remove("kind") {
        Some(Value::String(kind)) => kind,
        Some(other) => {
            return Err(UnlocatedError {
                path: vec![
                    PathSegment::Key("backend".into()),
                    PathSegment::Key("kind".into()),
                ],
                message: format!(
                    "invalid type: {}, expected one of `mock`, `codex`, `responses`",
                    crate::contract::json_kind(&other)
                ),
            })
        }
        None => {
            return Err(UnlocatedError {
                path: backend_path.to_vec(),
                message: "missing field `kind`".to_string(),
            })
        }
    };
    let rest = Value::Object(map);
    match kind.as_str() {
        "mock" => {
            deserialize_at::<MockBackendConfig>(rest, &backend_path).map(|_| BackendConfig::Mock)
        }
        "codex" => deserialize_at(rest, &backend_path).map(BackendConfig::Codex),
        "responses" => deserialize_at(rest, &backend_path).map(BackendConfig::Responses),
        other => Err(UnlocatedError {
            path: vec![
                PathSegment::Key("backend".into()),
                PathSegment::Key("kind".into()),
            ],
            message: format!(
                "unknown variant `{other}`, expected one of `mock`, `codex`, `responses`"
            ),
        }),
    }
}

/// Deserializes `value` as `T`, reporting errors with their key path under `prefix`.
fn deserialize_at<T: serde::de::DeserializeOwned>(
    value: Value,
    prefix: &[PathSegment],
) -> Result<T, UnlocatedError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = prefix.to_vec();
        for segment in e.path().iter() {
            match segment {
                serde_path_to_error::Segment::Map { key } => {
                    path.push(PathSegment::Key(key.clone()))
                }
                serde_path_to_error::Segment::Seq { index } => {
                    path.push(PathSegment::Index(*index))
                }
                // Enum variants and unknown segments name no place in the file.
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => {}
            }
        }
        UnlocatedError {
            path,
            message: e.into_inner().to_string(),
        }
    })
}

/// A typed-deserialization error before its place in the file is known.
#[derive(Debug)]
struct UnlocatedError {
    path: Vec<PathSegment>,
    message: String,
}

impl UnlocatedError {
    fn locate(self, source: &str, file: &str) -> ConfigError {
        // serde reports an unknown key at the map that holds it; name the key itself, so both
        // the key path and the position point at the offending key.
        let mut path = self.path;
        let unknown_key = unknown_field_name(&self.message);
        if let Some(key) = &unknown_key {
            if path.last() != Some(&PathSegment::Key(key.clone())) {
                path.push(PathSegment::Key(key.clone()));
            }
        }
        let found = locate(source, &path);
        let position = if unknown_key.is_some() {
            found.key.unwrap_or(found.value)
        } else {
            found.value
        };
        let (line, column) = line_column(source, position);
        ConfigError::Invalid {
            file: file.to_string(),
            line,
            column,
            key_path: display_path(&path),
            message: self.message,
        }
    }
}

/// The key named by serde's "unknown field `x`, expected …" message.
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let end = rest.find('`')?;
    Some(rest[..end].to_string())
}

fn syntax_error(file: &str, error: json5::Error) -> ConfigError {
    let json5::Error::Message { msg, location } = error;
    let (line, column) = location.map_or((1, 1), |l| (l.line, l.column));
    ConfigError::Syntax {
        file: file.to_string(),
        line,
        column,
        message: summarize_parser_message(&msg),
    }
}

/// pest renders a multi-line report (`--> 3:5`, the source line, a caret, `= expected …`);
/// keep the one-line summary, since the location is reported separately.
fn summarize_parser_message(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("= "))
        .unwrap_or_else(|| msg.lines().next().unwrap_or(msg).trim())
        .to_string()
}

/// A configuration that cannot be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (an explicitly given file that does not exist, …).
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not JSON5.
    #[error("{file}:{line}:{column}: not valid JSON5: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A key has the wrong type, is unknown, or a required key is missing.
    #[error("{file}:{line}:{column}: {key_path}: {message}")]
    Invalid {
        file: String,
        line: usize,
        column: usize,
        /// Dotted key path (`plugins.entries.my-engine.enabled`, `agent.list[2]`).
        key_path: String,
        message: String,
    },
}

// ------------------------------------------------------------------------------------------
// Locating a key path in JSON5 text
// ------------------------------------------------------------------------------------------

/// One step of a key path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// Renders a key path the way serde_path_to_error does: `a.b[2].c`; `.` for the root.
pub fn display_path(path: &[PathSegment]) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let mut out = String::new();
    for segment in path {
        match segment {
            PathSegment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathSegment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Where a key path sits in the text: byte offsets of the value and (for object members) of
/// its key. When the full path is not in the text (a missing key), the deepest existing
/// ancestor is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub key: Option<usize>,
    pub value: usize,
    /// How many segments of the path were found.
    pub depth: usize,
}

/// Finds `path` in the JSON5 `source` (which should already have parsed). Handles quoted and
/// unquoted keys, comments, all string forms and nesting; a duplicated key resolves to its last
/// occurrence, as the parser keeps the last value.
pub fn locate(source: &str, path: &[PathSegment]) -> Located {
    let mut scanner = Scanner {
        src: source,
        pos: 0,
    };
    scanner.skip_trivia();
    let root = scanner.pos;
    scanner.descend(
        path,
        Located {
            key: None,
            value: root,
            depth: 0,
        },
    )
}

/// 1-based line and column (in characters) of byte offset `pos`.
pub fn line_column(source: &str, pos: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    let mut chars = source.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i >= pos {
            break;
        }
        match c {
            '\r' => {
                if chars.peek().map(|&(_, n)| n) != Some('\n') {
                    line += 1;
                    column = 1;
                }
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                line += 1;
                column = 1;
            }
            _ => column += 1,
        }
    }
    (line, column)
}

struct Scanner<'a> {
    src: &'a str,
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.src[self.pos..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips whitespace (JSON5 allows any Unicode space and the BOM) and comments.
    fn skip_trivia(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() || c == '\u{FEFF}' => {
                    self.bump();
                }
                Some('/') if self.peek_second() == Some('/') => {
                    while let Some(c) = self.peek() {
                        if matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}') {
                            break;
                        }
                        self.bump();
                    }
                }
                Some('/') if self.peek_second() == Some('*') => {
                    self.pos += 2;
                    match self.src[self.pos..].find("*/") {
                        Some(end) => self.pos += end + 2,
                        None => self.pos = self.src.len(),
                    }
                }
                _ => return,
            }
        }
    }

    /// Reads a quoted string starting at the opening quote; returns its decoded value.
    fn string(&mut self) -> String {
        let Some(quote) = self.bump() else {
            return String::new();
        };
        let mut out = String::new();
        while let Some(c) = self.bump() {
            match c {
                c if c == quote => break,
                '\\' => match self.bump() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('b') => out.push('\u{8}'),
                    Some('f') => out.push('\u{c}'),
                    Some('v') => out.push('\u{b}'),
                    Some('0') => out.push('\0'),
                    Some('x') => {
                        let hex = self.take_hex(2);
                        out.extend(hex.and_then(char::from_u32));
                    }
                    Some('u') => out.extend(self.unicode_escape()),
                    // A backslash before a line terminator continues the line.
                    Some('\r') => {
                        if self.peek() == Some('\n') {
                            self.bump();
                        }
                    }
                    Some('\n' | '\u{2028}' | '\u{2029}') => {}
                    Some(other) => out.push(other),
                    None => break,
                },
                c => out.push(c),
            }
        }
        out
    }

    fn take_hex(&mut self, digits: usize) -> Option<u32> {
        let end = self.pos + digits;
        let hex = self.src.get(self.pos..end)?;
        let value = u32::from_str_radix(hex, 16).ok()?;
        self.pos = end;
        Some(value)
    }

    /// After `\u`: four hex digits, combining a surrogate pair when one follows.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.take_hex(4)?;
        if (0xD800..0xDC00).contains(&first) && self.src[self.pos..].starts_with("\\u") {
            let save = self.pos;
            self.pos += 2;
            if let Some(second) = self.take_hex(4) {
                if (0xDC00..0xE000).contains(&second) {
                    return char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
                }
            }
            self.pos = save;
        }
        char::from_u32(first)
    }

    /// An object key: quoted, or an identifier name (which may contain `\u` + four-hex-digit
    /// escapes).
    fn key(&mut self) -> String {
        match self.peek() {
            Some('"' | '\'') => self.string(),
            _ => {
                let mut out = String::new();
                while let Some(c) = self.peek() {
                    if c == '\\' {
                        self.bump();
                        if self.peek() == Some('u') {
                            self.bump();
                            out.extend(self.unicode_escape());
                        }
                    } else if c.is_alphanumeric() || c == '_' || c == '$' || is_id_continue_extra(c)
                    {
                        out.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                out
            }
        }
    }

    /// Skips one value of any kind.
    fn skip_value(&mut self) {
        self.skip_trivia();
        match self.peek() {
            Some('{') => {
                self.bump();
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None => return,
                        Some('}') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let before = self.pos;
                            self.key();
                            self.skip_trivia();
                            if self.peek() == Some(':') {
                                self.bump();
                            }
                            self.skip_value();
                            if self.pos == before {
                                // Not a key, not a value: stop rather than loop forever.
                                self.bump();
                            }
                        }
                    }
                }
            }
            Some('[') => {
                self.bump();
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None => return,
                        Some(']') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let before = self.pos;
                            self.skip_value();
                            if self.pos == before {
                                self.bump();
                            }
                        }
                    }
                }
            }
            Some('"' | '\'') => {
                self.string();
            }
            _ => {
                // A number, `true`, `false`, `null`, `Infinity`, `NaN`: up to a delimiter.
                while let Some(c) = self.peek() {
                    if matches!(c, ',' | '}' | ']' | '/' | ':') || c.is_whitespace() {
                        break;
                    }
                    self.bump();
                }
            }
        }
    }

    /// With the scanner at a value (trivia skipped), follows `path` into it.
    fn descend(&mut self, path: &[PathSegment], here: Located) -> Located {
        let Some((segment, rest)) = path.split_first() else {
            return here;
        };
        match (segment, self.peek()) {
            (PathSegment::Key(wanted), Some('{')) => {
                self.bump();
                // (key offset, value offset) of the last member named `wanted`.
                let mut last_match: Option<(usize, usize)> = None;
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None | Some('}') => break,
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let key_pos = self.pos;
                            let key = self.key();
                            self.skip_trivia();
                            if self.peek() == Some(':') {
                                self.bump();
                            }
                            self.skip_trivia();
                            let value_pos = self.pos;
                            if &key == wanted {
                                last_match = Some((key_pos, value_pos));
                            }
                            self.skip_value();
                            if self.pos == key_pos {
                                break;
                            }
                        }
                    }
                }
                match last_match {
                    Some((key_pos, value_pos)) => {
                        self.pos = value_pos;
                        self.descend(
                            rest,
                            Located {
                                key: Some(key_pos),
                                value: value_pos,
                                depth: here.depth + 1,
                            },
                        )
                    }
                    None => here,
                }
            }
            (PathSegment::Index(wanted), Some('[')) => {
                self.bump();
                let mut index = 0;
                loop {
                    self.skip_trivia();
                    match self.peek() {
                        None | Some(']') => return here,
                        Some(',') => {
                            self.bump();
                        }
                        Some(_) => {
                            let value_pos = self.pos;
                            if index == *wanted {
                                return self.descend(
                                    rest,
                                    Located {
                                        key: None,
                                        value: value_pos,
                                        depth: here.depth + 1,
                                    },
                                );
                            }
                            self.skip_value();
                            if self.pos == value_pos {
                                return here;
                            }
                            index += 1;
                        }
                    }
                }
            }
            _ => here,
        }
    }
}

/// Identifier characters beyond alphanumerics that ES5 allows (ZWNJ, ZWJ, combining marks are
/// covered by `is_alphanumeric` only partly; these two are common enough to name).
fn is_id_continue_extra(c: char) -> bool {
    matches!(c, '\u{200C}' | '\u{200D}')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn key(k: &str) -> PathSegment {
        PathSegment::Key(k.to_string())
    }

    fn at(source: &str, path: &[PathSegment]) -> (usize, usize) {
        line_column(source, locate(source, path).value)
    }

    fn err(source: &str) -> String {
        Config::parse(source, "ctxbridge.json5")
            .unwrap_err()
            .to_string()
    }

    /// An empty file, an empty object and a `null` document all mean the defaults.
    #[test]
    fn empty_inputs_mean_defaults() {
        for src in ["{}", "  // nothing\n{ }\n", "null"] {
            let config = Config::parse(src, "c.json5").unwrap();
            assert_eq!(config, Config::default(), "{src:?}");
        }
        let d = Config::default();
        assert_eq!(d.agent.id, "main");
        assert_eq!(d.store.path, PathBuf::from(".ctxbridge/state.db"));
        assert_eq!(d.backend, BackendConfig::Mock);
        assert_eq!(
            d.projection.developer_instruction_drift,
            DeveloperInstructionDrift::Inject
        );
    }

    /// The SPEC §14 example parses into the typed structs, comments and trailing commas included.
    #[test]
    fn spec_example_parses() {
        let src = r#"{
  plugins: {
    slots: { contextEngine: "my-engine" },            // default "legacy"
    entries: { "my-engine": { enabled: true, command: ["python3", "engine.py"], config: {} } },
  },
  agent: { id: "main", tokenBudget: 400000, developerInstructions: "…", baseInstructions: "…" },
  backend: { kind: "mock" },
  store: { path: ".ctxbridge/state.db" },
  projection: { developerInstructionDrift: "inject" },// or "rotate"
}"#;
        let c = Config::parse(src, "c.json5").unwrap();
        assert_eq!(c.plugins.slots.context_engine.as_deref(), Some("my-engine"));
        let entry = &c.plugins.entries["my-engine"];
        assert_eq!(entry.enabled, Some(true));
        assert_eq!(
            entry.command.as_deref(),
            Some(&["python3".to_string(), "engine.py".to_string()][..])
        );
        assert_eq!(entry.config, Some(serde_json::json!({})));
        assert_eq!(c.agent.token_budget, Some(400_000));
        assert_eq!(c.agent.developer_instructions.as_deref(), Some("…"));
        assert_eq!(c.backend, BackendConfig::Mock);
    }

    /// Codex and Responses backends parse with defaults, and Codex overrides render as TOML.
    #[test]
    fn backend_kinds_parse() {
        let c = Config::parse(
            r#"{backend: {kind: "codex", codexHome: "/tmp/ch", config: {"model_provider": "mock", "model_providers.mock.request_max_retries": 0, "features.x": true, "t": 0.5}}}"#,
            "c.json5",
        )
        .unwrap();
        let BackendConfig::Codex(codex) = &c.backend else {
            panic!("not codex: {:?}", c.backend)
        };
        assert_eq!(codex.command, vec!["codex", "app-server"]);
        assert_eq!(codex.codex_home, Some(PathBuf::from("/tmp/ch")));
        assert_eq!(
            codex.config_overrides(),
            vec![
                "-c",
                "features.x=true",
                "-c",
                "model_provider=\"mock\"",
                "-c",
                "model_providers.mock.request_max_retries=0",
                "-c",
                "t=0.5"
            ]
        );
        let c = Config::parse(
            r#"{backend: {kind: "responses", baseUrl: "http://127.0.0.1:9", model: "m", apiKeyEnv: "K"}}"#,
            "c.json5",
        )
        .unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::Responses(ResponsesBackendConfig {
                base_url: "http://127.0.0.1:9".into(),
                model: "m".into(),
                api_key_env: Some("K".into()),
            })
        );
        assert_eq!(c.backend.host_kind(), HostKind::Responses);
    }

    /// TOML rendering escapes quotes, backslashes and control characters.
    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(
            CodexConfigValue::String("a\"b\\c\nd\u{1}".into()).to_toml(),
            r#""a\"b\\c\nd\u0001""#
        );
        assert_eq!(CodexConfigValue::Float(2.0).to_toml(), "2.0");
        assert_eq!(CodexConfigValue::Integer(-3).to_toml(), "-3");
    }

    /// A wrong type reports file, line and column of the value and the dotted key path.
    #[test]
    fn wrong_type_reports_location_and_path() {
        let src = "{\n  plugins: {\n    entries: {\n      \"my-engine\": { enabled: \"yes\" },\n    },\n  },\n}\n";
        assert_eq!(
            err(src),
            "ctxbridge.json5:4:31: plugins.entries.my-engine.enabled: invalid type: string \"yes\", expected a boolean"
        );
    }

    /// Errors inside the backend (second pass) keep the `backend.` prefix and their location.
    #[test]
    fn backend_errors_have_paths() {
        let src = "{\n backend: {\n  kind: 'codex',\n  command: 'codex',\n }\n}";
        assert_eq!(
            err(src),
            "ctxbridge.json5:4:12: backend.command: invalid type: string \"codex\", expected a sequence"
        );
        let src = "{ backend: { kind: 'codex', config: { 'a.b': [1] } } }";
        assert_eq!(
            err(src),
            "ctxbridge.json5:1:46: backend.config.a.b: invalid type: sequence, expected a string, number or boolean"
        );
        let src = "{ backend: { kind: 'responses', model: 'm' } }";
        assert_eq!(
            err(src),
            "ctxbridge.json5:1:12: backend: missing field `baseUrl`"
        );
        let src = "{ backend: { kind: 'carrier-pigeon' } }";
        assert_eq!(
            err(src),
            "ctxbridge.json5:1:20: backend.kind: unknown variant `carrier-pigeon`, expected one of `mock`, `codex`, `responses`"
        );
        let src = "{ backend: { model: 'm' } }";
        assert_eq!(
            err(src),
            "ctxbridge.json5:1:12: backend: missing field `kind`"
        );
        let src = "{ backend: { kind: 'mock', model: 'm' } }";
        assert!(err(src).starts_with("ctxbridge.json5:1:28: backend.model: unknown field `model`"));
    }

    /// Unknown keys are rejected with their path and the key's position, but free-form maps
    /// accept anything.
    #[test]
    fn unknown_keys_rejected_outside_free_form_maps() {
        let src = "{\n  agent: { id: 'a', tokenBudgte: 5 },\n}";
        let e = err(src);
        assert!(
            e.starts_with("ctxbridge.json5:2:21: agent.tokenBudgte: unknown field `tokenBudgte`"),
            "{e}"
        );
        let src = "{ colour: 1 }";
        assert!(err(src).starts_with("ctxbridge.json5:1:3: colour: unknown field `colour`"));
        let ok = Config::parse(
            "{ plugins: { entries: { e: { config: { anything: [1, {deep: true}] } } } }, backend: {kind: 'codex', config: {'x.y': 'z'}} }",
            "c.json5",
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    /// The OpenClaw-only keys of the plugins section are accepted unchanged.
    #[test]
    fn openclaw_plugins_section_accepted() {
        let src = r#"{ plugins: { enabled: true, allow: ["a"], deny: [], load: { paths: ["/x"] },
            slots: { memory: "memory-core", contextEngine: "lossless-claw" },
            entries: { "lossless-claw": { enabled: true, config: { k: 1 } } }, installs: {} } }"#;
        let c = Config::parse(src, "c.json5").unwrap();
        assert_eq!(c.engine_slot().engine_id, "lossless-claw");
    }

    /// Text that is not JSON5 reports the parser's line and column and a one-line message.
    #[test]
    fn syntax_errors_have_location() {
        // A missing comma: pest reports the furthest position it tried, on line 2.
        let e = err("{\n  agent: { id: 'a' }\n  store: {}\n}");
        assert!(e.starts_with("ctxbridge.json5:2:"), "{e}");
        assert!(e.contains(": not valid JSON5: expected "), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = err("{ agent: ");
        assert!(e.starts_with("ctxbridge.json5:1:"), "{e}");
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

    /// The locator handles quoted and unquoted keys, comments, strings with delimiters and
    /// escapes, nested arrays, and duplicated keys (last wins).
    #[test]
    fn locator_walks_json5() {
        let src = r#"// leading comment with { braces ]
{
  /* a: 1 */ 'a': "x,}]\"//",
  "b\u0041": [1, /* , */ [2, 3], { c: 'd' }],
  $e_1: { f: 1, f: 2 },
  g: 'it\'s',
  h: "line\
continued", i: +Infinity, j: .5, k: 0x1F,
}"#;
        assert_eq!(at(src, &[key("a")]), (3, 19));
        assert_eq!(
            at(
                src,
                &[key("bA"), PathSegment::Index(1), PathSegment::Index(1)]
            ),
            (4, 30)
        );
        assert_eq!(
            at(src, &[key("bA"), PathSegment::Index(2), key("c")]),
            (4, 39)
        );
        assert_eq!(at(src, &[key("$e_1"), key("f")]), (5, 20));
        assert_eq!(at(src, &[key("g")]), (6, 6));
        assert_eq!(at(src, &[key("i")]), (8, 16));
        assert_eq!(at(src, &[key("k")]), (8, 37));
        // A missing member reports the deepest ancestor found.
        let located = locate(src, &[key("$e_1"), key("zz")]);
        assert_eq!(located.depth, 1);
        assert_eq!(line_column(src, located.value), (5, 9));
        assert_eq!(line_column(src, located.key.unwrap()), (5, 3));
        // An index past the end stops at the array.
        assert_eq!(locate(src, &[key("bA"), PathSegment::Index(9)]).depth, 1);
    }

    /// Renders JSON values as JSON5 in varied styles, recording where each value starts.
    struct Json5Writer {
        out: String,
        seed: u64,
        starts: Vec<(Vec<PathSegment>, usize)>,
    }

    impl Json5Writer {
        fn coin(&mut self, one_in: u64) -> bool {
            // A small LCG: the style choices only need to vary, not to be good random numbers.
            self.seed = self
                .seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.seed >> 33) % one_in == 0
        }

        fn trivia(&mut self) {
            if self.coin(3) {
                self.out.push_str("\n  ");
            }
            if self.coin(5) {
                self.out.push_str("/* a, } ] 'comment' */ ");
            }
            if self.coin(6) {
                self.out.push_str("// line comment: { [\n");
            }
            if self.coin(4) {
                self.out.push('\t');
            }
        }

        fn key(&mut self, key: &str) {
            let identifier = key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
            if identifier && self.coin(2) {
                self.out.push_str(key);
            } else if self.coin(2) {
                self.out.push('\'');
                self.out
                    .push_str(&key.replace('\\', "\\\\").replace('\'', "\\'"));
                self.out.push('\'');
            } else {
                self.out.push_str(&serde_json::to_string(key).unwrap());
            }
        }

        fn value(&mut self, path: &mut Vec<PathSegment>, value: &Value) {
            self.trivia();
            self.starts.push((path.clone(), self.out.len()));
            match value {
                Value::Object(map) => {
                    self.out.push('{');
                    for (i, (k, v)) in map.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        self.trivia();
                        self.key(k);
                        self.trivia();
                        self.out.push(':');
                        path.push(PathSegment::Key(k.clone()));
                        self.value(path, v);
                        path.pop();
                        self.trivia();
                    }
                    if !map.is_empty() && self.coin(2) {
                        self.out.push(',');
                    }
                    self.trivia();
                    self.out.push('}');
                }
                Value::Array(items) => {
                    self.out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        path.push(PathSegment::Index(i));
                        self.value(path, v);
                        path.pop();
                        self.trivia();
                    }
                    if !items.is_empty() && self.coin(2) {
                        self.out.push(',');
                    }
                    self.out.push(']');
                }
                Value::String(text) if self.coin(2) => {
                    self.out.push('\'');
                    self.out
                        .push_str(&text.replace('\\', "\\\\").replace('\'', "\\'"));
                    self.out.push('\'');
                }
                other => self.out.push_str(&other.to_string()),
            }
        }
    }

    fn json_tree() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            "[a-z_$][a-z0-9_]{0,6}",
            "[a-z]{1,3}[-. /:,{}\\[\\]'\"\\\\]{1,2}[a-z]{0,2}",
            "[éü]{1,2}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z ,:{}\\[\\]/*'\"\\\\é]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// For any JSON tree rendered as JSON5 with comments, quoted and unquoted keys, trailing
        /// commas and line breaks, the locator finds every value where it was written, and the
        /// text is JSON5 that parses back to the same tree.
        #[test]
        fn locator_finds_every_value(tree in json_tree(), seed in proptest::prelude::any::<u64>()) {
            let mut writer = Json5Writer { out: String::new(), seed, starts: Vec::new() };
            writer.value(&mut Vec::new(), &tree);
            let parsed: Value = json5::from_str(&writer.out).unwrap();
            proptest::prop_assert_eq!(&parsed, &tree, "source: {}", writer.out);
            for (path, start) in &writer.starts {
                let found = locate(&writer.out, path);
                proptest::prop_assert_eq!(found.depth, path.len(), "path {:?} in {}", path, writer.out);
                proptest::prop_assert_eq!(found.value, *start, "path {:?} in {}", path, writer.out);
            }
        }
    }

    /// Columns count characters, not bytes, and CRLF counts as one line break.
    #[test]
    fn columns_count_characters() {
        let src = "{\r\n  ü: 'é', x: 1 }";
        assert_eq!(at(src, &[key("x")]), (2, 14));
        assert_eq!(at(src, &[key("ü")]), (2, 6));
    }

    /// An explicitly named file that does not exist is an error naming it.
    #[test]
    fn explicit_missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json5");
        let e = Config::load(Some(&missing)).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }));
        assert!(e.to_string().contains("nope.json5"), "{e}");
    }

    /// A file on disk is read and its errors carry its path.
    #[test]
    fn load_reads_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json5");
        std::fs::write(&path, "{ store: { path: 5 } }").unwrap();
        let e = Config::load(Some(&path)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}:1:18: store.path:", path.display())),
            "{e}"
        );
    }
}
