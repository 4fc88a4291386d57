//! What a `chat` line asks for: a pure function of the line and the engine's commands.

use crate::contract::{parse_command_line, EngineCommand};

/// The chat's own commands, as `/help` lists them.
pub const BUILT_IN: [(&str, &str); 5] = [
    ("/help", "list the commands"),
    (
        "/compact",
        "compact the session (the engine's compact, the backend's compactor)",
    ),
    ("/reset", "end the session; the next line starts a new one"),
    ("/quit", "leave (also /exit, Ctrl-D)"),
    ("//TEXT", "send /TEXT as a prompt"),
];

/// One line of input, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatLine<'a> {
    /// Blank: nothing to do.
    Empty,
    /// `/quit` or `/exit`.
    Quit,
    /// `/help`.
    Help,
    /// `/compact`.
    Compact,
    /// `/reset`.
    Reset,
    /// `/NAME ARGS` for a command the context engine registered.
    EngineCommand {
        name: &'a str,
        args: Option<&'a str>,
    },
    /// `/NAME` that names no command: refused, never sent to the model.
    Unknown { name: &'a str },
    /// Anything else, sent to the model as it is (a leading `//` loses one `/`).
    Prompt(&'a str),
}

/// Whether `name` looks like a command's name (letters, digits, `-`, `_`), so that a prompt
/// such as `/etc/hosts is missing` is still a prompt.
fn is_command_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '-' || c == '_')
}

/// Classifies `line` (already trimmed or not) against the engine's `commands`.
pub fn classify<'a>(line: &'a str, commands: &[String]) -> ChatLine<'a> {
    let line = line.trim();
    if line.is_empty() {
        return ChatLine::Empty;
    }
    if let Some(escaped) = line.strip_prefix("//") {
        return ChatLine::Prompt(&line[line.len() - escaped.len() - 1..]);
    }
    let Some((name, args)) = parse_command_line(line).filter(|(name, _)| is_command_name(name))
    else {
        return ChatLine::Prompt(line);
    };
    match name {
        "quit" | "exit" => ChatLine::Quit,
        "help" => ChatLine::Help,
        "compact" => ChatLine::Compact,
        "reset" => ChatLine::Reset,
        _ if commands.iter().any(|c| c == name) => ChatLine::EngineCommand { name, args },
        _ => ChatLine::Unknown { name },
    }
}

/// The text `/help` prints: the chat's commands, then the engine's.
pub fn help_text(commands: &[EngineCommand]) -> String {
    let mut text = String::from("commands:\n");
    for (name, what) in BUILT_IN {
        text.push_str(&format!("  {name:<12} {what}\n"));
    }
    for command in commands {
        let name = format!("/{}", command.name);
        let what = command.description.as_deref().unwrap_or("no description");
        text.push_str(&format!("  {name:<12} {what} (the context engine's)\n"));
    }
    text.push_str("any other line is a prompt for the model\n");
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn commands() -> Vec<String> {
        vec!["summary".to_string()]
    }

    /// The chat's own commands, the engine's, a typo and prompts are told apart.
    #[test]
    fn lines_are_classified() {
        let c = commands();
        assert_eq!(classify("  ", &c), ChatLine::Empty);
        assert_eq!(classify("/quit", &c), ChatLine::Quit);
        assert_eq!(classify("/exit", &c), ChatLine::Quit);
        assert_eq!(classify("/help", &c), ChatLine::Help);
        assert_eq!(classify("/compact", &c), ChatLine::Compact);
        assert_eq!(classify(" /reset ", &c), ChatLine::Reset);
        assert_eq!(
            classify("/summary last 3", &c),
            ChatLine::EngineCommand {
                name: "summary",
                args: Some("last 3")
            }
        );
        assert_eq!(classify("/hlep", &c), ChatLine::Unknown { name: "hlep" });
        assert_eq!(classify("/help me", &c), ChatLine::Help);
        assert_eq!(classify("hello there", &c), ChatLine::Prompt("hello there"));
        assert_eq!(
            classify("/etc/hosts is missing", &c),
            ChatLine::Prompt("/etc/hosts is missing")
        );
        assert_eq!(classify("//help", &c), ChatLine::Prompt("/help"));
        assert_eq!(classify("// x", &c), ChatLine::Prompt("/ x"));
        assert_eq!(classify("/", &c), ChatLine::Prompt("/"));
    }

    /// `/help` lists every built-in and every engine command.
    #[test]
    fn help_lists_every_command() {
        let text = help_text(&[EngineCommand {
            name: "summary".into(),
            description: Some("summarise".into()),
            accepts_args: false,
        }]);
        for (name, _) in BUILT_IN {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("/summary"), "{text}");
        assert!(text.contains("summarise"), "{text}");
    }
}
