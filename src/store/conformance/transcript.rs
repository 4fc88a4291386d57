//! Conformance: transcript appends and rewrites, and deleting a session.

use super::{entry, ids, outbox_row};
use crate::contract::AgentMessage;
use crate::store::StateStoreExt;
use crate::store::{StateStore, TranscriptEntry};

/// Transcript entries come back in append order with their messages, across appends; sessions
/// are separate.
pub fn transcript_appends_in_order(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    store.append_transcript("s", &[]).unwrap();
    store
        .append_transcript(
            "s",
            &[TranscriptEntry {
                entry_id: "c".into(),
                message: AgentMessage::assistant("three"),
            }],
        )
        .unwrap();
    store
        .append_transcript("t", &[entry("x", "other")])
        .unwrap();
    let loaded = store.load_transcript("s").unwrap();
    assert_eq!(
        loaded,
        vec![
            entry("a", "1"),
            entry("b", "2"),
            TranscriptEntry {
                entry_id: "c".into(),
                message: AgentMessage::assistant("three"),
            },
        ],
        "{at}"
    );
    assert_eq!(ids(store, "t"), ["x"], "{at}");
    assert!(store.load_transcript("none").unwrap().is_empty(), "{at}");
}

/// A rewrite naming one unknown entry changes nothing (all or none) and names the entry; a
/// valid rewrite replaces the message in place.
pub fn transcript_rewrite_is_atomic(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("a", "1"), entry("b", "2")])
        .unwrap();
    let err = store
        .replace_transcript_entries("s", &[entry("a", "changed"), entry("zzz", "x")])
        .unwrap_err();
    assert!(err.to_string().contains("zzz"), "{at}: {err}");
    let t = store.load_transcript("s").unwrap();
    assert_eq!(t[0].message.plain_text(), "1", "{at}: partial rewrite");
    store
        .replace_transcript_entries("s", &[entry("b", "two")])
        .unwrap();
    let t = store.load_transcript("s").unwrap();
    assert_eq!(
        t.iter().map(|e| e.entry_id.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{at}: order kept"
    );
    assert_eq!(t[1].message.plain_text(), "two", "{at}");
}

/// Deleting a session (a reset) removes its transcript and bootstrap marks and says how many
/// entries went; its queued outbox rows and other sessions stay; an unknown session is 0.
pub fn delete_session(store: &dyn StateStore) {
    let at = store.location();
    store
        .append_transcript("s", &[entry("1", "x"), entry("2", "y")])
        .unwrap();
    store.mark_bootstrapped("s", "e").unwrap();
    store.enqueue_outbox(&outbox_row("s", "turn-1")).unwrap();
    store
        .append_transcript("other", &[entry("1", "z")])
        .unwrap();
    assert_eq!(store.delete_session("s").unwrap(), 2, "{at}");
    assert!(ids(store, "s").is_empty(), "{at}: transcript kept");
    assert!(!store.is_bootstrapped("s", "e").unwrap(), "{at}: mark kept");
    assert_eq!(store.pending_outbox("s").unwrap().len(), 1, "{at}");
    assert_eq!(ids(store, "other"), ["1"], "{at}: another session touched");
    assert_eq!(store.stats().unwrap().transcript_entries, 1, "{at}");
    assert_eq!(store.delete_session("missing").unwrap(), 0, "{at}");
    store
        .append_transcript("s", &[entry("3", "again")])
        .unwrap();
    assert_eq!(ids(store, "s"), ["3"], "{at}: the id is usable again");
}
