//! Contract round trips (docs/architecture.md#the-engine-contract): JSON fixtures written in the documented shapes deserialize into
//! the contract types and serialize back to the same JSON, unknown fields and part types
//! included.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use ctxbridge::contract::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Number, Value};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contract")
}

fn fixture(name: &str) -> Value {
    let path = fixture_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// JSON has one number type: `1234` and `1234.0` are the same value. Compare numbers by value
/// and everything else exactly.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or_else(|| value.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        other => other.clone(),
    }
}

/// Deserializes fixture `name` as `T`, serializes it back, and checks the JSON is unchanged.
fn round_trip<T: DeserializeOwned + Serialize>(name: &str) -> T {
    let original = fixture(name);
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{name}: does not deserialize: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        canonical(&back),
        canonical(&original),
        "{name}: JSON changed in a round trip"
    );
    typed
}

/// Round-trips fixture `name` as `T` (for the table below).
fn check<T: DeserializeOwned + Serialize>(name: &str) {
    round_trip::<T>(name);
}

type FixtureCheck = fn(&str);

/// Every fixture file, with the type it round-trips through.
const FIXTURES: &[(&str, FixtureCheck)] = &[
    ("agent_messages", check::<Vec<AgentMessage>>),
    ("engine_info", check::<EngineInfo>),
    ("ingest_params", check::<IngestParams>),
    ("ingest_result", check::<IngestResult>),
    ("ingest_batch_params", check::<IngestBatchParams>),
    ("ingest_batch_result", check::<IngestBatchResult>),
    ("bootstrap_params", check::<BootstrapParams>),
    ("bootstrap_result", check::<BootstrapResult>),
    ("assemble_params", check::<AssembleParams>),
    ("assemble_result", check::<AssembleResult>),
    ("assemble_result_minimal", check::<AssembleResult>),
    ("compact_params", check::<CompactParams>),
    ("compact_result", check::<CompactResult>),
    ("compact_result_noop", check::<CompactResult>),
    ("after_turn_params", check::<AfterTurnParams>),
    ("maintain_params", check::<MaintainParams>),
    ("maintain_result", check::<MaintainResult>),
    ("commit_turn_params", check::<CommitTurnParams>),
    ("commit_turn_result", check::<CommitTurnResult>),
    (
        "prepare_subagent_spawn_params",
        check::<PrepareSubagentSpawnParams>,
    ),
    (
        "prepare_subagent_spawn_result",
        check::<PrepareSubagentSpawnResult>,
    ),
    (
        "rollback_subagent_spawn_params",
        check::<RollbackSubagentSpawnParams>,
    ),
    ("on_subagent_ended_params", check::<OnSubagentEndedParams>),
    (
        "transcript_rewrite_request",
        check::<TranscriptRewriteRequest>,
    ),
    ("llm_complete_request", check::<LlmCompleteRequest>),
    ("llm_complete_result", check::<LlmCompleteResult>),
    ("runtime_settings", check::<RuntimeSettings>),
];

/// Every params and result fixture survives deserialize → serialize unchanged.
#[test]
fn every_fixture_round_trips() {
    for (name, check) in FIXTURES {
        check(name);
    }
}

/// Every file in the fixture directory is covered by the table above (none silently skipped).
#[test]
fn every_fixture_file_is_checked() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".json").map(str::to_string))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// The message fixture covers every role and part kind, and unknown fields and part types are
/// kept where they belong (message `extra`, part `extra`, opaque parts).
#[test]
fn messages_cover_roles_parts_and_unknowns() {
    let messages = round_trip::<Vec<AgentMessage>>("agent_messages");
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    for role in [
        Role::User,
        Role::Assistant,
        Role::ToolResult,
        Role::CompactionSummary,
        Role::BranchSummary,
        Role::Custom,
    ] {
        assert!(
            roles.contains(&role),
            "fixture lacks role {}",
            role.as_str()
        );
    }

    assert_eq!(messages[0].extra["channel"], json!("cli"));
    assert_eq!(messages[0].timestamp, Some(json!(1767225600000u64)));

    let Some(MessageContent::Parts(parts)) = &messages[1].content else {
        panic!("message m2 should have parts")
    };
    match &parts[0] {
        ContentPart::Text { text, extra } => {
            assert_eq!(text, "Here is a screenshot:");
            assert_eq!(extra["cacheControl"], json!({"type": "ephemeral"}));
        }
        other => panic!("expected a text part, got {other:?}"),
    }
    assert!(matches!(&parts[1], ContentPart::Image { extra } if extra["mimeType"] == "image/png"));
    assert!(
        matches!(&parts[2], ContentPart::ToolResult { tool_call_id, extra, .. } if tool_call_id == "call_0" && extra["isError"] == false)
    );
    assert!(matches!(&parts[3], ContentPart::Other(v) if v["type"] == "audio"));
    assert!(matches!(&parts[4], ContentPart::Other(v) if v.get("type").is_none()));

    let assistant = &messages[2];
    assert_eq!(assistant.tool_call_ids(), vec!["call_1"]);
    assert_eq!(assistant.extra["stopReason"], json!("toolUse"));
    let Some(MessageContent::Parts(parts)) = &assistant.content else {
        panic!("assistant should have parts")
    };
    assert!(matches!(&parts[0], ContentPart::Other(v) if v["type"] == "thinking"));
    match &parts[2] {
        ContentPart::ToolCall {
            id,
            name,
            arguments,
            ..
        } => {
            assert_eq!((id.as_str(), name.as_str()), ("call_1", "read_file"));
            assert_eq!(arguments["range"], json!([1, 80]));
        }
        other => panic!("expected a tool call, got {other:?}"),
    }

    let tool_result = &messages[3];
    assert_eq!(tool_result.tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(tool_result.tool_name.as_deref(), Some("read_file"));
    assert_eq!(tool_result.extra["isError"], json!(false));

    assert_eq!(
        messages[5].plain_text(),
        "The user asked for a parser refactor; the lexer was read."
    );
    assert_eq!(messages[5].extra["tokensBefore"], json!(48000));
    assert_eq!(
        messages[6].summary.as_deref(),
        Some("A side branch tried a hand-written lexer.")
    );
    assert_eq!(messages[7].extra["customType"], json!("memory-recall"));
}

/// Engine info keeps its typed fields and its unknown ones.
#[test]
fn engine_info_fields() {
    let info = round_trip::<EngineInfo>("engine_info");
    assert!(info.owns_compaction());
    assert_eq!(
        info.turn_maintenance_mode(),
        TurnMaintenanceMode::Background
    );
    assert!(info.declares_durable_turns());
    let requirements = info.host_requirements.as_ref().unwrap();
    assert_eq!(
        requirements[&HostOperation::AgentRun]
            .unsupported_message
            .as_deref(),
        Some("Needs a host that controls the prompt.")
    );
    assert_eq!(requirements.len(), 3);
    assert_eq!(
        info.extra["description"],
        json!("DAG-based lossless context")
    );
}

/// Results carry promptAuthority, contextProjection and the compaction successor.
#[test]
fn results_carry_projection_and_successor() {
    let assembled = round_trip::<AssembleResult>("assemble_result");
    assert_eq!(assembled.estimated_tokens, 1234.0);
    assert_eq!(
        assembled.prompt_authority,
        Some(PromptAuthority::PreassemblyMayOverflow)
    );
    assert_eq!(
        assembled.context_projection.as_ref().map(|p| p.mode),
        Some(ProjectionMode::ThreadBootstrap)
    );
    let compacted = round_trip::<CompactResult>("compact_result");
    let details = compacted.result.unwrap();
    assert_eq!(details.session_id.as_deref(), Some("sess-2"));
    assert_eq!(
        details.session_target.unwrap().thread_id.as_deref(),
        Some("thr_02")
    );
    let settings = round_trip::<RuntimeSettings>("runtime_settings");
    assert_eq!(settings.runtime.mode, RuntimeMode::Fallback);
    assert_eq!(
        settings.diagnostics.fallback_reason,
        Some(ReasonCode::RateLimited)
    );
}

/// Shapes the contract forbids are rejected: an unknown role, a tool call without an id, a
/// text part whose text is not a string, an unknown maintain reason.
#[test]
fn wrong_shapes_are_rejected() {
    let bad_messages = [
        json!({"role": "system", "content": "x"}),
        json!({"role": "assistant", "content": [{"type": "toolCall", "name": "shell", "arguments": {}}]}),
        json!({"role": "user", "content": [{"type": "text", "text": 5}]}),
        json!({"role": "user", "content": 7}),
    ];
    for bad in bad_messages {
        assert!(
            serde_json::from_value::<AgentMessage>(bad.clone()).is_err(),
            "accepted {bad}"
        );
    }
    let bad_maintain = json!({"sessionId": "s", "reason": "whenever"});
    assert!(serde_json::from_value::<MaintainParams>(bad_maintain).is_err());
    let missing_tokens = json!({"messages": []});
    assert!(serde_json::from_value::<AssembleResult>(missing_tokens).is_err());
}

/// The number comparison used above treats 1234 and 1234.0 as equal but 1 and 2 as different.
#[test]
fn canonical_numbers() {
    assert_eq!(
        canonical(&json!({"a": [1234]})),
        canonical(&json!({"a": [1234.0]}))
    );
    assert_ne!(canonical(&json!(1)), canonical(&json!(2)));
}
