//! The notifications the app-server sends, as far as this client knows them.

/// The notifications of the app-server versions this client is tested against (0.169.0 and
/// 0.171.0: `codex app-server generate-json-schema`, `ServerNotification`), routed or
/// deliberately ignored. Anything else is logged once per method at debug level, so a
/// protocol change is visible when looked for without alarming anyone at every turn.
pub(crate) const KNOWN_NOTIFICATIONS: &[&str] = &[
    "account/gatewayOAuth/changed",
    "account/login/completed",
    "account/rateLimits/updated",
    "account/updated",
    "app/list/updated",
    "autoApprovalReview/strictReviewRequired",
    "command/exec/outputDelta",
    "configWarning",
    "deprecationNotice",
    "error",
    "externalAgentConfig/import/completed",
    "externalAgentConfig/import/progress",
    "fs/changed",
    "fuzzyFileSearch/sessionCompleted",
    "fuzzyFileSearch/sessionUpdated",
    "guardianWarning",
    "hook/completed",
    "hook/started",
    "item/agentMessage/delta",
    "item/autoApprovalReview/completed",
    "item/autoApprovalReview/started",
    "item/commandExecution/outputDelta",
    "item/commandExecution/terminalInteraction",
    "item/completed",
    "item/fileChange/outputDelta",
    "item/fileChange/patchUpdated",
    "item/mcpToolCall/progress",
    "item/plan/delta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/textDelta",
    "item/started",
    "mcpServer/event/stream/notification",
    "mcpServer/oauthLogin/completed",
    "mcpServer/startupStatus/updated",
    "model/rerouted",
    "model/safetyBuffering/updated",
    "model/verification",
    "modelProvider/authRecoveryCompleted",
    "modelProvider/authRecoveryStarted",
    "process/exited",
    "process/outputDelta",
    "project/changed",
    "remoteControl/status/changed",
    "serverRequest/resolved",
    "skills/changed",
    "thread/archived",
    "thread/attachment/updated",
    "thread/closed",
    "thread/compacted",
    "thread/deleted",
    "thread/environment/connected",
    "thread/environment/disconnected",
    "thread/goal/cleared",
    "thread/goal/updated",
    "thread/name/updated",
    "thread/prediction/updated",
    "thread/project/updated",
    "thread/queue/changed",
    "thread/readState/changed",
    "thread/realtime/closed",
    "thread/realtime/error",
    "thread/realtime/item/completed",
    "thread/realtime/item/started",
    "thread/realtime/item/transcript/delta",
    "thread/realtime/itemAdded",
    "thread/realtime/outputAudio/delta",
    "thread/realtime/sdp",
    "thread/realtime/started",
    "thread/realtime/transcript/delta",
    "thread/realtime/transcript/done",
    "thread/reverted",
    "thread/search/partial",
    "thread/section/changed",
    "thread/settings/updated",
    "thread/started",
    "thread/status/changed",
    "thread/tokenUsage/updated",
    "thread/unarchived",
    "turn/completed",
    "turn/diff/updated",
    "turn/moderationMetadata",
    "turn/plan/updated",
    "turn/started",
    "warning",
    "windows/worldWritableWarning",
    "windowsSandbox/setupCompleted",
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::Value;

    /// Every notification the installed Codex declares (`generate-json-schema`) is known, so
    /// none of its ordinary traffic is reported as unknown (0.171.0's `thread/goal/cleared`
    /// came with every turn). Skips loudly without a Codex.
    #[test]
    fn the_installed_codex_has_no_unknown_notifications() {
        let Some(codex) = crate::config::locate_codex_binary() else {
            eprintln!("\n!!!!!!!! SKIPPED known-notifications check: no codex binary !!!!!!!!\n");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new(&codex)
            .args(["app-server", "generate-json-schema", "--out"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{codex:?} generate-json-schema failed");
        let text = std::fs::read_to_string(dir.path().join("ServerNotification.json")).unwrap();
        let schema: Value = serde_json::from_str(&text).unwrap();
        fn methods(value: &Value, out: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::Array(names)) = map
                        .get("properties")
                        .and_then(|p| p.get("method"))
                        .and_then(|m| m.get("enum"))
                    {
                        out.extend(names.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                    map.values().for_each(|v| methods(v, out));
                }
                Value::Array(items) => items.iter().for_each(|v| methods(v, out)),
                _ => {}
            }
        }
        let mut declared = Vec::new();
        methods(&schema, &mut declared);
        assert!(declared.len() > 20, "{declared:?}");
        let unknown: Vec<&String> = declared
            .iter()
            .filter(|m| !KNOWN_NOTIFICATIONS.contains(&m.as_str()))
            .collect();
        assert!(unknown.is_empty(), "unknown to this client: {unknown:?}");
    }
}
