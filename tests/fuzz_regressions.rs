//! Replays fuzz inputs under `cargo test` through the same harness the fuzz targets run
//! (`fuzz/harness.rs`): every seed of every target, and each input a fuzzer ever found to
//! crash, hang or misbehave, so a fixed finding stays fixed without cargo-fuzz.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::Path;

use ctxbridge::contract::{CommitTurnResult, EngineError, EngineMethod, IngestResult};
use ctxbridge::engines::process::decode_result;
use serde_json::json;

/// What a fuzz target does with one input.
type Target = fn(&[u8]);

/// The harness function of each fuzz target, by name.
const TARGETS: [(&str, Target); 5] = [
    ("config_json5", harness::config_json5),
    ("codex_jsonrpc_line", harness::codex_jsonrpc_line),
    ("engine_jsonrpc_line", harness::engine_jsonrpc_line),
    ("engine_result_decode", harness::engine_result_decode),
    ("responses_sse", harness::responses_sse),
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
