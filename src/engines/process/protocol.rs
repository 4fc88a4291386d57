//! The wire side of the engine process protocol (docs/engine-protocol.md#the-engine-process-protocol): JSON-RPC message encoding and
//! classification (the line framing is the shared `ctxbridge_jsonrpc` codec), the `initialize` exchange and the rule that turns its
//! `methods` list into a [`MethodSet`]. Pure: no I/O here.

use ctxbridge_jsonrpc::{codes, Dialect};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::contract::{
    estimate_tokens, json_kind, EngineInfo, EngineMethod, EngineTool, MethodSet,
};
use crate::host::capabilities::Capability;

/// The protocol version this host speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Host → engine: the handshake.
pub const METHOD_INITIALIZE: &str = "initialize";
/// Host → engine notification: stop working on request `id`.
pub const METHOD_CANCEL_REQUEST: &str = "$/cancelRequest";
/// Engine → host: `runtimeContext.rewriteTranscriptEntries`.
pub const METHOD_REWRITE_TRANSCRIPT_ENTRIES: &str = "runtime/rewriteTranscriptEntries";
/// Engine → host: `runtimeContext.llm.complete`.
pub const METHOD_LLM_COMPLETE: &str = "runtime/llmComplete";
/// Engine → host: the host runtime's own compaction.
pub const METHOD_DELEGATE_COMPACTION: &str = "runtime/delegateCompaction";

/// JSON-RPC error codes the host sends back to engine → host requests.
pub mod error_code {
    /// The params of an engine → host request do not have the expected shape.
    pub const INVALID_PARAMS: i64 = super::codes::INVALID_PARAMS;
    /// The engine asked for a host method that does not exist.
    pub const METHOD_NOT_FOUND: i64 = super::codes::METHOD_NOT_FOUND;
    /// The host callback refused or failed.
    pub const CALLBACK_FAILED: i64 = -32000;
    /// No lifecycle call in flight offers runtime callbacks for this request.
    pub const NO_CALLBACKS: i64 = -32001;
    /// Engine → host: the engine's configuration is invalid (`data: {kind: "config",
    /// errors: [{key, message}]}`).
    pub const CONFIG_ERROR: i64 = -32010;
}

/// Longest stdout line the host accepts from an engine (a whole transcript fits easily);
/// anything longer is a protocol violation rather than an unbounded buffer.
pub const MAX_STDOUT_LINE_BYTES: usize = 64 * 1024 * 1024;
/// stderr lines longer than this reach the log as a note of their length.
pub const MAX_STDERR_LINE_BYTES: usize = 16 * 1024;

// ------------------------------------------------------------------------------------------
// Messages
// ------------------------------------------------------------------------------------------

/// The dialect engines speak: JSON-RPC 2.0 with its `"jsonrpc": "2.0"` member. Message
/// classification, the id table and the lines are the shared `ctxbridge_jsonrpc` ones.
pub const DIALECT: Dialect = Dialect::JsonRpc2;

/// A JSON-RPC error object an engine answered with (the shared definition).
pub use ctxbridge_jsonrpc::RpcError;

/// The `$/cancelRequest {id}` notification line.
pub fn encode_cancel(id: i64) -> String {
    let params = serde_json::json!({ "id": id });
    // A method name and a `Value` always serialise.
    DIALECT
        .notification_line(METHOD_CANCEL_REQUEST, Some(&params))
        .unwrap_or_default()
}

/// A short, printable preview of a line for error messages and logs.
pub fn preview(line: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(line);
    let mut out: String = text.chars().take(MAX).collect();
    if text.chars().count() > MAX {
        out.push('…');
    }
    out
}

// ------------------------------------------------------------------------------------------
// initialize
// ------------------------------------------------------------------------------------------

/// `initialize.params.host`.
#[derive(Debug, Clone, Serialize)]
pub struct InitializeHost<'a> {
    pub id: &'a str,
    pub label: &'a str,
    pub capabilities: &'a [Capability],
    /// The hooks this host fires (`hooks/<name>`).
    pub hooks: &'a [&'a str],
}

/// `initialize.params`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams<'a> {
    pub protocol_version: u32,
    pub host: InitializeHost<'a>,
    pub engine_id: &'a str,
    pub config: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<String>,
    /// The engine's own state directory (created by the host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// The OpenClaw-shaped config `{plugins: {slots, entries}}` (a plugin's `api.config`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub openclaw_config: Option<&'a Value>,
    /// The model the host's backend uses by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
}

pub use crate::contract::EngineCommand;

/// Fills in an `assemble` result's missing `estimatedTokens` (absent or null): OpenClaw does
/// not check it and published plugins leave it out, so ctxbridge estimates it itself, as a
/// quarter of the characters of the messages' text (rounded up). Returns whether it did.
pub fn fill_estimated_tokens(result: &mut Value) -> bool {
    let Some(obj) = result.as_object_mut() else {
        return false;
    };
    if !obj.get("estimatedTokens").map_or(true, Value::is_null) {
        return false;
    }
    let Some(messages) = obj.get("messages").and_then(Value::as_array) else {
        return false;
    };
    let text_chars = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
    let chars: usize = messages
        .iter()
        .map(|m| {
            let content = match m.get("content") {
                Some(Value::Array(parts)) => parts.iter().map(|p| text_chars(&p["text"])).sum(),
                Some(other) => text_chars(other),
                None => 0,
            };
            content + m.get("summary").map_or(0, text_chars)
        })
        .sum();
    obj.insert(
        "estimatedTokens".into(),
        Value::from(estimate_tokens(chars).ceil() as u64),
    );
    true
}

/// The engine error for a JSON-RPC error answer: `-32010` is a configuration error with the
/// offending keys from `data.errors`; anything else is `Failed`.
pub fn engine_error_of(method: EngineMethod, error: &RpcError) -> crate::contract::EngineError {
    if error.code != error_code::CONFIG_ERROR {
        return crate::contract::EngineError::failed(method, error.to_string());
    }
    let issues = error
        .data
        .as_ref()
        .and_then(|d| d.get("errors"))
        .and_then(|e| serde_json::from_value::<Vec<crate::contract::ConfigIssue>>(e.clone()).ok())
        .unwrap_or_default();
    crate::contract::EngineError::InvalidConfig {
        method,
        message: error.message.clone(),
        issues,
    }
}

/// What `initialize` told the host.
#[derive(Debug, Clone, PartialEq)]
pub struct InitializeOutcome {
    pub info: EngineInfo,
    /// The declared members; [`EngineMethod::CallTool`] is in it exactly when `tools` is not
    /// empty.
    pub methods: MethodSet,
    /// Names in `methods` this host does not know (ignored, reported in a log line).
    pub unknown_methods: Vec<String>,
    /// The tools the engine offers to the model.
    pub tools: Vec<EngineTool>,
    /// The hooks the engine listens to (`hooks/<name>`).
    pub hooks: Vec<String>,
    /// The commands the engine registered (`commands/call`).
    pub commands: Vec<EngineCommand>,
    /// Registration seams the engine used that its host does not offer (a Node-hosted
    /// plugin's `api.registerProvider`, a hook never fired, …): accepted, listed by doctor.
    pub unoffered: Vec<String>,
}

/// Decodes the `initialize` result `{info, methods, protocolVersion?, tools?, hooks?,
/// commands?}`.
///
/// The `methods` rule: if the list names none of the required members (`ingest`,
/// `assemble`, `compact`) it is the documented form — the optional members the engine implements —
/// and the required members are assumed present. If it names at least one required member it
/// is a complete listing and is taken exactly, so a missing required member shows up in the
/// registry's contract validation. `info` is always present (`initialize` returned it); an
/// absent `methods` means "required members only". Unknown names are ignored. `tools/call`
/// is a member exactly when `tools` lists at least one tool (whatever `methods` says); tool
/// names must be unique.
pub fn decode_initialize(result: Value) -> Result<InitializeOutcome, String> {
    let Value::Object(mut obj) = result else {
        return Err(format!(
            "initialize result is {}, expected an object",
            json_kind(&result)
        ));
    };
    if let Some(version) = obj.remove("protocolVersion") {
        if version.as_u64() != Some(u64::from(PROTOCOL_VERSION)) {
            return Err(format!(
                "engine speaks protocolVersion {version}, this host speaks {PROTOCOL_VERSION}"
            ));
        }
    }
    let info_value = obj
        .remove("info")
        .ok_or_else(|| "initialize result has no `info`".to_string())?;
    let info: EngineInfo = serde_path_to_error::deserialize(info_value)
        .map_err(|e| format!("`info.{}`: {}", e.path(), e.inner()))?;
    let names = match obj.remove("methods") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(name) => Ok(name),
                other => Err(format!(
                    "`methods` holds {}, expected method names",
                    json_kind(&other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(format!(
                "`methods` is {}, expected an array of method names",
                json_kind(&other)
            ))
        }
    };
    let (mut methods, unknown_methods) = method_set_from_names(&names);
    let tools: Vec<EngineTool> = decode_optional_list(&mut obj, "tools")?;
    let mut seen = std::collections::BTreeSet::new();
    for tool in &tools {
        if tool.name.trim().is_empty() {
            return Err("`tools` holds a tool with an empty name".to_string());
        }
        if !seen.insert(tool.name.as_str()) {
            return Err(format!("`tools` lists the tool {:?} twice", tool.name));
        }
    }
    if tools.is_empty() {
        methods.remove(EngineMethod::CallTool);
    } else {
        methods.insert(EngineMethod::CallTool);
    }
    let hooks: Vec<String> = decode_optional_list(&mut obj, "hooks")?;
    if hooks.is_empty() {
        methods.remove(EngineMethod::Hook);
    } else {
        methods.insert(EngineMethod::Hook);
    }
    let commands: Vec<EngineCommand> = decode_optional_list(&mut obj, "commands")?;
    if commands.is_empty() {
        methods.remove(EngineMethod::CallCommand);
    } else {
        methods.insert(EngineMethod::CallCommand);
    }
    let unoffered: Vec<String> = decode_optional_list(&mut obj, "unoffered")?;
    Ok(InitializeOutcome {
        info,
        methods,
        unknown_methods,
        tools,
        hooks,
        commands,
        unoffered,
    })
}

/// An optional array field of the `initialize` result (`null`/absent = empty), decoded
/// strictly; a mismatch names the field and the path inside it.
fn decode_optional_list<T: serde::de::DeserializeOwned>(
    obj: &mut Map<String, Value>,
    field: &str,
) -> Result<Vec<T>, String> {
    match obj.remove(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(value @ Value::Array(_)) => serde_path_to_error::deserialize(value)
            .map_err(|e| format!("`{field}{}`: {}", e.path(), e.inner())),
        Some(other) => Err(format!(
            "`{field}` is {}, expected an array",
            json_kind(&other)
        )),
    }
}

/// Applies the `methods` rule of [`decode_initialize`] to a list of names.
pub fn method_set_from_names(names: &[String]) -> (MethodSet, Vec<String>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for name in names {
        match EngineMethod::parse(name) {
            Some(m) => known.push(m),
            None => unknown.push(name.clone()),
        }
    }
    let lists_required = known.iter().any(|m| {
        matches!(
            m,
            EngineMethod::Ingest | EngineMethod::Assemble | EngineMethod::Compact
        )
    });
    let methods = if lists_required {
        let mut set = MethodSet::exactly(known);
        set.insert(EngineMethod::Info);
        set
    } else {
        MethodSet::required_plus(&known)
    };
    (methods, unknown)
}

/// Decodes a result that carries nothing (`afterTurn`, `dispose`, …): `null` or an object
/// (a JavaScript engine returning `undefined` or `{}`); anything else is malformed.
pub fn check_unit_result(value: &Value) -> Result<(), String> {
    match value {
        Value::Null | Value::Object(_) => Ok(()),
        other => Err(format!(
            "expected no result (null or an object), got {}",
            json_kind(other)
        )),
    }
}

/// `{}`: the params of `dispose`.
pub fn empty_params() -> Map<String, Value> {
    Map::new()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Requests carry exactly the serialised params; absent options stay absent.
    #[test]
    fn encode_request_is_one_line_with_camel_case_params() {
        let params = crate::contract::AssembleParams {
            session_id: "s".into(),
            ..Default::default()
        };
        let line = DIALECT.request_line(7, "assemble", &params).unwrap();
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":7,"method":"assemble","params":{"sessionId":"s","messages":[]}})
        );
    }

    /// `$/cancelRequest` names the request it cancels.
    #[test]
    fn cancel_names_the_request() {
        let v: Value = serde_json::from_str(&encode_cancel(9)).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":9}})
        );
    }

    /// The documented form (optional names only) implies the required members.
    #[test]
    fn methods_listing_only_optional_members_implies_required_ones() {
        let (set, unknown) =
            method_set_from_names(&["maintain".to_string(), "fancyNewThing".to_string()]);
        assert!(set.missing_required().is_empty());
        assert!(set.contains(EngineMethod::Maintain));
        assert!(!set.contains(EngineMethod::Dispose));
        assert_eq!(unknown, vec!["fancyNewThing".to_string()]);
    }

    /// A listing that names a required member is taken exactly.
    #[test]
    fn methods_listing_naming_a_required_member_is_exact() {
        let (set, _) = method_set_from_names(&["ingest".to_string(), "assemble".to_string()]);
        assert_eq!(set.missing_required(), vec![EngineMethod::Compact]);
        assert!(set.contains(EngineMethod::Info));
    }

    /// `initialize` results decode strictly: a mistyped info field names its path.
    #[test]
    fn decode_initialize_reports_mistyped_info() {
        let ok = decode_initialize(json!({
            "info": {"id": "e", "name": "E", "ownsCompaction": true},
            "methods": ["dispose"],
        }))
        .unwrap();
        assert_eq!(ok.info.id, "e");
        assert!(ok.info.owns_compaction());
        assert!(ok.methods.contains(EngineMethod::Dispose));

        let err =
            decode_initialize(json!({"info": {"id": "e", "ownsCompaction": "yes"}})).unwrap_err();
        assert!(err.contains("ownsCompaction"), "{err}");
        let err = decode_initialize(json!({"info": {"id": "e"}, "methods": "all"})).unwrap_err();
        assert!(err.contains("methods"), "{err}");
        let err = decode_initialize(json!({"info": {}, "protocolVersion": 2})).unwrap_err();
        assert!(err.contains("protocolVersion"), "{err}");
    }

    /// A missing or null `estimatedTokens` is a quarter of the messages' text characters
    /// (string content, text parts, summaries); a given one, or a result without messages, is
    /// left alone.
    #[test]
    fn missing_estimated_tokens_is_estimated() {
        let mut r = json!({"messages": [
            {"role": "user", "content": "12345678"},
            {"role": "assistant", "content": [{"type": "text", "text": "abc"}, {"type": "image"}]},
            {"role": "compactionSummary", "summary": "xy"},
        ]});
        assert!(fill_estimated_tokens(&mut r));
        assert_eq!(r["estimatedTokens"], 4);
        let mut null = json!({"messages": [], "estimatedTokens": null});
        assert!(fill_estimated_tokens(&mut null));
        assert_eq!(null["estimatedTokens"], 0);
        let mut given = json!({"messages": [], "estimatedTokens": 7});
        assert!(!fill_estimated_tokens(&mut given));
        assert_eq!(given["estimatedTokens"], 7);
        let mut no_messages = json!({"systemPromptAddition": "x"});
        assert!(!fill_estimated_tokens(&mut no_messages));
    }

    /// `tools`, `hooks`, `commands` and `unoffered` of the `initialize` result are kept; `tools/call` is a
    /// member exactly when tools are listed; duplicate or mistyped tools are rejected.
    #[test]
    fn decode_initialize_keeps_tools_hooks_and_commands() {
        let ok = decode_initialize(json!({
            "info": {"id": "e", "name": "E"},
            "methods": ["dispose"],
            "tools": [{"name": "recall", "description": "Recall", "parameters": {"type": "object"}}],
            "hooks": ["before_prompt_build"],
            "commands": [{"name": "summary", "acceptsArgs": true}],
            "unoffered": ["api.registerProvider"],
        }))
        .unwrap();
        assert_eq!(ok.tools[0].name, "recall");
        assert_eq!(ok.unoffered, vec!["api.registerProvider".to_string()]);
        assert!(ok.methods.contains(EngineMethod::CallTool));
        assert_eq!(ok.hooks, vec!["before_prompt_build".to_string()]);
        assert!(ok.commands[0].accepts_args);
        assert!(ok.methods.contains(EngineMethod::CallCommand));

        let none = decode_initialize(json!({
            "info": {"id": "e", "name": "E"},
            "methods": ["tools/call"],
        }))
        .unwrap();
        assert!(none.tools.is_empty());
        assert!(none.unoffered.is_empty());
        assert!(!none.methods.contains(EngineMethod::CallTool));
        assert!(!none.methods.contains(EngineMethod::CallCommand));
        assert!(none.unknown_methods.is_empty());

        let err = decode_initialize(json!({
            "info": {"id": "e", "name": "E"},
            "tools": [{"name": "a"}, {"name": "a"}],
        }))
        .unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let err = decode_initialize(json!({
            "info": {"id": "e", "name": "E"},
            "tools": [{"description": "no name"}],
        }))
        .unwrap_err();
        assert!(err.contains("tools[0]"), "{err}");
        let err = decode_initialize(json!({"info": {"id": "e", "name": "E"}, "hooks": "all"}))
            .unwrap_err();
        assert!(err.contains("`hooks`"), "{err}");
    }

    /// `-32010` answers become configuration errors carrying the offending keys; other codes
    /// stay `Failed`.
    #[test]
    fn config_error_code_maps_to_invalid_config() {
        let error = RpcError {
            code: -32010,
            message: "invalid config for plugin \"p\": keepRecent: must be >= 1".into(),
            data: Some(
                json!({"kind": "config", "errors": [{"key": "keepRecent", "message": "must be >= 1"}]}),
            ),
        };
        let mapped = engine_error_of(EngineMethod::Info, &error);
        let crate::contract::EngineError::InvalidConfig {
            issues, message, ..
        } = mapped
        else {
            panic!("{mapped:?}");
        };
        assert_eq!(issues[0].key, "keepRecent");
        assert!(message.contains("keepRecent"));
        let other = RpcError {
            code: -32000,
            ..error
        };
        assert!(matches!(
            engine_error_of(EngineMethod::Info, &other),
            crate::contract::EngineError::Failed { .. }
        ));
    }

    /// Unit results accept null and objects only.
    #[test]
    fn unit_results_accept_null_or_object() {
        assert!(check_unit_result(&Value::Null).is_ok());
        assert!(check_unit_result(&json!({})).is_ok());
        assert!(check_unit_result(&json!(3)).is_err());
    }
}
