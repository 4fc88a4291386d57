//! The HTTP side: requests, bearer auth, retries, the compaction endpoint.

use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ResponsesConfig;
use crate::error::ResponsesError;
use crate::sse::ResponseStream;
use crate::types::{CompactRequest, CompactedResponse, CreateResponse, WireUsage};

const CREATE_OPERATION: &str = "create response";
const COMPACT_OPERATION: &str = "compact response";
/// Longest server error text kept in an error.
const MAX_ERROR_BODY_CHARS: usize = 2_000;

/// A Responses API client. Cheap to clone (one shared connection pool).
#[derive(Debug, Clone)]
pub struct ResponsesClient {
    http: reqwest::Client,
    config: ResponsesConfig,
    responses_url: String,
    compact_url: String,
    /// `Bearer <key>`, marked sensitive so that no formatter prints it.
    authorization: Option<HeaderValue>,
}

/// The body of `POST /responses`: the request plus `stream: true`.
#[derive(Serialize)]
struct StreamingBody<'a> {
    #[serde(flatten)]
    request: &'a CreateResponse,
    stream: bool,
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
    url: &'a str,
    body: Vec<u8>,
    accept: &'static str,
    chained: bool,
}

impl ResponsesClient {
    pub fn new(config: ResponsesConfig) -> Result<Self, ResponsesError> {
        let base = config.base_url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ResponsesError::Config {
                operation: "build Responses client",
                message: format!("base URL {base:?} is not an http(s) URL"),
            });
        }
        let authorization = match &config.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| ResponsesError::Config {
                        operation: "build Responses client",
                        message: "the API key contains characters not allowed in an HTTP header"
                            .into(),
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(config.request_timeout)
            .build()
            .map_err(|e| ResponsesError::Config {
                operation: "build Responses client",
                message: error_chain(&e),
            })?;
        Ok(ResponsesClient {
            http,
            responses_url: format!("{base}/responses"),
            compact_url: format!("{base}/responses/compact"),
            config,
            authorization,
        })
    }

    pub fn config(&self) -> &ResponsesConfig {
        &self.config
    }

    /// `POST {base_url}/responses` with `stream: true`; the returned stream yields the typed
    /// events. Retries (5xx, no answer) happen only here, before the response started, so no
    /// event is ever received twice.
    pub async fn create_response(
        &self,
        request: CreateResponse,
    ) -> Result<ResponseStream, ResponsesError> {
        let body = serde_json::to_vec(&StreamingBody {
            request: &request,
            stream: true,
        })
        .map_err(|e| ResponsesError::Config {
            operation: CREATE_OPERATION,
            message: format!("cannot encode the request: {e}"),
        })?;
        tracing::debug!(
            url = %self.responses_url,
            model = %request.model,
            previous_response_id = request.previous_response_id.as_deref().unwrap_or(""),
            store = request.store,
            input_items = request.input.len(),
            body_bytes = body.len(),
            "creating response"
        );
        let call = Call {
            operation: CREATE_OPERATION,
            url: &self.responses_url,
            body,
            accept: "text/event-stream",
            chained: request.previous_response_id.is_some(),
        };
        let response = self.send_with_retries(call).await?;
        let stream = ResponseStream::from_sse_bytes(
            response.bytes_stream(),
            self.config.idle_timeout,
            CREATE_OPERATION,
        );
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
            url = %self.compact_url,
            model = %request.model,
            previous_response_id = request.previous_response_id.as_deref().unwrap_or(""),
            input_items = request.input.len(),
            "compacting"
        );
        let call = Call {
            operation: COMPACT_OPERATION,
            url: &self.compact_url,
            body,
            accept: "application/json",
            chained: request.previous_response_id.is_some(),
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
        let bytes = tokio::time::timeout(self.config.request_timeout, response.bytes())
            .await
            .map_err(|_| ResponsesError::Transport {
                operation: COMPACT_OPERATION,
                message: format!(
                    "no complete body within the request timeout of {:?}",
                    self.config.request_timeout
                ),
            })?
            .map_err(|e| {
                self.redact(ResponsesError::Transport {
                    operation: COMPACT_OPERATION,
                    message: error_chain(&e),
                })
            })?;
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
            .post(call.url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, call.accept)
            .body(call.body.clone());
        if let Some(authorization) = &self.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        let no_answer = |message: String| ResponsesError::Connect {
            operation: call.operation,
            url: call.url.to_owned(),
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
                    message: error_chain(&error),
                })
            }
            Ok(Err(error)) => return Err(no_answer(error_chain(&error))),
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
            url: call.url.to_owned(),
            status: status.as_u16(),
            code,
            message,
            attempts: attempt,
            chained: call.chained,
        })
    }

    fn redact(&self, error: ResponsesError) -> ResponsesError {
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
fn error_chain(error: &dyn std::error::Error) -> String {
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
        assert_eq!(client.responses_url, "http://127.0.0.1:9/v1/responses");
        assert_eq!(
            client.compact_url,
            "http://127.0.0.1:9/v1/responses/compact"
        );
    }
}
