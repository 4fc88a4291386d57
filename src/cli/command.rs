//! `ctxbridge command NAME [ARGS…] --session KEY [--json]`: runs a slash command the context
//! engine registered (an OpenClaw plugin's `api.registerCommand`) through `commands/call` and
//! prints its reply.

use clap::Args;

use crate::cli::context::{outln, CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};

/// `ctxbridge command` arguments.
#[derive(Debug, Clone, Args)]
pub struct CommandArgs {
    /// The session key; must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
    /// Print the command's whole reply as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command's name (with or without its leading `/`).
    pub name: String,
    /// The command's arguments (joined with spaces; put `--` before arguments that start
    /// with `-`).
    pub args: Vec<String>,
}

/// Runs the command; exit 1 when it fails or replies with `isError: true`.
pub async fn run(context: &CommandContext, args: CommandArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context.open_app(&config).await?;
    let joined = args.args.join(" ");
    let result = app
        .harness
        .run_command(&args.session, &args.name, Some(joined.as_str()))
        .await;
    app.harness.shutdown().await;
    let reply = result.map_err(CliError::harness("command"))?;
    if args.json {
        let json = serde_json::to_string(&reply).map_err(CliError::json("command"))?;
        outln!(context.stdout, "{json}");
    } else {
        let text = reply.display();
        if !text.is_empty() {
            outln!(context.stdout, "{text}");
        }
    }
    Ok(if reply.is_error() {
        EXIT_RUNTIME_FAILURE
    } else {
        EXIT_OK
    })
}
