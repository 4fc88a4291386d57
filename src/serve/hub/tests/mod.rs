//! The hub against an in-memory upstream: routing, ids, subscriptions, sessions.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::serve::outbound::{self, OutboundLimits, OutboundReceiver, Queued};
use crate::serve::route::SessionOp;
use crate::serve::seam::{PassThroughSessions, SessionAnswer, SessionRequest, UpstreamHandle};
use crate::serve::upstream::{MemoryPeer, UpstreamError};
use async_trait::async_trait;
use ctxbridge_jsonrpc::Incoming;

/// Hands out one prepared in-memory connection.
struct MemoryConnector(std::sync::Mutex<Option<(Live, mpsc::UnboundedReceiver<UpstreamEvent>)>>);

#[async_trait]
impl Connector for MemoryConnector {
    async fn connect(
        &self,
        _generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
        self.0
            .lock()
            .unwrap()
            .take()
            .ok_or(UpstreamError::NoCommand)
    }
}

struct Rig {
    hub: mpsc::UnboundedSender<HubMsg>,
    peer: MemoryPeer,
}

impl Rig {
    const LIMITS: HubLimits = HubLimits {
        request_timeout: std::time::Duration::from_secs(60),
        max_in_flight: 512,
    };

    fn new(threads: ThreadMap) -> Rig {
        Rig::with_sessions(threads, Arc::new(PassThroughSessions))
    }

    fn with_sessions(threads: ThreadMap, sessions: Arc<dyn SessionTurns>) -> Rig {
        Rig::with(threads, sessions, Rig::LIMITS)
    }

    fn with(threads: ThreadMap, sessions: Arc<dyn SessionTurns>, limits: HubLimits) -> Rig {
        Rig::on(&HubChannel::new(), threads, sessions, limits)
    }

    fn on(
        channel: &HubChannel,
        threads: ThreadMap,
        sessions: Arc<dyn SessionTurns>,
        limits: HubLimits,
    ) -> Rig {
        let (live, events, peer) =
            Live::in_memory(json!({"userAgent": "codex/1", "codexHome": "/h"}));
        let connector = Arc::new(MemoryConnector(std::sync::Mutex::new(Some((live, events)))));
        let (hub, _task) = start(channel, connector, threads, sessions, limits).unwrap();
        Rig { hub, peer }
    }

    async fn client(&self, conn: ConnId) -> OutboundReceiver {
        let (out, rx) = outbound::channel(conn, OutboundLimits::default());
        let (reply, answer) = oneshot::channel();
        self.hub
            .send(HubMsg::Initialize { conn, out, reply })
            .unwrap();
        let result = answer.await.unwrap().unwrap();
        assert_eq!(
            result["userAgent"],
            format!("codex/1 ctxbridge/{}", env!("CARGO_PKG_VERSION"))
        );
        rx
    }

    fn request(&self, conn: ConnId, id: Value, method: &str, params: Value) {
        self.hub
            .send(HubMsg::Request {
                conn,
                id: RequestId::from_value(&id),
                method: method.to_owned(),
                params: Some(params),
            })
            .unwrap();
    }

    /// The next message the router wrote upstream.
    async fn upstream_got(&mut self) -> Value {
        let line = self.peer.written.recv().await.unwrap();
        serde_json::from_str(&line).unwrap()
    }

    fn upstream_says(&self, message: Value) {
        let Value::Object(map) = message else {
            panic!("not an object")
        };
        let message = Incoming::of_object(map, "").unwrap();
        self.peer
            .events
            .send(UpstreamEvent::Message(message))
            .unwrap();
    }
}

async fn got(rx: &mut OutboundReceiver) -> Value {
    match rx.recv().await.unwrap() {
        Queued::Text(text) => serde_json::from_str(&text).unwrap(),
        Queued::Close(code, reason) => panic!("closed {code} {reason}"),
    }
}

/// A session's `turn/start` is answered where the upstream's answer stands among its
/// notifications: before the turn's `turn/started`, deltas and `turn/completed`, even when
/// they all arrive at once (the session request's task would answer only later).
#[tokio::test]
async fn a_session_turn_is_answered_before_its_notifications() {
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut client = rig.client(1).await;
    rig.request(
        1,
        json!("turn-1"),
        "turn/start",
        json!({"threadId": "th", "input": []}),
    );
    let resume = rig.upstream_got().await;
    assert_eq!(resume["method"], "thread/resume");
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
    let start = rig.upstream_got().await;
    assert_eq!(start["method"], "turn/start");
    let turn = json!({"id": "tu", "status": "inProgress", "items": []});
    rig.upstream_says(json!({"id": start["id"], "result": {"turn": turn}}));
    rig.upstream_says(
        json!({"method": "turn/started", "params": {"threadId": "th", "turn": turn}}),
    );
    rig.upstream_says(json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "turnId": "tu", "itemId": "m", "delta": "x"}}));
    rig.upstream_says(json!({"method": "turn/completed", "params": {"threadId": "th", "turn": {"id": "tu", "status": "completed", "items": []}}}));
    assert_eq!(
        got(&mut client).await,
        json!({"id": "turn-1", "result": {"turn": turn}})
    );
    for method in ["turn/started", "item/agentMessage/delta", "turn/completed"] {
        assert_eq!(got(&mut client).await["method"], method);
    }
    // The session request's own result is not sent a second time.
    rig.request(1, json!(2), "config/read", json!({}));
    let read = rig.upstream_got().await;
    rig.upstream_says(json!({"id": read["id"], "result": {"config": {}}}));
    assert_eq!(got(&mut client).await["id"], 2);
}

/// A session's manual compaction done without an upstream turn (the engine compacted
/// alone) is answered, then followed by the turn Codex runs for `thread/compact/start` —
/// `turn/started`, a `contextCompaction` item started and completed, `turn/completed` —
/// under the client's thread id, so a client waiting for the compaction to end (the Codex
/// TUI) sees it end.
#[tokio::test]
async fn engine_compaction_is_followed_by_a_compaction_turn() {
    struct EngineCompacts;
    #[async_trait]
    impl SessionTurns for EngineCompacts {
        async fn serve(
            &self,
            request: SessionRequest,
            upstream: UpstreamHandle,
        ) -> Result<SessionAnswer, RpcError> {
            assert_eq!(request.op, SessionOp::CompactStart);
            assert_eq!(request.backend_thread_id, "backend");
            upstream.show_compaction_turn(&request.backend_thread_id);
            Ok(SessionAnswer::Result(json!({})))
        }
    }
    let mut threads = ThreadMap::new(None);
    threads.bind("client", "backend").unwrap();
    let rig = Rig::with_sessions(threads, Arc::new(EngineCompacts));
    let mut tui = rig.client(1).await;
    rig.request(
        1,
        json!(7),
        "thread/compact/start",
        json!({"threadId": "client"}),
    );
    assert_eq!(got(&mut tui).await, json!({"id": 7, "result": {}}));
    let mut methods = Vec::new();
    let mut turn_ids = Vec::new();
    for _ in 0..4 {
        let message = got(&mut tui).await;
        assert_eq!(message["params"]["threadId"], "client", "{message}");
        methods.push(message["method"].as_str().unwrap().to_owned());
        turn_ids.push(
            message["params"]
                .pointer("/turn/id")
                .or_else(|| message["params"].get("turnId"))
                .cloned()
                .unwrap(),
        );
        if message["method"].as_str().unwrap().starts_with("item/") {
            assert_eq!(message["params"]["item"]["type"], "contextCompaction");
        }
        if message["method"] == "turn/completed" {
            assert_eq!(message["params"]["turn"]["status"], "completed");
        }
    }
    assert_eq!(
        methods,
        [
            "turn/started",
            "item/started",
            "item/completed",
            "turn/completed"
        ]
    );
    assert!(turn_ids.iter().all(|id| *id == turn_ids[0]), "{turn_ids:?}");
}

/// Two clients using the same request id get their own answers, whatever order the
/// upstream answers in; upstream ids never collide.
#[tokio::test]
async fn client_ids_never_mix() {
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut one = rig.client(1).await;
    let mut two = rig.client(2).await;
    rig.request(1, json!("a"), "x/echo", json!({"who": 1}));
    rig.request(2, json!("a"), "x/echo", json!({"who": 2}));
    let first = rig.upstream_got().await;
    let second = rig.upstream_got().await;
    assert_ne!(first["id"], second["id"]);
    assert_eq!(first["params"]["who"], 1);
    rig.upstream_says(json!({"id": second["id"], "result": {"n": 2}}));
    rig.upstream_says(json!({"id": first["id"], "error": {"code": -32600, "message": "no"}}));
    assert_eq!(got(&mut two).await, json!({"id": "a", "result": {"n": 2}}));
    assert_eq!(
        got(&mut one).await,
        json!({"id": "a", "error": {"code": -32600, "message": "no"}})
    );
}

/// A turn on a thread the upstream has not loaded resumes it first. A server request goes
/// to the client that started the turn, under that client's own id,
/// and its answer reaches the upstream under the upstream's id; when that client leaves an
/// unanswered request moves to another subscriber; when nobody is left the request is
/// declined and the turn interrupted.
#[tokio::test]
async fn server_requests_follow_the_turn() {
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut owner = rig.client(1).await;
    let mut watcher = rig.client(2).await;
    rig.request(2, json!(1), "thread/read", json!({"threadId": "th"}));
    let read = rig.upstream_got().await;
    rig.upstream_says(json!({"id": read["id"], "result": {"thread": {"id": "th"}}}));
    got(&mut watcher).await;
    rig.request(
        1,
        json!(9),
        "turn/start",
        json!({"threadId": "th", "input": []}),
    );
    // The thread was never loaded through this upstream: it is resumed first.
    let resume = rig.upstream_got().await;
    assert_eq!(resume["method"], "thread/resume");
    assert_eq!(resume["params"], json!({"threadId": "th"}));
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
    let start = rig.upstream_got().await;
    assert_eq!(start["method"], "turn/start");
    rig.upstream_says(
        json!({"id": start["id"], "result": {"turn": {"id": "tu", "status": "inProgress"}}}),
    );
    assert_eq!(got(&mut owner).await["id"], 9);
    rig.upstream_says(
        json!({"method": "turn/started", "params": {"threadId": "th", "turn": {"id": "tu"}}}),
    );
    assert_eq!(got(&mut owner).await["method"], "turn/started");
    assert_eq!(got(&mut watcher).await["method"], "turn/started");

    rig.upstream_says(json!({"id": "srv-1", "method": "item/commandExecution/requestApproval", "params": {"threadId": "th"}}));
    let asked = got(&mut owner).await;
    assert_eq!(asked["method"], "item/commandExecution/requestApproval");
    rig.hub
        .send(HubMsg::Response {
            conn: 1,
            id: RequestId::from_value(&asked["id"]),
            outcome: Ok(json!({"decision": "accept"})),
        })
        .unwrap();
    assert_eq!(
        rig.upstream_got().await,
        json!({"id": "srv-1", "result": {"decision": "accept"}})
    );

    rig.upstream_says(json!({"id": "srv-2", "method": "item/fileChange/requestApproval", "params": {"threadId": "th"}}));
    assert_eq!(
        got(&mut owner).await["method"],
        "item/fileChange/requestApproval"
    );
    rig.hub.send(HubMsg::Disconnect { conn: 1 }).unwrap();
    let moved = got(&mut watcher).await;
    assert_eq!(moved["method"], "item/fileChange/requestApproval");
    rig.hub.send(HubMsg::Disconnect { conn: 2 }).unwrap();
    let declined = rig.upstream_got().await;
    assert_eq!(declined["id"], "srv-2");
    assert!(declined["error"]["message"].is_string(), "{declined}");
    let interrupt = rig.upstream_got().await;
    assert_eq!(interrupt["method"], "turn/interrupt");
    assert_eq!(
        interrupt["params"],
        json!({"threadId": "th", "turnId": "tu"})
    );
}

/// Thread notifications reach only the thread's subscribers; thread-less ones reach every
/// initialized client.
#[tokio::test]
async fn notifications_follow_subscriptions() {
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut subscribed = rig.client(1).await;
    let mut other = rig.client(2).await;
    rig.request(1, json!(1), "thread/resume", json!({"threadId": "th"}));
    let resume = rig.upstream_got().await;
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
    got(&mut subscribed).await;
    rig.upstream_says(
        json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "delta": "x"}}),
    );
    rig.upstream_says(json!({"method": "account/rateLimits/updated", "params": {}}));
    assert_eq!(
        got(&mut subscribed).await["method"],
        "item/agentMessage/delta"
    );
    assert_eq!(
        got(&mut subscribed).await["method"],
        "account/rateLimits/updated"
    );
    // In order: had the delta gone to `other`, it would come first.
    assert_eq!(
        got(&mut other).await["method"],
        "account/rateLimits/updated"
    );
}

/// What an engine session does on rotation, through its [`UpstreamHandle`]: a thread it
/// starts itself is never announced; once bound, the session's subscriber gets that
/// thread's notifications under the client id, with the user's own input in the
/// `userMessage` item, while the session's watch sees the upstream's raw notification.
#[tokio::test]
async fn rotation_through_the_handle() {
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut c = rig.client(1).await;
    rig.request(1, json!(1), "thread/resume", json!({"threadId": "th"}));
    let resume = rig.upstream_got().await;
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
    got(&mut c).await;
    let handle = UpstreamHandle {
        hub: rig.hub.clone(),
    };
    let (watch_tx, mut watch) = mpsc::unbounded_channel();
    handle.watch("new", watch_tx);
    let mut next_watched = || {
        let routed = watch.try_recv().unwrap();
        let codex_app_server_client::Routed::Notification { method, params } = routed else {
            panic!("not a notification: {routed:?}");
        };
        (method, params)
    };
    let starter = handle.clone();
    let started = tokio::spawn(async move { starter.request("thread/start", json!({})).await });
    let start = rig.upstream_got().await;
    assert_eq!(start["method"], "thread/start");
    rig.upstream_says(json!({"id": start["id"], "result": {"thread": {"id": "new"}}}));
    rig.upstream_says(json!({"method": "thread/started", "params": {"thread": {"id": "new"}}}));
    assert_eq!(started.await.unwrap().unwrap()["thread"]["id"], "new");
    handle.bind_session("th", "new", 1).await;
    handle.show_user_input("new", json!([{"type": "text", "text": "hi"}]));
    let projected =
        json!({"type": "userMessage", "content": [{"type": "text", "text": "CONTEXT hi"}]});
    rig.upstream_says(json!({"method": "item/completed", "params": {"threadId": "new", "turnId": "t", "item": projected}}));
    let relayed = got(&mut c).await;
    assert_eq!(
        relayed["method"], "item/completed",
        "thread/started was not announced"
    );
    assert_eq!(relayed["params"]["threadId"], "th");
    assert_eq!(
        relayed["params"]["item"]["content"],
        json!([{"type": "text", "text": "hi"}])
    );
    assert_eq!(next_watched().0, "thread/started");
    let (method, raw) = next_watched();
    assert_eq!(method, "item/completed");
    assert_eq!(raw["threadId"], "new");
    assert_eq!(raw["item"], projected);
}

/// With a session rotated onto another backend thread, the client only ever sees its own
/// thread id: requests are rewritten to the backend id, notifications and list results back.
#[tokio::test]
async fn thread_ids_are_rewritten_both_ways() {
    let mut threads = ThreadMap::new(None);
    threads.bind("client-th", "backend-th").unwrap();
    let mut rig = Rig::new(threads);
    let mut c = rig.client(1).await;
    rig.request(
        1,
        json!(1),
        "turn/start",
        json!({"threadId": "client-th", "input": []}),
    );
    let resume = rig.upstream_got().await;
    assert_eq!(resume["params"]["threadId"], "backend-th");
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "backend-th"}}}));
    let start = rig.upstream_got().await;
    assert_eq!(start["params"]["threadId"], "backend-th");
    rig.upstream_says(json!({"id": start["id"], "result": {"turn": {"id": "tu"}}}));
    got(&mut c).await;
    rig.upstream_says(json!({"method": "turn/completed", "params": {"threadId": "backend-th", "turn": {"id": "tu", "status": "completed"}}}));
    assert_eq!(got(&mut c).await["params"]["threadId"], "client-th");
    rig.request(1, json!(2), "thread/loaded/list", json!({}));
    let list = rig.upstream_got().await;
    rig.upstream_says(json!({"id": list["id"], "result": {"data": ["backend-th"]}}));
    assert_eq!(got(&mut c).await["result"]["data"], json!(["client-th"]));
}

/// A running turn whose message was over the line limit is failed, not left hanging: its
/// client gets an `error` and a failed `turn/completed` naming the limit, the upstream is
/// asked to interrupt it, and the upstream's own later completion of it is not relayed. An
/// over-long answer fails the request it answers.
#[tokio::test]
async fn an_over_long_upstream_message_fails_its_turn_or_request() {
    use crate::serve::upstream::OversizeLine;
    let mut rig = Rig::new(ThreadMap::new(None));
    let mut client = rig.client(1).await;
    rig.request(
        1,
        json!(1),
        "turn/start",
        json!({"threadId": "th", "input": []}),
    );
    let resume = rig.upstream_got().await;
    rig.upstream_says(json!({"id": resume["id"], "result": {"thread": {"id": "th"}}}));
    let start = rig.upstream_got().await;
    let turn = json!({"id": "tu", "status": "inProgress", "items": []});
    rig.upstream_says(json!({"id": start["id"], "result": {"turn": turn}}));
    rig.upstream_says(
        json!({"method": "turn/started", "params": {"threadId": "th", "turn": turn}}),
    );
    assert_eq!(got(&mut client).await["id"], 1);
    assert_eq!(got(&mut client).await["method"], "turn/started");
    let line = OversizeLine {
        len: 20_971_952,
        limit: 16_777_216,
        response_id: None,
        method: Some("item/completed".into()),
        thread: Some("th".into()),
        turn: None,
    };
    rig.peer
        .events
        .send(UpstreamEvent::Oversize(line.clone()))
        .unwrap();
    let interrupt = rig.upstream_got().await;
    assert_eq!(interrupt["method"], "turn/interrupt");
    assert_eq!(
        interrupt["params"],
        json!({"threadId": "th", "turnId": "tu"})
    );
    let error = got(&mut client).await;
    assert_eq!(error["method"], "error", "{error}");
    let text = error["params"]["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("20971952 bytes (item/completed)") && text.contains("16777216"),
        "{text}"
    );
    let done = got(&mut client).await;
    assert_eq!(done["method"], "turn/completed");
    assert_eq!(done["params"]["turn"]["status"], "failed");
    // The same turn's second over-long line and the upstream's own completion stay unrelayed.
    rig.peer.events.send(UpstreamEvent::Oversize(line)).unwrap();
    rig.upstream_says(json!({"method": "turn/completed", "params": {"threadId": "th", "turn": {"id": "tu", "status": "interrupted", "items": []}}}));
    rig.request(1, json!(2), "thread/read", json!({"threadId": "other"}));
    let read = rig.upstream_got().await;
    rig.peer
        .events
        .send(UpstreamEvent::Oversize(OversizeLine {
            len: 30_000_000,
            limit: 16_777_216,
            response_id: read["id"].as_i64(),
            method: None,
            thread: None,
            turn: None,
        }))
        .unwrap();
    let answer = got(&mut client).await;
    assert_eq!(answer["id"], 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("30000000 bytes"),
        "{answer}"
    );
}

/// Every client request gets an answer: past the window of requests waiting on the upstream
/// a client request is refused at once with Codex's own -32001 "Server overloaded; retry
/// later.", and a request the upstream never answers is answered when its time is up (a late
/// answer is then ignored).
#[tokio::test]
async fn every_client_request_is_answered() {
    let limits = HubLimits {
        request_timeout: std::time::Duration::from_millis(300),
        max_in_flight: 2,
    };
    let mut rig = Rig::with(ThreadMap::new(None), Arc::new(PassThroughSessions), limits);
    let mut client = rig.client(1).await;
    for id in 1..=3 {
        rig.request(1, json!(id), "thread/loaded/list", json!({}));
    }
    let overloaded = got(&mut client).await;
    assert_eq!(overloaded["id"], 3, "{overloaded}");
    assert_eq!(overloaded["error"]["code"], -32001);
    assert_eq!(
        overloaded["error"]["message"],
        "Server overloaded; retry later."
    );
    let first = rig.upstream_got().await;
    let _second = rig.upstream_got().await;
    // The upstream never answers: both are answered when their time is up.
    let started = std::time::Instant::now();
    for id in [1, 2] {
        let answer = got(&mut client).await;
        assert_eq!(answer["id"], id, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("did not answer thread/loaded/list within 300 ms"),
            "{message}"
        );
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(200));
    // Room again; the late answer to the first is ignored, the new request answered.
    rig.upstream_says(json!({"id": first["id"], "result": {"data": []}}));
    rig.request(1, json!(4), "thread/loaded/list", json!({}));
    let fourth = rig.upstream_got().await;
    rig.upstream_says(json!({"id": fourth["id"], "result": {"data": ["x"]}}));
    let answer = got(&mut client).await;
    assert_eq!(answer, json!({"id": 4, "result": {"data": ["x"]}}));
}

mod engine;
