//! Engine commands (docs/engine-protocol.md#the-engine-process-protocol): slash commands an engine registers (an OpenClaw plugin's
//! `api.registerCommand`), run by the user through the host with `commands/call`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A slash command an engine registered (`initialize` result `commands[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineCommand {
    /// The command's name, without the leading `/`.
    pub name: String,
    /// What the command does, for help lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the command takes arguments after its name.
    #[serde(default)]
    pub accepts_args: bool,
}

/// `commands/call` params: one run of an engine command.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandCallParams {
    /// The command's name, without the leading `/`.
    pub name: String,
    /// The text after the command's name (trimmed; absent when there is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// The session the command runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The host's stable key of that session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
}

/// What a command answers: OpenClaw's reply payload (`{text?, isError?, mediaUrl?, …}`),
/// kept whole.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CommandReply(pub Value);

impl CommandReply {
    /// The reply's `text`, if it has one.
    pub fn text(&self) -> Option<&str> {
        self.0.get("text").and_then(Value::as_str)
    }

    /// Whether the reply says the command failed (`isError: true`).
    pub fn is_error(&self) -> bool {
        self.0.get("isError").and_then(Value::as_bool) == Some(true)
    }

    /// What to show the user: the `text`, else the reply as JSON (nothing for an empty reply).
    pub fn display(&self) -> String {
        match self.text() {
            Some(text) => text.to_string(),
            None if self.0.is_null() || self.0.as_object().is_some_and(|o| o.is_empty()) => {
                String::new()
            }
            None => self.0.to_string(),
        }
    }
}

/// Splits a chat line `/name args` into the command name and its trimmed arguments; `None`
/// when the line is not a slash command.
pub fn parse_command_line(line: &str) -> Option<(&str, Option<&str>)> {
    let rest = line.trim().strip_prefix('/')?;
    let (name, args) = match rest.split_once(char::is_whitespace) {
        Some((name, args)) => (name, Some(args.trim()).filter(|a| !a.is_empty())),
        None => (rest, None),
    };
    (!name.is_empty()).then_some((name, args))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A slash line splits into name and trimmed arguments; other lines are not commands.
    #[test]
    fn command_lines_split_into_name_and_args() {
        assert_eq!(parse_command_line("/summary"), Some(("summary", None)));
        assert_eq!(
            parse_command_line("  /recall  red bicycle "),
            Some(("recall", Some("red bicycle")))
        );
        assert_eq!(parse_command_line("/note   "), Some(("note", None)));
        assert_eq!(parse_command_line("hello /x"), None);
        assert_eq!(parse_command_line("/"), None);
    }

    /// A reply shows its text, else its JSON; an empty reply shows nothing.
    #[test]
    fn replies_display_text_or_json() {
        let text = CommandReply(json!({"text": "hi", "isError": true}));
        assert_eq!(text.display(), "hi");
        assert!(text.is_error());
        let other = CommandReply(json!({"mediaUrl": "x"}));
        assert_eq!(other.display(), r#"{"mediaUrl":"x"}"#);
        assert!(!other.is_error());
        assert_eq!(CommandReply(json!({})).display(), "");
        assert_eq!(CommandReply(Value::Null).display(), "");
    }
}
