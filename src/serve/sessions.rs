//! Engine-backed sessions (SPEC §16 "Turns", "Compaction"): a client's `turn/start` on a
//! session runs one harness turn (SPEC §11) and `thread/compact/start` the harness's manual
//! compaction (SPEC §10), on the serve's shared upstream.
//!
//! The harness runs unchanged: [`ServeBackend`] is a [`ThreadedBackend`] over the router's
//! [`UpstreamHandle`] (raw JSON-RPC `thread/start`, `thread/resume`, `thread/inject_items`,
//! `turn/start`, `thread/compact/start`; a turn's end is observed by watching the upstream's
//! notifications for its thread). The router relays the same notifications to the clients,
//! rewritten to the client's thread id, so the reply streams to them as from Codex itself.
//!
//! What only the serving of one client request knows — the client thread id, the asking
//! connection, the client's own `turn/start` params, the non-text input items, and where to
//! send the upstream's `turn/start` answer — travels to the backend in a task-local
//! [`TurnScope`] around the harness call. The client gets its `turn/start` answer as soon as
//! the upstream accepted the turn; the harness records the turn (transcript, engine commit)
//! when `turn/completed` arrives, and a failed or interrupted turn commits nothing.
//!
//! Thread identity: a session's first backend thread is the one the client started (the
//! harness adopts it on the session's first turn, delivering the effective developer
//! instructions by injection); a later backend thread (an epoch change, drift under `rotate`,
//! overflow recovery) is bound to the client id in the thread map, hidden from lists.
//!
//! A rotation's new backend thread gets the client's thread settings (its `thread/start`,
//! overlaid by later `thread/resume`s: cwd, model, sandbox, approval policy, config, base
//! instructions, …) with the developer instructions the harness computes.
//!
//! Delivery of the projection: per `projection.codexContextDelivery`; unset, the upstream's
//! version decides as for the Codex backend (additional context from 0.171.0). In the turn
//! input, the relayed `userMessage` items of the turn show the client's own input instead (the
//! router swaps them). `thread/read`, `thread/resume`, `thread/turns/list` and
//! `thread/items/list` of a session show the conversation as the user had it ([`crate::serve::history`]): the earlier backend
//! threads' turns rebuilt from the transcript, then the current thread's, framed inputs cut
//! back to the user's request.

use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use codex_app_server_client::{
    keeps_additional_context_across_compaction, AdditionalContext, CodexVersion,
};
use ctxbridge_jsonrpc::codes::{INTERNAL_ERROR, INVALID_REQUEST};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::backend::codex::ADDITIONAL_CONTEXT_KEY;
use crate::backend::{
    is_overflow_message, AutoCompaction, BackendError, BackendKind, BackendProfile, Completion,
    CompletionRequest, NativeCompaction, ResumeThread, StartThread, ThreadId, ThreadedBackend,
    TurnEvent, TurnOutcome, TurnRequest, Usage,
};
use crate::harness::{Harness, HarnessError, TurnSpec};
use crate::serve::history::{self, PageRequest, SessionHistory};
use crate::serve::hub::ConnId;
use crate::serve::route::SessionOp;
use crate::serve::seam::{ClientAnswer, SessionRequest, SessionTurns, UpstreamHandle};
use crate::serve::RpcError;

tokio::task_local! {
    static SCOPE: Arc<TurnScope>;
}

/// What the backend needs to know about the client request a harness call serves.
struct TurnScope {
    /// The session key and the id clients know the thread by.
    client_thread_id: String,
    /// The asking connection (its server→client requests go there).
    conn: ConnId,
    /// The client's `turn/start` params (backend ids); `threadId` and `input` are replaced.
    params: Value,
    /// The client's non-text input items, passed into the backend turn unchanged.
    extra_items: Vec<Value>,
    /// The client's own backend thread, to adopt as the session's first thread.
    adopt: Mutex<Option<String>>,
    /// Where the upstream's answer to the `turn/start` (or `thread/compact/start`) goes.
    accepted: Mutex<Option<oneshot::Sender<Value>>>,
    /// The client request the upstream's first accepting answer answers, from the router, in
    /// order with the turn's notifications.
    answer: ClientAnswer,
    /// The harness serving the session (a rotation records where the transcript stood).
    harness: Arc<Harness>,
}

impl TurnScope {
    fn current() -> Option<Arc<TurnScope>> {
        SCOPE.try_with(Arc::clone).ok()
    }

    fn accept(&self, result: Value) {
        let sender = self
            .accepted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(result);
        }
    }

    /// The upstream request that starts the turn (or the compaction), accepted: the first one
    /// accepted answers the client at once ([`UpstreamHandle::request_answering`]) and ends the
    /// session request ([`TurnScope::accept`]); a later one (a retry on a new thread after an
    /// overflow) only the harness. Without a scope (no client request) a plain request.
    async fn request_start(
        scope: Option<&TurnScope>,
        upstream: &UpstreamHandle,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let Some(scope) = scope.filter(|s| s.awaits_acceptance()) else {
            return upstream.request(method, params).await;
        };
        let result = upstream
            .request_answering(method, params, &scope.answer)
            .await?;
        scope.accept(result.clone());
        Ok(result)
    }

    fn awaits_acceptance(&self) -> bool {
        self.accepted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn take_adoptable(&self) -> Option<String> {
        self.adopt.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The Codex app-server behind `serve`, as a [`ThreadedBackend`] for the harness.
#[derive(Debug, Default)]
pub struct ServeBackend {
    upstream: OnceLock<UpstreamHandle>,
}

fn rpc_error(operation: &'static str, thread: &str, error: RpcError) -> BackendError {
    let message = error.message;
    let lower = message.to_ascii_lowercase();
    if lower.contains("not found") || lower.contains("no rollout") {
        return BackendError::ThreadNotFound {
            operation,
            thread_id: thread.to_owned(),
            message,
        };
    }
    if is_overflow_message(&message) {
        return BackendError::ContextOverflow { operation, message };
    }
    if error.code == INTERNAL_ERROR {
        return BackendError::Unavailable { operation, message };
    }
    BackendError::Other { operation, message }
}

/// The turn id a notification is about, when it names one.
fn turn_of(params: &Value) -> Option<&str> {
    params
        .get("turnId")
        .and_then(Value::as_str)
        .or_else(|| params.pointer("/turn/id").and_then(Value::as_str))
}

/// A turn's ending as the upstream reported it.
struct Ended {
    status: String,
    error: Option<String>,
    reply: String,
    compaction: Option<AutoCompaction>,
    usage: Option<Usage>,
}

/// Follows a turn's notifications until its `turn/completed`, forwarding text to `events`.
async fn follow_turn(
    operation: &'static str,
    watch: &mut mpsc::UnboundedReceiver<(String, Value)>,
    turn_id: Option<&str>,
    events: Option<&mpsc::Sender<TurnEvent>>,
) -> Result<Ended, BackendError> {
    let mut reply = String::new();
    let mut compaction: Option<AutoCompaction> = None;
    let mut usage = None;
    let mut last_error = None;
    while let Some((method, params)) = watch.recv().await {
        if let (Some(want), Some(got)) = (turn_id, turn_of(&params)) {
            if want != got {
                continue;
            }
        }
        match method.as_str() {
            "item/agentMessage/delta" => {
                if let (Some(events), Some(delta)) =
                    (events, params.get("delta").and_then(Value::as_str))
                {
                    let _ = events.send(TurnEvent::TextDelta(delta.to_owned())).await;
                }
            }
            "item/completed" => match params.pointer("/item/type").and_then(Value::as_str) {
                Some("agentMessage") => {
                    reply = params
                        .pointer("/item/text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                }
                Some("contextCompaction") => {
                    compaction.get_or_insert_with(AutoCompaction::default);
                }
                _ => {}
            },
            "thread/compacted" => {
                compaction.get_or_insert_with(AutoCompaction::default);
            }
            "thread/tokenUsage/updated" => {
                let usage_value = params.get("tokenUsage").cloned().unwrap_or(Value::Null);
                let last = usage_value.get("last").unwrap_or(&usage_value);
                let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
                usage = Some(Usage {
                    input_tokens: n("inputTokens"),
                    output_tokens: n("outputTokens"),
                    cached_input_tokens: n("cachedInputTokens"),
                });
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    if let Some(events) = events {
                        let _ = events.send(TurnEvent::RetryDiscarded { message }).await;
                    }
                } else {
                    last_error = Some(message);
                }
            }
            "turn/completed" => {
                let status = params
                    .pointer("/turn/status")
                    .and_then(Value::as_str)
                    .unwrap_or("failed")
                    .to_owned();
                let error = params
                    .pointer("/turn/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or(last_error);
                return Ok(Ended {
                    status,
                    error,
                    reply,
                    compaction,
                    usage,
                });
            }
            _ => {}
        }
    }
    Err(BackendError::Unavailable {
        operation,
        message: "ctxbridge serve stopped before the turn completed".into(),
    })
}

impl ServeBackend {
    /// A backend that uses the upstream handle it is given on the first session request.
    pub fn new() -> ServeBackend {
        ServeBackend::default()
    }

    fn upstream(&self, operation: &'static str) -> Result<&UpstreamHandle, BackendError> {
        self.upstream.get().ok_or(BackendError::Unavailable {
            operation,
            message: "no upstream connection yet".into(),
        })
    }

    async fn attached(
        &self,
        operation: &'static str,
        thread: &str,
    ) -> Result<&UpstreamHandle, BackendError> {
        let upstream = self.upstream(operation)?;
        upstream
            .ensure_attached(thread)
            .await
            .map_err(|e| rpc_error(operation, thread, e))?;
        Ok(upstream)
    }

    async fn inject(
        &self,
        upstream: &UpstreamHandle,
        thread: &str,
        text: &str,
    ) -> Result<(), BackendError> {
        const OP: &str = "thread/inject_items";
        let item = json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]});
        upstream
            .request(OP, json!({"threadId": thread, "items": [item]}))
            .await
            .map(|_| ())
            .map_err(|e| rpc_error(OP, thread, e))
    }
}

#[async_trait]
impl ThreadedBackend for ServeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Codex
    }

    fn label(&self) -> &str {
        "the Codex app-server behind ctxbridge serve"
    }

    fn profile(&self) -> BackendProfile {
        BackendProfile::CODEX
    }

    /// The connected Codex's version (its `initialize` userAgent) decides, as for the Codex
    /// backend: from 0.171.0 a turn's additional context survives compaction.
    async fn keeps_additional_context(&self) -> bool {
        let Ok(upstream) = self.upstream("initialize") else {
            return false;
        };
        match upstream.upstream_info().await {
            Ok(info) => info
                .get("userAgent")
                .and_then(Value::as_str)
                .and_then(CodexVersion::from_user_agent)
                .is_some_and(|version| keeps_additional_context_across_compaction(&version)),
            Err(error) => {
                tracing::warn!(error = %error.message, "serve: no upstream version; context goes in the turn input");
                false
            }
        }
    }

    /// The session's first thread is the client's own (adopted: the instructions are
    /// injected); later ones are started here and hidden from clients.
    async fn start_thread(&self, request: StartThread) -> Result<ThreadId, BackendError> {
        const OP: &str = "thread/start";
        if let Some(thread) = TurnScope::current().and_then(|scope| scope.take_adoptable()) {
            let upstream = self.attached(OP, &thread).await?;
            if let Some(text) = &request.developer_instructions {
                self.inject(upstream, &thread, text).await?;
            }
            return Ok(ThreadId(thread));
        }
        let upstream = self.upstream(OP)?;
        // A rotation: the new thread gets what the client set for its thread (cwd, model,
        // sandbox, approval policy, config, base instructions, …) and the developer
        // instructions the harness computed.
        let mut params = match TurnScope::current() {
            Some(scope) => upstream.session_settings(&scope.client_thread_id).await,
            None => serde_json::Map::new(),
        };
        if let Some(text) = request.base_instructions {
            params
                .entry("baseInstructions")
                .or_insert(Value::String(text));
        }
        match request.developer_instructions {
            Some(text) => {
                params.insert("developerInstructions".into(), Value::String(text));
            }
            None => {
                params.remove("developerInstructions");
            }
        }
        if let Some(model) = request.model {
            params.entry("model").or_insert(Value::String(model));
        }
        let result = upstream
            .request(OP, Value::Object(params))
            .await
            .map_err(|e| rpc_error(OP, "", e))?;
        let thread = result
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .ok_or_else(|| BackendError::Other {
                operation: OP,
                message: format!("no thread id in {result}"),
            })?;
        if let Some(scope) = TurnScope::current() {
            scope.record_rotation(thread);
        }
        Ok(ThreadId(thread.to_owned()))
    }

    /// Resumes the thread unless the current child has it loaded, re-sending its instructions.
    async fn resume_thread(
        &self,
        thread_id: &ThreadId,
        resume: &ResumeThread,
    ) -> Result<(), BackendError> {
        const OP: &str = "thread/resume";
        let mut params = json!({"threadId": thread_id.as_str()});
        if let Some(object) = params.as_object_mut() {
            if let Some(text) = &resume.base_instructions {
                object.insert("baseInstructions".into(), Value::String(text.clone()));
            }
            if let Some(text) = &resume.developer_instructions {
                object.insert("developerInstructions".into(), Value::String(text.clone()));
            }
        }
        self.upstream(OP)?
            .ensure_attached_with(thread_id.as_str(), params)
            .await
            .map_err(|e| rpc_error(OP, thread_id.as_str(), e))
    }

    async fn inject_developer_message(
        &self,
        thread_id: &ThreadId,
        text: &str,
    ) -> Result<(), BackendError> {
        let upstream = self
            .attached("thread/inject_items", thread_id.as_str())
            .await?;
        self.inject(upstream, thread_id.as_str(), text).await
    }

    async fn run_turn(
        &self,
        request: TurnRequest,
        events: mpsc::Sender<TurnEvent>,
    ) -> Result<TurnOutcome, BackendError> {
        const OP: &str = "turn/start";
        let thread = request.thread_id.as_str().to_owned();
        let scope = TurnScope::current();
        if let Some(scope) = &scope {
            // Before anything of the turn flows: clients see this thread under their id.
            self.upstream(OP)?
                .bind_session(&scope.client_thread_id, &thread, scope.conn)
                .await;
        }
        let upstream = self.attached(OP, &thread).await?;
        let mut params = scope
            .as_ref()
            .map_or_else(|| json!({}), |scope| scope.params.clone());
        let mut input = vec![json!({"type": "text", "text": request.input, "text_elements": []})];
        if let Some(scope) = &scope {
            input.extend(scope.extra_items.iter().cloned());
        }
        if let Some(object) = params.as_object_mut() {
            object.insert("threadId".into(), Value::String(thread.clone()));
            object.insert("input".into(), Value::Array(input));
            if let Some(context) = &request.additional_context {
                let entry = AdditionalContext::application(context.clone());
                let value = serde_json::to_value(&entry).map_err(|e| BackendError::Other {
                    operation: OP,
                    message: format!("cannot encode additionalContext: {e}"),
                })?;
                object.insert(
                    "additionalContext".into(),
                    json!({ ADDITIONAL_CONTEXT_KEY: value }),
                );
            }
        }
        if let Some(input) = scope.as_ref().and_then(|s| s.params.get("input")) {
            upstream.show_user_input(&thread, input.clone());
        }
        let mut watch = upstream.watch(&thread);
        let result = TurnScope::request_start(scope.as_deref(), upstream, OP, params)
            .await
            .map_err(|e| rpc_error(OP, &thread, e))?;
        let turn_id = result
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let ended = follow_turn(OP, &mut watch, turn_id.as_deref(), Some(&events)).await?;
        if ended.status == "completed" {
            return Ok(TurnOutcome {
                thread_id: request.thread_id,
                reply: ended.reply,
                auto_compaction: ended.compaction,
                usage: ended.usage,
            });
        }
        let message = ended
            .error
            .unwrap_or_else(|| format!("turn ended {}", ended.status));
        Err(if is_overflow_message(&message) {
            BackendError::ContextOverflow {
                operation: OP,
                message,
            }
        } else {
            BackendError::TurnFailed {
                operation: OP,
                message,
            }
        })
    }

    async fn compact_thread(&self, thread_id: &ThreadId) -> Result<NativeCompaction, BackendError> {
        const OP: &str = "thread/compact/start";
        let thread = thread_id.as_str();
        let upstream = self.attached(OP, thread).await?;
        let mut watch = upstream.watch(thread);
        let scope = TurnScope::current();
        TurnScope::request_start(scope.as_deref(), upstream, OP, json!({"threadId": thread}))
            .await
            .map_err(|e| rpc_error(OP, thread, e))?;
        let ended = follow_turn(OP, &mut watch, None, None).await?;
        if ended.status == "completed" && ended.compaction.is_some() {
            return Ok(NativeCompaction::default());
        }
        Err(BackendError::Other {
            operation: OP,
            message: format!(
                "compaction ended {} (compaction item seen: {}): {}",
                ended.status,
                ended.compaction.is_some(),
                ended.error.unwrap_or_default()
            ),
        })
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, BackendError> {
        const OP: &str = "llm.complete";
        let upstream = self.upstream(OP)?;
        let CompletionRequest {
            instructions,
            input,
            model,
            ..
        } = request;
        let mut params = json!({"ephemeral": true});
        if let Some(object) = params.as_object_mut() {
            if let Some(text) = instructions {
                object.insert("developerInstructions".into(), Value::String(text));
            }
            if let Some(model) = &model {
                object.insert("model".into(), Value::String(model.clone()));
            }
        }
        let started = upstream
            .request("thread/start", params)
            .await
            .map_err(|e| rpc_error(OP, "", e))?;
        let thread = started
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut watch = upstream.watch(&thread);
        let result = upstream
            .request(
                "turn/start",
                json!({"threadId": thread, "input": [{"type": "text", "text": input, "text_elements": []}]}),
            )
            .await
            .map_err(|e| rpc_error(OP, &thread, e))?;
        let turn_id = result.pointer("/turn/id").and_then(Value::as_str);
        let ended = follow_turn(OP, &mut watch, turn_id, None).await?;
        if ended.status == "completed" {
            Ok(Completion {
                text: ended.reply,
                model,
                usage: None,
            })
        } else {
            Err(BackendError::TurnFailed {
                operation: OP,
                message: ended
                    .error
                    .unwrap_or_else(|| format!("turn ended {}", ended.status)),
            })
        }
    }
}

/// Session requests served by the harness (SPEC §16): used when an engine other than
/// `legacy` is selected, or `serve.engineThreads` is `"all"`.
pub struct EngineSessions {
    harness: Arc<Harness>,
    backend: Arc<ServeBackend>,
}

impl std::fmt::Debug for EngineSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSessions")
            .field("harness", &self.harness)
            .finish_non_exhaustive()
    }
}

impl EngineSessions {
    /// Sessions served by `harness`, which must run on `backend`.
    pub fn new(harness: Arc<Harness>, backend: Arc<ServeBackend>) -> EngineSessions {
        EngineSessions { harness, backend }
    }

    /// The harness (tests, diagnostics).
    pub fn harness(&self) -> &Arc<Harness> {
        &self.harness
    }

    /// Runs `work` (a harness call) in its own task with `scope`; returns the upstream's
    /// answer as soon as it accepted the turn (or the compaction), else what `work` ended with.
    async fn run_scoped<T: Send + 'static>(
        &self,
        scope: TurnScope,
        what: &'static str,
        work: impl std::future::Future<Output = Result<T, HarnessError>> + Send + 'static,
        finished: impl FnOnce(T) -> Value + Send + 'static,
    ) -> Result<Value, RpcError> {
        let (accepted_tx, accepted_rx) = oneshot::channel();
        *scope.accepted.lock().unwrap_or_else(|p| p.into_inner()) = Some(accepted_tx);
        let session = scope.client_thread_id.clone();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(SCOPE.scope(Arc::new(scope), async move {
            let outcome = work.await;
            if let Err(error) = &outcome {
                tracing::warn!(%session, error = %crate::serve::error_chain(error), "serve: {what} failed");
            }
            let _ = done_tx.send(outcome.map(finished));
        }));
        tokio::select! {
            biased;
            Ok(result) = accepted_rx => Ok(result),
            done = done_rx => match done {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(RpcError::new(INVALID_REQUEST, crate::serve::error_chain(&error))),
                Err(_) => Err(RpcError::new(INTERNAL_ERROR, format!("{what} was cancelled"))),
            },
        }
    }
}

/// A session's rotation history ([`SessionHistory`]) as stored (empty when none or
/// unreadable).
fn load_history(harness: &Harness, session: &str) -> Result<SessionHistory, RpcError> {
    let internal = |e: String| RpcError::new(INTERNAL_ERROR, e);
    let Some(json) = harness
        .store()
        .load_document(history::NAMESPACE, session)
        .map_err(|e| internal(format!("loading the history of thread {session}: {e}")))?
    else {
        return Ok(SessionHistory::default());
    };
    serde_json::from_str(&json).map_err(|e| {
        internal(format!(
            "the history of thread {session} is unreadable: {e}"
        ))
    })
}

impl TurnScope {
    /// Records that the session's backend thread `thread` starts where its transcript stands
    /// now (the harness holds the session's lease while it starts a thread, so the previous
    /// turn is committed and this one is not yet).
    fn record_rotation(&self, thread: &str) {
        let session = &self.client_thread_id;
        let recorded = self
            .harness
            .transcript(session)
            .map_err(|e| crate::serve::error_chain(&e))
            .and_then(|transcript| {
                let mut history = load_history(&self.harness, session).map_err(|e| e.message)?;
                history.threads.insert(thread.to_owned(), transcript.len());
                let json = serde_json::to_string(&history).map_err(|e| e.to_string())?;
                self.harness
                    .store()
                    .save_document(history::NAMESPACE, session, &json)
                    .map_err(|e| e.to_string())
            });
        if let Err(error) = recorded {
            tracing::warn!(%session, %thread, %error, "serve: could not record the session's rotation; reads show only its current backend thread");
        }
    }
}

impl EngineSessions {
    /// The session's turns on backend threads before `backend` (its current one), rebuilt
    /// from the transcript; none when the session never moved.
    fn earlier_turns(&self, session: &str, backend: &str) -> Result<Vec<Value>, RpcError> {
        let history = load_history(&self.harness, session)?;
        let Some(&earlier_messages) = history.threads.get(backend) else {
            return Ok(Vec::new());
        };
        let transcript = self
            .harness
            .transcript(session)
            .map_err(|e| RpcError::new(INTERNAL_ERROR, crate::serve::error_chain(&e)))?;
        let earlier = &transcript[..earlier_messages.min(transcript.len())];
        Ok(history::transcript_turns(session, earlier))
    }

    /// The thread object of a `thread/read` or `thread/resume` answer as the client had it:
    /// its turns (when present) preceded by the earlier threads' and showing the user's own
    /// input; its preview the user's first words. `with_turns`: the request asked for turns.
    fn present_thread(
        &self,
        request: &SessionRequest,
        with_turns: bool,
        result: &mut Value,
    ) -> Result<(), RpcError> {
        let Some(thread) = result.get_mut("thread") else {
            return Ok(());
        };
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        let first_words = history::first_user_text(&earlier);
        if let Some(turns) = thread.get_mut("turns").and_then(Value::as_array_mut) {
            turns.iter_mut().for_each(history::show_own_input);
            if with_turns {
                turns.splice(0..0, earlier);
            }
        }
        history::show_own_preview(thread, first_words);
        Ok(())
    }

    /// `thread/read`: the current backend thread's answer, presented as the client had it.
    async fn read(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let with_turns = request.params.get("includeTurns").and_then(Value::as_bool) == Some(true);
        let mut result = upstream
            .request("thread/read", request.params.clone())
            .await?;
        self.present_thread(&request, with_turns, &mut result)?;
        Ok(result)
    }

    /// `thread/turns/list`: relayed (turns showing the user's own input) for a session on its
    /// first backend thread; across backend threads, every turn is gathered (earlier threads'
    /// from the transcript, the current one's from the upstream) and paged here.
    async fn turns_list(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        const OP: &str = "thread/turns/list";
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        if earlier.is_empty() {
            let mut result = upstream.request(OP, request.params).await?;
            if let Some(turns) = result.get_mut("data").and_then(Value::as_array_mut) {
                turns.iter_mut().for_each(history::show_own_input);
            }
            return Ok(result);
        }
        let page_request = PageRequest::of(&request.params);
        let view = request.params.get("itemsView").and_then(Value::as_str);
        let turns = all_turns(earlier, &request.backend_thread_id, view, upstream).await?;
        history::page(turns, &page_request)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))
    }

    /// `thread/resume`: the current backend thread resumed; its answer presented as the client
    /// had it. For a session spanning several backend threads, the page `initialTurnsPage`
    /// asks for and the `turnsBackwardsCursor` are ctxbridge's, over every turn of the session
    /// (the upstream's would cover the current backend thread alone and name it).
    async fn resume(
        &self,
        mut request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let with_turns = request.params.get("excludeTurns").and_then(Value::as_bool) != Some(true);
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        let initial_page = request
            .params
            .get("initialTurnsPage")
            .filter(|p| p.is_object())
            .cloned();
        if !earlier.is_empty() && initial_page.is_some() {
            if let Some(params) = request.params.as_object_mut() {
                params.remove("initialTurnsPage");
            }
        }
        let mut result = upstream
            .request("thread/resume", request.params.clone())
            .await?;
        self.present_thread(&request, with_turns, &mut result)?;
        if earlier.is_empty() {
            if let Some(turns) = result
                .pointer_mut("/initialTurnsPage/data")
                .and_then(Value::as_array_mut)
            {
                turns.iter_mut().for_each(history::show_own_input);
            }
            return Ok(result);
        }
        let view = initial_page
            .as_ref()
            .and_then(|p| p.get("itemsView"))
            .and_then(Value::as_str);
        let turns_full = all_turns(
            earlier.clone(),
            &request.backend_thread_id,
            Some("full"),
            upstream,
        )
        .await?;
        let mut turns = turns_full.clone();
        if view != Some("full") {
            turns = all_turns(earlier, &request.backend_thread_id, view, upstream).await?;
        }
        let backwards = history::backwards_cursor(turns.len());
        if let (Some(page_params), Some(object)) = (&initial_page, result.as_object_mut()) {
            let page = history::page(turns, &PageRequest::of(page_params))
                .map_err(|message| RpcError::new(INVALID_REQUEST, message))?;
            object.insert("initialTurnsPage".into(), page);
        }
        if let Some(object) = result.as_object_mut() {
            object.insert("turnsBackwardsCursor".into(), backwards);
            let items = history::item_entries(&turns_full, None).len();
            object.insert(
                "itemsBackwardsCursor".into(),
                history::backwards_cursor(items),
            );
        }
        Ok(result)
    }

    /// `thread/items/list`: relayed (user messages showing the user's own input) for a session
    /// on its first backend thread; across backend threads, every item of every turn is
    /// gathered (earlier threads' from the transcript, the current one's from the upstream)
    /// and paged here.
    async fn items_list(
        &self,
        request: SessionRequest,
        upstream: &UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let earlier = self.earlier_turns(&request.client_thread_id, &request.backend_thread_id)?;
        if earlier.is_empty() {
            let mut result = upstream
                .request("thread/items/list", request.params)
                .await?;
            if let Some(entries) = result.get_mut("data").and_then(Value::as_array_mut) {
                for entry in entries {
                    if let Some(item) = entry.get_mut("item") {
                        history::show_own_item_input(item);
                    }
                }
            }
            return Ok(result);
        }
        let turns = all_turns(earlier, &request.backend_thread_id, Some("full"), upstream).await?;
        let turn_id = request.params.get("turnId").and_then(Value::as_str);
        let entries = history::item_entries(&turns, turn_id);
        let page_request = history::items_page_request(&request.params, &entries)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))?;
        history::page(entries, &page_request)
            .map_err(|message| RpcError::new(INVALID_REQUEST, message))
    }
}

/// Every turn of a session spanning several backend threads, oldest first: `earlier` (the
/// transcript turns of its earlier backend threads) shown in `view`, then the turns of
/// `backend` (its current thread) fetched page by page from the upstream in `view`, showing
/// the user's own input.
async fn all_turns(
    earlier: Vec<Value>,
    backend: &str,
    view: Option<&str>,
    upstream: &UpstreamHandle,
) -> Result<Vec<Value>, RpcError> {
    const OP: &str = "thread/turns/list";
    let mut turns = earlier;
    turns
        .iter_mut()
        .for_each(|turn| history::view_transcript_turn(turn, view));
    let mut cursor: Option<Value> = None;
    loop {
        let mut params = json!({"threadId": backend, "sortDirection": "asc"});
        if let Some(view) = view {
            params["itemsView"] = json!(view);
        }
        if let Some(cursor) = cursor.take() {
            params["cursor"] = cursor;
        }
        let result = upstream.request(OP, params).await?;
        let mut data = result
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        data.iter_mut().for_each(history::show_own_input);
        turns.extend(data);
        match result.get("nextCursor").filter(|c| c.is_string()) {
            Some(next) => cursor = Some(next.clone()),
            None => break,
        }
    }
    Ok(turns)
}

/// The prompt (text items joined by newlines) and the other items of a `turn/start` input.
fn split_input(params: &Value) -> (String, Vec<Value>) {
    let mut texts = Vec::new();
    let mut others = Vec::new();
    for item in params
        .get("input")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match (
            item.get("type").and_then(Value::as_str),
            item.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(text)) => texts.push(text.to_owned()),
            _ => others.push(item.clone()),
        }
    }
    (texts.join("\n"), others)
}

#[async_trait]
impl SessionTurns for EngineSessions {
    async fn serve(
        &self,
        request: SessionRequest,
        upstream: UpstreamHandle,
    ) -> Result<Value, RpcError> {
        let _ = self.backend.upstream.set(upstream.clone());
        match request.op {
            SessionOp::Resume => self.resume(request, &upstream).await,
            SessionOp::TurnStart => {
                let session = request.client_thread_id.clone();
                let bound =
                    self.harness.binding(&session).await.map_err(|e| {
                        RpcError::new(INVALID_REQUEST, crate::serve::error_chain(&e))
                    })?;
                // The session's first turn adopts the thread the client started.
                let adopt = (bound.is_none() && request.backend_thread_id == session)
                    .then(|| session.clone());
                let (prompt, extra_items) = split_input(&request.params);
                let scope = TurnScope {
                    client_thread_id: session.clone(),
                    conn: request.conn,
                    params: request.params,
                    extra_items,
                    adopt: Mutex::new(adopt),
                    accepted: Mutex::new(None),
                    answer: request.answer.clone(),
                    harness: self.harness.clone(),
                };
                let harness = self.harness.clone();
                self.run_scoped(
                    scope,
                    "turn",
                    async move { harness.turn(TurnSpec::new(session, prompt)).await },
                    |report| json!({"turn": {"id": null, "status": "completed", "items": [], "threadId": report.thread_id}}),
                )
                .await
            }
            SessionOp::Read => self.read(request, &upstream).await,
            SessionOp::TurnsList => self.turns_list(request, &upstream).await,
            SessionOp::ItemsList => self.items_list(request, &upstream).await,
            SessionOp::CompactStart => {
                let session = request.client_thread_id.clone();
                let thread = request.backend_thread_id.clone();
                let scope = TurnScope {
                    client_thread_id: session.clone(),
                    conn: request.conn,
                    params: request.params,
                    extra_items: Vec::new(),
                    adopt: Mutex::new(None),
                    accepted: Mutex::new(None),
                    answer: request.answer.clone(),
                    harness: self.harness.clone(),
                };
                let harness = self.harness.clone();
                self.run_scoped(
                    scope,
                    "manual compaction",
                    async move { harness.compact(&session).await },
                    // Without a native compaction no upstream turn tells the client the
                    // compaction ended (the answer came from the upstream when one ran).
                    move |report| {
                        if !report.native_compaction {
                            upstream.show_compaction_turn(&thread);
                        }
                        json!({})
                    },
                )
                .await
            }
        }
    }

    async fn shutdown(&self) {
        self.harness.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The prompt is the text items joined by newlines; other items are kept in order.
    #[test]
    fn splits_turn_input() {
        let params = json!({"input": [
            {"type": "text", "text": "look at"},
            {"type": "localImage", "path": "/x.png"},
            {"type": "text", "text": "this"}
        ]});
        let (prompt, others) = split_input(&params);
        assert_eq!(prompt, "look at\nthis");
        assert_eq!(
            others,
            vec![json!({"type": "localImage", "path": "/x.png"})]
        );
    }

    /// Upstream errors become the backend errors the harness acts on.
    #[test]
    fn classifies_upstream_errors() {
        let missing = rpc_error(
            "turn/start",
            "t",
            RpcError::new(INVALID_REQUEST, "thread not found: t"),
        );
        assert!(matches!(missing, BackendError::ThreadNotFound { .. }));
        let overflow = rpc_error(
            "turn/start",
            "t",
            RpcError::new(INVALID_REQUEST, "maximum context length exceeded"),
        );
        assert!(matches!(overflow, BackendError::ContextOverflow { .. }));
        let dead = rpc_error(
            "turn/start",
            "t",
            RpcError::new(INTERNAL_ERROR, "upstream died"),
        );
        assert!(matches!(dead, BackendError::Unavailable { .. }));
    }
}
