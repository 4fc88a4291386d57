//! The front without a context engine: every `/v1/…` request goes to the upstream unchanged
//! and its answer comes back unchanged, streamed as it arrives (the ids are the upstream's).
//! The front's own capability token is checked first, and the upstream gets the configured
//! key; with `serve.responses.passThroughAuth` the client's `Authorization` goes on instead.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use responses_client::{bearer, ApiKey, RelayRequest};

use super::records::Caller;
use super::wire::ApiError;
use super::ResponsesFront;

/// The largest request body relayed (the API's own limit for a request with inline files is
/// larger; the front keeps a bound of its own).
const MAX_RELAYED_BODY: usize = 64 * 1024 * 1024;

/// Relays `request` to the upstream.
pub(super) async fn relay(
    State(front): State<Arc<ResponsesFront>>,
    Extension(caller): Extension<Caller>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Some(path) = parts.uri.path().strip_prefix("/v1/") else {
        return ApiError::unknown_route(parts.method.as_str(), parts.uri.path()).into_response();
    };
    let body = match axum::body::to_bytes(body, MAX_RELAYED_BODY).await {
        Ok(body) => body,
        Err(error) => {
            return ApiError {
                status: 413,
                kind: "invalid_request_error",
                message: format!("The request body could not be read whole (at most {MAX_RELAYED_BODY} bytes): {error}"),
                param: None,
                code: None,
            }
            .into_response()
        }
    };
    let authorization = if front.mode.pass_through_auth {
        match parts.headers.get(AUTHORIZATION) {
            Some(given) => Some(given.clone()),
            // Never the configured key in its place: the upstream would answer for someone else.
            None => return ApiError::unauthorized_upstream().into_response(),
        }
    } else {
        None
    };
    forward(
        &front,
        RelayRequest {
            method: parts.method,
            path: path.to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers,
            body,
            authorization,
        },
        caller.lane,
    )
    .await
}

/// `GET /v1/{path}` relayed with the caller's own `api_key` (a front with an engine passing
/// its clients' keys on, for what it passes through), from `lane`.
pub(super) async fn relay_as(
    front: &ResponsesFront,
    path: &str,
    api_key: &ApiKey,
    lane: usize,
) -> Response {
    let Ok(value) = bearer(api_key, "relay a request") else {
        return ApiError::unauthorized_upstream().into_response();
    };
    forward(
        front,
        RelayRequest {
            method: Method::GET,
            path: path.to_owned(),
            query: None,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            authorization: Some(value),
        },
        lane,
    )
    .await
}

/// Sends `request` to the upstream over `lane`'s connections; its answer, streamed, or 502
/// when none came.
async fn forward(front: &ResponsesFront, request: RelayRequest, lane: usize) -> Response {
    match front.upstream.client_on(lane).relay(request).await {
        Ok(relayed) => {
            let mut response = Body::from_stream(relayed.body).into_response();
            *response.status_mut() = relayed.status;
            *response.headers_mut() = relayed.headers;
            response
        }
        Err(error) => {
            tracing::warn!(%error, "responses front: the upstream did not answer a relayed request");
            ApiError::upstream(error.to_string()).into_response()
        }
    }
}
