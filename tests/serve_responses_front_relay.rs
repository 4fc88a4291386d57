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
    config_of, events_of, fixture_of, transcript_rows, TOKEN, UPSTREAM_KEY, UPSTREAM_KEY_ENV,
};

fn legacy() -> Value {
    json!({"slots": {"contextEngine": "legacy"}})
}

/// A body the engine front would refuse (a system message, a hosted tool, sampling) passes
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

/// Pass-through with an engine running the turns is refused at start, naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn pass_through_auth_with_an_engine_is_refused() {
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
        stderr.contains("serve.responses.passThroughAuth") && stderr.contains("sample-summary"),
        "{stderr}"
    );
    assert!(mock.requests().is_empty());
}
