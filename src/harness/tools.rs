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

/// The turn's tools: the engine's, then the caller's ([`super::TurnSpec::tools`]), each call
/// run by whoever offered the tool. A caller's tool named like one of the engine's is refused
/// (its name is the error).
pub(super) fn with_caller_tools(
    engine: TurnTools,
    caller: &TurnTools,
) -> Result<TurnTools, String> {
    if caller.specs.is_empty() {
        return Ok(engine);
    }
    if engine.specs.is_empty() {
        return Ok(caller.clone());
    }
    if let Some(clash) = caller
        .specs
        .iter()
        .find(|c| engine.specs.iter().any(|e| e.name == c.name))
    {
        return Err(clash.name.clone());
    }
    let specs = engine.specs.iter().chain(&caller.specs).cloned().collect();
    Ok(TurnTools::new(
        specs,
        Arc::new(SplitExecutor {
            engine,
            caller: caller.clone(),
        }),
    ))
}

/// Runs each call through the tools that offered it: the engine's or the caller's.
struct SplitExecutor {
    engine: TurnTools,
    caller: TurnTools,
}

impl SplitExecutor {
    fn is_callers(&self, invocation: &ToolInvocation) -> bool {
        self.caller.specs.iter().any(|s| s.name == invocation.name)
    }
}

#[async_trait]
impl ToolExecutor for SplitExecutor {
    async fn call(&self, invocation: ToolInvocation) -> ToolOutput {
        if self.is_callers(&invocation) {
            self.caller.call(invocation).await
        } else {
            self.engine.call(invocation).await
        }
    }

    /// The engine's calls one after the other, the caller's at once; outputs in call order.
    async fn call_all(&self, invocations: Vec<ToolInvocation>) -> Vec<ToolOutput> {
        let callers: Vec<bool> = invocations.iter().map(|i| self.is_callers(i)).collect();
        let (caller_calls, engine_calls): (Vec<_>, Vec<_>) = invocations
            .into_iter()
            .partition(|invocation| self.is_callers(invocation));
        let mut engine_outputs = self.engine.call_all(engine_calls).await.into_iter();
        let mut caller_outputs = if caller_calls.is_empty() {
            Vec::new().into_iter()
        } else {
            self.caller.call_all(caller_calls).await.into_iter()
        };
        callers
            .into_iter()
            .map(|is_callers| {
                let output = if is_callers {
                    caller_outputs.next()
                } else {
                    engine_outputs.next()
                };
                output.unwrap_or_else(|| {
                    ToolOutput::error("the tool's executor gave no output for this call")
                })
            })
            .collect()
    }
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

    /// Answers each call with `<name>:<its tag>` and counts how many batches it was given.
    struct Tagged {
        tag: &'static str,
        batches: std::sync::Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl ToolExecutor for Tagged {
        async fn call(&self, invocation: ToolInvocation) -> ToolOutput {
            ToolOutput::text(format!("{}:{}", invocation.name, self.tag))
        }

        async fn call_all(&self, invocations: Vec<ToolInvocation>) -> Vec<ToolOutput> {
            self.batches.lock().unwrap().push(invocations.len());
            let mut outputs = Vec::new();
            for invocation in invocations {
                outputs.push(self.call(invocation).await);
            }
            outputs
        }
    }

    fn tools_of(names: &[&str], executor: Arc<Tagged>) -> TurnTools {
        let specs = names
            .iter()
            .map(|name| ToolSpec {
                name: (*name).to_owned(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            })
            .collect();
        TurnTools::new(specs, executor)
    }

    fn tagged(tag: &'static str) -> Arc<Tagged> {
        Arc::new(Tagged {
            tag,
            batches: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn invocation(name: &str) -> ToolInvocation {
        ToolInvocation {
            call_id: format!("call_{name}"),
            name: name.to_owned(),
            arguments: serde_json::json!({}),
        }
    }

    /// The caller's tools are offered after the engine's; each call goes to whoever offered
    /// the tool, the caller's calls of one response in one batch, outputs in call order.
    #[tokio::test]
    async fn caller_tools_run_beside_the_engine_tools() {
        let (engine, caller) = (tagged("engine"), tagged("caller"));
        let tools = with_caller_tools(
            tools_of(&["lookup"], engine.clone()),
            &tools_of(&["weather", "clock"], caller.clone()),
        )
        .unwrap();
        let names: Vec<&str> = tools.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["lookup", "weather", "clock"]);
        let outputs = tools
            .call_all(vec![
                invocation("weather"),
                invocation("lookup"),
                invocation("clock"),
                invocation("nope"),
            ])
            .await;
        let texts: Vec<&str> = outputs.iter().map(|o| o.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "weather:caller",
                "lookup:engine",
                "clock:caller",
                "unknown tool \"nope\""
            ]
        );
        assert!(outputs[3].is_error);
        assert_eq!(*caller.batches.lock().unwrap(), [2]);
        assert_eq!(tools.call(invocation("lookup")).await.text, "lookup:engine");
    }

    /// A caller's tool named like one of the engine's is refused; without engine tools the
    /// caller's are the turn's.
    #[test]
    fn a_caller_tool_named_like_an_engine_tool_is_refused() {
        let clash = with_caller_tools(
            tools_of(&["lookup"], tagged("engine")),
            &tools_of(&["lookup"], tagged("caller")),
        );
        assert_eq!(clash.err().as_deref(), Some("lookup"));
        let caller = tools_of(&["weather"], tagged("caller"));
        assert!(with_caller_tools(TurnTools::default(), &caller).unwrap() == caller);
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
