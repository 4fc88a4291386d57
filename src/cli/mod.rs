//! The `ctxbridge` command line (docs/config.md#configuration-reference): parsing and dispatch.
//!
//! Every subcommand is one variant of [`Command`] and one file here with its arguments and a
//! `run` taking the shared [`CommandContext`] and those arguments, returning the process exit
//! code. [`context`] holds what the commands share: the exit codes (0 ok, 1 runtime failure,
//! 2 usage or configuration error), the context and [`CliError`]. Commands depend on
//! `context`, never on this dispatcher.

#[cfg(feature = "bench")]
pub mod bench;
pub mod chat;
pub mod command;
pub mod compact;
pub mod context;
pub mod demo;
pub mod doctor;
pub mod generate;
pub mod mock_model;
pub mod reset;
pub mod serve;
pub mod turn;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::context::{
    errln, CliError, CommandContext, Stdout, EXIT_OK, EXIT_OUTPUT_LOST, EXIT_RUNTIME_FAILURE,
    EXIT_USAGE,
};

/// Bridges context engines into threaded agent backends.
#[derive(Debug, Parser)]
#[command(
    name = "ctxbridge",
    version,
    about,
    // Our own `help` subcommand (below), so that `ctxbridge help --help` works too.
    disable_help_subcommand = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Configuration file (JSON5).
    ///
    /// Default: $CTXBRIDGE_CONFIG, else the nearest ctxbridge.json5 up from the working
    /// directory, else the user configuration directory's ctxbridge/ctxbridge.json5.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the engine, backend and state store; exit 1 on a problem.
    ///
    /// Shows the selected context engine, quarantines (this run's and earlier runs'),
    /// host-capability checks and, on the Codex backend, the Codex home, binary and version.
    /// Exits 1 when the engine cannot run on the configured backend, is degraded to legacy by
    /// a quarantine, or the state store is unusable.
    Doctor(doctor::DoctorArgs),
    /// Run one turn of a session (state persists between invocations).
    Turn(turn::TurnArgs),
    /// Interactive session: one turn per line.
    ///
    /// `/help` lists the commands: `/compact` runs manual compaction, `/reset` resets the
    /// session, `/NAME ARGS` runs a command the context engine registered, `/quit` leaves; a
    /// line starting with `//` is sent as a prompt with one `/` removed. On a terminal the line
    /// can be edited and earlier lines recalled. Exits 0 when every line went through, 1 when a
    /// turn or a compaction failed or a line was skipped (not UTF-8, or an unknown `/command`:
    /// reported, and the session went on), so a script sees it; 130 on Ctrl-C.
    Chat(chat::ChatArgs),
    /// Reset a session (fires `before_reset` and `session_end`; the next turn starts anew).
    Reset(reset::ResetArgs),
    /// Run a command the context engine registered (`commands/call`) and print its reply.
    Command(command::CommandArgs),
    /// Manual compaction of a session.
    Compact(compact::CompactArgs),
    /// Scripted multi-turn session on the embedded mock backend with the sample engine.
    Demo(demo::DemoArgs),
    /// Run the Responses-compatible mock model server on 127.0.0.1.
    MockModel(mock_model::MockModelArgs),
    /// Measure projection cost, per-turn overhead and scale; writes CSV, SVG and PNG.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Serve the Codex app-server protocol in front of the configured Codex backend.
    ///
    /// See docs/serve.md.
    Serve(serve::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    ///
    /// For example `ctxbridge completions bash > ~/.local/share/bash-completion/completions/ctxbridge`.
    Completions(generate::CompletionsArgs),
    /// Print the manual page (roff) on stdout, e.g. `ctxbridge man | man -l -`.
    Man(generate::ManArgs),
    /// Print the help of ctxbridge or of one of its subcommands.
    Help(generate::HelpArgs),
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<u8, CliError> {
    let context = CommandContext {
        config_path: cli.config,
        stdout: Stdout::default(),
        found_config: std::sync::OnceLock::new(),
    };
    let runs_without_config = match &cli.command {
        Command::Demo(_) | Command::MockModel(_) => true,
        Command::Completions(_) | Command::Man(_) | Command::Help(_) => false,
        #[cfg(feature = "bench")]
        Command::Bench(_) => true,
        _ => false,
    };
    if runs_without_config {
        context.check_named_config()?;
    }
    let code = match cli.command {
        Command::Doctor(args) => doctor::run(&context, args).await,
        Command::Turn(args) => turn::run(&context, args).await,
        Command::Chat(args) => chat::run(&context, args).await,
        Command::Reset(args) => reset::run(&context, args).await,
        Command::Command(args) => command::run(&context, args).await,
        Command::Compact(args) => compact::run(&context, args).await,
        Command::Demo(args) => demo::run(&context, args).await,
        Command::MockModel(args) => mock_model::run(&context, args).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(&context, args).await,
        Command::Serve(args) => serve::run(&context, args).await,
        Command::Completions(args) => generate::completions(&context, args),
        Command::Man(args) => generate::man(&context, args),
        Command::Help(args) => generate::help(&context, args),
    }?;
    if code == EXIT_OK && context.stdout.lost() {
        errln!("ctxbridge: stdout was closed: the output was lost");
        return Ok(EXIT_OUTPUT_LOST);
    }
    Ok(code)
}

/// The log filter: `CTXBRIDGE_LOG`, else `RUST_LOG`, else `warn`. A variable that is set but
/// is no filter is an error naming it (never silently replaced by the default).
fn log_filter() -> Result<tracing_subscriber::EnvFilter, String> {
    for name in ["CTXBRIDGE_LOG", "RUST_LOG"] {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let value = value.to_string_lossy();
        return tracing_subscriber::EnvFilter::builder()
            .parse(value.as_ref())
            .map_err(|error| {
                format!(
                    "{name}={value:?} is not a log filter: {error} (a level such as `info` or `debug`, or directives such as `ctxbridge=debug,warn`)"
                )
            });
    }
    Ok(tracing_subscriber::EnvFilter::new("warn"))
}

/// Logs go to stderr, timestamped, filtered by [`log_filter`].
fn init_tracing(filter: tracing_subscriber::EnvFilter) {
    // A second initialisation (tests embedding the CLI) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
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
    match log_filter() {
        Ok(filter) => init_tracing(filter),
        Err(message) => {
            errln!("error: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            errln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_RUNTIME_FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            errln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
