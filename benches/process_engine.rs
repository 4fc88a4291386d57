//! Per-call overhead of the engine process protocol adapter (docs/engine-protocol.md#the-engine-process-protocol) on loopback pipes,
//! against the minimal Rust echo engine (`examples/echo_engine.rs`), so the figure is the
//! adapter plus the pipes, not an interpreter. Criterion prints the median per call; the
//! target is under 100 µs.
//!
//! Run: `cargo bench --bench process_engine` (builds the echo engine first).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use ctxbridge::contract::{AgentMessage, AssembleParams, ContextEngine, IngestParams};
use ctxbridge::engines::process::{HostIdentity, ProcessEngine, ProcessEngineConfig};
use ctxbridge::engines::LegacyEngine;
use ctxbridge::host::capabilities::Capability;

/// Builds the echo engine with the bench's profile and returns its path (next to `deps/`).
fn echo_engine_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--example", "echo_engine"])
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building the echo engine example failed"
    );
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    profile_dir.join("examples").join("echo_engine")
}

fn bench_process_engine(c: &mut Criterion) {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => panic!("cannot start a tokio runtime: {e}"),
    };
    let binary = echo_engine_binary();
    let config = ProcessEngineConfig::new(
        "echo",
        vec![binary.to_string_lossy().into_owned()],
        HostIdentity {
            id: "bench".into(),
            label: "the benchmark".into(),
            capabilities: Capability::ALL.to_vec(),
        },
    );
    let engine = match runtime.block_on(ProcessEngine::spawn(config)) {
        Ok(engine) => Arc::new(engine),
        Err(e) => panic!("cannot start the echo engine: {e}"),
    };

    let ingest = IngestParams {
        session_id: "bench".into(),
        message: Some(AgentMessage::user("hello").with_id("m1")),
        ..Default::default()
    };
    let transcript: Vec<AgentMessage> = (0..10)
        .map(|i| AgentMessage::user(format!("message {i} with a little text in it")))
        .collect();
    let assemble = AssembleParams {
        session_id: "bench".into(),
        messages: transcript.into(),
        prompt: Some("what next?".into()),
        token_budget: Some(100_000),
        ..Default::default()
    };

    let mut group = c.benchmark_group("process_engine");
    group.bench_function("ingest round trip (echo engine)", |b| {
        b.to_async(&runtime).iter(|| {
            let engine = engine.clone();
            let params = ingest.clone();
            async move { engine.ingest(params).await }
        })
    });
    group.bench_function("assemble 10 messages round trip (echo engine)", |b| {
        b.to_async(&runtime).iter(|| {
            let engine = engine.clone();
            let params = assemble.clone();
            async move { engine.assemble(params).await }
        })
    });
    // Baseline: the same call on an in-process engine, i.e. what the protocol adds to.
    let legacy = LegacyEngine;
    group.bench_function("assemble 10 messages in-process (legacy baseline)", |b| {
        b.to_async(&runtime).iter(|| {
            let params = assemble.clone();
            async move { legacy.assemble(params).await }
        })
    });
    group.finish();

    match runtime.block_on(engine.shutdown()) {
        Some(status) if status.success() => {}
        other => eprintln!("echo engine did not exit cleanly: {other:?}"),
    }
}

criterion_group!(benches, bench_process_engine);
criterion_main!(benches);
