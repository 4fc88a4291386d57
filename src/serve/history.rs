//! A session's conversation as its client had it (docs/serve.md#the-serve-command "Rewriting"): `thread/read`,
//! `thread/resume` (its turns, `initialTurnsPage` and backwards cursors), `thread/turns/list`
//! and `thread/items/list` of a client thread id show the turns (items) of the session's
//! earlier backend threads rebuilt from ctxbridge's transcript, then the current backend
//! thread's, with user-message items holding the user's own input instead of a projected turn
//! input. Across backend threads ctxbridge pages itself, with its own `ctxbridge:N` cursors (a
//! position between turns, or between items).
//!
//! Everything here is pure; the engine sessions fetch the upstream's turns and the transcript.

use serde_json::{json, Value};

use crate::contract::{AgentMessage, Role};
use crate::projection::render::split_framed_input;

/// The prefix of the cursors ctxbridge gives for a session spanning several backend threads.
const CURSOR_PREFIX: &str = "ctxbridge:";

/// Replaces a projected turn input in a turn's `userMessage` items by the user's own request
/// (the prompt after the projection frame, docs/architecture.md#rendering); other content is kept.
pub fn show_own_input(turn: &mut Value) {
    let Some(items) = turn.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    items.iter_mut().for_each(show_own_item_input);
}

/// Replaces a projected turn input in a `userMessage` item by the user's own request; other
/// items and content are kept.
pub fn show_own_item_input(item: &mut Value) {
    if item.get("type").and_then(Value::as_str) != Some("userMessage") {
        return;
    }
    let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    for part in content {
        let own = part
            .get("text")
            .and_then(Value::as_str)
            .and_then(split_framed_input)
            .map(|(_context, prompt)| prompt.to_owned());
        if let (Some(own), Some(object)) = (own, part.as_object_mut()) {
            object.insert("text".into(), Value::String(own));
            object.insert("text_elements".into(), json!([]));
        }
    }
}

/// The first user-message text of `turns`.
pub fn first_user_text(turns: &[Value]) -> Option<String> {
    turns
        .iter()
        .flat_map(|turn| {
            turn.get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("userMessage"))
        .flat_map(|item| {
            item.get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find_map(|part| part.get("text").and_then(Value::as_str).map(str::to_owned))
}

/// A thread object's `preview` as the user wrote it: `first_words` (the session's first
/// request, when earlier backend threads hold it), else the preview without a projection
/// frame.
pub fn show_own_preview(thread: &mut Value, first_words: Option<String>) {
    let Some(object) = thread.as_object_mut() else {
        return;
    };
    let own = match first_words {
        Some(words) => Some(words),
        None => object
            .get("preview")
            .and_then(Value::as_str)
            .and_then(split_framed_input)
            .map(|(_context, prompt)| prompt.to_owned()),
    };
    if let Some(own) = own {
        object.insert("preview".into(), Value::String(own));
    }
}

/// The transcript messages of earlier backend threads as app-server turns: each user message
/// opens a turn (a `userMessage` item with its text), each assistant reply adds an
/// `agentMessage` item; other messages (tool results, summaries) are not shown. Ids are
/// derived from the client thread id and the position, so they are stable across reads.
pub fn transcript_turns(client_thread_id: &str, messages: &[AgentMessage]) -> Vec<Value> {
    let mut turns: Vec<Value> = Vec::new();
    for message in messages {
        match message.role {
            Role::User => {
                let n = turns.len();
                let id = format!("ctxbridge-{client_thread_id}-{n}");
                turns.push(json!({
                    "id": id,
                    "status": "completed",
                    "error": null,
                    "itemsView": "full",
                    "items": [{
                        "type": "userMessage",
                        "id": format!("{id}-user"),
                        "content": [{"type": "text", "text": message.plain_text(), "text_elements": []}],
                    }],
                }));
            }
            Role::Assistant => {
                let n = turns.len().saturating_sub(1);
                let Some(items) = turns
                    .last_mut()
                    .and_then(|turn| turn.get_mut("items"))
                    .and_then(Value::as_array_mut)
                else {
                    continue;
                };
                let id = format!("ctxbridge-{client_thread_id}-{n}-agent-{}", items.len());
                items.push(json!({"type": "agentMessage", "id": id, "text": message.plain_text()}));
            }
            _ => {}
        }
    }
    turns
}

/// Shows a transcript turn (see [`transcript_turns`]) in the `itemsView` a client asked for:
/// `"notLoaded"` drops its items; `"summary"` and `"full"` keep them (a transcript turn holds
/// only the user's message and the replies, which is what both views show). Unknown or absent
/// views keep the turn as it is.
pub fn view_transcript_turn(turn: &mut Value, view: Option<&str>) {
    let Some(object) = turn.as_object_mut() else {
        return;
    };
    match view {
        Some("notLoaded") => {
            object.insert("items".into(), json!([]));
            object.insert("itemsView".into(), json!("notLoaded"));
        }
        Some(view @ ("summary" | "full")) => {
            object.insert("itemsView".into(), json!(view));
        }
        _ => {}
    }
}

/// A page request of `thread/turns/list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// `cursor`, as the client sent it.
    pub cursor: Option<String>,
    /// `limit` (none: every turn).
    pub limit: Option<usize>,
    /// `sortDirection: "asc"` (default descending).
    pub ascending: bool,
}

impl PageRequest {
    /// The page request in `thread/turns/list` params.
    pub fn of(params: &Value) -> PageRequest {
        PageRequest {
            cursor: params
                .get("cursor")
                .and_then(Value::as_str)
                .map(str::to_owned),
            limit: params
                .get("limit")
                .and_then(Value::as_u64)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            ascending: params.get("sortDirection").and_then(Value::as_str) == Some("asc"),
        }
    }
}

/// The items of `turns` (oldest first) as `thread/items/list` entries, restricted to the turn
/// `turn_id` when given.
pub fn item_entries(turns: &[Value], turn_id: Option<&str>) -> Vec<Value> {
    turns
        .iter()
        .filter(|turn| match turn_id {
            Some(id) => turn.get("id").and_then(Value::as_str) == Some(id),
            None => true,
        })
        .flat_map(|turn| {
            let id = turn.get("id").cloned().unwrap_or(Value::Null);
            turn.get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(move |item| {
                    json!({"turnId": id, "item": item, "startedAtMs": null, "completedAtMs": null})
                })
        })
        .collect()
}

/// A page request of `thread/items/list` (ascending by default) over `entries`: an item
/// anchor cursor (`{"type": "item", "itemId": …}`) becomes the position after the item
/// (ascending) or before it (descending); a string cursor is kept.
pub fn items_page_request(params: &Value, entries: &[Value]) -> Result<PageRequest, String> {
    let ascending = params.get("sortDirection").and_then(Value::as_str) != Some("desc");
    let limit = params
        .get("limit")
        .and_then(Value::as_u64)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(anchor) => {
            let item = anchor
                .get("itemId")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("thread/items/list: cursor {anchor} names no item"))?;
            let at = entries
                .iter()
                .position(|e| e.pointer("/item/id").and_then(Value::as_str) == Some(item))
                .ok_or_else(|| format!("thread/items/list: no item `{item}` in the turn"))?;
            let position = if ascending { at + 1 } else { at };
            cursor(position).as_str().map(str::to_owned)
        }
    };
    Ok(PageRequest {
        cursor,
        limit,
        ascending,
    })
}

/// The cursor of a session's `len` turns that `thread/resume` answers as
/// `turnsBackwardsCursor`: a descending page from it starts with the newest turn. Null when
/// there are no turns.
pub fn backwards_cursor(len: usize) -> Value {
    if len == 0 {
        Value::Null
    } else {
        cursor(len)
    }
}

/// A cursor is a position between turns (`0..=len`): ascending pages start at it, descending
/// pages end before it.
fn cursor(position: usize) -> Value {
    Value::String(format!("{CURSOR_PREFIX}{position}"))
}

/// One page of `turns` (oldest first) as a `thread/turns/list` result (of items: a
/// `thread/items/list` result), or a message naming a cursor ctxbridge did not give.
pub fn page(turns: Vec<Value>, request: &PageRequest) -> Result<Value, String> {
    let len = turns.len();
    let position = match &request.cursor {
        None => None,
        Some(text) => {
            let position = text
                .strip_prefix(CURSOR_PREFIX)
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= len)
                .ok_or_else(|| {
                    format!("cursor `{text}` is not one ctxbridge gave for this thread")
                })?;
            Some(position)
        }
    };
    let limit = request.limit.map_or(len, |n| n.max(1));
    let (start, end) = if request.ascending {
        let start = position.unwrap_or(0);
        (start, start.saturating_add(limit).min(len))
    } else {
        let end = position.unwrap_or(len);
        (end.saturating_sub(limit), end)
    };
    let mut data: Vec<Value> = turns.into_iter().skip(start).take(end - start).collect();
    let (next, backwards) = if request.ascending {
        let next = (end < len).then(|| cursor(end));
        (next, (!data.is_empty()).then(|| cursor(start + 1)))
    } else {
        data.reverse();
        let next = (start > 0).then(|| cursor(start));
        (next, (!data.is_empty()).then(|| cursor(end - 1)))
    };
    Ok(json!({
        "data": data,
        "nextCursor": next,
        "backwardsCursor": backwards,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::projection::render::{FRAME_HEAD, FRAME_TAIL};

    /// A projected turn input shows as the user's request alone; a bare one and non-text
    /// content are untouched.
    #[test]
    fn projected_input_shows_as_the_request() {
        let framed = format!("{FRAME_HEAD}[user]\nold{FRAME_TAIL}new question");
        let mut turn = json!({"items": [
            {"type": "userMessage", "id": "u", "content": [
                {"type": "text", "text": framed, "text_elements": []},
                {"type": "localImage", "path": "/x.png"}
            ]},
            {"type": "agentMessage", "id": "a", "text": framed}
        ]});
        show_own_input(&mut turn);
        assert_eq!(turn["items"][0]["content"][0]["text"], "new question");
        assert_eq!(turn["items"][0]["content"][1]["path"], "/x.png");
        assert_eq!(
            turn["items"][1]["text"], framed,
            "only user messages change"
        );
        let mut bare = json!({"items": [{"type": "userMessage", "id": "u", "content": [{"type": "text", "text": "hi"}]}]});
        show_own_input(&mut bare);
        assert_eq!(bare["items"][0]["content"][0]["text"], "hi");
    }

    /// A rotated session's preview is its first request; a framed preview loses its frame.
    #[test]
    fn previews_show_the_users_words() {
        let framed = format!("{FRAME_HEAD}[user]\nold{FRAME_TAIL}new question");
        let mut thread = json!({"preview": framed});
        show_own_preview(&mut thread, None);
        assert_eq!(thread["preview"], "new question");
        let earlier = transcript_turns("c", &[AgentMessage::user("first")]);
        show_own_preview(&mut thread, first_user_text(&earlier));
        assert_eq!(thread["preview"], "first");
    }

    /// Each user message opens a turn; replies join it; other messages are not shown.
    #[test]
    fn transcript_becomes_turns() {
        let messages = vec![
            AgentMessage::user("one"),
            AgentMessage::assistant("re one"),
            AgentMessage::user("two"),
            AgentMessage::assistant("re two"),
        ];
        let turns = transcript_turns("c", &messages);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[1]["items"][0]["type"], "userMessage");
        assert_eq!(turns[1]["items"][0]["content"][0]["text"], "two");
        assert_eq!(turns[1]["items"][1]["text"], "re two");
        assert_ne!(turns[0]["id"], turns[1]["id"]);
        assert_eq!(transcript_turns("c", &messages), turns, "ids are stable");
    }

    /// `notLoaded` empties a transcript turn's items; the other views keep them.
    #[test]
    fn transcript_turns_take_the_asked_view() {
        let turns = transcript_turns(
            "c",
            &[AgentMessage::user("one"), AgentMessage::assistant("re one")],
        );
        let mut bare = turns[0].clone();
        view_transcript_turn(&mut bare, Some("notLoaded"));
        assert_eq!(bare["items"], json!([]));
        assert_eq!(bare["itemsView"], "notLoaded");
        assert_eq!(bare["id"], turns[0]["id"]);
        let mut summary = turns[0].clone();
        view_transcript_turn(&mut summary, Some("summary"));
        assert_eq!(summary["itemsView"], "summary");
        assert_eq!(summary["items"], turns[0]["items"]);
        let mut unasked = turns[0].clone();
        view_transcript_turn(&mut unasked, None);
        assert_eq!(unasked, turns[0]);
    }

    /// Items of every turn in order, each naming its turn; a turn filter keeps that turn's;
    /// an item anchor pages after it ascending and before it descending.
    #[test]
    fn items_page_across_turns() {
        let turns = transcript_turns(
            "c",
            &[
                AgentMessage::user("one"),
                AgentMessage::assistant("re one"),
                AgentMessage::user("two"),
                AgentMessage::assistant("re two"),
            ],
        );
        let entries = item_entries(&turns, None);
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[2]["turnId"], turns[1]["id"]);
        assert_eq!(entries[3]["item"]["text"], "re two");
        let second = item_entries(&turns, turns[1]["id"].as_str());
        assert_eq!(second.len(), 2);
        let texts = |result: &Value| -> Vec<String> {
            result["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let item = &e["item"];
                    item["text"]
                        .as_str()
                        .or(item["content"][0]["text"].as_str())
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        let newest = json!({"sortDirection": "desc", "limit": 3, "cursor": backwards_cursor(4)});
        let request = items_page_request(&newest, &entries).unwrap();
        let first = page(entries.clone(), &request).unwrap();
        assert_eq!(texts(&first), ["re two", "two", "re one"]);
        let rest = json!({"sortDirection": "desc", "cursor": first["nextCursor"]});
        let request = items_page_request(&rest, &entries).unwrap();
        assert_eq!(texts(&page(entries.clone(), &request).unwrap()), ["one"]);
        let default = items_page_request(&json!({}), &entries).unwrap();
        assert!(default.ascending, "items default to ascending");
        let anchor = json!({"type": "item", "itemId": entries[0]["item"]["id"]});
        let after = items_page_request(&json!({"cursor": anchor}), &entries).unwrap();
        assert_eq!(
            texts(&page(entries.clone(), &after).unwrap()),
            ["re one", "two", "re two"]
        );
        let before = json!({"cursor": {"type": "item", "itemId": entries[2]["item"]["id"]}, "sortDirection": "desc"});
        let before = items_page_request(&before, &entries).unwrap();
        assert_eq!(
            texts(&page(entries.clone(), &before).unwrap()),
            ["re one", "one"]
        );
        let unknown = json!({"cursor": {"type": "item", "itemId": "nope"}});
        assert!(items_page_request(&unknown, &entries)
            .unwrap_err()
            .contains("nope"));
    }

    /// The backwards cursor of a resume pages descending from the newest turn, included.
    #[test]
    fn backwards_cursor_starts_at_the_newest_turn() {
        let turns: Vec<Value> = (0..3).map(|i| json!({"id": i})).collect();
        assert!(backwards_cursor(0).is_null());
        let from_newest = PageRequest {
            cursor: backwards_cursor(3).as_str().map(str::to_owned),
            limit: Some(2),
            ascending: false,
        };
        assert_eq!(ids(&page(turns, &from_newest).unwrap()), vec![2, 1]);
    }

    fn ids(result: &Value) -> Vec<u64> {
        result["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_u64().unwrap())
            .collect()
    }

    /// Descending by default from the newest; cursors continue where a page ended and reverse
    /// including the anchor turn; a foreign cursor is refused.
    #[test]
    fn pages_both_ways() {
        let turns: Vec<Value> = (0..5).map(|i| json!({"id": i})).collect();
        let desc = |cursor: Option<&Value>| PageRequest {
            cursor: cursor.and_then(Value::as_str).map(str::to_owned),
            limit: Some(2),
            ascending: false,
        };
        let first = page(turns.clone(), &desc(None)).unwrap();
        assert_eq!(ids(&first), vec![4, 3]);
        let second = page(turns.clone(), &desc(Some(&first["nextCursor"]))).unwrap();
        assert_eq!(ids(&second), vec![2, 1]);
        let third = page(turns.clone(), &desc(Some(&second["nextCursor"]))).unwrap();
        assert_eq!(ids(&third), vec![0]);
        assert!(third["nextCursor"].is_null());
        let back = PageRequest {
            cursor: second["backwardsCursor"].as_str().map(str::to_owned),
            limit: Some(3),
            ascending: true,
        };
        assert_eq!(ids(&page(turns.clone(), &back).unwrap()), vec![2, 3, 4]);
        let all = PageRequest {
            cursor: None,
            limit: None,
            ascending: true,
        };
        assert_eq!(
            ids(&page(turns.clone(), &all).unwrap()),
            vec![0, 1, 2, 3, 4]
        );
        let foreign = PageRequest {
            cursor: Some("abc".into()),
            limit: None,
            ascending: true,
        };
        assert!(page(turns, &foreign).unwrap_err().contains("`abc`"));
    }
}
