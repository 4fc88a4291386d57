//! HTTP behaviour of the client against a scripted loopback axum server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use responses_client::{
    ApiKey, CompactRequest, CreateResponse, InputItem, ResponseUsage, ResponsesClient,
    ResponsesConfig, ResponsesError,
};
use serde_json::{json, Value};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;

const KEY: &str = "sk-test-4f1c9b7e2d";

/// What the scripted server answers to one request.
#[derive(Clone)]
enum Reply {
    /// A status with a body.
    Status(u16, String),
    /// 200 with these SSE chunks, then the body ends.
    Sse(Vec<String>),
    /// 200 with these SSE chunks, then silence with the connection open.
    SseThenHang(Vec<String>),
    /// 200 with these SSE chunks, then the last one again and again, without end.
    SseForever(Vec<String>),
    /// 200 with a JSON body.
    Json(Value),
}

type Script = Arc<dyn Fn(usize, &Value) -> Reply + Send + Sync>;

#[derive(Clone)]
struct Server {
    script: Script,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

#[derive(Clone, Debug)]
struct Recorded {
    path: &'static str,
    query: Option<String>,
    body: Value,
    authorization: Option<String>,
}

async fn record(
    server: &Server,
    path: &'static str,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Reply {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let index = {
        let mut requests = server.requests.lock().unwrap();
        requests.push(Recorded {
            path,
            query: uri.query().map(str::to_owned),
            body: body.clone(),
            authorization: headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned()),
        });
        requests.len() - 1
    };
    (server.script)(index, &body)
}

fn render(reply: Reply) -> Response {
    match reply {
        Reply::Status(status, body) => {
            (StatusCode::from_u16(status).unwrap(), body).into_response()
        }
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Sse(chunks) => {
            let stream = futures::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
            );
            sse_response(Body::from_stream(stream))
        }
        Reply::SseThenHang(chunks) => {
            let stream = futures::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
            )
            .chain(futures::stream::pending());
            sse_response(Body::from_stream(stream))
        }
        Reply::SseForever(chunks) => {
            let last = chunks.last().cloned().unwrap_or_default();
            let stream = futures::stream::iter(chunks)
                .chain(futures::stream::repeat(last))
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
            sse_response(Body::from_stream(stream))
        }
    }
}

fn sse_response(body: Body) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

async fn responses(
    State(server): State<Server>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    render(record(&server, "/responses", &uri, &headers, &body).await)
}

async fn compact(
    State(server): State<Server>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    render(record(&server, "/responses/compact", &uri, &headers, &body).await)
}

/// Which compaction route the server offers.
#[derive(Clone, Copy)]
enum CompactRoute {
    Missing,
    GetOnly,
    Post,
}

async fn start(compact_route: CompactRoute, script: Script) -> (String, Arc<Mutex<Vec<Recorded>>>) {
    let server = Server {
        script,
        requests: Arc::default(),
    };
    let requests = server.requests.clone();
    let mut app = Router::new().route("/v1/responses", post(responses));
    app = match compact_route {
        CompactRoute::Missing => app,
        CompactRoute::GetOnly => app.route("/v1/responses/compact", get(|| async { "" })),
        CompactRoute::Post => app.route("/v1/responses/compact", post(compact)),
    };
    let app = app.with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/v1"), requests)
}

fn sse(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

fn completed_stream(id: &str, text: &str) -> Vec<String> {
    vec![
        sse(json!({"type": "response.created", "response": {"id": id}})),
        sse(json!({"type": "response.output_text.delta", "delta": text})),
        sse(json!({"type": "response.completed", "response": {"id": id,
            "usage": {"input_tokens": 5, "output_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 1}}}})),
    ]
}

fn api_error(code: &str, message: &str) -> String {
    json!({"error": {"message": message, "type": "invalid_request_error", "code": code}})
        .to_string()
}

fn client(base_url: &str) -> ResponsesClient {
    ResponsesClient::new(
        ResponsesConfig::new(base_url)
            .with_api_key(Some(ApiKey::new(KEY)))
            .with_backoff_base(Duration::from_millis(1))
            .with_idle_timeout(Duration::from_secs(10)),
    )
    .unwrap()
}

fn request(previous_response_id: Option<&str>) -> CreateResponse {
    CreateResponse {
        model: "test-model".into(),
        instructions: Some("be brief".into()),
        input: vec![InputItem::user_text("hello")],
        previous_response_id: previous_response_id.map(str::to_owned),
        conversation: None,
        store: true,
        tools: Vec::new(),
        tool_choice: None,
        max_output_tokens: None,
    }
}

fn count(requests: &Arc<Mutex<Vec<Recorded>>>) -> usize {
    requests.lock().unwrap().len()
}

/// A streamed response is collected; the request carries bearer auth, stream:true and the body.
#[tokio::test]
async fn streams_a_response_with_bearer_auth() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| Reply::Sse(completed_stream("resp_a", "hi there"))),
    )
    .await;
    let done = client(&base)
        .create_response(request(Some("resp_prev")))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(done.id, "resp_a");
    assert_eq!(done.text, "hi there");
    assert_eq!(
        done.usage,
        Some(ResponseUsage {
            input_tokens: 5,
            output_tokens: 2,
            cached_tokens: 1
        })
    );
    let recorded = requests.lock().unwrap()[0].clone();
    assert_eq!(
        recorded.authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(
        recorded.body,
        json!({
            "model": "test-model",
            "instructions": "be brief",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hello"}]}],
            "previous_response_id": "resp_prev",
            "store": true,
            "stream": true
        })
    );
}

/// Without a key no Authorization header is sent.
#[tokio::test]
async fn no_key_no_authorization_header() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| Reply::Sse(completed_stream("resp_b", "x"))),
    )
    .await;
    let client = ResponsesClient::new(ResponsesConfig::new(&base)).unwrap();
    client
        .create_response(request(None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(requests.lock().unwrap()[0].authorization, None);
}

/// A persistent 500 is retried max_retries times, then reported with status and attempts.
#[tokio::test]
async fn retries_5xx_up_to_the_limit_then_errors() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| Reply::Status(500, api_error("server_error", "boom"))),
    )
    .await;
    let error = client(&base)
        .create_response(request(None))
        .await
        .unwrap_err();
    assert_eq!(count(&requests), 3, "one attempt plus two retries");
    assert!(matches!(
        &error,
        ResponsesError::Api { status: 500, attempts: 3, code: Some(code), .. } if code == "server_error"
    ));
}

/// A 5xx followed by success yields the successful response.
#[tokio::test]
async fn a_retry_after_5xx_can_succeed() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|index, _| {
            if index == 0 {
                Reply::Status(503, "overloaded".into())
            } else {
                Reply::Sse(completed_stream("resp_c", "ok"))
            }
        }),
    )
    .await;
    let done = client(&base)
        .create_response(request(None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(done.id, "resp_c");
    assert_eq!(count(&requests), 2);
}

/// A 400 is not retried and carries the API's code (here previous_response_not_found).
#[tokio::test]
async fn no_retry_on_400() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::Status(
                400,
                api_error(
                    "previous_response_not_found",
                    "Previous response with id 'resp_gone' not found.",
                ),
            )
        }),
    )
    .await;
    let error = client(&base)
        .create_response(request(Some("resp_gone")))
        .await
        .unwrap_err();
    assert_eq!(count(&requests), 1);
    assert_eq!(error.status(), Some(400));
    assert!(error.is_previous_response_not_found());
    assert!(!error.is_context_overflow());
}

/// A 429 is not retried either (the caller decides; documented on `ResponsesConfig`).
#[tokio::test]
async fn no_retry_on_429() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| Reply::Status(429, api_error("rate_limit_exceeded", "slow down"))),
    )
    .await;
    let error = client(&base)
        .create_response(request(None))
        .await
        .unwrap_err();
    assert_eq!(count(&requests), 1);
    assert_eq!(error.code(), Some("rate_limit_exceeded"));
}

/// A context overflow answered as HTTP 400 is recognised.
#[tokio::test]
async fn overflow_status_is_recognised() {
    let (base, _) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::Status(
                400,
                api_error(
                    "context_length_exceeded",
                    "Your input exceeds the context window of this model.",
                ),
            )
        }),
    )
    .await;
    let error = client(&base)
        .create_response(request(None))
        .await
        .unwrap_err();
    assert!(error.is_context_overflow());
}

/// A plain 404 on a chained request means the chain is gone.
#[tokio::test]
async fn a_404_on_a_chain_is_previous_response_not_found() {
    let (base, _) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| Reply::Status(404, String::new())),
    )
    .await;
    let chained = client(&base)
        .create_response(request(Some("resp_old")))
        .await
        .unwrap_err();
    assert!(chained.is_previous_response_not_found());
    let fresh = client(&base)
        .create_response(request(None))
        .await
        .unwrap_err();
    assert!(!fresh.is_previous_response_not_found());
}

/// Connection refused is retried, then reported as "no answer" with the attempt count.
#[tokio::test]
async fn connection_errors_are_retried_then_reported() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let error = client(&format!("http://{address}/v1"))
        .create_response(request(None))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResponsesError::Connect { attempts: 3, .. }),
        "{error:?}"
    );
}

/// A body that ends mid-response is "stream closed before response.completed", with partial
/// events delivered first.
#[tokio::test]
async fn a_dropped_stream_is_an_error() {
    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::Sse(vec![
                sse(json!({"type": "response.created", "response": {"id": "resp_d"}})),
                sse(json!({"type": "response.output_text.delta", "delta": "par"})),
            ])
        }),
    )
    .await;
    let mut stream = client(&base).create_response(request(None)).await.unwrap();
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item);
    }
    assert_eq!(items.len(), 3);
    assert!(items[1].is_ok());
    let error = items[2].as_ref().unwrap_err();
    assert!(error
        .to_string()
        .contains("stream closed before response.completed"));
    assert_eq!(count(&requests), 1, "a started stream is never retried");
}

/// A server that stops sending events trips the idle timeout.
#[tokio::test]
async fn a_silent_stream_trips_the_idle_timeout() {
    let (base, _) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::SseThenHang(vec![sse(
                json!({"type": "response.created", "response": {"id": "resp_e"}}),
            )])
        }),
    )
    .await;
    let client = ResponsesClient::new(
        ResponsesConfig::new(&base).with_idle_timeout(Duration::from_millis(100)),
    )
    .unwrap();
    let error = client
        .create_response(request(None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResponsesError::IdleTimeout { .. }),
        "{error:?}"
    );
}

/// A log sink for the tracing test.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures this thread's tracing output until the guard drops. tracing decides a callsite's
/// interest once for the whole process, on the first thread to hit it: a global default that
/// answers "sometimes" and enables nothing keeps a sibling test's thread without a subscriber
/// from deciding "never" for the callsites these tests read.
fn capture_logs() -> (LogBuffer, tracing::subscriber::DefaultGuard) {
    static ASK_EACH_TIME: std::sync::Once = std::sync::Once::new();
    ASK_EACH_TIME.call_once(|| {
        let global = tracing_subscriber::registry().with(filter_fn(|_| false));
        let _ = tracing::subscriber::set_global_default(global);
        tracing::callsite::rebuild_interest_cache();
    });
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

/// The key stays out of errors (even when the server echoes it), Debug output and tracing logs.
#[tokio::test]
async fn the_key_never_leaks() {
    let (logs, _guard) = capture_logs();

    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|index, _| {
            let message = format!("Incorrect API key provided: {KEY}");
            if index == 0 {
                Reply::Status(502, api_error("bad_gateway", &message))
            } else {
                Reply::Status(401, api_error("invalid_api_key", &message))
            }
        }),
    )
    .await;
    let client = client(&base);
    let error = client.create_response(request(None)).await.unwrap_err();
    assert_eq!(count(&requests), 2);
    assert_eq!(error.code(), Some("invalid_api_key"));
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{error:?}").contains(KEY));
    assert!(error.to_string().contains("[redacted]"));
    assert!(!format!("{client:?}").contains(KEY));

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("retrying"), "the retry was logged: {logs}");
    assert!(!logs.contains(KEY), "{logs}");
}

/// Compaction posts to /responses/compact and returns the opaque window.
#[tokio::test]
async fn compact_returns_the_new_window() {
    let (base, requests) = start(
        CompactRoute::Post,
        Arc::new(|_, _| {
            Reply::Json(json!({
                "id": "cmp_resp_1", "object": "response.compaction",
                "output": [{"type": "compaction", "encrypted_content": "opaque"}],
                "usage": {"input_tokens": 100, "output_tokens": 10}
            }))
        }),
    )
    .await;
    let compacted = client(&base)
        .compact(CompactRequest {
            model: "test-model".into(),
            input: vec![],
            instructions: None,
            previous_response_id: Some("resp_9".into()),
        })
        .await
        .unwrap();
    assert_eq!(compacted.id.as_deref(), Some("cmp_resp_1"));
    assert_eq!(
        compacted.output,
        vec![json!({"type": "compaction", "encrypted_content": "opaque"})]
    );
    let recorded = requests.lock().unwrap()[0].clone();
    assert_eq!(recorded.path, "/responses/compact");
    assert_eq!(
        recorded.body,
        json!({"model": "test-model", "previous_response_id": "resp_9"})
    );
}

/// A server without the compaction endpoint (404 or 405) reports it unsupported.
#[tokio::test]
async fn compact_without_the_endpoint_is_unsupported() {
    for route in [CompactRoute::Missing, CompactRoute::GetOnly] {
        let (base, _) = start(route, Arc::new(|_, _| Reply::Status(500, String::new()))).await;
        let error = client(&base)
            .compact(CompactRequest {
                model: "m".into(),
                input: vec![InputItem::user_text("history")],
                instructions: None,
                previous_response_id: None,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                ResponsesError::Unsupported {
                    status: 404 | 405,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}

/// A compaction of a chain that is gone is previous_response_not_found, not "unsupported".
#[tokio::test]
async fn compact_of_a_lost_chain_is_not_found() {
    let (base, _) = start(
        CompactRoute::Post,
        Arc::new(|_, _| {
            Reply::Status(
                404,
                api_error(
                    "previous_response_not_found",
                    "Previous response not found.",
                ),
            )
        }),
    )
    .await;
    let error = client(&base)
        .compact(CompactRequest {
            model: "m".into(),
            input: vec![],
            instructions: None,
            previous_response_id: Some("resp_gone".into()),
        })
        .await
        .unwrap_err();
    assert!(error.is_previous_response_not_found(), "{error:?}");
}

/// A key written into the base URL (userinfo and a query value) is sent where it belongs — the
/// query stays after the joined path — but never shows in errors, Debug output or the retry
/// WARN lines; nor in the error of a connection that was refused.
#[tokio::test]
async fn secrets_in_the_base_url_never_print() {
    const USER_SECRET: &str = "sk-in-userinfo-8d1e";
    const QUERY_SECRET: &str = "sk-in-query-3c7a";
    let (logs, _guard) = capture_logs();

    let (base, requests) = start(
        CompactRoute::Missing,
        Arc::new(|index, _| {
            if index == 0 {
                Reply::Status(502, api_error("bad_gateway", "upstream down"))
            } else {
                Reply::Status(400, api_error("invalid_request", "bad request"))
            }
        }),
    )
    .await;
    let secret_base = base.replace("http://", &format!("http://user:{USER_SECRET}@"))
        + &format!("?api-key={QUERY_SECRET}");
    let client = ResponsesClient::new(
        ResponsesConfig::new(&secret_base).with_backoff_base(Duration::from_millis(1)),
    )
    .unwrap();
    let error = client.create_response(request(None)).await.unwrap_err();
    assert_eq!(count(&requests), 2, "the request reached /v1/responses");
    let recorded = requests.lock().unwrap()[0].clone();
    assert_eq!(recorded.path, "/responses");
    assert_eq!(recorded.query, Some(format!("api-key={QUERY_SECRET}")));

    let refused = ResponsesClient::new(
        ResponsesConfig::new(format!(
            "http://user:{USER_SECRET}@127.0.0.1:1/v1?api-key={QUERY_SECRET}"
        ))
        .with_max_retries(1)
        .with_backoff_base(Duration::from_millis(1)),
    )
    .unwrap()
    .create_response(request(None))
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ResponsesError::Connect { .. }),
        "{refused:?}"
    );

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("retrying"), "the retry was logged: {logs}");
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        refused.to_string(),
        format!("{refused:?}"),
        format!("{client:?}"),
        logs,
    ] {
        assert!(!shown.contains(USER_SECRET), "{shown}");
        assert!(!shown.contains(QUERY_SECRET), "{shown}");
    }
    assert!(
        error.to_string().contains("/v1/responses?api-key=***"),
        "{error}"
    );
}

/// A stream that stops after response.created ends at the turn deadline, well before the idle
/// timeout, with the deadline error.
#[tokio::test]
async fn a_stalled_stream_ends_at_the_turn_deadline() {
    let (base, _) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::SseThenHang(vec![sse(
                json!({"type": "response.created", "response": {"id": "resp_stall"}}),
            )])
        }),
    )
    .await;
    let client = ResponsesClient::new(
        ResponsesConfig::new(&base)
            .with_idle_timeout(Duration::from_secs(600))
            .with_turn_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let error = client
        .create_response(request(None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResponsesError::Deadline { after, .. } if after == Duration::from_millis(200)),
        "{error:?}"
    );
}

/// A stream of deltas that never completes ends with ReplyTooLarge once the reply passes the
/// cap, instead of growing without end.
#[tokio::test]
async fn an_endless_delta_stream_hits_the_reply_cap() {
    let (base, _) = start(
        CompactRoute::Missing,
        Arc::new(|_, _| {
            Reply::SseForever(vec![
                sse(json!({"type": "response.created", "response": {"id": "resp_endless"}})),
                sse(json!({"type": "response.output_text.delta", "delta": "0123456789".repeat(100)})),
            ])
        }),
    )
    .await;
    let client =
        ResponsesClient::new(ResponsesConfig::new(&base).with_max_reply_bytes(64 * 1024)).unwrap();
    let error = client
        .create_response(request(None))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResponsesError::ReplyTooLarge { limit, .. } if limit == 64 * 1024),
        "{error:?}"
    );
}

/// Requests a conversations server saw: method, path, query and body.
type ConversationLog = Arc<Mutex<Vec<(String, String, Option<String>, Value)>>>;

/// A conversations server: `POST /v1/conversations` creates `conv_1`, `POST …/items` answers
/// the items as a list, and `GET …/items` serves `items` in pages of `page` items following
/// `after` (an item id), oldest first.
async fn conversations_server(items: Vec<Value>, page: usize) -> (String, ConversationLog) {
    let log: ConversationLog = Arc::default();
    let state = (log.clone(), Arc::new(items));
    let app =
        Router::new()
            .route(
                "/v1/conversations",
                post(
                    |State((log, _)): State<(ConversationLog, Arc<Vec<Value>>)>,
                     uri: Uri,
                     body: Bytes| async move {
                        let body: Value = serde_json::from_slice(&body).unwrap();
                        log.lock().unwrap().push((
                            "POST".into(),
                            uri.path().to_owned(),
                            uri.query().map(str::to_owned),
                            body,
                        ));
                        axum::Json(json!({"id": "conv_1", "object": "conversation",
                                      "created_at": 1, "metadata": {}}))
                    },
                ),
            )
            .route(
                "/v1/conversations/:id/items",
                post(
                    |State((log, _)): State<(ConversationLog, Arc<Vec<Value>>)>,
                     uri: Uri,
                     body: Bytes| async move {
                        let body: Value = serde_json::from_slice(&body).unwrap();
                        let data = body["items"].clone();
                        log.lock().unwrap().push((
                            "POST".into(),
                            uri.path().to_owned(),
                            uri.query().map(str::to_owned),
                            body,
                        ));
                        axum::Json(json!({"object": "list", "data": data,
                                      "first_id": null, "last_id": null, "has_more": false}))
                    },
                )
                .get(
                    move |State((log, items)): State<(ConversationLog, Arc<Vec<Value>>)>,
                          uri: Uri| async move {
                        let query = uri.query().unwrap_or("").to_owned();
                        log.lock().unwrap().push((
                            "GET".into(),
                            uri.path().to_owned(),
                            Some(query.clone()),
                            Value::Null,
                        ));
                        let after = query
                            .split('&')
                            .find_map(|pair| pair.strip_prefix("after="))
                            .map(str::to_owned);
                        let start = match after {
                            Some(after) => items.iter().position(|i| i["id"] == after).unwrap() + 1,
                            None => 0,
                        };
                        let end = (start + page).min(items.len());
                        let data: Vec<Value> = items[start..end].to_vec();
                        axum::Json(json!({"object": "list", "data": data,
                                      "first_id": data.first().map(|i| i["id"].clone()),
                                      "last_id": data.last().map(|i| i["id"].clone()),
                                      "has_more": end < items.len()}))
                    },
                ),
            )
            .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/v1"), log)
}

/// Listing a conversation follows the pages (`order=asc`, `after` = the last id) until
/// `has_more` is false and returns every item in order.
#[tokio::test]
async fn listing_conversation_items_follows_every_page() {
    let items: Vec<Value> = (1..=5)
        .map(|i| {
            json!({"id": format!("msg_{i}"), "type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": format!("m{i}")}]})
        })
        .collect();
    let (base, log) = conversations_server(items.clone(), 2).await;
    let listed = client(&base)
        .list_conversation_items("conv_1")
        .await
        .unwrap();
    assert_eq!(listed, items);
    let queries: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, q, _)| q.clone().unwrap())
        .collect();
    assert_eq!(
        queries,
        vec![
            "order=asc&limit=100".to_string(),
            "order=asc&limit=100&after=msg_2".to_string(),
            "order=asc&limit=100&after=msg_4".to_string(),
        ]
    );
}

/// A conversation created with more items than one call may carry gets the first 20 at creation
/// and the rest through the items endpoint, 20 a call, in order.
#[tokio::test]
async fn creating_a_conversation_with_items_sends_twenty_a_call() {
    let (base, log) = conversations_server(Vec::new(), 100).await;
    let items: Vec<InputItem> = (0..45)
        .map(|i| InputItem::user_text(format!("m{i}")))
        .collect();
    let conversation = client(&base)
        .create_conversation_with_items(&items)
        .await
        .unwrap();
    assert_eq!(conversation.id, "conv_1");
    let log = log.lock().unwrap().clone();
    let calls: Vec<(String, usize)> = log
        .iter()
        .map(|(_, path, _, body)| (path.clone(), body["items"].as_array().unwrap().len()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("/v1/conversations".to_string(), 20),
            ("/v1/conversations/conv_1/items".to_string(), 20),
            ("/v1/conversations/conv_1/items".to_string(), 5),
        ]
    );
    let sent: Vec<Value> = log
        .iter()
        .flat_map(|(_, _, _, body)| body["items"].as_array().unwrap().clone())
        .collect();
    let expected: Vec<Value> = items
        .iter()
        .map(|i| serde_json::to_value(i).unwrap())
        .collect();
    assert_eq!(sent, expected, "every item once, in order");
}
