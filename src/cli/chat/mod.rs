//! `ctxbridge chat --session KEY`: an interactive session, one turn per line. `/help` lists
//! the commands ([`line`]): `/compact`, `/reset`, `/quit`, and `/NAME ARGS` for a command the
//! context engine registered (its reply is printed); an unknown `/word` is refused, never sent
//! to the model. Any other line is a prompt. On a terminal the lines are edited with a line
//! editor ([`input`]).

mod input;
mod line;

use clap::Args;

use crate::cli::context::{
    errln, CliError, CommandContext, Interrupt, EXIT_OK, EXIT_RUNTIME_FAILURE,
};
use crate::cli::turn::reply_printer;
use crate::harness::TurnSpec;

use self::input::{Input, LineReader};
use self::line::{classify, help_text, ChatLine};

/// The history file of `chat` on a terminal, in the state directory.
const HISTORY_FILE: &str = "chat-history";

/// `ctxbridge chat` arguments.
#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// The session key; must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
}

/// Reads lines until the input ends or `/quit`; exit 1 when any turn, compaction or command
/// failed or a line was skipped (not UTF-8, or an unknown `/command`: reported, and the session
/// goes on); 130 on Ctrl-C (a turn it interrupts is cancelled as `turn` cancels one), 143 on
/// SIGTERM.
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
    // The signal handlers are in place before the banner: from then on Ctrl-C ends the chat
    // through [`finish`], never by the signal's default action.
    let signals = crate::cli::context::Signals::install();
    let mut reader = match LineReader::start(config.state_dir().join(HISTORY_FILE)) {
        Ok(reader) => reader,
        Err(error) => {
            app.harness.shutdown().await;
            return Err(CliError::io("read stdin")(error));
        }
    };
    let out = context.stdout.clone();
    let commands = app.harness.commands();
    let command_names: Vec<String> = commands.iter().map(|c| c.name.clone()).collect();
    out.write(&format!(
        "ctxbridge chat — session {:?}; /help, /compact, /reset, /quit{}\n",
        args.session,
        commands
            .iter()
            .map(|c| format!(", /{}", c.name))
            .collect::<String>()
    ));
    let mut code = EXIT_OK;
    let mut line_no = 0u64;
    let mut signals = signals;
    loop {
        let input = tokio::select! {
            input = reader.next() => input,
            signal = signals.next() => return finish(&app, signal, None).await,
        };
        let line = match input {
            Input::Line(line) => line,
            Input::End => break,
            Input::Interrupted => return finish(&app, Interrupt::Sigint, None).await,
            Input::Failed(error) => {
                app.harness.shutdown().await;
                return Err(CliError::io("read stdin")(error));
            }
            Input::NotUtf8 => {
                line_no += 1;
                out.write(&format!(
                    "[line {line_no} skipped: it is not valid UTF-8]\n"
                ));
                code = EXIT_RUNTIME_FAILURE;
                continue;
            }
        };
        line_no += 1;
        match classify(&line, &command_names) {
            ChatLine::Empty => {}
            ChatLine::Quit => break,
            ChatLine::Help => out.write(&help_text(&commands)),
            ChatLine::Unknown { name } => {
                out.write(&format!(
                    "[line {line_no}: /{name} is no command, and was not sent to the model; /help lists the commands, and a line starting with // is sent as a prompt]\n"
                ));
                code = EXIT_RUNTIME_FAILURE;
            }
            ChatLine::Compact => match app.harness.compact(&args.session).await {
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
            ChatLine::Reset => match app.harness.reset_session(&args.session).await {
                Ok(r) => out.write(&format!(
                    "[reset: {} messages ended; next session {}]\n",
                    r.message_count, r.next_session_id
                )),
                Err(e) => {
                    out.write(&format!("[reset failed: {e}]\n"));
                    code = EXIT_RUNTIME_FAILURE;
                }
            },
            ChatLine::EngineCommand {
                name,
                args: cmd_args,
            } => match app.harness.run_command(&args.session, name, cmd_args).await {
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
            },
            ChatLine::Prompt(prompt) => {
                let (tx, printer) = reply_printer(true, out.clone());
                let turn = app
                    .harness
                    .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx));
                let result = tokio::select! {
                    result = turn => result,
                    // The turn future is dropped: its session lease is released on the way out.
                    signal = signals.next() => {
                        let _ = printer.await;
                        return finish(&app, signal, Some(&args.session)).await;
                    }
                };
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

/// Ends the chat on `signal`: shuts the harness down (a turn in flight was dropped, which
/// released its session) and says so on stderr.
async fn finish(
    app: &crate::app::App,
    signal: Interrupt,
    turn_of: Option<&str>,
) -> Result<u8, CliError> {
    app.harness.shutdown().await;
    match turn_of {
        Some(session) => errln!(
            "\nctxbridge: interrupted by {}: the turn on session {session:?} was cancelled and the session released; a turn that was not yet recorded left no trace in the transcript",
            signal.name()
        ),
        None => errln!("\nctxbridge: chat interrupted by {}", signal.name()),
    }
    Ok(signal.exit_code())
}
