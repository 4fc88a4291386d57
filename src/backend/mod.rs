//! The threaded-backend port: what ctxbridge needs from a backend that keeps its own
//! conversation threads (SPEC §12). Implementations: the in-process mock, the Codex
//! app-server, the Responses API. Backends know nothing of context engines.

pub mod responses;

pub use responses::{ResponsesBackend, ResponsesBackendConfig};

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::host::capabilities::Capability;

pub mod codex;
pub mod codex_config;
/// The shared conformance suite: compiled for this crate's tests, and for other crates' tests
/// through the `conformance` feature (the integration tests enable it).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod mock;

pub use mock::MockBackend;

/// The id of a backend thread, as the binding stores it. For the Responses backend it is the
/// last response id of the chain (it changes every turn, see [`TurnOutcome::thread_id`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ThreadId(pub String);

impl ThreadId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which kind of backend (stored in the binding: a binding made on one kind is never reused on
/// another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Mock,
    Codex,
    Responses,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Mock => "mock",
            BackendKind::Codex => "codex",
            BackendKind::Responses => "responses",
        }
    }
}

/// What a thread starts with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartThread {
    /// Base instructions (the system prompt of the backend), if configured.
    pub base_instructions: Option<String>,
    /// The thread-level developer instructions (SPEC §9.6); `None` when empty.
    pub developer_instructions: Option<String>,
    /// Model override, if any.
    pub model: Option<String>,
}

/// One turn's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRequest {
    pub thread_id: ThreadId,
    /// The projected or bare turn input.
    pub input: String,
    /// The effective developer instructions for this turn. Backends that carry instructions
    /// over (Codex) ignore this — drift is delivered by injection; backends that do not
    /// (Responses) send it with every request.
    pub developer_instructions: Option<String>,
    /// Base instructions (re-sent by backends that need them per request).
    pub base_instructions: Option<String>,
}

/// Streamed while a turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEvent {
    /// A piece of the reply text.
    TextDelta(String),
    /// The backend retried and discarded the partial text streamed so far.
    RetryDiscarded { message: String },
    /// The backend compacted the thread on its own (native compaction).
    Compacted { summary: Option<String> },
}

/// How a finished turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// The thread after the turn (differs from the request's only on chain backends).
    pub thread_id: ThreadId,
    /// The full reply text.
    pub reply: String,
    /// Native compaction observed during the turn, with its summary when the backend reported one.
    pub auto_compaction: Option<AutoCompaction>,
    /// Token usage, when reported.
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AutoCompaction {
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
}

/// A one-off completion through the backend's model (`runtime/llmComplete`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompletionRequest {
    /// The system prompt of the completion (the caller's `systemPrompt`).
    pub instructions: Option<String>,
    /// The conversation, rendered as one user input.
    pub input: String,
    /// A model override; the backend's default model when `None`.
    pub model: Option<String>,
    /// The most tokens the completion may produce, where the backend can bound it.
    pub max_tokens: Option<u64>,
}

/// What a one-off completion produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completion {
    pub text: String,
    /// The model that answered, when known.
    pub model: Option<String>,
    /// Token usage, when reported.
    pub usage: Option<Usage>,
}

/// The result of a manual native compaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NativeCompaction {
    /// The thread after compaction (differs only on chain backends).
    pub thread_id: Option<ThreadId>,
    pub summary: Option<String>,
}

/// Errors of a backend operation. Each carries the operation; the variants the harness acts on
/// (missing thread, context overflow, unsupported) are told apart here, so the harness never
/// parses error text.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The thread is gone (expired, deleted, never existed on this backend).
    #[error("{operation}: backend thread {thread_id} not found: {message}")]
    ThreadNotFound {
        operation: &'static str,
        thread_id: String,
        message: String,
    },
    /// The model's context window overflowed (SPEC §10 patterns).
    #[error("{operation}: context window exceeded: {message}")]
    ContextOverflow {
        operation: &'static str,
        message: String,
    },
    /// The backend cannot do this at all.
    #[error("{operation} is not supported by the {backend} backend")]
    Unsupported {
        operation: &'static str,
        backend: &'static str,
    },
    /// The turn ran and failed (model error, interrupted, …).
    #[error("{operation}: turn failed: {message}")]
    TurnFailed {
        operation: &'static str,
        message: String,
    },
    /// Transport or process trouble (dead child, connection refused, protocol violation).
    #[error("{operation}: backend unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
    },
    /// Anything else the backend answered with.
    #[error("{operation}: {message}")]
    Other {
        operation: &'static str,
        message: String,
    },
}

/// The SPEC §10 context-overflow patterns, matched case-insensitively.
pub const OVERFLOW_PATTERNS: [&str; 5] = [
    "context window",
    "context length",
    "maximum context",
    "too many tokens",
    "ran out of room",
];

/// True when an error text reports a context-window overflow.
pub fn is_overflow_message(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    OVERFLOW_PATTERNS.iter().any(|p| lower.contains(p))
}

/// The longest turn input the Codex app-server accepts, in characters (SPEC §9.2). The mock
/// models the app-server and the Responses backend applies the same limit, so this is the one
/// definition every backend profile uses.
pub const CODEX_TURN_INPUT_LIMIT_CHARS: usize = 1_048_576;

/// What a backend is like, as far as planning a turn goes: one value per backend, returned by
/// [`ThreadedBackend::profile`], so each fact about a backend is stated in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendProfile {
    /// The host capabilities the backend offers (SPEC §3).
    pub capabilities: &'static [Capability],
    /// The longest turn input the backend accepts, in characters.
    pub turn_input_limit: usize,
    /// Whether the backend compacts its threads by itself (SPEC §10: then ctxbridge runs no
    /// pre-turn overflow check).
    pub native_auto_compaction: bool,
    /// Whether developer instructions go with every request (Responses) rather than being
    /// fixed at thread start (Codex, mock); then instruction drift needs no delivery.
    pub instructions_per_request: bool,
}

impl BackendProfile {
    /// The Codex app-server (and the mock, which models it): every capability; threads keep
    /// their instructions and compact themselves.
    pub const CODEX: BackendProfile = BackendProfile {
        capabilities: &Capability::ALL,
        turn_input_limit: CODEX_TURN_INPUT_LIMIT_CHARS,
        native_auto_compaction: true,
        instructions_per_request: false,
    };

    /// The Responses API: every capability; every request carries its instructions, nothing
    /// compacts by itself.
    pub const RESPONSES: BackendProfile = BackendProfile {
        capabilities: &Capability::ALL,
        turn_input_limit: CODEX_TURN_INPUT_LIMIT_CHARS,
        native_auto_compaction: false,
        instructions_per_request: true,
    };
}

/// A backend that keeps persistent conversation threads.
#[async_trait]
pub trait ThreadedBackend: Send + Sync {
    fn kind(&self) -> BackendKind;

    /// A human label for messages (`"the Codex app-server"`).
    fn label(&self) -> &str;

    /// The facts the harness plans a turn around (input limit, native compaction, where
    /// instructions go).
    fn profile(&self) -> BackendProfile;

    /// The host capabilities this backend offers (SPEC §3,
    /// [`BackendProfile::capabilities`]).
    fn capabilities(&self) -> Vec<Capability> {
        self.profile().capabilities.to_vec()
    }

    /// The longest turn input the backend accepts, in characters
    /// ([`BackendProfile::turn_input_limit`]).
    fn turn_input_limit(&self) -> usize {
        self.profile().turn_input_limit
    }

    /// Whether the backend compacts its threads by itself
    /// ([`BackendProfile::native_auto_compaction`]).
    fn has_native_auto_compaction(&self) -> bool {
        self.profile().native_auto_compaction
    }

    /// Whether developer instructions go with every request
    /// ([`BackendProfile::instructions_per_request`]).
    fn sends_instructions_per_request(&self) -> bool {
        self.profile().instructions_per_request
    }

    /// Whether a turn moves the thread to a new id ([`TurnOutcome::thread_id`]): true for
    /// Responses `previous_response_id` chains, false for stable threads (Codex, the mock,
    /// Responses conversations).
    fn thread_id_advances_per_turn(&self) -> bool {
        false
    }

    /// Starts a new thread.
    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError>;

    /// Re-attaches an existing thread (after a restart of ctxbridge or of the backend).
    /// A missing thread is [`BackendError::ThreadNotFound`]. Idempotent: the backend knows
    /// whether its connection has the thread loaded, and resuming a loaded thread does nothing,
    /// so callers resume before every use of a stored thread.
    async fn resume_thread(&self, thread_id: &ThreadId) -> Result<(), BackendError>;

    /// Appends a developer message to a thread's model-visible history without running a turn.
    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError>;

    /// Runs one turn, streaming events to `events` (a closed receiver is not an error).
    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError>;

    /// Manual native compaction of a thread.
    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError>;

    /// A one-off completion through the backend's model (`runtime/llmComplete`), outside any
    /// bound thread.
    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError>;

    /// Stops child processes and connections.
    async fn shutdown(&self) {}
}
