//! A turn as a stream of typed events, and the summary of a finished turn.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::config::TurnLimits;
use crate::error::{AppServerError, TurnLimitKind};
use crate::transport::Routed;

/// After a limit is hit and `turn/interrupt` sent, how long the handle waits for Codex to end
/// the turn before it reports the limit anyway.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// Sends `turn/interrupt {threadId, turnId}` in the background (arguments: thread id, turn id).
pub(crate) type Interrupter = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Answers a server request in the background (arguments: the request id, its result or an
/// error message).
pub(crate) type Responder = Arc<dyn Fn(Value, Result<Value, String>) + Send + Sync>;

/// An `item/tool/call` server request: the model called one of the thread's `dynamicTools`.
/// Answer it with [`TurnHandle::respond_tool_call`]; Codex waits for the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicToolCall {
    /// The JSON-RPC id of the server request (echoed in the answer).
    pub request_id: Value,
    pub thread_id: String,
    pub turn_id: String,
    /// Codex's id of the call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's namespace, for a tool of a namespace spec.
    pub namespace: Option<String>,
    /// The arguments, as the model gave them.
    pub arguments: Value,
}

impl DynamicToolCall {
    fn parse(request_id: Value, params: &Value) -> Self {
        let text = |key: &str| {
            params
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        Self {
            request_id,
            thread_id: text("threadId"),
            turn_id: text("turnId"),
            call_id: text("callId"),
            tool: text("tool"),
            namespace: params
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            arguments: params.get("arguments").cloned().unwrap_or(Value::Null),
        }
    }
}

/// The answer to a [`DynamicToolCall`]: `{contentItems: [{type: "inputText", text}], success}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicToolCallResponse {
    /// The text the model receives.
    pub text: String,
    /// Whether the call succeeded.
    pub success: bool,
}

impl DynamicToolCallResponse {
    /// The wire form of the answer.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "contentItems": [{"type": "inputText", "text": self.text}],
            "success": self.success,
        })
    }
}

/// The limit being enforced after it was hit: the error to report once Codex confirmed the
/// interrupt (or the grace period ran out).
struct Stopping {
    error: AppServerError,
    grace: Pin<Box<Sleep>>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnStatus {
    Completed,
    Failed,
    Interrupted,
    /// A status this client does not know.
    Other(String),
}

impl TurnStatus {
    fn parse(status: &str) -> Self {
        match status {
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "interrupted" => Self::Interrupted,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// What kind of thread item an `item/started` or `item/completed` is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKind {
    /// The assistant's message; `text` is empty when started, complete when completed.
    AgentMessage { text: String },
    /// The user's input; text parts joined with newlines.
    UserMessage { text: String },
    /// A compaction of the thread's history (manual or automatic).
    ContextCompaction,
    /// Any other item type, by its `type`.
    Other(String),
}

impl ItemKind {
    fn parse(item: &Value) -> Self {
        let text = |key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match item.get("type").and_then(Value::as_str).unwrap_or("") {
            "agentMessage" => Self::AgentMessage { text: text("text") },
            "userMessage" => {
                let parts: Vec<&str> = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect()
                    })
                    .unwrap_or_default();
                Self::UserMessage {
                    text: parts.join("\n"),
                }
            }
            "contextCompaction" => Self::ContextCompaction,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One event of a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// `turn/started`.
    Started {
        turn_id: String,
    },
    /// A piece of an agent message.
    TextDelta {
        item_id: String,
        delta: String,
    },
    ItemStarted {
        item_id: String,
        kind: ItemKind,
    },
    ItemCompleted {
        item_id: String,
        kind: ItemKind,
    },
    /// `thread/tokenUsage/updated`: `{total, last, modelContextWindow}` as Codex sends it.
    TokenUsage(Value),
    /// A failed model request that Codex retries (`error` with `willRetry: true`). The agent
    /// messages in flight will never complete; their partial text is discarded, and the ids are
    /// listed here so a consumer that rendered deltas can retract them.
    RetryError {
        message: String,
        discarded_item_ids: Vec<String>,
    },
    /// A final error (`error` with `willRetry: false`); `turn/completed` follows.
    Error {
        message: String,
        details: Option<String>,
        codex_error_info: Option<Value>,
    },
    /// A `warning` notification about the thread.
    Warning {
        message: String,
    },
    /// `thread/compacted`.
    Compacted,
    /// The model called a dynamic tool; answer with [`TurnHandle::respond_tool_call`] (the turn
    /// does not go on until then).
    ToolCall(DynamicToolCall),
    /// `turn/completed`: the last event of the turn.
    Completed {
        turn_id: String,
        status: TurnStatus,
        error: Option<String>,
    },
}

/// The result of a whole turn, see [`TurnHandle::collect`].
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub turn_id: Option<String>,
    pub status: TurnStatus,
    /// The last completed agent message (empty when there was none).
    pub final_text: String,
    /// Every completed agent message, in order.
    pub agent_messages: Vec<String>,
    /// A `contextCompaction` item (or `thread/compacted`) was seen during the turn.
    pub compaction_seen: bool,
    /// The last token usage reported for the turn.
    pub usage: Option<Value>,
    /// The turn's error: from `turn/completed`, else the last final `error` notification.
    pub error: Option<String>,
    /// Messages of the retried failures, in order.
    pub retries: Vec<String>,
}

/// The events of one turn (a `turn/start`, or the turn a `thread/compact/start` runs), ending
/// with [`TurnEvent::Completed`]. If the app-server dies first, the stream yields one
/// [`AppServerError::Transport`] naming the method that started the turn, then ends.
pub struct TurnHandle {
    thread_id: String,
    turn_id: Option<String>,
    method: String,
    rx: mpsc::UnboundedReceiver<Routed>,
    /// Agent messages started but not completed: item id → text so far.
    partial: BTreeMap<String, String>,
    finished: bool,
    limits: TurnLimits,
    interrupter: Option<Interrupter>,
    /// Answers routed server requests; without one they are answered with an error.
    responder: Option<Responder>,
    /// Fires when no event arrived for `limits.idle_timeout`; reset by every event.
    idle: Pin<Box<Sleep>>,
    /// Fires `limits.turn_deadline` after the handle was created.
    deadline: Pin<Box<Sleep>>,
    /// Agent-message bytes received so far (deltas, plus completed text beyond its deltas).
    reply_bytes: usize,
    stopping: Option<Stopping>,
}

impl std::fmt::Debug for TurnHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnHandle")
            .field("thread_id", &self.thread_id)
            .field("turn_id", &self.turn_id)
            .field("method", &self.method)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl TurnHandle {
    pub(crate) fn new(
        thread_id: String,
        turn_id: Option<String>,
        method: &str,
        rx: mpsc::UnboundedReceiver<Routed>,
        limits: TurnLimits,
        interrupter: Option<Interrupter>,
    ) -> Self {
        let now = Instant::now();
        Self {
            thread_id,
            turn_id,
            method: method.to_owned(),
            rx,
            partial: BTreeMap::new(),
            finished: false,
            limits,
            interrupter,
            responder: None,
            idle: Box::pin(tokio::time::sleep_until(now + limits.idle_timeout)),
            deadline: Box::pin(tokio::time::sleep_until(now + limits.turn_deadline)),
            reply_bytes: 0,
            stopping: None,
        }
    }

    /// Answers routed server requests through `responder`.
    pub(crate) fn with_responder(mut self, responder: Responder) -> Self {
        self.responder = Some(responder);
        self
    }

    /// Answers a [`TurnEvent::ToolCall`] of this turn (the model receives the text).
    pub fn respond_tool_call(&self, call: &DynamicToolCall, response: &DynamicToolCallResponse) {
        self.respond(call.request_id.clone(), Ok(response.to_json()));
    }

    fn respond(&self, id: Value, result: Result<Value, String>) {
        match &self.responder {
            Some(respond) => respond(id, result),
            None => tracing::warn!(
                thread_id = %self.thread_id,
                "codex app-server: no way to answer a server request of this turn"
            ),
        }
    }

    /// Declines a routed server request that no consumer will answer.
    fn decline(&self, id: Value, method: &str, why: &str) {
        tracing::warn!(thread_id = %self.thread_id, %method, why, "codex app-server: declining a server request");
        self.respond(id, Err(format!("ctxbridge cannot answer {method}: {why}")));
    }

    /// The limits this turn runs under.
    pub fn limits(&self) -> TurnLimits {
        self.limits
    }

    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The turn id: known at once for `turn/start`, after `turn/started` for a compaction.
    pub fn turn_id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }

    /// Text of the agent messages in flight (started, not completed), by item id.
    pub fn partial_text(&self) -> &BTreeMap<String, String> {
        &self.partial
    }

    /// The next event; `None` after `Completed` or an error.
    pub async fn recv(&mut self) -> Option<Result<TurnEvent, AppServerError>> {
        self.next().await
    }

    /// Drive the turn to its end and summarise it.
    pub async fn collect(mut self) -> Result<TurnOutcome, AppServerError> {
        let mut outcome = TurnOutcome {
            turn_id: self.turn_id.clone(),
            status: TurnStatus::Other("unfinished".to_owned()),
            final_text: String::new(),
            agent_messages: Vec::new(),
            compaction_seen: false,
            usage: None,
            error: None,
            retries: Vec::new(),
        };
        while let Some(event) = self.next().await {
            match event? {
                TurnEvent::Started { turn_id } => outcome.turn_id = Some(turn_id),
                TurnEvent::ItemCompleted {
                    kind: ItemKind::AgentMessage { text },
                    ..
                } => outcome.agent_messages.push(text),
                TurnEvent::ItemStarted {
                    kind: ItemKind::ContextCompaction,
                    ..
                }
                | TurnEvent::ItemCompleted {
                    kind: ItemKind::ContextCompaction,
                    ..
                }
                | TurnEvent::Compacted => outcome.compaction_seen = true,
                TurnEvent::TokenUsage(usage) => outcome.usage = Some(usage),
                TurnEvent::ToolCall(call) => self.respond_tool_call(
                    &call,
                    &DynamicToolCallResponse {
                        text: format!("tool {} is not available in this turn", call.tool),
                        success: false,
                    },
                ),
                TurnEvent::RetryError { message, .. } => outcome.retries.push(message),
                TurnEvent::Error { message, .. } => outcome.error = Some(message),
                TurnEvent::Completed {
                    turn_id,
                    status,
                    error,
                } => {
                    outcome.turn_id = Some(turn_id);
                    outcome.status = status;
                    if error.is_some() {
                        outcome.error = error;
                    }
                    break;
                }
                TurnEvent::TextDelta { .. }
                | TurnEvent::ItemStarted { .. }
                | TurnEvent::ItemCompleted { .. }
                | TurnEvent::Warning { .. } => {}
            }
        }
        outcome.final_text = outcome.agent_messages.last().cloned().unwrap_or_default();
        Ok(outcome)
    }

    /// Turn one routed notification into an event (or nothing, for notifications a turn
    /// consumer does not need).
    fn translate(&mut self, method: &str, params: &Value) -> Option<TurnEvent> {
        // A connection may route a thread's messages from before this turn's id is known
        // (ctxbridge serve's watch): another turn's are not this turn's events.
        if let (Some(want), Some(got)) = (self.turn_id.as_deref(), turn_of(params)) {
            if want != got {
                tracing::debug!(%method, %got, %want, "codex app-server: skipped a notification of another turn");
                return None;
            }
        }
        let str_at = |pointer: &str| {
            params
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match method {
            "turn/started" => {
                let turn_id = str_at("/turn/id").unwrap_or_default();
                if self.turn_id.is_none() {
                    self.turn_id = Some(turn_id.clone());
                }
                Some(TurnEvent::Started { turn_id })
            }
            "item/started" | "item/completed" => {
                let item = params.get("item")?;
                let item_id = item
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let kind = ItemKind::parse(item);
                if method == "item/started" {
                    if matches!(kind, ItemKind::AgentMessage { .. }) {
                        self.partial.insert(item_id.clone(), String::new());
                    }
                    Some(TurnEvent::ItemStarted { item_id, kind })
                } else {
                    let streamed = self.partial.remove(&item_id).map_or(0, |text| text.len());
                    if let ItemKind::AgentMessage { text } = &kind {
                        self.reply_bytes += text.len().saturating_sub(streamed);
                    }
                    Some(TurnEvent::ItemCompleted { item_id, kind })
                }
            }
            "item/agentMessage/delta" => {
                let item_id = str_at("/itemId").unwrap_or_default();
                let delta = str_at("/delta").unwrap_or_default();
                self.reply_bytes += delta.len();
                self.partial
                    .entry(item_id.clone())
                    .or_default()
                    .push_str(&delta);
                Some(TurnEvent::TextDelta { item_id, delta })
            }
            "thread/tokenUsage/updated" => Some(TurnEvent::TokenUsage(
                params.get("tokenUsage").cloned().unwrap_or(Value::Null),
            )),
            "error" => {
                let message = str_at("/error/message").unwrap_or_default();
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    let discarded_item_ids: Vec<String> =
                        std::mem::take(&mut self.partial).into_keys().collect();
                    Some(TurnEvent::RetryError {
                        message,
                        discarded_item_ids,
                    })
                } else {
                    Some(TurnEvent::Error {
                        message,
                        details: str_at("/error/additionalDetails"),
                        codex_error_info: params
                            .pointer("/error/codexErrorInfo")
                            .filter(|v| !v.is_null())
                            .cloned(),
                    })
                }
            }
            "warning" => Some(TurnEvent::Warning {
                message: str_at("/message").unwrap_or_default(),
            }),
            "thread/compacted" => Some(TurnEvent::Compacted),
            "turn/completed" => {
                let turn_id = str_at("/turn/id")
                    .or_else(|| self.turn_id.clone())
                    .unwrap_or_default();
                let status = TurnStatus::parse(&str_at("/turn/status").unwrap_or_default());
                Some(TurnEvent::Completed {
                    turn_id,
                    status,
                    error: str_at("/turn/error/message"),
                })
            }
            other => {
                tracing::trace!(method = %other, "codex app-server: turn notification not surfaced");
                None
            }
        }
    }
}

/// The turn a notification names (`turnId`, or `turn.id` on `turn/started` and
/// `turn/completed`).
fn turn_of(params: &Value) -> Option<&str> {
    params
        .get("turnId")
        .and_then(Value::as_str)
        .or_else(|| params.pointer("/turn/id").and_then(Value::as_str))
}

impl TurnHandle {
    /// A limit was hit: interrupt the turn (when its id is known) and start waiting for Codex to
    /// end it. Without a turn id there is nothing to wait for; the handle finishes at once.
    fn begin_stop(&mut self, limit: TurnLimitKind) {
        let interrupter = self.interrupter.as_ref().zip(self.turn_id.as_deref());
        let interrupted = interrupter.is_some();
        if let Some((interrupt, turn_id)) = interrupter {
            interrupt(&self.thread_id, turn_id);
        }
        tracing::warn!(
            thread_id = %self.thread_id,
            turn_id = ?self.turn_id,
            method = %self.method,
            %limit,
            interrupted,
            "codex app-server: turn limit hit"
        );
        let error = AppServerError::TurnLimit {
            method: self.method.clone(),
            thread_id: self.thread_id.clone(),
            turn_id: self.turn_id.clone(),
            limit,
            interrupted,
        };
        let grace = if interrupted {
            INTERRUPT_GRACE
        } else {
            Duration::ZERO
        };
        self.stopping = Some(Stopping {
            error,
            grace: Box::pin(tokio::time::sleep(grace)),
        });
    }

    /// End the stream with `error`; the receiver is closed so the thread is free for a new turn
    /// (late events of this turn are dropped by the connection).
    fn finish_with(
        &mut self,
        error: AppServerError,
    ) -> Poll<Option<Result<TurnEvent, AppServerError>>> {
        self.finished = true;
        self.rx.close();
        Poll::Ready(Some(Err(error)))
    }

    /// While stopping: swallow the turn's events until `turn/completed`, the connection's end,
    /// or the grace period; then report the limit.
    fn poll_stopping(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<TurnEvent, AppServerError>>> {
        loop {
            let Some(stopping) = self.stopping.as_mut() else {
                return Poll::Ready(None);
            };
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Routed::Notification { method, .. })) => {
                    if method == "turn/completed" {
                        break;
                    }
                }
                Poll::Ready(Some(Routed::ServerRequest { id, method, .. })) => {
                    self.decline(id, &method, "the turn is being interrupted");
                }
                Poll::Ready(Some(Routed::Closed(_)) | None) => break,
                Poll::Pending => {
                    if stopping.grace.as_mut().poll(cx).is_ready() {
                        break;
                    }
                    return Poll::Pending;
                }
            }
        }
        match self.stopping.take() {
            Some(stopping) => self.finish_with(stopping.error),
            None => Poll::Ready(None),
        }
    }
}

impl Stream for TurnHandle {
    type Item = Result<TurnEvent, AppServerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            if this.stopping.is_some() {
                return this.poll_stopping(cx);
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Routed::Notification { method, params })) => {
                    let idle_until = Instant::now() + this.limits.idle_timeout;
                    this.idle.as_mut().reset(idle_until);
                    if let Some(event) = this.translate(&method, &params) {
                        if matches!(event, TurnEvent::Completed { .. }) {
                            this.finished = true;
                        } else if this.reply_bytes > this.limits.max_reply_bytes {
                            this.begin_stop(TurnLimitKind::ReplyTooLarge {
                                limit: this.limits.max_reply_bytes,
                                received: this.reply_bytes,
                            });
                            continue;
                        }
                        return Poll::Ready(Some(Ok(event)));
                    }
                }
                Poll::Ready(Some(Routed::ServerRequest { id, method, params })) => {
                    let idle_until = Instant::now() + this.limits.idle_timeout;
                    this.idle.as_mut().reset(idle_until);
                    if method == "item/tool/call" {
                        let call = DynamicToolCall::parse(id, &params);
                        return Poll::Ready(Some(Ok(TurnEvent::ToolCall(call))));
                    }
                    this.decline(id, &method, "not a request a turn answers");
                }
                Poll::Ready(Some(Routed::Closed(error))) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(AppServerError::Transport {
                        method: this.method.clone(),
                        reason: "the app-server connection closed before the turn completed"
                            .to_owned(),
                    })));
                }
                Poll::Pending => {
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        this.begin_stop(TurnLimitKind::Deadline {
                            after: this.limits.turn_deadline,
                        });
                        continue;
                    }
                    if this.idle.as_mut().poll(cx).is_ready() {
                        this.begin_stop(TurnLimitKind::Idle {
                            after: this.limits.idle_timeout,
                        });
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    fn notification(method: &str, params: Value) -> Routed {
        Routed::Notification {
            method: method.to_owned(),
            params,
        }
    }

    /// A completed agent message counts toward the reply cap even without deltas: the turn is
    /// interrupted by id and, once `turn/completed` arrives, ends with `ReplyTooLarge`.
    #[tokio::test]
    async fn completed_text_counts_toward_the_reply_cap() {
        let (tx, rx) = mpsc::unbounded_channel();
        let calls: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let seen = calls.clone();
        let interrupter: Interrupter = Arc::new(move |thread: &str, turn: &str| {
            seen.lock()
                .unwrap()
                .push((thread.to_owned(), turn.to_owned()));
        });
        let limits = TurnLimits {
            max_reply_bytes: 10,
            ..TurnLimits::default()
        };
        let mut handle = TurnHandle::new(
            "thr".to_owned(),
            Some("turn-1".to_owned()),
            "turn/start",
            rx,
            limits,
            Some(interrupter),
        );
        let item = json!({"type": "agentMessage", "id": "i1", "text": "0123456789abc"});
        tx.send(notification(
            "item/completed",
            json!({"threadId": "thr", "item": item}),
        ))
        .unwrap();
        tx.send(notification(
            "turn/completed",
            json!({"threadId": "thr", "turn": {"id": "turn-1", "status": "interrupted"}}),
        ))
        .unwrap();
        let error = handle.next().await.unwrap().unwrap_err();
        assert_eq!(
            error.turn_limit(),
            Some(&TurnLimitKind::ReplyTooLarge {
                limit: 10,
                received: 13
            })
        );
        assert!(handle.next().await.is_none());
        assert_eq!(
            *calls.lock().unwrap(),
            vec![("thr".to_owned(), "turn-1".to_owned())]
        );
        assert!(tx.is_closed(), "the thread is released for the next turn");
    }

    /// A compaction turn whose id is not known yet cannot be interrupted: on the idle timeout
    /// the stream ends at once with the error, marked as not interrupted.
    #[tokio::test]
    async fn an_unknown_turn_id_ends_without_an_interrupt() {
        let (tx, rx) = mpsc::unbounded_channel::<Routed>();
        let limits = TurnLimits {
            idle_timeout: Duration::from_millis(10),
            ..TurnLimits::default()
        };
        let interrupter: Interrupter = Arc::new(|_: &str, _: &str| panic!("nothing to interrupt"));
        let mut handle = TurnHandle::new(
            "thr".to_owned(),
            None,
            "thread/compact/start",
            rx,
            limits,
            Some(interrupter),
        );
        let error = handle.next().await.unwrap().unwrap_err();
        assert!(
            matches!(
                &error,
                AppServerError::TurnLimit {
                    method,
                    turn_id: None,
                    limit: TurnLimitKind::Idle { .. },
                    interrupted: false,
                    ..
                } if method == "thread/compact/start"
            ),
            "{error:?}"
        );
        assert!(handle.next().await.is_none());
        drop(tx);
    }

    /// A server request's id and the answer sent for it.
    type Answer = (Value, Result<Value, String>);

    /// An `item/tool/call` routed to a turn is surfaced as a `ToolCall` event with its fields,
    /// and answering it sends `{contentItems: [{type: "inputText", text}], success}` under the
    /// request's id; a turn driven by `collect` (no tool executor) answers with a failure.
    #[tokio::test]
    async fn tool_calls_are_surfaced_and_answered_by_request_id() {
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let seen = answers.clone();
        let responder: Responder = Arc::new(move |id: Value, result: Result<Value, String>| {
            seen.lock().unwrap().push((id, result));
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let mut handle = TurnHandle::new(
            "thr".to_owned(),
            Some("turn-1".to_owned()),
            "turn/start",
            rx,
            TurnLimits::default(),
            None,
        )
        .with_responder(responder.clone());
        let params = json!({"threadId": "thr", "turnId": "turn-1", "callId": "call-9",
                            "tool": "lookup", "arguments": {"q": "otters"}});
        tx.send(Routed::ServerRequest {
            id: json!(7),
            method: "item/tool/call".to_owned(),
            params: params.clone(),
        })
        .unwrap();
        let Some(Ok(TurnEvent::ToolCall(call))) = handle.next().await else {
            panic!("expected a tool call");
        };
        assert_eq!(call.call_id, "call-9");
        assert_eq!(call.tool, "lookup");
        assert_eq!(call.turn_id, "turn-1");
        assert_eq!(call.arguments, json!({"q": "otters"}));
        handle.respond_tool_call(
            &call,
            &DynamicToolCallResponse {
                text: "3 otters".to_owned(),
                success: true,
            },
        );
        assert_eq!(
            answers.lock().unwrap().pop().unwrap(),
            (
                json!(7),
                Ok(
                    json!({"contentItems": [{"type": "inputText", "text": "3 otters"}],
                          "success": true})
                )
            )
        );

        let (tx, rx) = mpsc::unbounded_channel();
        let handle = TurnHandle::new(
            "thr".to_owned(),
            Some("turn-2".to_owned()),
            "turn/start",
            rx,
            TurnLimits::default(),
            None,
        )
        .with_responder(responder);
        tx.send(Routed::ServerRequest {
            id: json!(8),
            method: "item/tool/call".to_owned(),
            params,
        })
        .unwrap();
        tx.send(notification(
            "turn/completed",
            json!({"threadId": "thr", "turn": {"id": "turn-2", "status": "completed"}}),
        ))
        .unwrap();
        let outcome = handle.collect().await.unwrap();
        assert_eq!(outcome.status, TurnStatus::Completed);
        let (id, result) = answers.lock().unwrap().pop().unwrap();
        assert_eq!(id, json!(8));
        assert_eq!(result.unwrap()["success"], json!(false));
    }
}
