//! The Responses API backend (docs/architecture.md#backends). A thread is, by [`ResponsesThreads`] (config
//! `backend.threads`):
//!
//! - `conversation` (the default): a server-side conversation (`POST /conversations`, then
//!   `conversation: <id>` on every response). The thread id is the `conv_…` id and stays the
//!   same from turn to turn; the server keeps the items without the 30-day limit of stored
//!   responses. `start_thread` creates the conversation, `resume_thread` retrieves it, and a
//!   deleted or unknown conversation is [`BackendError::ThreadNotFound`] (the harness then starts
//!   a new one, re-projects, retries once and rewrites the binding — the rule for an expired
//!   chain). `inject_developer_message` adds the developer message to the conversation at once
//!   (`POST /conversations/{id}/items`). Native compaction lists the conversation's items
//!   (`GET /conversations/{id}/items`), compacts them (`POST /responses/compact` with them as
//!   `input`: the endpoint takes no `conversation`) and seeds a new conversation with the
//!   compacted window (`POST /conversations` with `items`); the thread moves to the new
//!   conversation's id, the old one is left as it was.
//! - `chain`: a chain of `previous_response_id`s, described below. Its thread id changes every
//!   turn: `turn --json`'s `threadId` is the chain head, the last response id.
//!
//! Chain thread ids, as the binding stores them:
//! - `resp_…` (anything without one of the prefixes below): the last response of a stored chain.
//!   Every turn continues from it and the outcome carries the new response id.
//! - `chain:<uuid>`: a chain that has no response yet (`start_thread` makes no server call; the
//!   API keeps no instructions, so there is nothing to create). Its first turn is sent without
//!   `previous_response_id`.
//! - `compacted:<uuid>`: the result of [`ResponsesBackend::compact_thread`]. The compaction
//!   endpoint returns an opaque context window, not a chainable response, so the window is held
//!   in this process and sent as the `input` (without `previous_response_id`) of the next turn,
//!   which starts a new stored chain. A `compacted:` id whose window this process does not hold
//!   (after a restart) is [`BackendError::ThreadNotFound`], so the harness re-projects on a new
//!   chain instead of continuing from nothing.
//!
//! Every request carries `instructions` = base + developer instructions of the [`TurnRequest`]
//! (the API does not carry them over), `store: true`, and as `input` only the new turn: history
//! is never sent together with `previous_response_id` or `conversation`.
//!
//! Every response is bounded by an idle timeout between stream events, an overall turn deadline
//! and a cap on the reply size (and on one event's size); each ends the turn with a clear error
//! and nothing is committed. The base URL is shown only redacted (userinfo and query values).
//!
//! On chain threads `inject_developer_message` makes no server call (a chain cannot take an item
//! without a response): the message is held in memory and sent as a `developer` input item in
//! front of the next turn of that thread (it then becomes part of the stored chain). A model
//! override given to `start_thread` is likewise held in memory and
//! follows the chain from turn to turn; after a restart the configured model is used.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use responses_client::{
    output_item_text, redact_url_str, ApiKey, CompactRequest, CreateResponse, InputItem,
    ResponseEvent, ResponsesClient, ResponsesConfig, ResponsesError,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use super::{
    is_overflow_message, parse_tool_arguments, BackendError, BackendKind, BackendProfile,
    Completion, CompletionRequest, NativeCompaction, ResumeThread, StartThread, ThreadId,
    ThreadedBackend, ToolInvocation, ToolOutput, ToolSpec, TurnEvent, TurnOutcome, TurnRequest,
    TurnTools, Usage,
};

/// The backend's name in [`BackendError::Unsupported`].
const BACKEND_NAME: &str = "responses";
/// Prefix of a chain that has no response yet.
pub const FRESH_CHAIN_PREFIX: &str = "chain:";
/// Prefix of a chain continued from a compacted window held in memory.
pub const COMPACTED_CHAIN_PREFIX: &str = "compacted:";

/// The config keys of the limits, named in the errors they cause.
const IDLE_TIMEOUT_KEY: &str = "backend.idleTimeoutMs";
const TURN_TIMEOUT_KEY: &str = "backend.turnTimeoutMs";
const MAX_REPLY_BYTES_KEY: &str = "backend.maxReplyBytes";
const MAX_EVENT_BYTES_KEY: &str = "backend.maxEventBytes";

/// What a Responses thread is (config `backend.threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponsesThreads {
    /// A chain of `previous_response_id`s; the thread id is the chain head and changes every
    /// turn. Stored responses expire after 30 days.
    Chain,
    /// A server-side conversation; the thread id (`conv_…`) is stable.
    #[default]
    Conversation,
}

impl ResponsesThreads {
    pub fn as_str(self) -> &'static str {
        match self {
            ResponsesThreads::Chain => "chain",
            ResponsesThreads::Conversation => "conversation",
        }
    }
}

/// What the backend is built from (the `backend` section of the config). Its `Debug` shows the
/// base URL redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct ResponsesBackendConfig {
    /// The API root; requests go to `{base_url}/responses`.
    pub base_url: String,
    /// The model of every request (unless `start_thread` overrides it).
    pub model: String,
    /// The environment variable holding the API key; `None` sends no `Authorization` header.
    pub api_key_env: Option<String>,
    /// What a thread is; [`ResponsesThreads::Conversation`] by default.
    pub threads: ResponsesThreads,
    /// The longest wait for the next stream event (default 120 s).
    pub idle_timeout: Duration,
    /// The longest one response may take in all (default 20 min).
    pub turn_timeout: Duration,
    /// The longest reply text, in bytes (default 8 MiB).
    pub max_reply_bytes: usize,
    /// The longest event-stream line or event, in bytes (default 16 MiB).
    pub max_event_bytes: usize,
}

impl ResponsesBackendConfig {
    /// A configuration with the defaults: no key variable, conversation threads, and the
    /// client's default limits.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ResponsesBackendConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            threads: ResponsesThreads::default(),
            idle_timeout: ResponsesConfig::DEFAULT_IDLE_TIMEOUT,
            turn_timeout: ResponsesConfig::DEFAULT_TURN_TIMEOUT,
            max_reply_bytes: ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
            max_event_bytes: ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl fmt::Debug for ResponsesBackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponsesBackendConfig")
            .field("base_url", &redact_url_str(&self.base_url))
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("threads", &self.threads)
            .field("idle_timeout", &self.idle_timeout)
            .field("turn_timeout", &self.turn_timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

/// Why the backend could not be built. Names the key's variable, never its value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResponsesBackendConfigError {
    #[error("Responses backend: the API key variable {variable} (backend api_key_env) is not set")]
    ApiKeyUnset { variable: String },
    #[error("Responses backend: the API key variable {variable} (backend api_key_env) is empty")]
    ApiKeyEmpty { variable: String },
    #[error(
        "Responses backend: the API key variable {variable} (backend api_key_env) is not valid UTF-8"
    )]
    ApiKeyNotUnicode { variable: String },
    #[error("Responses backend: the model name is empty")]
    EmptyModel,
    #[error("Responses backend: {0}")]
    Client(#[from] ResponsesError),
}

impl From<ResponsesBackendConfigError> for BackendError {
    fn from(error: ResponsesBackendConfigError) -> Self {
        BackendError::Other {
            operation: "configure the Responses backend",
            message: error.to_string(),
        }
    }
}

/// Reads the API key from the variable `variable` names, through `lookup` (the process
/// environment in [`ResponsesBackend::new`]).
pub fn api_key_from_env(
    variable: Option<&str>,
    lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
) -> Result<Option<ApiKey>, ResponsesBackendConfigError> {
    let Some(variable) = variable else {
        return Ok(None);
    };
    match lookup(variable) {
        Ok(value) if value.trim().is_empty() => Err(ResponsesBackendConfigError::ApiKeyEmpty {
            variable: variable.to_owned(),
        }),
        Ok(value) => Ok(Some(ApiKey::new(value.trim().to_owned()))),
        Err(std::env::VarError::NotPresent) => Err(ResponsesBackendConfigError::ApiKeyUnset {
            variable: variable.to_owned(),
        }),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(ResponsesBackendConfigError::ApiKeyNotUnicode {
                variable: variable.to_owned(),
            })
        }
    }
}

/// Where a thread id stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainPosition {
    /// `chain:…` — no response yet.
    Fresh,
    /// `compacted:…` — continues from a compacted window held in memory.
    Compacted,
    /// The last response id of a stored chain.
    Response(String),
}

impl ChainPosition {
    pub fn of(thread_id: &ThreadId) -> Self {
        let id = thread_id.as_str();
        if id.starts_with(FRESH_CHAIN_PREFIX) {
            ChainPosition::Fresh
        } else if id.starts_with(COMPACTED_CHAIN_PREFIX) {
            ChainPosition::Compacted
        } else {
            ChainPosition::Response(id.to_owned())
        }
    }
}

/// What this process holds for a thread besides its id.
#[derive(Debug, Clone, Default, PartialEq)]
struct ChainState {
    /// Model override from `start_thread`.
    model: Option<String>,
    /// Developer messages to send in front of the next turn.
    pending_developer_messages: Vec<String>,
    /// The compacted window a `compacted:` thread continues from.
    compacted_window: Option<Vec<Value>>,
}

impl ChainState {
    fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.pending_developer_messages.is_empty()
            && self.compacted_window.is_none()
    }

    /// What follows the chain to its next id after a turn or compaction.
    fn carried_forward(&self) -> ChainState {
        ChainState {
            model: self.model.clone(),
            ..ChainState::default()
        }
    }
}

/// `instructions` of a request: base and developer instructions, blank parts omitted, joined by
/// a blank line.
pub fn compose_instructions(base: Option<&str>, developer: Option<&str>) -> Option<String> {
    let parts: Vec<&str> = [base, developer]
        .into_iter()
        .flatten()
        .filter(|part| !part.trim().is_empty())
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("\n\n"))
    }
}

/// Where a turn continues: a chain position, or a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Continuation {
    Chain(ChainPosition),
    Conversation(String),
}

/// The request of one turn. Pure: the thread's position and held state decide everything.
fn turn_request(
    default_model: &str,
    continuation: &Continuation,
    state: &ChainState,
    request: &TurnRequest,
) -> CreateResponse {
    let mut input: Vec<InputItem> = Vec::new();
    if let Some(window) = &state.compacted_window {
        input.extend(window.iter().cloned().map(InputItem::Raw));
    }
    input.extend(
        state
            .pending_developer_messages
            .iter()
            .map(InputItem::developer_text),
    );
    input.push(InputItem::user_text(request.input.clone()));
    CreateResponse {
        model: state
            .model
            .clone()
            .unwrap_or_else(|| default_model.to_owned()),
        instructions: compose_instructions(
            request.base_instructions.as_deref(),
            request.developer_instructions.as_deref(),
        ),
        input,
        previous_response_id: match continuation {
            Continuation::Chain(ChainPosition::Response(id)) => Some(id.clone()),
            Continuation::Chain(ChainPosition::Fresh | ChainPosition::Compacted)
            | Continuation::Conversation(_) => None,
        },
        conversation: match continuation {
            Continuation::Conversation(id) => Some(id.clone()),
            Continuation::Chain(_) => None,
        },
        store: true,
        tools: function_tools(&request.tools.specs),
        max_output_tokens: None,
    }
}

/// The most model responses one turn may take while the model keeps calling tools; past it the
/// turn fails rather than loop forever.
pub const MAX_TOOL_ROUNDS: usize = 8;

/// The turn's tools as Responses function tools.
pub fn function_tools(specs: &[ToolSpec]) -> Vec<Value> {
    specs
        .iter()
        .map(|t| {
            serde_json::json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            })
        })
        .collect()
}

/// The `function_call` items of a response's output as tool invocations (arguments parsed
/// from the model's JSON text).
pub fn function_calls(output_items: &[Value]) -> Vec<ToolInvocation> {
    let text = |item: &Value, key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    output_items
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("function_call"))
        .map(|item| ToolInvocation {
            call_id: text(item, "call_id"),
            name: text(item, "name"),
            arguments: parse_tool_arguments(&text(item, "arguments")),
        })
        .collect()
}

/// The `function_call_output` input item answering a call. The Responses API has no error
/// flag: a failed call's text says so.
pub fn function_call_output(call_id: &str, output: &ToolOutput) -> InputItem {
    InputItem::Raw(serde_json::json!({
        "type": "function_call_output",
        "call_id": call_id,
        "output": output.text,
    }))
}

/// The request that continues a turn after the model's tool calls: the same model,
/// instructions and tools, with the outputs as input, in the same conversation (conversation
/// threads) or chained on the response that made the calls (chain threads).
fn follow_up_request(
    previous: &CreateResponse,
    response_id: &str,
    outputs: Vec<InputItem>,
) -> CreateResponse {
    CreateResponse {
        input: outputs,
        previous_response_id: if previous.conversation.is_some() {
            None
        } else {
            Some(response_id.to_owned())
        },
        ..previous.clone()
    }
}

/// Maps a client error onto the port's error kinds.
fn backend_error(operation: &'static str, thread_id: &str, error: ResponsesError) -> BackendError {
    if error.is_previous_response_not_found() || error.is_conversation_not_found() {
        return BackendError::ThreadNotFound {
            operation,
            thread_id: thread_id.to_owned(),
            message: error.to_string(),
        };
    }
    if error.is_context_overflow() || error.server_message().is_some_and(is_overflow_message) {
        return BackendError::ContextOverflow {
            operation,
            message: error.to_string(),
        };
    }
    let message = error.to_string();
    match error {
        ResponsesError::Unsupported { .. } => BackendError::Unsupported {
            operation,
            backend: BACKEND_NAME,
        },
        ResponsesError::ResponseFailed { .. } | ResponsesError::ErrorEvent { .. } => {
            BackendError::TurnFailed { operation, message }
        }
        ResponsesError::IdleTimeout { .. } => BackendError::Unavailable {
            operation,
            message: format!("{message}; the server went silent (the limit is {IDLE_TIMEOUT_KEY})"),
        },
        ResponsesError::Deadline { .. } => BackendError::Unavailable {
            operation,
            message: format!("{message}; the turn was abandoned (the limit is {TURN_TIMEOUT_KEY})"),
        },
        ResponsesError::ReplyTooLarge { .. } => BackendError::TurnFailed {
            operation,
            message: format!(
                "{message}; the turn was abandoned (the limit is {MAX_REPLY_BYTES_KEY})"
            ),
        },
        ResponsesError::EventTooLarge { .. } => BackendError::TurnFailed {
            operation,
            message: format!(
                "{message}; the turn was abandoned (the limit is {MAX_EVENT_BYTES_KEY})"
            ),
        },
        ResponsesError::Connect { .. }
        | ResponsesError::StreamClosed { .. }
        | ResponsesError::Transport { .. }
        | ResponsesError::Decode { .. } => BackendError::Unavailable { operation, message },
        _ => BackendError::Other { operation, message },
    }
}

/// The OpenAI Responses API as a [`ThreadedBackend`].
#[derive(Debug)]
pub struct ResponsesBackend {
    client: ResponsesClient,
    model: String,
    label: String,
    threads: ResponsesThreads,
    chains: Mutex<HashMap<ThreadId, ChainState>>,
}

impl ResponsesBackend {
    /// Builds the backend with the configured limits and thread kind and the client's default
    /// retries, reading the key from the process environment.
    pub fn new(config: ResponsesBackendConfig) -> Result<Self, ResponsesBackendConfigError> {
        let api_key = api_key_from_env(config.api_key_env.as_deref(), |name| std::env::var(name))?;
        let client_config = ResponsesConfig::new(config.base_url)
            .with_api_key(api_key)
            .with_idle_timeout(config.idle_timeout)
            .with_turn_timeout(config.turn_timeout)
            .with_max_reply_bytes(config.max_reply_bytes)
            .with_max_event_bytes(config.max_event_bytes);
        Ok(Self::with_client_config(client_config, config.model)?.with_threads(config.threads))
    }

    /// Builds the backend from a full client configuration (timeouts, retries, key), with
    /// conversation threads (see [`ResponsesBackend::with_threads`]).
    pub fn with_client_config(
        client_config: ResponsesConfig,
        model: impl Into<String>,
    ) -> Result<Self, ResponsesBackendConfigError> {
        let model = model.into();
        if model.trim().is_empty() {
            return Err(ResponsesBackendConfigError::EmptyModel);
        }
        let client = ResponsesClient::new(client_config)?;
        let label = format!(
            "the Responses API at {}",
            client.display_base_url().trim_end_matches('/')
        );
        Ok(ResponsesBackend {
            client,
            model,
            label,
            threads: ResponsesThreads::default(),
            chains: Mutex::new(HashMap::new()),
        })
    }

    /// The same backend with threads of this kind.
    pub fn with_threads(mut self, threads: ResponsesThreads) -> Self {
        self.threads = threads;
        self
    }

    /// What a thread is on this backend.
    pub fn threads(&self) -> ResponsesThreads {
        self.threads
    }

    pub fn client(&self) -> &ResponsesClient {
        &self.client
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    fn chains(&self) -> MutexGuard<'_, HashMap<ThreadId, ChainState>> {
        // The map holds plain data that every critical section leaves consistent, so a
        // poisoned lock is still usable.
        self.chains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn not_found(operation: &'static str, thread_id: &ThreadId, message: &str) -> BackendError {
        BackendError::ThreadNotFound {
            operation,
            thread_id: thread_id.to_string(),
            message: message.to_owned(),
        }
    }

    /// Fails for ids that cannot name a thread here: blank ones, compacted windows this
    /// process does not hold, and (on conversation threads) chain ids.
    fn check_known(
        &self,
        operation: &'static str,
        thread_id: &ThreadId,
    ) -> Result<(), BackendError> {
        if thread_id.as_str().trim().is_empty() {
            return Err(Self::not_found(
                operation,
                thread_id,
                "the thread id is blank",
            ));
        }
        if self.threads == ResponsesThreads::Conversation {
            if ChainPosition::of(thread_id) != ChainPosition::Response(thread_id.to_string()) {
                return Err(Self::not_found(
                    operation,
                    thread_id,
                    "a chain id does not name a conversation",
                ));
            }
            return Ok(());
        }
        if ChainPosition::of(thread_id) == ChainPosition::Compacted
            && !self
                .chains()
                .get(thread_id)
                .is_some_and(|state| state.compacted_window.is_some())
        {
            return Err(Self::not_found(
                operation,
                thread_id,
                "the compacted window of this chain was held by another process",
            ));
        }
        Ok(())
    }

    /// Puts a turn's state back after a failure, in front of anything queued meanwhile.
    fn restore(&self, thread_id: &ThreadId, mut taken: ChainState) {
        let mut chains = self.chains();
        if let Some(queued) = chains.remove(thread_id) {
            taken
                .pending_developer_messages
                .extend(queued.pending_developer_messages);
        }
        if !taken.is_empty() {
            chains.insert(thread_id.clone(), taken);
        }
    }

    /// Runs a turn's responses: the first, then, while the model calls tools, the calls through
    /// the turn's executor and a follow-up carrying their outputs (at most
    /// [`MAX_TOOL_ROUNDS`] responses). Returns the last response's id, the text of all of them
    /// (as streamed) and the last usage.
    async fn run_rounds(
        &self,
        mut create: CreateResponse,
        tools: &TurnTools,
        events: &mpsc::Sender<TurnEvent>,
        thread_id: &str,
    ) -> Result<(String, String, Option<Usage>), BackendError> {
        const OPERATION: &str = "run turn";
        let mut reply = String::new();
        for round in 1..=MAX_TOOL_ROUNDS {
            let mut calls = Vec::new();
            let (response_id, text, usage) = self
                .stream_turn(create.clone(), events, &mut calls)
                .await
                .map_err(|e| backend_error(OPERATION, thread_id, e))?;
            reply.push_str(&text);
            let invocations = function_calls(&calls);
            if invocations.is_empty() {
                return Ok((response_id, reply, usage));
            }
            if round == MAX_TOOL_ROUNDS {
                break;
            }
            let mut outputs = Vec::with_capacity(invocations.len());
            for invocation in invocations {
                tracing::info!(thread = %thread_id, tool = %invocation.name, call_id = %invocation.call_id, "the model called a tool");
                let call_id = invocation.call_id.clone();
                let output = tools.call(invocation).await;
                outputs.push(function_call_output(&call_id, &output));
            }
            create = follow_up_request(&create, &response_id, outputs);
        }
        Err(BackendError::TurnFailed {
            operation: OPERATION,
            message: format!(
                "the model was still calling tools after {MAX_TOOL_ROUNDS} responses; the turn was stopped"
            ),
        })
    }

    /// Streams one response, forwarding text deltas and collecting its `function_call`
    /// items into `calls`; returns (id, reply, usage).
    async fn stream_turn(
        &self,
        request: CreateResponse,
        events: &mpsc::Sender<TurnEvent>,
        calls: &mut Vec<Value>,
    ) -> Result<(String, String, Option<Usage>), ResponsesError> {
        let mut stream = self.client.create_response(request).await?;
        let mut streamed = String::new();
        let mut item_text = String::new();
        while let Some(event) = stream.next().await {
            match event? {
                ResponseEvent::Created { response_id } => {
                    tracing::debug!(%response_id, "response created");
                }
                ResponseEvent::OutputTextDelta { delta } => {
                    streamed.push_str(&delta);
                    // A closed receiver only means nobody watches the stream.
                    let _ = events.send(TurnEvent::TextDelta(delta)).await;
                }
                ResponseEvent::OutputItemDone { item } => {
                    if let Some(text) = output_item_text(&item) {
                        item_text.push_str(&text);
                    }
                    if item.get("type").and_then(Value::as_str) == Some("function_call") {
                        calls.push(item);
                    }
                }
                ResponseEvent::Completed { response_id, usage } => {
                    let reply = if streamed.is_empty() && !item_text.is_empty() {
                        // The server sent whole items only: stream the text once so the
                        // deltas still add up to the reply.
                        let _ = events.send(TurnEvent::TextDelta(item_text.clone())).await;
                        item_text
                    } else {
                        streamed
                    };
                    let usage = usage.map(|u| Usage {
                        input_tokens: u.input_tokens,
                        output_tokens: u.output_tokens,
                        cached_input_tokens: u.cached_tokens,
                    });
                    return Ok((response_id, reply, usage));
                }
            }
        }
        // The client's stream always ends with `Completed` or an error.
        Err(ResponsesError::StreamClosed {
            operation: "run turn",
            response_id: None,
        })
    }
}

impl ResponsesBackend {
    /// Native compaction of a conversation thread. The compaction endpoint takes a chain
    /// (`previous_response_id`) or an explicit `input`, never a `conversation`, so: the
    /// conversation's items are listed, compacted as `input`, and the compacted window (the
    /// kept messages and the opaque `compaction` item) seeds a new conversation, which becomes
    /// the thread. An empty conversation has nothing to compact (no compaction call, thread
    /// unchanged). The old conversation is left as it was.
    async fn compact_conversation(
        &self,
        thread_id: &ThreadId,
    ) -> Result<NativeCompaction, BackendError> {
        const OPERATION: &str = "compact thread";
        self.check_known(OPERATION, thread_id)?;
        let err = |e| backend_error(OPERATION, thread_id.as_str(), e);
        let items = self
            .client
            .list_conversation_items(thread_id.as_str())
            .await
            .map_err(err)?;
        if items.is_empty() {
            return Ok(NativeCompaction {
                thread_id: None,
                summary: None,
            });
        }
        let model = self
            .chains()
            .get(thread_id)
            .and_then(|state| state.model.clone())
            .unwrap_or_else(|| self.model.clone());
        let compacted = self
            .client
            .compact(CompactRequest {
                model,
                input: items.into_iter().map(InputItem::Raw).collect(),
                instructions: None,
                previous_response_id: None,
            })
            .await
            .map_err(err)?;
        let window: Vec<InputItem> = compacted.output.into_iter().map(InputItem::Raw).collect();
        let conversation = self
            .client
            .create_conversation_with_items(&window)
            .await
            .map_err(err)?;
        let new_thread = ThreadId(conversation.id);
        {
            let mut chains = self.chains();
            if let Some(previous) = chains.remove(thread_id) {
                if !previous.is_empty() {
                    chains.insert(new_thread.clone(), previous);
                }
            }
        }
        tracing::info!(from = %thread_id, to = %new_thread, items = window.len(), "compacted a Responses conversation into a new one");
        Ok(NativeCompaction {
            thread_id: Some(new_thread),
            summary: None,
        })
    }
}

fn new_thread_id(prefix: &str) -> ThreadId {
    ThreadId(format!("{prefix}{}", uuid::Uuid::new_v4()))
}

#[async_trait]
impl ThreadedBackend for ResponsesBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Responses
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn profile(&self) -> BackendProfile {
        BackendProfile::RESPONSES
    }

    /// A chain moves to its new head every turn; a conversation keeps its id.
    fn thread_id_advances_per_turn(&self) -> bool {
        self.threads == ResponsesThreads::Chain
    }

    /// Conversation threads: creates the conversation. Chain threads: no server call, the chain
    /// begins with its first turn. Instructions are not kept (every turn sends its own); a
    /// model override is.
    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        let thread_id = match self.threads {
            ResponsesThreads::Chain => new_thread_id(FRESH_CHAIN_PREFIX),
            ResponsesThreads::Conversation => {
                let conversation = self
                    .client
                    .create_conversation()
                    .await
                    .map_err(|e| backend_error("start thread", "", e))?;
                ThreadId(conversation.id)
            }
        };
        if let Some(model) = request.model.filter(|m| !m.trim().is_empty()) {
            self.chains().insert(
                thread_id.clone(),
                ChainState {
                    model: Some(model),
                    ..ChainState::default()
                },
            );
        }
        tracing::debug!(thread = %thread_id, threads = self.threads.as_str(), "started a Responses thread");
        Ok(thread_id)
    }

    /// Conversation threads: retrieves the conversation (a deleted or unknown one is
    /// [`BackendError::ThreadNotFound`]). Chain threads: no server call for response ids; a
    /// chain that is gone shows as [`BackendError::ThreadNotFound`] on its next turn.
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        _resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "resume thread";
        self.check_known(OPERATION, thread_id)?;
        if self.threads == ResponsesThreads::Conversation {
            self.client
                .retrieve_conversation(thread_id.as_str())
                .await
                .map_err(|e| backend_error(OPERATION, thread_id.as_str(), e))?;
        }
        Ok(())
    }

    /// Conversation threads: added to the conversation at once as a developer message item
    /// (`POST /conversations/{id}/items`). Chain threads: held in memory and sent as a developer
    /// item in front of the thread's next turn.
    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "inject developer message";
        self.check_known(OPERATION, thread_id)?;
        if self.threads == ResponsesThreads::Conversation {
            self.client
                .create_conversation_items(thread_id.as_str(), &[InputItem::developer_text(text)])
                .await
                .map_err(|e| backend_error(OPERATION, thread_id.as_str(), e))?;
            tracing::debug!(thread = %thread_id, "added a developer message to the conversation");
            return Ok(());
        }
        self.chains()
            .entry(thread_id.clone())
            .or_default()
            .pending_developer_messages
            .push(text.to_owned());
        Ok(())
    }

    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        const OPERATION: &str = "run turn";
        let thread_id = request.thread_id.clone();
        self.check_known(OPERATION, &thread_id)?;
        let continuation = match self.threads {
            ResponsesThreads::Chain => Continuation::Chain(ChainPosition::of(&thread_id)),
            ResponsesThreads::Conversation => Continuation::Conversation(thread_id.to_string()),
        };
        let taken = self.chains().remove(&thread_id).unwrap_or_default();
        let create = turn_request(&self.model, &continuation, &taken, &request);
        tracing::debug!(
            thread = %thread_id,
            chained = create.previous_response_id.is_some(),
            conversation = create.conversation.is_some(),
            input_items = create.input.len(),
            "running a Responses turn"
        );
        match self
            .run_rounds(create, &request.tools, &events, thread_id.as_str())
            .await
        {
            Ok((response_id, reply, usage)) => {
                // A conversation keeps its id; a chain moves to its new head.
                let new_thread = match continuation {
                    Continuation::Conversation(_) => thread_id.clone(),
                    Continuation::Chain(_) => ThreadId(response_id),
                };
                let carried = taken.carried_forward();
                if !carried.is_empty() {
                    self.chains().insert(new_thread.clone(), carried);
                }
                Ok(TurnOutcome {
                    thread_id: new_thread,
                    reply,
                    auto_compaction: None,
                    usage,
                })
            }
            Err(error) => {
                if !matches!(error, BackendError::ThreadNotFound { .. }) {
                    self.restore(&thread_id, taken);
                }
                Err(error)
            }
        }
    }

    /// Chain threads: through `POST /responses/compact`; the new window continues as a
    /// `compacted:` thread. A chain without responses has nothing to compact (no call, thread
    /// unchanged). Conversation threads: see [`ResponsesBackend::compact_conversation`].
    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        const OPERATION: &str = "compact thread";
        if self.threads == ResponsesThreads::Conversation {
            return self.compact_conversation(thread_id).await;
        }
        self.check_known(OPERATION, thread_id)?;
        let position = ChainPosition::of(thread_id);
        let state = self.chains().get(thread_id).cloned().unwrap_or_default();
        let request = match &position {
            ChainPosition::Fresh => {
                return Ok(NativeCompaction {
                    thread_id: None,
                    summary: None,
                })
            }
            ChainPosition::Compacted => CompactRequest {
                model: state.model.clone().unwrap_or_else(|| self.model.clone()),
                input: state
                    .compacted_window
                    .iter()
                    .flatten()
                    .cloned()
                    .map(InputItem::Raw)
                    .collect(),
                instructions: None,
                previous_response_id: None,
            },
            ChainPosition::Response(id) => CompactRequest {
                model: state.model.clone().unwrap_or_else(|| self.model.clone()),
                input: Vec::new(),
                instructions: None,
                previous_response_id: Some(id.clone()),
            },
        };
        let compacted = self
            .client
            .compact(request)
            .await
            .map_err(|e| backend_error(OPERATION, thread_id.as_str(), e))?;
        let new_thread = new_thread_id(COMPACTED_CHAIN_PREFIX);
        {
            let mut chains = self.chains();
            let previous = chains.remove(thread_id).unwrap_or_default();
            chains.insert(
                new_thread.clone(),
                ChainState {
                    model: previous.model,
                    pending_developer_messages: previous.pending_developer_messages,
                    compacted_window: Some(compacted.output),
                },
            );
        }
        tracing::info!(from = %thread_id, to = %new_thread, "compacted a Responses chain");
        Ok(NativeCompaction {
            thread_id: Some(new_thread),
            summary: None,
        })
    }

    /// A one-off `store: false` request outside any chain; `max_tokens` is sent as
    /// `max_output_tokens`.
    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        const OPERATION: &str = "complete";
        let model = request.model.unwrap_or_else(|| self.model.clone());
        let request = CreateResponse {
            model: model.clone(),
            instructions: request.instructions.filter(|i| !i.trim().is_empty()),
            input: vec![InputItem::user_text(request.input)],
            previous_response_id: None,
            conversation: None,
            store: false,
            tools: Vec::new(),
            max_output_tokens: request.max_tokens,
        };
        let stream = self
            .client
            .create_response(request)
            .await
            .map_err(|e| backend_error(OPERATION, "", e))?;
        let done = stream
            .collect()
            .await
            .map_err(|e| backend_error(OPERATION, "", e))?;
        Ok(Completion {
            text: done.text,
            model: Some(model),
            usage: done.usage.map(|u| Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cached_input_tokens: u.cached_tokens,
            }),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn turn(thread: &str, input: &str) -> TurnRequest {
        TurnRequest {
            thread_id: ThreadId(thread.into()),
            input: input.into(),
            developer_instructions: Some("dev".into()),
            base_instructions: Some("base".into()),
            tools: Default::default(),
            additional_context: None,
        }
    }

    /// Instructions join the non-blank parts with a blank line.
    #[test]
    fn instructions_compose() {
        assert_eq!(
            compose_instructions(Some("base"), Some("dev")).as_deref(),
            Some("base\n\ndev")
        );
        assert_eq!(
            compose_instructions(None, Some("dev")).as_deref(),
            Some("dev")
        );
        assert_eq!(compose_instructions(Some("  "), None), None);
    }

    /// Thread ids are classified by prefix.
    #[test]
    fn chain_positions() {
        assert_eq!(
            ChainPosition::of(&ThreadId("chain:1".into())),
            ChainPosition::Fresh
        );
        assert_eq!(
            ChainPosition::of(&ThreadId("compacted:1".into())),
            ChainPosition::Compacted
        );
        assert_eq!(
            ChainPosition::of(&ThreadId("resp_1".into())),
            ChainPosition::Response("resp_1".into())
        );
    }

    /// A continued chain sends only the new turn (plus queued developer notes) with its id.
    #[test]
    fn continued_turn_carries_no_history() {
        let state = ChainState {
            pending_developer_messages: vec!["note".into()],
            ..ChainState::default()
        };
        let position = Continuation::Chain(ChainPosition::Response("resp_7".into()));
        let request = turn_request("m", &position, &state, &turn("resp_7", "hi"));
        assert_eq!(request.conversation, None);
        assert_eq!(request.previous_response_id.as_deref(), Some("resp_7"));
        assert_eq!(
            request.input,
            vec![
                InputItem::developer_text("note"),
                InputItem::user_text("hi")
            ]
        );
        assert_eq!(request.instructions.as_deref(), Some("base\n\ndev"));
        assert!(request.store);
    }

    /// A compacted thread sends its window as input and no previous_response_id.
    #[test]
    fn compacted_turn_sends_the_window_without_a_chain_id() {
        let window = serde_json::json!({"type": "compaction", "encrypted_content": "x"});
        let state = ChainState {
            model: Some("override".into()),
            compacted_window: Some(vec![window.clone()]),
            ..ChainState::default()
        };
        let request = turn_request(
            "m",
            &Continuation::Chain(ChainPosition::Compacted),
            &state,
            &turn("compacted:1", "hi"),
        );
        assert_eq!(request.previous_response_id, None);
        assert_eq!(request.model, "override");
        assert_eq!(
            request.input,
            vec![InputItem::Raw(window), InputItem::user_text("hi")]
        );
    }

    /// A conversation turn names the conversation, never a previous response, and sends only
    /// the new turn (with queued developer notes) and the instructions.
    #[test]
    fn conversation_turn_names_the_conversation_only() {
        let state = ChainState {
            pending_developer_messages: vec!["note".into()],
            ..ChainState::default()
        };
        let request = turn_request(
            "m",
            &Continuation::Conversation("conv_1".into()),
            &state,
            &turn("conv_1", "hi"),
        );
        assert_eq!(request.conversation.as_deref(), Some("conv_1"));
        assert_eq!(request.previous_response_id, None);
        assert_eq!(
            request.input,
            vec![
                InputItem::developer_text("note"),
                InputItem::user_text("hi")
            ]
        );
        assert_eq!(request.instructions.as_deref(), Some("base\n\ndev"));
        assert!(request.store);
    }

    /// Conversation threads are the default, in the backend config and its wire name.
    #[test]
    fn conversation_threads_are_the_default() {
        let config = ResponsesBackendConfig::new("http://127.0.0.1:1/v1", "m");
        assert_eq!(config.threads, ResponsesThreads::Conversation);
        assert_eq!(
            serde_json::to_value(ResponsesThreads::Chain).unwrap(),
            serde_json::json!("chain")
        );
        assert_eq!(
            serde_json::from_value::<ResponsesThreads>(serde_json::json!("conversation")).unwrap(),
            ResponsesThreads::Conversation
        );
    }

    /// The backend config's Debug and the backend's label never show a key written into the
    /// base URL.
    #[test]
    fn base_url_secrets_never_print() {
        let config = ResponsesBackendConfig::new(
            "http://user:sk-userinfo@127.0.0.1:1/v1?api-key=sk-query",
            "m",
        );
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("sk-userinfo") && !debug.contains("sk-query"),
            "{debug}"
        );
        let backend = ResponsesBackend::new(config).unwrap();
        let label = backend.label().to_owned();
        assert!(
            !label.contains("sk-userinfo") && !label.contains("sk-query"),
            "{label}"
        );
        assert!(label.contains("127.0.0.1:1/v1?api-key=***"), "{label}");
        let debug = format!("{backend:?}");
        assert!(
            !debug.contains("sk-userinfo") && !debug.contains("sk-query"),
            "{debug}"
        );
    }

    /// The stream limits map to clear backend errors naming the setting to change.
    #[test]
    fn limits_map_to_clear_errors() {
        let idle = backend_error(
            "run turn",
            "t",
            ResponsesError::IdleTimeout {
                operation: "create response",
                after: Duration::from_secs(120),
            },
        );
        assert!(matches!(idle, BackendError::Unavailable { .. }));
        assert!(idle.to_string().contains(IDLE_TIMEOUT_KEY), "{idle}");
        let deadline = backend_error(
            "run turn",
            "t",
            ResponsesError::Deadline {
                operation: "create response",
                after: Duration::from_secs(1200),
            },
        );
        assert!(deadline.to_string().contains("turn deadline"), "{deadline}");
        assert!(
            deadline.to_string().contains(TURN_TIMEOUT_KEY),
            "{deadline}"
        );
        let large = backend_error(
            "run turn",
            "t",
            ResponsesError::ReplyTooLarge {
                operation: "create response",
                limit: 10,
            },
        );
        assert!(matches!(large, BackendError::TurnFailed { .. }));
        assert!(large.to_string().contains(MAX_REPLY_BYTES_KEY), "{large}");
        let event = backend_error(
            "run turn",
            "t",
            ResponsesError::EventTooLarge {
                operation: "create response",
                limit: 10,
            },
        );
        assert!(event.to_string().contains(MAX_EVENT_BYTES_KEY), "{event}");
    }

    /// The key variable is read; unset, empty and absent configurations are told apart and
    /// the error names the variable.
    #[test]
    fn api_key_from_env_cases() {
        assert!(api_key_from_env(None, |_| unreachable!())
            .unwrap()
            .is_none());
        let key = api_key_from_env(Some("K"), |_| Ok("sk-1".into()))
            .unwrap()
            .unwrap();
        assert_eq!(key.expose(), "sk-1");
        let unset = api_key_from_env(Some("MY_KEY_VAR"), |_| Err(std::env::VarError::NotPresent))
            .unwrap_err();
        assert!(unset.to_string().contains("MY_KEY_VAR"));
        assert!(matches!(
            api_key_from_env(Some("K"), |_| Ok("  ".into())),
            Err(ResponsesBackendConfigError::ApiKeyEmpty { .. })
        ));
    }

    /// `function_call` output items become invocations with parsed arguments (other items are
    /// skipped; arguments that are not JSON are kept as text); outputs answer by call id.
    #[test]
    fn function_calls_and_their_outputs() {
        let items = vec![
            serde_json::json!({"type": "message", "role": "assistant", "content": []}),
            serde_json::json!({"type": "function_call", "call_id": "c1", "name": "lookup",
                               "arguments": "{\"q\":\"otters\"}"}),
            serde_json::json!({"type": "function_call", "call_id": "c2", "name": "raw",
                               "arguments": "not json"}),
        ];
        let calls = function_calls(&items);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].call_id, "c1");
        assert_eq!(calls[0].name, "lookup");
        assert_eq!(calls[0].arguments, serde_json::json!({"q": "otters"}));
        assert_eq!(calls[1].arguments, serde_json::json!("not json"));
        let InputItem::Raw(output) = function_call_output("c1", &ToolOutput::text("3")) else {
            panic!("a raw item");
        };
        assert_eq!(
            output,
            serde_json::json!({"type": "function_call_output", "call_id": "c1", "output": "3"})
        );
    }

    /// A turn's tools go with its request as function tools, and the follow-up after tool calls
    /// keeps model, instructions and tools, chained on the calling response.
    #[test]
    fn requests_carry_the_turn_tools() {
        let mut request = turn("resp_1", "hi");
        request.tools.specs = vec![ToolSpec {
            name: "lookup".into(),
            description: "Looks up.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let fresh = Continuation::Chain(ChainPosition::Fresh);
        let create = turn_request("m", &fresh, &ChainState::default(), &request);
        assert_eq!(
            create.tools,
            vec![serde_json::json!({"type": "function", "name": "lookup",
                                    "description": "Looks up.",
                                    "parameters": {"type": "object"}})]
        );
        let follow = follow_up_request(
            &create,
            "resp_2",
            vec![function_call_output("c1", &ToolOutput::text("x"))],
        );
        assert_eq!(follow.previous_response_id.as_deref(), Some("resp_2"));
        assert_eq!(follow.tools, create.tools);
        assert_eq!(follow.instructions, create.instructions);
        assert_eq!(follow.input.len(), 1);
        assert!(
            turn_request("m", &fresh, &ChainState::default(), &turn("t", "x"))
                .tools
                .is_empty()
        );
        let conversation = Continuation::Conversation("conv_1".into());
        let create = turn_request("m", &conversation, &ChainState::default(), &request);
        let follow = follow_up_request(&create, "resp_2", Vec::new());
        assert_eq!(
            follow.previous_response_id, None,
            "a conversation carries the call"
        );
        assert_eq!(follow.conversation.as_deref(), Some("conv_1"));
    }
}
