//! The threaded-backend port: what ctxbridge needs from a backend that keeps its own
//! conversation threads (docs/architecture.md#backends). Implementations: the in-process mock, the Codex
//! app-server, the Responses API. Backends know nothing of context engines.

pub mod responses;

pub use responses::{ResponsesBackend, ResponsesBackendConfig};

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use responses_client::ApiKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::host::capabilities::Capability;

pub mod codex;
pub mod codex_config;
pub mod codex_home;
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

/// A tool offered to the model: a function the model may call, executed by ctxbridge through a
/// [`ToolExecutor`] (backends know nothing of where the tool comes from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// The function name the model calls.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the tool's arguments.
    pub parameters: Value,
}

/// One call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInvocation {
    /// The backend's id of the call (Codex `callId`, Responses `call_id`).
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed (the model's text when it is not JSON).
    pub arguments: Value,
}

/// What a tool call gave back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text the model receives.
    pub text: String,
    /// The call failed (the text explains why).
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful output.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
        }
    }

    /// A failed call, explained to the model.
    pub fn error(message: impl Into<String>) -> Self {
        ToolOutput {
            text: message.into(),
            is_error: true,
        }
    }
}

/// Executes the tools the model calls during a turn. A failure is an output with
/// `is_error: true` (the model sees it); it never fails the turn.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs one call.
    async fn call(&self, invocation: ToolInvocation) -> ToolOutput;

    /// Runs the calls the model made in one response, an output for each in order. By default
    /// one after the other; an executor that hands calls on (to a client) takes them at once.
    async fn call_all(&self, invocations: Vec<ToolInvocation>) -> Vec<ToolOutput> {
        let mut outputs = Vec::with_capacity(invocations.len());
        for invocation in invocations {
            outputs.push(self.call(invocation).await);
        }
        outputs
    }
}

/// The tools of one turn: what is offered, and who executes the calls.
#[derive(Clone, Default)]
pub struct TurnTools {
    /// The tools offered to the model (per-request backends send them with every request;
    /// thread backends offered them at [`StartThread::tools`]).
    pub specs: Vec<ToolSpec>,
    /// Executes the calls; `None` answers every call with an error output.
    pub executor: Option<Arc<dyn ToolExecutor>>,
}

impl TurnTools {
    /// The given tools, executed by `executor`.
    pub fn new(specs: Vec<ToolSpec>, executor: Arc<dyn ToolExecutor>) -> Self {
        TurnTools {
            specs,
            executor: Some(executor),
        }
    }

    /// Runs one call through the executor (an error output when there is none, or when the
    /// tool was not offered this turn).
    pub async fn call(&self, invocation: ToolInvocation) -> ToolOutput {
        match (self.refusal(&invocation), &self.executor) {
            (None, Some(executor)) => executor.call(invocation).await,
            (refused, _) => refused.unwrap_or_else(unreachable_output),
        }
    }

    /// Runs the calls of one response (see [`ToolExecutor::call_all`]): the executor gets the
    /// offered ones at once; the others are answered with an error output. Outputs are in the
    /// calls' order.
    pub async fn call_all(&self, invocations: Vec<ToolInvocation>) -> Vec<ToolOutput> {
        let mut outputs: Vec<Option<ToolOutput>> = invocations
            .iter()
            .map(|invocation| self.refusal(invocation))
            .collect();
        let runnable: Vec<ToolInvocation> = invocations
            .into_iter()
            .zip(&outputs)
            .filter(|(_, refused)| refused.is_none())
            .map(|(invocation, _)| invocation)
            .collect();
        if let (Some(executor), false) = (&self.executor, runnable.is_empty()) {
            let mut ran = executor.call_all(runnable).await.into_iter();
            for slot in outputs.iter_mut().filter(|slot| slot.is_none()) {
                *slot = ran.next();
            }
        }
        outputs
            .into_iter()
            .map(|output| output.unwrap_or_else(unreachable_output))
            .collect()
    }

    /// The error output of a call this turn cannot run: no executor, or a tool not offered.
    fn refusal(&self, invocation: &ToolInvocation) -> Option<ToolOutput> {
        let offered = self.specs.is_empty() || self.specs.iter().any(|s| s.name == invocation.name);
        match &self.executor {
            Some(_) if offered => None,
            Some(_) => Some(ToolOutput::error(format!(
                "unknown tool {:?}",
                invocation.name
            ))),
            None => Some(ToolOutput::error(format!(
                "tool {:?} cannot be executed: no tools are available in this turn",
                invocation.name
            ))),
        }
    }
}

/// The output of a call an executor gave no output for (one that breaks its contract).
fn unreachable_output() -> ToolOutput {
    ToolOutput::error("the tool's executor gave no output for this call")
}

impl fmt::Debug for TurnTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnTools")
            .field("specs", &self.specs)
            .field("executor", &self.executor.is_some())
            .finish()
    }
}

/// Equal when the same tools are offered and the same executor (by identity) runs them.
impl PartialEq for TurnTools {
    fn eq(&self, other: &Self) -> bool {
        self.specs == other.specs
            && match (&self.executor, &other.executor) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for TurnTools {}

/// Parses a model's tool-call arguments text: JSON when it is, else the text as a string (an
/// empty text is an empty object).
pub fn parse_tool_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// What a thread starts with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartThread {
    /// Base instructions (the system prompt of the backend), if configured.
    pub base_instructions: Option<String>,
    /// The thread-level developer instructions (docs/architecture.md#developer-instruction-delivery); `None` when empty.
    pub developer_instructions: Option<String>,
    /// Model override, if any.
    pub model: Option<String>,
    /// The tools offered to the model for the thread's life (Codex `dynamicTools`); their
    /// catalogue is part of the binding, so a changed list starts a new thread.
    pub tools: Vec<ToolSpec>,
}

/// What a resume of a stored thread re-sends (a Codex thread resumed in a new app-server
/// process without its developer instructions loses them at its next compaction).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResumeThread {
    /// Base instructions (the system prompt of the backend), if configured.
    pub base_instructions: Option<String>,
    /// The developer instructions the thread has received, as its binding records them.
    pub developer_instructions: Option<String>,
}

/// How a projecting turn delivers its rendered context (`projection.codexContextDelivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContextDelivery {
    /// The framed context goes before the prompt in the turn input (docs/architecture.md#rendering).
    TurnInput,
    /// The framed context goes as one additional-context fragment of the turn (Codex
    /// `turn/start.additionalContext`, a developer item before the user message); the turn
    /// input is the bare prompt.
    AdditionalContext,
}

impl ContextDelivery {
    /// The name used in configuration and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextDelivery::TurnInput => "turn-input",
            ContextDelivery::AdditionalContext => "additional-context",
        }
    }
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
    /// The tools of this turn and their executor (Codex offered the specs at thread start and
    /// only executes here; Responses sends the specs with every request).
    pub tools: TurnTools,
    /// The rendered context, delivered apart from the input
    /// ([`ContextDelivery::AdditionalContext`]); `None` on turns that project nothing or
    /// project into the input.
    pub additional_context: Option<String>,
    /// What the caller asks of this turn's model requests beyond its input (a per-request
    /// backend sends it with every request of the turn; a thread backend refuses what it
    /// cannot carry).
    pub options: TurnOptions,
}

/// A turn's own settings for the model, asked by the caller (ctxbridge serve's Responses
/// front passes on its client's): all unset by default, which every backend serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnOptions {
    /// Instructions for this turn only, after the base and developer instructions.
    pub instructions: Option<String>,
    /// The most tokens each of the turn's responses may produce.
    pub max_output_tokens: Option<u64>,
    /// How the model must choose among the turn's tools (the Responses API's `tool_choice`:
    /// `"auto"`, `"none"`, `"required"` or `{"type": "function", "name"}`).
    pub tool_choice: Option<Value>,
    /// The key the turn's requests carry instead of the backend's configured one (ctxbridge
    /// serve's Responses front passing its client's own key on).
    pub api_key: Option<ApiKey>,
    /// Which of the backend's connection pools the turn's requests use, where it keeps
    /// several (ctxbridge serve's Responses front: its lane's; see
    /// `ResponsesBackend::with_connection_pools`). Not a setting for the model: every backend
    /// serves any.
    pub connection_pool: usize,
}

impl TurnOptions {
    /// Whether nothing is asked of the model (what every backend serves).
    pub fn is_empty(&self) -> bool {
        let TurnOptions {
            instructions,
            max_output_tokens,
            tool_choice,
            api_key,
            connection_pool: _,
        } = self;
        instructions.is_none()
            && max_output_tokens.is_none()
            && tool_choice.is_none()
            && api_key.is_none()
    }
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
    /// The model called tools (these call ids); the text streamed before this event came
    /// before the calls, and their outputs are asked of the turn's executor next.
    ToolCalls { call_ids: Vec<String> },
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
    /// The model's context window overflowed (docs/architecture.md#compaction-on-threaded-backends patterns).
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
    /// The turn was stopped by one of its configured limits (a stalled model, a turn running
    /// too long, a runaway reply) and interrupted; nothing of it counts.
    #[error("{operation}: turn stopped by the {limit}: {message}")]
    TurnLimit {
        operation: &'static str,
        /// Which limit, with the configuration key that sets it.
        limit: &'static str,
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

/// The docs/architecture.md#compaction-on-threaded-backends context-overflow patterns, matched case-insensitively.
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

/// The longest turn input the Codex app-server accepts, in characters (docs/architecture.md#rendering). The mock
/// models the app-server and the Responses backend applies the same limit, so this is the one
/// definition every backend profile uses.
pub const CODEX_TURN_INPUT_LIMIT_CHARS: usize = 1_048_576;

/// What a backend is like, as far as planning a turn goes: one value per backend, returned by
/// [`ThreadedBackend::profile`], so each fact about a backend is stated in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendProfile {
    /// The host capabilities the backend offers (docs/architecture.md#host-capabilities-and-requirements).
    pub capabilities: &'static [Capability],
    /// The longest turn input the backend accepts, in characters.
    pub turn_input_limit: usize,
    /// Whether the backend compacts its threads by itself (docs/architecture.md#compaction-on-threaded-backends: then ctxbridge runs no
    /// pre-turn overflow check).
    pub native_auto_compaction: bool,
    /// Whether developer instructions go with every request (Responses) rather than being
    /// fixed at thread start (Codex, mock); then instruction drift needs no delivery.
    pub instructions_per_request: bool,
    /// The largest context (UTF-8 bytes) a turn can carry apart from its input
    /// ([`TurnRequest::additional_context`]); 0 when the backend has no such channel. Larger
    /// contexts go in the turn input.
    pub additional_context_bytes: usize,
}

/// The largest `additionalContext` value Codex passes on whole, in UTF-8 bytes: Codex 0.171.0
/// cuts a longer value to about 1000 tokens (≈ 4000 bytes, its middle replaced by "…N tokens
/// truncated…"), so ctxbridge only uses the channel for a rendered context below this size
/// (with room for the `<ctxbridge>` tags).
pub const CODEX_ADDITIONAL_CONTEXT_BYTES: usize = 3_800;

impl BackendProfile {
    /// The Codex app-server (and the mock, which models it): every capability; threads keep
    /// their instructions and compact themselves.
    pub const CODEX: BackendProfile = BackendProfile {
        capabilities: &Capability::ALL,
        turn_input_limit: CODEX_TURN_INPUT_LIMIT_CHARS,
        native_auto_compaction: true,
        instructions_per_request: false,
        additional_context_bytes: CODEX_ADDITIONAL_CONTEXT_BYTES,
    };

    /// The Responses API: every capability; every request carries its instructions, nothing
    /// compacts by itself.
    pub const RESPONSES: BackendProfile = BackendProfile {
        capabilities: &Capability::ALL,
        turn_input_limit: CODEX_TURN_INPUT_LIMIT_CHARS,
        native_auto_compaction: false,
        instructions_per_request: true,
        additional_context_bytes: 0,
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

    /// The host capabilities this backend offers (docs/architecture.md#host-capabilities-and-requirements,
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

    /// Whether the connected backend keeps a turn's additional context across compaction
    /// (then it is the default [`ContextDelivery`]). Backends without the channel say no.
    async fn keeps_additional_context(&self) -> bool {
        false
    }

    /// Re-attaches an existing thread (after a restart of ctxbridge or of the backend),
    /// re-sending `resume`'s instructions where the backend takes them. A missing thread is
    /// [`BackendError::ThreadNotFound`]. Idempotent: the backend knows whether its connection
    /// has the thread loaded, and resuming a loaded thread does nothing, so callers resume
    /// before every use of a stored thread.
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError>;

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
