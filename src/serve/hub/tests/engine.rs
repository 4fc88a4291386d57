//! The hub with engine sessions: the harness runs the turn on the one Codex backend over a
//! scripted upstream.

use super::*;

/// A hub serving sessions with the harness (default configuration, in-memory store), its
/// turns under `limits`; its upstream answers every request, a `turn/start` with the turn's
/// notifications at once (a delta of "hi", then `turn/completed`).
async fn engine_rig(
    limits: codex_app_server_client::TurnLimits,
) -> (
    mpsc::UnboundedSender<HubMsg>,
    OutboundReceiver,
    Arc<crate::serve::sessions::EngineSessions>,
) {
    use crate::backend::codex::CodexBackend;
    use crate::serve::codex_link::HubConnect;
    use crate::serve::sessions::EngineSessions;
    let store = Arc::new(crate::store::SqliteStore::in_memory().unwrap());
    let channel = HubChannel::new();
    let upstream = UpstreamHandle {
        hub: channel.sender(),
    };
    let backend = Arc::new(CodexBackend::over(
        Arc::new(HubConnect::new(upstream, limits)),
        "the Codex app-server behind ctxbridge serve",
    ));
    let app =
        crate::app::open_with_backend(&crate::config::Config::default(), store, backend.clone())
            .await;
    let sessions = Arc::new(EngineSessions::new(Arc::new(app.harness), backend));
    let rig = Rig::on(
        &channel,
        ThreadMap::new(None),
        sessions.clone(),
        Rig::LIMITS,
    );
    let client = rig.client(1).await;
    let Rig { hub, mut peer } = rig;
    tokio::spawn(async move {
        while let Some(line) = peer.written.recv().await {
            let request: Value = serde_json::from_str(&line).unwrap();
            let Some(id) = request.get("id").cloned() else {
                continue;
            };
            let says = |message: Value| {
                let Value::Object(map) = message else {
                    panic!("not an object")
                };
                let message = ctxbridge_jsonrpc::Incoming::of_object(map, "").unwrap();
                let _ = peer.events.send(UpstreamEvent::Message(message));
            };
            match request["method"].as_str().unwrap() {
                "turn/start" => {
                    let turn = json!({"id": "tu", "status": "inProgress", "items": []});
                    says(json!({"id": id, "result": {"turn": turn}}));
                    says(
                        json!({"method": "turn/started", "params": {"threadId": "th", "turn": turn}}),
                    );
                    says(
                        json!({"method": "item/agentMessage/delta", "params": {"threadId": "th", "turnId": "tu", "itemId": "m", "delta": "hi"}}),
                    );
                    says(
                        json!({"method": "turn/completed", "params": {"threadId": "th", "turn": {"id": "tu", "status": "completed", "items": []}}}),
                    );
                }
                "thread/resume" => says(json!({"id": id, "result": {"thread": {"id": "th"}}})),
                _ => says(json!({"id": id, "result": {}})),
            }
        }
    });
    hub.send(HubMsg::Request {
        conn: 1,
        id: RequestId::from_value(&json!("turn-1")),
        method: "turn/start".to_owned(),
        params: Some(json!({"threadId": "th", "input": [{"type": "text", "text": "hello"}]})),
    })
    .unwrap();
    (hub, client, sessions)
}

/// An engine session's turn is answered as a pass-through one is: the harness runs the turn
/// (the session's first: the client's thread is adopted, resumed and given its
/// instructions), and the client still gets the `turn/start` answer before the turn's
/// notifications, then no second answer; its completion comes once the turn is recorded.
#[tokio::test]
async fn an_engine_turn_is_answered_before_its_notifications() {
    let (hub, mut client, sessions) = engine_rig(Default::default()).await;
    let answer = got(&mut client).await;
    assert_eq!(answer["id"], "turn-1", "{answer}");
    assert_eq!(answer["result"]["turn"]["id"], "tu", "{answer}");
    for method in ["turn/started", "item/agentMessage/delta", "turn/completed"] {
        let message = got(&mut client).await;
        assert_eq!(message["method"], method, "{message}");
        if method == "turn/completed" {
            // The client hears the turn ended once it is recorded.
            assert_eq!(
                message["params"]["turn"]["status"], "completed",
                "{message}"
            );
            let transcript = sessions.harness().transcript("th").unwrap();
            assert_eq!(transcript.len(), 2, "the turn was not recorded first");
        }
    }
    // The harness records the turn; its session request ends without a second answer.
    hub.send(HubMsg::Request {
        conn: 1,
        id: RequestId::from_value(&json!(2)),
        method: "config/read".to_owned(),
        params: Some(json!({})),
    })
    .unwrap();
    let next = got(&mut client).await;
    assert_eq!(next["id"], 2, "{next}");
}

/// A turn the upstream completed but ctxbridge failed after accepting it (here its reply is
/// over `backend.maxReplyBytes`) ends for the client as failed, after an `error` naming the
/// setting — not as the upstream's `completed` — and nothing of it is recorded.
#[tokio::test]
async fn a_turn_failed_after_its_answer_ends_failed_for_the_client() {
    let limits = codex_app_server_client::TurnLimits {
        max_reply_bytes: 1,
        ..Default::default()
    };
    let (_hub, mut client, sessions) = engine_rig(limits).await;
    let answer = got(&mut client).await;
    assert_eq!(answer["result"]["turn"]["id"], "tu", "{answer}");
    for method in ["turn/started", "item/agentMessage/delta"] {
        let message = got(&mut client).await;
        assert_eq!(message["method"], method, "{message}");
    }
    let error = got(&mut client).await;
    assert_eq!(error["method"], "error", "{error}");
    assert_eq!(error["params"]["turnId"], "tu", "{error}");
    assert_eq!(error["params"]["willRetry"], false, "{error}");
    let message = error["params"]["error"]["message"].as_str().unwrap();
    assert!(message.contains("backend.maxReplyBytes"), "{message}");
    let completed = got(&mut client).await;
    assert_eq!(completed["method"], "turn/completed", "{completed}");
    assert_eq!(
        completed["params"]["turn"]["status"], "failed",
        "{completed}"
    );
    assert_eq!(
        completed["params"]["turn"]["error"]["message"], message,
        "{completed}"
    );
    assert!(sessions.harness().transcript("th").unwrap().is_empty());
}
