//! `ctxbridge doctor` (SPEC §2, §3, §14): which engine is selected and where the selection came
//! from, which engines are quarantined and why, and whether the engine's host requirements are
//! met by the configured backend.

use std::fmt;

use crate::capabilities::Capability;
use crate::config::Config;
use crate::contract::{ContextEngine, EngineMethod, HostOperation, SelectionSource};
use crate::host::{check_host_requirements, declared_operations, HostRequirementError};
use crate::quarantine::QuarantineRecord;
use crate::registry::{EngineDirs, EngineRegistry};

/// One operation's host-requirement check.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCheck {
    pub operation: HostOperation,
    pub outcome: Result<(), HostRequirementError>,
}

/// What `doctor` found.
#[derive(Debug, Clone, PartialEq)]
pub struct DoctorReport {
    /// The id the configuration selects (the disabled id when the entry is disabled).
    pub selected_id: String,
    /// `configured` or `default`.
    pub source: SelectionSource,
    /// True when the selected engine is disabled in `plugins.entries` (legacy runs).
    pub disabled: bool,
    /// The engine that answers calls: the selected one, or `legacy`.
    pub active_engine_id: String,
    pub host_label: String,
    pub host_capabilities: Vec<Capability>,
    /// Every quarantine of this process, with operation and reason.
    pub quarantines: Vec<QuarantineRecord>,
    /// The checks for each operation the active engine declares requirements for.
    pub host_checks: Vec<HostCheck>,
    /// Problems known to the harness (e.g. a no-op `compact` on a non-owning engine).
    pub warnings: Vec<String>,
    /// False when the active engine cannot run `agent-run` on this host.
    pub can_run: bool,
}

/// The warning for a non-owning engine whose `compact` did nothing (SPEC §10).
pub fn no_op_compact_warning(engine_id: &str) -> String {
    format!(
        "context engine \"{engine_id}\" does not own compaction, yet its compact returned without compacting or delegating to the runtime: manual compaction cannot free context"
    )
}

impl DoctorReport {
    /// Adds a warning the harness knows about.
    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Records that `engine_id` answered a manual compaction with a no-op while not owning
    /// compaction.
    pub fn warn_no_op_compact(&mut self, engine_id: &str) {
        self.warn(no_op_compact_warning(engine_id));
    }

    /// The `agent-run` check, if the engine declares one.
    pub fn agent_run_check(&self) -> Option<&HostCheck> {
        self.host_checks
            .iter()
            .find(|c| c.operation == HostOperation::AgentRun)
    }
}

/// Builds the report: resolves the selected engine through `registry` (quarantining it if it
/// cannot be created), then checks its host requirements against `host_capabilities`. The
/// engine is disposed afterwards.
pub async fn report(
    config: &Config,
    registry: &EngineRegistry,
    host_capabilities: &[Capability],
    host_label: &str,
) -> DoctorReport {
    let resolved = registry
        .resolve_selected(config, &EngineDirs::default())
        .await;
    let engine = &resolved.engine;
    let info = engine.info();
    let host_checks: Vec<HostCheck> = declared_operations(&info)
        .into_iter()
        .map(|operation| HostCheck {
            operation,
            outcome: check_host_requirements(&info, operation, host_label, host_capabilities),
        })
        .collect();
    let can_run = host_checks
        .iter()
        .filter(|c| c.operation == HostOperation::AgentRun)
        .all(|c| c.outcome.is_ok());
    if !engine.is_quarantined() && engine.methods().contains(EngineMethod::Dispose) {
        if let Err(error) = engine.dispose().await {
            tracing::warn!(
                "disposing context engine \"{}\" after doctor: {error}",
                engine.engine_id()
            );
        }
    }
    DoctorReport {
        selected_id: resolved
            .slot
            .disabled_id
            .clone()
            .unwrap_or_else(|| resolved.slot.engine_id.clone()),
        source: resolved.source(),
        disabled: resolved.slot.disabled_id.is_some(),
        active_engine_id: engine.active_engine_id().to_string(),
        host_label: host_label.to_string(),
        host_capabilities: host_capabilities.to_vec(),
        quarantines: registry.quarantine_book().records(),
        host_checks,
        warnings: Vec::new(),
        can_run,
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "context engine: {} ({})",
            self.selected_id,
            self.source.as_str()
        )?;
        if self.disabled {
            write!(
                f,
                " — disabled by plugins.entries.{}.enabled = false",
                self.selected_id
            )?;
        }
        writeln!(f)?;
        if self.active_engine_id != self.selected_id {
            writeln!(f, "running: {}", self.active_engine_id)?;
        }
        let capabilities: Vec<&str> = self.host_capabilities.iter().map(|c| c.as_str()).collect();
        writeln!(
            f,
            "host: {} (capabilities: {})",
            self.host_label,
            if capabilities.is_empty() {
                "none".to_string()
            } else {
                capabilities.join(", ")
            }
        )?;
        if self.quarantines.is_empty() {
            writeln!(f, "quarantined engines: none")?;
        } else {
            writeln!(f, "quarantined engines:")?;
            for q in &self.quarantines {
                writeln!(
                    f,
                    "  {}: failed during {}: {}",
                    q.engine_id, q.operation, q.reason
                )?;
            }
        }
        if self.host_checks.is_empty() {
            writeln!(
                f,
                "host requirements: none declared by {}",
                self.active_engine_id
            )?;
        } else {
            writeln!(f, "host requirements:")?;
            for check in &self.host_checks {
                match &check.outcome {
                    Ok(()) => writeln!(f, "  {}: ok", check.operation)?,
                    Err(e) => writeln!(f, "  {}: {e}", check.operation)?,
                }
            }
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        if self.can_run {
            writeln!(f, "status: ok")
        } else {
            writeln!(
                f,
                "status: context engine \"{}\" cannot run on {}",
                self.active_engine_id, self.host_label
            )
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use async_trait::async_trait;

    use super::*;
    use crate::capabilities::HostKind;
    use crate::contract::*;
    use crate::engines::LegacyEngine;

    /// An engine with host requirements that needs prompt control for agent-run.
    struct Demanding;

    #[async_trait]
    impl ContextEngine for Demanding {
        fn info(&self) -> EngineInfo {
            let mut info = EngineInfo::new("demanding", "Demanding");
            let mut reqs = BTreeMap::new();
            reqs.insert(
                HostOperation::AgentRun,
                HostRequirement {
                    required_capabilities: vec!["assemble-before-prompt".into()],
                    unsupported_message: Some("Run it on Codex.".into()),
                },
            );
            reqs.insert(
                HostOperation::ManualCompact,
                HostRequirement {
                    required_capabilities: vec!["compact".into()],
                    unsupported_message: None,
                },
            );
            info.host_requirements = Some(reqs);
            info
        }
        async fn ingest(&self, p: IngestParams) -> Result<IngestResult, EngineError> {
            LegacyEngine.ingest(p).await
        }
        async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
            LegacyEngine.assemble(p).await
        }
        async fn compact(&self, p: CompactParams) -> Result<CompactResult, EngineError> {
            LegacyEngine.compact(p).await
        }
    }

    fn config(src: &str) -> Config {
        Config::parse(src, "c.json5").unwrap()
    }

    /// An empty config: legacy, default source, nothing quarantined, can run.
    #[tokio::test]
    async fn empty_config_reports_legacy_default() {
        let registry = EngineRegistry::new();
        let kind = HostKind::Mock;
        let report = report(
            &Config::default(),
            &registry,
            &kind.capabilities(),
            kind.label(),
        )
        .await;
        assert!(report.can_run);
        assert_eq!(report.selected_id, "legacy");
        let text = report.to_string();
        assert!(
            text.starts_with("context engine: legacy (default)\n"),
            "{text}"
        );
        assert!(text.contains("quarantined engines: none"), "{text}");
        assert!(text.ends_with("status: ok\n"), "{text}");
    }

    /// An engine needing prompt control cannot run on the CLI host: can_run is false and the
    /// report shows the SPEC §3 text for each declared operation.
    #[tokio::test]
    async fn unmet_requirements_block_running() {
        let registry = EngineRegistry::new();
        registry
            .register("demanding", "test", |_| async {
                Ok(Arc::new(Demanding) as Arc<dyn ContextEngine>)
            })
            .unwrap();
        let cfg = config("{plugins: {slots: {contextEngine: 'demanding'}}}");
        let kind = HostKind::Cli;
        let report = report(&cfg, &registry, &kind.capabilities(), kind.label()).await;
        assert!(!report.can_run);
        assert_eq!(report.host_checks.len(), 2);
        let text = report.to_string();
        assert!(
            text.starts_with("context engine: demanding (configured)\n"),
            "{text}"
        );
        assert!(text.contains(
            "  agent-run: Context engine \"demanding\" cannot run operation \"agent-run\" on a CLI host. Missing host capabilities: assemble-before-prompt. Required capabilities: assemble-before-prompt. Host capabilities: bootstrap, after-turn, maintain. Run it on Codex.\n"
        ), "{text}");
        assert!(text.contains("  manual-compact: Context engine"), "{text}");
        assert!(
            text.ends_with("status: context engine \"demanding\" cannot run on a CLI host\n"),
            "{text}"
        );

        let full = HostKind::Codex;
        let report = super::report(&cfg, &registry, &full.capabilities(), full.label()).await;
        assert!(report.can_run);
        assert!(report.to_string().contains("  agent-run: ok\n"));
    }

    /// An unknown id shows as a quarantine during resolve, and legacy runs.
    #[tokio::test]
    async fn unknown_engine_shows_quarantine() {
        let registry = EngineRegistry::new();
        let cfg = config("{plugins: {slots: {contextEngine: 'ghost'}}}");
        let report = report(&cfg, &registry, &Capability::ALL, "the mock backend").await;
        assert!(report.can_run);
        assert_eq!(report.active_engine_id, "legacy");
        let text = report.to_string();
        assert!(
            text.contains("context engine: ghost (configured)\nrunning: legacy\n"),
            "{text}"
        );
        assert!(
            text.contains("quarantined engines:\n  ghost: failed during resolve: not registered\n"),
            "{text}"
        );
    }

    /// A disabled engine is shown as configured-but-disabled with legacy running, no quarantine;
    /// harness warnings are listed.
    #[tokio::test]
    async fn disabled_engine_and_warnings() {
        let registry = EngineRegistry::new();
        let cfg =
            config("{plugins: {slots: {contextEngine: 'off'}, entries: {off: {enabled: false}}}}");
        let mut report = report(&cfg, &registry, &Capability::ALL, "the mock backend").await;
        report.warn_no_op_compact("off");
        let text = report.to_string();
        assert!(text.starts_with(
            "context engine: off (configured) — disabled by plugins.entries.off.enabled = false\nrunning: legacy\n"
        ), "{text}");
        assert!(text.contains("quarantined engines: none"), "{text}");
        assert!(
            text.contains("warning: context engine \"off\" does not own compaction"),
            "{text}"
        );
    }
}
