//! The `ctxbridge` command line (SPEC §14).
//!
//! Every subcommand is one variant of [`Command`] plus one `async fn` taking the shared
//! [`CommandContext`] and its own arguments, returning the process exit code. Exit codes: 0 ok,
//! 1 runtime failure, 2 usage or configuration error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::cli_commands::*;
use crate::config::{Config, ConfigError};
use crate::doctor;
use crate::registry::EngineRegistry;

/// Everything went well.
pub const EXIT_OK: u8 = 0;
/// The command ran and failed (or found a problem, like `doctor`).
pub const EXIT_RUNTIME_FAILURE: u8 = 1;
/// Bad arguments or a bad configuration file.
pub const EXIT_USAGE: u8 = 2;

/// Bridges context engines into threaded agent backends.
#[derive(Debug, Parser)]
#[command(name = "ctxbridge", version, about)]
pub struct Cli {
    /// Configuration file (JSON5). Default: ./ctxbridge.json5 when it exists.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the selected context engine, quarantines (this run's and earlier runs') and
    /// host-capability checks; exits 1 when the engine cannot run on the configured backend or
    /// the state store is unusable.
    Doctor(DoctorArgs),
    /// Run one turn of a session (state persists between invocations).
    Turn(TurnArgs),
    /// Interactive session: one turn per line; `/compact` runs manual compaction.
    Chat(ChatArgs),
    /// Manual compaction of a session.
    Compact(CompactArgs),
    /// Scripted multi-turn session on the embedded mock backend with the sample engine.
    Demo(DemoArgs),
    /// Run the Responses-compatible mock model server on 127.0.0.1.
    MockModel(MockModelArgs),
    /// Measure projection cost, per-turn overhead and scale; writes CSV and SVG.
    Bench(crate::bench::BenchArgs),
    /// Serve the Codex app-server protocol in front of the configured Codex backend.
    Serve(crate::serve::command::ServeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {}

/// A command that could not do its job. Each variant knows its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error("{operation}: {message}")]
    Runtime {
        operation: &'static str,
        message: String,
    },
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Usage(_) => EXIT_USAGE,
            CliError::Runtime { .. } => EXIT_RUNTIME_FAILURE,
        }
    }
}

/// What every command gets: the global options.
#[derive(Debug, Clone)]
pub struct CommandContext {
    pub config_path: Option<PathBuf>,
}

impl CommandContext {
    /// Loads the configuration (commands that need none simply do not call this).
    pub fn load_config(&self) -> Result<Config, CliError> {
        Ok(Config::load(self.config_path.as_deref())?)
    }
}

/// The registry with the engines built into ctxbridge. Only legacy exists, and legacy needs no
/// registration: an id configured in `plugins.slots.contextEngine` that nothing registers is
/// quarantined when resolved (`resolve`, "not registered").
pub fn builtin_registry(config: &Config) -> EngineRegistry {
    crate::app::registry(config)
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<u8, CliError> {
    let context = CommandContext {
        config_path: cli.config,
    };
    match cli.command {
        Command::Doctor(args) => run_doctor(&context, args).await,
        Command::Turn(args) => run_turn(&context, args).await,
        Command::Chat(args) => run_chat(&context, args).await,
        Command::Compact(args) => run_compact(&context, args).await,
        Command::Demo(args) => run_demo(&context, args).await,
        Command::MockModel(args) => run_mock_model(&context, args).await,
        Command::Bench(args) => crate::bench::run_bench(&context, args).await,
        Command::Serve(args) => {
            let config = context.load_config()?;
            let options = crate::serve::command::options(&config, &args)
                .map_err(|e| CliError::Usage(crate::serve::error_chain(&e)))?;
            crate::serve::run(options)
                .await
                .map_err(|e| CliError::Runtime {
                    operation: "serve",
                    message: crate::serve::error_chain(&e),
                })?;
            Ok(EXIT_OK)
        }
    }
}

/// `ctxbridge doctor`: the engine report of this process plus what earlier runs left in the
/// configured state store (read only when the file exists). Exit 1 when the selected engine
/// cannot run on the backend or the state store exists and cannot be used.
async fn run_doctor(context: &CommandContext, _args: DoctorArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let registry = builtin_registry(&config);
    let host = config.backend.host_kind();
    let persisted = doctor::inspect_store(
        &config.store.path,
        &doctor::note_engine_ids(&config, &registry),
    );
    let report = doctor::report(&config, &registry, &host.capabilities(), host.label())
        .await
        .with_persisted_state(persisted);
    print!("{report}");
    Ok(if report.passes() {
        EXIT_OK
    } else {
        EXIT_RUNTIME_FAILURE
    })
}

/// Logs go to stderr; `CTXBRIDGE_LOG` (or `RUST_LOG`) sets the filter, default `warn`.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("CTXBRIDGE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    // A second initialisation (tests embedding the CLI) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .try_init();
}

/// The binary's entry point: parse, run on a tokio runtime, map errors to exit codes.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            });
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_RUNTIME_FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
