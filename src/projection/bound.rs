//! Bounding an assembled result to the host's transcript byte limit (docs/architecture.md#bounding).
//!
//! Sizes are the contract's JSON sizes measured without serialising
//! ([`crate::contract::message_json_bytes`]). The retained messages are always a suffix of the
//! assembled ones, so the bounded view borrows them.

use std::borrow::Cow;

use serde_json::Value;

use super::fingerprint::{push_u64, sha256_hex_bytes, write_canonical_json, write_json_string};
use crate::contract::{
    message_json_bytes, AgentMessage, AssembleResult, ContentPart, ContextProjection,
    MessageContent, ProjectionMode, Role,
};

/// The prefix of a bounded view's epoch.
pub const BOUNDED_EPOCH_PREFIX: &str = "bounded:";

/// An assembled result within the transcript byte limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded<'a> {
    /// The retained messages: all of them, or the newest whole user turns that fit.
    pub messages: &'a [AgentMessage],
    /// The projection: the assembled one when nothing was dropped, else the bounded
    /// `thread_bootstrap` projection (owned).
    pub projection: Option<Cow<'a, ContextProjection>>,
    /// The engine's `systemPromptAddition` (never cut).
    pub system_prompt_addition: Option<&'a str>,
    /// How many of the oldest messages were dropped.
    pub omitted_messages: usize,
    /// Whether messages were dropped (then the view must start a fresh thread).
    pub bounded: bool,
    /// The JSON size of all assembled messages.
    pub transcript_bytes: usize,
    /// The JSON size of the retained messages.
    pub retained_bytes: usize,
}

impl Bounded<'_> {
    /// The projection in effect (assembled or bounded).
    pub fn projection(&self) -> Option<&ContextProjection> {
        self.projection.as_deref()
    }
}

/// Bounds `result` to `transcript_byte_limit` bytes (docs/architecture.md#bounding): the oldest messages are
/// dropped at user-turn boundaries (a boundary between a tool call and its result does not
/// count), an oversized latest turn is omitted whole, and the projection becomes
/// `{mode: thread_bootstrap, epoch: "bounded:<sha256>", fingerprint: "<sha256>"}` where the
/// SHA-256 (hex) is taken over the canonical JSON of
/// `{limit, messages (retained), projection (assembled, or null), systemPromptAddition (or
/// null)}`. At or below the limit (or without messages) the result is returned as it is,
/// borrowed.
pub fn bound_assembled(result: &AssembleResult, transcript_byte_limit: usize) -> Bounded<'_> {
    let messages = result.messages.as_slice();
    // Kept by the list as it grows (O(1)); equal to `transcript_json_bytes(messages)`.
    let transcript_bytes = result.messages.json_bytes();
    let system_prompt_addition = result.system_prompt_addition.as_deref();
    // An empty transcript has nothing to drop, even under a limit below its 2 bytes.
    if transcript_bytes <= transcript_byte_limit || messages.is_empty() {
        return Bounded {
            messages,
            projection: result.context_projection.as_ref().map(Cow::Borrowed),
            system_prompt_addition,
            omitted_messages: 0,
            bounded: false,
            transcript_bytes,
            retained_bytes: transcript_bytes,
        };
    }

    let sizes: Vec<usize> = messages.iter().map(message_json_bytes).collect();
    let starts = turn_starts(messages);
    // Suffix sizes from each allowed start, newest first; keep the oldest start that fits.
    let mut start = messages.len();
    let mut retained_bytes = 2;
    let mut suffix_sum = 0;
    let mut next = messages.len();
    for &candidate in starts.iter().rev() {
        suffix_sum += sizes[candidate..next].iter().sum::<usize>();
        next = candidate;
        let count = messages.len() - candidate;
        let bytes = 2 + suffix_sum + count.saturating_sub(1);
        if bytes > transcript_byte_limit {
            break;
        }
        start = candidate;
        retained_bytes = bytes;
    }
    let retained = &messages[start..];
    let digest = bounded_digest(
        result.context_projection.as_ref(),
        transcript_byte_limit,
        retained,
        system_prompt_addition,
    );
    Bounded {
        messages: retained,
        projection: Some(Cow::Owned(ContextProjection {
            mode: ProjectionMode::ThreadBootstrap,
            epoch: Some(format!("{BOUNDED_EPOCH_PREFIX}{digest}")),
            fingerprint: Some(digest),
        })),
        system_prompt_addition,
        omitted_messages: start,
        bounded: true,
        transcript_bytes,
        retained_bytes,
    }
}

/// Indices where the retained suffix may start: each `user` message that does not sit between
/// a tool call and its result. Index 0 is not included (starting there drops nothing).
fn turn_starts(messages: &[AgentMessage]) -> Vec<usize> {
    use std::collections::HashMap;
    let mut call_at: HashMap<&str, usize> = HashMap::new();
    // blocked[k] > 0: a call/result pair spans the boundary before message k.
    let mut blocked = vec![0i64; messages.len() + 1];
    for (j, message) in messages.iter().enumerate() {
        let mut result_ids: Vec<&str> = Vec::new();
        if message.role == Role::ToolResult {
            if let Some(id) = message.tool_call_id.as_deref() {
                result_ids.push(id);
            }
        }
        if let Some(MessageContent::Parts(parts)) = &message.content {
            for part in parts {
                match part {
                    ContentPart::ToolCall { id, .. } => {
                        call_at.entry(id.as_str()).or_insert(j);
                    }
                    ContentPart::ToolResult { tool_call_id, .. } => result_ids.push(tool_call_id),
                    _ => {}
                }
            }
        }
        for id in result_ids {
            if let Some(&i) = call_at.get(id) {
                if i < j {
                    blocked[i + 1] += 1;
                    blocked[j + 1] -= 1;
                }
            }
        }
    }
    let mut starts = Vec::new();
    let mut open = 0i64;
    for (k, message) in messages.iter().enumerate() {
        open += blocked[k];
        if k > 0 && message.role == Role::User && open == 0 {
            starts.push(k);
        }
    }
    starts
}

/// SHA-256 hex over the canonical JSON of the bounded view's inputs.
fn bounded_digest(
    projection: Option<&ContextProjection>,
    limit: usize,
    retained: &[AgentMessage],
    system_prompt_addition: Option<&str>,
) -> String {
    let mut json = String::with_capacity(256 + 64 * retained.len());
    json.push_str("{\"limit\":");
    push_u64(&mut json, limit as u64);
    json.push_str(",\"messages\":[");
    for (i, message) in retained.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        write_canonical_json(&to_json(message), &mut json);
    }
    json.push_str("],\"projection\":");
    match projection {
        Some(p) => write_canonical_json(&to_json(p), &mut json),
        None => json.push_str("null"),
    }
    json.push_str(",\"systemPromptAddition\":");
    match system_prompt_addition {
        Some(s) => write_json_string(s, &mut json),
        None => json.push_str("null"),
    }
    json.push('}');
    sha256_hex_bytes(json.as_bytes())
}

/// Contract types always serialise (string keys, no fallible serialisers); `null` is only a
/// formality for the impossible error.
fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::transcript_json_bytes;
    use crate::projection::fingerprint::{canonical_json, sha256_hex};
    use serde_json::{json, Map};

    fn assembled(messages: Vec<AgentMessage>) -> AssembleResult {
        AssembleResult {
            messages: messages.into(),
            estimated_tokens: 0.0,
            system_prompt_addition: Some("Remember X.".into()),
            prompt_authority: None,
            context_projection: Some(ContextProjection::thread_bootstrap("e1")),
        }
    }

    fn call(id: &str) -> AgentMessage {
        let mut m = AgentMessage::assistant("");
        m.content = Some(MessageContent::Parts(vec![
            ContentPart::text("calling"),
            ContentPart::tool_call(
                id,
                "shell",
                json!({"cmd": "ls", "n": 3, "deep": [true, null]}),
            ),
        ]));
        m
    }

    fn turns(n: usize, body: usize) -> Vec<AgentMessage> {
        (0..n)
            .flat_map(|i| {
                [
                    AgentMessage::user(format!("u{i} {}", "a".repeat(body))),
                    AgentMessage::assistant(format!("a{i} {}", "b".repeat(body))),
                ]
            })
            .collect()
    }

    /// The measured size equals serde_json's output length for messages without escapes.
    #[test]
    fn json_size_matches_serde_json() {
        let mut with_everything = AgentMessage::tool_result("c1", "out").with_id("m1");
        with_everything.tool_name = Some("shell".into());
        with_everything.timestamp = Some(json!(1_700_000_000_123u64));
        with_everything
            .extra
            .insert("meta".into(), json!({"k": [1, 2.5, "s", false]}));
        let mut parts_msg = call("c1");
        if let Some(MessageContent::Parts(parts)) = &mut parts_msg.content {
            parts.push(ContentPart::Image {
                extra: Map::from_iter([("data".to_string(), json!("AAAA"))]),
            });
            parts.push(ContentPart::ToolResult {
                tool_call_id: "c1".into(),
                content: json!([{"type": "text", "text": "ok"}]),
                extra: Map::new(),
            });
            parts.push(ContentPart::Other(json!({"type": "audio", "x": -4})));
        }
        let messages = vec![
            AgentMessage::user("hello wörld 😀"),
            with_everything,
            parts_msg,
            AgentMessage::compaction_summary("sum"),
        ];
        for m in &messages {
            assert_eq!(
                message_json_bytes(m),
                serde_json::to_string(m).unwrap().len(),
                "{m:?}"
            );
        }
        assert_eq!(
            transcript_json_bytes(&messages),
            serde_json::to_string(&messages).unwrap().len()
        );
        assert_eq!(transcript_json_bytes(&[]), 2);
    }

    /// At or below the limit the result is borrowed unchanged, projection included.
    #[test]
    fn below_limit_is_untouched() {
        let result = assembled(turns(3, 10));
        let size = transcript_json_bytes(&result.messages);
        let bounded = bound_assembled(&result, size);
        assert!(!bounded.bounded);
        assert_eq!(bounded.omitted_messages, 0);
        assert!(std::ptr::eq(bounded.messages, result.messages.as_slice()));
        assert!(
            matches!(bounded.projection, Some(Cow::Borrowed(p)) if std::ptr::eq(p, result.context_projection.as_ref().unwrap()))
        );
        assert_eq!(bounded.system_prompt_addition, Some("Remember X."));
        assert_eq!(bounded.transcript_bytes, size);
        // An empty transcript has nothing to drop, even below its own 2 bytes.
        assert!(!bound_assembled(&assembled(Vec::new()), 0).bounded);
    }

    /// Over the limit the oldest whole user turns go; the projection becomes the bounded one,
    /// hashed over (projection, limit, retained messages, addition).
    #[test]
    fn drops_oldest_turns_and_replaces_projection() {
        let result = assembled(turns(3, 100));
        let last_two = transcript_json_bytes(&result.messages[2..]);
        let bounded = bound_assembled(&result, last_two);
        assert!(bounded.bounded);
        assert_eq!(bounded.omitted_messages, 2);
        assert_eq!(bounded.messages, &result.messages[2..]);
        assert_eq!(bounded.retained_bytes, last_two);
        let expected = sha256_hex(&canonical_json(&json!({
            "limit": last_two,
            "messages": serde_json::to_value(&result.messages[2..]).unwrap(),
            "projection": {"mode": "thread_bootstrap", "epoch": "e1"},
            "systemPromptAddition": "Remember X.",
        })));
        let projection = bounded.projection().unwrap();
        assert_eq!(projection.mode, ProjectionMode::ThreadBootstrap);
        assert_eq!(
            projection.epoch.as_deref(),
            Some(format!("bounded:{expected}").as_str())
        );
        assert_eq!(projection.fingerprint.as_deref(), Some(expected.as_str()));
        // A different limit with the same retained messages is a different view.
        let other = bound_assembled(&result, last_two + 1);
        assert_eq!(other.messages, bounded.messages);
        assert_ne!(other.projection, bounded.projection);
        // Same inputs, same bytes.
        assert_eq!(bound_assembled(&result, last_two), bounded);
    }

    /// A user message between a tool call and its result is no boundary: the pair stays
    /// together, so the cut moves to the next free boundary.
    #[test]
    fn tool_call_and_result_stay_together() {
        let messages = vec![
            AgentMessage::user("u0"),
            call("c1"),
            AgentMessage::user("interjection"),
            AgentMessage::tool_result("c1", "result"),
            AgentMessage::assistant("done"),
            AgentMessage::user("u1"),
            AgentMessage::assistant("a1"),
        ];
        let result = assembled(messages);
        let from_interjection = transcript_json_bytes(&result.messages[2..]);
        let bounded = bound_assembled(&result, from_interjection);
        assert_eq!(bounded.omitted_messages, 5);
        assert_eq!(bounded.messages, &result.messages[5..]);
        // A tool result carried as a part blocks the boundary the same way.
        let mut as_part = result.clone();
        let mut parts = as_part.messages.to_vec();
        parts[3] = AgentMessage::user("");
        parts[3].content = Some(MessageContent::Parts(vec![ContentPart::ToolResult {
            tool_call_id: "c1".into(),
            content: json!("result"),
            extra: Map::new(),
        }]));
        as_part.messages = parts.into();
        let limit = transcript_json_bytes(&as_part.messages[2..]);
        assert_eq!(bound_assembled(&as_part, limit).omitted_messages, 5);
    }

    /// A latest turn larger than the limit is omitted whole, never sliced.
    #[test]
    fn oversized_latest_turn_is_omitted() {
        let mut messages = turns(2, 10);
        messages.push(AgentMessage::user("x".repeat(10_000)));
        messages.push(AgentMessage::assistant("short"));
        let result = assembled(messages);
        let bounded = bound_assembled(&result, 1_000);
        assert!(bounded.bounded);
        assert!(bounded.messages.is_empty());
        assert_eq!(bounded.omitted_messages, 6);
        assert_eq!(bounded.retained_bytes, 2);
        assert!(bounded
            .projection()
            .unwrap()
            .epoch
            .as_deref()
            .unwrap()
            .starts_with("bounded:"));
    }

    /// Without an assembled projection the bounded view still gets one, hashed with `null`.
    #[test]
    fn bounded_without_original_projection() {
        let mut result = assembled(turns(2, 50));
        result.context_projection = None;
        result.system_prompt_addition = None;
        let limit = transcript_json_bytes(&result.messages[2..]);
        let bounded = bound_assembled(&result, limit);
        let expected = sha256_hex(&canonical_json(&json!({
            "limit": limit,
            "messages": serde_json::to_value(&result.messages[2..]).unwrap(),
            "projection": null,
            "systemPromptAddition": null,
        })));
        assert_eq!(
            bounded.projection().unwrap().fingerprint.as_deref(),
            Some(expected.as_str())
        );
    }
}
