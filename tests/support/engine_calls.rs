//! Calling any lifecycle method of an engine with fixed params, and what legacy answers for it:
//! shared by the quarantine tests and the engine fault matrix.

use std::sync::Arc;

use ctxbridge::contract::*;
use ctxbridge::quarantine::{QuarantineBook, QuarantineEngine};
use serde_json::Value;

pub fn transcript() -> Vec<AgentMessage> {
    vec![
        AgentMessage::user("hello").with_id("u1"),
        AgentMessage::assistant("hi").with_id("a1"),
    ]
}

/// Calls `method` on `engine` with fixed params (the caller is agent "main", session key
/// "k"; `tool` for `tools/call`); the result as JSON.
pub async fn call(
    engine: &dyn ContextEngine,
    method: EngineMethod,
    tool: ToolCallParams,
) -> Result<Value, EngineError> {
    fn json<T: serde::Serialize>(r: Result<T, EngineError>) -> Result<Value, EngineError> {
        r.map(|v| serde_json::to_value(v).unwrap())
    }
    let session_id = "s".to_string();
    let session_key = Some("k".to_string());
    match method {
        EngineMethod::Ingest => json(
            engine
                .ingest(IngestParams {
                    session_id,
                    session_key,
                    message: Some(AgentMessage::user("hello")),
                    is_heartbeat: None,
                })
                .await,
        ),
        EngineMethod::IngestBatch => json(
            engine
                .ingest_batch(IngestBatchParams {
                    session_id,
                    session_key,
                    messages: transcript(),
                    is_heartbeat: None,
                })
                .await,
        ),
        EngineMethod::Bootstrap => json(
            engine
                .bootstrap(BootstrapParams {
                    session_id,
                    session_key,
                    ..Default::default()
                })
                .await,
        ),
        EngineMethod::Assemble => json(
            engine
                .assemble(AssembleParams {
                    session_id,
                    session_key,
                    messages: transcript().into(),
                    prompt: Some("next".into()),
                    ..Default::default()
                })
                .await,
        ),
        EngineMethod::Compact => json(
            engine
                .compact(CompactParams {
                    session_id,
                    session_key: session_key.clone(),
                    session_target: Some(SessionTarget {
                        agent_id: Some("main".into()),
                        session_key,
                        ..Default::default()
                    }),
                    force: Some(true),
                    ..Default::default()
                })
                .await,
        ),
        EngineMethod::AfterTurn => json(
            engine
                .after_turn(AfterTurnParams {
                    session_id,
                    session_key,
                    messages: transcript(),
                    pre_prompt_message_count: 0,
                    ..Default::default()
                })
                .await,
        ),
        EngineMethod::Maintain => json(
            engine
                .maintain(MaintainParams {
                    session_id,
                    session_key,
                    session_file: None,
                    reason: MaintainReason::Turn,
                    session_target: None,
                    runtime_settings: None,
                    runtime_context: None,
                })
                .await,
        ),
        EngineMethod::CommitTurn => json(
            engine
                .commit_turn(CommitTurnParams {
                    advancement_key: "turn-1".into(),
                    admission: TranscriptTurnAdmission {
                        anchor: anchor("turn-1-user", 0, None),
                        logical_turn_id: "turn-1".into(),
                        role: "user".into(),
                    },
                    terminal: anchor("turn-1-assistant", 1, Some("turn-1-user")),
                    messages: transcript(),
                    session_id,
                    session_key,
                    session_target: None,
                    runtime_settings: None,
                    runtime_context: None,
                    is_heartbeat: None,
                })
                .await,
        ),
        EngineMethod::PrepareSubagentSpawn => json(
            engine
                .prepare_subagent_spawn(PrepareSubagentSpawnParams {
                    parent_session_key: "k".into(),
                    child_session_key: "k:child".into(),
                    context_mode: SubagentContextMode::Fork,
                    parent_session_id: None,
                    child_session_id: None,
                    ttl_ms: None,
                    extra: Default::default(),
                })
                .await,
        ),
        EngineMethod::RollbackSubagentSpawn => json(
            engine
                .rollback_subagent_spawn(RollbackSubagentSpawnParams {
                    rollback_id: "rb-1".into(),
                })
                .await,
        ),
        EngineMethod::OnSubagentEnded => json(
            engine
                .on_subagent_ended(OnSubagentEndedParams {
                    child_session_key: "k:child".into(),
                    reason: SubagentEndReason::Completed,
                })
                .await,
        ),
        EngineMethod::Dispose => json(engine.dispose().await),
        EngineMethod::CallTool => json(engine.call_tool(tool).await),
        EngineMethod::Info => Ok(serde_json::to_value(engine.info()).unwrap()),
        EngineMethod::Hook => engine.call_hook("probe", HookCall::default()).await,
        EngineMethod::CallCommand => json(
            engine
                .call_command(CommandCallParams {
                    name: "probe".into(),
                    ..Default::default()
                })
                .await,
        ),
    }
}

/// What legacy answers for `method` (through a stand-in for an already quarantined engine).
pub async fn legacy_answer(
    method: EngineMethod,
    tool: ToolCallParams,
) -> Result<Value, EngineError> {
    let stand_in = QuarantineEngine::quarantined("stand-in", Arc::new(QuarantineBook::new()));
    call(&stand_in, method, tool).await
}

/// The methods that fail closed (docs/architecture.md#selection-fault-isolation-and-quarantine): their error reaches the caller.
pub fn fails_closed(method: EngineMethod) -> bool {
    matches!(
        method,
        EngineMethod::Compact | EngineMethod::PrepareSubagentSpawn
    )
}

/// A transcript entry's anchor in session `s` of agent `main`, generation 0.
pub fn anchor(entry_id: &str, seq: u64, parent: Option<&str>) -> TranscriptEntryAnchor {
    TranscriptEntryAnchor {
        agent_id: "main".into(),
        session_id: "s".into(),
        session_key: "s".into(),
        store_path: "state.db".into(),
        generation: "0".into(),
        entry_id: entry_id.into(),
        raw_seq: seq,
        effective_parent_id: parent.map(str::to_string),
        active_message_position: seq,
        idempotency_key: None,
    }
}
