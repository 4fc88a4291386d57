//! Shared by the `serve` tests that run the sample engine: `ctxbridge serve` on a loopback
//! WebSocket in front of the real Codex app-server, offline against a mock model server.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use codex_app_server_client::{offline_overrides, overrides_json};
use ctxbridge::config::Config;
use ctxbridge::serve::command::{options, ServeArgs};
use ctxbridge::serve::{self, ServeHandle};
use ctxbridge_mock_model::MockModelServer;
use serde_json::{json, Value};

/// `serve` on `ws://127.0.0.1:0` with its state (store, Codex home) in `dir`, the Codex at
/// `binary` offline against `mock`, developer instructions "Be brief.", and the sample engine
/// keeping a window of 2 messages and summarising `chunk` at a time; `projection` is the
/// config's `projection` section (`{}`: the defaults).
pub async fn serve_sample_engine(
    dir: &Path,
    mock: &MockModelServer,
    binary: &Path,
    chunk: u64,
    projection: Value,
) -> ServeHandle {
    serve_sample_engine_with(dir, mock, binary, chunk, projection, json!({})).await
}

/// As [`serve_sample_engine`], with the fields of `backend` added to the `backend` section
/// (turn limits, …).
pub async fn serve_sample_engine_with(
    dir: &Path,
    mock: &MockModelServer,
    binary: &Path,
    chunk: u64,
    projection: Value,
    backend: Value,
) -> ServeHandle {
    let mut config = json!({
        "plugins": {
            "slots": {"contextEngine": "sample-summary"},
            "entries": {"sample-summary": {"config": {"windowMessages": 2, "chunkMessages": chunk}}}
        },
        "agent": {"developerInstructions": "Be brief."},
        "backend": {
            "kind": "codex",
            "command": [binary.display().to_string(), "app-server"],
            "codexHome": dir.join("codex-home"),
            "config": overrides_json(&offline_overrides(&mock.base_url())),
        },
        "store": {"path": dir.join("state").join("state.db")},
        "projection": projection,
    });
    if let (Some(section), Value::Object(extra)) = (config["backend"].as_object_mut(), backend) {
        section.extend(extra);
    }
    let config = Config::parse(&config.to_string(), "test.json5").unwrap();
    let args = ServeArgs::listening_on("ws://127.0.0.1:0");
    serve::start(options(&config, &args).await.unwrap())
        .await
        .unwrap()
}
