//! [`ThreadedBackend`] for [`ResponsesBackend`].

use async_trait::async_trait;
use responses_client::{CompactRequest, CreateResponse, InputItem};
use tokio::sync::mpsc;

use super::super::{
    BackendError, BackendKind, BackendProfile, Completion, CompletionRequest, NativeCompaction,
    ResumeThread, StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnOutcome, TurnRequest,
    Usage,
};
use super::chain::{new_thread_id, ChainPosition, ChainState};
use super::config::ResponsesThreads;
use super::errors::backend_error;
use super::request::{turn_request, Continuation};
use super::spare::SpareConversation;
use super::{ResponsesBackend, COMPACTED_CHAIN_PREFIX, FRESH_CHAIN_PREFIX};

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

    /// Conversation threads: takes the spare conversation when there is one (see
    /// [`ResponsesBackend::with_spare_conversation`]), else creates the conversation. Chain
    /// threads: no server call, the chain begins with its first turn. Instructions are not
    /// kept (every turn sends its own); a model override is.
    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        let thread_id = match self.threads {
            ResponsesThreads::Chain => new_thread_id(FRESH_CHAIN_PREFIX),
            ResponsesThreads::Conversation => {
                let id = match self.spare.as_ref().and_then(SpareConversation::take) {
                    Some(spare) => {
                        tracing::debug!(conversation = %spare, "a new thread takes the spare conversation");
                        spare
                    }
                    None => {
                        self.client
                            .create_conversation()
                            .await
                            .map_err(|e| backend_error("start thread", "", e))?
                            .id
                    }
                };
                if let Some(spare) = &self.spare {
                    spare.replenish(&self.client);
                }
                let thread = ThreadId(id);
                self.live.seen(&thread).await;
                thread
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
    /// [`BackendError::ThreadNotFound`]), unless this process knows it exists (see
    /// the `live` module). Chain threads: no server call for response ids; a
    /// chain that is gone shows as [`BackendError::ThreadNotFound`] on its next turn.
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        _resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "resume thread";
        self.check_known(OPERATION, thread_id)?;
        if self.threads == ResponsesThreads::Conversation && !self.live.contains(thread_id) {
            let retrieved = self
                .client
                .retrieve_conversation(thread_id.as_str())
                .await
                .map(drop)
                .map_err(|e| backend_error(OPERATION, thread_id.as_str(), e));
            self.live.learn(thread_id, &retrieved).await;
            retrieved?;
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
            let added = self
                .client
                .create_conversation_items(thread_id.as_str(), &[InputItem::developer_text(text)])
                .await
                .map(drop)
                .map_err(|e| backend_error(OPERATION, thread_id.as_str(), e));
            self.live.learn(thread_id, &added).await;
            added?;
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
        let api_key = match &request.options.api_key {
            None => None,
            // A conversation belongs to the key that made it, and this backend makes and feeds
            // its conversations with its own key outside the turn's requests.
            Some(_) if self.threads == ResponsesThreads::Conversation => {
                return Err(BackendError::Unsupported {
                    operation: "a turn with its caller's own key on conversation threads (backend.threads \"chain\" takes one)",
                    backend: "responses",
                })
            }
            Some(given) => Some(given),
        };
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
        let answered = self
            .run_rounds(
                self.client_on(request.options.connection_pool),
                create,
                &request.tools,
                &events,
                thread_id.as_str(),
                api_key,
            )
            .await;
        if self.threads == ResponsesThreads::Conversation {
            self.live.learn(&thread_id, &answered).await;
        }
        match answered {
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
            tool_choice: None,
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

    /// Deletes the spare conversation, if one was made and not taken.
    async fn shutdown(&self) {
        if let Some(spare) = &self.spare {
            spare.close(&self.client).await;
        }
    }
}
