//! The JSON view of a [`DoctorReport`] (`doctor --json`): the same facts as the text, with
//! timestamps in milliseconds since the Unix epoch. The view borrows from the report and is
//! serialised by derived [`Serialize`] implementations; through [`serde_json::Value`] its keys
//! come out sorted, as they always have.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use crate::quarantine::QuarantineRecord;

use super::{CodexCheck, CodexSetup, DoctorReport, HostCheck};

/// `doctor --json`'s object.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReportJson<'a> {
    config_file: Option<ConfigFileJson>,
    selected_id: &'a str,
    source: &'static str,
    disabled: bool,
    active_engine_id: &'a str,
    host: HostJson<'a>,
    /// `{engineId, operation, reason}`: a record's own JSON form.
    quarantines: &'a [QuarantineRecord],
    host_checks: Vec<HostCheckJson>,
    backend_problems: &'a [String],
    unoffered: &'a [String],
    warnings: &'a [String],
    can_run: bool,
    persisted: &'a super::PersistedState,
    retention_ms: Option<u64>,
    codex_setup: Option<CodexSetupJson<'a>>,
    codex: Option<CodexJson>,
    degradation: Option<super::Degradation>,
    /// Why `passes` is false: empty exactly when it is true.
    problems: Vec<super::Problem>,
    passes: bool,
}

#[derive(Serialize)]
struct ConfigFileJson {
    path: String,
    from: &'static str,
}

#[derive(Serialize)]
struct HostJson<'a> {
    label: &'a str,
    capabilities: Vec<&'static str>,
}

#[derive(Serialize)]
struct HostCheckJson {
    operation: String,
    ok: bool,
    error: Option<String>,
}

impl From<&HostCheck> for HostCheckJson {
    fn from(check: &HostCheck) -> Self {
        HostCheckJson {
            operation: check.operation.to_string(),
            ok: check.outcome.is_ok(),
            error: check.outcome.as_ref().err().map(ToString::to_string),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CodexSetupJson<'a> {
    home: String,
    home_from: &'static str,
    logged_in: bool,
    binary: &'a Option<String>,
}

impl<'a> From<&'a CodexSetup> for CodexSetupJson<'a> {
    fn from(setup: &'a CodexSetup) -> Self {
        CodexSetupJson {
            home: setup.home.path.display().to_string(),
            home_from: setup.home.source.as_str(),
            logged_in: setup.logged_in,
            binary: &setup.binary,
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
enum CodexJson {
    Version { version: String },
    Unknown,
    Unreachable { error: String },
}

impl From<&CodexCheck> for CodexJson {
    fn from(check: &CodexCheck) -> Self {
        match check {
            CodexCheck::Version(version) => CodexJson::Version {
                version: version.to_string(),
            },
            CodexCheck::Unknown => CodexJson::Unknown,
            CodexCheck::Unreachable { error } => CodexJson::Unreachable {
                error: error.clone(),
            },
        }
    }
}

/// A quarantine persisted by an earlier run: `{engineId, operation, reason, atMs}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PersistedQuarantineJson<'a> {
    engine_id: &'a str,
    operation: &'static str,
    reason: &'a str,
    at_ms: u64,
}

/// [`super::PersistedState::Read`]'s quarantines, each with the time it was recorded (which a
/// record's own JSON form leaves out).
pub(super) fn persisted_quarantines<S: Serializer>(
    quarantines: &[QuarantineRecord],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(quarantines.len()))?;
    for q in quarantines {
        seq.serialize_element(&PersistedQuarantineJson {
            engine_id: &q.engine_id,
            operation: q.operation.as_str(),
            reason: &q.reason,
            at_ms: q.at_ms,
        })?;
    }
    seq.end()
}

impl DoctorReport {
    /// The report as JSON (`doctor --json`): the same facts as the text, with timestamps in
    /// milliseconds since the Unix epoch.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(ReportJson {
            config_file: self.config_file.as_ref().map(|file| ConfigFileJson {
                path: file.path.display().to_string(),
                from: file.origin.as_str(),
            }),
            selected_id: &self.selected_id,
            source: self.source.as_str(),
            disabled: self.disabled,
            active_engine_id: &self.active_engine_id,
            host: HostJson {
                label: &self.host_label,
                capabilities: self.host_capabilities.iter().map(|c| c.as_str()).collect(),
            },
            quarantines: &self.quarantines,
            host_checks: self.host_checks.iter().map(HostCheckJson::from).collect(),
            backend_problems: &self.backend_problems,
            unoffered: &self.unoffered,
            warnings: &self.warnings,
            can_run: self.can_run,
            persisted: &self.persisted,
            retention_ms: self
                .retention
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            codex_setup: self.codex_setup.as_ref().map(CodexSetupJson::from),
            codex: self.codex.as_ref().map(CodexJson::from),
            degradation: self.degradation(),
            problems: self.problems(),
            passes: self.passes(),
        })
    }
}
