//! `ctxbridge turn --session KEY [--json] PROMPT`: one turn of a session; state persists in the
//! store between invocations.

use std::io::Write;

use clap::Args;
use tokio::sync::mpsc;

use crate::backend::TurnEvent;
use crate::cli::context::{CliError, CommandContext, EXIT_OK};
use crate::harness::TurnSpec;

/// `ctxbridge turn` arguments.
#[derive(Debug, Clone, Args)]
pub struct TurnArgs {
    /// The session key (state persists between invocations).
    #[arg(long)]
    pub session: String,
    /// Print one JSON object instead of the reply.
    #[arg(long)]
    pub json: bool,
    /// The user prompt.
    #[arg(required = true)]
    pub prompt: Vec<String>,
}

/// A channel for a turn's events and the task that streams its reply text to stdout (or only
/// drains the events when `print` is false, e.g. under `--json`).
pub(crate) fn reply_printer(print: bool) -> (mpsc::Sender<TurnEvent>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<TurnEvent>(256);
    let task = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(ev) = rx.recv().await {
            if let (true, TurnEvent::TextDelta(d)) = (print, ev) {
                // A closed stdout (a pipe whose reader left) must not fail the turn.
                let _ = out.write_all(d.as_bytes());
                let _ = out.flush();
            }
        }
    });
    (tx, task)
}

/// Runs one turn and prints the streamed reply (or, under `--json`, the turn report).
pub async fn run(context: &CommandContext, args: TurnArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context.open_app(&config).await?;
    let prompt = args.prompt.join(" ");
    let (tx, printer) = reply_printer(!args.json);
    let result = app
        .harness
        .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx))
        .await;
    let _ = printer.await;
    app.harness.shutdown().await;
    let report = result.map_err(CliError::harness("turn"))?;
    if args.json {
        let json = serde_json::to_string(&report).map_err(CliError::json("turn"))?;
        println!("{json}");
    } else {
        println!();
    }
    Ok(EXIT_OK)
}
