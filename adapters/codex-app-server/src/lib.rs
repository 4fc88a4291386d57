//! A client for `codex app-server` (Codex's JSON-RPC interface over stdio, one JSON object per
//! line). It knows nothing of context engines: it starts the process, performs the handshake and
//! offers typed calls for threads and turns.
//!
//! Layout:
//! - [`config`]: how the child is started ([`AppServerConfig`], `-c` overrides as
//!   [`ConfigValue`]), where the Codex binary is ([`locate_codex_binary`]), and the overrides
//!   that run Codex offline against a mock model ([`offline_overrides`]).
//! - `connection`: the actor owning the child's stdio. Callers send requests with a reply
//!   channel; responses are matched by id; notifications are routed to the turn streaming on
//!   their thread; server-initiated requests are declined; a dead child fails every pending call
//!   and turn at once with a [`AppServerError::Transport`] naming the method.
//! - [`client`]: [`AppServerClient`], the typed calls (`thread/start`, `thread/resume`,
//!   `thread/inject_items`, `thread/compact/start`, `turn/start`, `turn/interrupt`).
//! - [`turn`]: a turn as a stream of [`TurnEvent`]s ([`TurnHandle`]) and its summary
//!   ([`TurnOutcome`]).
//! - [`error`]: the error type, [`AppServerError`].
//!
//! Wire facts this relies on (observed on Codex 0.169.0) are in the project's
//! `CODEX_APP_SERVER.md`.

pub mod client;
pub mod config;
mod connection;
pub mod error;
pub mod turn;

pub use client::{AppServerClient, ServerInfo, ThreadResumed, ThreadStartParams, ThreadStarted};
pub use config::{locate_codex_binary, offline_overrides, AppServerConfig, ConfigValue};
pub use error::AppServerError;
pub use turn::{ItemKind, TurnEvent, TurnHandle, TurnOutcome, TurnStatus};
