//! The Codex backend's reading of the configuration's `backend.config`: each dotted key becomes a
//! `-c key=<TOML value>` override of the Codex app-server. The configuration owns the values; the
//! conversion to the Codex client's [`ConfigValue`] lives here, with the backend.

use codex_app_server_client::ConfigValue;

use crate::config::{CodexBackendConfig, CodexConfigValue};

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
