//! The Responses front without a context engine (`legacy`): requests go to the upstream
//! unchanged and come back unchanged, with the upstream's ids; the front's token is checked
//! and the configured upstream key sent, or, with `serve.responses.passThroughAuth`, the
//! client's key goes on to the upstream. Against the loopback mock model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

#[path = "support/responses_front.rs"]
mod front;

use front::{
    config_of, events_of, fixture_configured, fixture_of, transcript_rows, TOKEN, UPSTREAM_KEY,
    UPSTREAM_KEY_ENV,
};

fn legacy() -> Value {
    json!({"slots": {"contextEngine": "legacy"}})
}

/// A body the engine front would refuse (a hosted tool, sampling) passes
/// unchanged; the answer is the upstream's, ids included; the upstream gets the configured
/// key, never the client's token; a wrong token never reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_engine_requests_relay_unchanged() {
    let fixture = fixture_of(legacy(), json!({}), true).await;
    let client = reqwest::Client::new();
    let sent = json!({
        "model": "mock-model",
        "input": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "relay me"},
        ],
        "tools": [{"type": "web_search"}],
        "temperature": 0.2,
        "store": true,
        "stream": true,
    });
    let response = client
        .post(format!("{}/responses?trace=1", fixture.url))
        .bearer_auth(TOKEN)
        .header("openai-beta", "responses=v1")
        .json(&sent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = events_of(&response.text().await.unwrap());
    let completed = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .expect("the upstream's stream, relayed to its end");

    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 1);
    let upstream = &requests[0];
    assert_eq!(upstream.body, sent, "the body went upstream unchanged");
    assert_eq!(upstream.path, "/v1/responses");
    assert_eq!(
        upstream.header("authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert_eq!(upstream.header("openai-beta"), Some("responses=v1"));
    assert_eq!(
        completed["response"]["id"].as_str(),
        upstream.response_id.as_deref(),
        "the upstream's ids"
    );

    // A chain continues on the upstream's id; reads relay too.
    let id = completed["response"]["id"].as_str().unwrap();
    let next = client
        .post(format!("{}/responses", fixture.url))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "mock-model", "input": "and on", "previous_response_id": id, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 200);
    let _ = next.text().await.unwrap();
    let requests = fixture.mock.response_requests();
    assert_eq!(requests[1].previous_response_id.as_deref(), Some(id));
    let models: Value = client
        .get(format!("{}/models", fixture.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "mock-model");
    let unknown = client
        .get(format!("{}/files", fixture.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404, "the upstream's own answer");

    // The front's token is still checked, before anything goes upstream.
    let before = fixture.mock.requests().len();
    let refused = client
        .post(format!("{}/responses", fixture.url))
        .bearer_auth("wrong")
        .json(&sent)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(fixture.mock.requests().len(), before);
    assert_eq!(transcript_rows(fixture.dir.path()), 0, "no engine session");
}

/// With `serve.responses.passThroughAuth`, the client's key is the upstream's: passed on as
/// sent, and a request without one is refused before it goes upstream.
#[tokio::test(flavor = "multi_thread")]
async fn pass_through_auth_hands_the_clients_key_upstream() {
    let fixture = fixture_of(
        legacy(),
        json!({"responses": {"passThroughAuth": true}}),
        false,
    )
    .await;
    let client = reqwest::Client::new();
    let body = json!({"model": "mock-model", "input": "mine", "stream": true});
    let response = client
        .post(format!("{}/responses", fixture.url))
        .bearer_auth("sk-the-clients-own")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    let requests = fixture.mock.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-the-clients-own")
    );
    let refused = client
        .post(format!("{}/responses", fixture.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_api_key");
    assert_eq!(
        fixture.mock.requests().len(),
        1,
        "nothing more went upstream"
    );
}

/// Pass-through with an engine on conversation threads is refused at start, naming the key
/// and what it needs.
#[tokio::test(flavor = "multi_thread")]
async fn pass_through_auth_with_engine_conversations_is_refused() {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        config_of(
            &mock,
            json!({"slots": {"contextEngine": "sample-summary"}}),
            json!({"responses": {"passThroughAuth": true}}),
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir.path())
        .args([
            "serve",
            "--front",
            "responses",
            "--listen",
            "http://127.0.0.1:0",
        ])
        .env(UPSTREAM_KEY_ENV, UPSTREAM_KEY)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("serve.responses.passThroughAuth")
            && stderr.contains("backend.threads \"chain\""),
        "{stderr}"
    );
    assert!(mock.requests().is_empty());
}

/// Pass-through with an engine (chain threads): each client's key goes upstream with its
/// turns, and a client's responses are its own: another key finds none of them, cannot
/// continue its chain, and lists the models with its own key.
#[tokio::test(flavor = "multi_thread")]
async fn pass_through_auth_with_an_engine_keeps_each_keys_responses_its_own() {
    let fixture = fixture_configured(
        |mock| {
            let mut config: Value = serde_json::from_str(&config_of(
                mock,
                json!({"slots": {"contextEngine": "sample-summary"}}),
                json!({"responses": {"passThroughAuth": true}}),
            ))
            .unwrap();
            config["backend"]["threads"] = json!("chain");
            config.to_string()
        },
        false,
    )
    .await;
    let client = reqwest::Client::new();
    let post = |key: &'static str, body: Value| {
        client
            .post(format!("{}/responses", fixture.url))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let first: Value = post("sk-ann", json!({"input": "Ann's first"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first_id = first["id"].as_str().unwrap();
    let second = post(
        "sk-ann",
        json!({"input": "Ann's second", "previous_response_id": first_id}),
    )
    .await
    .unwrap();
    assert_eq!(second.status(), 200);
    let keys: Vec<Option<String>> = fixture
        .mock
        .response_requests()
        .iter()
        .map(|r| r.header("authorization").map(str::to_owned))
        .collect();
    assert_eq!(
        keys,
        [
            Some("Bearer sk-ann".to_owned()),
            Some("Bearer sk-ann".to_owned())
        ]
    );

    // Bob sees nothing of Ann's.
    let read = client
        .get(format!("{}/responses/{first_id}", fixture.url))
        .bearer_auth("sk-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 404);
    let hijack = post(
        "sk-bob",
        json!({"input": "tell me Ann's", "previous_response_id": first_id}),
    )
    .await
    .unwrap();
    assert_eq!(hijack.status(), 404);
    assert_eq!(
        fixture.mock.response_requests().len(),
        2,
        "nothing of Bob's went upstream"
    );
    let models = client
        .get(format!("{}/models", fixture.url))
        .bearer_auth("sk-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    let last = fixture.mock.requests().pop().unwrap();
    assert_eq!(last.path, "/v1/models");
    assert_eq!(last.header("authorization"), Some("Bearer sk-bob"));

    // Ann still reads hers; no key is refused before anything goes upstream.
    let read = client
        .get(format!("{}/responses/{first_id}", fixture.url))
        .bearer_auth("sk-ann")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let anonymous = client
        .post(format!("{}/responses", fixture.url))
        .json(&json!({"input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let metrics = client
        .get(format!("{}/metrics", fixture.url.trim_end_matches("/v1")))
        .bearer_auth("sk-ann")
        .send()
        .await
        .unwrap();
    assert_eq!(
        metrics.status(),
        404,
        "no metrics without a token of the front's"
    );
}
