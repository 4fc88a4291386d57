//! `ctxbridge turn --session KEY [--json] PROMPT`: one turn of a session; state persists in the
//! store between invocations.

use clap::Args;
use tokio::sync::mpsc;

use crate::backend::TurnEvent;
use crate::cli::context::{
    interrupted, CliError, CommandContext, Stdout, EXIT_OK, EXIT_OUTPUT_LOST, EXIT_RUNTIME_FAILURE,
};
use crate::harness::{HarnessError, TurnSpec};

/// `ctxbridge turn` arguments.
#[derive(Debug, Clone, Args)]
pub struct TurnArgs {
    /// The session key (state persists between invocations); must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
    /// Print one JSON object instead of the reply.
    #[arg(long)]
    pub json: bool,
    /// Fail (exit 1) instead of letting `legacy` answer for a selected engine that is
    /// quarantined (as `plugins.strict: true`): before the turn when it cannot even start,
    /// after it when it failed during the turn (the answered turn is kept and printed).
    #[arg(long)]
    pub strict: bool,
    /// The user prompt.
    #[arg(required = true)]
    pub prompt: Vec<String>,
}

/// A channel for a turn's events and the task that streams its reply text to `out` (or only
/// drains the events when `print` is false, e.g. under `--json`).
pub(crate) fn reply_printer(
    print: bool,
    out: Stdout,
) -> (mpsc::Sender<TurnEvent>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<TurnEvent>(256);
    let task = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if let (true, TurnEvent::TextDelta(d)) = (print, ev) {
                out.write(&d);
            }
        }
    });
    (tx, task)
}

/// What kind of failure a turn's error is, for `turn --json` (read from the error's variant).
fn error_kind(error: &CliError) -> &'static str {
    match error {
        CliError::Config(_) | CliError::EngineConfig { .. } => "config",
        CliError::Usage(_) => "usage",
        CliError::Open { .. } | CliError::Store { .. } => "store",
        CliError::Harness { source, .. } => match source.as_ref() {
            HarnessError::Backend { .. } => "backend",
            HarnessError::Engine { .. } => "engine",
            HarnessError::SessionBusy(_) => "session_busy",
            HarnessError::HostRequirement(_) => "host_requirement",
            HarnessError::NotRecorded { .. } => "not_recorded",
            HarnessError::Store { .. } | HarnessError::Binding { .. } => "store",
            _ => "turn",
        },
        _ => "turn",
    }
}

/// Under `--json`, a failed turn still prints one JSON object on stdout:
/// `{"error": {"kind", "message", "session", "reply"?}}` (the exit code stays the error's).
fn print_json_error(out: &Stdout, session: &str, kind: &str, message: &str, reply: Option<&str>) {
    let mut error = serde_json::json!({"kind": kind, "message": message, "session": session});
    if let Some(reply) = reply {
        error["reply"] = serde_json::Value::String(reply.to_owned());
    }
    out.write(&format!("{}\n", serde_json::json!({ "error": error })));
}

/// Runs one turn and prints the streamed reply (or, under `--json`, the turn report, or an
/// `{"error": …}` object when it failed). SIGINT / SIGTERM cancel the turn (the backend turn
/// is abandoned, nothing is recorded unless the turn was already recorded, the session lease
/// is released) and exit 130 / 143.
pub async fn run(context: &CommandContext, args: TurnArgs) -> Result<u8, CliError> {
    let (json, session) = (args.json, args.session.clone());
    match run_turn(context, args).await {
        Err(error) if json => {
            print_json_error(
                &context.stdout,
                &session,
                error_kind(&error),
                &error.to_string(),
                None,
            );
            Err(error)
        }
        other => other,
    }
}

async fn run_turn(context: &CommandContext, args: TurnArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context.open_app(&config).await?;
    let strict = args.strict || config.plugins.strict == Some(true);
    if strict {
        if let Some(record) = app.degradation() {
            app.harness.shutdown().await;
            let message = CliError::degraded(&record).to_string();
            if args.json {
                print_json_error(&context.stdout, &args.session, "degraded", &message, None);
            }
            eprintln!("error: {message}");
            return Ok(EXIT_RUNTIME_FAILURE);
        }
    }
    let prompt = args.prompt.join(" ");
    let out = context.stdout.clone();
    let (tx, printer) = reply_printer(!args.json, out.clone());
    let turn = app
        .harness
        .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx));
    let result = tokio::select! {
        result = turn => result,
        signal = interrupted() => {
            // The turn future is dropped: its session lease is released on the way out.
            let _ = printer.await;
            app.harness.shutdown().await;
            eprintln!(
                "\nctxbridge: interrupted by {}: the turn on session {:?} was cancelled and the session released; a turn that was not yet recorded left no trace in the transcript",
                signal.name(),
                args.session
            );
            return Ok(signal.exit_code());
        }
    };
    let _ = printer.await;
    app.harness.shutdown().await;
    let report = match result {
        Ok(report) => report,
        Err(HarnessError::NotRecorded {
            session,
            thread_id,
            reply,
            source,
        }) => {
            // Streamed already in text mode; under --json the reply is only in the error.
            let error = HarnessError::NotRecorded {
                session,
                thread_id,
                reply: reply.clone(),
                source,
            };
            if args.json {
                print_json_error(
                    &out,
                    &args.session,
                    "not_recorded",
                    &format!("turn: {error}"),
                    Some(&reply),
                );
                eprintln!("error: turn: {error}\nreply: {reply}");
            } else {
                out.write("\n");
                eprintln!("error: turn: {error}");
            }
            return Ok(EXIT_RUNTIME_FAILURE);
        }
        Err(e) => return Err(CliError::harness("turn")(e)),
    };
    let degraded = app.degradation();
    let degraded_value = degraded
        .as_ref()
        .map(crate::quarantine::QuarantineRecord::degraded_json);
    if args.json {
        /// The report, and after its fields the degradation when there is one.
        #[derive(serde::Serialize)]
        struct Printed<'a> {
            #[serde(flatten)]
            report: &'a crate::harness::TurnReport,
            #[serde(skip_serializing_if = "Option::is_none")]
            degraded: Option<&'a serde_json::Value>,
        }
        let printed = Printed {
            report: &report,
            degraded: degraded_value.as_ref(),
        };
        let json = serde_json::to_string(&printed).map_err(CliError::json("turn"))?;
        out.write(&format!("{json}\n"));
    } else {
        out.write("\n");
    }
    if let (true, Some(record)) = (strict, &degraded) {
        eprintln!(
            "error: {} (the turn it failed in was answered by legacy and recorded)",
            CliError::degraded(record)
        );
        return Ok(EXIT_RUNTIME_FAILURE);
    }
    if out.lost() {
        eprintln!(
            "ctxbridge: stdout was closed: the turn on session {:?} was recorded, but its output was lost",
            args.session
        );
        return Ok(EXIT_OUTPUT_LOST);
    }
    Ok(EXIT_OK)
}
