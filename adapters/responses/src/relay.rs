//! A request relayed to the API as it came: for a proxy that passes its clients' requests on
//! unchanged (ctxbridge's Responses front without a context engine). Not retried, not
//! bounded by the stream limits of a turn: the answer is the server's, status, headers and
//! body, streamed as it arrives.

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, HOST};
use reqwest::{Method, StatusCode};

use crate::client::{error_chain, ResponsesClient};
use crate::error::ResponsesError;
use crate::urls::{endpoint, redact_url};

const OPERATION: &str = "relay a request";

/// A request to relay.
#[derive(Debug)]
pub struct RelayRequest {
    pub method: Method,
    /// The path under the base URL, without its leading `/` (`responses/resp_1`).
    pub path: String,
    /// The query string, without its `?`.
    pub query: Option<String>,
    /// The caller's headers; hop-by-hop ones, `Host`, `Content-Length` and `Authorization` are
    /// not passed on.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The `Authorization` to send instead of the client's own key (a relay passing its
    /// caller's on); `None` sends the client's key.
    pub authorization: Option<HeaderValue>,
}

/// The server's answer, its body streamed.
pub struct Relayed {
    pub status: StatusCode,
    /// The server's headers, less the hop-by-hop ones and `Content-Length`.
    pub headers: HeaderMap,
    pub body: BoxStream<'static, Result<Bytes, ResponsesError>>,
}

impl std::fmt::Debug for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayed")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1), and those the
/// HTTP client sets itself.
fn passes_on(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    ) && name != HOST
        && name != CONNECTION
}

/// `headers` less those that do not pass a relay.
pub fn relayed_headers(headers: &HeaderMap) -> HeaderMap {
    headers
        .iter()
        .filter(|(name, _)| passes_on(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

impl ResponsesClient {
    /// Sends `request` to `{base_url}/{path}` and returns the server's answer as it is
    /// (an error status included). Fails only when no answer came.
    pub async fn relay(&self, request: RelayRequest) -> Result<Relayed, ResponsesError> {
        let segments: Vec<&str> = request.path.split('/').filter(|s| !s.is_empty()).collect();
        let mut url = endpoint(&self.base_url, &segments);
        url.set_query(request.query.as_deref());
        let mut headers = relayed_headers(&request.headers);
        headers.remove(AUTHORIZATION);
        if let Some(authorization) = request.authorization.or_else(|| self.authorization.clone()) {
            headers.insert(AUTHORIZATION, authorization);
        }
        let sent = self
            .http
            .request(request.method, url.clone())
            .headers(headers)
            .body(request.body)
            .send();
        let response = match tokio::time::timeout(self.config.request_timeout, sent).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                return Err(self.redact(ResponsesError::Connect {
                    operation: OPERATION,
                    url: redact_url(&url),
                    attempts: 1,
                    message: error_chain(&error.without_url()),
                }))
            }
            Err(_elapsed) => {
                return Err(ResponsesError::Connect {
                    operation: OPERATION,
                    url: redact_url(&url),
                    attempts: 1,
                    message: format!(
                        "no response headers within {:?}",
                        self.config.request_timeout
                    ),
                })
            }
        };
        let status = response.status();
        let headers = relayed_headers(response.headers());
        let body = response
            .bytes_stream()
            .map(|chunk| {
                chunk.map_err(|error| ResponsesError::Transport {
                    operation: OPERATION,
                    message: error_chain(&error.without_url()),
                })
            })
            .boxed();
        Ok(Relayed {
            status,
            headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connection headers, the length and the host stay behind; the rest passes.
    #[test]
    fn hop_by_hop_headers_do_not_pass() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("content-length", "12"),
            ("host", "127.0.0.1:1"),
            ("content-type", "application/json"),
            ("openai-beta", "responses=v1"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let passed = relayed_headers(&headers);
        let names: Vec<&str> = passed.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type", "openai-beta"]);
    }
}
