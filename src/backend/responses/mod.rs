//! The Responses API backend (docs/architecture.md#backends). A thread is, by [`ResponsesThreads`] (config
//! `backend.threads`):
//!
//! - `conversation` (the default): a server-side conversation (`POST /conversations`, then
//!   `conversation: <id>` on every response). The thread id is the `conv_…` id and stays the
//!   same from turn to turn; the server keeps the items without the 30-day limit of stored
//!   responses. `start_thread` creates the conversation, `resume_thread` retrieves it (once: a
//!   conversation created or found by this process is resumed without a call), and a
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
//! - `compacted:<uuid>`: the result of [`ResponsesBackend::compact_thread`](super::ThreadedBackend::compact_thread). The compaction
//!   endpoint returns an opaque context window, not a chainable response, so the window is held
//!   in this process and sent as the `input` (without `previous_response_id`) of the next turn,
//!   which starts a new stored chain. A `compacted:` id whose window this process does not hold
//!   (after a restart) is [`BackendError::ThreadNotFound`], so the harness re-projects on a new
//!   chain instead of continuing from nothing.
//!
//! Every request carries `instructions` = base + developer instructions of the [`TurnRequest`](super::TurnRequest)
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

mod chain;
mod compact;
mod config;
mod errors;
mod live;
mod request;
mod spare;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod threaded;
mod turn;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use responses_client::{ResponsesClient, ResponsesConfig};

use super::{BackendError, ThreadId};
use crate::util::lock;

pub use chain::ChainPosition;
pub use config::{
    api_key_from_env, ResponsesBackendConfig, ResponsesBackendConfigError, ResponsesThreads,
};
pub use request::{
    compose_instructions, function_call_output, function_calls, function_tools, MAX_TOOL_ROUNDS,
};

use chain::ChainState;
use live::LiveConversations;
use spare::SpareConversation;

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

/// The OpenAI Responses API as a [`ThreadedBackend`](super::ThreadedBackend).
#[derive(Debug)]
pub struct ResponsesBackend {
    client: ResponsesClient,
    model: String,
    label: String,
    threads: ResponsesThreads,
    chains: Mutex<HashMap<ThreadId, ChainState>>,
    /// Conversation threads known to exist (resumed without a call).
    live: LiveConversations,
    /// Conversation threads in a long-running process: the conversation made ahead of need
    /// (see [`ResponsesBackend::with_spare_conversation`]).
    spare: Option<SpareConversation>,
    /// A handle on each connection pool a turn may name (none: every turn uses `client`; see
    /// [`ResponsesBackend::with_connection_pools`]).
    pooled: Vec<ResponsesClient>,
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
            live: LiveConversations::default(),
            spare: None,
            pooled: Vec::new(),
        })
    }

    /// The same backend keeping a conversation made ahead of need, for a long-running process
    /// (`serve`) on conversation threads: a new thread (a session's first, a new epoch's) takes
    /// it instead of waiting for `POST /conversations` on its turn's path, and the next is
    /// made in the background. The spare left at [`shutdown`](super::ThreadedBackend::shutdown)
    /// is deleted. Nothing changes on chain threads.
    pub fn with_spare_conversation(mut self) -> Self {
        self.spare = Some(SpareConversation::default());
        self
    }

    /// The same backend with `count` connection pools to the upstream for turns, and one
    /// more for its calls outside them (a conversation made ahead, deletions); a turn's
    /// requests use the pool its [`TurnOptions::connection_pool`](crate::backend::TurnOptions)
    /// names. For a server running connections on lanes (`serve --front responses`): a
    /// connection is driven by the thread that opened it, so each lane's turns reach the
    /// upstream over connections its own thread drives.
    pub fn with_connection_pools(
        mut self,
        count: usize,
    ) -> Result<Self, ResponsesBackendConfigError> {
        let pools = self.client.with_connection_pools(count + 1)?;
        self.pooled = (0..count).map(|pool| pools.on_pool(pool)).collect();
        self.client = pools.on_pool(count);
        Ok(self)
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

    /// The client on connection pool `pool` (modulo the pools there are; the backend's own
    /// client when it keeps no pools for turns).
    pub fn client_on(&self, pool: usize) -> &ResponsesClient {
        match self.pooled.len() {
            0 => &self.client,
            count => self.pooled.get(pool % count).unwrap_or(&self.client),
        }
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    fn chains(&self) -> MutexGuard<'_, HashMap<ThreadId, ChainState>> {
        // The map holds plain data that every critical section leaves consistent, so a
        // poisoned lock is still usable.
        lock(&self.chains)
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
}
