//! Thread-level developer instructions (docs/architecture.md#developer-instruction-delivery).
//!
//! The effective instructions are the configured base plus the engine's
//! `systemPromptAddition`. A thread receives them when it starts; the Codex app-server ignores
//! new developer instructions on resume/fork, so when they drift from what the thread received
//! (`developerInstructionsSha256` of the binding) they are delivered as a `developer` message
//! (policy `inject`, the default) or the thread is rotated (policy `rotate`). A backend that
//! sends the instructions with every request (Responses) needs neither.

use serde::{Deserialize, Serialize};

use super::fingerprint::sha256_hex;

/// `projection.developerInstructionDrift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriftPolicy {
    /// Deliver the new instructions as a `developer` message (`thread/inject_items`).
    #[default]
    Inject,
    /// Start a new thread with the new instructions.
    Rotate,
}

/// How this turn's developer instructions reach the backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstructionDelivery {
    /// The thread is new: the instructions go with the thread start.
    ThreadStart,
    /// Inject this text as a `developer` message before the turn.
    Inject(String),
    /// Start a new thread (which then receives the instructions on start).
    Rotate,
    /// Nothing to deliver: the thread already has them, or the backend sends them with every
    /// request.
    Unchanged,
}

impl InstructionDelivery {
    /// The `developerInstructionsDelivery` of `turn --json`: `thread-start`, `inject` or
    /// `unchanged` (a rotation is delivered by the new thread's start).
    pub fn delivery_name(&self) -> &'static str {
        match self {
            InstructionDelivery::ThreadStart | InstructionDelivery::Rotate => "thread-start",
            InstructionDelivery::Inject(_) => "inject",
            InstructionDelivery::Unchanged => "unchanged",
        }
    }
}

/// The effective developer instructions: `base` + `"\n\n"` + `addition.trim()`, leaving out
/// a part that is empty (a whitespace-only base counts as empty; a non-empty base is kept as
/// configured). `None` when both are empty.
pub fn effective_developer_instructions(
    base: Option<&str>,
    addition: Option<&str>,
) -> Option<String> {
    let base = base.filter(|b| !b.trim().is_empty());
    let addition = addition.map(str::trim).filter(|a| !a.is_empty());
    match (base, addition) {
        (None, None) => None,
        (Some(base), None) => Some(base.to_owned()),
        (None, Some(addition)) => Some(addition.to_owned()),
        (Some(base), Some(addition)) => {
            let mut joined = String::with_capacity(base.len() + 2 + addition.len());
            joined.push_str(base);
            joined.push_str("\n\n");
            joined.push_str(addition);
            Some(joined)
        }
    }
}

/// The `developerInstructionsSha256` of effective instructions (`None` hashes as `""`).
pub fn developer_instructions_sha256(effective: Option<&str>) -> String {
    sha256_hex(effective.unwrap_or(""))
}

/// Plans the delivery of `effective` instructions to the turn's thread.
///
/// - a new thread → [`InstructionDelivery::ThreadStart`];
/// - a backend that sends instructions with every request → [`InstructionDelivery::Unchanged`]
///   (the request carries the current text; the caller records the new hash);
/// - the hash equals `binding_sha` (what the thread received) → `Unchanged`;
/// - drifted (or the binding does not say) → `Inject(text)` under [`DriftPolicy::Inject`],
///   `Rotate` under [`DriftPolicy::Rotate`]. Injection cannot take instructions away, so a
///   drift to empty instructions rotates under either policy.
pub fn plan_instruction_delivery(
    effective: Option<&str>,
    binding_sha: Option<&str>,
    policy: DriftPolicy,
    thread_is_new: bool,
    backend_sends_per_request: bool,
) -> InstructionDelivery {
    if thread_is_new {
        return InstructionDelivery::ThreadStart;
    }
    if backend_sends_per_request {
        return InstructionDelivery::Unchanged;
    }
    if binding_sha == Some(developer_instructions_sha256(effective).as_str()) {
        return InstructionDelivery::Unchanged;
    }
    match (policy, effective.filter(|e| !e.is_empty())) {
        (DriftPolicy::Inject, Some(text)) => InstructionDelivery::Inject(text.to_owned()),
        _ => InstructionDelivery::Rotate,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Base and trimmed addition are joined by a blank line; empty parts are left out.
    #[test]
    fn joins_base_and_addition() {
        assert_eq!(
            effective_developer_instructions(Some("Be brief."), Some("  Recall: X.\n")),
            Some("Be brief.\n\nRecall: X.".to_owned())
        );
        assert_eq!(
            effective_developer_instructions(Some("Be brief."), Some(" \n ")),
            Some("Be brief.".to_owned())
        );
        assert_eq!(
            effective_developer_instructions(None, Some(" Recall ")),
            Some("Recall".to_owned())
        );
        assert_eq!(
            effective_developer_instructions(Some("  "), Some("Recall")),
            Some("Recall".to_owned())
        );
        assert_eq!(effective_developer_instructions(Some(""), None), None);
        assert_eq!(effective_developer_instructions(None, None), None);
    }

    /// A new thread gets its instructions on start, whatever the policy or hash.
    #[test]
    fn new_thread_is_thread_start() {
        for policy in [DriftPolicy::Inject, DriftPolicy::Rotate] {
            let plan = plan_instruction_delivery(Some("a"), Some("stale"), policy, true, false);
            assert_eq!(plan, InstructionDelivery::ThreadStart);
            assert_eq!(plan.delivery_name(), "thread-start");
        }
    }

    /// Matching hashes deliver nothing.
    #[test]
    fn unchanged_when_hash_matches() {
        let sha = developer_instructions_sha256(Some("a"));
        let plan =
            plan_instruction_delivery(Some("a"), Some(&sha), DriftPolicy::Rotate, false, false);
        assert_eq!(plan, InstructionDelivery::Unchanged);
        assert_eq!(plan.delivery_name(), "unchanged");
        let empty = developer_instructions_sha256(None);
        assert_eq!(
            plan_instruction_delivery(None, Some(&empty), DriftPolicy::Inject, false, false),
            InstructionDelivery::Unchanged
        );
    }

    /// Drift under inject delivers the new text; under rotate starts a new thread.
    #[test]
    fn drift_follows_policy() {
        let old = developer_instructions_sha256(Some("old"));
        let inject =
            plan_instruction_delivery(Some("new"), Some(&old), DriftPolicy::Inject, false, false);
        assert_eq!(inject, InstructionDelivery::Inject("new".to_owned()));
        assert_eq!(inject.delivery_name(), "inject");
        let rotate =
            plan_instruction_delivery(Some("new"), Some(&old), DriftPolicy::Rotate, false, false);
        assert_eq!(rotate, InstructionDelivery::Rotate);
        assert_eq!(rotate.delivery_name(), "thread-start");
        // A binding that does not record the hash counts as drift.
        assert_eq!(
            plan_instruction_delivery(Some("new"), None, DriftPolicy::Inject, false, false),
            InstructionDelivery::Inject("new".to_owned())
        );
    }

    /// Instructions removed entirely cannot be injected away: the thread rotates.
    #[test]
    fn drift_to_empty_rotates() {
        let old = developer_instructions_sha256(Some("old"));
        assert_eq!(
            plan_instruction_delivery(None, Some(&old), DriftPolicy::Inject, false, false),
            InstructionDelivery::Rotate
        );
    }

    /// A backend that re-sends instructions per request never injects or rotates.
    #[test]
    fn per_request_backend_is_unchanged() {
        let old = developer_instructions_sha256(Some("old"));
        for policy in [DriftPolicy::Inject, DriftPolicy::Rotate] {
            assert_eq!(
                plan_instruction_delivery(Some("new"), Some(&old), policy, false, true),
                InstructionDelivery::Unchanged
            );
        }
    }

    /// The drift policy uses the config's lowercase names.
    #[test]
    fn drift_policy_names() {
        assert_eq!(
            serde_json::to_string(&DriftPolicy::Inject).unwrap(),
            "\"inject\""
        );
        assert_eq!(
            serde_json::from_str::<DriftPolicy>("\"rotate\"").unwrap(),
            DriftPolicy::Rotate
        );
    }
}
