//! `ctxbridge doctor`: the engine report of this process plus what earlier runs left in the
//! configured state store (read only when the file exists).

use clap::Args;

use crate::app;
use crate::backend::codex::CodexBackend;
use crate::cli::context::{outln, CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};
use crate::config::BackendConfig;
use crate::doctor;

/// `ctxbridge doctor` arguments.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Print the report as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Prints the report (with the Codex version from `initialize` on the Codex backend). Exit 1
/// when the selected engine cannot run on the backend, is degraded to legacy by a quarantine,
/// or the state store exists and cannot be used.
pub async fn run(context: &CommandContext, args: DoctorArgs) -> Result<u8, CliError> {
    let config = match context.load_config() {
        Ok(config) => config,
        Err(error) => {
            // Under --json a configuration doctor cannot read is still one JSON object on
            // stdout (the message goes to stderr too, and the exit code stays 2).
            if args.json {
                let printed = serde_json::json!({
                    "error": {"kind": "config", "message": error.to_string()},
                    "passes": false,
                });
                outln!(context.stdout, "{printed}");
            }
            return Err(error);
        }
    };
    let config_errors = app::EngineConfigErrors::default();
    let registry = app::registry_with(&config, None, &config_errors);
    let host = config.backend.host_kind();
    let engine_ids = doctor::note_engine_ids(&config, &registry);
    let persisted = match app::store_target(&config) {
        Ok(target) => doctor::inspect_target(&target, &engine_ids),
        Err(error) => doctor::PersistedState::Unusable {
            error: error.to_string(),
        },
    };
    let mut report = doctor::report(&config, &registry, &host.capabilities(), host.label())
        .await
        .with_config_file(context.config_file())
        .with_persisted_state(persisted)
        .with_backend_problems(doctor::backend_problems(&config));
    if let BackendConfig::Codex(codex) = &config.backend {
        let home = crate::backend::codex_home::codex_home(&config, codex.codex_home.as_deref());
        report = report.with_codex_setup(doctor::CodexSetup {
            logged_in: home.has_login(),
            home,
            binary: codex
                .url
                .is_none()
                .then(|| crate::app::codex_command(codex).first().cloned())
                .flatten(),
        });
        let check = match app::codex_backend_config(&config, codex) {
            Ok(cfg) => doctor::check_codex(&CodexBackend::new(cfg)).await,
            Err(error) => doctor::CodexCheck::Unreachable {
                error: error.to_string(),
            },
        };
        report = report.with_codex_check(check);
    }
    report.config_errors = config_errors
        .all()
        .iter()
        .map(ToString::to_string)
        .collect();
    report.node_checks = doctor::node_checks(&config).await;
    if args.json {
        let json = report.to_json().map_err(CliError::json("doctor"))?;
        outln!(context.stdout, "{json}");
    } else {
        context.stdout.write(&report.to_string());
    }
    Ok(if report.passes() {
        EXIT_OK
    } else {
        EXIT_RUNTIME_FAILURE
    })
}
