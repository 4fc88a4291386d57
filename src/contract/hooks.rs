//! Engine hooks (docs/engine-protocol.md#the-engine-process-protocol, OpenClaw's `api.on`): the hook names this host fires and the
//! result of `before_prompt_build`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// After the engine is initialised (a notification; `{port}`).
pub const HOOK_GATEWAY_START: &str = "gateway_start";
/// Before the engine is disposed (`{reason}`).
pub const HOOK_GATEWAY_STOP: &str = "gateway_stop";
/// Before a session's first `bootstrap` (`{sessionId, sessionKey?}`).
pub const HOOK_SESSION_START: &str = "session_start";
/// When a session is reset (`ctxbridge reset`, `/reset` in chat), before its state is dropped:
/// `{sessionFile?, messages?, reason?}` (OpenClaw's `PluginHookBeforeResetEvent`).
pub const HOOK_BEFORE_RESET: &str = "before_reset";
/// When a session ends (reset, or removed by the retention sweep): `{sessionId, sessionKey?,
/// messageCount, durationMs?, reason?, sessionFile?, transcriptArchived?, nextSessionId?}`
/// (OpenClaw's `PluginHookSessionEndEvent`).
pub const HOOK_SESSION_END: &str = "session_end";
/// After `assemble`, every turn (`{prompt, messages}`); answers [`PromptBuildResult`].
pub const HOOK_BEFORE_PROMPT_BUILD: &str = "before_prompt_build";

/// Why a session ended (`session_end`'s `reason`; a subset of OpenClaw's
/// `PluginHookSessionEndReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEndReason {
    /// The session was reset (`/reset`, `ctxbridge reset`).
    Reset,
    /// The session was idle longer than `store.retention` and its state was swept.
    Idle,
}

impl SessionEndReason {
    /// The wire value (`"reset"`, `"idle"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEndReason::Reset => "reset",
            SessionEndReason::Idle => "idle",
        }
    }
}

/// The params of a `hooks/<name>` call: the hook's event and its context.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HookCall {
    /// The event (hook-specific).
    pub event: Value,
    /// The context (`sessionId`, `sessionKey`, `agentId`, …).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub ctx: Value,
}

/// What `before_prompt_build` answers: text around the engine's part of the developer
/// instructions and around this turn's prompt. Other fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptBuildResult {
    /// Goes before the engine's `systemPromptAddition` in the developer instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend_system_context: Option<String>,
    /// Goes after the engine's `systemPromptAddition` in the developer instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_system_context: Option<String>,
    /// Goes before this turn's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend_context: Option<String>,
    /// Goes after this turn's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_context: Option<String>,
    /// Other fields (`systemPrompt`, `toolsAllow`, …), not applied by this host.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `parts` that are not blank, trimmed, joined with a blank line; `None` when all are blank.
pub fn join_blocks<'a>(parts: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    let kept: Vec<&str> = parts
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    (!kept.is_empty()).then(|| kept.join("\n\n"))
}

impl PromptBuildResult {
    /// The engine's part of the developer instructions: `prependSystemContext`, the
    /// `systemPromptAddition`, `appendSystemContext`.
    pub fn system_part(&self, addition: Option<&str>) -> Option<String> {
        join_blocks([
            self.prepend_system_context.as_deref(),
            addition,
            self.append_system_context.as_deref(),
        ])
    }

    /// This turn's prompt with `prependContext` before it and `appendContext` after it (the
    /// prompt itself is kept as given).
    pub fn decorate_prompt(&self, prompt: &str) -> String {
        let before = join_blocks([self.prepend_context.as_deref()]);
        let after = join_blocks([self.append_context.as_deref()]);
        let mut out = String::new();
        if let Some(b) = before {
            out.push_str(&b);
            out.push_str("\n\n");
        }
        out.push_str(prompt);
        if let Some(a) = after {
            out.push_str("\n\n");
            out.push_str(&a);
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The result decodes from the host's camelCase JSON; the system part wraps the addition;
    /// the prompt is wrapped by the context blocks; blank parts are left out.
    #[test]
    fn prompt_build_result_wraps_instructions_and_prompt() {
        let r: PromptBuildResult = serde_json::from_value(json!({
            "prependSystemContext": "Before.",
            "appendSystemContext": " ",
            "prependContext": "Summary: x",
            "toolsAllow": ["a"],
        }))
        .unwrap();
        assert_eq!(r.extra["toolsAllow"], json!(["a"]));
        assert_eq!(
            r.system_part(Some("Addition.")).unwrap(),
            "Before.\n\nAddition."
        );
        assert_eq!(r.system_part(None).unwrap(), "Before.");
        assert_eq!(r.decorate_prompt("Hi"), "Summary: x\n\nHi");
        let empty = PromptBuildResult::default();
        assert_eq!(empty.system_part(None), None);
        assert_eq!(empty.decorate_prompt("Hi"), "Hi");
        let after = PromptBuildResult {
            append_context: Some("After.".into()),
            ..Default::default()
        };
        assert_eq!(after.decorate_prompt("Hi"), "Hi\n\nAfter.");
    }
}
