//! A client for `codex app-server` (Codex's JSON-RPC interface over stdio, one JSON object per
//! line). It knows nothing of context engines: it starts the process, performs the handshake and
//! offers typed calls for threads and turns.
//!
//! Layout:
//! - [`config`]: how the child is started ([`AppServerConfig`], `-c` overrides as
//!   [`ConfigValue`]), where the Codex binary is ([`locate_codex_binary`]), and the overrides
//!   that run Codex offline against a mock model ([`offline_overrides`]).
//! - [`transport`]: what a client speaks through ([`Transport`]): its own child (`child`, over
//!   the `connection` actor) or a connection someone else owns ([`AppServerClient::over`]).
//! - `connection`: the actor owning the child's stdio. Callers send requests with a reply
//!   channel; responses are matched by id; notifications are routed to the turn streaming on
//!   their thread; `item/tool/call` server requests go to the turn on their thread (answered by
//!   its consumer), other server-initiated requests are declined; a dead child fails every pending call
//!   and turn at once with a [`AppServerError::Transport`] naming the method.
//! - [`client`]: [`AppServerClient`], the typed calls (`thread/start`, `thread/resume` with
//!   re-sent instructions, `thread/inject_items`, `thread/compact/start`, `turn/start` with
//!   optional `additionalContext`, `turn/interrupt`).
//! - [`turn`]: a turn as a stream of [`TurnEvent`]s ([`TurnHandle`]) and its summary
//!   ([`TurnOutcome`]); a turn over one of its [`TurnLimits`] (idle timeout, deadline, reply
//!   size) is interrupted and ends with [`AppServerError::TurnLimit`].
//! - [`version`]: the server's [`CodexVersion`] (from the handshake's user agent), the tested
//!   range, and the behaviours that depend on the version.
//! - [`error`]: the error type, [`AppServerError`].
//!
//! Wire facts this relies on (observed on Codex 0.169.0 and 0.171.0) are in the project's
//! `CODEX_APP_SERVER.md`.

mod child;
pub mod client;
pub mod config;
mod connection;
pub mod error;
mod notifications;
mod stderr;
pub mod transport;
pub mod turn;
pub mod version;

/// Entry points for the fuzz targets; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::connection::read_stdout_messages;
}

pub use client::{
    developer_message, AdditionalContext, AdditionalContextKind, AppServerClient, DynamicToolSpec,
    ServerInfo, ThreadResumeParams, ThreadResumed, ThreadStartParams, ThreadStarted,
    TurnStartParams,
};
pub use config::{
    locate_codex_binary, locate_codex_binary_in, offline_overrides, overrides_json,
    AppServerConfig, ConfigValue, TurnLimits,
};
pub use error::{AppServerError, TurnLimitKind};
pub use stderr::{log_stderr_line, stderr_line_level, strip_ansi};
pub use transport::{loaded_thread, Route, Routed, Transport, ROUTED_SERVER_REQUESTS};
pub use turn::{
    DynamicToolCall, DynamicToolCallResponse, ItemKind, TurnEvent, TurnHandle, TurnOutcome,
    TurnStatus,
};
pub use version::{
    is_below_tested, keeps_additional_context_across_compaction, CodexVersion, NEWEST_TESTED,
    OLDEST_TESTED,
};
