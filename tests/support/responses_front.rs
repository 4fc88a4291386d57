//! The Responses front's test rig: `ctxbridge serve --front responses` started as a process on
//! a loopback port in a temporary state directory, before the loopback mock model, with
//! `sample-summary` as the engine; the official `openai` client programs run against it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use serde_json::{json, Value};

#[path = "programs.rs"]
mod programs;

pub const TOKEN: &str = "front-test-token";
/// The opening of the projected context (docs/architecture.md#rendering).
pub const CONTEXT_MARK: &str = "<conversation_context>";

pub fn openai_python() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The server, killed when the test ends.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve --front responses` in `dir` and returns it with its base URL (`…/v1`), read
/// from its start-up line.
pub fn start_front(dir: &Path) -> (Server, String) {
    start_front_as(dir, true)
}

/// The environment variable the fixture's `backend.apiKeyEnv` names.
pub const UPSTREAM_KEY_ENV: &str = "CTXBRIDGE_TEST_UPSTREAM_KEY";
/// The upstream key the front is started with.
pub const UPSTREAM_KEY: &str = "sk-upstream-test-key";

/// [`start_front`], with the capability token (`--ws-auth`) or without.
pub fn start_front_as(dir: &Path, capability_token: bool) -> (Server, String) {
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let mut args = vec![
        "serve",
        "--front",
        "responses",
        "--listen",
        "http://127.0.0.1:0",
    ];
    if capability_token {
        args.extend(["--ws-auth", "capability-token", "--ws-token-file", "token"]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir)
        .args(args)
        .env(UPSTREAM_KEY_ENV, UPSTREAM_KEY)
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
pub struct Fixture {
    pub mock: MockModelServer,
    pub dir: tempfile::TempDir,
    pub _server: Server,
    pub url: String,
}

pub async fn fixture() -> Fixture {
    fixture_with(json!({})).await
}

/// The fixture with `serve` as the configuration's `serve` section.
pub async fn fixture_with(serve: Value) -> Fixture {
    fixture_of(
        json!({
            "slots": {"contextEngine": "sample-summary"},
            "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": 2}}},
        }),
        serve,
        true,
    )
    .await
}

/// The configuration of a front before `mock` with these `plugins` and `serve` sections.
pub fn config_of(mock: &MockModelServer, plugins: Value, serve: Value) -> String {
    serde_json::to_string_pretty(&json!({
        "backend": {"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model",
                    "apiKeyEnv": UPSTREAM_KEY_ENV},
        "store": {"path": "state.db"},
        "plugins": plugins,
        "serve": serve,
    }))
    .unwrap()
}

/// The fixture with these `plugins` and `serve` sections, started with the capability token
/// or without.
pub async fn fixture_of(plugins: Value, serve: Value, capability_token: bool) -> Fixture {
    fixture_configured(|mock| config_of(mock, plugins, serve), capability_token).await
}

/// The fixture with the configuration `config` writes for the mock model.
pub async fn fixture_configured(
    config: impl FnOnce(&MockModelServer) -> String,
    capability_token: bool,
) -> Fixture {
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ctxbridge.json5"), config(&mock)).unwrap();
    let (server, url) = start_front_as(dir.path(), capability_token);
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

/// Runs a client program (`program` then `args`, the front's URL and token appended) and
/// returns what it printed, as JSON.
pub async fn run_client(
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

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A Node.js of version 22 or later (the `openai` npm package's floor): the plugin host's,
/// else the one on PATH.
pub fn node_22() -> Option<std::path::PathBuf> {
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

/// Whether `python3` with the `openai` package is here; when not, says loudly that `test`
/// did not run.
pub fn python_client_here(test: &str) -> bool {
    let here = openai_python();
    if !here {
        eprintln!(
            "SKIPPED: python3 has no `openai` package (pip install openai); {test} did not run"
        );
    }
    here
}

/// Whether `python3` is here; when not, says loudly that `test` (which needs it) did not run.
pub fn python3_here(test: &str) -> bool {
    programs::program_here("python3", test)
}

/// Runs the Python client `tests/clients/{script}` against the front at `url` (see
/// [`run_client`]).
pub async fn run_python_client(script: &str, url: &str) -> (Value, String) {
    let script = repo().join("tests/clients").join(script);
    run_client("python3".into(), vec![script], url).await
}

/// A request to the front with the test's token.
pub fn authed(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
) -> reqwest::RequestBuilder {
    client.request(method, url).bearer_auth(TOKEN)
}

/// A `POST /v1/responses` of `body` to the front with the test's token, on `client`.
pub fn post_response(
    client: &reqwest::Client,
    fixture: &Fixture,
    body: &Value,
) -> reqwest::RequestBuilder {
    authed(
        client,
        reqwest::Method::POST,
        format!("{}/responses", fixture.url),
    )
    .json(body)
}

/// Rows of the front's state store (`state.db` in the fixture's directory).
pub fn transcript_rows(dir: &Path) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("state.db")).unwrap();
    conn.query_row("SELECT count(*) FROM transcript", [], |r| r.get(0))
        .unwrap()
}

/// The transcript's rows once they are `expected`, or after 10 s: a streamed response ends as
/// soon as the model has answered, and its turn is recorded right after. For a client out of
/// the test's hands (an SDK script); with a response id at hand, reading the response waits
/// for its turn's record instead.
pub async fn transcript_rows_reaching(dir: &Path, expected: i64) -> i64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows = transcript_rows(dir);
        if rows == expected || std::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// POSTs `body` to `path` under the front's base URL with the token; the status and the JSON
/// body.
pub async fn post_json(fixture: &Fixture, path: &str, body: Value) -> (u16, Value) {
    let response = authed(
        &reqwest::Client::new(),
        reqwest::Method::POST,
        format!("{}{path}", fixture.url),
    )
    .json(&body)
    .send()
    .await
    .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// GETs `path` under the front's base URL with the token; the JSON body.
pub async fn get_json(fixture: &Fixture, path: &str) -> Value {
    authed(
        &reqwest::Client::new(),
        reqwest::Method::GET,
        format!("{}{path}", fixture.url),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap()
}

/// The `data:` payloads of an SSE body, as JSON.
pub fn events_of(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}
