//! `ctxbridge serve`: ctxbridge as a Codex app-server (docs/serve.md#the-serve-command). Clients speak the app-server
//! protocol to ctxbridge; ctxbridge speaks it to one real `codex app-server` shared by all of
//! them: a child it starts, or one that already runs (`backend.url`).
//!
//! Layout (modelled on Codex's own `app-server`: a transport per listener kind, a message
//! processor routing each request, an outgoing side owning server→client requests):
//! - [`listen`]: the `--listen` URL and capability-token auth; the exposure rules.
//! - `transport`: the WebSocket listeners (TCP: axum, `/readyz`, `/healthz`, `/metrics`; unix
//!   socket: the same upgrade and frames, as Codex's) and stdio (newline-delimited); one client
//!   actor per accepted connection plus a writer task.
//! - `client`: the client actor — framing errors, its `initialize` state, its own id space.
//! - `hub`: the task owning the shared upstream, id mapping, subscriptions, turn ownership and
//!   server→client requests — its loop, the client side, the upstream side (`relay`) and the
//!   outgoing server→client requests, each in its own file.
//! - [`outbound`]: a connection's outgoing queue, bounded in messages and bytes; a client
//!   that does not read is disconnected (close 1008) instead of growing it.
//! - [`route`]: the pure route table (which methods are session requests, which subscribe)
//!   and how relayed messages are shaped for display.
//! - [`seam`]: the [`SessionTurns`] seam through which a session's `turn/start`,
//!   `thread/compact/start`, `thread/resume` and history reads are served, and the
//!   [`UpstreamHandle`] it reaches the upstream with.
//! - [`sessions`]: [`EngineSessions`], the engine-backed seam: a session's turn is a harness
//!   turn on the one Codex backend, over the request's own connection.
//! - [`codex_link`]: the shared upstream as that backend's connection ([`HubConnect`]);
//!   `client_call`: one client request's connection on it (adopting the client's thread,
//!   carrying its turn params, answering it once the upstream accepted).
//! - [`thread_map`]: client thread id ↔ backend thread id, persisted in the state store, and
//!   the pure rewriting of relayed messages.
//! - `upstream`: starting the `codex app-server` child, or connecting to a running one
//!   (`backend.url`), and the raw JSON-RPC connection.
//! - `history`: a session's conversation across its backend threads, as `thread/read` and
//!   `thread/turns/list` show it.
//! - `fuzzing`: the fuzz targets' entry point (client bytes → frames → routing), not API.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::AppServerConfig;
use tokio::sync::{oneshot, watch};

use crate::config::BackendUrl;
use crate::metrics::Registry;
use crate::store::{StateStore, SweepListener};

mod client;
mod client_call;
pub mod codex_link;
pub mod command;
#[doc(hidden)]
pub mod fuzzing;
mod history;
mod hub;
pub(crate) mod lanes;
pub mod listen;
pub mod outbound;
pub mod responses;
pub mod route;
pub mod seam;
pub mod sessions;
pub mod thread_map;
mod transport;
mod upstream;

pub use codex_link::HubConnect;
/// The JSON-RPC error object serve answers with (the shared definition).
pub use ctxbridge_jsonrpc::RpcError;
pub use listen::{
    check_exposure, BadOrigin, CapabilityToken, ListenAddr, ListenError, OriginPolicy,
};
pub use outbound::OutboundLimits;
pub use route::SessionOp;
pub use seam::{
    PassThroughSessions, SessionAnswer, SessionRequest, SessionTurns, TurnEnd, UpstreamHandle,
};
pub use sessions::EngineSessions;
pub use thread_map::ThreadMap;
pub use transport::CLOSE_TOO_BIG;
pub(crate) use transport::METRICS_CONTENT_TYPE;
pub use upstream::UpstreamError;
pub use upstream::{Connector, Live, MemoryPeer, OversizeLine, UpstreamEvent};

/// Default limit of one client message (a WebSocket message or a line).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// Default of [`ServeOptions::max_upstream_in_flight`].
pub const DEFAULT_MAX_UPSTREAM_IN_FLIGHT: usize = 512;
/// Default time running turns get to finish at shutdown before they are interrupted.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything `serve` needs.
#[derive(Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: ListenAddr,
    /// WebSocket capability token, if auth is on.
    pub auth: Option<CapabilityToken>,
    /// Which browser origins may open a WebSocket (by default none: an upgrade carrying an
    /// `Origin` header is refused with 403, as Codex's).
    pub origins: OriginPolicy,
    /// Client messages over this size are refused (WebSocket: close 1009).
    pub max_message_bytes: usize,
    /// Bounds of each client connection's outgoing queue; a client over them (it does not
    /// read) is disconnected, WebSocket close 1008.
    pub outbound: OutboundLimits,
    /// Most requests waiting for the upstream's answer at once; a client request past it is
    /// answered -32001 "Server overloaded; retry later." (as Codex's own backpressure). A
    /// request the upstream does not answer within `upstream.request_timeout` is answered
    /// with an error saying so.
    pub max_upstream_in_flight: usize,
    /// How the upstream `codex app-server` child is started (without `backend_url`; its
    /// message limit and request timeout apply to a `backend_url` connection too).
    pub upstream: AppServerConfig,
    /// An already running app-server to connect to instead of starting a child.
    pub backend_url: Option<BackendUrl>,
    /// Where the thread-id map is kept (memory only without one).
    pub store: Option<Arc<dyn StateStore>>,
    /// What serves session requests.
    pub sessions: Arc<dyn SessionTurns>,
    /// Time running turns get at shutdown.
    pub shutdown_grace: Duration,
    /// The metrics `GET /metrics` exports (the harness of engine sessions reports here too).
    pub metrics: Arc<Registry>,
    /// A separate loopback HTTP listener serving only `GET /metrics` (for `unix://` and
    /// `stdio://` listeners, which have no HTTP port; allowed with `ws://` too).
    pub metrics_listen: Option<SocketAddr>,
    /// Told what each retention sweep removed (the engine sessions' harness fires
    /// `session_end` for them); see [`crate::app::retention_sweeper_with`].
    pub sweep_listener: Option<SweepListener>,
    /// The hub's channel: [`ServeOptions::upstream_handle`] reaches the upstream of the server
    /// started with these options (one server per options value and its clones).
    hub: hub::HubChannel,
}

impl std::fmt::Debug for ServeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("auth", &self.auth.is_some())
            .field("max_message_bytes", &self.max_message_bytes)
            .field("upstream", &self.upstream.command)
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Pass-through serving on `listen` in front of `upstream`, default limits, no store.
    pub fn new(listen: ListenAddr, upstream: AppServerConfig) -> ServeOptions {
        ServeOptions {
            listen,
            auth: None,
            origins: OriginPolicy::default(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            outbound: OutboundLimits::default(),
            max_upstream_in_flight: DEFAULT_MAX_UPSTREAM_IN_FLIGHT,
            upstream,
            backend_url: None,
            store: None,
            sessions: Arc::new(PassThroughSessions),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            metrics: Arc::new(Registry::new()),
            metrics_listen: None,
            sweep_listener: None,
            hub: hub::HubChannel::new(),
        }
    }

    /// The shared upstream of the server these options start, usable before it starts (the
    /// engine sessions' harness runs on it); requests wait until the server runs.
    pub fn upstream_handle(&self) -> UpstreamHandle {
        UpstreamHandle {
            hub: self.hub.sender(),
        }
    }
}

/// `serve` could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen/auth settings are refused.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// `--metrics-listen` is not a loopback address.
    #[error("--metrics-listen {addr}: refusing a non-loopback address (the metrics endpoint has no auth of its own; scrape it on loopback or through the authenticated ws:// port)")]
    MetricsNotLoopback { addr: SocketAddr },
    /// These options (or a clone of them) started a server already: its upstream handle
    /// belongs to that one.
    #[error("these options started a server already; make new ones for another")]
    AlreadyStarted,
    /// Binding the listener failed.
    #[error("binding {what}: {source}")]
    Bind {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// A running server.
pub struct ServeHandle {
    /// The bound WebSocket address (`ws://` listeners).
    pub local_addr: Option<SocketAddr>,
    /// Where it listens, as a `--listen` URL with the port actually bound.
    listening: String,
    /// Whether clients must present the capability token.
    auth: bool,
    /// The bound `--metrics-listen` address.
    pub metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    hub: tokio::sync::mpsc::UnboundedSender<hub::HubMsg>,
    grace: Duration,
    listener: tokio::task::JoinHandle<()>,
    hub_task: tokio::task::JoinHandle<()>,
    sessions: Arc<dyn SessionTurns>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
}

impl ServeHandle {
    /// The line a server prints when it starts, as Codex's `app-server --listen` does: the
    /// URL it listens on (the port actually bound), the auth mode and the metrics endpoint.
    pub fn listening_line(&self) -> String {
        let auth = if self.auth {
            "capability-token"
        } else {
            "none (loopback only)"
        };
        // A `--metrics-listen` port, else the ws:// port itself; unix:// and stdio:// have none.
        let metrics = self
            .metrics_addr
            .or(self.local_addr)
            .map(|addr| format!("; metrics: http://{addr}/metrics"))
            .unwrap_or_default();
        format!(
            "ctxbridge serve: listening on {} (auth: {auth}{metrics})",
            self.listening
        )
    }

    /// Stops accepting, lets running turns finish within the grace period (then interrupts
    /// them), stops the upstream child and returns when all is down.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let (tx, rx) = oneshot::channel();
        if self
            .hub
            .send(hub::HubMsg::Shutdown {
                grace: self.grace,
                reply: tx,
            })
            .is_ok()
        {
            let _ = rx.await;
        }
        let _ = self.hub_task.await;
        self.sessions.shutdown().await;
        self.listener.abort();
        if let Some(metrics) = self.metrics_task {
            metrics.abort();
        }
    }

    /// Resolves when the listener ends by itself (stdio: the client closed stdin).
    pub async fn listener_finished(&mut self) {
        let _ = (&mut self.listener).await;
    }
}

/// Starts listening and returns at once.
pub async fn start(options: ServeOptions) -> Result<ServeHandle, ServeError> {
    let connector: Arc<dyn upstream::Connector> = match &options.backend_url {
        Some(url) => Arc::new(upstream::UrlConnector::new(
            url.clone(),
            options.upstream.max_line_bytes,
            options.upstream.request_timeout,
        )),
        None => Arc::new(upstream::ChildConnector(options.upstream.clone())),
    };
    start_with(options, connector).await
}

/// As [`start`] with the upstream obtained from `connector`: an upstream of the caller's own,
/// such as the bench's scripted flood of deltas.
pub async fn start_with(
    options: ServeOptions,
    connector: Arc<dyn upstream::Connector>,
) -> Result<ServeHandle, ServeError> {
    check_exposure(&options.listen, options.auth.as_ref())?;
    if let Some(addr) = options.metrics_listen {
        if !addr.ip().is_loopback() {
            return Err(ServeError::MetricsNotLoopback { addr });
        }
    }
    let threads = ThreadMap::new(options.store.clone());
    let (hub, hub_task) = hub::start(
        &options.hub,
        Arc::new(CountingConnector {
            inner: connector,
            metrics: options.metrics.clone(),
        }),
        threads,
        options.sessions.clone(),
        hub::HubLimits {
            request_timeout: options.upstream.request_timeout,
            max_in_flight: options.max_upstream_in_flight,
        },
    )
    .ok_or(ServeError::AlreadyStarted)?;
    let shared = transport::Shared {
        hub: hub.clone(),
        max_message_bytes: options.max_message_bytes,
        outbound: options.outbound,
        auth: options.auth.clone(),
        origins: Arc::new(options.origins.clone()),
        next_conn: Arc::new(AtomicU64::new(0)),
        metrics: options.metrics.clone(),
        sessions: options.sessions.clone(),
        transport: match options.listen {
            ListenAddr::Ws(_) => "ws",
            ListenAddr::Unix(_) => "unix",
            ListenAddr::Stdio => "stdio",
        },
    };
    let (metrics_addr, metrics_task) = match options.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    what: format!("--metrics-listen {addr}"),
                    source,
                })?;
            let bound = listener.local_addr().ok();
            tracing::info!(addr = ?bound, "serve: metrics on GET /metrics");
            let app = transport::metrics_router(options.metrics.clone());
            let task = tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, app).await {
                    tracing::warn!(%error, "serve: metrics listener failed");
                }
            });
            (bound, Some(task))
        }
        None => (None, None),
    };
    let (stop, mut stop_rx) = watch::channel(false);
    let mut local_addr = None;
    let listener = match &options.listen {
        ListenAddr::Ws(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    what: format!("ws://{addr}"),
                    source,
                })?;
            local_addr = listener.local_addr().ok();
            tracing::info!(addr = ?local_addr, "serve: listening (WebSocket)");
            let app = transport::ws_router(shared);
            tokio::spawn(async move {
                let stopped = async move {
                    let _ = stop_rx.changed().await;
                };
                // Each JSON-RPC message is one small frame: send it at once (no Nagle delay
                // waiting for the peer's delayed ACK).
                if let Err(error) = axum::serve(listener, app)
                    .tcp_nodelay(true)
                    .with_graceful_shutdown(stopped)
                    .await
                {
                    tracing::warn!(%error, "serve: WebSocket listener failed");
                }
            })
        }
        ListenAddr::Unix(path) => {
            let listener = transport::bind_unix(path).map_err(|source| ServeError::Bind {
                what: format!("unix://{}", path.display()),
                source,
            })?;
            tracing::info!(path = %path.display(), "serve: listening (WebSocket on a unix socket)");
            let app = transport::unix_router(shared);
            tokio::spawn(transport::accept_unix(listener, app, stop_rx))
        }
        ListenAddr::Stdio => {
            let span = tracing::info_span!("client", conn = 1u64, transport = "stdio");
            tokio::spawn(tracing::Instrument::instrument(
                transport::serve_lines(tokio::io::stdin(), tokio::io::stdout(), 1, shared),
                span,
            ))
        }
    };
    let listening = match &options.listen {
        ListenAddr::Ws(addr) => format!("ws://{}", local_addr.unwrap_or(*addr)),
        ListenAddr::Unix(path) => format!("unix://{}", path.display()),
        ListenAddr::Stdio => "stdio://".to_owned(),
    };
    Ok(ServeHandle {
        local_addr,
        listening,
        auth: options.auth.is_some(),
        metrics_addr,
        metrics_task,
        stop,
        hub,
        grace: options.shutdown_grace,
        listener,
        hub_task,
        sessions: options.sessions.clone(),
    })
}

/// Serves until SIGINT/SIGTERM (or, on stdio, until stdin closes), then shuts down cleanly.
pub async fn run(options: ServeOptions) -> Result<(), ServeError> {
    run_announced(options, |_| {}).await
}

/// As [`run`], calling `announce` once the listener is bound (the CLI prints
/// [`ServeHandle::listening_line`]).
pub async fn run_announced(
    options: ServeOptions,
    announce: impl FnOnce(&ServeHandle),
) -> Result<(), ServeError> {
    let mut handle = start(options).await?;
    announce(&handle);
    let stdio = handle.local_addr.is_none();
    tokio::select! {
        () = shutdown_signal() => tracing::info!("serve: signal received; shutting down"),
        () = handle.listener_finished(), if stdio => tracing::info!("serve: listener ended"),
    }
    handle.shutdown().await;
    Ok(())
}

pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "serve: cannot watch SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The upstream connector, counting every start after the first as a restart.
struct CountingConnector {
    inner: Arc<dyn upstream::Connector>,
    metrics: Arc<Registry>,
}

#[async_trait::async_trait]
impl upstream::Connector for CountingConnector {
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<
        (
            upstream::Live,
            tokio::sync::mpsc::UnboundedReceiver<upstream::UpstreamEvent>,
        ),
        UpstreamError,
    > {
        if generation > 1 {
            self.metrics.upstream_restarted();
        }
        self.inner.connect(generation).await
    }
}
