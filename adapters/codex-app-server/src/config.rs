//! How the child is started: command, `-c` overrides, `CODEX_HOME`, environment, limits; where
//! the Codex binary is; the overrides that point Codex at a loopback mock model.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A TOML value for a `-c key=value` override.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    String(String),
    Bool(bool),
    Integer(i64),
    Float(f64),
    Array(Vec<ConfigValue>),
    /// Already TOML (an inline table, say); passed through unchanged.
    Raw(String),
}

impl ConfigValue {
    /// The value as JSON, as a ctxbridge config file's `backend.config` holds it; `None` for
    /// [`ConfigValue::Raw`] TOML (and arrays holding it), which has no JSON form.
    pub fn to_json(&self) -> Option<serde_json::Value> {
        match self {
            Self::String(s) => Some(serde_json::Value::from(s.as_str())),
            Self::Bool(b) => Some(serde_json::Value::from(*b)),
            Self::Integer(i) => Some(serde_json::Value::from(*i)),
            Self::Float(f) => Some(serde_json::Value::from(*f)),
            Self::Array(items) => items
                .iter()
                .map(Self::to_json)
                .collect::<Option<Vec<_>>>()
                .map(serde_json::Value::Array),
            Self::Raw(_) => None,
        }
    }

    /// The value as TOML, strings quoted and escaped.
    pub fn to_toml(&self) -> String {
        match self {
            Self::String(s) => toml_string(s),
            Self::Bool(b) => b.to_string(),
            Self::Integer(i) => i.to_string(),
            Self::Float(f) if f.is_finite() => {
                let text = f.to_string();
                if text.contains(['.', 'e', 'E']) {
                    text
                } else {
                    format!("{text}.0")
                }
            }
            Self::Float(f) if f.is_nan() => "nan".to_owned(),
            Self::Float(f) if f.is_sign_negative() => "-inf".to_owned(),
            Self::Float(_) => "inf".to_owned(),
            Self::Array(items) => {
                let items: Vec<String> = items.iter().map(Self::to_toml).collect();
                format!("[{}]", items.join(", "))
            }
            Self::Raw(raw) => raw.clone(),
        }
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl From<&str> for ConfigValue {
    fn from(value: &str) -> Self {
        Self::String(value.to_owned())
    }
}

impl From<String> for ConfigValue {
    fn from(value: String) -> Self {
        Self::String(value)
    }
}

impl From<bool> for ConfigValue {
    fn from(value: bool) -> Self {
        Self::Bool(value)
    }
}

impl From<i64> for ConfigValue {
    fn from(value: i64) -> Self {
        Self::Integer(value)
    }
}

impl From<i32> for ConfigValue {
    fn from(value: i32) -> Self {
        Self::Integer(i64::from(value))
    }
}

impl From<u32> for ConfigValue {
    fn from(value: u32) -> Self {
        Self::Integer(i64::from(value))
    }
}

impl From<f64> for ConfigValue {
    fn from(value: f64) -> Self {
        Self::Float(value)
    }
}

/// How to start `codex app-server`.
#[derive(Debug, Clone)]
pub struct AppServerConfig {
    /// Program and leading arguments; `["codex", "app-server"]` by default.
    pub command: Vec<String>,
    /// Passed as `-c key=<TOML value>` after `command`, in order.
    pub config_overrides: Vec<(String, ConfigValue)>,
    /// Created if missing and passed as `CODEX_HOME` (Codex exits at once without it).
    pub codex_home: PathBuf,
    /// Extra environment variables for the child.
    pub env: Vec<(String, String)>,
    /// Working directory of the child; inherited when `None`.
    pub cwd: Option<PathBuf>,
    /// Lines from the child longer than this are skipped (with a warning).
    pub max_line_bytes: usize,
    /// How long a request waits for its response.
    pub request_timeout: Duration,
    /// Limits that end a stalled or runaway turn (see [`TurnLimits`]).
    pub turn_limits: TurnLimits,
}

/// Limits on one turn (a `turn/start` or the turn of a `thread/compact/start`). When one is hit
/// the client sends `turn/interrupt` for the turn, waits briefly for Codex to confirm, and the
/// turn's stream ends with [`crate::AppServerError::TurnLimit`] instead of `Completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnLimits {
    /// The longest wait between two events of the turn (any notification routed to it).
    /// Default 300 s: a model that streams nothing for five minutes is taken as stalled.
    pub idle_timeout: Duration,
    /// The longest a whole turn may take, from the start request. Default 30 min.
    pub turn_deadline: Duration,
    /// The most agent-message text (UTF-8 bytes, streamed deltas and completed messages,
    /// retried attempts included) a turn may produce. Default 16 MiB.
    pub max_reply_bytes: usize,
}

impl TurnLimits {
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const DEFAULT_TURN_DEADLINE: Duration = Duration::from_secs(30 * 60);
    pub const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            turn_deadline: Self::DEFAULT_TURN_DEADLINE,
            max_reply_bytes: Self::DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

impl AppServerConfig {
    pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

    /// Defaults with this `CODEX_HOME`.
    pub fn new(codex_home: impl Into<PathBuf>) -> Self {
        Self {
            command: vec!["codex".to_owned(), "app-server".to_owned()],
            config_overrides: Vec::new(),
            codex_home: codex_home.into(),
            env: Vec::new(),
            cwd: None,
            max_line_bytes: Self::DEFAULT_MAX_LINE_BYTES,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            turn_limits: TurnLimits::default(),
        }
    }

    /// Replace the command (program and leading arguments).
    pub fn with_command<S: Into<String>>(mut self, command: impl IntoIterator<Item = S>) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }

    /// Run this Codex binary as `<binary> app-server`.
    pub fn with_binary(self, binary: &Path) -> Self {
        self.with_command([binary.display().to_string(), "app-server".to_owned()])
    }

    /// Set an override, replacing an earlier one with the same key.
    pub fn with_override(mut self, key: impl Into<String>, value: impl Into<ConfigValue>) -> Self {
        set_override(&mut self.config_overrides, key.into(), value.into());
        self
    }

    /// Set several overrides, each replacing an earlier one with the same key.
    pub fn with_overrides(
        mut self,
        overrides: impl IntoIterator<Item = (String, ConfigValue)>,
    ) -> Self {
        for (key, value) in overrides {
            set_override(&mut self.config_overrides, key, value);
        }
        self
    }

    /// Add an environment variable for the child.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    pub fn with_max_line_bytes(mut self, max_line_bytes: usize) -> Self {
        self.max_line_bytes = max_line_bytes;
        self
    }

    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    pub fn with_turn_limits(mut self, turn_limits: TurnLimits) -> Self {
        self.turn_limits = turn_limits;
        self
    }

    /// The child's process: `program` with [`Self::args`], `CODEX_HOME`, the extra
    /// environment and the working directory (stdio left to the caller).
    pub fn process(&self, program: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .args(self.args())
            .env("CODEX_HOME", &self.codex_home)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        command
    }

    /// The arguments after the program: the rest of `command`, then `-c key=value` pairs.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = self.command.iter().skip(1).cloned().collect();
        for (key, value) in &self.config_overrides {
            args.push("-c".to_owned());
            args.push(format!("{key}={}", value.to_toml()));
        }
        args
    }
}

fn set_override(overrides: &mut Vec<(String, ConfigValue)>, key: String, value: ConfigValue) {
    match overrides.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => overrides.push((key, value)),
    }
}

/// `overrides` as the JSON object of a ctxbridge config file's `backend.config`; overrides
/// with no JSON form ([`ConfigValue::Raw`]) are left out.
pub fn overrides_json(
    overrides: &[(String, ConfigValue)],
) -> serde_json::Map<String, serde_json::Value> {
    overrides
        .iter()
        .filter_map(|(key, value)| Some((key.clone(), value.to_json()?)))
        .collect()
}

/// Overrides that run Codex offline against a Responses server at `base_url` (for example a
/// `ctxbridge-mock-model` server): a custom provider `mock` with `wire_api = "responses"`, no
/// retries (a test sees failures at once), no update check, no approvals, a read-only sandbox,
/// and a lean request (no environment, permissions, apps, collaboration or skills text, no web
/// search). Pair it with `baseInstructions` on `thread/start` to avoid the built-in base prompt.
pub fn offline_overrides(base_url: &str) -> Vec<(String, ConfigValue)> {
    let pairs: [(&str, ConfigValue); 21] = [
        ("model_provider", "mock".into()),
        ("model", "mock-model".into()),
        ("model_providers.mock.name", "mock".into()),
        ("model_providers.mock.base_url", base_url.into()),
        ("model_providers.mock.wire_api", "responses".into()),
        ("model_providers.mock.request_max_retries", 0i64.into()),
        ("model_providers.mock.stream_max_retries", 0i64.into()),
        ("features.unbounded_connection_retries", false.into()),
        ("approval_policy", "never".into()),
        ("sandbox_mode", "read-only".into()),
        ("check_for_update_on_startup", false.into()),
        ("include_environment_context", false.into()),
        ("include_permissions_instructions", false.into()),
        ("include_apps_instructions", false.into()),
        ("include_collaboration_mode_instructions", false.into()),
        ("skills.include_instructions", false.into()),
        ("skills.bundled.enabled", false.into()),
        ("web_search", "disabled".into()),
        ("analytics.enabled", false.into()),
        ("feedback.enabled", false.into()),
        // Plugins make Codex sync its curated marketplace from GitHub at startup: a lookup of
        // github.com that an offline run must not make.
        ("features.plugins", false.into()),
    ];
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

/// The npm platform package and target triple that carry the native binary on this machine.
fn npm_platform() -> Option<(&'static str, &'static str)> {
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        Some(("codex-linux-x64", "x86_64-unknown-linux-musl"))
    } else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
        Some(("codex-linux-arm64", "aarch64-unknown-linux-musl"))
    } else if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        Some(("codex-darwin-arm64", "aarch64-apple-darwin"))
    } else if cfg!(all(target_os = "macos", target_arch = "x86_64")) {
        Some(("codex-darwin-x64", "x86_64-apple-darwin"))
    } else {
        None
    }
}

/// Paths, relative to an npm install directory, where the Codex binary can be: the native
/// binary of the platform package first (killing the Node wrapper would orphan it), then the
/// Node wrapper `node_modules/.bin/codex`.
fn npm_binary_candidates() -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some((package, triple)) = npm_platform() {
        candidates.push(
            [
                "node_modules",
                "@openai",
                package,
                "vendor",
                triple,
                "bin",
                "codex",
            ]
            .iter()
            .collect(),
        );
    }
    candidates.push(["node_modules", ".bin", "codex"].iter().collect());
    candidates
}

/// Find the Codex binary: `$CODEX_BIN` if it names an existing file; else the native binary of
/// the npm package (`node_modules/@openai/codex-linux-x64/vendor/<triple>/bin/codex`) in this
/// crate's directory, the current directory, or one of their ancestors (so the workspace root's
/// `npm ci` install is found from any member); else `node_modules/.bin/codex` (the Node wrapper)
/// the same way. The native binary comes first because killing the Node wrapper would orphan it.
pub fn locate_codex_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CODEX_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Some(path);
        }
        tracing::warn!(path = %path.display(), "CODEX_BIN does not name a file; searching node_modules");
    }
    let mut roots = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR"))];
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    npm_binary_candidates().iter().find_map(|relative| {
        roots
            .iter()
            .flat_map(|root| root.ancestors())
            .map(|dir| dir.join(relative))
            .find(|path| path.is_file())
    })
}

/// Find the Codex binary of the npm install in `install_dir` only (the directory holding its
/// `package.json` and `node_modules`), native binary first; no environment, no ancestors. For
/// a second Codex version installed beside the pinned one (`npm ci --prefix DIR`).
pub fn locate_codex_binary_in(install_dir: &Path) -> Option<PathBuf> {
    npm_binary_candidates()
        .iter()
        .map(|relative| install_dir.join(relative))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Every offline override has a JSON form (none is lost writing a config file); scalars and
    /// arrays convert as JSON, raw TOML has none.
    #[test]
    fn overrides_convert_to_json() {
        let offline = offline_overrides("http://127.0.0.1:1/v1");
        let json = overrides_json(&offline);
        assert_eq!(json.len(), offline.len());
        assert_eq!(
            json["model_providers.mock.base_url"],
            "http://127.0.0.1:1/v1"
        );
        assert_eq!(json["model_providers.mock.request_max_retries"], 0);
        assert_eq!(json["check_for_update_on_startup"], false);
        assert_eq!(
            ConfigValue::Array(vec![ConfigValue::Float(0.5), "x".into()]).to_json(),
            Some(serde_json::json!([0.5, "x"]))
        );
        assert_eq!(ConfigValue::Raw("{a = 1}".into()).to_json(), None);
        let with_raw = vec![
            ("a".to_string(), ConfigValue::Raw("{}".into())),
            ("b".to_string(), ConfigValue::Bool(true)),
        ];
        assert_eq!(overrides_json(&with_raw).len(), 1);
    }

    /// Strings are quoted with TOML escapes; other scalars are bare; overrides replace by key.
    #[test]
    fn overrides_render_as_toml() {
        assert_eq!(
            ConfigValue::from("a\"b\\c\nd\u{1}").to_toml(),
            r#""a\"b\\c\nd\u0001""#
        );
        assert_eq!(ConfigValue::from(false).to_toml(), "false");
        assert_eq!(ConfigValue::from(3i64).to_toml(), "3");
        assert_eq!(ConfigValue::from(2.0).to_toml(), "2.0");
        assert_eq!(
            ConfigValue::Array(vec!["x".into(), 1i64.into()]).to_toml(),
            r#"["x", 1]"#
        );
        let config = AppServerConfig::new("/tmp/h")
            .with_command(["codex", "app-server", "--strict-config"])
            .with_override("model", "a")
            .with_override("approval_policy", "never")
            .with_override("model", "b");
        assert_eq!(
            config.args(),
            vec![
                "app-server",
                "--strict-config",
                "-c",
                "model=\"b\"",
                "-c",
                "approval_policy=\"never\""
            ]
        );
    }

    /// Turn limits default to 300 s idle, 30 min per turn and 16 MiB of reply, and can be set.
    #[test]
    fn turn_limits_have_documented_defaults() {
        let config = AppServerConfig::new("/tmp/h");
        assert_eq!(config.turn_limits.idle_timeout, Duration::from_secs(300));
        assert_eq!(config.turn_limits.turn_deadline, Duration::from_secs(1800));
        assert_eq!(config.turn_limits.max_reply_bytes, 16 * 1024 * 1024);
        let limits = TurnLimits {
            idle_timeout: Duration::from_millis(5),
            ..TurnLimits::default()
        };
        assert_eq!(config.with_turn_limits(limits).turn_limits, limits);
    }

    /// Only the given install directory is searched: the native binary comes before the Node
    /// wrapper, and an empty directory finds nothing.
    #[test]
    fn a_side_install_is_found_in_its_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(locate_codex_binary_in(dir.path()), None);
        let wrapper = dir.path().join("node_modules/.bin/codex");
        std::fs::create_dir_all(wrapper.parent().unwrap()).unwrap();
        std::fs::write(&wrapper, "").unwrap();
        assert_eq!(locate_codex_binary_in(dir.path()), Some(wrapper));
        if let Some((package, triple)) = npm_platform() {
            let native = dir.path().join(format!(
                "node_modules/@openai/{package}/vendor/{triple}/bin/codex"
            ));
            std::fs::create_dir_all(native.parent().unwrap()).unwrap();
            std::fs::write(&native, "").unwrap();
            assert_eq!(locate_codex_binary_in(dir.path()), Some(native));
        }
    }

    /// The offline overrides name the mock provider with the given base URL and disable retries.
    #[test]
    fn offline_overrides_point_at_the_base_url() {
        let overrides = offline_overrides("http://127.0.0.1:9/v1");
        let get = |key: &str| {
            overrides
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.to_toml())
        };
        assert_eq!(
            get("model_providers.mock.base_url").as_deref(),
            Some("\"http://127.0.0.1:9/v1\"")
        );
        assert_eq!(
            get("model_providers.mock.wire_api").as_deref(),
            Some("\"responses\"")
        );
        assert_eq!(
            get("model_providers.mock.request_max_retries").as_deref(),
            Some("0")
        );
        assert_eq!(
            get("features.unbounded_connection_retries").as_deref(),
            Some("false")
        );
        assert_eq!(get("include_environment_context").as_deref(), Some("false"));
    }
}
