//! The Codex backend's reading of the configuration's `backend.config`: each dotted key becomes a
//! `-c key=<TOML value>` override of the Codex app-server. The configuration owns the values; the
//! conversion to the Codex client's [`ConfigValue`] lives here, with the backend.

use std::time::Duration;

use codex_app_server_client::{AppServerConfig, ConfigValue, TurnLimits};

use crate::backend::codex_home::codex_home;
use crate::config::{CodexBackendConfig, CodexConfigValue, Config};

/// The app-server `codex` (the configuration's `backend`) describes, run as `command` (the
/// caller resolves the program): `CODEX_HOME` for this configuration, the `-c` overrides and the
/// turn limits, started in the current directory. The one conversion from the configuration's
/// Codex settings to the Codex client's; `ctxbridge turn` and `serve` both start Codex from it.
pub fn app_server_config(
    config: &Config,
    codex: &CodexBackendConfig,
    command: Vec<String>,
) -> AppServerConfig {
    let home = codex_home(config, codex.codex_home.as_deref()).path;
    let app_server = AppServerConfig::new(home)
        .with_command(command)
        .with_overrides(codex_overrides(codex))
        .with_turn_limits(turn_limits(codex));
    match std::env::current_dir() {
        Ok(cwd) => app_server.with_cwd(cwd),
        Err(_) => app_server,
    }
}

/// A `backend.config` value as the Codex client passes it.
pub fn codex_value(value: &CodexConfigValue) -> ConfigValue {
    match value {
        CodexConfigValue::String(s) => ConfigValue::String(s.clone()),
        CodexConfigValue::Integer(i) => ConfigValue::Integer(*i),
        CodexConfigValue::Float(f) => ConfigValue::Float(*f),
        CodexConfigValue::Bool(b) => ConfigValue::Bool(*b),
    }
}

/// The configured overrides as the Codex client takes them, in key order.
pub fn codex_overrides(config: &CodexBackendConfig) -> Vec<(String, ConfigValue)> {
    config
        .config
        .iter()
        .map(|(key, value)| (key.clone(), codex_value(value)))
        .collect()
}

/// The turn limits `backend.idleTimeoutMs`, `backend.turnTimeoutMs` and
/// `backend.maxReplyBytes` set; each unset one keeps the client's default (300 s idle, 30 min
/// per turn, 16 MiB of reply).
pub fn turn_limits(config: &CodexBackendConfig) -> TurnLimits {
    let defaults = TurnLimits::default();
    TurnLimits {
        idle_timeout: config
            .idle_timeout_ms
            .map_or(defaults.idle_timeout, Duration::from_millis),
        turn_deadline: config
            .turn_timeout_ms
            .map_or(defaults.turn_deadline, Duration::from_millis),
        max_reply_bytes: config
            .max_reply_bytes
            .map_or(defaults.max_reply_bytes, |b| {
                usize::try_from(b).unwrap_or(usize::MAX)
            }),
    }
}

/// The `-c key=value` arguments for the configured overrides, in key order.
pub fn override_args(config: &CodexBackendConfig) -> Vec<String> {
    config
        .config
        .iter()
        .flat_map(|(key, value)| {
            [
                "-c".to_string(),
                format!("{key}={}", codex_value(value).to_toml()),
            ]
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::{BackendConfig, Config};

    /// Codex overrides from the configuration render as `-c key=<TOML>` arguments in key order.
    #[test]
    fn overrides_render_as_toml_arguments() {
        let c = Config::parse(
            r#"{backend: {kind: "codex", codexHome: "/tmp/ch", config: {"model_provider": "mock", "model_providers.mock.request_max_retries": 0, "features.x": true, "t": 0.5}}}"#,
            "c.json5",
        )
        .unwrap();
        let BackendConfig::Codex(codex) = &c.backend else {
            panic!("not codex: {:?}", c.backend)
        };
        assert_eq!(
            override_args(codex),
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
        assert_eq!(codex_overrides(codex).len(), 4);
    }

    /// The configured turn limits reach the client's TurnLimits; unset ones keep its
    /// defaults.
    #[test]
    fn turn_limits_come_from_the_configuration() {
        let c = Config::parse(
            r#"{backend: {kind: "codex", idleTimeoutMs: 1500, maxReplyBytes: 4096}}"#,
            "c.json5",
        )
        .unwrap();
        let BackendConfig::Codex(codex) = &c.backend else {
            panic!("not codex: {:?}", c.backend)
        };
        let limits = turn_limits(codex);
        assert_eq!(limits.idle_timeout, Duration::from_millis(1500));
        assert_eq!(limits.max_reply_bytes, 4096);
        assert_eq!(limits.turn_deadline, TurnLimits::DEFAULT_TURN_DEADLINE);
        let c = Config::parse(r#"{backend: {kind: "codex", turnTimeoutMs: 60000}}"#, "c").unwrap();
        let BackendConfig::Codex(codex) = &c.backend else {
            panic!("not codex")
        };
        assert_eq!(turn_limits(codex).turn_deadline, Duration::from_secs(60));
        assert_eq!(
            turn_limits(&CodexBackendConfig::default()),
            TurnLimits::default()
        );
    }

    /// TOML rendering escapes quotes, backslashes and control characters.
    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(
            codex_value(&CodexConfigValue::String("a\"b\\c\nd\u{1}".into())).to_toml(),
            r#""a\"b\\c\nd\u0001""#
        );
        assert_eq!(codex_value(&CodexConfigValue::Float(2.0)).to_toml(), "2.0");
        assert_eq!(codex_value(&CodexConfigValue::Integer(-3)).to_toml(), "-3");
    }
}
