//! The thread binding (docs/architecture.md#the-thread-binding-and-its-fingerprints): what a session's backend thread has received, and the keys
//! and fingerprints it is matched by.
//!
//! The JSON record is the documented shape plus one optional field, `engine.projectionMode`:
//! ```text
//! { schemaVersion: 1, bindingKey, backend, threadId,
//!   engine: { engineId, policyFingerprint,
//!             projection?: { mode: "thread_bootstrap", epoch, fingerprint? },
//!             projectionMode?: "none" | "per_turn" | "thread_bootstrap" },
//!   toolsFingerprint, developerInstructionsSha256, developerInstructions?, generation,
//!   updatedAt }
//! ```
//! `developerInstructions` (an extension) is the text whose hash `developerInstructionsSha256`
//! is: the backend needs the text itself to re-send it when it resumes the thread.
//! `projectionMode` records how the thread was fed (bare prompts, per-turn projections, or a
//! bootstrap), so that a switch between per-turn and thread_bootstrap — which the documented shape
//! cannot tell from "no projection yet" — starts a new thread. A record without it (written by
//! another implementation) is read as "unknown" and handled conservatively by
//! [`super::decision::decide`]. `updatedAt` is milliseconds since the Unix epoch, set by the
//! caller (this module does no I/O and reads no clock).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fingerprint::{
    canonical_json, push_u64, sha256_hex, sha256_hex_bytes, write_json_string,
};
use super::mode::EffectiveMode;
use crate::backend::{BackendKind, ThreadId};
use crate::contract::{ProjectionMode, TurnMaintenanceMode};

/// The binding record's schema version.
pub const BINDING_SCHEMA_VERSION: u32 = 1;
/// The policy fingerprint's schema version (part of the fingerprinted JSON).
pub const POLICY_SCHEMA_VERSION: u32 = 1;

/// A session's thread binding (docs/architecture.md#the-thread-binding-and-its-fingerprints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadBinding {
    /// [`BINDING_SCHEMA_VERSION`] when written by ctxbridge.
    pub schema_version: u32,
    /// The session's binding key ([`binding_key`]).
    pub binding_key: String,
    /// The backend kind the thread lives on.
    pub backend: BackendKind,
    /// The backend thread.
    pub thread_id: ThreadId,
    /// The engine that fed the thread, and how.
    pub engine: EngineBinding,
    /// The tool catalogue the thread was fed with ([`tools_fingerprint`]).
    pub tools_fingerprint: String,
    /// SHA-256 (hex) of the developer instructions the thread has received.
    pub developer_instructions_sha256: String,
    /// The text of the developer instructions the thread has received: the effective
    /// instructions last delivered (on thread start or injected as drift), whose hash is
    /// `developerInstructionsSha256`. Re-sent on every resume of the thread (a Codex thread
    /// resumed without them loses them at its next compaction). `None` when the thread has
    /// none, or the record predates this field (extension of the documented shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    /// The thread was compacted after its bootstrap context went as additional context (a
    /// developer item, which Codex's compaction drops unless the turn re-sends it): the next
    /// reused turn re-sends the rendered context (extension of the documented shape).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub context_refresh: bool,
    /// The session lease generation that wrote the record.
    pub generation: u64,
    /// Milliseconds since the Unix epoch.
    pub updated_at: u64,
}

/// `engine` of a [`ThreadBinding`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineBinding {
    /// The engine that served the thread's turns (`legacy` when inactive).
    pub engine_id: String,
    /// That engine's policy fingerprint ([`policy_fingerprint`]).
    pub policy_fingerprint: String,
    /// The bootstrap projection the thread received (thread_bootstrap mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<BindingProjection>,
    /// How the thread was fed; `None` when the record does not say (extension of the documented
    /// shape, see the module documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_mode: Option<EffectiveMode>,
}

/// `engine.projection` of a [`ThreadBinding`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingProjection {
    /// Always `thread_bootstrap` when written by ctxbridge; anything else never matches.
    pub mode: ProjectionMode,
    /// The (trimmed) epoch the thread was bootstrapped with.
    pub epoch: String,
    /// The (trimmed) fingerprint of the bootstrap, when the engine gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl ThreadBinding {
    /// How the thread was fed: the recorded mode, else `thread_bootstrap` when a projection is
    /// recorded, else `None` (unknown).
    pub fn fed_mode(&self) -> Option<EffectiveMode> {
        self.engine.projection_mode.or_else(|| {
            self.engine
                .projection
                .as_ref()
                .map(|_| EffectiveMode::ThreadBootstrap)
        })
    }
}

/// The binding key of a session (docs/architecture.md#the-thread-binding-and-its-fingerprints): `session-key:<agentId>:<base64url(sha256(
/// sessionKey))>` (unpadded URL-safe base64), or `session:<agentId>:<sessionId>` when there is
/// no session key. A blank session key counts as none.
pub fn binding_key(agent_id: &str, session_key: Option<&str>, session_id: &str) -> String {
    match session_key.filter(|k| !k.trim().is_empty()) {
        Some(key) => format!(
            "session-key:{agent_id}:{}",
            URL_SAFE_NO_PAD.encode(Sha256::digest(key.as_bytes()))
        ),
        None => format!("session:{agent_id}:{session_id}"),
    }
}

/// What the policy fingerprint covers (docs/architecture.md#the-thread-binding-and-its-fingerprints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInputs<'a> {
    /// The engine's id.
    pub engine_id: &'a str,
    /// The engine's version, when it declares one.
    pub engine_version: Option<&'a str>,
    /// Whether the engine owns compaction.
    pub owns_compaction: bool,
    /// Whether the engine's turn maintenance runs in the foreground or deferred.
    pub turn_maintenance_mode: TurnMaintenanceMode,
    /// The host's citations mode.
    pub citations_mode: Option<&'a str>,
    /// The prompt token budget.
    pub context_token_budget: Option<u64>,
    /// The context cap in chars ([`super::render::context_cap_chars`]).
    pub projection_max_chars: u64,
}

/// The policy fingerprint: lowercase hex SHA-256 of the canonical JSON (keys sorted, no
/// whitespace, absent values as `null`) of `{citationsMode, contextTokenBudget, engineId,
/// engineVersion, ownsCompaction, projectionMaxChars, schemaVersion: 1,
/// turnMaintenanceMode}`.
pub fn policy_fingerprint(inputs: &PolicyInputs<'_>) -> String {
    sha256_hex_bytes(policy_canonical_json(inputs).as_bytes())
}

/// The canonical JSON that [`policy_fingerprint`] hashes (written directly, keys in order).
pub fn policy_canonical_json(inputs: &PolicyInputs<'_>) -> String {
    let mut json = String::with_capacity(256);
    json.push_str("{\"citationsMode\":");
    push_opt_str(&mut json, inputs.citations_mode);
    json.push_str(",\"contextTokenBudget\":");
    match inputs.context_token_budget {
        Some(budget) => push_u64(&mut json, budget),
        None => json.push_str("null"),
    }
    json.push_str(",\"engineId\":");
    write_json_string(inputs.engine_id, &mut json);
    json.push_str(",\"engineVersion\":");
    push_opt_str(&mut json, inputs.engine_version);
    json.push_str(",\"ownsCompaction\":");
    json.push_str(if inputs.owns_compaction {
        "true"
    } else {
        "false"
    });
    json.push_str(",\"projectionMaxChars\":");
    push_u64(&mut json, inputs.projection_max_chars);
    json.push_str(",\"schemaVersion\":");
    push_u64(&mut json, u64::from(POLICY_SCHEMA_VERSION));
    json.push_str(",\"turnMaintenanceMode\":");
    json.push_str(match inputs.turn_maintenance_mode {
        TurnMaintenanceMode::Foreground => "\"foreground\"",
        TurnMaintenanceMode::Background => "\"background\"",
    });
    json.push('}');
    json
}

fn push_opt_str(json: &mut String, value: Option<&str>) {
    match value {
        Some(s) => write_json_string(s, json),
        None => json.push_str("null"),
    }
}

/// The tools fingerprint: lowercase hex SHA-256 of the canonical JSON array of the tool names,
/// sorted (by UTF-8 bytes) and deduplicated. Only the host's tool catalogue goes in, never
/// engine output.
pub fn tools_fingerprint<S: AsRef<str>>(tool_names: &[S]) -> String {
    let mut names: Vec<&str> = tool_names.iter().map(AsRef::as_ref).collect();
    names.sort_unstable();
    names.dedup();
    let mut json = String::with_capacity(2 + names.iter().map(|n| n.len() + 3).sum::<usize>());
    json.push('[');
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        write_json_string(name, &mut json);
    }
    json.push(']');
    sha256_hex_bytes(json.as_bytes())
}

/// The catalogue entry of a tool offered with its schema (an engine tool, docs/engine-protocol.md#the-engine-process-protocol) for
/// [`tools_fingerprint`]: `<name>#<sha256 of the canonical JSON of {description, parameters}>`,
/// so a changed description or schema changes the catalogue as a changed name does. The tool
/// declaration is the engine's static catalogue, not engine output (no turn result goes in).
/// Without such tools the fingerprint is the plain names' one, as before.
pub fn tool_catalogue_entry(
    name: &str,
    description: &str,
    parameters: &serde_json::Value,
) -> String {
    let spec = canonical_json(&serde_json::json!({
        "description": description,
        "parameters": parameters,
    }));
    format!("{name}#{}", sha256_hex(&spec))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::projection::fingerprint::{canonical_json, sha256_hex};
    use serde_json::json;

    fn sample_binding() -> ThreadBinding {
        ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: binding_key("main", None, "s1"),
            backend: BackendKind::Codex,
            thread_id: ThreadId("thr_1".into()),
            engine: EngineBinding {
                engine_id: "lossless".into(),
                policy_fingerprint: "p".into(),
                projection: Some(BindingProjection {
                    mode: ProjectionMode::ThreadBootstrap,
                    epoch: "e1".into(),
                    fingerprint: None,
                }),
                projection_mode: None,
            },
            tools_fingerprint: "t".into(),
            developer_instructions_sha256: sha256_hex(""),
            developer_instructions: None,
            context_refresh: false,
            generation: 3,
            updated_at: 1_700_000_000_000,
        }
    }

    /// The record serialises to exactly the documented field names and nesting.
    #[test]
    fn binding_json_shape_is_the_spec_shape() {
        let value = serde_json::to_value(sample_binding()).unwrap();
        assert_eq!(
            value,
            json!({
                "schemaVersion": 1,
                "bindingKey": "session:main:s1",
                "backend": "codex",
                "threadId": "thr_1",
                "engine": {
                    "engineId": "lossless",
                    "policyFingerprint": "p",
                    "projection": {"mode": "thread_bootstrap", "epoch": "e1"}
                },
                "toolsFingerprint": "t",
                "developerInstructionsSha256": sha256_hex(""),
                "generation": 3,
                "updatedAt": 1_700_000_000_000u64
            })
        );
    }

    /// projectionMode is written as an extra `engine` field and round-trips.
    #[test]
    fn projection_mode_extension_round_trips() {
        let mut binding = sample_binding();
        binding.engine.projection = None;
        binding.engine.projection_mode = Some(EffectiveMode::PerTurn);
        let text = serde_json::to_string(&binding).unwrap();
        assert!(text.contains(r#""projectionMode":"per_turn""#), "{text}");
        let back: ThreadBinding = serde_json::from_str(&text).unwrap();
        assert_eq!(back, binding);
        assert_eq!(back.fed_mode(), Some(EffectiveMode::PerTurn));
    }

    /// A record without projectionMode reads as bootstrap-fed when it has a projection, else
    /// unknown.
    #[test]
    fn fed_mode_falls_back_to_projection_presence() {
        let mut binding = sample_binding();
        assert_eq!(binding.fed_mode(), Some(EffectiveMode::ThreadBootstrap));
        binding.engine.projection = None;
        assert_eq!(binding.fed_mode(), None);
    }

    /// Binding keys: hashed, unpadded URL-safe base64 session key, or the session id.
    #[test]
    fn binding_key_forms() {
        // sha256("abc") in URL-safe base64 without padding.
        assert_eq!(
            binding_key("main", Some("abc"), "ignored"),
            "session-key:main:ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
        assert_eq!(binding_key("main", None, "s-42"), "session:main:s-42");
        assert_eq!(binding_key("main", Some("  "), "s-42"), "session:main:s-42");
    }

    /// The policy JSON is canonical (what the generic canonical writer produces) and its hash
    /// changes with every input.
    #[test]
    fn policy_fingerprint_is_canonical_and_sensitive() {
        let base = PolicyInputs {
            engine_id: "lossless",
            engine_version: Some("1.2.0"),
            owns_compaction: true,
            turn_maintenance_mode: TurnMaintenanceMode::Background,
            citations_mode: None,
            context_token_budget: Some(400_000),
            projection_max_chars: 1_000_000,
        };
        let expected = json!({
            "schemaVersion": 1,
            "engineId": "lossless",
            "engineVersion": "1.2.0",
            "ownsCompaction": true,
            "turnMaintenanceMode": "background",
            "citationsMode": null,
            "contextTokenBudget": 400_000,
            "projectionMaxChars": 1_000_000
        });
        assert_eq!(policy_canonical_json(&base), canonical_json(&expected));
        assert_eq!(
            policy_fingerprint(&base),
            sha256_hex(&canonical_json(&expected))
        );
        let variants = [
            PolicyInputs {
                engine_id: "other",
                ..base
            },
            PolicyInputs {
                engine_version: None,
                ..base
            },
            PolicyInputs {
                owns_compaction: false,
                ..base
            },
            PolicyInputs {
                turn_maintenance_mode: TurnMaintenanceMode::Foreground,
                ..base
            },
            PolicyInputs {
                citations_mode: Some("on"),
                ..base
            },
            PolicyInputs {
                context_token_budget: None,
                ..base
            },
            PolicyInputs {
                projection_max_chars: 24_000,
                ..base
            },
        ];
        for variant in variants {
            assert_ne!(
                policy_fingerprint(&variant),
                policy_fingerprint(&base),
                "{variant:?}"
            );
        }
    }

    /// The tools fingerprint ignores order and duplicates, and is the hash of the sorted array.
    #[test]
    fn tools_fingerprint_sorted_and_deduplicated() {
        let a = tools_fingerprint(&["shell", "apply_patch", "read"]);
        let b = tools_fingerprint(&["read", "shell", "apply_patch", "shell"]);
        assert_eq!(a, b);
        assert_eq!(a, sha256_hex(r#"["apply_patch","read","shell"]"#));
        assert_ne!(a, tools_fingerprint(&["read", "shell"]));
        assert_eq!(tools_fingerprint::<&str>(&[]), sha256_hex("[]"));
    }

    /// A tool's catalogue entry changes with its name, description or schema, and not with the
    /// order of the schema's keys.
    #[test]
    fn tool_catalogue_entries_follow_the_declaration() {
        let schema = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let same = serde_json::json!({"properties": {"q": {"type": "string"}}, "type": "object"});
        let entry = tool_catalogue_entry("lookup", "Looks up.", &schema);
        assert!(entry.starts_with("lookup#"));
        assert_eq!(entry, tool_catalogue_entry("lookup", "Looks up.", &same));
        assert_ne!(
            entry,
            tool_catalogue_entry("lookup", "Looks it up.", &schema)
        );
        assert_ne!(
            entry,
            tool_catalogue_entry(
                "lookup",
                "Looks up.",
                &serde_json::json!({"type": "object"})
            )
        );
        assert_ne!(
            tools_fingerprint(&["shell".to_owned(), entry.clone()]),
            tools_fingerprint(&["shell"])
        );
    }

    /// The instruction text and the refresh mark are optional extensions: an older record
    /// without them reads as none/false, and they round-trip when set.
    #[test]
    fn instruction_text_and_refresh_mark_are_optional() {
        let mut value = serde_json::to_value(sample_binding()).unwrap();
        assert!(value.get("developerInstructions").is_none());
        assert!(value.get("contextRefresh").is_none());
        let back: ThreadBinding = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(back.developer_instructions, None);
        assert!(!back.context_refresh);
        value["developerInstructions"] = json!("Be brief.");
        value["contextRefresh"] = json!(true);
        let back: ThreadBinding = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(back.developer_instructions.as_deref(), Some("Be brief."));
        assert!(back.context_refresh);
        assert_eq!(serde_json::to_value(&back).unwrap(), value);
    }
}
