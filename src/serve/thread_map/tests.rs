//! The thread map and the rewriting of relayed messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use serde_json::json;

fn rotated() -> ThreadMap {
    let mut map = ThreadMap::new(None);
    map.bind("client-1", "backend-2").unwrap();
    map
}

/// Backend ids become client ids in notifications, thread objects and both list shapes;
/// unknown ids are left alone.
#[test]
fn rewrites_to_client() {
    let mut map = rotated();
    let mut note =
        json!({"threadId": "backend-2", "turn": {"id": "t", "items": [{"threadId": "backend-2"}]}});
    map.rewrite(&mut note, Direction::ToClient, None);
    assert_eq!(note["threadId"], "client-1");
    assert_eq!(note["turn"]["items"][0]["threadId"], "client-1");
    let mut started = json!({"thread": {"id": "backend-2", "path": "p"}, "model": "m"});
    map.rewrite(&mut started, Direction::ToClient, Some("thread/start"));
    assert_eq!(started["thread"]["id"], "client-1");
    let mut list = json!({"data": [{"id": "backend-2"}, {"id": "other"}]});
    map.rewrite(&mut list, Direction::ToClient, Some("thread/list"));
    assert_eq!(list, json!({"data": [{"id": "client-1"}, {"id": "other"}]}));
    let mut loaded = json!({"data": ["backend-2", "other"]});
    map.rewrite(&mut loaded, Direction::ToClient, Some("thread/loaded/list"));
    assert_eq!(loaded, json!({"data": ["client-1", "other"]}));
}

const CLIENT: &str = "01a23491-7ee8-7cd1-9b67-bcee5b8bc525";
const BACKEND: &str = "01a23491-8063-70f2-92ac-c612f652d1a3";

fn rollout(id: &str) -> String {
    format!("/home/u/.codex/sessions/2026/12/02/rollout-2026-12-02T02-24-40-{id}.jsonl")
}

/// A thread object of a rotated session names its client id everywhere Codex names the
/// thread: `id`, `sessionId`, the rollout `path`, and ids of related threads
/// (`forkedFromId`, `…ThreadId`) when they are mapped; other paths and ids are kept.
#[test]
fn thread_objects_name_no_backend_thread() {
    let mut map = ThreadMap::new(None);
    map.bind(CLIENT, BACKEND).unwrap();
    let mut read = json!({"thread": {
        "id": BACKEND, "sessionId": BACKEND, "path": rollout(BACKEND),
        "forkedFromId": BACKEND, "attachedToThreadId": BACKEND, "parentThreadId": "other",
        "turns": [{"items": [{"type": "imageView", "path": format!("/img/{BACKEND}.jsonl")},
                             {"type": "collabAgentToolCall", "senderThreadId": BACKEND}]}]
    }});
    map.rewrite(&mut read, Direction::ToClient, Some("thread/read"));
    let thread = &read["thread"];
    assert_eq!(thread["id"], CLIENT);
    assert_eq!(thread["sessionId"], CLIENT);
    assert_eq!(thread["path"], rollout(CLIENT).as_str());
    assert_eq!(thread["forkedFromId"], CLIENT);
    assert_eq!(thread["attachedToThreadId"], CLIENT);
    assert_eq!(thread["parentThreadId"], "other");
    let items = &thread["turns"][0]["items"];
    assert_eq!(items[0]["path"], format!("/img/{BACKEND}.jsonl").as_str());
    assert_eq!(items[1]["senderThreadId"], CLIENT);
    let mut list =
        json!({"data": [{"id": BACKEND, "sessionId": BACKEND, "path": rollout(BACKEND)}]});
    map.rewrite(&mut list, Direction::ToClient, Some("thread/list"));
    assert_eq!(
        list,
        json!({"data": [{"id": CLIENT, "sessionId": CLIENT, "path": rollout(CLIENT)}]})
    );
}

/// A client resuming by the rollout path it was shown reaches the backend thread's file.
#[test]
fn a_resume_by_path_reaches_the_backend_rollout() {
    let mut map = ThreadMap::new(None);
    map.bind(CLIENT, BACKEND).unwrap();
    let mut resume = json!({"threadId": CLIENT, "path": rollout(CLIENT)});
    map.rewrite(&mut resume, Direction::ToBackend, Some("thread/resume"));
    assert_eq!(
        resume,
        json!({"threadId": BACKEND, "path": rollout(BACKEND)})
    );
}

/// Only a rollout file's trailing UUID is a thread id.
#[test]
fn rollout_ids_are_found_only_in_rollout_names() {
    let path = rollout(BACKEND);
    let range = rollout_id_range(&path).unwrap();
    assert_eq!(&path[range], BACKEND);
    assert_eq!(
        rollout_id_range(&format!("rollout-x-{BACKEND}.jsonl")).map(|r| r.start),
        Some(10)
    );
    for other in [
        format!("/s/other-{BACKEND}.jsonl"),
        format!("/s/rollout-{BACKEND}.json"),
        format!("/rollout-x/{BACKEND}.jsonl"),
        "/s/rollout-01a23491-8063-70f2-92ac-c612f652d1aZ.jsonl".to_owned(),
        "/s/rollout-01a23491x8063-70f2-92ac-c612f652d1a3.jsonl".to_owned(),
        "/s/rollout-short.jsonl".to_owned(),
        "rollout-.jsonl".to_owned(),
        "/s/rollout-é01a23491-8063-70f2-92ac-c612f652d1a.jsonl".to_owned(),
        String::new(),
    ] {
        assert_eq!(rollout_id_range(&other), None, "{other}");
    }
}

/// Client ids become backend ids in requests; `data` of other methods is untouched.
#[test]
fn rewrites_to_backend() {
    let mut map = rotated();
    let mut req = json!({"threadId": "client-1", "input": [{"type": "text", "text": "client-1"}]});
    map.rewrite(&mut req, Direction::ToBackend, Some("turn/start"));
    assert_eq!(req["threadId"], "backend-2");
    assert_eq!(req["input"][0]["text"], "client-1");
    let mut other = json!({"data": ["client-1"]});
    map.rewrite(&mut other, Direction::ToBackend, Some("fs/read"));
    assert_eq!(other, json!({"data": ["client-1"]}));
}

/// Hidden backend threads (rotation targets) are dropped from `thread/list`; in
/// `thread/loaded/list` the session's current one shows as the client id, once, and one it
/// moved on from not at all. The hidden mark survives a restart through the store.
#[test]
fn lists_hide_rotated_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> =
        Arc::new(crate::store::SqliteStore::open(dir.path().join("s.db")).unwrap());
    let mut map = ThreadMap::new(Some(store.clone()));
    map.hide("old").unwrap();
    map.hide("new").unwrap();
    map.bind("client", "new").unwrap();
    let mut list = json!({"data": [{"id": "client"}, {"id": "old"}, {"id": "new"}, {"id": "x"}]});
    map.rewrite(&mut list, Direction::ToClient, Some("thread/list"));
    assert_eq!(list, json!({"data": [{"id": "client"}, {"id": "x"}]}));
    let mut loaded = json!({"data": ["client", "old", "new", "x"]});
    map.rewrite(&mut loaded, Direction::ToClient, Some("thread/loaded/list"));
    assert_eq!(loaded, json!({"data": ["client", "x"]}));
    let mut reopened = ThreadMap::new(Some(store));
    assert!(reopened.is_hidden("old"));
    assert!(!reopened.is_hidden("x"));
}

/// The map survives a restart through the store; unknown ids map to themselves.
#[test]
fn persists_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store: Arc<dyn StateStore> = Arc::new(crate::store::SqliteStore::open(&path).unwrap());
    ThreadMap::new(Some(store.clone())).bind("c", "b").unwrap();
    let mut reopened = ThreadMap::new(Some(store));
    assert_eq!(reopened.backend_of("c"), "b");
    assert_eq!(reopened.client_of("b"), "c");
    assert_eq!(reopened.backend_of("unknown"), "unknown");
}

/// A session's settings are its `thread/start`'s thread fields; a resume overlays the
/// fields it sets; both survive a restart through the store.
#[test]
fn settings_are_recorded_and_overlaid() {
    let start = serde_json::json!({
        "cwd": "/w", "approvalPolicy": "on-request", "config": {"a": 1},
        "ephemeral": false, "threadSource": "user", "developerInstructions": "x", "model": null
    });
    let settings = thread_settings(&start);
    assert_eq!(
        Value::Object(settings.clone()),
        serde_json::json!({"cwd": "/w", "approvalPolicy": "on-request", "config": {"a": 1}})
    );
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> =
        Arc::new(crate::store::SqliteStore::open(dir.path().join("s.db")).unwrap());
    let mut map = ThreadMap::new(Some(store.clone()));
    map.record_settings("c", settings, false).unwrap();
    let resume = serde_json::json!({"threadId": "c", "cwd": "/v", "excludeTurns": true});
    map.record_settings("c", thread_settings(&resume), true)
        .unwrap();
    let mut reopened = ThreadMap::new(Some(store));
    assert_eq!(
        reopened.settings("c").map(Value::Object),
        Some(serde_json::json!({"cwd": "/v", "approvalPolicy": "on-request", "config": {"a": 1}}))
    );
    assert_eq!(reopened.settings("other"), None);
}
