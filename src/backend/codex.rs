//! The Codex app-server backend: `codex app-server` over JSON-RPC.
//!
//! The backend's connection comes from a [`Connect`]: its own child on stdio
//! ([`CodexBackend::new`]), or a connection handed in ([`CodexBackend::over`],
//! [`CodexBackend::on`]: ctxbridge serve's shared upstream, and per client request the
//! connection that answers it).
//!
//! One child process serves every thread. A dead child fails the turn in flight with a clear
//! error; the next call spawns a new child, and a thread the current connection has not loaded
//! is resumed (`thread/resume`) before its turn, as Codex requires after a restart (the
//! connection knows what it has loaded).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use codex_app_server_client::{
    AdditionalContext, AppServerClient, AppServerError, CodexVersion, DynamicToolCallResponse,
    DynamicToolSpec, ItemKind, ThreadResumeParams, ThreadStartParams, TurnEvent as CodexEvent,
    TurnLimitKind, TurnStartParams, TurnStatus,
};

/// How to run the app-server: the adapter's own settings, the one definition of them.
pub use codex_app_server_client::AppServerConfig;
use futures::StreamExt;
use tokio::sync::{mpsc, Mutex};

use super::{
    is_overflow_message, AutoCompaction, BackendError, BackendKind, BackendProfile, Completion,
    CompletionRequest, NativeCompaction, ResumeThread, StartThread, ThreadId, ThreadedBackend,
    ToolInvocation, ToolSpec, TurnEvent, TurnOutcome, TurnRequest, Usage,
};

/// The `additionalContext` key under which a turn's rendered context goes (Codex wraps the
/// value in `<ctxbridge>…</ctxbridge>`).
pub const ADDITIONAL_CONTEXT_KEY: &str = "ctxbridge";

/// `thread/start.dynamicTools` for the thread's tools (`None` when there are none, so a thread
/// without tools starts exactly as before).
fn dynamic_tools(tools: &[ToolSpec]) -> Option<Vec<DynamicToolSpec>> {
    if tools.is_empty() {
        return None;
    }
    Some(
        tools
            .iter()
            .map(|t| DynamicToolSpec::function(&t.name, &t.description, t.parameters.clone()))
            .collect(),
    )
}

/// Where a [`CodexBackend`]'s connection comes from.
#[async_trait]
pub trait Connect: Send + Sync + std::fmt::Debug {
    /// A connection that has had its `initialize` handshake: asked for at first use and again
    /// when the last one is no longer alive.
    async fn connect(&self) -> Result<AppServerClient, AppServerError>;
}

/// A child `codex app-server` of the backend's own, spawned per connection.
#[derive(Debug)]
struct SpawnChild(AppServerConfig);

#[async_trait]
impl Connect for SpawnChild {
    async fn connect(&self) -> Result<AppServerClient, AppServerError> {
        AppServerClient::spawn(self.0.clone()).await
    }
}

/// One connection handed in, used as it is.
#[derive(Debug)]
struct Given(AppServerClient);

#[async_trait]
impl Connect for Given {
    async fn connect(&self) -> Result<AppServerClient, AppServerError> {
        Ok(self.0.clone())
    }
}

/// The Codex app-server as a [`ThreadedBackend`].
pub struct CodexBackend {
    connect: Arc<dyn Connect>,
    /// Working directory of new threads (the child's own when unset).
    cwd: Option<PathBuf>,
    label: String,
    live: Mutex<Option<AppServerClient>>,
    /// What each known thread's resume re-sends: set by `start_thread`, `resume_thread` and
    /// `inject_developer_message`, used by every (re-)attach, also after a child died.
    resume: Mutex<HashMap<String, ResumeThread>>,
}

impl std::fmt::Debug for CodexBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodexBackend")
            .field("label", &self.label)
            .field("connect", &self.connect)
            .finish_non_exhaustive()
    }
}

fn map_error(operation: &'static str, thread_id: &str, e: AppServerError) -> BackendError {
    if let Some(limit) = e.turn_limit() {
        let limit = match limit {
            TurnLimitKind::Idle { .. } => "idle timeout (backend.idleTimeoutMs)",
            TurnLimitKind::Deadline { .. } => "turn timeout (backend.turnTimeoutMs)",
            TurnLimitKind::ReplyTooLarge { .. } => "reply size limit (backend.maxReplyBytes)",
            _ => "turn limit",
        };
        return BackendError::TurnLimit {
            operation,
            limit,
            message: e.to_string(),
        };
    }
    if e.is_thread_not_found() || e.is_no_rollout_found() {
        return BackendError::ThreadNotFound {
            operation,
            thread_id: thread_id.to_string(),
            message: e.to_string(),
        };
    }
    let message = e.to_string();
    if e.is_transport()
        || matches!(
            e,
            AppServerError::Spawn { .. } | AppServerError::CodexHome { .. }
        )
    {
        return BackendError::Unavailable { operation, message };
    }
    if is_overflow_message(&message) {
        return BackendError::ContextOverflow { operation, message };
    }
    BackendError::Other { operation, message }
}

impl CodexBackend {
    /// A backend that spawns the app-server `config` describes on first use; new threads
    /// start in the child's working directory.
    pub fn new(config: AppServerConfig) -> Self {
        let cwd = config.cwd.clone();
        let mut backend = Self::over(Arc::new(SpawnChild(config)), "the Codex app-server");
        backend.cwd = cwd;
        backend
    }

    /// A backend whose connections come from `connect` (ctxbridge serve: its shared
    /// upstream), named `label` in messages.
    pub fn over(connect: Arc<dyn Connect>, label: impl Into<String>) -> Self {
        CodexBackend {
            connect,
            cwd: None,
            label: label.into(),
            live: Mutex::new(None),
            resume: Mutex::new(HashMap::new()),
        }
    }

    /// A backend on the one connection `client` (ctxbridge serve: the connection answering a
    /// client's request, for that request's harness call).
    pub fn on(client: AppServerClient, label: impl Into<String>) -> Self {
        let backend = Self::over(Arc::new(Given(client.clone())), label);
        CodexBackend {
            live: Mutex::new(Some(client)),
            ..backend
        }
    }

    /// Spawns the child now (to fail early on a bad command).
    pub async fn connect(&self) -> Result<(), BackendError> {
        self.client("initialize").await.map(|_| ())
    }

    /// The Codex version the app-server reported on `initialize` (spawning it if needed);
    /// `None` when its user agent has no parsable version.
    pub async fn codex_version(&self) -> Result<Option<CodexVersion>, BackendError> {
        let client = self.client("initialize").await?;
        Ok(client.codex_version().cloned())
    }

    /// The pid of the current child, if one runs.
    pub async fn child_pid(&self) -> Option<u32> {
        self.live.lock().await.as_ref().and_then(|l| l.pid())
    }

    /// Kills the current child (tests: a backend process dying).
    pub async fn kill_child(&self) {
        if let Some(live) = self.live.lock().await.as_ref() {
            live.kill().await;
        }
    }

    /// The live connection, a new one when there is none or the last one died.
    pub async fn client(&self, operation: &'static str) -> Result<AppServerClient, BackendError> {
        let mut live = self.live.lock().await;
        if let Some(client) = live.as_ref() {
            if client.is_alive() {
                return Ok(client.clone());
            }
            tracing::warn!(
                reason = client.death_reason().unwrap_or_default(),
                "codex app-server connection closed; opening a new one"
            );
        }
        let client = self
            .connect
            .connect()
            .await
            .map_err(|e| map_error(operation, "", e))?;
        *live = Some(client.clone());
        Ok(client)
    }

    /// The client with `thread_id` loaded (resumed, re-sending its instructions, if this
    /// connection has not loaded it).
    async fn attached_client(
        &self,
        operation: &'static str,
        thread_id: &ThreadId,
    ) -> Result<AppServerClient, BackendError> {
        let client = self.client(operation).await?;
        let resume = self
            .resume
            .lock()
            .await
            .get(thread_id.as_str())
            .cloned()
            .unwrap_or_default();
        client
            .attach(ThreadResumeParams {
                base_instructions: resume.base_instructions,
                developer_instructions: resume.developer_instructions,
                ..ThreadResumeParams::new(thread_id.as_str())
            })
            .await
            .map_err(|e| map_error(operation, thread_id.as_str(), e))?;
        Ok(client)
    }
}

#[async_trait]
impl ThreadedBackend for CodexBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Codex
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn profile(&self) -> BackendProfile {
        BackendProfile::CODEX
    }

    /// Spawns the app-server if needed and asks the connected Codex version.
    async fn keeps_additional_context(&self) -> bool {
        match self.client("initialize").await {
            Ok(client) => client.keeps_additional_context_across_compaction(),
            Err(_) => false,
        }
    }

    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        let client = self.client("thread/start").await?;
        let resume = ResumeThread {
            base_instructions: request.base_instructions.clone(),
            developer_instructions: request.developer_instructions.clone(),
        };
        let started = client
            .thread_start(ThreadStartParams {
                cwd: self.cwd.clone(),
                model: request.model,
                base_instructions: request.base_instructions,
                developer_instructions: request.developer_instructions,
                dynamic_tools: dynamic_tools(&request.tools),
                ..ThreadStartParams::default()
            })
            .await
            .map_err(|e| map_error("thread/start", "", e))?;
        self.resume
            .lock()
            .await
            .insert(started.thread_id.clone(), resume);
        Ok(ThreadId(started.thread_id))
    }

    /// Resumes the thread on the current child unless that child already has it attached,
    /// re-sending `resume`'s instructions (remembered for later re-attaches).
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        self.resume
            .lock()
            .await
            .insert(thread_id.0.clone(), resume.clone());
        self.attached_client("thread/resume", thread_id)
            .await
            .map(|_| ())
    }

    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        let client = self
            .attached_client("thread/inject_items", thread_id)
            .await?;
        client
            .inject_developer_message(thread_id.as_str(), text)
            .await
            .map_err(|e| map_error("thread/inject_items", thread_id.as_str(), e))?;
        // The injected text is the thread's instructions from now on: re-sent on resume.
        self.resume
            .lock()
            .await
            .entry(thread_id.0.clone())
            .or_default()
            .developer_instructions = Some(text.to_string());
        Ok(())
    }

    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        const OP: &str = "turn/start";
        if !request.options.is_empty() {
            // turn/start carries none of them: refused rather than dropped.
            return Err(BackendError::Unsupported {
                operation: "a turn's own instructions, output cap or tool choice",
                backend: "codex",
            });
        }
        let thread = request.thread_id.clone();
        let client = self.attached_client(OP, &thread).await?;
        let mut params = TurnStartParams::text(request.input.as_str());
        if let Some(context) = request.additional_context {
            params = params.with_context(
                ADDITIONAL_CONTEXT_KEY,
                AdditionalContext::application(context),
            );
        }
        let mut handle = client
            .turn_start_with(thread.as_str(), params)
            .await
            .map_err(|e| map_error(OP, thread.as_str(), e))?;
        let mut reply = String::new();
        let mut compaction: Option<AutoCompaction> = None;
        let mut usage = None;
        let mut last_error: Option<String> = None;
        while let Some(event) = handle.next().await {
            match event.map_err(|e| map_error(OP, thread.as_str(), e))? {
                CodexEvent::TextDelta { delta, .. } => {
                    let _ = events.send(TurnEvent::TextDelta(delta)).await;
                }
                CodexEvent::RetryError { message, .. } => {
                    let _ = events.send(TurnEvent::RetryDiscarded { message }).await;
                }
                CodexEvent::ItemCompleted {
                    kind: ItemKind::AgentMessage { text },
                    ..
                } => reply = text,
                CodexEvent::ItemCompleted {
                    kind: ItemKind::ContextCompaction,
                    ..
                }
                | CodexEvent::Compacted => {
                    if compaction.is_none() {
                        // Codex does not tell clients the summary text.
                        compaction = Some(AutoCompaction { summary: None });
                        let _ = events.send(TurnEvent::Compacted { summary: None }).await;
                    }
                }
                CodexEvent::TokenUsage(v) => {
                    let last = v.get("last").unwrap_or(&v);
                    let n = |k: &str| last.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                    usage = Some(Usage {
                        input_tokens: n("inputTokens"),
                        output_tokens: n("outputTokens"),
                        cached_input_tokens: n("cachedInputTokens"),
                    });
                }
                CodexEvent::Error { message, .. } => last_error = Some(message),
                CodexEvent::Completed { status, error, .. } => {
                    let message = error.or(last_error.take());
                    return match status {
                        TurnStatus::Completed => Ok(TurnOutcome {
                            thread_id: thread,
                            reply,
                            auto_compaction: compaction,
                            usage,
                        }),
                        other => {
                            let message =
                                message.unwrap_or_else(|| format!("turn ended {other:?}"));
                            if is_overflow_message(&message) {
                                Err(BackendError::ContextOverflow {
                                    operation: OP,
                                    message,
                                })
                            } else {
                                Err(BackendError::TurnFailed {
                                    operation: OP,
                                    message,
                                })
                            }
                        }
                    };
                }
                CodexEvent::ToolCall(call) => {
                    tracing::info!(thread = %thread, tool = %call.tool, call_id = %call.call_id, "the model called a tool");
                    let output = request
                        .tools
                        .call(ToolInvocation {
                            call_id: call.call_id.clone(),
                            name: call.tool.clone(),
                            arguments: call.arguments.clone(),
                        })
                        .await;
                    handle.respond_tool_call(
                        &call,
                        &DynamicToolCallResponse {
                            text: output.text,
                            success: !output.is_error,
                        },
                    );
                }
                CodexEvent::Started { .. }
                | CodexEvent::ItemStarted { .. }
                | CodexEvent::ItemCompleted { .. }
                | CodexEvent::Warning { .. } => {}
            }
        }
        Err(BackendError::Unavailable {
            operation: OP,
            message: "the app-server closed the turn without turn/completed".into(),
        })
    }

    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        const OP: &str = "thread/compact/start";
        let client = self.attached_client(OP, thread_id).await?;
        let handle = client
            .thread_compact_start(thread_id.as_str())
            .await
            .map_err(|e| map_error(OP, thread_id.as_str(), e))?;
        let outcome = handle
            .collect()
            .await
            .map_err(|e| map_error(OP, thread_id.as_str(), e))?;
        match outcome.status {
            TurnStatus::Completed if outcome.compaction_seen => Ok(NativeCompaction {
                thread_id: None,
                summary: None,
            }),
            status => Err(BackendError::Other {
                operation: OP,
                message: format!(
                    "compaction ended {status:?} (compaction item seen: {}): {}",
                    outcome.compaction_seen,
                    outcome.error.unwrap_or_default()
                ),
            }),
        }
    }

    /// An ephemeral thread with the instructions as developer instructions. `max_tokens` is
    /// not applied: the app-server protocol has no per-thread or per-turn output-token bound
    /// (`thread/start` and `turn/start` take none, and Codex's Responses requests carry no
    /// `max_output_tokens`), so it is logged and dropped.
    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        const OP: &str = "llm.complete";
        if let Some(max_tokens) = request.max_tokens {
            tracing::info!(
                max_tokens,
                "llm.complete maxTokens is not applied on the Codex backend (the app-server has no output-token bound)"
            );
        }
        let client = self.client(OP).await?;
        let input = request.input;
        let model = request.model;
        let started = client
            .thread_start(ThreadStartParams {
                cwd: self.cwd.clone(),
                developer_instructions: request.instructions,
                model: model.clone(),
                ephemeral: Some(true),
                ..ThreadStartParams::default()
            })
            .await
            .map_err(|e| map_error(OP, "", e))?;
        let outcome = client
            .turn_start(&started.thread_id, &input)
            .await
            .map_err(|e| map_error(OP, &started.thread_id, e))?
            .collect()
            .await
            .map_err(|e| map_error(OP, &started.thread_id, e))?;
        match outcome.status {
            TurnStatus::Completed => Ok(Completion {
                text: outcome.final_text,
                model,
                usage: None,
            }),
            status => Err(BackendError::TurnFailed {
                operation: OP,
                message: outcome
                    .error
                    .unwrap_or_else(|| format!("turn ended {status:?}")),
            }),
        }
    }

    async fn shutdown(&self) {
        if let Some(live) = self.live.lock().await.take() {
            live.shutdown().await;
        }
    }
}
