//! `ctxbridge serve --front responses`: ctxbridge as an OpenAI Responses API server
//! (docs/serve.md#the-responses-front). A client of the API (an `openai` SDK with its base URL
//! pointed here) gets the configured context engine: each response is a harness turn of the
//! engine session its chain (`previous_response_id`) or conversation belongs to, on the
//! configured Responses backend (the upstream), with the engine's context projected onto the
//! upstream thread. The client sees its own inputs and the model's answers under the front's
//! ids, never the projected context.
//!
//! - [`wire`]: the API's request, response, event and error shapes (pure).
//! - [`records`]: the client's responses and conversations, kept in the state store.
//! - `handlers`: the routes; `stream`: a streamed response's events as its turn runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::Mutex;

use crate::backend::ResponsesBackend;
use crate::harness::Harness;
use crate::metrics::Registry;
use crate::serve::lanes::{Lane, Lanes};
use crate::serve::CapabilityToken;
use crate::store::StateStore;
use crate::util::sync::lock;

mod answer;
mod conversations;
mod handlers;
pub mod records;
mod relay;
mod settling;
mod stream;
mod turns;
pub mod wire;

use self::records::{Caller, Records};
use self::settling::Unsettled;
use self::turns::ParkedTurns;
use self::wire::ApiError;

/// What the front serves with.
pub struct ResponsesFront {
    harness: Arc<Harness>,
    /// The upstream (the harness's backend): its model name and its client for the
    /// pass-through reads.
    upstream: Arc<ResponsesBackend>,
    records: Records,
    auth: Option<CapabilityToken>,
    /// Serializes updates of conversation records (a read, an append, a write).
    conversation_updates: Mutex<()>,
    /// Turns waiting on the outputs of their model's calls of the client's functions.
    parked: ParkedTurns,
    /// Responses whose client has heard their end while they are still being kept.
    unsettled: Unsettled,
    /// How long a parked turn waits (`serve.responses.toolOutputTimeoutSecs`).
    tool_output_wait: Duration,
    mode: FrontMode,
    /// What `GET /metrics` shows (the harness reports its turns there too).
    metrics: Arc<Registry>,
    /// The lanes serving the connections (see [`crate::serve::lanes`]), once serving.
    lanes: std::sync::Mutex<Option<Arc<Lanes>>>,
}

/// How the front serves: running the engine's turns, or relaying (no engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrontMode {
    /// Every request goes to the upstream unchanged, its answer back unchanged (no context
    /// engine: `legacy` without `serve.engineThreads: "all"`).
    pub relays: bool,
    /// The client's `Authorization` goes on to the upstream (`serve.responses.passThroughAuth`;
    /// relaying only).
    pub pass_through_auth: bool,
    /// `serve.responses.toolOutputTimeoutSecs`.
    pub tool_output_timeout_secs: u64,
}

impl ResponsesFront {
    /// A front running `harness` (whose backend is `upstream`), keeping its records in the
    /// harness's store, admitting clients whose `Authorization: Bearer` matches `auth` (everyone when
    /// `None`: loopback only, see [`crate::serve::check_exposure`]).
    pub fn new(
        harness: Arc<Harness>,
        upstream: Arc<ResponsesBackend>,
        auth: Option<CapabilityToken>,
        mode: FrontMode,
        metrics: Arc<Registry>,
    ) -> Arc<ResponsesFront> {
        Arc::new(ResponsesFront {
            records: Records::new(harness.store().clone()),
            harness,
            upstream,
            auth,
            conversation_updates: Mutex::new(()),
            parked: ParkedTurns::default(),
            unsettled: Unsettled::default(),
            tool_output_wait: turns::tool_output_wait(mode.tool_output_timeout_secs),
            mode,
            metrics,
            lanes: std::sync::Mutex::new(None),
        })
    }

    /// Whether the front relays requests unchanged (no context engine).
    pub fn relays(&self) -> bool {
        self.mode.relays
    }

    /// The routes of the API the front serves; anything else answers the API's 404.
    pub fn router(self: &Arc<Self>) -> Router {
        if self.mode.relays {
            return Router::new()
                .fallback(relay::relay)
                .layer(middleware::from_fn_with_state(self.clone(), authorize))
                .with_state(self.clone());
        }
        // Health is open, as the Codex front's; the API and the metrics need the token (with
        // pass-through there is none of the front's to check: no metrics).
        let mut guarded = self.routes();
        if !self.mode.pass_through_auth {
            guarded = guarded.route("/metrics", get(metrics));
        }
        let guarded = guarded.layer(middleware::from_fn_with_state(self.clone(), authorize));
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .merge(guarded)
            .with_state(self.clone())
    }

    /// The routes of a front running the engine's turns.
    fn routes(self: &Arc<Self>) -> Router<Arc<ResponsesFront>> {
        // A route naming a response or a conversation waits until what the client heard of it
        // is kept (see [`settling`]).
        let named = Router::new()
            .route(
                "/v1/responses/:id",
                get(handlers::get_response).delete(handlers::delete_response),
            )
            .route("/v1/responses/:id/cancel", post(handlers::cancel_response))
            .route("/v1/responses/:id/input_items", get(handlers::input_items))
            .route(
                "/v1/conversations",
                post(conversations::create_conversation),
            )
            .route(
                "/v1/conversations/:id",
                get(conversations::get_conversation)
                    .post(conversations::update_conversation)
                    .delete(conversations::delete_conversation),
            )
            .route(
                "/v1/conversations/:id/items",
                get(conversations::conversation_items).post(conversations::add_conversation_items),
            )
            .route_layer(middleware::from_fn_with_state(self.clone(), settled));
        Router::new()
            .route("/v1/responses", post(handlers::create_response))
            .merge(named)
            .route("/v1/models", get(handlers::models))
            .fallback(unknown_route)
    }

    /// Serves the router on `listener` until `shutdown` resolves.
    pub async fn serve(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr: Option<SocketAddr> = listener.local_addr().ok();
        tracing::info!(
            ?addr,
            auth = self.auth.is_some(),
            relays = self.mode.relays,
            pass_through_auth = self.mode.pass_through_auth,
            "responses front: serving"
        );
        // The lanes set TCP_NODELAY: without it, a streamed response's small event writes wait
        // on the client's delayed ACK (about 40 ms a turn, measured by `bench --serve --front
        // responses`).
        let lanes = Arc::new(Lanes::per_core("ctxbridge-lane")?);
        tracing::info!(
            lanes = lanes.count(),
            "responses front: connections served on lanes"
        );
        *lock(&self.lanes) = Some(lanes.clone());
        lanes.serve(listener, self.router(), shutdown).await
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

/// Waits until the response or conversation the request's path names is kept (see
/// [`settling`]).
async fn settled(
    State(front): State<Arc<ResponsesFront>>,
    request: Request,
    next: Next,
) -> Response {
    // `/v1/responses/{id}…` or `/v1/conversations/{id}…`: the routes this guards.
    if let Some(id) = request.uri().path().split('/').nth(3) {
        front.unsettled.settled(id).await;
    }
    next.run(request).await
}

/// Refuses a request whose bearer token is not the capability token (when one is set), and
/// tells the handlers who asks ([`Caller`]): with pass-through, the client's key, which the
/// upstream checks (a request without one is refused here).
async fn authorize(
    State(front): State<Arc<ResponsesFront>>,
    headers: HeaderMap,
    mut request: Request,
    next: Next,
) -> Response {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = if front.mode.pass_through_auth {
        match given.and_then(Caller::with_bearer) {
            Some(caller) => caller,
            None => return ApiError::unauthorized_upstream().into_response(),
        }
    } else {
        if let Some(token) = &front.auth {
            if !token.accepts(given) {
                return ApiError::unauthorized().into_response();
            }
        }
        Caller::default()
    };
    let lane = request.extensions().get::<Lane>().map_or(0, |lane| lane.0);
    request.extensions_mut().insert(Caller { lane, ..caller });
    next.run(request).await
}

/// `GET /metrics`: the harness's turns and the front's responses (OpenMetrics text).
async fn metrics(State(front): State<Arc<ResponsesFront>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::serve::METRICS_CONTENT_TYPE)],
        front.metrics.render(),
    )
        .into_response()
}

/// `GET /readyz`: `ok` while the selected engine runs; when it is quarantined and `legacy`
/// answers in its place, still 200 with `{"status": "degraded", "degraded": {…}}`.
async fn readyz(State(front): State<Arc<ResponsesFront>>) -> Response {
    match front.degradation() {
        None => "ok".into_response(),
        Some(record) => Json(serde_json::json!({
            "status": "degraded",
            "degraded": record.degraded_json(),
        }))
        .into_response(),
    }
}

async fn unknown_route(request: Request) -> Response {
    ApiError::unknown_route(request.method().as_str(), request.uri().path()).into_response()
}

impl ResponsesFront {
    /// The quarantine of the selected engine when `legacy` answers in its place.
    pub fn degradation(&self) -> Option<crate::quarantine::QuarantineRecord> {
        self.harness.degradation()
    }

    /// The state store the front keeps its records in.
    pub fn store(&self) -> Arc<dyn StateStore> {
        self.harness.store().clone()
    }

    /// What the retention sweep tells the engine (`session_end` of the sessions it removed).
    pub fn sweep_listener(&self) -> crate::store::SweepListener {
        self.harness.sweep_listener()
    }

    /// Cancels the turns waiting on function outputs, ends the engine's sessions and releases
    /// the leases this process keeps.
    pub async fn shutdown(&self) {
        self.cancel_parked();
        self.harness.shutdown().await;
        // Last: what the connections started (a turn's record) runs on the lanes.
        let lanes = lock(&self.lanes).take();
        if let Some(lanes) = lanes {
            lanes.stop().await;
        }
    }
}
