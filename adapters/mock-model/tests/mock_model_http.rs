//! Behaviour of the mock model server over real loopback HTTP, read back with an SSE parser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ctxbridge_mock_model::{
    read_log, MockModelConfig, MockModelServer, RequestKind, ScriptedReply, Usage,
};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};

struct Reply {
    status: u16,
    content_type: String,
    /// (event name, data) for an SSE reply.
    events: Vec<(String, Value)>,
    /// The body for a non-SSE reply.
    json: Value,
}

impl Reply {
    fn types(&self) -> Vec<&str> {
        self.events
            .iter()
            .map(|(_, data)| data["type"].as_str().unwrap())
            .collect()
    }

    fn event(&self, kind: &str) -> &Value {
        &self
            .events
            .iter()
            .find(|(_, data)| data["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} event in {:?}", self.types()))
            .1
    }

    fn text(&self) -> String {
        self.events
            .iter()
            .filter(|(_, data)| data["type"] == "response.output_text.delta")
            .map(|(_, data)| data["delta"].as_str().unwrap().to_owned())
            .collect()
    }
}

async fn post(url: &str, body: &Value) -> Reply {
    post_raw(url, body.to_string()).await
}

async fn post_raw(url: &str, body: String) -> Reply {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer test-key")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    if content_type.starts_with("text/event-stream") {
        let mut stream = response.bytes_stream().eventsource();
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            let data: Value = serde_json::from_str(&event.data).unwrap();
            assert_eq!(
                event.event,
                data["type"].as_str().unwrap(),
                "event name matches type"
            );
            events.push((event.event, data));
        }
        Reply {
            status,
            content_type,
            events,
            json: Value::Null,
        }
    } else {
        let json = response.json().await.unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            events: Vec::new(),
            json,
        }
    }
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

fn request(input: Value) -> Value {
    json!({"model": "mock-model", "stream": true, "input": input})
}

async fn start() -> MockModelServer {
    MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap()
}

/// A normal request streams the full event sequence Codex expects, the deltas add up to the
/// finished item's text, and `response.completed` carries the id and an estimated usage.
#[tokio::test]
async fn streams_the_full_event_sequence_with_usage() {
    let server = start().await;
    let body = request(json!([user("hello there")]));
    let reply = post(&format!("{}/responses", server.base_url()), &body).await;

    assert_eq!(reply.status, 200);
    assert!(reply.content_type.starts_with("text/event-stream"));
    let types = reply.types();
    assert_eq!(types[0], "response.created");
    assert_eq!(types[1], "response.output_item.added");
    let deltas = types
        .iter()
        .filter(|t| **t == "response.output_text.delta")
        .count();
    assert!(deltas >= 2, "several deltas, got {types:?}");
    assert_eq!(types[types.len() - 2], "response.output_item.done");
    assert_eq!(types[types.len() - 1], "response.completed");

    assert_eq!(reply.text(), "mock reply to: hello there");
    let done = reply.event("response.output_item.done");
    assert_eq!(done["item"]["type"], "message");
    assert_eq!(done["item"]["role"], "assistant");
    assert_eq!(done["item"]["content"][0]["type"], "output_text");
    assert_eq!(
        done["item"]["content"][0]["text"],
        "mock reply to: hello there"
    );

    let created_id = reply.event("response.created")["response"]["id"].clone();
    let completed = reply.event("response.completed");
    assert_eq!(completed["response"]["id"], created_id);
    let usage = &completed["response"]["usage"];
    let body_len = u64::try_from(body.to_string().len()).unwrap();
    assert_eq!(usage["input_tokens"], body_len.div_ceil(4));
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!(
        (r.seq, r.method.as_str(), r.path.as_str()),
        (1, "POST", "/v1/responses")
    );
    assert_eq!(r.kind, RequestKind::Responses);
    assert_eq!(r.body, body);
    assert_eq!(r.header("Authorization"), Some("Bearer test-key"));
    assert_eq!(r.input_texts("user"), vec!["hello there".to_owned()]);
    assert_eq!(
        r.response_id.as_ref(),
        created_id.as_str().map(str::to_owned).as_ref()
    );
    server.shutdown().await;
}

/// `/responses` without the `/v1` prefix is served too, and a string `input` counts as one user
/// message.
#[tokio::test]
async fn accepts_the_unprefixed_path_and_string_input() {
    let server = start().await;
    let url = format!("http://{}/responses", server.addr());
    let reply = post(&url, &request(json!("plain string"))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "mock reply to: plain string");
    assert_eq!(server.requests()[0].path, "/responses");
}

/// Queued replies are used in order, then the default reply takes over; a scripted usage is
/// reported as given.
#[tokio::test]
async fn scripted_replies_are_used_in_order_then_the_default() {
    let server = start().await;
    server.push_reply(ScriptedReply::text("first scripted"));
    server.push_reply(ScriptedReply::text("second scripted").with_usage(Usage::new(7, 3)));
    let url = format!("{}/responses", server.base_url());
    let body = request(json!([user("q")]));

    let first = post(&url, &body).await;
    let second = post(&url, &body).await;
    let third = post(&url, &body).await;
    assert_eq!(first.text(), "first scripted");
    assert_eq!(second.text(), "second scripted");
    let usage = &second.event("response.completed")["response"]["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64()
        ),
        (Some(7), Some(3))
    );
    assert_eq!(usage["total_tokens"], 10);
    assert_eq!(third.text(), "mock reply to: q");
    assert_eq!(server.pending_replies(), 0);

    server.set_default_reply(ScriptedReply::text("new default"));
    assert_eq!(post(&url, &body).await.text(), "new default");
}

/// A reply kept for a condition goes to the first request that meets it, whatever the arrival
/// order, and before the plain queue; requests that meet none take the queue, then the default.
#[tokio::test]
async fn matched_replies_go_to_the_request_they_name() {
    let server = start().await;
    let ends_with = |suffix: &'static str| {
        move |r: &ctxbridge_mock_model::RecordedRequest| {
            r.last_user_text().is_some_and(|t| t.ends_with(suffix))
        }
    };
    server.push_reply_when(ends_with("beta"), ScriptedReply::text("for beta"));
    server.push_reply_when(ends_with("alpha"), ScriptedReply::text("for alpha"));
    server.push_reply(ScriptedReply::text("queued"));
    assert_eq!(server.pending_replies(), 3);
    let url = format!("{}/responses", server.base_url());

    assert_eq!(
        post(&url, &request(json!([user("say alpha")])))
            .await
            .text(),
        "for alpha"
    );
    assert_eq!(
        post(&url, &request(json!([user("other")]))).await.text(),
        "queued"
    );
    assert_eq!(
        post(&url, &request(json!([user("say beta")]))).await.text(),
        "for beta"
    );
    assert_eq!(
        post(&url, &request(json!([user("say alpha")])))
            .await
            .text(),
        "mock reply to: say alpha",
        "a matched reply is used once"
    );
    assert_eq!(server.pending_replies(), 0);
}

/// Scripted HTTP errors answer with that status and an OpenAI-style JSON error, no stream.
#[tokio::test]
async fn scripted_http_errors_carry_an_openai_error_body() {
    let server = start().await;
    let url = format!("{}/responses", server.base_url());
    for (status, code, kind) in [
        (500, "server_error", "server_error"),
        (429, "rate_limit_exceeded", "requests"),
        (400, "invalid_request", "invalid_request_error"),
    ] {
        server.push_reply(ScriptedReply::http_error(status));
        let reply = post(&url, &request(json!([user("x")]))).await;
        assert_eq!(reply.status, status);
        assert!(reply.events.is_empty());
        assert_eq!(reply.json["error"]["code"], code);
        assert_eq!(reply.json["error"]["type"], kind);
        assert!(reply.json["error"]["message"].as_str().unwrap().len() > 5);
    }
    let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![500, 429, 400]);
}

/// A dropped stream sends the given number of deltas and ends without `response.completed`.
#[tokio::test]
async fn a_dropped_stream_ends_before_completion() {
    let server = start().await;
    server.push_reply(ScriptedReply::text("abcdefghijkl").with_usage(Usage::new(1, 1)));
    server.push_reply(ScriptedReply::drop_after_deltas(1).with_text("abcdefghijkl"));
    let url = format!("{}/responses", server.base_url());
    let full = post(&url, &request(json!([user("x")]))).await;
    let dropped = post(&url, &request(json!([user("x")]))).await;

    assert_eq!(full.text(), "abcdefghijkl");
    assert_eq!(dropped.status, 200);
    let types = dropped.types();
    assert_eq!(
        types,
        vec![
            "response.created",
            "response.output_item.added",
            "response.output_text.delta"
        ]
    );
    assert_eq!(dropped.text(), "abcd");
}

/// A failed reply ends with `response.failed` carrying the scripted error.
#[tokio::test]
async fn a_failed_reply_ends_with_response_failed() {
    let server = start().await;
    server.push_reply(ScriptedReply::failed("server_is_overloaded", "too busy"));
    let reply = post(
        &format!("{}/responses", server.base_url()),
        &request(json!([user("x")])),
    )
    .await;
    let types = reply.types();
    assert_eq!(types.last(), Some(&"response.failed"));
    assert!(!types.contains(&"response.completed"));
    let failed = reply.event("response.failed");
    assert_eq!(failed["response"]["error"]["code"], "server_is_overloaded");
    assert_eq!(failed["response"]["error"]["message"], "too busy");
}

/// A delayed reply waits before answering, and the request is recorded before the wait ends.
#[tokio::test]
async fn a_delay_holds_the_answer_but_not_the_record() {
    let server = start().await;
    server.push_reply(ScriptedReply::default().with_delay(Duration::from_millis(400)));
    let url = format!("{}/responses", server.base_url());
    let started = Instant::now();
    let pending = tokio::spawn(async move { post(&url, &request(json!([user("slow")]))).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(server.requests().len(), 1, "recorded on arrival");
    let reply = pending.await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(reply.text(), "mock reply to: slow");
}

/// Codex's local compaction (a normal request whose last user message is the checkpoint
/// prompt) gets a summary; the unary `/responses/compact` endpoint answers the user messages
/// followed by a compaction item.
#[tokio::test]
async fn compaction_requests_get_a_summary() {
    let server = start().await;
    let base = server.base_url();
    let input = json!([
        user("one"),
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "r"}]},
        user("You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary."),
    ]);
    let streamed = post(&format!("{base}/responses"), &request(input.clone())).await;
    assert_eq!(streamed.text(), "mock summary of 1 earlier user messages");

    let unary = post(
        &format!("{base}/responses/compact"),
        &json!({"model": "m", "input": [user("a"), user("b")]}),
    )
    .await;
    assert_eq!(unary.status, 200);
    assert_eq!(unary.json["object"], "response.compaction");
    let output = unary.json["output"].as_array().unwrap();
    assert_eq!(output.len(), 3);
    assert_eq!(output[2]["type"], "compaction");
    assert_eq!(
        output[2]["encrypted_content"],
        "mock summary of 2 earlier user messages"
    );
    assert_eq!(server.requests()[1].kind, RequestKind::Compact);
}

/// Unknown routes and non-JSON bodies are recorded and answered with errors, not panics.
#[tokio::test]
async fn unknown_routes_and_bad_bodies_are_recorded() {
    let server = start().await;
    let base = server.base_url();
    let bad = post_raw(&format!("{base}/responses"), "not json".to_owned()).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json["error"]["code"], "invalid_json");
    let missing = post(&format!("{base}/models"), &json!({})).await;
    assert_eq!(missing.status, 404);
    let recorded = server.requests();
    assert_eq!(recorded[0].raw_body.as_deref(), Some("not json"));
    assert_eq!(recorded[1].kind, RequestKind::Other);
    assert_eq!(recorded[1].status, 404);
}

/// Stateful mode rebuilds the conversation from `previous_response_id`: the earlier input and
/// output come first, then the new input; instructions are not carried over.
#[tokio::test]
async fn stateful_mode_rebuilds_the_chain() {
    let server = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let url = format!("{}/responses", server.base_url());
    let first = post(
        &url,
        &json!({"model": "m", "stream": true, "store": true, "instructions": "be brief", "input": [user("first question")]}),
    )
    .await;
    let first_id = first.event("response.completed")["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(server.is_stored(&first_id));

    let second = post(
        &url,
        &json!({"model": "m", "stream": true, "store": true, "previous_response_id": first_id, "input": [user("second question")]}),
    )
    .await;
    assert_eq!(second.status, 200);
    assert_eq!(second.text(), "mock reply to: second question");
    let second_id = second.event("response.completed")["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let third = post(
        &url,
        &json!({"model": "m", "stream": true, "store": true, "previous_response_id": second_id, "input": "third"}),
    )
    .await;
    assert_eq!(third.status, 200);

    let recorded = server.requests();
    assert_eq!(recorded[0].instructions.as_deref(), Some("be brief"));
    assert_eq!(recorded[1].instructions, None);
    assert_eq!(
        recorded[1].previous_response_id.as_deref(),
        Some(first_id.as_str())
    );
    assert_eq!(recorded[1].input.len(), 1);
    assert_eq!(
        recorded[2].conversation_texts("user"),
        vec![
            "first question".to_owned(),
            "second question".to_owned(),
            "third".to_owned()
        ]
    );
    assert_eq!(
        recorded[2].conversation_texts("assistant"),
        vec![
            "mock reply to: first question".to_owned(),
            "mock reply to: second question".to_owned()
        ]
    );
}

/// Stateful mode answers `previous_response_not_found` for unknown ids, for responses that
/// were not stored (`store` false or absent), and for expired ones.
#[tokio::test]
async fn stateful_mode_rejects_unknown_unstored_and_expired_chains() {
    let server = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let url = format!("{}/responses", server.base_url());
    let chain = |previous: &str, store: bool| json!({"model": "m", "stream": true, "store": store, "previous_response_id": previous, "input": [user("next")]});
    let id_of = |reply: &Reply| {
        reply.event("response.completed")["response"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    let unknown = post(&url, &chain("resp_nope", true)).await;
    assert_eq!(unknown.status, 400);
    assert_eq!(
        unknown.json,
        json!({"error": {
            "code": "previous_response_not_found",
            "message": "Previous response with id 'resp_nope' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
        }})
    );

    let unstored = post(
        &url,
        &json!({"model": "m", "stream": true, "input": [user("a")]}),
    )
    .await;
    let unstored_id = id_of(&unstored);
    assert!(!server.is_stored(&unstored_id));
    assert_eq!(post(&url, &chain(&unstored_id, true)).await.status, 400);

    let kept = id_of(&post(&url, &chain_start(true)).await);
    let expired = id_of(&post(&url, &chain_start(true)).await);
    assert!(server.expire_response(&expired));
    assert!(!server.expire_response(&expired));
    assert_eq!(post(&url, &chain(&expired, true)).await.status, 400);
    assert_eq!(post(&url, &chain(&kept, true)).await.status, 200);
    server.expire_all();
    let after_all = post(&url, &chain(&kept, true)).await;
    assert_eq!(after_all.status, 400);
    assert_eq!(
        after_all.json["error"]["code"],
        "previous_response_not_found"
    );
    assert_eq!(server.requests().last().unwrap().status, 400);
}

fn chain_start(store: bool) -> Value {
    json!({"model": "m", "stream": true, "store": store, "input": [user("start")]})
}

/// Without stateful mode a `previous_response_id` is recorded but the reply uses `input` alone.
#[tokio::test]
async fn stateless_mode_ignores_the_chain() {
    let server = start().await;
    let reply = post(
        &format!("{}/responses", server.base_url()),
        &json!({"model": "m", "stream": true, "store": true, "previous_response_id": "resp_x", "input": [user("alone")]}),
    )
    .await;
    assert_eq!(reply.status, 200);
    let recorded = &server.requests()[0];
    assert_eq!(recorded.previous_response_id.as_deref(), Some("resp_x"));
    assert!(recorded.store);
    assert_eq!(recorded.conversation, recorded.input);
}

/// With a log path every request is appended as one JSON line, readable with `read_log`.
#[tokio::test]
async fn requests_are_appended_to_the_jsonl_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = MockModelServer::start(MockModelConfig {
        log_path: Some(log.clone()),
        ..MockModelConfig::default()
    })
    .await
    .unwrap();
    let url = format!("{}/responses", server.base_url());
    post(&url, &request(json!([user("one")]))).await;
    server.push_reply(ScriptedReply::http_error(500));
    post(&url, &request(json!([user("two")]))).await;
    server.shutdown().await;

    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 2);
    let logged = read_log(&log).unwrap();
    assert_eq!(logged[0].input_texts("user"), vec!["one".to_owned()]);
    assert_eq!(logged[1].status, 500);
    assert_eq!(logged[0].reply_text.as_deref(), Some("mock reply to: one"));
}

/// A GET or DELETE, answered with JSON: (status, body).
async fn call(method: reqwest::Method, url: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method, url)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Conversations: create answers a `conv_…` conversation object, retrieve answers it again,
/// each completed response naming the conversation is computed on its items and appends its
/// input and output (the `{id}` form of `conversation` included), and the items endpoint lists
/// them in order.
#[tokio::test]
async fn stateful_conversations_hold_the_items_of_each_response() {
    let server = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let base = server.base_url();
    let created = post(&format!("{base}/conversations"), &json!({})).await;
    assert_eq!(created.status, 200);
    let id = created.json["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("conv_"), "{id}");
    assert_eq!(created.json["object"], "conversation");
    assert!(created.json["created_at"].as_u64().unwrap() > 0);
    assert_eq!(created.json["metadata"], json!({}));
    let (status, retrieved) =
        call(reqwest::Method::GET, &format!("{base}/conversations/{id}")).await;
    assert_eq!((status, &retrieved), (200, &created.json));

    let url = format!("{base}/responses");
    let first = post(
        &url,
        &json!({"model": "m", "stream": true, "store": true, "conversation": id, "input": [user("first question")]}),
    )
    .await;
    assert_eq!(first.text(), "mock reply to: first question");
    let second = post(
        &url,
        &json!({"model": "m", "stream": true, "conversation": {"id": id}, "input": [user("second question")]}),
    )
    .await;
    assert_eq!(second.status, 200);

    let recorded = server.response_requests();
    assert_eq!(recorded[1].conversation_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        recorded[1].conversation_texts("user"),
        vec!["first question".to_owned(), "second question".to_owned()]
    );
    assert_eq!(
        recorded[1].conversation_texts("assistant"),
        vec!["mock reply to: first question".to_owned()]
    );
    let items = server.conversation_items(&id).unwrap();
    assert_eq!(items.len(), 4);
    let roles: Vec<&str> = items.iter().map(|i| i["role"].as_str().unwrap()).collect();
    assert_eq!(roles, vec!["user", "assistant", "user", "assistant"]);
    let (status, listed) = call(
        reqwest::Method::GET,
        &format!("{base}/conversations/{id}/items"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["object"], "list");
    assert_eq!(listed["data"], Value::Array(items));
    assert!(server
        .requests()
        .iter()
        .filter(|r| r.kind == RequestKind::Conversations)
        .all(|r| r.conversation_id.as_deref() == Some(id.as_str())));
}

/// A deleted or never-created conversation answers 404 with an OpenAI-style error naming the
/// `conversation` parameter — on retrieve, delete and on a response; a response naming both a
/// conversation and a previous response is refused with 400.
#[tokio::test]
async fn unknown_and_deleted_conversations_are_not_found() {
    let server = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let base = server.base_url();
    let url = format!("{base}/responses");
    let id = post(
        &format!("{base}/conversations"),
        &json!({"items": [user("seed")]}),
    )
    .await
    .json["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(server.conversation_items(&id).unwrap().len(), 1);

    let both = post(
        &url,
        &json!({"model": "m", "stream": true, "conversation": id, "previous_response_id": "resp_x", "input": "hi"}),
    )
    .await;
    assert_eq!(both.status, 400);
    assert_eq!(both.json["error"]["param"], "conversation");

    let (status, deleted) = call(
        reqwest::Method::DELETE,
        &format!("{base}/conversations/{id}"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted,
        json!({"id": id, "object": "conversation.deleted", "deleted": true})
    );
    assert!(!server.has_conversation(&id));
    let expected = json!({"error": {
        "message": format!("Conversation with id '{id}' not found."),
        "type": "invalid_request_error",
        "param": "conversation",
        "code": null,
    }});
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, body) = call(method, &format!("{base}/conversations/{id}")).await;
        assert_eq!((status, &body), (404, &expected));
    }
    let turn = post(
        &url,
        &json!({"model": "m", "stream": true, "conversation": id, "input": "hi"}),
    )
    .await;
    assert_eq!(turn.status, 404);
    assert_eq!(turn.json, expected);
    assert_eq!(server.requests().last().unwrap().status, 404);

    let kept = post(&format!("{base}/conversations"), &json!({}))
        .await
        .json["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(server.delete_conversation(&kept));
    assert!(!server.delete_conversation(&kept));
}

/// A scripted tool call answers with one `function_call` item (name, JSON arguments, a call
/// id); the follow-up request chaining a `function_call_output` on it (stateful mode) gets a
/// default reply quoting the tool's output.
#[tokio::test]
async fn a_scripted_tool_call_then_a_reply_quoting_the_tool_output() {
    let server = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    server.push_reply(ScriptedReply::tool_call("lookup", r#"{"q":"otters"}"#));
    let url = format!("{}/responses", server.base_url());
    let mut body = request(json!([user("find otters")]));
    body["store"] = json!(true);
    body["tools"] = json!([{"type": "function", "name": "lookup", "description": "d",
                            "parameters": {"type": "object"}}]);
    let first = post(&url, &body).await;
    assert_eq!(
        first.types(),
        vec![
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = &first.event("response.output_item.done")["item"];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "lookup");
    assert_eq!(item["arguments"], r#"{"q":"otters"}"#);
    let call_id = item["call_id"].as_str().unwrap().to_owned();
    let response_id = first.event("response.completed")["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.text(), "");

    let follow_up = json!({
        "model": "mock-model", "stream": true, "store": true,
        "previous_response_id": response_id,
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "3 otters"}],
    });
    let second = post(&url, &follow_up).await;
    assert_eq!(second.text(), "mock reply to tool output: 3 otters");
    let requests = server.response_requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].body_contains("\"lookup\""));
    assert_eq!(
        requests[1].conversation.len(),
        3,
        "user message, function call, function call output"
    );
}
