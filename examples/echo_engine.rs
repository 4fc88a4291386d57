//! A minimal engine over the engine process protocol (docs/engine-protocol.md#the-engine-process-protocol), in Rust so that benchmarks
//! of the protocol adapter (`benches/process_engine.rs`) measure the adapter and the pipes,
//! not the speed of an interpreter.
//!
//! It answers `initialize` with an `echo` engine that implements only the required members:
//! `ingest` → `{ingested: true}`, `assemble` → the given messages, `compact` → nothing to do.
//! Everything else is a JSON-RPC "method not found". Notifications are ignored.
//!
//! Run: `cargo run --example echo_engine` and type JSON-RPC lines.

use std::io::{BufRead, BufWriter, Write};

use serde_json::{json, Value};

fn answer(method: &str, params: &Value) -> Result<Value, (i64, String)> {
    match method {
        "initialize" => Ok(json!({
            "protocolVersion": 1,
            "info": {"id": "echo", "name": "Echo engine"},
            "methods": [],
        })),
        "ingest" => Ok(json!({"ingested": true})),
        "assemble" => Ok(json!({
            "messages": params.get("messages").cloned().unwrap_or_else(|| json!([])),
            "estimatedTokens": 0,
        })),
        "compact" => Ok(json!({"ok": true, "compacted": false, "reason": "echo keeps nothing"})),
        other => Err((-32601, format!("method not found: {other}"))),
    }
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let line = line?;
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            eprintln!("echo engine: ignoring a line that is not JSON");
            continue;
        };
        let Some(id) = request.get("id").cloned() else {
            continue; // a notification ($/cancelRequest): nothing to stop
        };
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let response = match answer(method, &params) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        serde_json::to_writer(&mut stdout, &response)?;
        stdout.write_all(b"\n")?;
        stdout.flush()?;
    }
    Ok(())
}
