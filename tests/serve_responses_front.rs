//! `ctxbridge serve --front responses` driven by the official `openai` Python package against
//! the loopback mock model: a `previous_response_id` chain (non-streamed and streamed), a
//! conversation, reads, the model list and errors, with `sample-summary` as the engine. The
//! client sees its own inputs and the model's answers under the front's ids; the engine's
//! context reaches the upstream once per epoch and never the client. Skips loudly when
//! `python3` has no `openai` package (CI installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

const TOKEN: &str = "front-test-token";
/// The opening of the projected context (docs/architecture.md#rendering).
const CONTEXT_MARK: &str = "<conversation_context>";

fn openai_python() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The server, killed when the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve --front responses` in `dir` and returns it with its base URL (`…/v1`), read
/// from its start-up line.
fn start_front(dir: &Path) -> (Server, String) {
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir)
        .args([
            "serve",
            "--front",
            "responses",
            "--listen",
            "http://127.0.0.1:0",
            "--ws-auth",
            "capability-token",
            "--ws-token-file",
            "token",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Server(child);
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("serve ended before its start-up line")
            .unwrap();
        if let Some(rest) = line.split("Responses API on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep reading stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (server, url)
}

/// The mock model, the state directory and the front serving them with `sample-summary`.
struct Fixture {
    mock: MockModelServer,
    dir: tempfile::TempDir,
    _server: Server,
    url: String,
}

async fn fixture() -> Fixture {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        serde_json::to_string_pretty(&json!({
            "backend": {"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model"},
            "store": {"path": "state.db"},
            "plugins": {
                "slots": {"contextEngine": "sample-summary"},
                "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": 2}}},
            },
        }))
        .unwrap(),
    )
    .unwrap();
    let (server, url) = start_front(dir.path());
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"),
        "{url}"
    );
    Fixture {
        mock,
        dir,
        _server: server,
        url,
    }
}

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

/// Runs a client program (`program` then `args`, the front's URL and token appended) and
/// returns what it printed, as JSON.
async fn run_client(
    program: std::path::PathBuf,
    args: Vec<std::path::PathBuf>,
    url: &str,
) -> (Value, String) {
    let url = url.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(program)
            .args(args)
            .args([&url, TOKEN])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_str(stdout.trim()).unwrap(), stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_python_client_through_the_responses_front() {
    if !openai_python() {
        eprintln!("SKIPPED: python3 has no `openai` package (pip install openai); the Responses front's Python client test did not run");
        return;
    }
    let Fixture { mock, url, .. } = &fixture().await;
    let script = repo().join("tests/clients/responses_front.py");
    let (seen, stdout) = run_client("python3".into(), vec![script], url).await;

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

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A Node.js of version 22 or later (the `openai` npm package's floor): the plugin host's,
/// else the one on PATH.
fn node_22() -> Option<std::path::PathBuf> {
    let bundled = repo().join("hosts/openclaw-node/node_modules/.bin/node");
    let node = if bundled.exists() {
        bundled
    } else {
        "node".into()
    };
    let out = Command::new(&node).arg("--version").output().ok()?;
    let version = String::from_utf8_lossy(&out.stdout);
    let major: u32 = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()?;
    (major >= 22).then_some(node)
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

/// A request to the front with the test's token.
fn authed(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
) -> reqwest::RequestBuilder {
    client.request(method, url).bearer_auth(TOKEN)
}

/// Rows of the front's state store (`state.db` in the fixture's directory).
fn transcript_rows(dir: &Path) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("state.db")).unwrap();
    conn.query_row("SELECT count(*) FROM transcript", [], |r| r.get(0))
        .unwrap()
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
    let answered: Value = authed(
        &client,
        reqwest::Method::POST,
        format!("{}/responses", fixture.url),
    )
    .json(&json!({"model": "mock-model", "input": "a quick question"}))
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(answered["status"], "completed", "{answered}");
    assert_eq!(transcript_rows(fixture.dir.path()), 2);
}

/// `store: false`: the response is not readable, but its chain goes on; unknown routes and
/// unserved fields answer in the API's error shape.
#[tokio::test(flavor = "multi_thread")]
async fn unstored_responses_and_errors_in_the_api_shape() {
    let fixture = fixture().await;
    let client = reqwest::Client::new();
    let post = |body: Value| {
        authed(
            &client,
            reqwest::Method::POST,
            format!("{}/responses", fixture.url),
        )
        .json(&body)
    };
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

    let refused = post(json!({"input": "x", "instructions": "be brief"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["param"], "instructions");
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
