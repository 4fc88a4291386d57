//! `ctxbridge serve --listen URL`: ctxbridge as a Codex app-server in front of the configured
//! Codex backend (docs/serve.md#the-serve-command). The proxy itself lives in [`crate::serve`]; this file only turns
//! the command line and the configuration into its options and maps its errors to exit codes.

use crate::cli::context::{errln, CliError, CommandContext, EXIT_OK};
use crate::serve::command::{options, responses_front, Front};
use crate::util::error_chain;

pub use crate::serve::command::ServeArgs;

/// Serves until SIGINT/SIGTERM (or, on `stdio://`, until standard input closes).
pub async fn run(context: &CommandContext, args: ServeArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    // A selected engine nobody registered is a configuration error, as for `turn`.
    config.check_selected_engine(
        &crate::app::registry(&config).registered_ids(),
        context.config_file().map(|f| f.path).as_deref(),
    )?;
    if args.front == Front::Responses {
        return run_responses_front(&config, &args).await;
    }
    // A refused listen address or auth setting is a usage error (exit 2), like Codex's own.
    let options = options(&config, &args)
        .await
        .map_err(|e| CliError::Usage(error_chain(&e)))?;
    // `plugins.strict`: an engine that could not start stops serve from starting.
    if config.plugins.strict == Some(true) {
        if let Some(record) = options.sessions.degradation() {
            options.sessions.shutdown().await;
            return Err(CliError::degraded(&record));
        }
    }
    // Sweeps idle state while serving; stops when serving ends.
    let _sweeper = options.store.clone().and_then(|store| {
        crate::app::retention_sweeper_with(&config, store, options.sweep_listener.clone())
    });
    // On stderr: on `stdio://` stdout is the protocol.
    crate::serve::run_announced(options, |handle| errln!("{}", handle.listening_line()))
        .await
        .map_err(|source| CliError::Serve { source })?;
    Ok(EXIT_OK)
}

/// `serve --front responses`: the Responses API on `--listen http://IP:PORT` until
/// SIGINT/SIGTERM.
async fn run_responses_front(
    config: &crate::config::Config,
    args: &ServeArgs,
) -> Result<u8, CliError> {
    let (addr, front) = responses_front(config, args)
        .await
        .map_err(|e| CliError::Usage(error_chain(&e)))?;
    if config.plugins.strict == Some(true) {
        if let Some(record) = front.degradation() {
            return Err(CliError::degraded(&record));
        }
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| CliError::Io {
            operation: "serve: binding the Responses front's --listen address",
            source,
        })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let auth = if config.serve.responses.pass_through_auth {
        "the client's Authorization, passed on to the upstream"
    } else if args.ws_auth.is_some() {
        "capability token (Authorization: Bearer)"
    } else {
        "none (loopback only)"
    };
    let serving = if front.relays() {
        "relaying unchanged: no context engine"
    } else {
        "each response a turn of the context engine"
    };
    errln!("ctxbridge serve: Responses API on http://{bound}/v1 (auth: {auth}; {serving})");
    let _sweeper =
        crate::app::retention_sweeper_with(config, front.store(), Some(front.sweep_listener()));
    front
        .serve(listener, crate::serve::shutdown_signal())
        .await
        .map_err(|source| CliError::Io {
            operation: "serve: the Responses front",
            source,
        })?;
    front.shutdown().await;
    Ok(EXIT_OK)
}
