//! The shared upstream as the connection of the one Codex backend (`backend::codex`): a
//! [`Transport`] over the hub ([`HubTransport`]) and the [`Connect`] that hands the engine
//! sessions' harness a client on it ([`HubConnect`]). The hub owns the upstream — its
//! handshake, its restarts, which threads it has loaded — so a client here is never spawned
//! or stopped; a client request's own connection wraps this one ([`super::client_call`]).

use async_trait::async_trait;
use codex_app_server_client::{
    AppServerClient, AppServerError, Route, ServerInfo, Transport, TurnLimits,
};
use ctxbridge_jsonrpc::codes::INTERNAL_ERROR;
use serde_json::Value;

use crate::backend::codex::Connect;
use crate::serve::seam::{ClientAnswer, UpstreamHandle};
use crate::serve::RpcError;

/// An upstream error as the Codex client reports it: the hub's own failures (the upstream
/// died, serve is stopping) are transport failures; Codex's answers stay server errors.
pub(crate) fn app_server_error(method: &str, error: RpcError) -> AppServerError {
    if error.code == INTERNAL_ERROR {
        return AppServerError::Transport {
            method: method.to_owned(),
            reason: error.message,
        };
    }
    AppServerError::Server {
        method: method.to_owned(),
        code: error.code,
        message: error.message,
        data: error.data,
    }
}

/// ctxbridge's own requests to the shared upstream, through the hub.
#[derive(Debug, Clone)]
pub(crate) struct HubTransport {
    pub(crate) upstream: UpstreamHandle,
}

impl HubTransport {
    /// A request; with `answer`, its result also answers that client request where the
    /// upstream's answer stands among its notifications, and the completion of the turn it
    /// starts waits until it is settled ([`UpstreamHandle::request_answering_held`]).
    pub(crate) async fn request_via(
        &self,
        method: &str,
        params: Value,
        route: Option<Route>,
        answer: Option<&ClientAnswer>,
    ) -> Result<Value, AppServerError> {
        if let Some(route) = route {
            // Before the request: the hub takes its messages in order, so nothing of the
            // turn is missed.
            self.upstream.watch(&route.thread_id, route.tx);
        }
        let result = match answer {
            Some(answer) => {
                self.upstream
                    .request_answering_held(method, params, answer)
                    .await
            }
            None => self.upstream.request(method, params).await,
        };
        result.map_err(|error| app_server_error(method, error))
    }
}

#[async_trait]
impl Transport for HubTransport {
    async fn request(
        &self,
        method: &str,
        params: Value,
        route: Option<Route>,
    ) -> Result<Value, AppServerError> {
        self.request_via(method, params, route, None).await
    }

    /// Never asked: serve relays the upstream's server requests to its clients (the hub's
    /// outgoing side), so none reaches a turn stream.
    fn respond(&self, id: Value, _result: Result<Value, String>) {
        tracing::warn!(%id, "serve: a server request was answered by a turn; serve relays server requests to its clients, so this answer is dropped");
    }

    async fn attach(&self, thread_id: &str, mut params: Value) -> Result<(), AppServerError> {
        const METHOD: &str = "thread/resume";
        if let Some(object) = params.as_object_mut() {
            object.insert("threadId".to_owned(), Value::String(thread_id.to_owned()));
        }
        self.upstream
            .ensure_attached_with(thread_id, params)
            .await
            .map_err(|error| app_server_error(METHOD, error))
    }

    fn is_alive(&self) -> bool {
        self.upstream.is_open()
    }

    fn death_reason(&self) -> Option<String> {
        (!self.upstream.is_open()).then(|| "ctxbridge serve stopped".to_owned())
    }
}

/// The engine sessions' connection: a client on the shared upstream, its server info the
/// upstream's `initialize` answer (asked once, starting the upstream if none runs), its
/// turns under the configured limits.
#[derive(Debug)]
pub struct HubConnect {
    upstream: UpstreamHandle,
    limits: TurnLimits,
}

impl HubConnect {
    /// Clients on `upstream` whose turns run under `limits` (`backend.idleTimeoutMs`, …).
    pub fn new(upstream: UpstreamHandle, limits: TurnLimits) -> HubConnect {
        HubConnect { upstream, limits }
    }
}

#[async_trait]
impl Connect for HubConnect {
    async fn connect(&self) -> Result<AppServerClient, AppServerError> {
        const METHOD: &str = "initialize";
        let info = self
            .upstream
            .upstream_info()
            .await
            .map_err(|error| app_server_error(METHOD, error))?;
        let server_info: ServerInfo =
            serde_json::from_value(info).map_err(|source| AppServerError::Deserialize {
                method: METHOD.to_owned(),
                source,
            })?;
        let transport = HubTransport {
            upstream: self.upstream.clone(),
        };
        Ok(AppServerClient::over(
            std::sync::Arc::new(transport),
            server_info,
            self.limits,
        ))
    }
}
