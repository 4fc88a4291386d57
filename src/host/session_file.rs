//! OpenClaw's session transcript file (docs/architecture.md#method-parameters-and-results `sessionFile`): JSONL, version 4. The first
//! line is the header `{"type":"session","version":4,"id","timestamp","cwd"}`; each message is
//! `{"type":"message","id","parentId","timestamp","message"}`, `parentId` chaining to the
//! previous entry (`null` for the first). Pure formatting; the harness does the file I/O.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::contract::{AgentMessage, Role};

/// The session file format version this host writes.
pub const SESSION_FILE_VERSION: u32 = 4;

/// The longest session file name written: file systems take 255 bytes, and an archived file
/// (`ctxbridge reset`) adds `.reset.` and a timestamp to it.
pub const MAX_FILE_NAME: usize = 200;

/// The file name of a session's transcript: the id itself when it is URL-safe
/// (`[A-Za-z0-9_-]`, at most 128 chars), else `b64-` and its unpadded base64url form, so two
/// ids never share a file; an id whose encoded form would make the name longer than
/// [`MAX_FILE_NAME`] is named by its SHA-256 instead (`sha256-` and 64 hex digits). Always
/// ends in `.jsonl`.
pub fn file_name(session_id: &str) -> String {
    let safe = !session_id.is_empty()
        && session_id.len() <= 128
        && session_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !session_id.starts_with("b64-")
        && !session_id.starts_with("sha256-");
    if safe {
        return format!("{session_id}.jsonl");
    }
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session_id);
    let name = format!("b64-{encoded}.jsonl");
    if name.len() <= MAX_FILE_NAME {
        return name;
    }
    format!("sha256-{}.jsonl", sha256_hex(session_id))
}

use crate::util::{iso_timestamp, sha256_hex};

/// The header line (without the newline).
pub fn header_line(session_id: &str, timestamp: &str, cwd: &str) -> String {
    json!({
        "type": "session",
        "version": SESSION_FILE_VERSION,
        "id": session_id,
        "timestamp": timestamp,
        "cwd": cwd,
    })
    .to_string()
}

/// The message as OpenClaw stores it: no `id` (the entry carries it), assistant text content
/// as an array of text parts, and `toolResult` messages with the fields OpenClaw's reader
/// requires (`toolCallId`, `toolName`, `isError`, `content` as an array).
pub fn openclaw_message(message: &AgentMessage) -> Value {
    let mut value = serde_json::to_value(message).unwrap_or_else(|_| json!({}));
    let Value::Object(obj) = &mut value else {
        return value;
    };
    obj.remove("id");
    let as_parts = |obj: &mut Map<String, Value>| {
        if let Some(Value::String(text)) = obj.get("content") {
            let parts = json!([{"type": "text", "text": text}]);
            obj.insert("content".into(), parts);
        }
    };
    match message.role {
        Role::Assistant => as_parts(obj),
        Role::ToolResult => {
            as_parts(obj);
            if !obj.get("content").is_some_and(Value::is_array) {
                obj.insert("content".into(), json!([]));
            }
            for (key, default) in [
                ("toolCallId", json!("")),
                ("toolName", json!("")),
                ("isError", json!(false)),
            ] {
                let ok = match key {
                    "isError" => obj.get(key).is_some_and(Value::is_boolean),
                    _ => obj.get(key).is_some_and(Value::is_string),
                };
                if !ok {
                    obj.insert(key.into(), default);
                }
            }
        }
        _ => {}
    }
    value
}

/// One message entry line (without the newline).
pub fn message_line(
    entry_id: &str,
    parent_id: Option<&str>,
    timestamp: &str,
    message: &AgentMessage,
) -> String {
    json!({
        "type": "message",
        "id": entry_id,
        "parentId": parent_id,
        "timestamp": timestamp,
        "message": openclaw_message(message),
    })
    .to_string()
}

/// The id of the last entry in a session file's text (the parent of the next entry); `None`
/// when only the header (or nothing readable) is there.
pub fn last_entry_id(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("type").and_then(Value::as_str) != Some("session"))
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
}

/// The header's `timestamp` in a session file's text, if readable.
pub fn header_timestamp(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    let v: Value = serde_json::from_str(first).ok()?;
    (v.get("type")?.as_str()? == "session")
        .then(|| v.get("timestamp")?.as_str().map(str::to_string))
        .flatten()
}

/// Message lines for `entries` (`(entry id, message)`), chained after `parent`, each ending in
/// a newline. A message's own numeric `timestamp` (ms) dates its entry, else `now_ms`.
pub fn message_lines(
    parent: Option<&str>,
    entries: &[(String, AgentMessage)],
    now_ms: u64,
) -> String {
    let mut out = String::new();
    let mut parent = parent.map(str::to_string);
    for (id, message) in entries {
        let ms = message
            .timestamp
            .as_ref()
            .and_then(Value::as_u64)
            .unwrap_or(now_ms);
        out.push_str(&message_line(
            id,
            parent.as_deref(),
            &iso_timestamp(ms),
            message,
        ));
        out.push('\n');
        parent = Some(id.clone());
    }
    out
}

/// A whole file: the header, then every entry chained in order.
pub fn render_file(
    session_id: &str,
    header_timestamp: &str,
    cwd: &str,
    entries: &[(String, AgentMessage)],
    now_ms: u64,
) -> String {
    let mut out = header_line(session_id, header_timestamp, cwd);
    out.push('\n');
    out.push_str(&message_lines(None, entries, now_ms));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// URL-safe ids name their file directly; anything else is base64url-encoded, so ids
    /// that differ only in unsafe characters never share a file.
    #[test]
    fn file_names_are_url_safe_and_distinct() {
        assert_eq!(file_name("demo-1_x"), "demo-1_x.jsonl");
        let a = file_name("agent:main/x");
        let b = file_name("agent:main_x");
        assert!(a.starts_with("b64-") && a.ends_with(".jsonl"), "{a}");
        assert_ne!(a, b);
        assert!(a
            .trim_end_matches(".jsonl")
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert!(file_name("b64-abc").starts_with("b64-YjY0"));
        assert!(file_name("sha256-abc").starts_with("b64-"));
    }

    /// A session id of 10 KB (a name no file system takes whole) gets a file name within
    /// [`MAX_FILE_NAME`], the same each time and another for another id.
    #[test]
    fn long_session_ids_get_short_file_names() {
        let long = "k".repeat(10 * 1024);
        let name = file_name(&long);
        assert!(name.len() <= MAX_FILE_NAME, "{} bytes", name.len());
        assert!(
            name.starts_with("sha256-") && name.ends_with(".jsonl"),
            "{name}"
        );
        assert_eq!(name, file_name(&long));
        assert_ne!(name, file_name(&format!("{long}x")));
        // The longest id still named by its base64 form.
        let fits = "é".repeat(70);
        assert!(file_name(&fits).starts_with("b64-"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(&name), "").unwrap();
    }

    /// Timestamps are JavaScript ISO strings with milliseconds.
    #[test]
    fn iso_timestamps_match_javascript() {
        assert_eq!(iso_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    /// A rendered file has the version-4 header and message entries chained by parentId
    /// (null first), with OpenClaw's message shapes.
    #[test]
    fn rendered_file_is_openclaw_jsonl_v4() {
        let entries = vec![
            ("u1".to_string(), AgentMessage::user("hello").with_id("u1")),
            ("a1".to_string(), AgentMessage::assistant("hi there")),
        ];
        let text = render_file("s1", "2026-01-01T00:00:00.000Z", "/w", &entries, 5);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            json!({"type": "session", "version": 4, "id": "s1",
                   "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"})
        );
        assert_eq!(lines[1]["type"], "message");
        assert_eq!(lines[1]["id"], "u1");
        assert_eq!(lines[1]["parentId"], Value::Null);
        assert_eq!(lines[1]["timestamp"], "1970-01-01T00:00:00.005Z");
        assert_eq!(
            lines[1]["message"],
            json!({"role": "user", "content": "hello"})
        );
        assert_eq!(lines[2]["parentId"], "u1");
        assert_eq!(
            lines[2]["message"],
            json!({"role": "assistant", "content": [{"type": "text", "text": "hi there"}]})
        );
        assert_eq!(last_entry_id(&text).as_deref(), Some("a1"));
        assert_eq!(
            header_timestamp(&text).as_deref(),
            Some("2026-01-01T00:00:00.000Z")
        );
        assert_eq!(last_entry_id(&header_line("s", "t", "/")), None);
    }

    /// toolResult messages get the fields OpenClaw's reader requires.
    #[test]
    fn tool_results_get_required_fields() {
        let message: AgentMessage = serde_json::from_value(json!({
            "role": "toolResult", "toolCallId": "c1", "content": "42"
        }))
        .unwrap();
        let v = openclaw_message(&message);
        assert_eq!(v["toolCallId"], "c1");
        assert_eq!(v["toolName"], "");
        assert_eq!(v["isError"], false);
        assert_eq!(v["content"], json!([{"type": "text", "text": "42"}]));
    }
}
