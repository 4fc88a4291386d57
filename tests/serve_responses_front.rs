//! `ctxbridge serve --front responses` driven by the official `openai` Python package against
//! the loopback mock model: a `previous_response_id` chain (non-streamed and streamed), a
//! conversation, reads, the model list and errors, with `sample-summary` as the engine. The
//! client sees its own inputs and the model's answers under the front's ids; the engine's
//! context reaches the upstream once per epoch and never the client. Skips loudly when
//! `python3` has no `openai` package (CI installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ctxbridge_mock_model::ScriptedReply;
use serde_json::{json, Value};

#[path = "support/responses_front.rs"]
mod front;

use front::{
    authed, events_of, fixture, fixture_of, get_json, node_22, post_json, post_response,
    python3_here, python_client_here, repo, run_client, run_python_client, transcript_rows,
    Fixture, CONTEXT_MARK,
};

/// The client's chain of `len` answers: each under the front's id, answered, and pointing at
/// the one before.
fn chain_of(seen: &Value, len: usize) -> &Vec<Value> {
    let chain = seen["chain"].as_array().unwrap();
    assert_eq!(chain.len(), len, "{seen}");
    for (i, link) in chain.iter().enumerate() {
        assert!(link["id"].as_str().unwrap().starts_with("resp_"), "{link}");
        assert!(!link["text"].as_str().unwrap().is_empty(), "{link}");
        let previous = match i {
            0 => Value::Null,
            _ => chain[i - 1]["id"].clone(),
        };
        assert_eq!(link["previous"], previous);
    }
    chain
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_python_client_through_the_responses_front() {
    if !python_client_here("the Responses front's Python client test") {
        return;
    }
    let Fixture { mock, url, .. } = &fixture().await;
    let (seen, stdout) = run_python_client("responses_front.py", url).await;

    // The chain: four answers, each pointing at the one before, under the front's ids.
    let chain = chain_of(&seen, 4);
    for link in chain {
        assert_eq!(link["status"], "completed");
    }
    // Streamed: the deltas make the final text; the events are the API's, in its order.
    assert_eq!(seen["stream"]["deltas"], chain[3]["text"]);
    let events: Vec<&str> = seen["stream"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    assert!(events.contains(&"response.output_text.delta"));
    assert!(events.contains(&"response.output_text.done"));

    // The conversation: its answers name it; its items are the client's inputs and the
    // answers, in order.
    let conversation = &seen["conversation"];
    assert!(conversation["id"].as_str().unwrap().starts_with("conv_"));
    assert_eq!(conversation["metadata"]["topic"], "bikes");
    for answer in conversation["answers"].as_array().unwrap() {
        assert_eq!(answer["conversation"], conversation["id"]);
    }
    let items = conversation["items"].as_array().unwrap();
    let texts: Vec<(&str, &str)> = items
        .iter()
        .map(|i| {
            (
                i["role"].as_str().unwrap(),
                i["content"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(texts.len(), 4, "{items:?}");
    assert_eq!(texts[0], ("user", "conversation one"));
    assert_eq!(texts[2], ("user", "conversation two"));
    assert_eq!(texts[1].0, "assistant");
    assert_eq!(
        texts[3].1,
        conversation["answers"][1]["text"].as_str().unwrap()
    );

    // Reads: the stored response, its input as sent, the upstream's models.
    assert_eq!(seen["retrieved"]["id"], chain[1]["id"]);
    assert_eq!(seen["retrieved"]["text"], chain[1]["text"]);
    let inputs = seen["input_items"].as_array().unwrap();
    assert_eq!(inputs.len(), 1, "{inputs:?}");
    assert_eq!(inputs[0]["content"][0]["text"], "chain two");
    assert_eq!(seen["models"], json!(["mock-model"]));

    // Errors in the API's shape, with the status an SDK maps to its exception.
    let errors = &seen["errors"];
    assert_eq!(errors["unknown"]["status"], 404);
    assert_eq!(errors["unknown_previous"]["status"], 404);
    assert_eq!(
        errors["unknown_previous"]["body"]["param"],
        "previous_response_id"
    );
    assert_eq!(errors["bad_token"]["status"], 401);
    assert_eq!(errors["bad_token"]["body"]["code"], "invalid_api_key");
    assert_eq!(seen["deleted_readable"], false);

    // Nothing the client saw carries the projected context.
    assert!(!stdout.contains(CONTEXT_MARK), "{stdout}");

    // Upstream: the chain's four turns (one session) and the conversation's two (another)
    // went out as six requests; the context was projected only where an upstream thread
    // began (an epoch), never into a request that continued one.
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 6, "one upstream request per response");
    let mut projected = 0;
    for r in &requests {
        let carries = r.body_contains(CONTEXT_MARK);
        let continues = r.previous_response_id.is_some()
            || requests.iter().any(|o| {
                o.seq < r.seq
                    && o.conversation_id.is_some()
                    && o.conversation_id == r.conversation_id
            });
        if carries {
            projected += 1;
            assert!(
                !continues,
                "context projected into a continued thread: {:?}",
                r.body
            );
        }
    }
    // With a window of two messages, the chain's third and fourth turns each start an epoch
    // (a new upstream conversation) carrying the summary; the others project nothing.
    assert_eq!(
        projected, 2,
        "the engine's context reached the upstream once per epoch"
    );
    let threads: std::collections::HashSet<_> =
        requests.iter().map(|r| r.conversation_id.clone()).collect();
    assert_eq!(
        threads.len(),
        4,
        "two chain epochs besides the first, and the conversation's"
    );
    // The client's own words reached the upstream as the user's turn.
    assert!(requests.iter().any(|r| r
        .input_texts("user")
        .iter()
        .any(|t| t.contains("chain four streamed"))));
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_npm_client_through_the_responses_front() {
    let Some(node) = node_22() else {
        eprintln!("SKIPPED: no Node.js >= 22 (the `openai` npm package needs it); the Responses front's npm client test did not run");
        return;
    };
    if !repo().join("node_modules/openai/package.json").exists() {
        eprintln!("SKIPPED: the `openai` npm package is not installed (npm ci at the repository root); the Responses front's npm client test did not run");
        return;
    }
    let Fixture { mock, url, .. } = &fixture().await;
    let script = repo().join("tests/clients/responses_front.mjs");
    let (seen, stdout) = run_client(node, vec![script], url).await;

    let chain = chain_of(&seen, 3);
    assert_eq!(seen["stream"]["deltas"], chain[2]["text"]);
    assert_eq!(seen["stream"]["events"][0], "response.created");
    assert_eq!(seen["conversation"]["answer"], seen["conversation"]["id"]);
    assert_eq!(seen["unknown"]["status"], 404);
    assert!(!stdout.contains(CONTEXT_MARK), "{stdout}");
    // The chain's third turn starts an epoch carrying the summary of the first two.
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 4);
    let projected: Vec<bool> = requests
        .iter()
        .map(|r| r.body_contains(CONTEXT_MARK))
        .collect();
    assert_eq!(projected, [false, false, true, false]);
}

/// A client that closes a streamed response before the model answered cancels the turn:
/// nothing of it is kept (no response record, no transcript entry), and the front goes on
/// serving.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_closed_before_the_answer_keeps_nothing() {
    let fixture = fixture().await;
    fixture.mock.push_reply(
        ctxbridge_mock_model::ScriptedReply::text("too late")
            .with_delay(std::time::Duration::from_secs(2)),
    );
    let client = reqwest::Client::new();
    let mut response = authed(
        &client,
        reqwest::Method::POST,
        format!("{}/responses", fixture.url),
    )
    .json(&json!({"model": "mock-model", "input": "a slow question", "stream": true}))
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let first = String::from_utf8(response.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.starts_with("event: response.created\n"), "{first}");
    let created: Value = serde_json::from_str(
        first
            .lines()
            .nth(1)
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    let id = created["response"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["response"]["status"], "in_progress");
    // The upstream has the request; the client goes away before its answer.
    while fixture.mock.response_requests().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(response);
    // Past the reply's delay: a turn that had gone on would have been kept by now.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let read = authed(
        &client,
        reqwest::Method::GET,
        format!("{}/responses/{id}", fixture.url),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(read.status(), 404);
    assert_eq!(
        transcript_rows(fixture.dir.path()),
        0,
        "no half-done turn is recorded"
    );

    // The front still answers, and that turn is kept.
    let body = json!({"model": "mock-model", "input": "a quick question"});
    let (_, answered) = post_json(&fixture, "/responses", body).await;
    assert_eq!(answered["status"], "completed", "{answered}");
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
}

/// `store: false`: the response is not readable, but its chain goes on; unknown routes and
/// unserved fields answer in the API's error shape.
#[tokio::test(flavor = "multi_thread")]
async fn unstored_responses_and_errors_in_the_api_shape() {
    let fixture = fixture().await;
    let client = reqwest::Client::new();
    let post = |body: Value| post_response(&client, &fixture, &body);
    let unstored: Value = post(json!({"input": "not kept", "store": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unstored["store"], false);
    let id = unstored["id"].as_str().unwrap();
    let read = authed(
        &client,
        reqwest::Method::GET,
        format!("{}/responses/{id}", fixture.url),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(read.status(), 404);
    let next = post(json!({"input": "go on", "previous_response_id": id}))
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 200);

    let refused = post(json!({"input": "x", "tools": [{"type": "web_search"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["param"], "tools[0].type");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let unknown = authed(
        &client,
        reqwest::Method::GET,
        format!("{}/files", fixture.url),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("GET /v1/files"),
        "{body}"
    );

    let no_token = client
        .get(format!("{}/models", fixture.url))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
}

/// A chain is one engine session with its turns in order: continuing from a response that is
/// no longer the latest (a branch) is refused naming the latest, and the chain goes on from it.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_cannot_be_branched() {
    let fixture = fixture().await;
    let (_, first) = post_json(&fixture, "/responses", json!({"input": "one"})).await;
    let (_, second) = post_json(
        &fixture,
        "/responses",
        json!({"input": "two", "previous_response_id": first["id"]}),
    )
    .await;
    let (status, branch) = post_json(
        &fixture,
        "/responses",
        json!({"input": "two again", "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(branch["error"]["param"], "previous_response_id");
    assert_eq!(branch["error"]["code"], "chain_branching_not_supported");
    let message = branch["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(second["id"].as_str().unwrap()),
        "{message}"
    );
    assert_eq!(
        transcript_rows(fixture.dir.path()),
        4,
        "the branch ran no turn"
    );
    let (status, _) = post_json(
        &fixture,
        "/responses",
        json!({"input": "three", "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(status, 200);
}

/// Items a client adds to a conversation outside a response (at creation, or later) join the
/// user's turn of its next response: the engine hears them in that one turn, the upstream gets
/// them, the conversation lists them in their place, and the response's own input items stay
/// what its request sent.
#[tokio::test(flavor = "multi_thread")]
async fn items_added_to_a_conversation_join_its_next_turn() {
    let fixture = fixture().await;
    let (_, created) = post_json(
        &fixture,
        "/conversations",
        json!({"items": [{"type": "message", "role": "user", "content": "My name is Ann."}]}),
    )
    .await;
    let id = created["id"].as_str().unwrap();
    let items_path = format!("/conversations/{id}/items");
    let (status, added) = post_json(
        &fixture,
        &items_path,
        json!({"items": [{"role": "user", "content": [{"type": "input_text", "text": "I live in Oslo."}]}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(added["data"][0]["content"][0]["text"], "I live in Oslo.");
    let (status, refused) = post_json(
        &fixture,
        &items_path,
        json!({"items": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["param"], "items[0]");

    let (_, answered) = post_json(
        &fixture,
        "/responses",
        json!({"input": "Where do I live?", "conversation": id}),
    )
    .await;
    assert_eq!(answered["status"], "completed", "{answered}");
    let upstream = fixture.mock.response_requests();
    let user = upstream[0].input_texts("user").join("\n");
    assert!(
        user.contains("My name is Ann.\nI live in Oslo.\nWhere do I live?"),
        "{user}"
    );
    assert_eq!(transcript_rows(fixture.dir.path()), 2, "one engine turn");

    let items = get_json(&fixture, &items_path).await;
    let texts: Vec<&str> = items["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts[..3],
        ["My name is Ann.", "I live in Oslo.", "Where do I live?"]
    );
    assert_eq!(texts.len(), 4);
    let response_id = answered["id"].as_str().unwrap();
    let inputs = get_json(&fixture, &format!("/responses/{response_id}/input_items")).await;
    assert_eq!(inputs["data"].as_array().unwrap().len(), 1);

    // The next response's turn has nothing added before it.
    post_json(
        &fixture,
        "/responses",
        json!({"input": "Thanks.", "conversation": id}),
    )
    .await;
    let upstream = fixture.mock.response_requests();
    assert_eq!(upstream[1].input_texts("user"), ["Thanks."]);
}

/// A response does not wait for the engine: its `afterTurn` runs after the client has its
/// answer, as after the Codex front's `turn/completed`. The engine here never answers
/// `afterTurn` (and its call timeout is an hour), yet a non-streamed and a streamed response
/// (each a new chain) are answered, kept and readable, and the turn is in the transcript: a
/// non-streamed response is sent once its turn is recorded; a streamed one ends as soon as the
/// model has answered, and reading it waits until its turn is recorded and it is kept.
/// Before, each waited for `afterTurn`: the client's 60 s timeout ends the test then.
#[tokio::test(flavor = "multi_thread")]
async fn the_answer_does_not_wait_for_the_engines_after_turn() {
    if !python3_here("the test of an engine stuck in afterTurn (a Python script)") {
        return;
    }
    let engine = repo().join("tests/fixtures/engines/fault_matrix_engine.py");
    let fixture = fixture_of(
        json!({
            "slots": {"contextEngine": "stuck-after-turn"},
            "entries": {"stuck-after-turn": {
                "command": ["python3", engine, "afterTurn", "timeout"],
                "timeoutMs": 3_600_000,
            }},
        }),
        json!({}),
        true,
    )
    .await;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let post = |body: Value| post_response(&client, &fixture, &body).send();

    let answered: Value = post(json!({"input": "hello"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answered["status"], "completed", "{answered}");
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
    let id = answered["id"].as_str().unwrap();
    let kept = get_json(&fixture, &format!("/responses/{id}")).await;
    assert_eq!(kept["output"], answered["output"], "{kept}");

    let streamed = post(json!({"input": "hello again", "stream": true}))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = events_of(&streamed);
    let completed = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap_or_else(|| panic!("no response.completed in:\n{streamed}"));
    assert_eq!(completed["response"]["status"], "completed");
    let id = completed["response"]["id"].as_str().unwrap();
    let kept = get_json(&fixture, &format!("/responses/{id}")).await;
    assert_eq!(kept["status"], "completed", "{kept}");
    assert_eq!(transcript_rows(fixture.dir.path()), 4);
}

/// System and developer messages in a response's input become instructions of its turn and of
/// the turns after it in the chain or the conversation, as they stay in the API's context;
/// `instructions` stays with its own response. The client's input items list them as sent,
/// and the engine's transcript holds only the user's turns and the answers.
#[tokio::test(flavor = "multi_thread")]
async fn system_and_developer_messages_stay_with_the_chain() {
    let fixture = fixture().await;
    let (status, first) = post_json(
        &fixture,
        "/responses",
        json!({"input": [
            {"role": "system", "content": "SYSTEM-MARK: answer as a pirate."},
            {"role": "user", "content": "hi"},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let (status, second) = post_json(
        &fixture,
        "/responses",
        json!({"input": "again", "previous_response_id": first["id"],
               "instructions": "ONCE-MARK"}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["instructions"], "ONCE-MARK");
    let (status, third) = post_json(
        &fixture,
        "/responses",
        json!({"input": "and again", "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{third}");

    let (_, conversation) = post_json(&fixture, "/conversations", json!({})).await;
    let conversation = conversation["id"].as_str().unwrap();
    let (status, asked) = post_json(
        &fixture,
        "/responses",
        json!({"conversation": conversation, "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "DEVELOPER-MARK"}]},
            {"role": "user", "content": "a question"},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{asked}");
    let (status, later) = post_json(
        &fixture,
        "/responses",
        json!({"conversation": conversation, "input": "a later question"}),
    )
    .await;
    assert_eq!(status, 200, "{later}");

    let instructions: Vec<String> = fixture
        .mock
        .response_requests()
        .iter()
        .map(|r| r.instructions.clone().unwrap_or_default())
        .collect();
    assert_eq!(instructions.len(), 5, "{instructions:?}");
    for (turn, seen) in instructions[..3].iter().enumerate() {
        assert!(seen.contains("SYSTEM-MARK"), "chain turn {turn}: {seen}");
        assert!(
            !seen.contains("DEVELOPER-MARK"),
            "chain turn {turn}: {seen}"
        );
    }
    assert!(!instructions[0].contains("ONCE-MARK"));
    assert!(instructions[1].contains("ONCE-MARK"));
    assert!(!instructions[2].contains("ONCE-MARK"));
    for (turn, seen) in instructions[3..].iter().enumerate() {
        assert!(
            seen.contains("DEVELOPER-MARK"),
            "conversation turn {turn}: {seen}"
        );
        assert!(
            !seen.contains("SYSTEM-MARK"),
            "conversation turn {turn}: {seen}"
        );
    }

    let first_id = first["id"].as_str().unwrap();
    let items = get_json(&fixture, &format!("/responses/{first_id}/input_items")).await;
    let items = items["data"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items
        .iter()
        .any(|i| i["role"] == "system" && i.to_string().contains("SYSTEM-MARK")));
    assert_eq!(transcript_rows(fixture.dir.path()), 10);
    let state = rusqlite::Connection::open(fixture.dir.path().join("state.db")).unwrap();
    let marked: i64 = state
        .query_row(
            "SELECT count(*) FROM transcript WHERE message LIKE '%-MARK%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(marked, 0, "instructions are not the user's turn");
}

/// The official `openai` Python package sends a system message at the head of a chain's first
/// input, then continues the chain: both upstream requests carry it as instructions, the
/// client lists it among the first response's input items, and its answers hold no projected
/// context.
#[tokio::test(flavor = "multi_thread")]
async fn openai_python_client_with_a_system_message() {
    if !python_client_here("the Responses front's system-message client test") {
        return;
    }
    let Fixture { mock, url, .. } = &fixture().await;
    let (seen, stdout) = run_python_client("responses_front_instructions.py", url).await;
    assert_eq!(
        seen["statuses"],
        json!(["completed", "completed"]),
        "{stdout}"
    );
    assert_eq!(seen["previous"], seen["first_id"], "{stdout}");
    assert!(seen["roles"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r == "system"));
    assert!(!stdout.contains(CONTEXT_MARK), "{stdout}");
    let requests = mock.response_requests();
    assert_eq!(requests.len(), 2, "one upstream request per response");
    for r in &requests {
        let instructions = r.instructions.as_deref().unwrap_or_default();
        assert!(instructions.contains("PY-SYSTEM-MARK"), "{instructions}");
    }
}

/// A streamed response ends as soon as the model has answered, before its turn is recorded
/// and the response kept; a read of it waits until both are written. The state store is held
/// locked by another connection from while the model thinks until after the stream has ended:
/// the stream still ends with `response.completed`, nothing is in the transcript yet, and a
/// `GET` of the response waits for the lock to go, then finds the response and the turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_response_ends_before_its_record_and_reads_wait_for_it() {
    let fixture = fixture().await;
    fixture
        .mock
        .push_reply(ScriptedReply::text("the answer").with_delay(Duration::from_secs(2)));
    let client = reqwest::Client::new();
    let request = post_response(
        &client,
        &fixture,
        &json!({"model": "mock-model", "input": "hello", "stream": true}),
    )
    .send();
    let streamed = tokio::spawn(async move { request.await.unwrap().text().await.unwrap() });
    // The turn's writes before the model's request are done; its record comes after.
    while fixture.mock.response_requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let locker = rusqlite::Connection::open(fixture.dir.path().join("state.db")).unwrap();
    locker.busy_timeout(Duration::from_secs(5)).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let streamed = tokio::time::timeout(Duration::from_secs(10), streamed)
        .await
        .expect("the stream ends while the store is locked")
        .unwrap();
    let events = events_of(&streamed);
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed", "{streamed}");
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        "the answer"
    );
    assert_eq!(transcript_rows(fixture.dir.path()), 0, "not recorded yet");

    let id = completed["response"]["id"].as_str().unwrap().to_owned();
    let url = fixture.url.clone();
    let read = tokio::spawn(async move {
        let response = authed(
            &reqwest::Client::new(),
            reqwest::Method::GET,
            format!("{url}/responses/{id}"),
        )
        .send()
        .await
        .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!read.is_finished(), "the read waits for the record");
    locker.execute_batch("COMMIT").unwrap();
    let (status, kept) = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the read goes on once the store is free")
        .unwrap();
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["output"], completed["response"]["output"]);
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
}

/// A non-streamed turn of a chain (after `previous`, when given) through the front; the new
/// response's id.
async fn chain_turn(fixture: &Fixture, input: &str, previous: Option<&str>) -> String {
    let mut body = json!({"model": "mock-model", "input": input});
    if let Some(previous) = previous {
        body["previous_response_id"] = Value::from(previous);
    }
    let (_, response) = post_json(fixture, "/responses", body).await;
    response["id"].as_str().unwrap().to_owned()
}

/// The front is a long-running process: a chain's new epochs take a conversation the
/// upstream made ahead of need, so their turns wait for no `POST /conversations`. After the
/// session's first new thread, the next conversation is made in the background; each later
/// epoch's turn names a conversation that existed before the client sent that turn.
#[tokio::test(flavor = "multi_thread")]
async fn new_epochs_take_a_conversation_made_ahead() {
    let fixture = fixture().await;
    let mut previous: Option<String> = None;
    let mut named: Vec<String> = Vec::new();
    for turn in 1..=4 {
        let used: std::collections::HashSet<String> = named.iter().cloned().collect();
        // From the second turn on, a spare is made (on a loaded machine it may still be on
        // its way after the answer before).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while turn > 1 && fixture.mock.conversation_ids().len() <= used.len() {
            assert!(std::time::Instant::now() < deadline, "no spare was made");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let existing = fixture.mock.conversation_ids();
        let input = format!("epoch turn {turn}");
        previous = Some(chain_turn(&fixture, &input, previous.as_deref()).await);
        let requests = fixture.mock.response_requests();
        let conversation = requests.last().unwrap().conversation_id.clone().unwrap();
        let new_thread = !used.contains(&conversation);
        if turn == 1 {
            assert!(
                !existing.contains(&conversation),
                "the session's first thread makes its conversation"
            );
        } else if new_thread {
            assert!(
                existing.contains(&conversation),
                "turn {turn} started a thread on a conversation made on its path"
            );
        }
        named.push(conversation);
    }
    let threads: std::collections::HashSet<&String> = named.iter().collect();
    assert_eq!(
        threads.len(),
        3,
        "the first thread and two new epochs: {named:?}"
    );
}

/// Two fronts on one state store: a front remembers what continuing from the responses it
/// kept needs, and still hears of a deletion made through the other. Once the chain's latest
/// response is deleted (through the second front), continuing from it through the first is
/// the API's 404, and continuing from the one before is refused as a branch, naming the
/// deleted one.
#[tokio::test(flavor = "multi_thread")]
async fn a_deletion_through_another_front_on_the_same_store_is_heard() {
    let fixture = fixture().await;
    let (_second_server, second_url) = front::start_front(fixture.dir.path());
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for turn in 1..=2 {
        let input = format!("shared store turn {turn}");
        let id = chain_turn(&fixture, &input, ids.last().map(String::as_str)).await;
        ids.push(id);
    }
    let deleted = authed(
        &client,
        reqwest::Method::DELETE,
        format!("{second_url}/responses/{}", ids[1]),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(deleted.status(), 200);
    let continue_from = |previous: &str| {
        post_response(
            &client,
            &fixture,
            &json!({"model": "mock-model", "input": "go on", "previous_response_id": previous}),
        )
        .send()
    };
    let from_deleted = continue_from(&ids[1]).await.unwrap();
    assert_eq!(from_deleted.status(), 404);
    let body: Value = from_deleted.json().await.unwrap();
    assert_eq!(body["error"]["param"], "previous_response_id", "{body}");
    let from_before = continue_from(&ids[0]).await.unwrap();
    assert_eq!(from_before.status(), 400);
    let body: Value = from_before.json().await.unwrap();
    assert_eq!(body["error"]["code"], "chain_branching_not_supported");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("'{}', was deleted", ids[1])),
        "{message}"
    );
}
