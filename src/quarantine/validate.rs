//! Result validation: a malformed result is a lifecycle failure.

use crate::contract::{
    AssembleResult, CompactParams, CompactResult, IngestBatchResult, ToolCallResult,
};

/// Who called `compact`: a successor session must stay with the same agent and session key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallerSession {
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
}

impl CallerSession {
    /// The caller as `compact`'s params describe it (`sessionKey`, else
    /// `sessionTarget.sessionKey`; `sessionTarget.agentId`).
    pub fn of_compact(params: &CompactParams) -> Self {
        let target = params.session_target.as_ref();
        CallerSession {
            agent_id: target.and_then(|t| t.agent_id.clone()),
            session_key: params
                .session_key
                .clone()
                .or_else(|| target.and_then(|t| t.session_key.clone())),
        }
    }
}

fn check_count(name: &str, value: f64) -> Result<(), String> {
    if !value.is_finite() {
        Err(format!("{name} must be a finite number, got {value}"))
    } else if value < 0.0 {
        Err(format!("{name} must not be negative, got {value}"))
    } else {
        Ok(())
    }
}

/// `AssembleResult`: `estimatedTokens` finite and ≥ 0.
pub fn validate_assemble_result(result: &AssembleResult) -> Result<(), String> {
    check_count("estimatedTokens", result.estimated_tokens)
}

/// `IngestBatchResult`: an engine cannot ingest more messages than it was given.
pub fn validate_ingest_batch_result(
    result: &IngestBatchResult,
    message_count: usize,
) -> Result<(), String> {
    if result.ingested_count > message_count as u64 {
        return Err(format!(
            "ingestedCount {} exceeds the {} messages given",
            result.ingested_count, message_count
        ));
    }
    Ok(())
}

/// `CompactResult` (docs/architecture.md#method-parameters-and-results): consistent flags, finite token counts, and a successor
/// `sessionTarget` that names neither another agent nor another session key than the caller's
/// (compared where the caller's value is known), with `result.sessionId` mirroring its id.
pub fn validate_compact_result(
    result: &CompactResult,
    caller: &CallerSession,
) -> Result<(), String> {
    if result.compacted && !result.ok {
        return Err("compacted is true but ok is false".to_string());
    }
    let Some(details) = &result.result else {
        return Ok(());
    };
    check_count("result.tokensBefore", details.tokens_before)?;
    if let Some(after) = details.tokens_after {
        check_count("result.tokensAfter", after)?;
    }
    if let Some(successor) = &details.session_target {
        if let (Some(theirs), Some(ours)) = (&successor.agent_id, &caller.agent_id) {
            if theirs != ours {
                return Err(format!(
                    "successor sessionTarget names agent {theirs:?}, not the caller's {ours:?}"
                ));
            }
        }
        if let (Some(theirs), Some(ours)) = (&successor.session_key, &caller.session_key) {
            if theirs != ours {
                return Err(format!(
                    "successor sessionTarget names session key {theirs:?}, not the caller's {ours:?}"
                ));
            }
        }
        if let (Some(mirror), Some(id)) = (&details.session_id, &successor.session_id) {
            if mirror != id {
                return Err(format!(
                    "result.sessionId {mirror:?} does not mirror sessionTarget.sessionId {id:?}"
                ));
            }
        }
    }
    Ok(())
}

/// `tools/call` result: every content part is an object with a string `type`.
pub fn validate_tool_call_result(result: &ToolCallResult) -> Result<(), String> {
    for (index, part) in result.content.iter().enumerate() {
        if part
            .get("type")
            .and_then(serde_json::Value::as_str)
            .is_none()
        {
            return Err(format!(
                "content[{index}] is not a content part (an object with a string `type`)"
            ));
        }
    }
    Ok(())
}
