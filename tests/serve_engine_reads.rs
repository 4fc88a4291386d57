//! `ctxbridge serve` with the sample engine: reading a session's conversation back across
//! rotations onto new backend threads (docs/serve.md#the-serve-command "Sessions") — `thread/read`,
//! `thread/turns/list` and `thread/items/list` under the client's id, and the Codex TUI's way of
//! opening a session. Skips loudly without Codex.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve_engine.rs"]
mod serve_engine_support;
#[path = "support/serve.rs"]
mod serve_support;
#[path = "support/ws_client.rs"]
mod ws_client;

use serde_json::{json, Value};

use serve_engine_support::{four_turns, start, CONTEXT, FOUR_PROMPTS};
use ws_client::Client;

/// The user-message texts of a list of turns, in order.
fn user_texts(turns: &[Value]) -> Vec<String> {
    turns
        .iter()
        .flat_map(|turn| turn["items"].as_array().cloned().unwrap_or_default())
        .filter(|item| item["type"] == "userMessage")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect()
}

/// After two rotations (turns 3 and 4 start new backend threads), `thread/read` and
/// `thread/turns/list` of the client id show the conversation as the user had it: every
/// prompt once, in order, no projection text, under the client's id; the earlier threads'
/// turns come from the transcript, the current thread's from Codex; pages follow
/// `limit`, `sortDirection` and the cursors given.
#[tokio::test(flavor = "multi_thread")]
async fn reads_show_the_conversation_across_rotations() {
    let Some(env) = start().await else {
        return;
    };
    let (mut c, thread) = four_turns(&env).await;
    let prompts = FOUR_PROMPTS;
    assert_ne!(env.backend_of(&thread), thread, "the session rotated");

    let read = c
        .call(
            json!("r"),
            "thread/read",
            json!({"threadId": thread, "includeTurns": true}),
        )
        .await;
    assert_eq!(read["result"]["thread"]["id"], thread, "{read}");
    let backend = env.backend_of(&thread);
    assert!(
        !read.to_string().contains(&backend),
        "the current backend thread {backend} shows through: {read}"
    );
    let turns = read["result"]["thread"]["turns"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"));
    assert_eq!(user_texts(turns), prompts, "{read}");
    assert!(!read.to_string().contains(CONTEXT), "{read}");
    let replies = turns
        .iter()
        .filter(|t| {
            t["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["type"] == "agentMessage")
        })
        .count();
    assert_eq!(replies, 4, "every turn shows its reply: {read}");
    let bare = c
        .call(json!("r2"), "thread/read", json!({"threadId": thread}))
        .await;
    assert_eq!(bare["result"]["thread"]["id"], thread, "{bare}");
    assert!(
        bare["result"]["thread"]["turns"]
            .as_array()
            .map_or(true, Vec::is_empty),
        "no turns without includeTurns: {bare}"
    );

    // Newest first by default, two at a time.
    let first = c
        .call(
            json!("p1"),
            "thread/turns/list",
            json!({"threadId": thread, "limit": 2}),
        )
        .await;
    let page = first["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{first}"));
    assert_eq!(user_texts(page), ["fourth message", "third message"]);
    let next = first["result"]["nextCursor"].clone();
    assert!(next.is_string(), "{first}");
    let second = c
        .call(
            json!("p2"),
            "thread/turns/list",
            json!({"threadId": thread, "limit": 2, "cursor": next}),
        )
        .await;
    let page = second["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{second}"));
    assert_eq!(user_texts(page), ["second message", "hello there"]);
    assert!(second["result"]["nextCursor"].is_null(), "{second}");
    let ascending = c
        .call(
            json!("p3"),
            "thread/turns/list",
            json!({"threadId": thread, "sortDirection": "asc"}),
        )
        .await;
    let page = ascending["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{ascending}"));
    assert_eq!(user_texts(page), prompts);
    assert!(!ascending.to_string().contains(CONTEXT), "{ascending}");
    env.handle.shutdown().await;
}

/// The user-message texts of `thread/items/list` entries, in order.
fn entry_user_texts(entries: &[Value]) -> Vec<String> {
    let items: Vec<Value> = entries.iter().map(|e| e["item"].clone()).collect();
    user_texts(&[json!({ "items": items })])
}

/// The Codex TUI's way of opening a session (0.171): `thread/resume` with `excludeTurns` and
/// `initialTurnsPage`, then `thread/turns/list` from the answer's `turnsBackwardsCursor`
/// (`itemsView: "notLoaded"`) and `thread/items/list` from its `itemsBackwardsCursor`. After
/// two rotations every answer covers the whole conversation under the client's id — the
/// initial page the newest turns, the turn list every turn without items, the item list every
/// prompt and reply newest first with the user's own words and each item's turn — and a
/// `turnId` filter with an item anchor pages within one earlier turn.
#[tokio::test(flavor = "multi_thread")]
async fn resume_pages_turns_and_items_across_rotations() {
    let Some(env) = start().await else {
        return;
    };
    let (_c, thread) = four_turns(&env).await;
    let prompts = FOUR_PROMPTS;
    assert_ne!(env.backend_of(&thread), thread, "the session rotated");

    let mut tui = Client::connect(&env.url()).await;
    tui.initialize_ok().await;
    let resume = tui
        .call(
            json!("resume"),
            "thread/resume",
            json!({"threadId": thread, "excludeTurns": true,
                   "initialTurnsPage": {"limit": 2, "itemsView": "full"}}),
        )
        .await;
    let result = &resume["result"];
    assert_eq!(result["thread"]["id"], thread, "{resume}");
    assert!(
        result["thread"]["turns"]
            .as_array()
            .map_or(true, Vec::is_empty),
        "excludeTurns: {resume}"
    );
    let initial = result["initialTurnsPage"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{resume}"));
    assert_eq!(user_texts(initial), ["fourth message", "third message"]);
    assert!(!resume.to_string().contains(CONTEXT), "{resume}");
    let backend = env.backend_of(&thread);
    for field in [
        "initialTurnsPage",
        "turnsBackwardsCursor",
        "itemsBackwardsCursor",
    ] {
        assert!(
            !result[field].is_null() && !result[field].to_string().contains(&backend),
            "{field} is ctxbridge's: {resume}"
        );
    }
    assert!(
        !resume.to_string().contains(&backend),
        "the backend thread {backend} shows through (its id, session id or rollout path): {resume}"
    );

    let turns = tui
        .call(
            json!("turns"),
            "thread/turns/list",
            json!({"threadId": thread, "cursor": result["turnsBackwardsCursor"],
                   "limit": 5, "sortDirection": "desc", "itemsView": "notLoaded"}),
        )
        .await;
    let page = turns["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{turns}"));
    assert_eq!(page.len(), 4, "every turn: {turns}");
    assert!(
        page.iter()
            .all(|t| t["items"] == json!([]) && t["itemsView"] == "notLoaded"),
        "{turns}"
    );
    assert!(turns["result"]["nextCursor"].is_null(), "{turns}");
    let turn_ids: Vec<Value> = page.iter().rev().map(|t| t["id"].clone()).collect();

    let items = tui
        .call(
            json!("items"),
            "thread/items/list",
            json!({"threadId": thread, "cursor": result["itemsBackwardsCursor"],
                   "limit": 100, "sortDirection": "desc"}),
        )
        .await;
    let entries = items["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{items}"));
    let mut newest_first = prompts.to_vec();
    newest_first.reverse();
    assert_eq!(entry_user_texts(entries), newest_first, "{items}");
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["item"]["type"] == "agentMessage")
            .count(),
        4,
        "every reply: {items}"
    );
    assert!(!items.to_string().contains(CONTEXT), "{items}");
    let entry_turns: std::collections::BTreeSet<String> = entries
        .iter()
        .map(|e| e["turnId"].as_str().unwrap().to_owned())
        .collect();
    let listed: std::collections::BTreeSet<String> = turn_ids
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(entry_turns, listed, "items name the listed turns");

    let first_turn = tui
        .call(
            json!("first"),
            "thread/items/list",
            json!({"threadId": thread, "turnId": turn_ids[0]}),
        )
        .await;
    let first = first_turn["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{first_turn}"));
    assert_eq!(entry_user_texts(first), ["hello there"], "{first_turn}");
    let anchor = json!({"type": "item", "itemId": first[0]["item"]["id"]});
    let after = tui
        .call(
            json!("after"),
            "thread/items/list",
            json!({"threadId": thread, "turnId": turn_ids[0], "cursor": anchor}),
        )
        .await;
    let rest = after["result"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{after}"));
    assert_eq!(rest.len(), first.len() - 1, "{after}");
    assert!(
        rest.iter().all(|e| e["item"]["type"] == "agentMessage"),
        "{after}"
    );
    env.handle.shutdown().await;
}
