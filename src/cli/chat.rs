//! `ctxbridge chat --session KEY`: an interactive session, one turn per line; `/compact`
//! compacts, `/reset` resets the session, `/NAME ARGS` runs a command the context engine
//! registered (its reply is printed), `/quit` leaves. Any other line is a prompt.

use std::io::BufRead;

use clap::Args;

use crate::cli::context::{CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};
use crate::cli::turn::reply_printer;
use crate::contract::parse_command_line;
use crate::harness::TurnSpec;

/// `ctxbridge chat` arguments.
#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// The session key; must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
}

/// Reads lines from stdin until EOF or `/quit`; exit 1 when any turn or compaction failed or a
/// line was not UTF-8 (that line is reported and skipped, the session goes on).
pub async fn run(context: &CommandContext, args: ChatArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context.open_app(&config).await?;
    // `plugins.strict`: an engine that could not start stops the chat before its first turn.
    if config.plugins.strict == Some(true) {
        if let Some(record) = app.degradation() {
            app.harness.shutdown().await;
            return Err(CliError::degraded(&record));
        }
    }
    let mut stdin = std::io::stdin().lock();
    let out = context.stdout.clone();
    out.write(&format!(
        "ctxbridge chat — session {:?}; /compact, /reset, /quit{}\n",
        args.session,
        app.harness
            .commands()
            .iter()
            .map(|c| format!(", /{}", c.name))
            .collect::<String>()
    ));
    let mut code = EXIT_OK;
    let mut raw = Vec::new();
    let mut line_no = 0u64;
    loop {
        raw.clear();
        let n = stdin
            .read_until(b'\n', &mut raw)
            .map_err(CliError::io("read stdin"))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let Ok(line) = std::str::from_utf8(&raw) else {
            out.write(&format!(
                "[line {line_no} skipped: it is not valid UTF-8]\n"
            ));
            code = EXIT_RUNTIME_FAILURE;
            continue;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line {
            "/quit" | "/exit" => break,
            "/compact" => match app.harness.compact(&args.session).await {
                Ok(r) => {
                    out.write(&format!(
                        "[compacted: {}, native: {}]\n",
                        r.result.compacted, r.native_compaction
                    ));
                }
                Err(e) => {
                    out.write(&format!("[compaction failed: {e}]\n"));
                    code = EXIT_RUNTIME_FAILURE;
                }
            },
            "/reset" => match app.harness.reset_session(&args.session).await {
                Ok(r) => out.write(&format!(
                    "[reset: {} messages ended; next session {}]\n",
                    r.message_count, r.next_session_id
                )),
                Err(e) => {
                    out.write(&format!("[reset failed: {e}]\n"));
                    code = EXIT_RUNTIME_FAILURE;
                }
            },
            command
                if parse_command_line(command).is_some_and(|(name, _)| {
                    app.harness.commands().iter().any(|c| c.name == name)
                }) =>
            {
                let Some((name, cmd_args)) = parse_command_line(command) else {
                    continue;
                };
                match app.harness.run_command(&args.session, name, cmd_args).await {
                    Ok(reply) => {
                        out.write(&format!("{}\n", reply.display()));
                        if reply.is_error() {
                            code = EXIT_RUNTIME_FAILURE;
                        }
                    }
                    Err(e) => {
                        out.write(&format!("[/{name} failed: {e}]\n"));
                        code = EXIT_RUNTIME_FAILURE;
                    }
                }
            }
            prompt => {
                let (tx, printer) = reply_printer(true, out.clone());
                let result = app
                    .harness
                    .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx))
                    .await;
                let _ = printer.await;
                match result {
                    Ok(r) => {
                        out.write(&format!(
                            "\n[{} · {} · {}]\n",
                            r.thread_action.as_str(),
                            r.reason,
                            r.mode
                        ));
                    }
                    Err(e) => {
                        out.write(&format!("\n[turn failed: {e}]\n"));
                        code = EXIT_RUNTIME_FAILURE;
                    }
                }
            }
        }
    }
    app.harness.shutdown().await;
    Ok(code)
}
