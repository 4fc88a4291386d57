//! The axum server: routing, the per-request plan (script, state, usage), recording and the SSE body.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::record::{last_user_text, normalize_input, RecordedRequest, RequestKind};
use crate::script::{
    default_reply_text, default_reply_text_for, estimate_tokens, ReplyOutcome, ScriptedReply, Usage,
};
use crate::sse;

/// Marker texts of a compaction request sent as a normal Responses request (Codex's local
/// compaction appends its summarisation prompt as the last user message).
const COMPACTION_MARKERS: [&str; 3] = [
    "CONTEXT CHECKPOINT COMPACTION",
    "handoff summary",
    "summary for another LLM",
];

/// Errors of the mock server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MockModelError {
    #[error("mock model: cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("mock model: cannot open request log {path}: {source}")]
    OpenLog {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("mock model: server failed: {source}")]
    Serve { source: std::io::Error },
    #[error("mock model: cannot wait for ctrl-c: {source}")]
    Signal { source: std::io::Error },
}

/// How the mock server runs.
#[derive(Debug, Clone)]
pub struct MockModelConfig {
    /// Where to listen; `127.0.0.1:0` (an ephemeral loopback port) by default.
    pub addr: SocketAddr,
    /// Append every recorded request as one JSON line to this file.
    pub log_path: Option<PathBuf>,
    /// Store responses (for requests with `store: true`) and honour `previous_response_id`.
    pub stateful: bool,
    /// The reply used when the script queue is empty.
    pub default_reply: ScriptedReply,
    /// How many `response.output_text.delta` events a reply is split into.
    pub delta_chunks: usize,
}

impl Default for MockModelConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            log_path: None,
            stateful: false,
            default_reply: ScriptedReply::default(),
            delta_chunks: 3,
        }
    }
}

impl MockModelConfig {
    /// The default configuration in stateful mode.
    pub fn stateful() -> Self {
        Self {
            stateful: true,
            ..Self::default()
        }
    }
}

/// A condition on a request, for [`MockModelServer::push_reply_when`].
type RequestMatcher = Box<dyn Fn(&RecordedRequest) -> bool + Send + Sync>;

/// Everything the handlers share.
struct Shared {
    stateful: bool,
    delta_chunks: usize,
    seq: AtomicU64,
    /// Replies kept for the first request that matches, in the order pushed.
    matched: Mutex<Vec<(RequestMatcher, ScriptedReply)>>,
    queue: Mutex<VecDeque<ScriptedReply>>,
    default_reply: Mutex<ScriptedReply>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Stored responses: response id → the full conversation including that response's output.
    store: Mutex<HashMap<String, Vec<Value>>>,
    /// Conversations: id → the conversation object's fields and its items.
    conversations: Mutex<HashMap<String, MockConversation>>,
    log: Option<tokio::sync::Mutex<tokio::fs::File>>,
}

/// One conversation the mock holds.
#[derive(Debug, Clone)]
struct MockConversation {
    created_at: u64,
    metadata: Value,
    /// The items in order: those given at creation, then each completed response's input and
    /// output.
    items: Vec<Value>,
}

impl MockConversation {
    fn object(&self, id: &str) -> Value {
        json!({
            "id": id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        })
    }
}

/// A poisoned lock only means another handler panicked mid-update; the data is still usable for
/// a test double, so recover it rather than cascade the panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running mock model server. Dropping it stops the server.
pub struct MockModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), std::io::Error>>>,
}

impl std::fmt::Debug for MockModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockModelServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockModelServer {
    /// Bind and start serving in a background task.
    pub async fn start(config: MockModelConfig) -> Result<Self, MockModelError> {
        let log = match &config.log_path {
            Some(path) => {
                let file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .await
                    .map_err(|source| MockModelError::OpenLog {
                        path: path.clone(),
                        source,
                    })?;
                Some(tokio::sync::Mutex::new(file))
            }
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| MockModelError::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| MockModelError::Bind {
                addr: config.addr,
                source,
            })?;
        let shared = Arc::new(Shared {
            stateful: config.stateful,
            delta_chunks: config.delta_chunks.max(1),
            seq: AtomicU64::new(0),
            matched: Mutex::new(Vec::new()),
            queue: Mutex::new(VecDeque::new()),
            default_reply: Mutex::new(config.default_reply),
            requests: Mutex::new(Vec::new()),
            store: Mutex::new(HashMap::new()),
            conversations: Mutex::new(HashMap::new()),
            log,
        });
        let app = Router::new()
            .route("/v1/responses", post(responses))
            .route("/responses", post(responses))
            .route("/v1/responses/compact", post(compact))
            .route("/responses/compact", post(compact))
            .route("/v1/conversations", post(create_conversation))
            .route("/conversations", post(create_conversation))
            .route(
                "/v1/conversations/:id",
                get(retrieve_conversation).delete(delete_conversation),
            )
            .route(
                "/conversations/:id",
                get(retrieve_conversation).delete(delete_conversation),
            )
            .route(
                "/v1/conversations/:id/items",
                get(conversation_items).post(create_conversation_items),
            )
            .route(
                "/conversations/:id/items",
                get(conversation_items).post(create_conversation_items),
            )
            .fallback(fallback)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
        });
        tracing::info!(%addr, stateful = config.stateful, "mock model server listening");
        Ok(Self {
            addr,
            shared,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL a Responses client or Codex provider uses.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queue a reply for the next request that has none queued before it.
    pub fn push_reply(&self, reply: ScriptedReply) {
        lock(&self.shared.queue).push_back(reply);
    }

    /// Keep a reply for the first request (Responses or compaction) for which `matches` holds;
    /// such replies are tried in the order pushed, before the plain queue. For clients whose
    /// requests race (the Codex TUI's title helper and its turn): the request's
    /// [`RecordedRequest::last_user_text`] is known when `matches` runs, the rebuilt stateful
    /// chain is not.
    pub fn push_reply_when(
        &self,
        matches: impl Fn(&RecordedRequest) -> bool + Send + Sync + 'static,
        reply: ScriptedReply,
    ) {
        lock(&self.shared.matched).push((Box::new(matches), reply));
    }

    /// Replace the reply used when the queue is empty.
    pub fn set_default_reply(&self, reply: ScriptedReply) {
        *lock(&self.shared.default_reply) = reply;
    }

    /// How many queued replies (plain or [matched](Self::push_reply_when)) have not been used
    /// yet.
    pub fn pending_replies(&self) -> usize {
        lock(&self.shared.queue).len() + lock(&self.shared.matched).len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Only the `POST …/responses` requests, in arrival order.
    pub fn response_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.kind == RequestKind::Responses)
            .cloned()
            .collect()
    }

    /// Forget the recorded requests (the stored responses stay).
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// Stateful mode: forget one stored response, so chaining on it answers
    /// `previous_response_not_found`. Returns whether it was stored.
    pub fn expire_response(&self, response_id: &str) -> bool {
        lock(&self.shared.store).remove(response_id).is_some()
    }

    /// Stateful mode: forget every stored response.
    pub fn expire_all(&self) {
        lock(&self.shared.store).clear();
    }

    /// Stateful mode: whether a response id is stored (and so can be chained on).
    pub fn is_stored(&self, response_id: &str) -> bool {
        lock(&self.shared.store).contains_key(response_id)
    }

    /// The items of a conversation (creation items, then each completed response's input and
    /// output), or `None` when the mock holds no such conversation.
    pub fn conversation_items(&self, conversation_id: &str) -> Option<Vec<Value>> {
        lock(&self.shared.conversations)
            .get(conversation_id)
            .map(|c| c.items.clone())
    }

    /// Whether the mock holds this conversation.
    pub fn has_conversation(&self, conversation_id: &str) -> bool {
        lock(&self.shared.conversations).contains_key(conversation_id)
    }

    /// Forget one conversation, as `DELETE /v1/conversations/{id}` would, so that using it
    /// answers 404. Returns whether it was held.
    pub fn delete_conversation(&self, conversation_id: &str) -> bool {
        lock(&self.shared.conversations)
            .remove(conversation_id)
            .is_some()
    }

    /// Stop accepting connections and wait (briefly) for the server task to end.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take() {
            // Graceful shutdown waits for open connections; a client holding a keep-alive
            // connection must not keep the test waiting.
            match tokio::time::timeout(Duration::from_secs(2), &mut task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => {
                    tracing::warn!(%error, "mock model server ended with an error")
                }
                Ok(Err(error)) => tracing::warn!(%error, "mock model server task failed"),
                Err(_) => task.abort(),
            }
        }
    }
}

impl Drop for MockModelServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Run a stateful mock on `127.0.0.1:port` (0 for an ephemeral port), logging requests to
/// `log_path` if given, until ctrl-c. Prints the base URL on stdout once listening.
pub async fn serve(port: u16, log_path: Option<PathBuf>) -> Result<(), MockModelError> {
    let config = MockModelConfig {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        log_path,
        ..MockModelConfig::stateful()
    };
    serve_config(config).await
}

/// Run a mock with this configuration until ctrl-c. Prints the base URL on stdout once listening.
pub async fn serve_config(config: MockModelConfig) -> Result<(), MockModelError> {
    let server = MockModelServer::start(config).await?;
    println!("mock model listening on {}", server.base_url());
    let signal = tokio::signal::ctrl_c().await;
    server.shutdown().await;
    signal.map_err(|source| MockModelError::Signal { source })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The parts of a request every handler records.
struct Incoming {
    seq: u64,
    received_at_ms: u64,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
    raw_body: Option<String>,
    body_len: usize,
}

impl Incoming {
    fn new(shared: &Shared, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Self {
        let (json, raw_body) = match serde_json::from_slice::<Value>(body) {
            Ok(value) => (value, None),
            Err(_) => (
                Value::Null,
                Some(String::from_utf8_lossy(body).into_owned()),
            ),
        };
        Self {
            seq: shared.seq.fetch_add(1, Ordering::SeqCst) + 1,
            received_at_ms: now_ms(),
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: json,
            raw_body,
            body_len: body.len(),
        }
    }

    fn record(self, kind: RequestKind) -> RecordedRequest {
        let instructions = self
            .body
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let input = normalize_input(self.body.get("input"));
        let previous_response_id = self
            .body
            .get("previous_response_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let store = self.body.get("store").and_then(Value::as_bool) == Some(true);
        // `conversation` is a string or an object with an `id`.
        let conversation_id = self
            .body
            .get("conversation")
            .and_then(|c| c.as_str().or_else(|| c.get("id").and_then(Value::as_str)))
            .map(str::to_owned);
        RecordedRequest {
            seq: self.seq,
            received_at_ms: self.received_at_ms,
            method: self.method,
            path: self.path,
            headers: self.headers,
            body: self.body,
            raw_body: self.raw_body,
            kind,
            instructions,
            conversation: input.clone(),
            input,
            previous_response_id,
            conversation_id,
            store,
            status: StatusCode::OK.as_u16(),
            response_id: None,
            reply_text: None,
        }
    }
}

impl Shared {
    /// Stateful mode, after a complete response: store it (for `store: true`, so it can be
    /// chained on) and append the request's input and the output item to the conversation it
    /// names.
    fn keep_output(&self, record: &RecordedRequest, response_id: &str, item: &Value) {
        if !self.stateful {
            return;
        }
        if record.store {
            let mut conversation = record.conversation.clone();
            conversation.push(item.clone());
            lock(&self.store).insert(response_id.to_owned(), conversation);
        }
        if let Some(conversation_id) = &record.conversation_id {
            if let Some(conversation) = lock(&self.conversations).get_mut(conversation_id) {
                conversation.items.extend(record.input.iter().cloned());
                conversation.items.push(item.clone());
            }
        }
    }

    fn next_reply(&self, record: &RecordedRequest) -> ScriptedReply {
        {
            let mut matched = lock(&self.matched);
            if let Some(i) = matched.iter().position(|(matches, _)| matches(record)) {
                return matched.remove(i).1;
            }
        }
        match lock(&self.queue).pop_front() {
            Some(reply) => reply,
            None => lock(&self.default_reply).clone(),
        }
    }

    async fn remember(&self, record: &RecordedRequest) {
        lock(&self.requests).push(record.clone());
        if let Some(log) = &self.log {
            match serde_json::to_string(record) {
                Ok(mut line) => {
                    line.push('\n');
                    let mut file = log.lock().await;
                    let written = match file.write_all(line.as_bytes()).await {
                        Ok(()) => file.flush().await,
                        Err(error) => Err(error),
                    };
                    if let Err(error) = written {
                        tracing::warn!(%error, "mock model: cannot append to the request log");
                    }
                }
                Err(error) => tracing::warn!(%error, "mock model: cannot serialise a request"),
            }
        }
    }
}

impl Shared {
    /// Answer 400 (recorded) when the body is not JSON.
    async fn reject_non_json(&self, record: &mut RecordedRequest) -> Result<(), Response> {
        if !record.body.is_null() {
            return Ok(());
        }
        record.status = StatusCode::BAD_REQUEST.as_u16();
        self.remember(record).await;
        Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            "We could not parse the JSON body of your request.",
            None,
        ))
    }

    /// Stateful mode: rebuild the conversation from `previous_response_id` or from the named
    /// conversation, or answer (and record) `previous_response_not_found` when that response is
    /// unknown or expired, 404 when the conversation is unknown, and 400 when both are given.
    /// Stateless mode records the chain and conversation ids but answers on `input` alone.
    async fn resolve_chain(&self, record: &mut RecordedRequest) -> Result<(), Response> {
        if !self.stateful {
            return Ok(());
        }
        if let Some(conversation_id) = record.conversation_id.clone() {
            let failure = if record.previous_response_id.is_some() {
                Some((
                    StatusCode::BAD_REQUEST,
                    "Mutually exclusive parameters: 'previous_response_id' and 'conversation' cannot be used together.".to_owned(),
                ))
            } else {
                match lock(&self.conversations).get(&conversation_id) {
                    Some(conversation) => {
                        let mut items = conversation.items.clone();
                        items.extend(record.input.iter().cloned());
                        record.conversation = items;
                        None
                    }
                    None => Some((
                        StatusCode::NOT_FOUND,
                        format!("Conversation with id '{conversation_id}' not found."),
                    )),
                }
            };
            return match failure {
                None => Ok(()),
                Some((status, message)) => {
                    record.status = status.as_u16();
                    self.remember(record).await;
                    Err(conversation_error(status, &message))
                }
            };
        }
        let Some(previous) = record.previous_response_id.clone() else {
            return Ok(());
        };
        let stored = lock(&self.store).get(&previous).cloned();
        match stored {
            Some(mut conversation) => {
                conversation.extend(record.input.iter().cloned());
                record.conversation = conversation;
                Ok(())
            }
            None => {
                record.status = StatusCode::BAD_REQUEST.as_u16();
                self.remember(record).await;
                Err(json_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "previous_response_not_found",
                    &format!("Previous response with id '{previous}' not found."),
                    Some("previous_response_id"),
                ))
            }
        }
    }
}

/// The 404 for a conversation id the mock does not hold.
fn conversation_not_found(id: &str) -> Response {
    conversation_error(
        StatusCode::NOT_FOUND,
        &format!("Conversation with id '{id}' not found."),
    )
}

/// The API's error for a request about a conversation: `param: "conversation"`, no code.
fn conversation_error(status: StatusCode, message: &str) -> Response {
    let body = json!({
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "conversation",
            "code": Value::Null,
        }
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json_ok(body: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn json_error(
    status: StatusCode,
    kind: &str,
    code: &str,
    message: &str,
    param: Option<&str>,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        sse::error_body(kind, code, message, param).to_string(),
    )
        .into_response()
}

fn error_type_for(status: u16) -> &'static str {
    match status {
        400..=428 | 430..=499 => "invalid_request_error",
        429 => "requests",
        _ => "server_error",
    }
}

fn is_compaction_prompt(text: Option<&str>) -> bool {
    text.is_some_and(|text| COMPACTION_MARKERS.iter().any(|m| text.contains(m)))
}

/// The reply text for a request: scripted, else a summary for a compaction prompt, else the
/// deterministic echo of the last user message.
fn reply_text(reply: &ScriptedReply, conversation: &[Value]) -> String {
    if let Some(text) = &reply.text {
        return text.clone();
    }
    if let Some(text) = default_reply_text_for(conversation) {
        return text;
    }
    let last_user = last_user_text(conversation);
    if is_compaction_prompt(last_user.as_deref()) {
        let users = crate::record::message_texts(conversation, "user");
        let turns = users.len().saturating_sub(1);
        return format!("mock summary of {turns} earlier user messages");
    }
    default_reply_text(last_user.as_deref())
}

/// What a request got, as the recording keeps it: the response id and text, or only the
/// scripted HTTP status when the reply is an error.
fn record_outcome(record: &mut RecordedRequest, reply: &ScriptedReply, id: &str, text: &str) {
    if let ReplyOutcome::HttpError { status, .. } = &reply.outcome {
        record.status = *status;
        record.response_id = None;
        record.reply_text = None;
    } else {
        record.response_id = Some(id.to_owned());
        record.reply_text = Some(text.to_owned());
    }
}

async fn responses(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let body_len = incoming.body_len;
    let mut record = incoming.record(RequestKind::Responses);
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let reply = shared.next_reply(&record);
    let model = record
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();

    if let Err(response) = shared.resolve_chain(&mut record).await {
        return response;
    }

    if reply.tool_call.is_some() {
        return tool_call_response(&shared, record, reply, &model, body_len).await;
    }
    let text = reply_text(&reply, &record.conversation);
    let response_id = new_id("resp");
    let item_id = new_id("msg");
    let usage = reply
        .usage
        .unwrap_or_else(|| Usage::new(estimate_tokens(body_len), estimate_tokens(text.len())));
    let item = sse::assistant_message(&item_id, &text);
    record_outcome(&mut record, &reply, &response_id, &text);
    if reply.outcome == ReplyOutcome::Complete {
        shared.keep_output(&record, &response_id, &item);
    }
    shared.remember(&record).await;
    tracing::debug!(seq = record.seq, path = %record.path, status = record.status, "mock model request");

    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }

    let deltas = sse::split_deltas(&text, shared.delta_chunks);
    let mut events = vec![
        sse::response_created(&response_id, &model),
        sse::output_item_added(&item_id),
    ];
    match reply.outcome {
        ReplyOutcome::HttpError {
            status,
            code,
            message,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_error(
                status,
                error_type_for(status.as_u16()),
                &code,
                &message,
                None,
            );
        }
        ReplyOutcome::Complete => {
            events.extend(deltas.iter().map(|d| sse::output_text_delta(&item_id, d)));
            events.push(sse::output_item_done(&item));
            events.push(sse::response_completed(&response_id, &model, &item, usage));
        }
        ReplyOutcome::DropAfterDeltas { deltas: keep } => {
            events.extend(
                deltas
                    .iter()
                    .take(keep)
                    .map(|d| sse::output_text_delta(&item_id, d)),
            );
        }
        ReplyOutcome::Failed { code, message } => {
            events.extend(deltas.iter().map(|d| sse::output_text_delta(&item_id, d)));
            events.push(sse::response_failed(&response_id, &model, &code, &message));
        }
    }
    event_stream(&events)
}

/// A `200 text/event-stream` response carrying `events`, one SSE frame each.
fn event_stream(events: &[Value]) -> Response {
    let frames: Vec<Result<Bytes, Infallible>> = events
        .iter()
        .map(|event| Ok(Bytes::from(sse::frame(event))))
        .collect();
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(futures::stream::iter(frames)),
    )
        .into_response()
}

/// A scripted function call: the response's only output item is a `function_call`; stored (in
/// stateful mode) so the client's `function_call_output` can chain on it.
async fn tool_call_response(
    shared: &Shared,
    mut record: RecordedRequest,
    reply: ScriptedReply,
    model: &str,
    body_len: usize,
) -> Response {
    let Some(call) = reply.tool_call else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "no_tool_call",
            "mock: tool call reply without a call",
            None,
        );
    };
    let response_id = new_id("resp");
    let item_id = new_id("fc");
    let call_id = call.call_id.unwrap_or_else(|| new_id("call"));
    let item = sse::function_call(&item_id, &call_id, &call.name, &call.arguments);
    let usage = reply.usage.unwrap_or_else(|| {
        Usage::new(
            estimate_tokens(body_len),
            estimate_tokens(call.arguments.len()),
        )
    });
    record.response_id = Some(response_id.clone());
    record.reply_text = None;
    shared.keep_output(&record, &response_id, &item);
    shared.remember(&record).await;
    tracing::debug!(seq = record.seq, tool = %call.name, "mock model: scripted tool call");
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let events = [
        sse::response_created(&response_id, model),
        sse::item_added(&item),
        sse::output_item_done(&item),
        sse::response_completed(&response_id, model, &item, usage),
    ];
    event_stream(&events)
}

/// The unary compaction endpoint: the user messages of the conversation followed by one
/// `compaction` item whose opaque content is a readable summary.
async fn compact(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let body_len = incoming.body_len;
    let mut record = incoming.record(RequestKind::Compact);
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let reply = shared.next_reply(&record);
    if let Err(response) = shared.resolve_chain(&mut record).await {
        return response;
    }
    let users: Vec<Value> = record
        .conversation
        .iter()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .cloned()
        .collect();
    let summary = reply
        .text
        .clone()
        .unwrap_or_else(|| format!("mock summary of {} earlier user messages", users.len()));
    let id = new_id("cmp");
    record_outcome(&mut record, &reply, &id, &summary);
    shared.remember(&record).await;
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    if let ReplyOutcome::HttpError {
        status,
        code,
        message,
    } = reply.outcome
    {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return json_error(
            status,
            error_type_for(status.as_u16()),
            &code,
            &message,
            None,
        );
    }
    let mut output = users;
    output.push(json!({
        "type": "compaction",
        "id": new_id("cmpitem"),
        "encrypted_content": summary,
    }));
    let usage = reply
        .usage
        .unwrap_or_else(|| Usage::new(estimate_tokens(body_len), estimate_tokens(summary.len())));
    let body = json!({
        "id": id,
        "object": "response.compaction",
        "created_at": now_ms() / 1000,
        "output": output,
        "usage": sse::usage_json(usage),
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `POST /v1/conversations`: a new conversation holding the given `items` (if any).
async fn create_conversation(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let mut record = incoming.record(RequestKind::Conversations);
    // An empty body is an empty conversation.
    if !body.is_empty() {
        if let Err(response) = shared.reject_non_json(&mut record).await {
            return response;
        }
    }
    let id = new_id("conv");
    let conversation = MockConversation {
        created_at: now_ms() / 1000,
        metadata: record.body.get("metadata").cloned().unwrap_or(json!({})),
        items: normalize_input(record.body.get("items")),
    };
    let object = conversation.object(&id);
    lock(&shared.conversations).insert(id.clone(), conversation);
    record.conversation_id = Some(id);
    shared.remember(&record).await;
    json_ok(&object)
}

/// Records a conversations request (no body) about `id` and answers 404 when the mock does
/// not hold it.
async fn conversation_request(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    id: &str,
) -> Result<RecordedRequest, Response> {
    let incoming = Incoming::new(shared, method, uri, headers, &Bytes::new());
    let mut record = incoming.record(RequestKind::Conversations);
    record.conversation_id = Some(id.to_owned());
    if lock(&shared.conversations).contains_key(id) {
        shared.remember(&record).await;
        return Ok(record);
    }
    record.status = StatusCode::NOT_FOUND.as_u16();
    shared.remember(&record).await;
    Err(conversation_not_found(id))
}

/// `GET /v1/conversations/{id}`.
async fn retrieve_conversation(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    match lock(&shared.conversations).get(&id) {
        Some(conversation) => json_ok(&conversation.object(&id)),
        None => conversation_not_found(&id),
    }
}

/// `DELETE /v1/conversations/{id}`.
async fn delete_conversation(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    lock(&shared.conversations).remove(&id);
    json_ok(&json!({"id": id, "object": "conversation.deleted", "deleted": true}))
}

/// `GET /v1/conversations/{id}/items`: every item, oldest first, in one page.
async fn conversation_items(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = conversation_request(&shared, &method, &uri, &headers, &id).await {
        return response;
    }
    let items = lock(&shared.conversations)
        .get(&id)
        .map(|c| c.items.clone())
        .unwrap_or_default();
    let first_id = items.first().and_then(|i| i.get("id")).cloned();
    let last_id = items.last().and_then(|i| i.get("id")).cloned();
    json_ok(&json!({
        "object": "list",
        "data": items,
        "first_id": first_id,
        "last_id": last_id,
        "has_more": false,
    }))
}

/// The most items one create call may carry (the API's limit).
const MAX_ITEMS_PER_CALL: usize = 20;

/// `POST /v1/conversations/{id}/items`: appends the body's `items` (at most 20) to the
/// conversation and answers them as a list; 404 for an unknown conversation, 400 for a body
/// that is not JSON or carries no items or too many.
async fn create_conversation_items(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let mut record = incoming.record(RequestKind::Conversations);
    record.conversation_id = Some(id.clone());
    if let Err(response) = shared.reject_non_json(&mut record).await {
        return response;
    }
    let items = normalize_input(record.body.get("items"));
    if items.is_empty() || items.len() > MAX_ITEMS_PER_CALL {
        record.status = StatusCode::BAD_REQUEST.as_u16();
        shared.remember(&record).await;
        return json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_value",
            &format!(
                "'items' must hold 1 to {MAX_ITEMS_PER_CALL} items, got {}.",
                items.len()
            ),
            Some("items"),
        );
    }
    let added = {
        let mut conversations = lock(&shared.conversations);
        match conversations.get_mut(&id) {
            Some(conversation) => {
                conversation.items.extend(items.iter().cloned());
                true
            }
            None => false,
        }
    };
    if !added {
        record.status = StatusCode::NOT_FOUND.as_u16();
        shared.remember(&record).await;
        return conversation_not_found(&id);
    }
    shared.remember(&record).await;
    let first_id = items.first().and_then(|i| i.get("id")).cloned();
    let last_id = items.last().and_then(|i| i.get("id")).cloned();
    json_ok(&json!({
        "object": "list",
        "data": items,
        "first_id": first_id,
        "last_id": last_id,
        "has_more": false,
    }))
}

/// Any other route: recorded, then 404 with an OpenAI-style error.
async fn fallback(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let mut record = incoming.record(RequestKind::Other);
    record.status = StatusCode::NOT_FOUND.as_u16();
    let path = record.path.clone();
    shared.remember(&record).await;
    tracing::debug!(%method, %path, "mock model: unknown route");
    json_error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        &format!("Unknown route {method} {path} (mock)."),
        None,
    )
}
