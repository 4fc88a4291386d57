//! The HTTP side: requests, bearer auth, retries, the compaction endpoint.

use std::sync::Arc;

use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;
use url::Url;

use crate::config::{ApiKey, ResponsesConfig};
use crate::error::ResponsesError;
use crate::sse::{ResponseStream, StreamLimits};
use crate::types::{
    CompactRequest, CompactedResponse, Conversation, CreateResponse, InputItem, WireUsage,
};
use crate::urls::{endpoint, parse_base_url, redact_url};

const CREATE_OPERATION: &str = "create response";
const COMPACT_OPERATION: &str = "compact response";
const CREATE_CONVERSATION_OPERATION: &str = "create conversation";
const RETRIEVE_CONVERSATION_OPERATION: &str = "retrieve conversation";
const DELETE_CONVERSATION_OPERATION: &str = "delete conversation";
const CREATE_ITEMS_OPERATION: &str = "create conversation items";
const LIST_ITEMS_OPERATION: &str = "list conversation items";
const LIST_MODELS_OPERATION: &str = "list models";
/// The most items one `POST /conversations` or `POST /conversations/{id}/items` may carry (the
/// API's limit); longer lists go in several calls.
pub const MAX_ITEMS_PER_CALL: usize = 20;
/// Items asked for per page when listing a conversation (the API's largest page).
const LIST_PAGE_LIMIT: &str = "100";
/// Longest server error text kept in an error.
const MAX_ERROR_BODY_CHARS: usize = 2_000;

/// A Responses API client. Cheap to clone (the clones share its connection pools). Its
/// `Debug` shows the base URL redacted and never the key.
#[derive(Clone)]
pub struct ResponsesClient {
    /// The connection pool this handle's calls use: one of `pools`.
    pub(crate) http: reqwest::Client,
    /// The client's connection pools: one, unless [`ResponsesClient::with_connection_pools`].
    pools: Arc<[reqwest::Client]>,
    pub(crate) config: ResponsesConfig,
    pub(crate) base_url: Url,
    responses_url: Url,
    compact_url: Url,
    /// `Bearer <key>`, marked sensitive so that no formatter prints it.
    pub(crate) authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for ResponsesClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsesClient")
            .field("base_url", &redact_url(&self.base_url))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The body of `POST /responses`: the request plus `stream: true`.
#[derive(Serialize)]
struct StreamingBody<'a> {
    #[serde(flatten)]
    request: &'a CreateResponse,
    stream: bool,
}

/// The body of `POST /conversations` with items.
#[derive(Serialize)]
struct CreateConversationBody<'a> {
    items: &'a [InputItem],
}

/// A page of `GET /conversations/{id}/items`.
#[derive(Deserialize)]
struct WireItemPage {
    data: Vec<Value>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    last_id: Option<String>,
}

#[derive(Deserialize)]
struct WireCompacted {
    #[serde(default)]
    id: Option<String>,
    output: Vec<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// One HTTP call as the retry loop sees it.
struct Call<'a> {
    operation: &'static str,
    method: Method,
    url: &'a Url,
    body: Option<Vec<u8>>,
    accept: &'static str,
    chained: bool,
    conversation: bool,
    /// The `Authorization` of this call instead of the client's key (a caller passing its own
    /// client's key on).
    authorization: Option<HeaderValue>,
}

impl<'a> Call<'a> {
    /// A JSON call on an existing conversation (its items, itself).
    fn on_conversation(
        operation: &'static str,
        method: Method,
        url: &'a Url,
        body: Option<Vec<u8>>,
    ) -> Call<'a> {
        Call {
            operation,
            method,
            url,
            body,
            accept: "application/json",
            chained: false,
            conversation: true,
            authorization: None,
        }
    }
}

/// One connection pool (a `reqwest` client) with `config`'s connect timeout.
fn connection_pool(config: &ResponsesConfig) -> Result<reqwest::Client, ResponsesError> {
    reqwest::Client::builder()
        .connect_timeout(config.request_timeout)
        .build()
        .map_err(|e| ResponsesError::Config {
            operation: "build Responses client",
            message: error_chain(&e.without_url()),
        })
}

impl ResponsesClient {
    /// The client with `count` connection pools (at least one): its own first, on which its
    /// calls stay; [`ResponsesClient::on_pool`] gives a handle on another. A server running
    /// each connection on one single-threaded runtime gives each runtime a pool: a connection
    /// is driven by the runtime that opened it, and a call on another runtime's connection
    /// would wait for that runtime's thread.
    pub fn with_connection_pools(self, count: usize) -> Result<Self, ResponsesError> {
        let mut pools = vec![self.http.clone()];
        for _ in 1..count {
            pools.push(connection_pool(&self.config)?);
        }
        Ok(ResponsesClient {
            pools: Arc::from(pools),
            ..self
        })
    }

    /// A handle whose calls use connection pool `index` (modulo the pools there are).
    pub fn on_pool(&self, index: usize) -> ResponsesClient {
        let mut client = self.clone();
        // Never a division by zero: a client is built with at least one pool.
        if let Some(http) = self.pools.get(index % self.pools.len()) {
            client.http = http.clone();
        }
        client
    }

    /// How many connection pools the client has.
    pub fn connection_pools(&self) -> usize {
        self.pools.len()
    }

    pub fn new(config: ResponsesConfig) -> Result<Self, ResponsesError> {
        let base_url =
            parse_base_url(&config.base_url).map_err(|message| ResponsesError::Config {
                operation: "build Responses client",
                message,
            })?;
        let authorization = config
            .api_key
            .as_ref()
            .map(|key| bearer(key, "build Responses client"))
            .transpose()?;
        let http = connection_pool(&config)?;
        Ok(ResponsesClient {
            pools: Arc::from([http.clone()]),
            http,
            responses_url: endpoint(&base_url, &["responses"]),
            compact_url: endpoint(&base_url, &["responses", "compact"]),
            base_url,
            config,
            authorization,
        })
    }

    pub fn config(&self) -> &ResponsesConfig {
        &self.config
    }

    /// The base URL as it may be shown: userinfo and query values redacted.
    pub fn display_base_url(&self) -> String {
        redact_url(&self.base_url)
    }

    /// The bounds of a response requested at `started`.
    fn stream_limits(&self, started: Instant) -> StreamLimits {
        StreamLimits {
            idle_timeout: self.config.idle_timeout,
            turn_timeout: self.config.turn_timeout,
            started,
            max_event_bytes: self.config.max_event_bytes,
            max_reply_bytes: self.config.max_reply_bytes,
        }
    }

    /// `POST {base_url}/responses` with `stream: true`; the returned stream yields the typed
    /// events. Retries (5xx, no answer) happen only here, before the response started, so no
    /// event is ever received twice.
    pub async fn create_response(
        &self,
        request: CreateResponse,
    ) -> Result<ResponseStream, ResponsesError> {
        self.create_response_as(request, None).await
    }

    /// [`ResponsesClient::create_response`] sent with `api_key` instead of the client's own
    /// when given: a proxy passing its own client's key on.
    pub async fn create_response_as(
        &self,
        request: CreateResponse,
        api_key: Option<&ApiKey>,
    ) -> Result<ResponseStream, ResponsesError> {
        let authorization = api_key
            .map(|key| bearer(key, CREATE_OPERATION))
            .transpose()?;
        let body = serde_json::to_vec(&StreamingBody {
            request: &request,
            stream: true,
        })
        .map_err(|e| ResponsesError::Config {
            operation: CREATE_OPERATION,
            message: format!("cannot encode the request: {e}"),
        })?;
        let started = Instant::now();
        tracing::debug!(
            url = %redact_url(&self.responses_url),
            model = %request.model,
            previous_response_id = request.previous_response_id.as_deref().unwrap_or(""),
            conversation = request.conversation.as_deref().unwrap_or(""),
            store = request.store,
            input_items = request.input.len(),
            body_bytes = body.len(),
            "creating response"
        );
        let call = Call {
            operation: CREATE_OPERATION,
            method: Method::POST,
            url: &self.responses_url,
            body: Some(body),
            accept: "text/event-stream",
            chained: request.previous_response_id.is_some(),
            conversation: request.conversation.is_some(),
            authorization,
        };
        let limits = self.stream_limits(started);
        let sent = match started.checked_add(self.config.turn_timeout) {
            Some(deadline) => tokio::time::timeout_at(deadline, self.send_with_retries(call))
                .await
                .map_err(|_| ResponsesError::Deadline {
                    operation: CREATE_OPERATION,
                    after: self.config.turn_timeout,
                })?,
            None => self.send_with_retries(call).await,
        };
        let response = sent?;
        let stream =
            ResponseStream::from_sse_bytes_with(response.bytes_stream(), limits, CREATE_OPERATION);
        Ok(match self.config.api_key.clone() {
            Some(key) => stream.map_errors(move |e| e.redacted(key.expose())),
            None => stream,
        })
    }

    /// `POST {base_url}/responses/compact`: a new opaque context window for a chain or a
    /// history. A server without the endpoint (404/405 without an API error code) gives
    /// [`ResponsesError::Unsupported`].
    pub async fn compact(
        &self,
        request: CompactRequest,
    ) -> Result<CompactedResponse, ResponsesError> {
        let body = serde_json::to_vec(&request).map_err(|e| ResponsesError::Config {
            operation: COMPACT_OPERATION,
            message: format!("cannot encode the request: {e}"),
        })?;
        tracing::debug!(
            url = %redact_url(&self.compact_url),
            model = %request.model,
            previous_response_id = request.previous_response_id.as_deref().unwrap_or(""),
            input_items = request.input.len(),
            "compacting"
        );
        let call = Call {
            operation: COMPACT_OPERATION,
            method: Method::POST,
            url: &self.compact_url,
            body: Some(body),
            accept: "application/json",
            chained: request.previous_response_id.is_some(),
            conversation: false,
            authorization: None,
        };
        let response = match self.send_with_retries(call).await {
            Ok(response) => response,
            Err(ResponsesError::Api {
                status: status @ (404 | 405),
                code: None,
                url,
                ..
            }) => {
                return Err(ResponsesError::Unsupported {
                    operation: COMPACT_OPERATION,
                    url,
                    status,
                })
            }
            Err(error) => return Err(error),
        };
        let bytes = self.read_json_body(COMPACT_OPERATION, response).await?;
        let wire: WireCompacted =
            serde_json::from_slice(&bytes).map_err(|e| ResponsesError::Decode {
                operation: COMPACT_OPERATION,
                what: "compaction response body".into(),
                message: e.to_string(),
            })?;
        Ok(CompactedResponse {
            id: wire.id,
            output: wire.output,
            usage: wire.usage.map(Into::into),
        })
    }

    /// `POST {base_url}/conversations`: a new, empty conversation (a durable thread whose items
    /// the server keeps; pass its id as [`CreateResponse::conversation`]).
    pub async fn create_conversation(&self) -> Result<Conversation, ResponsesError> {
        let url = endpoint(&self.base_url, &["conversations"]);
        let call = Call {
            operation: CREATE_CONVERSATION_OPERATION,
            method: Method::POST,
            url: &url,
            body: Some(b"{}".to_vec()),
            accept: "application/json",
            chained: false,
            conversation: false,
            authorization: None,
        };
        let conversation = self.conversation_call(call).await?;
        tracing::debug!(conversation = %conversation.id, "created a conversation");
        Ok(conversation)
    }

    /// `POST {base_url}/conversations` with `items`: a new conversation that already holds them
    /// (e.g. a compacted window). The first [`MAX_ITEMS_PER_CALL`] go with the creation, the rest
    /// through [`ResponsesClient::create_conversation_items`].
    pub async fn create_conversation_with_items(
        &self,
        items: &[InputItem],
    ) -> Result<Conversation, ResponsesError> {
        let (first, rest) = items.split_at(items.len().min(MAX_ITEMS_PER_CALL));
        let body = serde_json::to_vec(&CreateConversationBody { items: first }).map_err(|e| {
            ResponsesError::Config {
                operation: CREATE_CONVERSATION_OPERATION,
                message: format!("cannot encode the request: {e}"),
            }
        })?;
        let url = endpoint(&self.base_url, &["conversations"]);
        let call = Call {
            operation: CREATE_CONVERSATION_OPERATION,
            method: Method::POST,
            url: &url,
            body: Some(body),
            accept: "application/json",
            chained: false,
            conversation: false,
            authorization: None,
        };
        let conversation = self.conversation_call(call).await?;
        if !rest.is_empty() {
            self.create_conversation_items(&conversation.id, rest)
                .await?;
        }
        tracing::debug!(conversation = %conversation.id, items = items.len(), "created a conversation with items");
        Ok(conversation)
    }

    /// `POST {base_url}/conversations/{id}/items`: appends `items` to the conversation, in
    /// order, [`MAX_ITEMS_PER_CALL`] per call. A conversation that does not exist is an error
    /// for which [`ResponsesError::is_conversation_not_found`] holds.
    pub async fn create_conversation_items(
        &self,
        id: &str,
        items: &[InputItem],
    ) -> Result<(), ResponsesError> {
        let url = endpoint(&self.base_url, &["conversations", id, "items"]);
        for chunk in items.chunks(MAX_ITEMS_PER_CALL) {
            let body =
                serde_json::to_vec(&CreateConversationBody { items: chunk }).map_err(|e| {
                    ResponsesError::Config {
                        operation: CREATE_ITEMS_OPERATION,
                        message: format!("cannot encode the request: {e}"),
                    }
                })?;
            let call =
                Call::on_conversation(CREATE_ITEMS_OPERATION, Method::POST, &url, Some(body));
            let response = self.send_with_retries(call).await?;
            let bytes = self
                .read_json_body(CREATE_ITEMS_OPERATION, response)
                .await?;
            serde_json::from_slice::<WireItemPage>(&bytes).map_err(|e| ResponsesError::Decode {
                operation: CREATE_ITEMS_OPERATION,
                what: "conversation item list".into(),
                message: e.to_string(),
            })?;
        }
        tracing::debug!(conversation = %id, items = items.len(), "added conversation items");
        Ok(())
    }

    /// `GET {base_url}/conversations/{id}/items`, oldest first, every page: the whole
    /// conversation. A conversation that does not exist is an error for which
    /// [`ResponsesError::is_conversation_not_found`] holds.
    pub async fn list_conversation_items(&self, id: &str) -> Result<Vec<Value>, ResponsesError> {
        let mut items = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut url = endpoint(&self.base_url, &["conversations", id, "items"]);
            {
                let mut query = url.query_pairs_mut();
                query.append_pair("order", "asc");
                query.append_pair("limit", LIST_PAGE_LIMIT);
                if let Some(after) = &after {
                    query.append_pair("after", after);
                }
            }
            let call = Call::on_conversation(LIST_ITEMS_OPERATION, Method::GET, &url, None);
            let response = self.send_with_retries(call).await?;
            let bytes = self.read_json_body(LIST_ITEMS_OPERATION, response).await?;
            let page: WireItemPage =
                serde_json::from_slice(&bytes).map_err(|e| ResponsesError::Decode {
                    operation: LIST_ITEMS_OPERATION,
                    what: "conversation item list".into(),
                    message: e.to_string(),
                })?;
            let received = page.data.len();
            items.extend(page.data);
            match (page.has_more, page.last_id) {
                // A page that says more follow but gives nothing to continue from would loop.
                (true, Some(last)) if received > 0 && after.as_deref() != Some(last.as_str()) => {
                    after = Some(last);
                }
                (true, _) => {
                    return Err(ResponsesError::Decode {
                        operation: LIST_ITEMS_OPERATION,
                        what: "conversation item list".into(),
                        message: "has_more is true but the page gives no new last_id".into(),
                    })
                }
                (false, _) => return Ok(items),
            }
        }
    }

    /// `GET {base_url}/conversations/{id}`. A conversation that does not exist (or was deleted)
    /// is an error for which [`ResponsesError::is_conversation_not_found`] holds.
    pub async fn retrieve_conversation(&self, id: &str) -> Result<Conversation, ResponsesError> {
        let url = endpoint(&self.base_url, &["conversations", id]);
        let call = Call::on_conversation(RETRIEVE_CONVERSATION_OPERATION, Method::GET, &url, None);
        self.conversation_call(call).await
    }

    /// `DELETE {base_url}/conversations/{id}`. Deleting a conversation that does not exist is
    /// an error for which [`ResponsesError::is_conversation_not_found`] holds.
    pub async fn delete_conversation(&self, id: &str) -> Result<(), ResponsesError> {
        let url = endpoint(&self.base_url, &["conversations", id]);
        let call = Call::on_conversation(DELETE_CONVERSATION_OPERATION, Method::DELETE, &url, None);
        let response = self.send_with_retries(call).await?;
        self.read_json_body(DELETE_CONVERSATION_OPERATION, response)
            .await?;
        Ok(())
    }

    /// `GET {base_url}/models`: the upstream's model list, as the JSON it answers (a proxy
    /// passes it on unchanged).
    pub async fn list_models(&self) -> Result<Value, ResponsesError> {
        let url = endpoint(&self.base_url, &["models"]);
        let call = Call {
            operation: LIST_MODELS_OPERATION,
            method: Method::GET,
            url: &url,
            body: None,
            accept: "application/json",
            chained: false,
            conversation: false,
            authorization: None,
        };
        let response = self.send_with_retries(call).await?;
        let bytes = self.read_json_body(LIST_MODELS_OPERATION, response).await?;
        serde_json::from_slice(&bytes).map_err(|e| ResponsesError::Decode {
            operation: LIST_MODELS_OPERATION,
            what: "model list".into(),
            message: e.to_string(),
        })
    }

    /// Sends a conversations call and decodes the conversation object it answers with.
    async fn conversation_call(&self, call: Call<'_>) -> Result<Conversation, ResponsesError> {
        let operation = call.operation;
        let response = self.send_with_retries(call).await?;
        let bytes = self.read_json_body(operation, response).await?;
        serde_json::from_slice(&bytes).map_err(|e| ResponsesError::Decode {
            operation,
            what: "conversation object".into(),
            message: e.to_string(),
        })
    }

    /// The whole body of a unary (JSON) answer, within the request timeout.
    async fn read_json_body(
        &self,
        operation: &'static str,
        response: reqwest::Response,
    ) -> Result<Vec<u8>, ResponsesError> {
        let bytes = tokio::time::timeout(self.config.request_timeout, response.bytes())
            .await
            .map_err(|_| ResponsesError::Transport {
                operation,
                message: format!(
                    "no complete body within the request timeout of {:?}",
                    self.config.request_timeout
                ),
            })?
            .map_err(|e| {
                self.redact(ResponsesError::Transport {
                    operation,
                    message: error_chain(&e.without_url()),
                })
            })?;
        Ok(bytes.to_vec())
    }

    /// Sends until a success, a non-retryable answer, or the retry budget is spent.
    async fn send_with_retries(&self, call: Call<'_>) -> Result<reqwest::Response, ResponsesError> {
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let error = match self.send_once(&call, attempt).await {
                Ok(response) => return Ok(response),
                Err(error) => self.redact(error),
            };
            if !error.is_retryable() || attempt > self.config.max_retries {
                tracing::debug!(operation = call.operation, attempt, %error, "giving up");
                return Err(error);
            }
            let wait = self.config.backoff_for(attempt);
            tracing::warn!(
                operation = call.operation,
                attempt,
                max_retries = self.config.max_retries,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                %error,
                "retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn send_once(
        &self,
        call: &Call<'_>,
        attempt: u32,
    ) -> Result<reqwest::Response, ResponsesError> {
        let mut builder = self
            .http
            .request(call.method.clone(), call.url.clone())
            .header(ACCEPT, call.accept);
        if let Some(body) = &call.body {
            builder = builder
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        if let Some(authorization) = call.authorization.as_ref().or(self.authorization.as_ref()) {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        let no_answer = |message: String| ResponsesError::Connect {
            operation: call.operation,
            url: redact_url(call.url),
            attempts: attempt,
            message,
        };
        let response = match tokio::time::timeout(self.config.request_timeout, builder.send()).await
        {
            Err(_elapsed) => {
                return Err(no_answer(format!(
                    "no response headers within {:?}",
                    self.config.request_timeout
                )))
            }
            Ok(Err(error)) if error.is_builder() => {
                return Err(ResponsesError::Config {
                    operation: call.operation,
                    message: error_chain(&error.without_url()),
                })
            }
            // `without_url`: reqwest's text would repeat the URL, secrets included.
            Ok(Err(error)) => return Err(no_answer(error_chain(&error.without_url()))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = match tokio::time::timeout(self.config.request_timeout, response.text()).await {
            Ok(Ok(text)) => text,
            Ok(Err(_)) | Err(_) => String::new(),
        };
        let (code, message) = parse_api_error(status, &body);
        Err(ResponsesError::Api {
            operation: call.operation,
            url: redact_url(call.url),
            status: status.as_u16(),
            code,
            message,
            attempts: attempt,
            chained: call.chained,
            conversation: call.conversation,
        })
    }

    pub(crate) fn redact(&self, error: ResponsesError) -> ResponsesError {
        match &self.config.api_key {
            Some(key) => error.redacted(key.expose()),
            None => error,
        }
    }
}

/// The `code` and `message` of an API error body `{"error":{"code":…,"message":…}}`; for any
/// other body, its text (shortened) or the status reason.
fn parse_api_error(status: StatusCode, body: &str) -> (Option<String>, String) {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .filter(|e| e.is_object());
    if let Some(error) = error {
        let code = error.get("code").and_then(Value::as_str).map(str::to_owned);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| shorten(body));
        return (code, message);
    }
    let text = body.trim();
    if text.is_empty() {
        (
            None,
            status.canonical_reason().unwrap_or("no reason").to_owned(),
        )
    } else {
        (None, shorten(text))
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An error with its causes ("error sending request: connection refused").
/// `Authorization: Bearer <key>`, marked sensitive so that no formatter prints it.
pub fn bearer(key: &ApiKey, operation: &'static str) -> Result<HeaderValue, ResponsesError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
        ResponsesError::Config {
            operation,
            message: "the API key contains characters not allowed in an HTTP header".into(),
        }
    })?;
    value.set_sensitive(true);
    Ok(value)
}

pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The API error body's code and message are extracted; other bodies become the message.
    #[test]
    fn api_error_bodies() {
        let body = r#"{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#;
        let (code, message) = parse_api_error(StatusCode::BAD_REQUEST, body);
        assert_eq!(code.as_deref(), Some("previous_response_not_found"));
        assert!(message.contains("resp_x"));
        let (code, message) = parse_api_error(StatusCode::BAD_GATEWAY, "upstream down");
        assert_eq!((code, message.as_str()), (None, "upstream down"));
        let (_, message) = parse_api_error(StatusCode::NOT_FOUND, "");
        assert_eq!(message, "Not Found");
    }

    /// A base URL that is not http(s) is a configuration error; a trailing slash is ignored.
    #[test]
    fn base_url_validation() {
        assert!(matches!(
            ResponsesClient::new(ResponsesConfig::new("127.0.0.1:80")),
            Err(ResponsesError::Config { .. })
        ));
        let client = ResponsesClient::new(ResponsesConfig::new("http://127.0.0.1:9/v1/")).unwrap();
        assert_eq!(
            client.responses_url.as_str(),
            "http://127.0.0.1:9/v1/responses"
        );
        assert_eq!(
            client.compact_url.as_str(),
            "http://127.0.0.1:9/v1/responses/compact"
        );
    }

    /// A base URL with a query keeps it after the endpoint path, and the client's shown base
    /// URL hides the secrets in it.
    #[test]
    fn endpoints_keep_the_query_and_the_shown_url_hides_secrets() {
        let client = ResponsesClient::new(ResponsesConfig::new(
            "http://u:sk-user@127.0.0.1:9/v1?api-key=sk-query",
        ))
        .unwrap();
        assert_eq!(
            client.responses_url.as_str(),
            "http://u:sk-user@127.0.0.1:9/v1/responses?api-key=sk-query"
        );
        let shown = client.display_base_url();
        assert!(
            !shown.contains("sk-user") && !shown.contains("sk-query"),
            "{shown}"
        );
        assert!(!format!("{client:?}").contains("sk-"), "{client:?}");
    }

    /// A loopback HTTP/1.1 server answering every request with an empty model list on a
    /// kept-alive connection; it counts the connections it accepts.
    async fn counting_server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 1024];
                    loop {
                        let Ok(read) = stream.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        request.extend_from_slice(&buffer[..read]);
                        // GET requests: no body; answer each whole header block.
                        while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                            request.drain(..end + 4);
                            let body = r#"{"object":"list","data":[]}"#;
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    /// Each connection pool keeps connections of its own: calls on one pool reuse its
    /// connection, a call on another pool opens another, and a pool index wraps around.
    #[tokio::test]
    async fn connection_pools_keep_their_own_connections() {
        let (url, accepted) = counting_server().await;
        let client = ResponsesClient::new(ResponsesConfig::new(url))
            .unwrap()
            .with_connection_pools(2)
            .unwrap();
        assert_eq!(client.connection_pools(), 2);
        let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
        client.list_models().await.unwrap();
        client.on_pool(0).list_models().await.unwrap();
        assert_eq!(count(), 1, "pool 0 reuses its connection");
        client.on_pool(1).list_models().await.unwrap();
        assert_eq!(count(), 2, "pool 1 opens its own");
        client.on_pool(3).list_models().await.unwrap();
        assert_eq!(count(), 2, "pool 3 of 2 is pool 1");
        // A client built without pools has one, whatever the index.
        let (url, accepted) = counting_server().await;
        let single = ResponsesClient::new(ResponsesConfig::new(url)).unwrap();
        assert_eq!(single.connection_pools(), 1);
        single.on_pool(0).list_models().await.unwrap();
        single.on_pool(5).list_models().await.unwrap();
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
