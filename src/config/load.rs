//! Loading the configuration file: reading it, parsing the JSON5, deserializing the typed
//! sections, and turning every failure into a [`ConfigError`] that names the file, the line, the
//! column and the key path.
//!
//! Loading happens in three steps: `json5` parses the text into a `serde_json::Value` (its syntax
//! errors carry a location), `serde_path_to_error` deserializes the typed structs from that value
//! (its errors carry the key path), and the [`locator`](super::locator) finds where that key path
//! sits in the text, walking it with `json5`'s own parser.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::locator::{display_path, locate, PathSegment, Target};
use super::schema::{
    AgentConfig, BackendConfig, BackendUrl, CodexBackendConfig, Config, MockBackendConfig,
    PluginsConfig, ProjectionConfig, ServeConfig, StoreConfig, StoreKind,
};

/// The file read when no `--config` is given. Its absence means "all defaults".
pub const DEFAULT_CONFIG_PATH: &str = "ctxbridge.json5";

/// The largest configuration file read: parsing takes many times a file's size in memory
/// (a 60 MB file took 4.8 GB), and no configuration needs megabytes.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// A configuration file's text, refused when over [`MAX_CONFIG_BYTES`] (read no further
/// than one byte past the limit, whatever the file's size).
fn read_config(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read as _;
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        let len = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            len,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        ))
    })
}

impl Config {
    /// Reads the configuration. `None` reads [`DEFAULT_CONFIG_PATH`] if it exists (a missing
    /// default file means all defaults); an explicitly given file must exist.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match read_config(&path) {
            Ok(source) => {
                let mut config = Config::parse(&source, &path.display().to_string())?;
                let dir = path.parent().unwrap_or_else(|| Path::new(""));
                config.resolve_paths_against(dir, &source);
                Ok(config)
            }
            Err(ConfigError::Read { source, .. })
                if !explicit && source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(Config::default())
            }
            Err(error) => Err(error),
        }
    }

    /// Checks that `plugins.slots.contextEngine` names an engine in `registered` (the ids a
    /// registry built from this configuration holds: the built-in engines and every entry with
    /// a `command`). A typo there would otherwise run every turn on `legacy` with one log
    /// line; it is a configuration error at the key in the file the configuration was read
    /// from (`path`, or the default file), listing the registered ids. A disabled selection,
    /// or none, is not checked: legacy is what it asks for.
    pub fn check_selected_engine(
        &self,
        registered: &[String],
        path: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let slot = self.engine_slot();
        if slot.disabled_id.is_some() || registered.contains(&slot.engine_id) {
            return Ok(());
        }
        // Without a file the selection is the default (legacy, which is always registered):
        // the position is only for the message.
        let (file, source) = match path {
            Some(path) => (
                path.display().to_string(),
                read_config(path).unwrap_or_default(),
            ),
            None => ("(no configuration file)".to_owned(), String::new()),
        };
        let error = UnlocatedError {
            path: vec![
                PathSegment::Key("plugins".into()),
                PathSegment::Key("slots".into()),
                PathSegment::Key("contextEngine".into()),
            ],
            message: format!(
                "no context engine \"{}\" is registered; the registered engines are: {} (an engine run as a process needs plugins.entries.{}.command)",
                slot.engine_id,
                registered.join(", "),
                slot.engine_id
            ),
            source: None,
            about_key: false,
        };
        Err(error.locate(&source, &file))
    }

    /// Makes the relative paths written in a configuration file (`source`, read from `dir`)
    /// relative to that directory: `store.path`, `backend.codexHome`, a `unix://` `backend.url`
    /// and the engines' `cwd`.
    /// A default `store.path` (not written in the file) stays relative to the working
    /// directory.
    pub fn resolve_paths_against(&mut self, dir: &Path, source: &str) {
        if dir.as_os_str().is_empty() {
            return;
        }
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        let written = json5::from_str::<Value>(source).ok();
        let store_path_written = written
            .as_ref()
            .and_then(|v| v.get("store"))
            .and_then(|s| s.get("path"))
            .is_some();
        if store_path_written {
            resolve(&mut self.store.path);
        }
        if let BackendConfig::Codex(codex) = &mut self.backend {
            if let Some(home) = codex.codex_home.as_mut() {
                resolve(home);
            }
            if let Some(BackendUrl::Unix(socket)) = codex.url.as_mut() {
                resolve(socket);
            }
        }
        for entry in self.plugins.entries.values_mut() {
            if let Some(cwd) = entry.cwd.as_mut() {
                resolve(cwd);
            }
        }
    }

    /// Parses JSON5 `source`; `file` names it in error messages.
    pub fn parse(source: &str, file: &str) -> Result<Config, ConfigError> {
        let value: Value = json5::from_str(source).map_err(|e| syntax_error(file, e))?;
        if value.is_null() {
            return Ok(Config::default());
        }
        let raw: RawConfig = deserialize_at(value, &[]).map_err(|e| e.locate(source, file))?;
        if raw.store.kind == StoreKind::Sqlite && raw.store.path.as_os_str().is_empty() {
            let error = UnlocatedError {
                path: vec![
                    PathSegment::Key("store".into()),
                    PathSegment::Key("path".into()),
                ],
                message: "must not be empty: name the state database file (an empty path would keep every session in memory and lose it at exit)".into(),
                source: None,
                about_key: false,
            };
            return Err(error.locate(source, file));
        }
        if let Some(url) = &raw.store.url {
            check_store_url(url).map_err(|e| e.locate(source, file))?;
        }
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
            serve: raw.serve,
        })
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
    serve: ServeConfig,
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
            source: None,
            about_key: false,
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
                source: None,
                about_key: false,
            })
        }
        None => {
            return Err(UnlocatedError {
                path: backend_path.to_vec(),
                message: "missing field `kind`".to_string(),
                source: None,
                about_key: false,
            })
        }
    };
    if kind == "mock" {
        // The mock backend has no settings: say so, instead of serde's "there are no fields".
        if let Some(key) = map.keys().next() {
            let mut path = backend_path.to_vec();
            path.push(PathSegment::Key(key.clone()));
            return Err(UnlocatedError {
                path,
                message: format!(
                    "the mock backend takes no settings (`{key}` is not one); remove it, or pick another `backend.kind`"
                ),
                source: None,
                about_key: true,
            });
        }
    }
    let rest = Value::Object(map);
    match kind.as_str() {
        "mock" => {
            deserialize_at::<MockBackendConfig>(rest, &backend_path).map(|_| BackendConfig::Mock)
        }
        "codex" => {
            let codex: CodexBackendConfig = deserialize_at(rest, &backend_path)?;
            check_backend_url(&codex)?;
            Ok(BackendConfig::Codex(codex))
        }
        "responses" => deserialize_at(rest, &backend_path).map(BackendConfig::Responses),
        other => Err(UnlocatedError {
            path: vec![
                PathSegment::Key("backend".into()),
                PathSegment::Key("kind".into()),
            ],
            message: format!(
                "unknown variant `{other}`, expected one of `mock`, `codex`, `responses`"
            ),
            source: None,
            about_key: false,
        }),
    }
}

/// With `backend.url` the app-server already runs: the keys that only shape a spawned child
/// (`config`, `codexHome`) would be silently ignored, so they are refused.
fn check_backend_url(codex: &CodexBackendConfig) -> Result<(), UnlocatedError> {
    let Some(url) = &codex.url else {
        return Ok(());
    };
    let refuse = |key: &str, what: &str| {
        UnlocatedError {
        path: vec![
            PathSegment::Key("backend".into()),
            PathSegment::Key(key.into()),
        ],
        message: format!(
            "{what} only applies to an app-server ctxbridge spawns; backend.url ({url}) names one that already runs, so configure it where it is started"
        ),
        source: None,
        about_key: false,
    }
    };
    if !codex.config.is_empty() {
        return Err(refuse("config", "`config` (its -c overrides)"));
    }
    if codex.codex_home.is_some() {
        return Err(refuse("codexHome", "`codexHome`"));
    }
    Ok(())
}

/// `store.url` must parse as a PostgreSQL connection URL or key/value string. The value is
/// never repeated in the error: a URL that does not parse cannot be redacted reliably, and it
/// may hold a password (`postgres:/user:secret@host/db`, a password typed in the wrong place).
fn check_store_url(url: &str) -> Result<(), UnlocatedError> {
    match url.parse::<tokio_postgres::Config>() {
        Ok(_) => Ok(()),
        Err(_) => Err(UnlocatedError {
            path: vec![
                PathSegment::Key("store".into()),
                PathSegment::Key("url".into()),
            ],
            message: "not a PostgreSQL connection URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE) or key/value connection string (host=… dbname=…); the value is not shown, as it may hold a password".into(),
            source: None,
            about_key: false,
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
        let source = e.into_inner();
        UnlocatedError {
            path,
            message: source.to_string(),
            source: Some(source),
            about_key: false,
        }
    })
}

/// A typed-deserialization error before its place in the file is known.
#[derive(Debug)]
struct UnlocatedError {
    path: Vec<PathSegment>,
    message: String,
    /// The deserializer's error, when serde raised it (not for the backend's own checks).
    source: Option<serde_json::Error>,
    /// The error is about the key at `path` itself (a key that must not be there), not its
    /// value: the position points at the key.
    about_key: bool,
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
        let target = if unknown_key.is_some() || self.about_key {
            Target::Key
        } else {
            Target::Value
        };
        let (line, column) = locate(source, &path, target);
        ConfigError::Invalid {
            file: file.to_string(),
            line,
            column,
            key_path: display_path(&path),
            message: self.message,
            source: self.source,
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
    let json5::Error::Message { msg, location } = &error;
    let (line, column) = location.as_ref().map_or((1, 1), |l| (l.line, l.column));
    ConfigError::Syntax {
        file: file.to_string(),
        line,
        column,
        message: summarize_parser_message(msg),
        source: error,
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
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read (an explicitly given file that does not exist, …).
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is over [`MAX_CONFIG_BYTES`].
    #[error("config file {}: {len} bytes, over the limit of {} bytes for a configuration; keep large data (transcripts, plugin state) in files the configuration names", path.display(), MAX_CONFIG_BYTES)]
    TooLarge { path: PathBuf, len: u64 },
    /// The text is not JSON5.
    #[error("{file}:{line}:{column}: not valid JSON5: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        /// The parser's one-line summary (the full report is the source).
        message: String,
        #[source]
        source: json5::Error,
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
        /// The deserializer's error the message comes from, if any.
        #[source]
        source: Option<serde_json::Error>,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::{DeveloperInstructionDrift, ResponsesBackendConfig, ResponsesThreadKind};
    use crate::host::capabilities::HostKind;

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

    /// `serve.engineThreads` parses; sessions run the harness whenever an engine other than
    /// legacy is selected, and with legacy only when `engineThreads` is `all`.
    #[test]
    fn serve_engine_threads() {
        use crate::config::EngineThreads;
        let none = Config::parse(r#"{serve: {engineThreads: "none"}}"#, "c.json5").unwrap();
        assert_eq!(none.serve.engine_threads, Some(EngineThreads::None));
        assert!(!none.serve.engine_threads_for("legacy"));
        assert!(none.serve.engine_threads_for("sample-summary"));
        let all = Config::parse(r#"{serve: {engineThreads: "all"}}"#, "c.json5").unwrap();
        assert!(all.serve.engine_threads_for("legacy"));
        let default = Config::default();
        assert!(!default.serve.engine_threads_for("legacy"));
        assert!(default.serve.engine_threads_for("sample-summary"));
        assert!(err(r#"{serve: {engineThreads: "some"}}"#).contains("engineThreads"));
    }

    /// The docs/config.md#configuration-reference example parses into the typed structs, comments and trailing commas included.
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

    /// Codex and Responses backends parse with defaults and their keys.
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
        // How the overrides render as `-c key=<TOML>` arguments is the Codex backend's job:
        // `backend::codex_config` tests it on this same configuration.
        assert_eq!(codex.config.len(), 4);
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
                threads: ResponsesThreadKind::Conversation,
                idle_timeout_ms: None,
                turn_timeout_ms: None,
                max_reply_bytes: None,
                max_event_bytes: None,
            })
        );
        assert_eq!(c.backend.host_kind(), HostKind::Responses);
    }

    /// The Responses thread kind and stream limits are read from the `backend` section.
    #[test]
    fn responses_threads_and_limits_parse() {
        let c = Config::parse(
            r#"{backend: {kind: "responses", baseUrl: "http://127.0.0.1:9", model: "m",
                threads: "chain", idleTimeoutMs: 5000, turnTimeoutMs: 60000,
                maxReplyBytes: 1024, maxEventBytes: 2048}}"#,
            "c.json5",
        )
        .unwrap();
        let BackendConfig::Responses(r) = c.backend else {
            panic!("not a responses backend");
        };
        assert_eq!(r.threads, ResponsesThreadKind::Chain);
        assert_eq!(r.idle_timeout_ms, Some(5000));
        assert_eq!(r.turn_timeout_ms, Some(60000));
        assert_eq!(r.max_reply_bytes, Some(1024));
        assert_eq!(r.max_event_bytes, Some(2048));
        assert!(Config::parse(
            r#"{backend: {kind: "responses", baseUrl: "u", model: "m", threads: "rope"}}"#,
            "c.json5"
        )
        .is_err());
    }

    /// A `store.url` that does not parse is refused at its place in the file, without the
    /// value (it may hold a password); a parsable one, URL or key/value, is accepted.
    #[test]
    fn unparsable_store_url_is_located_and_not_shown() {
        for url in [
            "postgres:/root:MalSecret1@127.0.0.1:5433/db",
            "not a url MalSecret1",
        ] {
            let source =
                format!("{{\n  store: {{\n    kind: \"postgres\",\n    url: \"{url}\",\n  }},\n}}");
            let error = err(&source);
            assert!(
                error.starts_with("ctxbridge.json5:4:10: store.url: not a PostgreSQL"),
                "{error}"
            );
            assert!(!error.contains("MalSecret1"), "{error}");
        }
        for url in [
            "postgres://u:p@127.0.0.1:5432/db",
            "host=127.0.0.1 user=u password=p dbname=db",
        ] {
            let source = format!("{{store: {{kind: \"postgres\", url: \"{url}\"}}}}");
            assert!(Config::parse(&source, "test.json5").is_ok(), "{url}");
        }
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
        // The mock backend has no settings, and says so (not serde's "there are no fields").
        let src = "{ backend: { kind: 'mock', bogus: 'm' } }";
        assert_eq!(
            err(src),
            "ctxbridge.json5:1:28: backend.bogus: the mock backend takes no settings (`bogus` is not one); remove it, or pick another `backend.kind`"
        );
    }

    /// `backend.url` takes ws://HOST:PORT or unix://PATH; anything else, and the keys that
    /// only shape a spawned child beside it, are refused with the key and the reason.
    #[test]
    fn backend_url_is_checked() {
        use crate::config::BackendUrl;
        let url_of = |src: &str| match Config::parse(src, "c.json5").unwrap().backend {
            BackendConfig::Codex(codex) => codex.url,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            url_of("{ backend: { kind: 'codex', url: 'ws://127.0.0.1:4500' } }"),
            Some(BackendUrl::Ws("ws://127.0.0.1:4500/".into()))
        );
        assert_eq!(
            url_of("{ backend: { kind: 'codex', url: 'unix:///run/codex.sock' } }"),
            Some(BackendUrl::Unix("/run/codex.sock".into()))
        );
        assert_eq!(url_of("{ backend: { kind: 'codex' } }"), None);
        for (url, says) in [
            ("ws://127.0.0.1", "names no port"),
            ("wss://example.com:443", "wss:// is not supported"),
            ("http://127.0.0.1:80", "unsupported scheme `http`"),
            ("unix://", "needs the socket's path"),
            ("127.0.0.1:4500", "expected ws://HOST:PORT or unix://PATH"),
        ] {
            let e = err(&format!("{{ backend: {{ kind: 'codex', url: '{url}' }} }}"));
            assert!(e.contains("backend.url") && e.contains(says), "{url}: {e}");
        }
        let e =
            err("{ backend: { kind: 'codex', url: 'ws://127.0.0.1:1', config: { model: 'm' } } }");
        assert!(
            e.contains("backend.config") && e.contains("already runs"),
            "{e}"
        );
        let e = err("{ backend: { kind: 'codex', url: 'ws://127.0.0.1:1', codexHome: 'h' } }");
        assert!(e.contains("backend.codexHome"), "{e}");
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

    /// An explicitly named file that does not exist is an error naming it.
    #[test]
    fn explicit_missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json5");
        let e = Config::load(Some(&missing)).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }));
        assert!(e.to_string().contains("nope.json5"), "{e}");
    }

    /// A file over the size limit is refused before it is parsed, naming the file and both
    /// sizes; one at the limit is read.
    #[test]
    fn an_oversized_config_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json5");
        let padding = " ".repeat(usize::try_from(MAX_CONFIG_BYTES).unwrap() - 2);
        std::fs::write(&path, format!("{{{padding}}}")).unwrap();
        assert!(Config::load(Some(&path)).is_ok());
        std::fs::write(&path, format!("{{{padding} }}")).unwrap();
        let e = Config::load(Some(&path)).unwrap_err();
        assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("big.json5"), "{text}");
        assert!(
            text.contains(&format!("{} bytes", MAX_CONFIG_BYTES + 1)),
            "{text}"
        );
        assert!(text.contains(&MAX_CONFIG_BYTES.to_string()), "{text}");
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

    /// A typed-deserialization error keeps serde's error as its source, and a syntax error
    /// keeps the parser's full report; the one-line messages stay as they were.
    #[test]
    fn errors_keep_their_sources() {
        use std::error::Error as _;
        let e = Config::parse("{ store: { path: 5 } }", "c.json5").unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { .. }));
        assert_eq!(
            e.source().unwrap().to_string(),
            "invalid type: integer `5`, expected path string"
        );
        let e = Config::parse("{ agent: ", "c.json5").unwrap_err();
        assert!(matches!(e, ConfigError::Syntax { .. }));
        assert!(e.source().unwrap().to_string().contains('\n'));
    }
}
