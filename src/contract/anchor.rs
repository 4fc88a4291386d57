//! Where a transcript entry sits, as OpenClaw's SDK names it (`TranscriptEntryAnchor` and
//! `TranscriptTurnAdmission`, 2026.9.x): `commitTurn` gets the admitted user entry and the
//! accepted terminal entry of a durable turn as anchors, not as messages (the messages are in
//! its `messages`).

use serde::{Deserialize, Serialize};

/// One transcript entry's place (`TranscriptEntryAnchor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntryAnchor {
    /// The agent the session belongs to (`agent.id`).
    pub agent_id: String,
    /// The session the entry is in.
    pub session_id: String,
    /// The host's stable key of the session.
    pub session_key: String,
    /// Where the transcript is kept: the state store (as in the session target).
    pub store_path: String,
    /// The transcript's rewrite generation: positions count within one generation, and a
    /// rewrite starts the next.
    pub generation: String,
    /// The entry's id.
    pub entry_id: String,
    /// The entry's sequence number in the stored transcript.
    pub raw_seq: u64,
    /// The entry before it (`null` for the first entry).
    pub effective_parent_id: Option<String>,
    /// The entry's position among the session's active messages.
    pub active_message_position: u64,
    /// The caller's idempotency key of the entry, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// The user entry that opened a logical turn (`TranscriptTurnAdmission`): its anchor, the
/// turn's id and `role: "user"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptTurnAdmission {
    /// The entry's place.
    #[serde(flatten)]
    pub anchor: TranscriptEntryAnchor,
    /// The logical turn the entry admitted (the same as `commitTurn.advancementKey`).
    pub logical_turn_id: String,
    /// Always `"user"`.
    pub role: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON has the SDK's keys: the anchor's fields flat beside `logicalTurnId` and `role`,
    /// `effectiveParentId` null rather than absent, no `idempotencyKey` unless there is one.
    #[test]
    fn anchors_serialise_as_the_sdk_names_them() {
        let anchor = TranscriptEntryAnchor {
            agent_id: "main".into(),
            session_id: "s".into(),
            session_key: "k".into(),
            store_path: "/state/state.db".into(),
            generation: "0".into(),
            entry_id: "t1-user".into(),
            raw_seq: 4,
            effective_parent_id: None,
            active_message_position: 4,
            idempotency_key: None,
        };
        let admission = TranscriptTurnAdmission {
            anchor,
            logical_turn_id: "t1".into(),
            role: "user".into(),
        };
        let value = serde_json::to_value(&admission).unwrap();
        assert_eq!(
            value,
            json!({
                "agentId": "main", "sessionId": "s", "sessionKey": "k",
                "storePath": "/state/state.db", "generation": "0",
                "entryId": "t1-user", "rawSeq": 4, "effectiveParentId": null,
                "activeMessagePosition": 4, "logicalTurnId": "t1", "role": "user",
            })
        );
        let back: TranscriptTurnAdmission = serde_json::from_value(value).unwrap();
        assert_eq!(back, admission);
    }
}
