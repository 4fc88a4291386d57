//! The runtimeSettings snapshot, schemaVersion 1 (docs/architecture.md#runtimesettings).
//!
//! [`RuntimeSettingsBuilder`] normalises what the host knows into the contract's shape: blank
//! strings become `null`, reasons become one of the closed set of codes (raw error text never
//! leaks through), the mode is derived, and a reason that does not match the mode is dropped.

use crate::backend::{is_overflow_message, BackendError};
use crate::contract::{
    ContextEngineSelection, Diagnostics, ExecutionHost, Limits, ModelInfo, ReasonCode, RuntimeInfo,
    RuntimeMode, RuntimeSettings, SelectionSource,
};

/// `runtimeSettings.schemaVersion`.
pub const RUNTIME_SETTINGS_SCHEMA_VERSION: u32 = 1;
/// `runtime.host`.
pub const RUNTIME_HOST: &str = "ctxbridge";

/// Maps a raw error text or category to a reason code (docs/architecture.md#runtimesettings). The codes themselves map to
/// themselves; anything unrecognised is `unknown`.
pub fn classify_reason(raw: &str) -> ReasonCode {
    let text = raw.trim().to_ascii_lowercase();
    let exact = match text.as_str() {
        "provider_timeout" => Some(ReasonCode::ProviderTimeout),
        "provider_unavailable" => Some(ReasonCode::ProviderUnavailable),
        "rate_limited" => Some(ReasonCode::RateLimited),
        "context_overflow" => Some(ReasonCode::ContextOverflow),
        "runtime_unavailable" => Some(ReasonCode::RuntimeUnavailable),
        "unknown" => Some(ReasonCode::Unknown),
        _ => None,
    };
    if let Some(code) = exact {
        return code;
    }
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let status = |codes: &[&str]| codes.iter().any(|c| contains_status_code(&text, c));
    if is_overflow_message(&text) || has(&["context_length_exceeded", "prompt is too long"]) {
        ReasonCode::ContextOverflow
    } else if has(&[
        "rate limit",
        "rate_limit",
        "ratelimit",
        "too many requests",
        "quota",
    ]) || status(&["429"])
    {
        ReasonCode::RateLimited
    } else if has(&["timeout", "timed out", "deadline exceeded", "etimedout"]) {
        ReasonCode::ProviderTimeout
    } else if has(&[
        "runtime unavailable",
        "runtime_unavailable",
        "app-server",
        "process exited",
        "spawn",
        "broken pipe",
    ]) {
        ReasonCode::RuntimeUnavailable
    } else if status(&["500", "502", "503", "504"])
        || has(&[
            "unavailable",
            "bad gateway",
            "overloaded",
            "connection refused",
            "econnrefused",
            "connection reset",
            "server error",
        ])
    {
        ReasonCode::ProviderUnavailable
    } else {
        ReasonCode::Unknown
    }
}

/// `code` appears in `text` as a number of its own (not inside `1429` or `5030ms`).
fn contains_status_code(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// Maps a backend error to a reason code: the error's kind first, its text second.
pub fn reason_for_backend_error(error: &BackendError) -> ReasonCode {
    match error {
        BackendError::ContextOverflow { .. } => ReasonCode::ContextOverflow,
        BackendError::Unavailable { message, .. } => match classify_reason(message) {
            ReasonCode::Unknown => ReasonCode::ProviderUnavailable,
            code => code,
        },
        other => classify_reason(&other.to_string()),
    }
}

/// Builds a [`RuntimeSettings`] snapshot (plain consuming builder). Everything not set is
/// `null`; the selection source defaults to `unknown`.
#[derive(Debug, Clone, Default)]
pub struct RuntimeSettingsBuilder {
    harness_id: Option<String>,
    runtime_id: Option<String>,
    selected_id: Option<String>,
    source: Option<SelectionSource>,
    host_id: Option<String>,
    host_label: Option<String>,
    model_requested: Option<String>,
    model_resolved: Option<String>,
    model_provider: Option<String>,
    model_family: Option<String>,
    prompt_token_budget: Option<u64>,
    max_output_tokens: Option<u64>,
    fallback_reason: Option<ReasonCode>,
    degraded_reason: Option<ReasonCode>,
}

fn clean(value: Option<impl Into<String>>) -> Option<String> {
    value
        .map(Into::into)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl RuntimeSettingsBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `runtime.harnessId`: which harness runs the turn (e.g. `"threaded"`).
    pub fn harness_id(mut self, id: Option<impl Into<String>>) -> Self {
        self.harness_id = clean(id);
        self
    }

    /// `runtime.runtimeId`: which runtime instance (e.g. the backend kind).
    pub fn runtime_id(mut self, id: Option<impl Into<String>>) -> Self {
        self.runtime_id = clean(id);
        self
    }

    /// `contextEngineSelection`.
    pub fn selection(
        mut self,
        selected_id: Option<impl Into<String>>,
        source: SelectionSource,
    ) -> Self {
        self.selected_id = clean(selected_id);
        self.source = Some(source);
        self
    }

    /// `executionHost`.
    pub fn execution_host(
        mut self,
        id: Option<impl Into<String>>,
        label: Option<impl Into<String>>,
    ) -> Self {
        self.host_id = clean(id);
        self.host_label = clean(label);
        self
    }

    pub fn model_requested(mut self, model: Option<impl Into<String>>) -> Self {
        self.model_requested = clean(model);
        self
    }

    pub fn model_resolved(mut self, model: Option<impl Into<String>>) -> Self {
        self.model_resolved = clean(model);
        self
    }

    pub fn model_provider(mut self, provider: Option<impl Into<String>>) -> Self {
        self.model_provider = clean(provider);
        self
    }

    pub fn model_family(mut self, family: Option<impl Into<String>>) -> Self {
        self.model_family = clean(family);
        self
    }

    /// `limits.promptTokenBudget`.
    pub fn prompt_token_budget(mut self, budget: Option<u64>) -> Self {
        self.prompt_token_budget = budget;
        self
    }

    /// `limits.maxOutputTokens`.
    pub fn max_output_tokens(mut self, tokens: Option<u64>) -> Self {
        self.max_output_tokens = tokens;
        self
    }

    /// The run fell back (to another model/provider) for this reason.
    pub fn fallback_reason(mut self, reason: ReasonCode) -> Self {
        self.fallback_reason = Some(reason);
        self
    }

    /// The run fell back; `raw` (an error text or category) is classified, never kept.
    pub fn fallback_reason_text(self, raw: &str) -> Self {
        self.fallback_reason(classify_reason(raw))
    }

    /// The run is degraded for this reason.
    pub fn degraded_reason(mut self, reason: ReasonCode) -> Self {
        self.degraded_reason = Some(reason);
        self
    }

    /// The run is degraded; `raw` is classified, never kept.
    pub fn degraded_reason_text(self, raw: &str) -> Self {
        self.degraded_reason(classify_reason(raw))
    }

    /// The mode (docs/architecture.md#runtimesettings): degraded if a degraded reason, else fallback if a fallback reason or
    /// requested ≠ resolved model (both known), else normal.
    fn mode(&self) -> RuntimeMode {
        let model_switched = matches!(
            (&self.model_requested, &self.model_resolved),
            (Some(requested), Some(resolved)) if requested != resolved
        );
        if self.degraded_reason.is_some() {
            RuntimeMode::Degraded
        } else if self.fallback_reason.is_some() || model_switched {
            RuntimeMode::Fallback
        } else {
            RuntimeMode::Normal
        }
    }

    pub fn build(self) -> RuntimeSettings {
        let mode = self.mode();
        RuntimeSettings {
            schema_version: RUNTIME_SETTINGS_SCHEMA_VERSION,
            runtime: RuntimeInfo {
                host: RUNTIME_HOST.to_string(),
                mode,
                harness_id: self.harness_id,
                runtime_id: self.runtime_id,
            },
            context_engine_selection: ContextEngineSelection {
                selected_id: self.selected_id,
                source: self.source.unwrap_or(SelectionSource::Unknown),
            },
            execution_host: ExecutionHost {
                id: self.host_id,
                label: self.host_label,
            },
            model: ModelInfo {
                requested: self.model_requested,
                resolved: self.model_resolved,
                provider: self.model_provider,
                family: self.model_family,
            },
            limits: Limits {
                prompt_token_budget: self.prompt_token_budget,
                max_output_tokens: self.max_output_tokens,
            },
            diagnostics: Diagnostics {
                fallback_reason: self
                    .fallback_reason
                    .filter(|_| mode == RuntimeMode::Fallback),
                degraded_reason: self
                    .degraded_reason
                    .filter(|_| mode == RuntimeMode::Degraded),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    const NONE: Option<&str> = None;

    /// Raw texts and categories map to the closed set; unrecognised text is `unknown`.
    #[test]
    fn reasons_are_classified() {
        let table: &[(&str, ReasonCode)] = &[
            ("provider_timeout", ReasonCode::ProviderTimeout),
            ("RATE_LIMITED", ReasonCode::RateLimited),
            ("unknown", ReasonCode::Unknown),
            ("request timed out after 30s", ReasonCode::ProviderTimeout),
            ("HTTP 429 Too Many Requests", ReasonCode::RateLimited),
            ("Rate limit reached for gpt-x", ReasonCode::RateLimited),
            (
                "This model's maximum context length is 8192 tokens",
                ReasonCode::ContextOverflow,
            ),
            (
                "Your input exceeds the context window",
                ReasonCode::ContextOverflow,
            ),
            ("503 Service Unavailable", ReasonCode::ProviderUnavailable),
            (
                "connection refused (os error 111)",
                ReasonCode::ProviderUnavailable,
            ),
            (
                "codex app-server process exited with status 1",
                ReasonCode::RuntimeUnavailable,
            ),
            ("something odd: secret=abc", ReasonCode::Unknown),
            ("", ReasonCode::Unknown),
            ("used 14290 tokens, waited 5030ms", ReasonCode::Unknown),
            ("upstream returned 500", ReasonCode::ProviderUnavailable),
        ];
        for (raw, code) in table {
            assert_eq!(classify_reason(raw), *code, "{raw:?}");
        }
    }

    /// Backend errors map by kind first.
    #[test]
    fn backend_errors_are_classified() {
        let overflow = BackendError::ContextOverflow {
            operation: "turn",
            message: "boom".into(),
        };
        assert_eq!(
            reason_for_backend_error(&overflow),
            ReasonCode::ContextOverflow
        );
        let dead = BackendError::Unavailable {
            operation: "turn",
            message: "pipe closed".into(),
        };
        assert_eq!(
            reason_for_backend_error(&dead),
            ReasonCode::ProviderUnavailable
        );
        let rate = BackendError::TurnFailed {
            operation: "turn",
            message: "429 rate limit".into(),
        };
        assert_eq!(reason_for_backend_error(&rate), ReasonCode::RateLimited);
    }

    /// Mode derivation and the reason/mode invariants, table-driven.
    #[test]
    fn mode_derivation() {
        struct Case {
            requested: Option<&'static str>,
            resolved: Option<&'static str>,
            fallback: Option<&'static str>,
            degraded: Option<&'static str>,
            mode: RuntimeMode,
            fallback_out: Option<ReasonCode>,
            degraded_out: Option<ReasonCode>,
        }
        let cases = [
            Case {
                requested: None,
                resolved: None,
                fallback: None,
                degraded: None,
                mode: RuntimeMode::Normal,
                fallback_out: None,
                degraded_out: None,
            },
            Case {
                requested: Some("m"),
                resolved: Some("m"),
                fallback: None,
                degraded: None,
                mode: RuntimeMode::Normal,
                fallback_out: None,
                degraded_out: None,
            },
            Case {
                requested: Some("m"),
                resolved: None,
                fallback: None,
                degraded: None,
                mode: RuntimeMode::Normal,
                fallback_out: None,
                degraded_out: None,
            },
            Case {
                requested: Some("m"),
                resolved: Some(" "),
                fallback: None,
                degraded: None,
                mode: RuntimeMode::Normal,
                fallback_out: None,
                degraded_out: None,
            },
            Case {
                requested: Some("a"),
                resolved: Some("b"),
                fallback: None,
                degraded: None,
                mode: RuntimeMode::Fallback,
                fallback_out: None,
                degraded_out: None,
            },
            Case {
                requested: Some("a"),
                resolved: Some("a"),
                fallback: Some("429"),
                degraded: None,
                mode: RuntimeMode::Fallback,
                fallback_out: Some(ReasonCode::RateLimited),
                degraded_out: None,
            },
            Case {
                requested: None,
                resolved: None,
                fallback: Some("timed out"),
                degraded: Some("overloaded"),
                mode: RuntimeMode::Degraded,
                fallback_out: None,
                degraded_out: Some(ReasonCode::ProviderUnavailable),
            },
            Case {
                requested: Some("a"),
                resolved: Some("b"),
                fallback: None,
                degraded: Some("weird"),
                mode: RuntimeMode::Degraded,
                fallback_out: None,
                degraded_out: Some(ReasonCode::Unknown),
            },
        ];
        for (i, c) in cases.iter().enumerate() {
            let mut b = RuntimeSettingsBuilder::new()
                .model_requested(c.requested)
                .model_resolved(c.resolved);
            if let Some(raw) = c.fallback {
                b = b.fallback_reason_text(raw);
            }
            if let Some(raw) = c.degraded {
                b = b.degraded_reason_text(raw);
            }
            let s = b.build();
            assert_eq!(s.runtime.mode, c.mode, "case {i}");
            assert_eq!(s.diagnostics.fallback_reason, c.fallback_out, "case {i}");
            assert_eq!(s.diagnostics.degraded_reason, c.degraded_out, "case {i}");
        }
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
            if let Value::Object(map) = v {
                for (k, child) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(path.clone());
                    walk(&path, child, out);
                }
            }
        }
        walk("", v, &mut out);
        out.sort();
        out
    }

    /// An empty builder serialises every key, unknowns as null; mode and source are never null.
    #[test]
    fn nulls_are_never_omitted() {
        let v = serde_json::to_value(RuntimeSettingsBuilder::new().build()).unwrap();
        assert_eq!(
            v,
            json!({
                "schemaVersion": 1,
                "runtime": {"host": "ctxbridge", "mode": "normal", "harnessId": null, "runtimeId": null},
                "contextEngineSelection": {"selectedId": null, "source": "unknown"},
                "executionHost": {"id": null, "label": null},
                "model": {"requested": null, "resolved": null, "provider": null, "family": null},
                "limits": {"promptTokenBudget": null, "maxOutputTokens": null},
                "diagnostics": {"fallbackReason": null, "degradedReason": null}
            })
        );
        let full = RuntimeSettingsBuilder::new()
            .harness_id(Some("threaded"))
            .runtime_id(Some("mock"))
            .selection(Some("lossless"), SelectionSource::Configured)
            .execution_host(Some("mock"), Some("the mock backend"))
            .model_requested(Some("a"))
            .model_resolved(Some("b"))
            .model_provider(Some("openai"))
            .model_family(Some("gpt"))
            .prompt_token_budget(Some(1000))
            .max_output_tokens(Some(100))
            .fallback_reason(ReasonCode::ProviderTimeout)
            .build();
        let fv = serde_json::to_value(&full).unwrap();
        assert_eq!(keys(&fv), keys(&v), "same keys whether known or not");
        assert_eq!(fv["runtime"]["mode"], "fallback");
        assert_eq!(fv["diagnostics"]["fallbackReason"], "provider_timeout");
        assert_eq!(fv["contextEngineSelection"]["source"], "configured");
        let back: RuntimeSettings = serde_json::from_value(fv).unwrap();
        assert_eq!(back, full);
    }

    /// Blank strings normalise to null.
    #[test]
    fn blank_strings_are_null() {
        let s = RuntimeSettingsBuilder::new()
            .harness_id(Some("  "))
            .execution_host(Some(""), NONE)
            .selection(Some(""), SelectionSource::Default)
            .build();
        assert_eq!(s.runtime.harness_id, None);
        assert_eq!(s.execution_host.id, None);
        assert_eq!(s.context_engine_selection.selected_id, None);
        assert_eq!(s.context_engine_selection.source, SelectionSource::Default);
    }
}
