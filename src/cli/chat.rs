//! `ctxbridge chat --session KEY`: an interactive session, one turn per line; `/compact`
//! compacts, `/quit` leaves.

use std::io::{BufRead, Write};

use clap::Args;

use crate::cli::context::{CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};
use crate::cli::turn::reply_printer;
use crate::harness::TurnSpec;

/// `ctxbridge chat` arguments.
#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// The session key.
    #[arg(long)]
    pub session: String,
}

/// Reads lines from stdin until EOF or `/quit`; exit 1 when any turn or compaction failed.
pub async fn run(context: &CommandContext, args: ChatArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context.open_app(&config).await?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "ctxbridge chat — session {:?}; /compact, /quit",
        args.session
    );
    let mut code = EXIT_OK;
    for line in stdin.lock().lines() {
        let line = line.map_err(CliError::io("read stdin"))?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line {
            "/quit" | "/exit" => break,
            "/compact" => match app.harness.compact(&args.session).await {
                Ok(r) => {
                    let _ = writeln!(
                        out,
                        "[compacted: {}, native: {}]",
                        r.result.compacted, r.native_compaction
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "[compaction failed: {e}]");
                    code = EXIT_RUNTIME_FAILURE;
                }
            },
            prompt => {
                let (tx, printer) = reply_printer(true);
                let result = app
                    .harness
                    .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx))
                    .await;
                let _ = printer.await;
                match result {
                    Ok(r) => {
                        let _ = writeln!(
                            out,
                            "\n[{} · {} · {}]",
                            r.thread_action.as_str(),
                            r.reason,
                            r.mode
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "\n[turn failed: {e}]");
                        code = EXIT_RUNTIME_FAILURE;
                    }
                }
            }
        }
    }
    app.harness.shutdown().await;
    Ok(code)
}
