//! Engine tools in a turn (docs/engine-protocol.md#the-engine-process-protocol): the serving engine's tools offered to the model, and the
//! executor that runs the model's calls through the engine (`tools/call`).

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{ToolExecutor, ToolInvocation, ToolOutput, ToolSpec, TurnTools};
use crate::contract::{ContextEngine, EngineTool, ToolCallParams};
use crate::projection::{tool_catalogue_entry, tools_fingerprint};
use crate::quarantine::QuarantineEngine;

/// The backend's view of the engine's tools.
pub(super) fn tool_specs(tools: &[EngineTool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        })
        .collect()
}

/// The fingerprint of the tool catalogue a thread is fed with: the configured tool names and
/// the engine's tools with their declarations ([`tool_catalogue_entry`]). Without engine tools
/// it is the configured names' fingerprint.
pub(super) fn catalogue_fingerprint(configured: &[String], engine_tools: &[ToolSpec]) -> String {
    let mut entries: Vec<String> = configured.to_vec();
    entries.extend(
        engine_tools
            .iter()
            .map(|t| tool_catalogue_entry(&t.name, &t.description, &t.parameters)),
    );
    tools_fingerprint(&entries)
}

/// `availableTools` for `assemble`: the configured tools and the engine's own, each once.
pub(super) fn available_tool_names(
    configured: &[String],
    engine_tools: &[EngineTool],
) -> Vec<String> {
    let mut names = configured.to_vec();
    for tool in engine_tools {
        if !names.contains(&tool.name) {
            names.push(tool.name.clone());
        }
    }
    names
}

/// Runs the model's tool calls of one session's turn through the engine.
struct EngineToolExecutor {
    engine: Arc<QuarantineEngine>,
    session_id: String,
    session_key: String,
}

#[async_trait]
impl ToolExecutor for EngineToolExecutor {
    /// The quarantine guard turns an engine failure into an error result for the model; what is
    /// left (a cancellation, an engine without tools) is told to the model the same way.
    async fn call(&self, invocation: ToolInvocation) -> ToolOutput {
        let name = invocation.name.clone();
        tracing::info!(session = %self.session_key, tool = %name, call_id = %invocation.call_id, "running an engine tool");
        let params = ToolCallParams {
            session_id: self.session_id.clone(),
            session_key: Some(self.session_key.clone()),
            name: invocation.name,
            arguments: invocation.arguments,
            tool_call_id: Some(invocation.call_id).filter(|id| !id.is_empty()),
        };
        match self.engine.call_tool(params).await {
            Ok(result) => ToolOutput {
                text: result.text(),
                is_error: result.is_error,
            },
            Err(error) => {
                tracing::warn!(tool = %name, %error, "engine tool call failed");
                ToolOutput::error(format!("tool \"{name}\" failed: {error}"))
            }
        }
    }
}

/// The tools of one turn: the engine's tools, executed by the engine for this session. No
/// tools (and no executor) when the engine offers none.
pub(super) fn turn_tools(
    engine: &Arc<QuarantineEngine>,
    specs: Vec<ToolSpec>,
    session_id: &str,
    session_key: &str,
) -> TurnTools {
    if specs.is_empty() {
        return TurnTools::default();
    }
    TurnTools::new(
        specs,
        Arc::new(EngineToolExecutor {
            engine: engine.clone(),
            session_id: session_id.to_owned(),
            session_key: session_key.to_owned(),
        }),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Without engine tools the catalogue fingerprint is the configured names' one (existing
    /// bindings keep matching); an engine tool changes it.
    #[test]
    fn engine_tools_extend_the_catalogue_fingerprint() {
        let configured = vec!["shell".to_owned()];
        assert_eq!(
            catalogue_fingerprint(&configured, &[]),
            tools_fingerprint(&configured)
        );
        let tool = ToolSpec {
            name: "lookup".into(),
            description: "Looks up.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        assert_ne!(
            catalogue_fingerprint(&configured, std::slice::from_ref(&tool)),
            tools_fingerprint(&configured)
        );
    }

    /// `availableTools` lists the configured tools, then the engine's, without duplicates.
    #[test]
    fn available_tools_add_the_engine_tools_once() {
        let engine_tools: Vec<EngineTool> = serde_json::from_value(serde_json::json!([
            {"name": "lookup"}, {"name": "shell"}
        ]))
        .unwrap();
        assert_eq!(
            available_tool_names(&["shell".to_owned()], &engine_tools),
            vec!["shell".to_owned(), "lookup".to_owned()]
        );
    }
}
