//! `ctxbridge reset --session KEY [--json]`: ends a session as OpenClaw's `/reset` does
//! (`before_reset`, then `session_end`), archives its session file and drops its binding and
//! transcript; the next turn starts a new session on a new thread.

use clap::Args;

use crate::cli::context::{outln, CliError, CommandContext, EXIT_OK};

/// `ctxbridge reset` arguments.
#[derive(Debug, Clone, Args)]
pub struct ResetArgs {
    /// The session key; must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Resets the session and prints what was done.
pub async fn run(context: &CommandContext, args: ResetArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context
        .open_app_on_session(&config, "reset", &args.session)
        .await?;
    let result = app.harness.reset_session(&args.session).await;
    app.harness.shutdown().await;
    let report = result.map_err(CliError::harness("reset"))?;
    if args.json {
        let json = serde_json::to_string(&report).map_err(CliError::json("reset"))?;
        outln!(context.stdout, "{json}");
    } else {
        outln!(
            context.stdout,
            "reset session {:?}: {} messages ended with session {}; next session {}{}",
            report.session_key,
            report.message_count,
            report.session_id,
            report.next_session_id,
            report
                .archived_session_file
                .as_deref()
                .map(|f| format!("; session file archived as {f}"))
                .unwrap_or_default()
        );
    }
    Ok(EXIT_OK)
}
