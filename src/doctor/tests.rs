use std::collections::BTreeMap;
use std::sync::Arc;

use crate::store::StateStoreExt;
use async_trait::async_trait;

use super::*;
use crate::contract::*;
use crate::engines::LegacyEngine;
use crate::host::capabilities::HostKind;
use crate::util::format_utc_ms;

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
/// report shows the docs/architecture.md#host-capabilities-and-requirements text for each declared operation.
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

fn stored_quarantine(id: &str, operation: &str, reason: &str) -> crate::store::QuarantineRecord {
    crate::store::QuarantineRecord {
        engine_id: id.into(),
        operation: crate::quarantine::FailedOperation::parse(operation).unwrap(),
        reason: reason.into(),
        at_ms: 1_700_000_000_000,
    }
}

/// Timestamps render as RFC 3339 UTC, leap days and the epoch included.
#[test]
fn utc_timestamps() {
    assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(format_utc_ms(1_700_000_000_999), "2023-11-14T22:13:20Z");
    assert_eq!(format_utc_ms(4_102_444_799_000), "2099-12-31T23:59:59Z");
}

/// Persisted quarantines are read with operation and reason; the harness's no-op-compact
/// note is found for the engine ids asked about (and only those), decoded from its JSON
/// string form.
#[test]
fn reads_persisted_quarantines_and_notes() {
    let store = crate::store::SqliteStore::in_memory().unwrap();
    store
        .record_quarantine(&stored_quarantine("py", "assemble", "engine exploded"))
        .unwrap();
    store
        .save_document(
            crate::harness::DOCTOR_NAMESPACE,
            "noop-compact:lazy",
            &serde_json::to_string("lazy compact was a no-op").unwrap(),
        )
        .unwrap();
    store
        .save_document(
            crate::harness::DOCTOR_NAMESPACE,
            "noop-compact:other",
            "\"x\"",
        )
        .unwrap();
    let state = read_persisted_state(&store, &["lazy".into(), "py".into()]).unwrap();
    let PersistedState::Read {
        quarantines, notes, ..
    } = &state
    else {
        panic!("expected Read, got {state:?}");
    };
    assert_eq!(quarantines.len(), 1);
    assert_eq!(quarantines[0].operation.as_str(), "assemble");
    assert_eq!(notes, &vec!["lazy compact was a no-op".to_string()]);
}

/// The report shows earlier runs' quarantines in their own section (the current-process
/// section unchanged), the notes as warnings, and still passes.
#[tokio::test]
async fn persisted_state_is_reported() {
    let registry = EngineRegistry::new();
    let persisted = PersistedState::Read {
        location: "/tmp/s.db".into(),
        quarantines: vec![stored_quarantine("py", "assemble", "engine exploded")],
        notes: vec!["lazy compact was a no-op".into()],
        stats: None,
    };
    let report = report(
        &Config::default(),
        &registry,
        &Capability::ALL,
        "the mock backend",
    )
    .await
    .with_persisted_state(persisted);
    assert!(report.passes());
    let text = report.to_string();
    assert!(text.contains("quarantined engines: none\nquarantines seen in earlier runs (/tmp/s.db):\n  py: failed during assemble: engine exploded (recorded 2023-11-14T22:13:20Z)\n"), "{text}");
    assert!(
        text.contains("warning: lazy compact was a no-op\n"),
        "{text}"
    );
    assert!(text.ends_with("status: ok\n"), "{text}");
}

/// A missing store file is not created and means "nothing from earlier runs"; a file that
/// is not a database is reported naming the file, and the report fails.
#[tokio::test]
async fn missing_and_corrupt_store_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("sub").join("state.db");
    let state = inspect_store(&missing, &[]);
    assert!(matches!(state, PersistedState::NoStore { .. }), "{state:?}");
    assert!(
        !dir.path().join("sub").exists(),
        "doctor created the store directory"
    );

    let corrupt = dir.path().join("state.db");
    std::fs::write(
        &corrupt,
        "this is not a database, it is a long enough line of text",
    )
    .unwrap();
    let state = inspect_store(&corrupt, &[]);
    let PersistedState::Unusable { error } = &state else {
        panic!("expected Unusable, got {state:?}");
    };
    assert!(error.contains(&corrupt.display().to_string()), "{error}");
    let registry = EngineRegistry::new();
    let report = report(
        &Config::default(),
        &registry,
        &Capability::ALL,
        "the mock backend",
    )
    .await
    .with_persisted_state(state);
    assert!(report.can_run);
    assert!(!report.passes());
    let text = report.to_string();
    assert!(
        text.contains("unusable state store: state store "),
        "{text}"
    );
    assert!(
        text.ends_with(
            "status: the state store cannot be used; fix it or move it away before running turns\n"
        ),
        "{text}"
    );
}

/// Node-hosted commands are recognised by the interpreter (`node`) or a host script run
/// directly; the argument after the script is the plugin; a wrapper is not judged.
#[test]
fn node_hosted_commands() {
    let cmd = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let node = |interpreter: &str, plugin: Option<&str>| {
        Some(NodeCommand {
            interpreter: interpreter.into(),
            plugin: plugin.map(str::to_string),
        })
    };
    assert_eq!(
        node_hosted(&cmd(&["node", "host.mjs", "plugin"])),
        node("node", Some("plugin"))
    );
    assert_eq!(
        node_hosted(&cmd(&["/opt/bin/node", "host.mjs"])),
        node("/opt/bin/node", None)
    );
    assert_eq!(
        node_hosted(&cmd(&["x/node_modules/.bin/node", "h.mjs", "p"])),
        node("x/node_modules/.bin/node", Some("p"))
    );
    assert_eq!(
        node_hosted(&cmd(&["./host.mjs", "p"])),
        node("node", Some("p"))
    );
    assert_eq!(node_hosted(&cmd(&["python3", "engine.py"])), None);
    assert_eq!(
        node_hosted(&cmd(&["python3", "wrap.py", "node", "host.mjs"])),
        None
    );
}

/// An interpreter outside the plugin's `engines.node` range (below it, or above an upper
/// bound) is a problem; a range semver cannot read is a note; without a requirement an
/// interpreter lacking node:sqlite is only a note; a newer one passes. (The range syntax
/// itself is tested in `host::node`.)
#[test]
fn node_versions_are_judged_against_the_plugin_requirement() {
    let (problem, _) = judge_node(Some("20.20.2"), Some(">=22.5"));
    assert!(problem.unwrap().contains("not what the plugin requires"));
    let (problem, _) = judge_node(Some("25.1.0"), Some(">= 22.5.0 <25"));
    assert!(problem.is_some(), "an upper bound is checked too");
    let (problem, note) = judge_node(Some("22.23.3"), Some("latest"));
    assert!(problem.is_none());
    assert!(note.unwrap().contains("cannot check"));
    assert_eq!(judge_node(Some("22.23.3"), Some(">=22.5")), (None, None));
    let (problem, note) = judge_node(Some("20.20.2"), None);
    assert!(problem.is_none());
    assert!(note.unwrap().contains("node:sqlite"));
    let (problem, _) = judge_node(None, Some(">=22.5"));
    assert!(problem.is_some());
}

/// The hand-built `doctor --json` object the derived view replaced, kept as the reference the
/// derived output must match byte for byte (since extended by `problems`, and the store's
/// `location` named so in every state).
fn hand_built_json(report: &DoctorReport) -> serde_json::Value {
    use serde_json::json;
    let persisted = match &report.persisted {
        PersistedState::NotInspected => json!({"state": "notInspected"}),
        PersistedState::NoStore { path } => json!({"state": "noStore", "location": path}),
        PersistedState::Read {
            location,
            quarantines,
            notes,
            stats,
        } => json!({
            "state": "read",
            "location": location,
            "quarantines": quarantines.iter().map(|q| json!({
                "engineId": q.engine_id,
                "operation": q.operation.as_str(),
                "reason": q.reason,
                "atMs": q.at_ms,
            })).collect::<Vec<_>>(),
            "notes": notes,
            "stats": stats,
        }),
        PersistedState::Unusable { error } => json!({"state": "unusable", "error": error}),
        PersistedState::Locked { error } => json!({"state": "locked", "error": error}),
    };
    json!({
        "configFile": report.config_file.as_ref().map(|file| json!({
            "path": file.path.display().to_string(),
            "from": file.origin.as_str(),
        })),
        "selectedId": report.selected_id,
        "source": report.source.as_str(),
        "disabled": report.disabled,
        "activeEngineId": report.active_engine_id,
        "host": {
            "label": report.host_label,
            "capabilities": report.host_capabilities.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        },
        "quarantines": report.quarantines.iter().map(|q| json!({
            "engineId": q.engine_id,
            "operation": q.operation.as_str(),
            "reason": q.reason,
        })).collect::<Vec<_>>(),
        "hostChecks": report.host_checks.iter().map(|c| json!({
            "operation": c.operation.to_string(),
            "ok": c.outcome.is_ok(),
            "error": c.outcome.as_ref().err().map(|e| e.to_string()),
        })).collect::<Vec<_>>(),
        "backendProblems": report.backend_problems,
        "unoffered": report.unoffered,
        "warnings": report.warnings,
        "canRun": report.can_run,
        "persisted": persisted,
        "problems": report.problems().iter().map(|p| json!({
            "kind": serde_json::to_value(p.kind).unwrap(),
            "message": p.message,
        })).collect::<Vec<_>>(),
        "retentionMs": report.retention.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        "codexSetup": report.codex_setup.as_ref().map(|setup| json!({
            "home": setup.home.path.display().to_string(),
            "homeFrom": setup.home.source.as_str(),
            "loggedIn": setup.logged_in,
            "binary": setup.binary,
        })),
        "codex": report.codex.as_ref().map(|check| match check {
            CodexCheck::Version(version) => json!({"state": "version", "version": version.to_string()}),
            CodexCheck::Unknown => json!({"state": "unknown"}),
            CodexCheck::Unreachable { error } => json!({"state": "unreachable", "error": error}),
        }),
        "degradation": report.degradation().map(|d| json!({
            "operation": d.operation,
            "reason": d.reason,
            "recordedAtMs": d.recorded_at_ms,
        })),
        "passes": report.passes(),
    })
}

/// `doctor --json` from the derived view is byte-identical to the hand-built object it
/// replaced, over reports that between them take every branch: each persisted state, each
/// Codex check, with and without a config file, Codex setup, retention, host-check errors,
/// quarantines of this run and of earlier ones, warnings, problems and degradations.
#[tokio::test]
async fn derived_json_matches_the_hand_built_object() {
    use crate::backend::codex_home::{CodexHome, CodexHomeSource};
    use crate::config::discover::{ConfigFile, ConfigOrigin};
    use crate::quarantine::FailedOperation;
    use codex_app_server_client::CodexVersion;

    let registry = EngineRegistry::new();
    registry
        .register("demanding", "test", |_| async {
            Ok(Arc::new(Demanding) as Arc<dyn ContextEngine>)
        })
        .unwrap();
    let kind = HostKind::Cli;
    let demanding = report(
        &config("{plugins: {slots: {contextEngine: 'demanding'}}}"),
        &registry,
        &kind.capabilities(),
        kind.label(),
    )
    .await;
    assert!(demanding.host_checks.iter().any(|c| c.outcome.is_err()));
    let ghost = report(
        &config("{plugins: {slots: {contextEngine: 'ghost'}}, store: {retention: '7d'}}"),
        &registry,
        &Capability::ALL,
        "the mock backend",
    )
    .await;
    assert!(!ghost.quarantines.is_empty());
    let legacy = report(
        &Config::default(),
        &EngineRegistry::new(),
        &Capability::ALL,
        "the mock backend",
    )
    .await;

    let stats = crate::store::StoreStats {
        sessions: 3,
        bindings: 1,
        transcript_entries: 42,
        outbox_pending: 2,
        documents: 5,
        oldest_session_ms: Some(1_700_000_000_123),
    };
    let persisted_states = [
        PersistedState::NotInspected,
        PersistedState::NoStore {
            path: "/tmp/\"quoted\"/state.db".into(),
        },
        PersistedState::Read {
            location: "/tmp/s.db".into(),
            quarantines: vec![],
            notes: vec![],
            stats: None,
        },
        PersistedState::Read {
            location: "postgres://u@h/db".into(),
            quarantines: vec![
                stored_quarantine("demanding", "assemble", "engine exploded"),
                stored_quarantine("ghost", "factory", "no plugin\nsecond line"),
                stored_quarantine("py", "tools/call", "ünïcode ✓"),
            ],
            notes: vec!["lazy compact was a no-op".into()],
            stats: Some(stats.clone()),
        },
        PersistedState::Read {
            location: "/tmp/s.db".into(),
            quarantines: vec![stored_quarantine("x", "resolve", "")],
            notes: vec![],
            stats: Some(crate::store::StoreStats::default()),
        },
        PersistedState::Unusable {
            error: "state store /x is corrupt".into(),
        },
        PersistedState::Locked {
            error: "database is locked".into(),
        },
    ];
    let codex_checks = [
        None,
        Some(CodexCheck::Version(CodexVersion::new(0, 125, 3))),
        Some(CodexCheck::Unknown),
        Some(CodexCheck::Unreachable {
            error: "spawn failed: \\ no such file".into(),
        }),
    ];
    let setups = [
        None,
        Some(CodexSetup {
            home: CodexHome {
                path: "/home/u/.codex".into(),
                source: CodexHomeSource::UserHome,
            },
            logged_in: true,
            binary: Some("codex".into()),
        }),
        Some(CodexSetup {
            home: CodexHome {
                path: "/srv/state/codex-home".into(),
                source: CodexHomeSource::StateDir,
            },
            logged_in: false,
            binary: None,
        }),
    ];
    let config_files = [
        None,
        Some(ConfigFile {
            path: "/etc/ctxbridge.json5".into(),
            origin: ConfigOrigin::Flag,
        }),
        Some(ConfigFile {
            path: "./ctxbridge.json5".into(),
            origin: ConfigOrigin::Nearest,
        }),
    ];

    let mut compared = 0;
    for (b, base) in [&demanding, &ghost, &legacy].into_iter().enumerate() {
        for (p, persisted) in persisted_states.iter().enumerate() {
            for (c, codex) in codex_checks.iter().enumerate() {
                let mut variant = (*base).clone();
                variant.persisted = persisted.clone();
                variant.codex = codex.clone();
                variant.codex_setup = setups[(p + c) % setups.len()].clone();
                variant.config_file = config_files[(b + p + c) % config_files.len()].clone();
                match (b + p + c) % 4 {
                    0 => {}
                    1 => {
                        variant.retention = Some(std::time::Duration::from_millis(86_400_123));
                        variant.warn("a \"warning\"");
                        variant.backend_problems = vec!["backend.command is empty".into()];
                    }
                    2 => {
                        variant.retention = Some(std::time::Duration::MAX);
                        variant.disabled = true;
                        variant.unoffered = vec!["registerTool".into(), "registerHook".into()];
                    }
                    _ => {
                        variant
                            .quarantines
                            .push(crate::quarantine::QuarantineRecord {
                                engine_id: variant.selected_id.clone(),
                                operation: FailedOperation::Method(EngineMethod::Compact),
                                reason: "timed out after 180000ms".into(),
                                at_ms: 1_700_000_000_000,
                            });
                        variant.retention = None;
                        variant.can_run = !variant.can_run;
                    }
                }
                let derived = variant.to_json().unwrap();
                let reference = hand_built_json(&variant);
                assert_eq!(derived, reference, "variant {b}/{p}/{c}");
                assert_eq!(
                    derived.to_string(),
                    reference.to_string(),
                    "variant {b}/{p}/{c}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 3 * 7 * 4);
}

/// One `doctor --json` object spelled out in full: the keys are sorted at every level and
/// every field is present (null where absent).
#[tokio::test]
async fn derived_json_fixed_form() {
    let registry = EngineRegistry::new();
    let mut report = report(
        &Config::default(),
        &registry,
        &[Capability::Compact],
        "the mock backend",
    )
    .await
    .with_persisted_state(PersistedState::Read {
        location: "/tmp/s.db".into(),
        quarantines: vec![stored_quarantine("py", "assemble", "engine exploded")],
        notes: vec![],
        stats: None,
    });
    report.retention = Some(std::time::Duration::from_secs(60));
    assert_eq!(
        report.to_json().unwrap().to_string(),
        concat!(
            r#"{"activeEngineId":"legacy","backendProblems":[],"canRun":true,"codex":null,"codexSetup":null,"#,
            r#""configFile":null,"degradation":null,"disabled":false,"host":{"capabilities":["compact"],"label":"the mock backend"},"#,
            r#""hostChecks":[],"passes":true,"persisted":{"location":"/tmp/s.db","notes":[],"#,
            r#""quarantines":[{"atMs":1700000000000,"engineId":"py","operation":"assemble","reason":"engine exploded"}],"#,
            r#""state":"read","stats":null},"problems":[],"quarantines":[],"retentionMs":60000,"selectedId":"legacy","#,
            r#""source":"default","unoffered":[],"warnings":[]}"#
        )
    );
}
