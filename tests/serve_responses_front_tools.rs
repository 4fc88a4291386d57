//! The Responses front with the client's function tools: the model's call ends a response,
//! the client's `function_call_output` goes on with the same engine turn, and the engine sees
//! one turn (the user's message and the final answer). Driven by raw HTTP and by the official
//! `openai` Python and npm packages against the loopback mock model; the client-package tests
//! skip loudly when the package is missing (CI installs both).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ctxbridge_mock_model::{RecordedRequest, ScriptedReply};
use serde_json::{json, Value};

#[path = "support/responses_front.rs"]
mod front;

use front::{
    authed, events_of, fixture, fixture_with, get_json, node_22, post_json, post_response,
    python_client_here, repo, run_client, run_python_client, transcript_rows,
    transcript_rows_reaching, CONTEXT_MARK,
};

fn weather_tool() -> Value {
    json!([{
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }])
}

/// Whether `later` continues the upstream thread of `earlier` (chained on its response, or
/// in the same conversation).
fn continues(later: &RecordedRequest, earlier: &RecordedRequest) -> bool {
    later.previous_response_id.is_some() && later.previous_response_id == earlier.response_id
        || later.conversation_id.is_some() && later.conversation_id == earlier.conversation_id
}

/// The round trip over raw HTTP: the call, the refusals while the turn waits, the output,
/// the answer, the reads, what the upstream got, and one engine turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_function_call_round_trip_is_one_engine_turn() {
    let fixture = fixture().await;
    fixture.mock.push_reply(ScriptedReply::tool_call(
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    let (status, first) = post_json(
        &fixture,
        "/responses",
        json!({
            "model": "mock-model",
            "input": "What is the weather in Paris?",
            "tools": weather_tool(),
            "instructions": "Answer in one line.",
            "max_output_tokens": 64,
        }),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "completed");
    let output = first["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "only the call: {first}");
    let call = &output[0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{call}");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    let call_id = call["call_id"].as_str().unwrap().to_owned();
    assert_eq!(first["instructions"], "Answer in one line.");
    assert_eq!(first["max_output_tokens"], 64);
    assert_eq!(first["tools"][0]["name"], "get_weather");
    let first_id = first["id"].as_str().unwrap();

    // While the turn waits: a new message is refused as the API refuses it, so is an output
    // of another call; neither disturbs the waiting turn.
    let (status, refused) = post_json(
        &fixture,
        "/responses",
        json!({"input": "hello?", "previous_response_id": first_id}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("No tool output found for function call {call_id}")),
        "{message}"
    );
    let (status, stray) = post_json(
        &fixture,
        "/responses",
        json!({"previous_response_id": first_id, "input": [
            {"type": "function_call_output", "call_id": "call_nope", "output": "x"}]}),
    )
    .await;
    assert_eq!(status, 400, "{stray}");
    assert!(stray["error"]["message"]
        .as_str()
        .unwrap()
        .contains("call_nope"));

    // The output: the same turn goes on, and the model answers with it.
    let (status, second) = post_json(
        &fixture,
        "/responses",
        json!({"previous_response_id": first_id, "tools": weather_tool(), "input": [
            {"type": "function_call_output", "call_id": call_id, "output": "18C and sunny"}]}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["previous_response_id"], first_id);
    assert_eq!(second["output"][0]["type"], "message");
    assert_eq!(
        second["output"][0]["content"][0]["text"],
        "mock reply to tool output: 18C and sunny"
    );
    // Token counts are the upstream's, known once the turn has ended.
    assert!(first["usage"].is_null(), "{first}");
    assert!(
        second["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{second}"
    );
    assert_eq!(
        second["usage"]["total_tokens"].as_u64().unwrap(),
        second["usage"]["input_tokens"].as_u64().unwrap()
            + second["usage"]["output_tokens"].as_u64().unwrap()
    );

    // Reads show the client's view: the call, and the output as the next input.
    let stored = get_json(&fixture, &format!("/responses/{first_id}")).await;
    assert_eq!(stored["output"], first["output"]);
    let second_id = second["id"].as_str().unwrap();
    let inputs = get_json(&fixture, &format!("/responses/{second_id}/input_items")).await;
    assert_eq!(inputs["data"][0]["type"], "function_call_output");
    assert_eq!(inputs["data"][0]["call_id"], call_id.as_str());

    // The upstream: the client's tool, instructions and output cap with the first request;
    // the output in the second, continuing the first's thread.
    let requests = fixture.mock.response_requests();
    assert_eq!(requests.len(), 2);
    let (asked, answered) = (&requests[0], &requests[1]);
    assert!(asked.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "get_weather"));
    assert!(asked
        .instructions
        .as_deref()
        .unwrap()
        .ends_with("Answer in one line."));
    assert_eq!(asked.body["max_output_tokens"], 64);
    assert!(continues(answered, asked), "{answered:?}");
    assert_eq!(answered.input[0]["type"], "function_call_output");
    assert_eq!(answered.input[0]["output"], "18C and sunny");
    assert_eq!(answered.body["max_output_tokens"], 64);

    // The engine heard one turn: the user's message and the answer.
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
    let (status, third) = post_json(
        &fixture,
        "/responses",
        json!({"input": "thanks", "previous_response_id": second_id}),
    )
    .await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(transcript_rows(fixture.dir.path()), 4);

    // The metrics count the responses by how they ended and the engine turns (two: the
    // round trip and the thanks), behind the token; health is open. A response ends once its
    // turn is recorded and the turn itself once the engine has heard of it, so the turns are
    // read until the second has ended.
    let base = fixture.url.trim_end_matches("/v1");
    let client = reqwest::Client::new();
    let completed_turns = r#"ctxbridge_turns_total{outcome="completed"}"#;
    let mut exposition = String::new();
    for _ in 0..500 {
        exposition = authed(&client, reqwest::Method::GET, format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if ctxbridge::metrics::sample(&exposition, completed_turns) == Some(2.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sample = |series: &str| ctxbridge::metrics::sample(&exposition, series);
    assert_eq!(
        sample(r#"ctxbridge_responses_total{outcome="function_calls"}"#),
        Some(1.0),
        "{exposition}"
    );
    assert_eq!(
        sample(r#"ctxbridge_responses_total{outcome="answered"}"#),
        Some(2.0)
    );
    assert_eq!(sample(completed_turns), Some(2.0), "{exposition}");
    let anonymous = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.text().await.unwrap(), "ok");
}

/// Streamed, the call comes as the API's function call events and the answer as text
/// events, each stream numbered from 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_round_trip_speaks_the_api_events() {
    let fixture = fixture().await;
    fixture.mock.push_reply(ScriptedReply::tool_call(
        "get_weather",
        r#"{"city":"Lima"}"#,
    ));
    let client = reqwest::Client::new();
    let stream = |body: Value| post_response(&client, &fixture, &body).send();
    let body =
        stream(json!({"input": "Weather in Lima?", "tools": weather_tool(), "stream": true}))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    let events = events_of(&body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ],
        "{body}"
    );
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], index, "{event}");
    }
    let completed = &events[6]["response"];
    let call = &completed["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(events[4]["arguments"], call["arguments"]);
    let output =
        json!([{"type": "function_call_output", "call_id": call["call_id"], "output": "25C"}]);
    let body =
        stream(json!({"input": output, "previous_response_id": completed["id"], "stream": true}))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    let events = events_of(&body);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "mock reply to tool output: 25C");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], deltas);
    // Read once its turn is recorded and it is kept.
    let kept = get_json(
        &fixture,
        &format!("/responses/{}", last["response"]["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(kept["output"], last["response"]["output"]);
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
}

/// A turn whose outputs never come is cancelled after `serve.responses.toolOutputTimeoutSecs`:
/// nothing of it is kept, a late output is refused, and the chain goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_left_waiting_is_cancelled_and_keeps_nothing() {
    let fixture = fixture_with(json!({"responses": {"toolOutputTimeoutSecs": 1}})).await;
    fixture.mock.push_reply(ScriptedReply::tool_call(
        "get_weather",
        r#"{"city":"Quito"}"#,
    ));
    let (_, first) = post_json(
        &fixture,
        "/responses",
        json!({"input": "Weather in Quito?", "tools": weather_tool()}),
    )
    .await;
    let call_id = first["output"][0]["call_id"].as_str().unwrap().to_owned();
    let first_id = first["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, late) = post_json(
        &fixture,
        "/responses",
        json!({"previous_response_id": first_id, "input": [
            {"type": "function_call_output", "call_id": call_id, "output": "too late"}]}),
    )
    .await;
    assert_eq!(status, 400, "{late}");
    assert!(late["error"]["message"]
        .as_str()
        .unwrap()
        .contains("No tool call found"));
    assert_eq!(
        transcript_rows(fixture.dir.path()),
        0,
        "nothing of the cancelled turn is kept"
    );
    let (status, next) = post_json(
        &fixture,
        "/responses",
        json!({"input": "never mind", "previous_response_id": first_id}),
    )
    .await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
}

/// Whether a request asks about `city`'s weather (its last user message).
fn asks_about(request: &RecordedRequest, city: &str) -> bool {
    request
        .last_user_text()
        .is_some_and(|t| t.contains(&format!("weather in {city}")))
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_python_client_round_trips_function_tools() {
    if !python_client_here("the Responses front's Python function tool test") {
        return;
    }
    let fixture = fixture().await;
    for city in ["Paris", "Oslo"] {
        fixture.mock.push_reply_when(
            move |r| asks_about(r, city),
            ScriptedReply::tool_call("get_weather", format!(r#"{{"city":"{city}"}}"#)),
        );
    }
    let (seen, stdout) = run_python_client("responses_front_tools.py", &fixture.url).await;

    // The chain: the call, the client's output, the answer on it.
    let chain = &seen["chain"];
    let call = &chain["first"]["output"][0];
    assert_eq!(call["type"], "function_call", "{chain}");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(chain["first"]["instructions"], "Answer in one line.");
    assert_eq!(chain["outputs"][0]["call_id"], call["call_id"]);
    assert_eq!(chain["second"]["status"], "completed");
    assert_eq!(chain["second"]["previous"], chain["first"]["id"]);
    assert_eq!(
        chain["second"]["text"],
        "mock reply to tool output: Paris: 18C and sunny"
    );
    assert_eq!(chain["input_items"][0]["type"], "function_call_output");

    // Streamed in a conversation: the call's events, then the answer; the conversation's
    // items are the client's message, the call, the output and the answer.
    let conversation = &seen["conversation"];
    let kinds = conversation["called_events"].as_array().unwrap();
    assert!(kinds.contains(&json!("response.function_call_arguments.done")));
    assert_eq!(conversation["called"]["output"][0]["type"], "function_call");
    assert_eq!(
        conversation["answer"],
        "mock reply to tool output: Oslo: 18C and sunny"
    );
    assert_eq!(conversation["deltas"], conversation["answer"]);
    let item_kinds: Vec<&str> = conversation["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        item_kinds,
        [
            "message",
            "function_call",
            "function_call_output",
            "message"
        ]
    );
    assert!(!stdout.contains(CONTEXT_MARK), "{stdout}");

    // Upstream: the chain's round trip is one thread's two requests; its next turns pass an
    // epoch change (window of two messages), which starts a new upstream thread carrying the
    // engine's context once.
    let requests = fixture.mock.response_requests();
    assert_eq!(requests.len(), 6, "{requests:#?}");
    assert!(continues(&requests[1], &requests[0]));
    assert_eq!(requests[1].input[0]["type"], "function_call_output");
    let projected: Vec<bool> = requests
        .iter()
        .map(|r| r.body_contains(CONTEXT_MARK))
        .collect();
    assert_eq!(projected.iter().filter(|p| **p).count(), 1, "{projected:?}");
    let epoch = projected.iter().position(|p| *p).unwrap();
    assert!(
        !continues(&requests[epoch], &requests[epoch - 1]),
        "the context starts a new thread"
    );
    // Engine turns: the chain's round trip, its two later turns and the conversation's round
    // trip, each once (a user message and an answer).
    assert_eq!(transcript_rows_reaching(fixture.dir.path(), 8).await, 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_npm_client_round_trips_function_tools() {
    let Some(node) = node_22() else {
        eprintln!("SKIPPED: no Node.js >= 22 (the `openai` npm package needs it); the Responses front's npm function tool test did not run");
        return;
    };
    if !repo().join("node_modules/openai/package.json").exists() {
        eprintln!("SKIPPED: the `openai` npm package is not installed (npm ci at the repository root); the Responses front's npm function tool test did not run");
        return;
    }
    let fixture = fixture().await;
    fixture.mock.push_reply(ScriptedReply::tool_call(
        "get_weather",
        r#"{"city":"Rome"}"#,
    ));
    let script = repo().join("tests/clients/responses_front_tools.mjs");
    let (seen, _) = run_client(node, vec![script], &fixture.url).await;
    let events = seen["events"].as_array().unwrap();
    assert!(events.contains(&json!("response.function_call_arguments.delta")));
    assert_eq!(seen["called"][0]["type"], "function_call");
    assert_eq!(
        seen["answer"]["text"],
        "mock reply to tool output: Rome: 21C and clear"
    );
    assert_eq!(seen["answer"]["previous"], seen["calledId"]);
    assert_eq!(transcript_rows_reaching(fixture.dir.path(), 2).await, 2);
}
