//! `ctxbridge mock-model --port P --log FILE`: the Responses-compatible mock model server on
//! 127.0.0.1, until interrupted.

use std::path::PathBuf;

use clap::Args;

use crate::cli::context::{CliError, CommandContext, EXIT_OK};

/// `ctxbridge mock-model` arguments.
#[derive(Debug, Clone, Args)]
pub struct MockModelArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Append every request as a JSON line to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
}

/// Serves until interrupted.
pub async fn run(_context: &CommandContext, args: MockModelArgs) -> Result<u8, CliError> {
    ctxbridge_mock_model::serve(args.port, args.log)
        .await
        .map_err(|source| CliError::MockModel { source })?;
    Ok(EXIT_OK)
}
