//! A loopback mock of the OpenAI Responses streaming API.
//!
//! It speaks enough of the protocol for the real Codex app-server (custom model provider with
//! `wire_api = "responses"`) and for ctxbridge's own Responses client to run offline:
//!
//! - [`server`]: the axum server. `POST /v1/responses` (or `/responses`) streams
//!   `response.created`, `response.output_item.added`, several `response.output_text.delta`,
//!   `response.output_item.done` and `response.completed` with usage; `POST /v1/responses/compact`
//!   answers the unary compaction endpoint. Every request is recorded in memory (and optionally
//!   appended to a JSONL log); [`MockModelServer::requests`] reads them back. A stateful mode
//!   stores responses and honours `previous_response_id`, like the real API. Conversations
//!   (`POST /v1/conversations`, `GET`/`DELETE /v1/conversations/{id}`,
//!   `GET`/`POST /v1/conversations/{id}/items`) are served too; in stateful mode a response naming a
//!   `conversation` is computed on its items and appends its input and output to them, and an
//!   unknown conversation answers 404 with an OpenAI-style error.
//! - [`script`]: per-request behaviour ([`ScriptedReply`]): reply text, usage, HTTP errors, a
//!   stream dropped mid-way, a delay, a `response.failed` event.
//! - [`record`]: what was recorded ([`RecordedRequest`]) and helpers to read Responses items.
//! - `sse`: the event shapes.

pub mod record;
pub mod script;
pub mod server;
mod sse;

pub use record::{RecordedRequest, RequestKind};
pub use script::{ReplyOutcome, ScriptedReply, ScriptedToolCall, Usage};
pub use server::{serve, serve_config, MockModelConfig, MockModelError, MockModelServer};

/// Read a JSONL request log written by a server started with `log_path`.
pub fn read_log(path: &std::path::Path) -> Result<Vec<RecordedRequest>, ReadLogError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadLogError::Io {
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|source| ReadLogError::Parse {
                path: path.to_owned(),
                line: index + 1,
                source,
            })
        })
        .collect()
}

/// Errors of [`read_log`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadLogError {
    #[error("read mock model log {path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("parse mock model log {path} line {line}: {source}")]
    Parse {
        path: std::path::PathBuf,
        line: usize,
        source: serde_json::Error,
    },
}
