//! Benchmarks of the projection core (docs/architecture.md#projection): rendering, bounding, fingerprints and the
//! decision on transcripts of 10 to 10 000 messages of about 500 bytes, and the work of a turn
//! on a reused thread (no rendering). Throughput is in transcript JSON bytes
//! (`transcript_json_bytes`), so criterion prints MB/s.
//!
//! Run: `cargo bench --bench projection -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ctxbridge::backend::{BackendKind, ThreadId};
use ctxbridge::contract::{
    AgentMessage, AssembleResult, ContentPart, ContextProjection, MessageContent,
    TurnMaintenanceMode,
};
use ctxbridge::projection::{
    binding_key, bound_assembled, context_cap_chars, decide, policy_fingerprint, render_turn_input,
    sha256_hex, tools_fingerprint, transcript_json_bytes, DecisionInput, PolicyInputs,
    ProjectionAction, RenderMode, RenderOptions, ThreadBinding, BINDING_SCHEMA_VERSION,
};
use serde_json::json;

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];
const TOKEN_BUDGET: u64 = 400_000;
const TOOLS: [&str; 20] = [
    "shell",
    "apply_patch",
    "read_file",
    "write_file",
    "list_dir",
    "grep",
    "glob",
    "web_search",
    "web_fetch",
    "view_image",
    "update_plan",
    "exec_command",
    "write_stdin",
    "memory_get",
    "memory_set",
    "task_create",
    "task_list",
    "task_update",
    "notebook_edit",
    "ask_user",
];

/// About 500 bytes of prose with the odd character the scanners look at.
fn prose(seed: usize, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "the",
        "context",
        "engine",
        "assembles",
        "messages",
        "for",
        "thread",
        "backend",
        "and",
        "keeps",
        "epoch:",
        "cost=$5",
        "<div>",
        "résumé",
        "tool",
        "result",
    ];
    let mut text = String::with_capacity(bytes + 16);
    let mut i = seed;
    while text.len() < bytes {
        text.push_str(WORDS[i % WORDS.len()]);
        text.push(if i % 13 == 0 { '\n' } else { ' ' });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    text
}

/// A transcript of `n` messages cycling user → assistant (tool call) → tool result → assistant.
fn transcript(n: usize) -> Vec<AgentMessage> {
    (0..n)
        .map(|i| match i % 4 {
            0 => AgentMessage::user(prose(i, 480)),
            1 => {
                let mut m = AgentMessage::assistant("");
                m.content = Some(MessageContent::Parts(vec![
                    ContentPart::text(prose(i, 380)),
                    ContentPart::tool_call(
                        format!("call_{i}"),
                        "shell",
                        json!({"cmd": ["rg", "-n", "needle"], "cwd": "/work", "timeoutMs": 10_000}),
                    ),
                ]));
                m
            }
            2 => {
                let mut m = AgentMessage::tool_result(
                    format!("call_{}", i - 1),
                    format!("{}\nAPI_KEY=abc123\n", prose(i, 460)),
                );
                m.tool_name = Some("shell".into());
                m
            }
            _ => AgentMessage::assistant(prose(i, 490)),
        })
        .collect()
}

fn assembled(n: usize) -> AssembleResult {
    AssembleResult {
        messages: transcript(n).into(),
        estimated_tokens: 0.0,
        system_prompt_addition: Some("Recall: the user prefers short answers.".into()),
        prompt_authority: None,
        context_projection: Some(ContextProjection::thread_bootstrap("epoch-7")),
    }
}

fn policy_inputs() -> PolicyInputs<'static> {
    PolicyInputs {
        engine_id: "lossless",
        engine_version: Some("1.4.2"),
        owns_compaction: true,
        turn_maintenance_mode: TurnMaintenanceMode::Background,
        citations_mode: None,
        context_token_budget: Some(TOKEN_BUDGET),
        projection_max_chars: context_cap_chars(Some(TOKEN_BUDGET)) as u64,
    }
}

/// The binding a previous turn of the same epoch wrote.
fn matching_binding(policy: &str, tools: &str) -> ThreadBinding {
    let first = decide(&DecisionInput {
        engine_active: true,
        engine_id: "lossless",
        policy_fingerprint: policy,
        tools_fingerprint: tools,
        requested: Some(&ContextProjection::thread_bootstrap("epoch-7")),
        stored: None,
        backend: BackendKind::Codex,
    });
    ThreadBinding {
        schema_version: BINDING_SCHEMA_VERSION,
        binding_key: binding_key("main", Some("agent:main:chat"), "s1"),
        backend: BackendKind::Codex,
        thread_id: ThreadId("thr_1".into()),
        engine: first.engine_binding("lossless", policy),
        tools_fingerprint: tools.into(),
        developer_instructions_sha256: sha256_hex("base"),
        developer_instructions: None,
        context_refresh: false,
        generation: 1,
        updated_at: 0,
    }
}

fn bench_render(c: &mut Criterion) {
    for (name, mode) in [
        ("render_per_turn", RenderMode::PerTurn),
        ("render_bootstrap", RenderMode::Bootstrap),
    ] {
        let mut group = c.benchmark_group(name);
        for n in SIZES {
            let result = assembled(n);
            group.throughput(Throughput::Bytes(
                transcript_json_bytes(&result.messages) as u64
            ));
            let options = RenderOptions {
                mode,
                token_budget: Some(TOKEN_BUDGET),
                ..RenderOptions::default()
            };
            group.bench_with_input(BenchmarkId::from_parameter(n), &result, |b, result| {
                b.iter(|| {
                    render_turn_input(
                        black_box(&result.messages),
                        black_box("next step?"),
                        &options,
                    )
                })
            });
        }
        group.finish();
    }
}

fn bench_bound(c: &mut Criterion) {
    let mut group = c.benchmark_group("bound");
    for n in SIZES {
        let result = assembled(n);
        let bytes = transcript_json_bytes(&result.messages);
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_with_input(BenchmarkId::new("within_limit", n), &result, |b, result| {
            b.iter(|| bound_assembled(black_box(result), usize::MAX).bounded)
        });
        group.bench_with_input(BenchmarkId::new("half_limit", n), &result, |b, result| {
            b.iter(|| bound_assembled(black_box(result), bytes / 2).omitted_messages)
        });
    }
    group.finish();
}

fn bench_fingerprints_and_decide(c: &mut Criterion) {
    let policy = policy_fingerprint(&policy_inputs());
    let tools = tools_fingerprint(&TOOLS);
    let stored = matching_binding(&policy, &tools);
    let requested = ContextProjection::thread_bootstrap("epoch-7");
    c.bench_function("policy_fingerprint", |b| {
        b.iter(|| policy_fingerprint(black_box(&policy_inputs())))
    });
    c.bench_function("tools_fingerprint_20", |b| {
        b.iter(|| tools_fingerprint(black_box(&TOOLS)))
    });
    c.bench_function("decide", |b| {
        b.iter(|| {
            decide(black_box(&DecisionInput {
                engine_active: true,
                engine_id: "lossless",
                policy_fingerprint: &policy,
                tools_fingerprint: &tools,
                requested: Some(&requested),
                stored: Some(&stored),
                backend: BackendKind::Codex,
            }))
        })
    });
}

/// A projecting turn: bound, fingerprints, decide, render.
fn bench_projecting_turn(c: &mut Criterion) {
    let mut group = c.benchmark_group("projecting_turn");
    for n in SIZES {
        let result = assembled(n);
        group.throughput(Throughput::Bytes(
            transcript_json_bytes(&result.messages) as u64
        ));
        group.bench_with_input(BenchmarkId::from_parameter(n), &result, |b, result| {
            b.iter(|| {
                let bounded = bound_assembled(black_box(result), 64 * 1024 * 1024);
                let policy = policy_fingerprint(&policy_inputs());
                let tools = tools_fingerprint(&TOOLS);
                let decision = decide(&DecisionInput {
                    engine_active: true,
                    engine_id: "lossless",
                    policy_fingerprint: &policy,
                    tools_fingerprint: &tools,
                    requested: bounded.projection(),
                    stored: None,
                    backend: BackendKind::Codex,
                });
                let mode = decision.render_mode().unwrap_or(RenderMode::PerTurn);
                render_turn_input(
                    bounded.messages,
                    "next step?",
                    &RenderOptions {
                        mode,
                        token_budget: Some(TOKEN_BUDGET),
                        ..RenderOptions::default()
                    },
                )
                .text_chars
            })
        });
    }
    group.finish();
}

/// A turn on a reused thread: bound check, fingerprints, decision (no rendering needed).
fn bench_reused_thread_turn(c: &mut Criterion) {
    let result = assembled(1_000);
    let policy = policy_fingerprint(&policy_inputs());
    let tools = tools_fingerprint(&TOOLS);
    let stored = matching_binding(&policy, &tools);
    let mut group = c.benchmark_group("reused_thread_turn");
    group.throughput(Throughput::Bytes(
        transcript_json_bytes(&result.messages) as u64
    ));
    group.bench_function("1000", |b| {
        b.iter(|| {
            let bounded = bound_assembled(black_box(&result), 64 * 1024 * 1024);
            let policy = policy_fingerprint(&policy_inputs());
            let tools = tools_fingerprint(&TOOLS);
            let decision = decide(&DecisionInput {
                engine_active: true,
                engine_id: "lossless",
                policy_fingerprint: &policy,
                tools_fingerprint: &tools,
                requested: bounded.projection(),
                stored: Some(&stored),
                backend: BackendKind::Codex,
            });
            assert_eq!(decision.action, ProjectionAction::Reuse);
            decision
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_render,
    bench_bound,
    bench_fingerprints_and_decide,
    bench_projecting_turn,
    bench_reused_thread_turn
);
criterion_main!(benches);
