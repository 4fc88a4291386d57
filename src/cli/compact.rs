//! `ctxbridge compact --session KEY [--json]`: manual compaction of a session.

use clap::Args;

use crate::cli::context::{outln, CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};

/// `ctxbridge compact` arguments.
#[derive(Debug, Clone, Args)]
pub struct CompactArgs {
    /// The session key; must not be empty or blank.
    #[arg(long, value_parser = crate::cli::context::session_key)]
    pub session: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Compacts the session and prints the result; exit 1 when the compaction did not succeed.
pub async fn run(context: &CommandContext, args: CompactArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = context
        .open_app_on_session(&config, "compact", &args.session)
        .await?;
    let result = app.harness.compact(&args.session).await;
    app.harness.shutdown().await;
    let report = result.map_err(CliError::harness("compact"))?;
    if args.json {
        let json = serde_json::to_string(&report).map_err(CliError::json("compact"))?;
        outln!(context.stdout, "{json}");
    } else {
        outln!(
            context.stdout,
            "compacted: {} (engine {}, native compaction: {}){}",
            report.result.compacted,
            report.engine_id,
            report.native_compaction,
            report
                .result
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
    Ok(if report.result.ok {
        EXIT_OK
    } else {
        EXIT_RUNTIME_FAILURE
    })
}
