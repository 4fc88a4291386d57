//! What the mock answers: one [`ScriptedReply`] per request, taken from a queue, else the default.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Token usage reported in `response.completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    /// Usage with `total_tokens = input_tokens + output_tokens`.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens.saturating_add(output_tokens),
        }
    }
}

/// How a scripted reply ends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplyOutcome {
    /// The full event sequence, ending with `response.completed`.
    #[default]
    Complete,
    /// No stream at all: an HTTP error status with an OpenAI-style JSON error body.
    HttpError {
        status: u16,
        code: String,
        message: String,
    },
    /// `response.created`, the item, `deltas` text deltas, then the connection body ends without
    /// `response.completed` (what a client sees as "stream closed before response.completed").
    DropAfterDeltas { deltas: usize },
    /// The stream starts normally and ends with a `response.failed` event.
    Failed { code: String, message: String },
}

/// A function call the model makes instead of answering with text: the response's output is
/// one `function_call` item. The client is expected to run the tool and send a
/// `function_call_output` item in its next request; the default reply to that request includes
/// the output (see [`default_reply_text_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedToolCall {
    /// The function's name.
    pub name: String,
    /// The arguments as the model sends them: JSON text.
    pub arguments: String,
    /// The call id (generated when `None`).
    pub call_id: Option<String>,
}

/// One scripted answer. Fields left `None` fall back to the server's behaviour for the request
/// (deterministic text from the last user message, usage estimated from the request size).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScriptedReply {
    pub text: Option<String>,
    pub usage: Option<Usage>,
    pub delay: Option<Duration>,
    pub outcome: ReplyOutcome,
    /// Answer with a function call instead of a message.
    pub tool_call: Option<ScriptedToolCall>,
}

impl ScriptedReply {
    /// A normal reply with this exact assistant text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A function call of `name` with `arguments` (JSON text) instead of a message.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            tool_call: Some(ScriptedToolCall {
                name: name.into(),
                arguments: arguments.into(),
                call_id: None,
            }),
            ..Self::default()
        }
    }

    /// An HTTP error. 429 and 400 use the error types the real API uses; anything else is a
    /// `server_error`.
    pub fn http_error(status: u16) -> Self {
        let (code, message) = match status {
            429 => ("rate_limit_exceeded", "Rate limit reached (mock)."),
            400 => ("invalid_request", "Invalid request (mock)."),
            _ => (
                "server_error",
                "The server had an error while processing your request (mock).",
            ),
        };
        Self {
            outcome: ReplyOutcome::HttpError {
                status,
                code: code.to_owned(),
                message: message.to_owned(),
            },
            ..Self::default()
        }
    }

    /// The stream is closed after `deltas` text deltas, without `response.completed`.
    pub fn drop_after_deltas(deltas: usize) -> Self {
        Self {
            outcome: ReplyOutcome::DropAfterDeltas { deltas },
            ..Self::default()
        }
    }

    /// The stream ends with `response.failed` carrying this error.
    pub fn failed(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            outcome: ReplyOutcome::Failed {
                code: code.into(),
                message: message.into(),
            },
            ..Self::default()
        }
    }

    /// Wait this long before answering (before the status line is sent).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Report this usage instead of the estimate.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Reply with this text instead of the derived one.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }
}

/// The deterministic default reply for a request whose last user message is `last_user`.
pub fn default_reply_text(last_user: Option<&str>) -> String {
    match last_user {
        Some(text) => {
            let head: String = text.chars().take(60).collect();
            format!("mock reply to: {head}")
        }
        None => "mock reply to: (no user message)".to_owned(),
    }
}

/// The default reply for a whole conversation: when its last item is a tool's output
/// (`function_call_output`), a text that quotes the output; otherwise
/// [`default_reply_text`] of the last user message.
pub fn default_reply_text_for(conversation: &[serde_json::Value]) -> Option<String> {
    let last = conversation.last()?;
    if last.get("type").and_then(serde_json::Value::as_str) != Some("function_call_output") {
        return None;
    }
    Some(format!(
        "mock reply to tool output: {}",
        function_call_output_text(last)
    ))
}

/// The text of a `function_call_output` item: its `output` string, or the text parts of an
/// `output` array joined with newlines.
pub fn function_call_output_text(item: &serde_json::Value) -> String {
    match item.get("output") {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// A request body's size in bytes turned into an input token estimate (about 4 bytes a token).
pub fn estimate_tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX).max(1)
}
