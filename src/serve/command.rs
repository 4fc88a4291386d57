//! The `serve` command's arguments and how a configuration becomes [`ServeOptions`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use crate::app::{open_with_backend, responses_backend_config, store_target};
use crate::backend::codex::CodexBackend;
use crate::backend::codex_config::{app_server_config, turn_limits};
use crate::backend::ResponsesBackend;
use crate::config::{BackendConfig, Config};
use crate::metrics::Registry;
use crate::serve::listen::parse_http_listen;
use crate::serve::outbound::{
    OutboundLimits, DEFAULT_MAX_OUTGOING_BYTES, DEFAULT_MAX_OUTGOING_MESSAGES,
};
use crate::serve::responses::{FrontMode, ResponsesFront};
use crate::serve::{
    CapabilityToken, EngineSessions, HubConnect, ListenAddr, OriginPolicy, ServeOptions,
    DEFAULT_MAX_MESSAGE_BYTES,
};
use crate::store::{open_store, StateStore};

/// `ctxbridge serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The API clients speak: `codex` (the Codex app-server protocol, in front of a Codex
    /// backend) or `responses` (the OpenAI Responses API over HTTP, in front of a `responses`
    /// backend; `--listen http://IP:PORT`).
    #[arg(long, value_enum, default_value_t = Front::Codex)]
    pub front: Front,
    /// `ws://IP:PORT` or `unix://PATH` (WebSocket, over TCP or the unix socket, as Codex's) or
    /// `stdio://` (newline-delimited).
    #[arg(long, value_name = "URL", default_value = "stdio://")]
    pub listen: String,
    /// WebSocket client auth (with `--ws-token-file` or `--ws-token-sha256`).
    #[arg(long, value_enum, requires = "ws_token")]
    pub ws_auth: Option<WsAuthMode>,
    /// File holding the capability token (`Authorization: Bearer TOKEN`).
    #[arg(long, value_name = "FILE", requires = "ws_auth", group = "ws_token")]
    pub ws_token_file: Option<PathBuf>,
    /// The SHA-256 of the capability token, 64 hex digits: serve never holds the token itself.
    #[arg(long, value_name = "HEX", requires = "ws_auth", group = "ws_token")]
    pub ws_token_sha256: Option<String>,
    /// Also serve `GET /metrics` on this loopback `IP:PORT` (the only way for `unix://` and
    /// `stdio://` listeners; a `ws://` listener serves it on its own port too).
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// A browser origin (`scheme://host[:port]`, or `null`) whose pages may open a WebSocket;
    /// repeatable. By default an upgrade carrying an `Origin` header is refused with 403, as
    /// the real `codex app-server` does: browsers always send one, CLI clients never do.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Largest client message in bytes (WebSocket: larger ones close the connection, 1009).
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// Most messages waiting to be written to one client; a client over it (it does not read
    /// what it asked for) is disconnected (WebSocket close 1008).
    #[arg(long, default_value_t = DEFAULT_MAX_OUTGOING_MESSAGES)]
    pub max_outgoing_messages: usize,
    /// Most bytes waiting to be written to one client (as --max-outgoing-messages).
    #[arg(long, default_value_t = DEFAULT_MAX_OUTGOING_BYTES)]
    pub max_outgoing_bytes: usize,
    /// Most client requests waiting for the upstream's answer at once; past it a request is
    /// answered -32001 "Server overloaded; retry later." (Codex's own backpressure).
    #[arg(long, default_value_t = crate::serve::DEFAULT_MAX_UPSTREAM_IN_FLIGHT)]
    pub max_upstream_requests: usize,
}

impl ServeArgs {
    /// The arguments of `ctxbridge serve --listen URL` with nothing else given (no auth, no
    /// separate metrics listener, the default message limit) — for embedding `serve`.
    pub fn listening_on(listen: impl Into<String>) -> ServeArgs {
        ServeArgs {
            front: Front::Codex,
            listen: listen.into(),
            ws_auth: None,
            ws_token_file: None,
            ws_token_sha256: None,
            metrics_listen: None,
            allow_origins: Vec::new(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_outgoing_messages: DEFAULT_MAX_OUTGOING_MESSAGES,
            max_outgoing_bytes: DEFAULT_MAX_OUTGOING_BYTES,
            max_upstream_requests: crate::serve::DEFAULT_MAX_UPSTREAM_IN_FLIGHT,
        }
    }
}

/// `--front`: the API `serve` offers its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Front {
    /// The Codex app-server protocol (WebSocket, unix socket or stdio).
    Codex,
    /// The OpenAI Responses API (HTTP and server-sent events).
    Responses,
}

/// `--ws-auth` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WsAuthMode {
    /// A bearer token read from `--ws-token-file`.
    CapabilityToken,
}

/// Why the options could not be built (a usage or configuration error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeSetupError {
    /// `--listen` / auth.
    #[error(transparent)]
    Listen(#[from] crate::serve::ListenError),
    /// An `--allow-origin` value is not an origin.
    #[error(transparent)]
    Origin(#[from] crate::serve::BadOrigin),
    /// `--ws-auth capability-token` needs exactly one of `--ws-token-file`, `--ws-token-sha256`.
    #[error("--ws-auth capability-token needs exactly one of --ws-token-file FILE or --ws-token-sha256 HEX")]
    TokenSource,
    /// `--max-outgoing-messages`, `--max-outgoing-bytes` or `--max-upstream-requests` is zero
    /// (every client would be disconnected, or refused, at its first request).
    #[error("{flag} must be at least 1")]
    ZeroOutgoingLimit { flag: &'static str },
    /// The Responses front without a Responses backend.
    #[error("serve --front responses needs backend.kind \"responses\" in the configuration (the upstream Responses API, or `ctxbridge mock-model`)")]
    NotResponses,
    /// `serve.responses.passThroughAuth` with an engine on conversation threads.
    #[error("serve.responses.passThroughAuth with the context engine {engine:?} needs backend.threads \"chain\": an upstream conversation belongs to the key that made it, and ctxbridge makes and feeds the engine's conversations outside the client's requests")]
    PassThroughAuthWithConversations { engine: String },
    /// `serve.responses.passThroughAuth` beside a capability token.
    #[error("serve.responses.passThroughAuth and --ws-auth exclude each other: with pass-through, the client's Authorization is the upstream's key, checked upstream")]
    PassThroughAuthWithToken,
    /// The Responses backend cannot be built from its configuration.
    #[error(transparent)]
    ResponsesBackend(#[from] crate::backend::responses::ResponsesBackendConfigError),
    /// The backend is not Codex.
    #[error("serve needs backend.kind \"codex\" in the configuration (the upstream app-server)")]
    NotCodex,
    /// `backend.command` is empty.
    #[error("backend.command is empty")]
    EmptyCommand,
    /// The state store cannot be opened.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The store section is incomplete (`store.kind: "postgres"` without `store.url`).
    #[error(transparent)]
    StoreConfig(#[from] crate::app::AppError),
}

/// The capability token `--ws-auth` asks for (read from its file, or its digest), if any.
fn capability_token(args: &ServeArgs) -> Result<Option<CapabilityToken>, ServeSetupError> {
    Ok(
        match (&args.ws_auth, &args.ws_token_file, &args.ws_token_sha256) {
            (Some(WsAuthMode::CapabilityToken), Some(file), None) => {
                Some(CapabilityToken::from_file(file)?)
            }
            (Some(WsAuthMode::CapabilityToken), None, Some(digest)) => {
                Some(CapabilityToken::from_sha256_hex(digest)?)
            }
            (Some(WsAuthMode::CapabilityToken), _, _) => {
                return Err(ServeSetupError::TokenSource);
            }
            (None, _, _) => None,
        },
    )
}

/// The Responses front a configuration and the command line describe (`--front
/// responses`): its address and the front, running the configured engine on the configured
/// Responses backend.
pub async fn responses_front(
    config: &Config,
    args: &ServeArgs,
) -> Result<(SocketAddr, Arc<ResponsesFront>), ServeSetupError> {
    let addr = parse_http_listen(&args.listen)?;
    let auth = capability_token(args)?;
    let front_config = &config.serve.responses;
    if front_config.pass_through_auth {
        if auth.is_some() {
            return Err(ServeSetupError::PassThroughAuthWithToken);
        }
        // The upstream checks every request's key: exposure needs no token of the front's.
    } else {
        crate::serve::check_exposure(&ListenAddr::Ws(addr), auth.as_ref())?;
    }
    let BackendConfig::Responses(responses) = &config.backend else {
        return Err(ServeSetupError::NotResponses);
    };
    // A long-running front: a new thread takes a conversation made ahead of need, and each
    // lane (see `serve::lanes`) reaches the upstream over connections of its own.
    let upstream = Arc::new(
        ResponsesBackend::new(responses_backend_config(responses))?
            .with_spare_conversation()
            .with_connection_pools(crate::serve::lanes::per_core())?,
    );
    create_state_dir(config);
    let store: Arc<dyn StateStore> = open_store(&store_target(config)?)?;
    let app = open_with_backend(config, store, upstream.clone()).await;
    let engine = app.resolved.slot.engine_id.clone();
    let relays = !config.serve.engine_threads_for(&engine);
    if front_config.pass_through_auth
        && !relays
        && upstream.threads() == crate::backend::responses::ResponsesThreads::Conversation
    {
        return Err(ServeSetupError::PassThroughAuthWithConversations { engine });
    }
    if relays {
        tracing::info!(
            "serve: no context engine (legacy): the Responses front relays requests unchanged"
        );
    } else {
        tracing::info!(%engine, "serve: responses run the context engine");
    }
    let metrics = Arc::new(Registry::new());
    let harness = Arc::new(app.harness.with_metrics(metrics.clone()));
    let mode = FrontMode {
        relays,
        pass_through_auth: front_config.pass_through_auth,
        tool_output_timeout_secs: front_config.tool_output_timeout_secs,
    };
    Ok((
        addr,
        ResponsesFront::new(harness, upstream, auth, mode, metrics),
    ))
}

/// Creates the directory of the SQLite state file (a failure is logged: opening the store
/// then says what is wrong).
fn create_state_dir(config: &Config) {
    if let Some(parent) = config
        .store
        .path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        if let Err(error) = std::fs::create_dir_all(parent) {
            tracing::warn!(%error, dir = %parent.display(), "serve: cannot create the state directory");
        }
    }
}

/// The options a configuration and the command line describe. Sessions run the harness (the
/// selected engine on the shared upstream, [`EngineSessions`]) when an engine other than
/// `legacy` is selected or `serve.engineThreads` is `"all"`; otherwise they pass through.
pub async fn options(config: &Config, args: &ServeArgs) -> Result<ServeOptions, ServeSetupError> {
    let listen = ListenAddr::parse(&args.listen)?;
    let auth = capability_token(args)?;
    crate::serve::check_exposure(&listen, auth.as_ref())?;
    let origins = OriginPolicy::allowing(&args.allow_origins)?;
    for (flag, value) in [
        ("--max-outgoing-messages", args.max_outgoing_messages),
        ("--max-outgoing-bytes", args.max_outgoing_bytes),
        ("--max-upstream-requests", args.max_upstream_requests),
    ] {
        if value == 0 {
            return Err(ServeSetupError::ZeroOutgoingLimit { flag });
        }
    }
    let BackendConfig::Codex(codex) = &config.backend else {
        return Err(ServeSetupError::NotCodex);
    };
    let command = crate::app::codex_command(codex);
    if command.is_empty() && codex.url.is_none() {
        return Err(ServeSetupError::EmptyCommand);
    }
    let upstream = app_server_config(config, codex, command);
    create_state_dir(config);
    let store: Arc<dyn StateStore> = open_store(&store_target(config)?)?;
    let mut options = ServeOptions::new(listen, upstream);
    options.backend_url = codex.url.clone();
    options.auth = auth;
    options.origins = origins;
    options.max_message_bytes = args.max_message_bytes;
    options.max_upstream_in_flight = args.max_upstream_requests;
    options.outbound = OutboundLimits {
        max_messages: args.max_outgoing_messages,
        max_bytes: args.max_outgoing_bytes,
    };
    options.metrics_listen = args.metrics_listen;
    let slot = config.engine_slot();
    if config.serve.engine_threads_for(&slot.engine_id) {
        // The one Codex backend, on the shared upstream; served turns run under the
        // configured turn limits as `ctxbridge turn`'s do.
        let backend = Arc::new(CodexBackend::over(
            Arc::new(HubConnect::new(
                options.upstream_handle(),
                turn_limits(codex),
            )),
            "the Codex app-server behind ctxbridge serve",
        ));
        let app = open_with_backend(config, store.clone(), backend.clone()).await;
        tracing::info!(engine = %app.resolved.slot.engine_id, "serve: client threads run the context engine");
        let harness = app.harness.with_metrics(options.metrics.clone());
        // Sessions the retention sweep removes end with `session_end` on the engine.
        options.sweep_listener = Some(harness.sweep_listener());
        options.sessions = Arc::new(EngineSessions::new(Arc::new(harness), backend));
    }
    options.store = Some(store);
    Ok(options)
}
