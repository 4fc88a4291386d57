//! What every command shares: the exit codes, the command context (the global options) and
//! [`CliError`], the error a command fails with, which keeps the error it came from as its source.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ctxbridge_mock_model::MockModelError;

use crate::app::{self, App, AppError, EngineConfigError};
#[cfg(feature = "bench")]
use crate::bench::BenchError;
use crate::config::discover::{self, ConfigFile};
use crate::config::{Config, ConfigError};
use crate::harness::HarnessError;
use crate::store::StoreError;

/// Everything went well.
pub const EXIT_OK: u8 = 0;
/// The command ran and failed (or found a problem, like `doctor`).
pub const EXIT_RUNTIME_FAILURE: u8 = 1;
/// Bad arguments or a bad configuration file.
pub const EXIT_USAGE: u8 = 2;
/// Interrupted by SIGINT (Ctrl-C) mid-turn: 128 + 2.
pub const EXIT_SIGINT: u8 = 130;
/// The output was lost: stdout was closed before the reply was written (128 + SIGPIPE).
pub const EXIT_OUTPUT_LOST: u8 = 141;
/// Interrupted by SIGTERM mid-turn: 128 + 15.
pub const EXIT_SIGTERM: u8 = 143;

/// A signal that interrupts a running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT (Ctrl-C).
    Sigint,
    /// SIGTERM.
    Sigterm,
}

impl Interrupt {
    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            Interrupt::Sigint => "SIGINT",
            Interrupt::Sigterm => "SIGTERM",
        }
    }

    /// The exit code for it: 130 or 143.
    pub fn exit_code(self) -> u8 {
        match self {
            Interrupt::Sigint => EXIT_SIGINT,
            Interrupt::Sigterm => EXIT_SIGTERM,
        }
    }
}

/// SIGINT and SIGTERM, caught from [`Signals::install`] on: a signal then no longer ends the
/// process by its default action but is awaited with [`Signals::next`]. Where a handler cannot
/// be installed, that signal keeps its default action.
pub struct Signals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers now (must run inside the tokio runtime).
    pub fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next SIGINT or SIGTERM.
    pub async fn next(&mut self) -> Interrupt {
        #[cfg(unix)]
        {
            async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = recv(self.term.as_mut()) => Interrupt::Sigterm,
                () = recv(self.int.as_mut()) => Interrupt::Sigint,
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => Interrupt::Sigint,
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM (the handlers are installed on the first poll).
pub async fn interrupted() -> Interrupt {
    Signals::install().next().await
}

/// A command that could not do its job. Each variant knows its exit code; the runtime failures
/// name the operation and keep the underlying error as their source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The configuration file could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The command line asks for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// The selected engine rejected its configuration (`plugins.entries.<id>.config`).
    #[error("{source}")]
    EngineConfig {
        #[source]
        source: EngineConfigError,
    },
    /// The application (store, backend, engine) could not be assembled.
    #[error("open: {source}")]
    Open {
        #[source]
        source: AppError,
    },
    /// A turn or a compaction failed.
    #[error("{operation}: {source}")]
    Harness {
        operation: &'static str,
        #[source]
        source: Box<HarnessError>,
    },
    /// The state store failed.
    #[error("{operation}: {source}")]
    Store {
        operation: &'static str,
        #[source]
        source: StoreError,
    },
    /// A value could not be turned into JSON.
    #[error("{operation}: {source}")]
    Json {
        operation: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// Reading the terminal or creating a scratch directory failed.
    #[error("{operation}: {source}")]
    Io {
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The mock model server failed.
    #[error("mock-model: {source}")]
    MockModel {
        #[source]
        source: MockModelError,
    },
    /// A benchmark could not run.
    #[cfg(feature = "bench")]
    #[error("bench: {source}")]
    Bench {
        #[source]
        source: Box<BenchError>,
    },
    /// `serve` failed while running.
    #[error("serve: {source}")]
    Serve {
        #[source]
        source: crate::serve::ServeError,
    },
    /// `reset` or `compact` named a session no turn has run on.
    #[error("{operation}: no session {session:?} in the state store {store}: no turn has run on it (check the key; `ctxbridge doctor` counts the stored sessions)")]
    UnknownSession {
        operation: &'static str,
        session: String,
        store: String,
    },
    /// `plugins.strict` (or `--strict`): the selected engine is quarantined, and `legacy` is
    /// not to answer in its place.
    #[error("strict: context engine \"{engine}\" is quarantined (failed during {operation}: {error}); not falling back to legacy")]
    Degraded {
        engine: String,
        operation: String,
        error: String,
    },
}

impl CliError {
    /// The process exit code for this error: usage and configuration errors exit
    /// [`EXIT_USAGE`], everything else [`EXIT_RUNTIME_FAILURE`].
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Usage(_) | CliError::EngineConfig { .. } => EXIT_USAGE,
            CliError::Open { .. }
            | CliError::Harness { .. }
            | CliError::Store { .. }
            | CliError::Json { .. }
            | CliError::Io { .. }
            | CliError::MockModel { .. }
            | CliError::Serve { .. }
            | CliError::Degraded { .. }
            | CliError::UnknownSession { .. } => EXIT_RUNTIME_FAILURE,
            #[cfg(feature = "bench")]
            CliError::Bench { .. } => EXIT_RUNTIME_FAILURE,
        }
    }

    /// The [`CliError::Degraded`] of a quarantine.
    pub fn degraded(record: &crate::quarantine::QuarantineRecord) -> CliError {
        CliError::Degraded {
            engine: record.engine_id.clone(),
            operation: record.operation.as_str().to_owned(),
            error: record.reason.clone(),
        }
    }

    /// Maps a harness error of `operation`.
    pub fn harness(operation: &'static str) -> impl FnOnce(HarnessError) -> CliError {
        move |source| CliError::Harness {
            operation,
            source: Box::new(source),
        }
    }

    /// Maps a JSON serialization error of `operation`.
    pub fn json(operation: &'static str) -> impl FnOnce(serde_json::Error) -> CliError {
        move |source| CliError::Json { operation, source }
    }

    /// Maps an I/O error of `operation`.
    pub fn io(operation: &'static str) -> impl FnOnce(std::io::Error) -> CliError {
        move |source| CliError::Io { operation, source }
    }

    /// Maps a state-store error of `operation`.
    pub fn store(operation: &'static str) -> impl FnOnce(StoreError) -> CliError {
        move |source| CliError::Store { operation, source }
    }
}

/// What every command gets: the global options.
#[derive(Debug, Clone)]
pub struct CommandContext {
    /// `--config PATH`, when given.
    pub config_path: Option<PathBuf>,
    /// Where the command's output goes.
    pub(crate) stdout: Stdout,
    /// The configuration file, found once per command (see [`CommandContext::config_file`]).
    pub(crate) found_config: std::sync::OnceLock<Option<ConfigFile>>,
}

/// Where a command's output goes: stdout, remembering whether it was closed under us (a
/// reader that left — `ctxbridge demo | head -1` — is not a panic, but the exit code must say
/// the output was lost: [`EXIT_OUTPUT_LOST`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stdout {
    lost: Arc<AtomicBool>,
}

impl Stdout {
    /// Writes `text` (and flushes); a failure marks the output lost.
    pub(crate) fn write(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            self.lost.store(true, Ordering::Relaxed);
        }
    }

    /// Writes `text` and a newline.
    pub(crate) fn line(&self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    /// Whether any write failed.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

/// `println!` onto a [`Stdout`]: a closed stdout is remembered, not a panic.
macro_rules! outln {
    ($out:expr) => {
        $out.line("")
    };
    ($out:expr, $($arg:tt)*) => {
        $out.line(&format!($($arg)*))
    };
}
pub(crate) use outln;

/// `eprintln!` that cannot panic: a closed stderr loses the message, nothing else.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use errln;

impl CommandContext {
    /// Loads the configuration (commands that need none simply do not call this).
    pub fn load_config(&self) -> Result<Config, CliError> {
        match self.config_file() {
            Some(file) => Ok(Config::load(Some(&file.path))?),
            None => Ok(Config::default()),
        }
    }

    /// The configuration file this command reads: `--config`, `CTXBRIDGE_CONFIG`, the nearest
    /// `ctxbridge.json5` upward, the user's (see [`crate::config::discover`]); `None`: defaults.
    pub fn config_file(&self) -> Option<ConfigFile> {
        self.found_config
            .get_or_init(|| discover::find(self.config_path.as_deref()))
            .clone()
    }

    /// For commands that run without a configuration (`demo`, `mock-model`, `bench`): a file
    /// the user named (`--config`, `CTXBRIDGE_CONFIG`) must still exist and be valid.
    pub fn check_named_config(&self) -> Result<(), CliError> {
        if let Some(file) = self.config_file().filter(|f| f.origin.is_explicit()) {
            Config::load(Some(&file.path))?;
        }
        Ok(())
    }

    /// Opens the application `config` describes: store, backend and the selected engine.
    /// A selected engine that rejects its configuration, or that no engine is registered
    /// under, is a configuration error (exit 2): nothing runs on legacy in its place, since the
    /// fix is in the config file.
    pub async fn open_app(&self, config: &Config) -> Result<App, CliError> {
        config.check_selected_engine(
            &app::registry(config).registered_ids(),
            self.config_file().map(|f| f.path).as_deref(),
        )?;
        let app = app::open(config)
            .await
            .map_err(|source| CliError::Open { source })?;
        if let Some(error) = app.selected_config_error().cloned() {
            app.harness.shutdown().await;
            return Err(CliError::EngineConfig { source: error });
        }
        Ok(app)
    }

    /// [`CommandContext::open_app`] for `operation` on `session`, which a turn must have run on:
    /// a session the store has no trace of is [`CliError::UnknownSession`] (the app is shut
    /// down again), not an operation on nothing.
    pub async fn open_app_on_session(
        &self,
        config: &Config,
        operation: &'static str,
        session: &str,
    ) -> Result<App, CliError> {
        let app = self.open_app(config).await?;
        let known = app.harness.has_session(session);
        if !matches!(known, Ok(true)) {
            app.harness.shutdown().await;
        }
        match known {
            Ok(true) => Ok(app),
            Ok(false) => Err(CliError::UnknownSession {
                operation,
                session: session.to_string(),
                store: app.store_location(),
            }),
            Err(error) => Err(CliError::harness(operation)(error)),
        }
    }
}

/// The `--session` value parser: a key that is empty or only blanks names no session (both
/// are refused alike, with the same message).
pub fn session_key(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err("a session key must not be empty or blank".to_owned());
    }
    Ok(value.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// Configuration and usage errors exit 2, runtime failures exit 1, and a runtime failure
    /// names its operation and keeps the error it came from as its source.
    #[test]
    fn exit_codes_and_sources() {
        let config = Config::parse("{ colour: 1 }", "c.json5").unwrap_err();
        assert_eq!(CliError::from(config).exit_code(), EXIT_USAGE);
        assert_eq!(CliError::Usage("bad".into()).exit_code(), EXIT_USAGE);
        let io = CliError::io("read stdin")(std::io::Error::other("closed"));
        assert_eq!(io.exit_code(), EXIT_RUNTIME_FAILURE);
        assert_eq!(io.to_string(), "read stdin: closed");
        assert_eq!(io.source().unwrap().to_string(), "closed");
    }
}
