//! `ctxbridge bench --engines`: what a context engine costs a turn, by where it runs — `legacy`
//! (the baseline: no engine calls), the shipped in-process `sample-summary` engine, the Python
//! example engine over the engine process protocol, and lossless-claw (the plugin OpenClaw's
//! docs install) through the Node plugin host. Each runs the same scripted session through the
//! path `ctxbridge turn` takes — the configuration, the harness with its quarantine wrapper, a
//! SQLite store file, the in-process mock backend — one turn at a time after a warm-up; a turn
//! is timed whole, and an engine's cost is its p50 less legacy's in the same run. An engine
//! whose runtime is missing (no `python3`, no Node >= 22.5, no lossless-claw build) is skipped,
//! loudly.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use semver::Version;

use crate::bench::{harness_err, percentile, BenchError};
use crate::config::Config;
use crate::harness::TurnSpec;
use crate::host::node::{parse_node_version, NODE_SQLITE_MIN};

/// Turns run before timing starts.
const WARMUP_TURNS: usize = 3;

/// One engine of the comparison: its label and the `plugins` section that selects it.
#[derive(Debug, Clone)]
pub struct EngineCase {
    pub label: String,
    /// The engine id the turns must report (a fallback to legacy fails the bench).
    pub engine_id: String,
    pub plugins: Value,
}

/// Where the engines' programs are: the repository (for `examples/` and `hosts/`), the Node to
/// run the plugin host with, and lossless-claw's build.
#[derive(Debug, Clone)]
pub struct EngineSources {
    pub repo: PathBuf,
    pub python: Option<String>,
    pub node: Option<String>,
    pub lossless_claw: Option<PathBuf>,
}

impl EngineSources {
    /// The repository this binary was built from; `python3` and the pinned (else PATH) Node
    /// when they run and are new enough; lossless-claw at `lossless_claw` or beside the
    /// repository in the shared plugin folder. What is missing is named on stderr.
    pub fn discover(lossless_claw: Option<PathBuf>) -> EngineSources {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = runs("python3", &["--version"]).then(|| "python3".to_owned());
        if python.is_none() {
            eprintln!("bench --engines: SKIPPED the Python engine: no python3");
        }
        let pinned = repo.join("hosts/openclaw-node/node_modules/.bin/node");
        let node = [pinned.display().to_string(), "node".to_owned()]
            .into_iter()
            .find(|node| node_at_least(node, &NODE_SQLITE_MIN));
        if node.is_none() {
            eprintln!("bench --engines: SKIPPED lossless-claw: no Node >= 22.5 (run `npm ci` in hosts/openclaw-node)");
        }
        let lossless_claw = lossless_claw
            .unwrap_or_else(|| repo.join("../shared/plugins/lossless-claw"))
            .canonicalize()
            .ok()
            .filter(|dir| dir.join("dist/index.js").is_file());
        if lossless_claw.is_none() {
            eprintln!(
                "bench --engines: SKIPPED lossless-claw: no build found (--lossless-claw DIR)"
            );
        }
        EngineSources {
            repo,
            python,
            node,
            lossless_claw,
        }
    }

    /// The engines these sources can run, legacy first.
    pub fn cases(&self, state: &Path) -> Vec<EngineCase> {
        let mut cases = vec![
            EngineCase {
                label: "legacy (no engine calls)".into(),
                engine_id: "legacy".into(),
                plugins: json!({}),
            },
            EngineCase {
                label: "sample-summary (in-process Rust)".into(),
                engine_id: "sample-summary".into(),
                plugins: json!({"slots": {"contextEngine": "sample-summary"}}),
            },
        ];
        if let Some(python) = &self.python {
            let script = self.repo.join("examples/python-engine/engine.py");
            cases.push(EngineCase {
                label: "python-engine (Python, stdio)".into(),
                engine_id: "python-engine".into(),
                plugins: json!({
                    "slots": {"contextEngine": "python-engine"},
                    "entries": {"python-engine": {"command": [python, script.display().to_string()]}},
                }),
            });
        }
        if let (Some(node), Some(plugin)) = (&self.node, &self.lossless_claw) {
            let host = self.repo.join("hosts/openclaw-node/host.mjs");
            cases.push(EngineCase {
                label: "lossless-claw (Node plugin host, stdio)".into(),
                engine_id: "lossless-claw".into(),
                plugins: json!({
                    "slots": {"contextEngine": "lossless-claw"},
                    "entries": {"lossless-claw": {
                        "command": [node, host.display().to_string(), plugin.display().to_string()],
                        "timeoutMs": 30000,
                        // Compaction stays out of the timed turns: a large leaf chunk.
                        "config": {"freshTailCount": 8, "leafChunkTokens": 200000,
                                   "databasePath": state.join("lossless-claw.db")},
                    }},
                }),
            });
        }
        cases
    }
}

fn runs(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Whether `node` runs and is at least `min` (its version read by [`parse_node_version`]).
fn node_at_least(node: &str, min: &Version) -> bool {
    std::process::Command::new(node)
        .args(["-p", "process.versions.node"])
        .output()
        .ok()
        .and_then(|out| parse_node_version(&String::from_utf8_lossy(&out.stdout)))
        .is_some_and(|version| version >= *min)
}

/// One engine's timed turns.
#[derive(Debug, Clone)]
pub struct EngineRow {
    pub label: String,
    pub turns: usize,
    pub p50: Duration,
    pub p99: Duration,
}

/// Runs `turns` timed turns (after a warm-up) of one session for each case, each in a state
/// directory of its own under `dir`.
pub async fn run(
    cases: &[EngineCase],
    dir: &Path,
    turns: usize,
) -> Result<Vec<EngineRow>, BenchError> {
    let mut rows = Vec::with_capacity(cases.len());
    for (index, case) in cases.iter().enumerate() {
        let state = dir.join(format!("engine-{index}"));
        let config = json!({
            "plugins": case.plugins,
            "backend": {"kind": "mock"},
            "store": {"path": state.join("state.db")},
        });
        let config = Config::parse(&config.to_string(), "bench --engines").map_err(|e| {
            BenchError::Runtime {
                operation: "configure an engine",
                message: e.to_string(),
            }
        })?;
        let app = crate::app::open(&config)
            .await
            .map_err(|e| BenchError::Runtime {
                operation: "open the engine's harness",
                message: e.to_string(),
            })?;
        let mut samples = Vec::with_capacity(turns);
        for turn in 0..WARMUP_TURNS + turns {
            let prompt = crate::bench::engine::bench_prompt(turn);
            let started = Instant::now();
            let report = app
                .harness
                .turn(TurnSpec::new("bench-engines", prompt))
                .await
                .map_err(harness_err("an engine turn"))?;
            let elapsed = started.elapsed();
            if report.engine_id != case.engine_id {
                return Err(BenchError::Runtime {
                    operation: "an engine turn",
                    message: format!(
                        "{} answered as {} (quarantined? see the log)",
                        case.engine_id, report.engine_id
                    ),
                });
            }
            if turn >= WARMUP_TURNS {
                samples.push(elapsed);
            }
        }
        samples.sort_unstable();
        rows.push(EngineRow {
            label: case.label.clone(),
            turns: samples.len(),
            p50: percentile(&samples, 50).unwrap_or_default(),
            p99: percentile(&samples, 99).unwrap_or_default(),
        });
    }
    Ok(rows)
}

/// The table: each engine's turn p50 / p99, and its p50 less legacy's (the first row) with the
/// ratio, in µs.
pub fn format_table(rows: &[EngineRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== Engine cost per turn (mock backend, SQLite store file, one session, turns one at a time; µs) =="
    );
    let _ = writeln!(
        out,
        "{:<42} {:>6} {:>11} {:>11} {:>14} {:>9}",
        "engine", "turns", "turn p50", "turn p99", "p50 − legacy", "÷ legacy"
    );
    let base = rows.first().map(|r| r.p50).unwrap_or_default();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for row in rows {
        let _ = writeln!(
            out,
            "{:<42} {:>6} {:>11.1} {:>11.1} {:>14.1} {:>8.2}×",
            row.label,
            row.turns,
            us(row.p50),
            us(row.p99),
            us(row.p50) - us(base),
            us(row.p50) / us(base).max(1e-9)
        );
    }
    let _ = writeln!(out, "{}", crate::bench::load_line());
    out
}
