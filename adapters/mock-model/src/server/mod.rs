//! The axum server: routing and the [`MockModelServer`] handle. The jobs behind it:
//!
//! - `state`: what the handlers share (`Shared`): the reply script, recorded
//!   requests, stored responses and conversations; reading a request into a recording, and
//!   rebuilding a chained or conversation request's full input.
//! - `responses`: `POST …/responses` (streamed replies, scripted tool calls) and the unary
//!   compaction endpoint.
//! - `conversations`: the conversations endpoints and their items.
//! - `answers`: the HTTP answers every handler builds (JSON bodies, OpenAI-style errors, the SSE
//!   response).

mod answers;
mod conversations;
mod responses;
mod state;

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::record::{RecordedRequest, RequestKind};
use crate::script::ScriptedReply;

use self::answers::json_error;
use self::conversations::{
    conversation_items, create_conversation, create_conversation_items, delete_conversation,
    retrieve_conversation,
};
use self::responses::{compact, responses};
use self::state::{lock, Incoming, Shared};

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
            // Other methods on the model list are unknown routes, recorded as such.
            .route("/v1/models", get(models).fallback(fallback))
            .route("/models", get(models).fallback(fallback))
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

    /// The ids of the conversations the mock holds, in no particular order.
    pub fn conversation_ids(&self) -> Vec<String> {
        lock(&self.shared.conversations).keys().cloned().collect()
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
/// Any other route: recorded, then 404 with an OpenAI-style error.
/// `GET /v1/models`: the one model the mock answers as (any name is accepted in requests).
async fn models(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let incoming = Incoming::new(&shared, &method, &uri, &headers, &body);
    let record = incoming.record(RequestKind::Other);
    shared.remember(&record).await;
    axum::Json(serde_json::json!({
        "object": "list",
        "data": [{"id": MOCK_MODEL_ID, "object": "model", "created": 0, "owned_by": "ctxbridge"}],
    }))
    .into_response()
}

/// The model id `GET /v1/models` lists.
pub const MOCK_MODEL_ID: &str = "mock-model";

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
