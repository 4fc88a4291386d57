//! Host requirement checks (docs/architecture.md#host-capabilities-and-requirements): before an operation starts, the engine's
//! `hostRequirements[operation]` are compared with what the host advertises. A miss fails closed
//! before anything runs, and is not a quarantine.

use crate::contract::{EngineInfo, HostOperation};
use crate::host::capabilities::Capability;

/// An engine requires host capabilities this host does not have. `Display` is the docs/architecture.md#host-capabilities-and-requirements text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
#[non_exhaustive]
pub struct HostRequirementError {
    pub engine_id: String,
    pub operation: HostOperation,
    pub host_label: String,
    /// Required and not offered, in the engine's order.
    pub missing: Vec<String>,
    /// Everything the engine requires for the operation, in its order.
    pub required: Vec<String>,
    /// What the host offers.
    pub host_capabilities: Vec<String>,
    /// The engine's own explanation, appended to the message.
    pub unsupported_message: Option<String>,
}

impl HostRequirementError {
    fn message(&self) -> String {
        let mut text = format!(
            "Context engine \"{}\" cannot run operation \"{}\" on {}. Missing host capabilities: {}. Required capabilities: {}. Host capabilities: {}.",
            self.engine_id,
            self.operation,
            self.host_label,
            list(&self.missing),
            list(&self.required),
            list(&self.host_capabilities),
        );
        if let Some(extra) = self
            .unsupported_message
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        {
            text.push(' ');
            text.push_str(extra);
        }
        text
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// Checks `info.hostRequirements[operation]` against `host_capabilities`. An engine without
/// requirements for the operation passes. Capability names the host does not know count as
/// missing.
// Called once per operation, never in a loop: the size of the error does not matter, and its
// fields are what callers report.
#[allow(clippy::result_large_err)]
pub fn check_host_requirements(
    info: &EngineInfo,
    operation: HostOperation,
    host_label: &str,
    host_capabilities: &[Capability],
) -> Result<(), HostRequirementError> {
    let Some(requirement) = info
        .host_requirements
        .as_ref()
        .and_then(|reqs| reqs.get(&operation))
    else {
        return Ok(());
    };
    let offered = |name: &str| host_capabilities.iter().any(|c| c.as_str() == name);
    let mut required: Vec<String> = Vec::new();
    for name in &requirement.required_capabilities {
        if !required.contains(name) {
            required.push(name.clone());
        }
    }
    let missing: Vec<String> = required.iter().filter(|n| !offered(n)).cloned().collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(HostRequirementError {
        engine_id: info.id.clone(),
        operation,
        host_label: host_label.to_string(),
        missing,
        required,
        host_capabilities: host_capabilities
            .iter()
            .map(|c| c.as_str().to_string())
            .collect(),
        unsupported_message: requirement.unsupported_message.clone(),
    })
}

/// The operations `info` declares requirements for, in a stable order.
pub fn declared_operations(info: &EngineInfo) -> Vec<HostOperation> {
    info.host_requirements
        .as_ref()
        .map(|reqs| reqs.keys().copied().collect())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::contract::HostRequirement;
    use crate::host::capabilities::HostKind;

    fn engine(requirements: &[(HostOperation, &[&str], Option<&str>)]) -> EngineInfo {
        let mut info = EngineInfo::new("lossless", "Lossless");
        let mut map = BTreeMap::new();
        for (op, caps, msg) in requirements {
            map.insert(
                *op,
                HostRequirement {
                    required_capabilities: caps.iter().map(|c| c.to_string()).collect(),
                    unsupported_message: msg.map(str::to_string),
                },
            );
        }
        info.host_requirements = Some(map);
        info
    }

    /// The CLI host lacks prompt control: the miss produces the documented exact text with the
    /// engine's unsupportedMessage appended.
    #[test]
    fn cli_host_miss_has_exact_text() {
        let info = engine(&[(
            HostOperation::AgentRun,
            &[
                "assemble-before-prompt",
                "bootstrap",
                "thread-bootstrap-projection",
            ],
            Some("Use the Codex backend."),
        )]);
        let kind = HostKind::Cli;
        let err = check_host_requirements(
            &info,
            HostOperation::AgentRun,
            kind.label(),
            &kind.capabilities(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Context engine \"lossless\" cannot run operation \"agent-run\" on a CLI host. \
             Missing host capabilities: assemble-before-prompt, thread-bootstrap-projection. \
             Required capabilities: assemble-before-prompt, bootstrap, thread-bootstrap-projection. \
             Host capabilities: bootstrap, after-turn, maintain. Use the Codex backend."
        );
    }

    /// Without an unsupportedMessage the text ends after the host capability list.
    #[test]
    fn miss_without_message_ends_with_period() {
        let info = engine(&[(HostOperation::ManualCompact, &["compact"], None)]);
        let err = check_host_requirements(
            &info,
            HostOperation::ManualCompact,
            "a CLI host",
            &Capability::CLI_HOST,
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .ends_with("Host capabilities: bootstrap, after-turn, maintain."));
        assert_eq!(err.missing, vec!["compact"]);
    }

    /// Every capability is offered by mock, codex and responses hosts, so any requirement
    /// built from known capabilities passes there.
    #[test]
    fn full_hosts_pass() {
        let all: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        let info = engine(&[(HostOperation::AgentRun, &all, None)]);
        for kind in [HostKind::Mock, HostKind::Codex, HostKind::Responses] {
            assert!(check_host_requirements(
                &info,
                HostOperation::AgentRun,
                kind.label(),
                &kind.capabilities()
            )
            .is_ok());
        }
    }

    /// An operation without declared requirements passes; an unknown capability name is a miss.
    #[test]
    fn undeclared_passes_unknown_capability_misses() {
        let info = engine(&[(HostOperation::SubagentSpawn, &["teleport"], None)]);
        assert!(
            check_host_requirements(&info, HostOperation::AgentRun, "x", &Capability::ALL).is_ok()
        );
        let err =
            check_host_requirements(&info, HostOperation::SubagentSpawn, "x", &Capability::ALL)
                .unwrap_err();
        assert_eq!(err.missing, vec!["teleport"]);
        assert_eq!(
            declared_operations(&info),
            vec![HostOperation::SubagentSpawn]
        );
    }

    /// A host with no capabilities lists them as "none"; duplicated requirements count once.
    #[test]
    fn empty_host_and_duplicates() {
        let info = engine(&[(HostOperation::AgentRun, &["compact", "compact"], None)]);
        let err = check_host_requirements(&info, HostOperation::AgentRun, "a bare host", &[])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Context engine \"lossless\" cannot run operation \"agent-run\" on a bare host. \
             Missing host capabilities: compact. Required capabilities: compact. Host capabilities: none."
        );
    }
}
