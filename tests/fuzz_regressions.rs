//! Replays fuzz inputs under `cargo test` through the same harness the fuzz targets run
//! (`fuzz/harness.rs`): every seed of every target, and each input a fuzzer ever found to
//! crash, hang or misbehave, so a fixed finding stays fixed without cargo-fuzz.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::Path;

use ctxbridge::contract::{CommitTurnResult, EngineError, EngineMethod, IngestResult};
use ctxbridge::engines::process::decode_result;
use ctxbridge::serve::fuzzing::{client_frames, Frame};
use ctxbridge::serve::{SessionOp, ThreadMap};
use ctxbridge_jsonrpc::{answer_text, RequestId};
use serde_json::json;

/// What a fuzz target does with one input.
type Target = fn(&[u8]);

/// The harness function of each fuzz target, by name.
const TARGETS: [(&str, Target); 6] = [
    ("config_json5", harness::config_json5),
    ("codex_jsonrpc_line", harness::codex_jsonrpc_line),
    ("engine_jsonrpc_line", harness::engine_jsonrpc_line),
    ("engine_result_decode", harness::engine_result_decode),
    ("responses_sse", harness::responses_sse),
    ("serve_client_frame", harness::serve_client_frame),
];

/// Every committed seed input of every target runs through its harness without a finding
/// (and every target has seeds), so the harness keeps compiling and passing in plain CI.
#[test]
fn every_seed_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    for (target, run) in TARGETS {
        let mut seeds = 0;
        for entry in std::fs::read_dir(root.join(target)).unwrap() {
            let path = entry.unwrap().path();
            run(&std::fs::read(&path).unwrap());
            seeds += 1;
        }
        assert!(seeds > 0, "{target} has no seeds");
    }
}

/// Ids of every JSON kind come back as they were sent, a number beyond u64 and a fraction
/// digit for digit (issue 28 item 8);
/// an object with an id but no `method` is an answer or refused, never a request; a
/// non-string `method` is refused under its id (issue 28: the request/response ambiguity).
#[tokio::test]
async fn serve_ids_and_answers_keep_their_ids_and_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/serve_client_frame");
    let seed = std::fs::read(root.join("ids_and_answers")).unwrap();
    let routed = client_frames(&seed[2..], 1 << 20, &mut ThreadMap::new(None)).await;
    let ids: Vec<&RequestId> = routed
        .iter()
        .map(|entry| match &entry.frame {
            Frame::Initialize { id }
            | Frame::Request { id, .. }
            | Frame::Response { id, .. }
            | Frame::Reject { id, .. } => id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids[1].as_json(), "1180591620717411303424");
    assert_eq!(
        answer_text(ids[1], Ok(&json!([]))),
        r#"{"id":1180591620717411303424,"result":[]}"#
    );
    assert_eq!(*ids[2], json!(-7));
    assert_eq!(ids[3].as_json(), "1.5");
    assert_eq!(*ids[4], json!("s-1"));
    assert_eq!(*ids[6], json!({"a": 1}));
    assert!(
        matches!(&routed[7].frame, Frame::Reject { id, error } if *id == json!(99) && error.code == -32600)
    );
    assert!(matches!(&routed[8].frame, Frame::Reject { id, .. } if *id == json!(7)));
    assert!(matches!(&routed[9].frame, Frame::Reject { id, .. } if *id == json!(1)));
    assert!(matches!(
        &routed[10].frame,
        Frame::Response { outcome: Ok(_), .. }
    ));
    assert!(matches!(
        &routed[11].frame,
        Frame::Response {
            outcome: Err(_),
            ..
        }
    ));
    assert!(matches!(&routed[12].frame, Frame::Request { method, .. } if method == "initialized"));
}

/// Found by the engine fault matrix: serde reads a struct from an array of its fields, so
/// `["committed"]` decoded as `{status: "committed"}`. Results must be JSON objects.
#[test]
fn engine_results_must_be_objects() {
    let err = decode_result::<CommitTurnResult>(EngineMethod::CommitTurn, json!(["committed"]))
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Malformed { method: EngineMethod::CommitTurn, detail } if detail.contains("expected an object, got an array")),
        "{err:?}"
    );
    let err = decode_result::<IngestResult>(EngineMethod::Ingest, json!([true])).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Malformed {
                method: EngineMethod::Ingest,
                ..
            }
        ),
        "{err:?}"
    );
    let ok = decode_result::<IngestResult>(EngineMethod::Ingest, json!({"ingested": true}));
    assert!(ok.unwrap().ingested);
}

/// The serve target's realistic seed goes through the real client path as a client's frames
/// would: `initialize` accepted, `initialized` skipped, requests routed with the rotated
/// session's client thread id rewritten to its backend thread, session requests recognised,
/// answers to server requests with numeric and string ids handed on, errors kept as errors.
#[tokio::test]
async fn serve_seed_frames_are_classified_and_routed() {
    let seed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds/serve_client_frame/handshake_and_turn"),
    )
    .unwrap();
    let mut threads = ThreadMap::new(None);
    threads.bind("client-th", "backend-th").unwrap();
    let routed = client_frames(&seed[2..], 1 << 20, &mut threads).await;
    assert_eq!(routed.len(), 12);
    assert_eq!(
        routed[0].frame,
        Frame::Initialize {
            id: RequestId::from_value(&json!(0))
        }
    );
    assert_eq!(routed[1].frame, Frame::Skip);
    assert!(
        matches!(&routed[2].frame, Frame::Request { id, method, .. } if *id == json!(1) && method == "thread/start")
    );
    assert_eq!(routed[2].session_op, None);
    let turn = &routed[3];
    assert_eq!(turn.thread.as_deref(), Some("backend-th"));
    assert_eq!(turn.session_op, Some(SessionOp::TurnStart));
    assert!(turn.subscribes);
    let rewritten = turn.rewritten.as_ref().unwrap();
    assert_eq!(rewritten["input"][0]["text_elements"], json!([]));
    let resume = &routed[4];
    assert!(matches!(&resume.frame, Frame::Request { id, .. } if *id == json!("req-3")));
    assert_eq!(
        resume.rewritten.as_ref().unwrap()["thread"]["id"],
        "backend-th"
    );
    assert_eq!(resume.session_op, Some(SessionOp::Resume));
    assert_eq!(
        routed[7].frame,
        Frame::Response {
            id: RequestId::from_value(&json!(1)),
            outcome: Ok(json!({"decision": "accept"}))
        }
    );
    assert_eq!(
        routed[8].rewritten.as_ref().unwrap()["threadId"],
        "backend-th"
    );
    assert!(matches!(&routed[8].frame, Frame::Response { id, .. } if *id == json!("srv-2")));
    assert!(
        matches!(&routed[9].frame, Frame::Response { outcome: Err(e), .. } if e["message"] == "user refused")
    );
    assert!(
        matches!(&routed[10].frame, Frame::Notification { method, .. } if method == "thread/unsubscribe")
    );
    assert_eq!(
        routed[11].rewritten.as_ref().unwrap()["parentThreadId"],
        "backend-th"
    );
}

/// Before `initialize` every request is refused with Codex's "Not initialized" under its own
/// id, a notification or answer goes nowhere, `initialize` needs `clientInfo`, and a second
/// `initialize` is refused; a line over the limit is refused with its length and the limit.
#[tokio::test]
async fn serve_handshake_and_oversize_frames_are_refused() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/serve_client_frame");
    let seed = std::fs::read(root.join("handshake_errors")).unwrap();
    let routed = client_frames(&seed[2..], 1 << 20, &mut ThreadMap::new(None)).await;
    let rejected = |i: usize| match &routed[i].frame {
        Frame::Reject { id, error } => (id.to_value(), error.message.clone()),
        other => panic!("frame {i}: {other:?}"),
    };
    assert_eq!(rejected(0), (json!(1), "Not initialized".to_owned()));
    assert_eq!(routed[1].frame, Frame::Skip);
    assert_eq!(
        rejected(2).1,
        "Invalid request: neither a method nor an answer"
    );
    assert_eq!(
        rejected(3),
        (
            json!(3),
            "Invalid request: missing field `clientInfo`".to_owned()
        )
    );
    assert_eq!(
        routed[4].frame,
        Frame::Initialize {
            id: RequestId::from_value(&json!(0))
        }
    );
    assert_eq!(rejected(5), (json!(9), "Already initialized".to_owned()));
    assert!(matches!(&routed[6].frame, Frame::Request { id, .. } if *id == RequestId::null()));

    let seed = std::fs::read(root.join("oversize_limit_256")).unwrap();
    let limit = usize::from(seed[0]) * 16;
    let routed = client_frames(&seed[2..], limit, &mut ThreadMap::new(None)).await;
    assert_eq!(routed.len(), 4);
    assert!(matches!(routed[0].frame, Frame::Initialize { .. }));
    for i in [1, 3] {
        let Frame::Reject { error, .. } = &routed[i].frame else {
            panic!("frame {i}: {:?}", routed[i].frame)
        };
        let text = &error.message;
        assert!(text.ends_with("exceeds the limit of 256 bytes"), "{text}");
    }
    assert!(matches!(&routed[2].frame, Frame::Request { method, .. } if method == "thread/read"));
}
