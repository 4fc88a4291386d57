//! Errors, layered by where they happen; each names the JSON-RPC method it belongs to.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// An error of the app-server client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppServerError {
    /// `CODEX_HOME` could not be created.
    #[error("codex app-server: cannot create CODEX_HOME {path}: {source}")]
    CodexHome {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The child could not be started.
    #[error("codex app-server: cannot spawn {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The process died, closed its stdio, or the client was shut down.
    #[error("codex app-server {method}: {reason}")]
    Transport { method: String, reason: String },
    /// The server answered with a JSON-RPC error.
    #[error("codex app-server {method}: server error {code}: {message}")]
    Server {
        method: String,
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The server's result did not have the expected shape.
    #[error("codex app-server {method}: unexpected result: {source}")]
    Deserialize {
        method: String,
        source: serde_json::Error,
    },
    /// No response within the request timeout.
    #[error("codex app-server {method}: no response within {after:?}")]
    Timeout { method: String, after: Duration },
    /// This client already streams a turn on the thread (Codex would steer the new input into
    /// it instead of starting a turn).
    #[error("codex app-server {method}: a turn is already streaming on thread {thread_id}")]
    TurnActive { method: String, thread_id: String },
    /// A turn hit one of its [`crate::TurnLimits`]; the client sent `turn/interrupt` (when the
    /// turn id was known) and the turn's stream ended. Nothing of the turn should be kept.
    #[error("codex app-server {method}: turn {} on thread {thread_id} stopped: {limit}{}", turn_id.as_deref().unwrap_or("(unknown)"), interrupt_note(*interrupted))]
    TurnLimit {
        method: String,
        thread_id: String,
        turn_id: Option<String>,
        limit: TurnLimitKind,
        /// Whether `turn/interrupt` was sent for the turn.
        interrupted: bool,
    },
}

fn interrupt_note(interrupted: bool) -> &'static str {
    if interrupted {
        "; interrupted"
    } else {
        "; not interrupted (turn id unknown)"
    }
}

/// Which turn limit was hit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnLimitKind {
    /// No event of the turn for this long.
    #[error("no event for {after:?} (idle timeout)")]
    Idle { after: Duration },
    /// The turn ran longer than this.
    #[error("still running after {after:?} (turn deadline)")]
    Deadline { after: Duration },
    /// The agent's text grew past the cap.
    #[error("reply of {received} bytes exceeds the cap of {limit} bytes")]
    ReplyTooLarge { limit: usize, received: usize },
}

impl AppServerError {
    /// The JSON-RPC method the error belongs to, when there is one.
    pub fn method(&self) -> Option<&str> {
        match self {
            Self::Transport { method, .. }
            | Self::Server { method, .. }
            | Self::Deserialize { method, .. }
            | Self::Timeout { method, .. }
            | Self::TurnActive { method, .. }
            | Self::TurnLimit { method, .. } => Some(method),
            Self::CodexHome { .. } | Self::Spawn { .. } => None,
        }
    }

    /// The server does not have the thread loaded (`thread not found: <id>`): after a restart,
    /// `thread/resume` it first.
    pub fn is_thread_not_found(&self) -> bool {
        matches!(self, Self::Server { message, .. } if message.contains("thread not found"))
    }

    /// The server has no persisted thread with that id ("no rollout found for thread id …"):
    /// resuming cannot work; the thread is gone.
    pub fn is_no_rollout_found(&self) -> bool {
        matches!(self, Self::Server { message, .. } if message.contains("no rollout found"))
    }

    /// The turn was stopped by one of its limits (stalled, too long, or too large a reply).
    pub fn turn_limit(&self) -> Option<&TurnLimitKind> {
        match self {
            Self::TurnLimit { limit, .. } => Some(limit),
            _ => None,
        }
    }

    /// The process is gone or unreachable; a new client has to be spawned.
    pub fn is_transport(&self) -> bool {
        matches!(self, Self::Transport { .. })
    }
}
