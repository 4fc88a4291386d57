//! The Responses backend on the wire: against a scripted loopback Responses server, every test
//! checks the exact requests the backend sends (instructions, chaining, injected messages,
//! compaction, keys) and how each server answer maps onto a `BackendError`. That the backend
//! behaves like every other backend is proved by `backend_responses_conformance.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use ctxbridge::backend::responses::{
    ResponsesBackendConfigError, ResponsesThreads, COMPACTED_CHAIN_PREFIX,
};
use ctxbridge::backend::{
    BackendError, CompletionRequest, ResponsesBackend, ResponsesBackendConfig, ResumeThread,
    StartThread, ThreadId, ThreadedBackend, TurnEvent, TurnRequest, Usage,
};
use responses_client::ResponsesConfig;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A scripted reply: an HTTP status with a body, SSE events, or JSON.
#[derive(Clone)]
enum Reply {
    Status(u16, Value),
    Sse(Vec<Value>),
    Json(Value),
}

type Script = Arc<dyn Fn(&str, usize, &Value) -> Reply + Send + Sync>;

#[derive(Clone, Debug)]
struct Recorded {
    path: String,
    body: Value,
    authorization: Option<String>,
}

#[derive(Clone)]
struct Server {
    script: Script,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

async fn handle(server: Server, path: &str, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = {
        let mut requests = server.requests.lock().unwrap();
        requests.push(Recorded {
            path: path.to_owned(),
            body: body.clone(),
            authorization: headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned()),
        });
        requests.len() - 1
    };
    match (server.script)(path, index, &body) {
        Reply::Status(status, body) => {
            (StatusCode::from_u16(status).unwrap(), body.to_string()).into_response()
        }
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Sse(events) => {
            let text: String = events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                .collect();
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from(text))
                .unwrap()
        }
    }
}

struct Harness {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Harness {
    async fn start(script: Script) -> Self {
        let server = Server {
            script,
            requests: Arc::default(),
        };
        let requests = server.requests.clone();
        let app = Router::new()
            .route(
                "/v1/responses",
                post(
                    |State(s): State<Server>, h: HeaderMap, b: Bytes| async move {
                        handle(s, "/responses", h, b).await
                    },
                ),
            )
            .route(
                "/v1/responses/compact",
                post(
                    |State(s): State<Server>, h: HeaderMap, b: Bytes| async move {
                        handle(s, "/responses/compact", h, b).await
                    },
                ),
            )
            .with_state(server);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Harness {
            base_url: format!("http://{address}/v1"),
            requests,
        }
    }

    fn backend(&self) -> ResponsesBackend {
        let config =
            ResponsesConfig::new(&self.base_url).with_backoff_base(Duration::from_millis(1));
        ResponsesBackend::with_client_config(config, "test-model")
            .unwrap()
            .with_threads(ResponsesThreads::Chain)
    }

    fn bodies(&self, path: &str) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.body.clone())
            .collect()
    }
}

/// A completed response `resp_<n>` whose text echoes the request's last input text.
fn echo_completed(index: usize, body: &Value) -> Reply {
    let id = format!("resp_{}", index + 1);
    let last_text = body["input"]
        .as_array()
        .and_then(|items| items.last())
        .and_then(|item| item["content"][0]["text"].as_str())
        .unwrap_or("")
        .to_owned();
    Reply::Sse(vec![
        json!({"type": "response.created", "response": {"id": id}}),
        json!({"type": "response.output_text.delta", "delta": "echo: "}),
        json!({"type": "response.output_text.delta", "delta": last_text}),
        json!({"type": "response.completed", "response": {"id": id, "usage":
            {"input_tokens": 10, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 6}}}}),
    ])
}

fn echo_script() -> Script {
    Arc::new(|_, index, body| echo_completed(index, body))
}

fn api_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::Status(
        status,
        json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}),
    )
}

fn turn_request(thread: &ThreadId, input: &str) -> TurnRequest {
    TurnRequest {
        thread_id: thread.clone(),
        input: input.into(),
        developer_instructions: Some("engine context rules".into()),
        base_instructions: Some("You are helpful.".into()),
        tools: Default::default(),
        additional_context: None,
        options: Default::default(),
    }
}

async fn start(backend: &ResponsesBackend) -> ThreadId {
    backend
        .start_thread(StartThread {
            base_instructions: Some("You are helpful.".into()),
            developer_instructions: Some("engine context rules".into()),
            model: None,
            tools: Vec::new(),
        })
        .await
        .unwrap()
}

fn user_message(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// start_thread makes no server call; the first turn has no previous_response_id.
#[tokio::test]
async fn start_thread_makes_no_call() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = start(&backend).await;
    assert!(thread.as_str().starts_with("chain:"));
    assert!(harness.bodies("/responses").is_empty());
    let (tx, _rx) = mpsc::channel(64);
    backend
        .run_turn(turn_request(&thread, "hi"), tx)
        .await
        .unwrap();
    let bodies = harness.bodies("/responses");
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0].get("previous_response_id").is_none());
}

/// Every request carries the base + developer instructions, store:true and stream:true.
#[tokio::test]
async fn instructions_go_with_every_request() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let mut thread = start(&backend).await;
    for input in ["one", "two", "three"] {
        let (tx, _rx) = mpsc::channel(64);
        thread = backend
            .run_turn(turn_request(&thread, input), tx)
            .await
            .unwrap()
            .thread_id;
    }
    let bodies = harness.bodies("/responses");
    assert_eq!(bodies.len(), 3);
    for body in bodies {
        assert_eq!(
            body["instructions"],
            "You are helpful.\n\nengine context rules"
        );
        assert_eq!(body["store"], true);
        assert_eq!(body["stream"], true);
        assert_eq!(body["model"], "test-model");
    }
}

/// The chain advances to each new response id, and a chained request carries only the new
/// user message — never history.
#[tokio::test]
async fn chain_advances_without_history() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = start(&backend).await;
    let (tx, _rx) = mpsc::channel(64);
    let first = backend
        .run_turn(turn_request(&thread, "first"), tx)
        .await
        .unwrap();
    assert_eq!(first.thread_id, ThreadId("resp_1".into()));
    let (tx, _rx) = mpsc::channel(64);
    let second = backend
        .run_turn(turn_request(&first.thread_id, "second"), tx)
        .await
        .unwrap();
    assert_eq!(second.thread_id, ThreadId("resp_2".into()));
    let bodies = harness.bodies("/responses");
    assert_eq!(bodies[1]["previous_response_id"], "resp_1");
    assert_eq!(bodies[1]["input"], json!([user_message("second")]));
}

/// Text deltas stream as TurnEvents that add up to the reply; usage is reported.
#[tokio::test]
async fn deltas_stream_and_usage_is_reported() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = start(&backend).await;
    let (tx, mut rx) = mpsc::channel(64);
    let outcome = backend
        .run_turn(turn_request(&thread, "ping"), tx)
        .await
        .unwrap();
    let mut streamed = String::new();
    while let Ok(TurnEvent::TextDelta(delta)) = rx.try_recv() {
        streamed.push_str(&delta);
    }
    assert_eq!(outcome.reply, "echo: ping");
    assert_eq!(streamed, outcome.reply);
    assert_eq!(
        outcome.usage,
        Some(Usage {
            input_tokens: 10,
            output_tokens: 4,
            cached_input_tokens: 6
        })
    );
    assert_eq!(outcome.auto_compaction, None);
}

/// previous_response_not_found (code, or a 404 on a chain) is ThreadNotFound for that thread.
#[tokio::test]
async fn lost_chain_is_thread_not_found() {
    for reply in [
        api_error(
            400,
            "previous_response_not_found",
            "Previous response with id 'resp_old' not found.",
        ),
        Reply::Status(404, json!({})),
    ] {
        let harness = Harness::start(Arc::new(move |_, _, _| reply.clone())).await;
        let backend = harness.backend();
        let thread = ThreadId("resp_old".into());
        backend
            .resume_thread(&thread, &ResumeThread::default())
            .await
            .unwrap();
        let (tx, _rx) = mpsc::channel(64);
        let error = backend
            .run_turn(turn_request(&thread, "hello?"), tx)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, BackendError::ThreadNotFound { thread_id, .. } if thread_id == "resp_old"),
            "{error:?}"
        );
        assert_eq!(harness.bodies("/responses").len(), 1, "no retry on a 4xx");
    }
}

/// Context-window errors — by code, or by the docs/architecture.md#compaction-on-threaded-backends wording in a response.failed — are
/// ContextOverflow.
#[tokio::test]
async fn overflow_is_context_overflow() {
    let replies = [
        api_error(
            400,
            "context_length_exceeded",
            "Your input exceeds the context window of this model.",
        ),
        Reply::Sse(vec![
            json!({"type": "response.created", "response": {"id": "resp_x"}}),
            json!({"type": "response.failed", "response": {"id": "resp_x",
                "error": {"code": "server_error", "message": "Too many tokens in this request"}}}),
        ]),
    ];
    for reply in replies {
        let harness = Harness::start(Arc::new(move |_, _, _| reply.clone())).await;
        let backend = harness.backend();
        let (tx, _rx) = mpsc::channel(64);
        let error = backend
            .run_turn(turn_request(&ThreadId("resp_big".into()), "more"), tx)
            .await
            .unwrap_err();
        assert!(
            matches!(error, BackendError::ContextOverflow { .. }),
            "{error:?}"
        );
    }
}

/// Another response.failed is TurnFailed; a dropped stream is Unavailable.
#[tokio::test]
async fn other_failures_are_typed() {
    let failed = Reply::Sse(vec![
        json!({"type": "response.created", "response": {"id": "resp_f"}}),
        json!({"type": "response.failed", "response": {"id": "resp_f",
            "error": {"code": "server_error", "message": "model crashed"}}}),
    ]);
    let harness = Harness::start(Arc::new(move |_, _, _| failed.clone())).await;
    let (tx, _rx) = mpsc::channel(64);
    let error = harness
        .backend()
        .run_turn(turn_request(&ThreadId("resp_1".into()), "x"), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::TurnFailed { .. }),
        "{error:?}"
    );

    let dropped = Reply::Sse(vec![
        json!({"type": "response.created", "response": {"id": "resp_g"}}),
        json!({"type": "response.output_text.delta", "delta": "par"}),
    ]);
    let harness = Harness::start(Arc::new(move |_, _, _| dropped.clone())).await;
    let (tx, _rx) = mpsc::channel(64);
    let error = harness
        .backend()
        .run_turn(turn_request(&ThreadId("resp_1".into()), "x"), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, BackendError::Unavailable { message, .. }
            if message.contains("stream closed before response.completed")),
        "{error:?}"
    );
}

/// The key read from the configured variable is sent as a bearer token and never appears in
/// errors, even when the server echoes it.
#[tokio::test]
async fn api_key_is_sent_but_never_shown() {
    const VARIABLE: &str = "CTXBRIDGE_TEST_RESPONSES_KEY_SENT";
    const KEY: &str = "sk-test-backend-93ad01";
    std::env::set_var(VARIABLE, KEY);
    let harness = Harness::start(Arc::new(|_, _, _| {
        api_error(
            401,
            "invalid_api_key",
            &format!("Incorrect API key provided: {KEY}"),
        )
    }))
    .await;
    let backend = ResponsesBackend::new(ResponsesBackendConfig {
        api_key_env: Some(VARIABLE.into()),
        threads: ResponsesThreads::Chain,
        ..ResponsesBackendConfig::new(harness.base_url.clone(), "test-model")
    })
    .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    let error = backend
        .run_turn(turn_request(&ThreadId("resp_1".into()), "x"), tx)
        .await
        .unwrap_err();
    let recorded = harness.requests.lock().unwrap()[0].clone();
    assert_eq!(recorded.authorization, Some(format!("Bearer {KEY}")));
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{error:?}").contains(KEY));
    assert!(!format!("{backend:?}").contains(KEY));
}

/// A configured but unset key variable fails construction, naming the variable.
#[tokio::test]
async fn unset_key_variable_is_a_clear_error() {
    const VARIABLE: &str = "CTXBRIDGE_TEST_RESPONSES_KEY_NEVER_SET";
    let error = ResponsesBackend::new(ResponsesBackendConfig {
        api_key_env: Some(VARIABLE.into()),
        ..ResponsesBackendConfig::new("http://127.0.0.1:9/v1", "m")
    })
    .unwrap_err();
    assert!(
        matches!(&error, ResponsesBackendConfigError::ApiKeyUnset { variable } if variable == VARIABLE)
    );
    assert!(BackendError::from(error).to_string().contains(VARIABLE));
}

/// An injected developer message goes in front of the next turn of that thread, once.
#[tokio::test]
async fn injected_message_leads_the_next_turn_once() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = start(&backend).await;
    let (tx, _rx) = mpsc::channel(64);
    let first = backend
        .run_turn(turn_request(&thread, "first"), tx)
        .await
        .unwrap();
    backend
        .inject_developer_message(&first.thread_id, "policy changed")
        .await
        .unwrap();
    assert_eq!(
        harness.bodies("/responses").len(),
        1,
        "injection makes no call"
    );
    let (tx, _rx) = mpsc::channel(64);
    let second = backend
        .run_turn(turn_request(&first.thread_id, "second"), tx)
        .await
        .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    backend
        .run_turn(turn_request(&second.thread_id, "third"), tx)
        .await
        .unwrap();
    let bodies = harness.bodies("/responses");
    assert_eq!(
        bodies[1]["input"],
        json!([
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "policy changed"}]},
            user_message("second")
        ])
    );
    assert_eq!(bodies[1]["previous_response_id"], "resp_1");
    assert_eq!(bodies[2]["input"], json!([user_message("third")]));
}

/// An injected message survives a failed turn and goes with the retry.
#[tokio::test]
async fn injected_message_survives_a_failed_turn() {
    let harness = Harness::start(Arc::new(|_, index, body| {
        if index == 0 {
            Reply::Status(
                400,
                json!({"error": {"message": "bad", "code": "invalid_value"}}),
            )
        } else {
            echo_completed(index, body)
        }
    }))
    .await;
    let backend = harness.backend();
    let thread = ThreadId("resp_0".into());
    backend
        .inject_developer_message(&thread, "note")
        .await
        .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    let error = backend
        .run_turn(turn_request(&thread, "x"), tx)
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Other { .. }), "{error:?}");
    let (tx, _rx) = mpsc::channel(64);
    backend
        .run_turn(turn_request(&thread, "x"), tx)
        .await
        .unwrap();
    let bodies = harness.bodies("/responses");
    assert_eq!(bodies[1]["input"][0]["role"], "developer");
}

/// Without a compaction endpoint, compact_thread is Unsupported.
#[tokio::test]
async fn compaction_unsupported_without_the_endpoint() {
    let harness = Harness::start(Arc::new(|path, index, body| {
        if path == "/responses/compact" {
            Reply::Status(404, json!("no such route"))
        } else {
            echo_completed(index, body)
        }
    }))
    .await;
    let error = harness
        .backend()
        .compact_thread(&ThreadId("resp_5".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Unsupported { .. }),
        "{error:?}"
    );
}

/// With the endpoint, compaction yields a new thread whose next turn sends the window as input
/// without previous_response_id, and the chain continues from that turn's response.
#[tokio::test]
async fn compaction_continues_from_the_window() {
    let window = json!({"type": "compaction", "encrypted_content": "opaque-window"});
    let reply_window = window.clone();
    let harness = Harness::start(Arc::new(move |path, index, body| {
        if path == "/responses/compact" {
            Reply::Json(json!({"id": "cmp_1", "object": "response.compaction",
                               "output": [reply_window.clone()]}))
        } else {
            echo_completed(index, body)
        }
    }))
    .await;
    let backend = harness.backend();
    let compacted = backend
        .compact_thread(&ThreadId("resp_5".into()))
        .await
        .unwrap();
    let thread = compacted.thread_id.unwrap();
    assert!(thread.as_str().starts_with(COMPACTED_CHAIN_PREFIX));
    assert_eq!(
        harness.bodies("/responses/compact"),
        vec![json!({"model": "test-model", "previous_response_id": "resp_5"})]
    );
    backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    let outcome = backend
        .run_turn(turn_request(&thread, "after"), tx)
        .await
        .unwrap();
    let bodies = harness.bodies("/responses");
    assert!(bodies[0].get("previous_response_id").is_none());
    assert_eq!(bodies[0]["input"], json!([window, user_message("after")]));
    let (tx, _rx) = mpsc::channel(64);
    backend
        .run_turn(turn_request(&outcome.thread_id, "later"), tx)
        .await
        .unwrap();
    let bodies = harness.bodies("/responses");
    assert_eq!(
        bodies[1]["previous_response_id"],
        outcome.thread_id.as_str()
    );
    assert_eq!(bodies[1]["input"], json!([user_message("later")]));
}

/// A compacted thread this process does not hold (e.g. after a restart) is ThreadNotFound.
#[tokio::test]
async fn unknown_compacted_thread_is_not_found() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = ThreadId(format!("{COMPACTED_CHAIN_PREFIX}lost"));
    let error = backend
        .resume_thread(&thread, &ResumeThread::default())
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::ThreadNotFound { .. }));
    let (tx, _rx) = mpsc::channel(64);
    let error = backend
        .run_turn(turn_request(&thread, "x"), tx)
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::ThreadNotFound { .. }));
    assert!(harness.bodies("/responses").is_empty());
}

/// complete() is a one-off store:false request without a chain.
#[tokio::test]
async fn complete_is_a_one_off_unstored_request() {
    let harness = Harness::start(echo_script()).await;
    let done = harness
        .backend()
        .complete(CompletionRequest {
            instructions: Some("summarise".into()),
            input: "long text".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(done.text, "echo: long text");
    let body = harness.bodies("/responses")[0].clone();
    assert_eq!(body["store"], false);
    assert_eq!(body["instructions"], "summarise");
    assert!(body.get("previous_response_id").is_none());
    assert!(
        body.get("max_output_tokens").is_none(),
        "no bound asked, none sent: {body}"
    );
}

/// complete()'s `max_tokens` (llm.complete `maxTokens`) goes out as `max_output_tokens`.
#[tokio::test]
async fn complete_sends_max_tokens_as_max_output_tokens() {
    let harness = Harness::start(echo_script()).await;
    harness
        .backend()
        .complete(CompletionRequest {
            input: "long text".into(),
            max_tokens: Some(120),
            ..Default::default()
        })
        .await
        .unwrap();
    let body = harness.bodies("/responses")[0].clone();
    assert_eq!(body["max_output_tokens"], 120, "{body}");
}

/// A model override given at thread start is used by its turns as the chain advances.
#[tokio::test]
async fn model_override_follows_the_chain() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    let thread = backend
        .start_thread(StartThread {
            model: Some("override-model".into()),
            tools: Vec::new(),
            ..StartThread::default()
        })
        .await
        .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    let first = backend
        .run_turn(turn_request(&thread, "a"), tx)
        .await
        .unwrap();
    let (tx, _rx) = mpsc::channel(64);
    backend
        .run_turn(turn_request(&first.thread_id, "b"), tx)
        .await
        .unwrap();
    let models: Vec<Value> = harness
        .bodies("/responses")
        .iter()
        .map(|b| b["model"].clone())
        .collect();
    assert_eq!(
        models,
        vec![json!("override-model"), json!("override-model")]
    );
}

/// The backend declares the Responses traits of the port.
#[tokio::test]
async fn port_traits() {
    let harness = Harness::start(echo_script()).await;
    let backend = harness.backend();
    assert!(backend.sends_instructions_per_request());
    assert!(!backend.has_native_auto_compaction());
    assert_eq!(backend.turn_input_limit(), 1_048_576);
    assert_eq!(
        backend.profile(),
        ctxbridge::backend::BackendProfile::RESPONSES
    );
    assert_eq!(
        backend.capabilities(),
        ctxbridge::host::capabilities::Capability::ALL.to_vec()
    );
    assert_eq!(backend.kind(), ctxbridge::backend::BackendKind::Responses);
}
