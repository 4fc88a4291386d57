//! Rendering one message: its header, its body items, elision, redaction and per-part caps.

use serde_json::Value;

use super::super::fingerprint::{write_canonical_json, write_canonical_with};
use super::super::redact::{push_defused, push_redacted};
use super::cut::{byte_offset_of_char, push_truncation_marker};
use super::RenderMode;
use crate::contract::{AgentMessage, ContentPart, MessageContent, Role};

pub(super) struct Renderer<'a> {
    pub(super) out: &'a mut String,
    pub(super) mode: RenderMode,
    pub(super) part_cap: usize,
    /// Redaction output, reused across items.
    pub(super) scratch: String,
    /// JSON text (shapes, JSON tool results), reused across items.
    pub(super) json_scratch: String,
    /// Where the current message's body starts in `out`.
    pub(super) body_start: usize,
    pub(super) part_truncated: usize,
}

impl Renderer<'_> {
    /// Renders one message; returns whether it rendered anything (else `out` is unchanged).
    pub(super) fn message(&mut self, message: &AgentMessage, separate: bool) -> bool {
        let mark = self.out.len();
        if separate {
            self.out.push_str("\n\n");
        }
        self.out.push('[');
        self.out.push_str(message.role.as_str());
        self.out.push_str("]\n");
        self.body_start = self.out.len();
        match message.role {
            Role::CompactionSummary | Role::BranchSummary if message.summary.is_some() => {
                if let Some(summary) = &message.summary {
                    self.item(|r| r.text(summary, false));
                }
            }
            Role::ToolResult => {
                let id = message
                    .tool_call_id
                    .as_deref()
                    .or(message.tool_name.as_deref())
                    .unwrap_or("unknown");
                self.tool_result_message(id, message.tool_name.as_deref(), &message.content);
            }
            _ => match &message.content {
                None => {}
                Some(MessageContent::Text(text)) => self.item(|r| r.text(text, false)),
                Some(MessageContent::Parts(parts)) => {
                    for part in parts {
                        self.part(part, false);
                    }
                }
            },
        }
        if self.out.len() == self.body_start {
            self.out.truncate(mark);
            return false;
        }
        true
    }

    /// Runs `write` as one line item of the current body: a newline before it when the body
    /// already has content, nothing at all when it writes nothing, the per-part cap after it.
    fn item(&mut self, write: impl FnOnce(&mut Self)) {
        let mark = self.out.len();
        if mark > self.body_start {
            self.out.push('\n');
        }
        let start = self.out.len();
        write(self);
        if self.out.len() == start {
            self.out.truncate(mark);
        } else {
            self.cap_item(start);
        }
    }

    /// Cuts the item starting at `start` to the per-part cap.
    fn cap_item(&mut self, start: usize) {
        let written = &self.out[start..];
        if written.len() <= self.part_cap {
            return;
        }
        let chars = written.chars().count();
        if chars <= self.part_cap {
            return;
        }
        let cut = byte_offset_of_char(written, self.part_cap);
        let removed = chars - self.part_cap;
        self.out.truncate(start + cut);
        push_truncation_marker(self.out, removed);
        self.part_truncated += removed;
    }

    /// Writes history text, defused, redacted first when `redact`.
    fn text(&mut self, text: &str, redact: bool) {
        if redact {
            self.scratch.clear();
            push_redacted(&mut self.scratch, text);
            push_defused(self.out, &self.scratch);
        } else {
            push_defused(self.out, text);
        }
    }

    /// One content part of a user/assistant/custom message (`in_result`: inside a tool
    /// result's content, where text is redacted).
    fn part(&mut self, part: &ContentPart, in_result: bool) {
        match part {
            ContentPart::Text { text, .. } => self.item(|r| r.text(text, in_result)),
            ContentPart::Image { .. } => self.item(|r| r.out.push_str("[image omitted]")),
            ContentPart::ToolCall {
                id,
                name,
                arguments,
                ..
            } => self.item(|r| r.tool_call(id, name, arguments)),
            ContentPart::ToolResult {
                tool_call_id,
                content,
                ..
            } => self.tool_result_part(tool_call_id, content),
            ContentPart::Other(value) => self.item(|r| r.other_part(value)),
        }
    }

    fn other_part(&mut self, value: &Value) {
        match value.get("type").and_then(Value::as_str) {
            Some(kind) => {
                // Defused together with the opening bracket: a type such as "@x" must not
                // form a `[@` sigil with it.
                push_defused(self.out, &format!("[{kind}"));
                self.out.push_str(" part omitted]");
            }
            None => self.out.push_str("[unknown part omitted]"),
        }
    }

    fn tool_call(&mut self, id: &str, name: &str, arguments: &Value) {
        self.out.push_str("tool call: ");
        push_defused(self.out, name);
        match self.mode {
            RenderMode::PerTurn => self.out.push_str(" [input omitted]"),
            RenderMode::Bootstrap => {
                self.out.push_str(" (id: ");
                push_defused(self.out, id);
                self.out.push_str(") input shape: ");
                self.json_scratch.clear();
                write_arguments_shape(arguments, &mut self.json_scratch);
                push_defused(self.out, &self.json_scratch);
            }
        }
    }

    /// The `tool result: <id>` line; in per-turn mode with the elision marker.
    fn tool_result_line(&mut self, id: &str, tool_name: Option<&str>) {
        self.item(|r| {
            r.out.push_str("tool result: ");
            push_defused(r.out, id);
            match r.mode {
                RenderMode::PerTurn => r.out.push_str(" [content omitted]"),
                RenderMode::Bootstrap => {
                    if let Some(name) = tool_name.filter(|n| *n != id) {
                        r.out.push_str(" (");
                        push_defused(r.out, name);
                        r.out.push(')');
                    }
                }
            }
        });
    }

    fn tool_result_message(
        &mut self,
        id: &str,
        tool_name: Option<&str>,
        content: &Option<MessageContent>,
    ) {
        self.tool_result_line(id, tool_name);
        if self.mode == RenderMode::PerTurn {
            return;
        }
        match content {
            None => {}
            Some(MessageContent::Text(text)) => self.item(|r| r.text(text, true)),
            Some(MessageContent::Parts(parts)) => {
                for part in parts {
                    self.part(part, true);
                }
            }
        }
    }

    fn tool_result_part(&mut self, id: &str, content: &Value) {
        self.tool_result_line(id, None);
        if self.mode == RenderMode::PerTurn {
            return;
        }
        self.result_content(content);
    }

    /// Bootstrap: a tool result's JSON content, secrets redacted.
    fn result_content(&mut self, content: &Value) {
        match content {
            Value::Null => {}
            Value::String(text) => self.item(|r| r.text(text, true)),
            Value::Array(items) => {
                for item in items {
                    match item.get("type").and_then(Value::as_str) {
                        Some("text") if item.get("text").is_some_and(Value::is_string) => {
                            let text = item.get("text").and_then(Value::as_str).unwrap_or("");
                            self.item(|r| r.text(text, true));
                        }
                        Some("image") => self.item(|r| r.out.push_str("[image omitted]")),
                        _ => self.item(|r| r.json_redacted(item)),
                    }
                }
            }
            other => self.item(|r| r.json_redacted(other)),
        }
    }

    fn json_redacted(&mut self, value: &Value) {
        self.json_scratch.clear();
        write_canonical_json(value, &mut self.json_scratch);
        self.scratch.clear();
        push_redacted(&mut self.scratch, &self.json_scratch);
        push_defused(self.out, &self.scratch);
    }
}

/// The shape of a call's arguments; a string holding a JSON object or array is parsed first.
fn write_arguments_shape(arguments: &Value, out: &mut String) {
    if let Value::String(text) = arguments {
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                write_shape(&parsed, out);
                return;
            }
        }
    }
    write_shape(arguments, out);
}

/// JSON with every scalar replaced by its kind; `null`, keys (sorted) and structure kept.
pub fn write_shape(value: &Value, out: &mut String) {
    write_canonical_with(value, out, &|scalar, out| {
        out.push_str(match scalar {
            Value::Bool(_) => "\"[boolean]\"",
            Value::Number(_) => "\"[number]\"",
            _ => "\"[string]\"",
        })
    });
}
