//! The session commands of the CLI: `turn`, `chat`, `compact`, `demo`, `mock-model`.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use tokio::sync::mpsc;

use crate::app;
use crate::backend::{MockBackend, TurnEvent};
use crate::cli::{CliError, CommandContext, EXIT_OK, EXIT_RUNTIME_FAILURE};
use crate::config::{Config, PluginEntry};
use crate::contract::ProjectionMode;
use crate::engines::sample::{SampleEngineConfig, SAMPLE_ENGINE_ID};
use crate::harness::{Harness, TurnReport, TurnSpec};
use crate::store::{SqliteStore, StateStore};

#[derive(Debug, Clone, Args)]
pub struct TurnArgs {
    /// The session key (state persists between invocations).
    #[arg(long)]
    pub session: String,
    /// Print one JSON object instead of the reply.
    #[arg(long)]
    pub json: bool,
    /// The user prompt.
    #[arg(required = true)]
    pub prompt: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// The session key.
    #[arg(long)]
    pub session: String,
}

#[derive(Debug, Clone, Args)]
pub struct CompactArgs {
    /// The session key.
    #[arg(long)]
    pub session: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Number of scripted turns.
    #[arg(long, default_value_t = 12)]
    pub turns: usize,
}

#[derive(Debug, Clone, Args)]
pub struct MockModelArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Append every request as a JSON line to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
}

fn runtime_err(operation: &'static str) -> impl FnOnce(String) -> CliError {
    move |message| CliError::Runtime { operation, message }
}

async fn open_app(config: &Config) -> Result<app::App, CliError> {
    app::open(config)
        .await
        .map_err(|e| runtime_err("open")(e.to_string()))
}

/// A channel for a turn's events and the task that streams its reply text to stdout (or only
/// drains the events when `print` is false, e.g. under `--json`).
fn reply_printer(print: bool) -> (mpsc::Sender<TurnEvent>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<TurnEvent>(256);
    let task = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(ev) = rx.recv().await {
            if let (true, TurnEvent::TextDelta(d)) = (print, ev) {
                // A closed stdout (a pipe whose reader left) must not fail the turn.
                let _ = out.write_all(d.as_bytes());
                let _ = out.flush();
            }
        }
    });
    (tx, task)
}

/// `ctxbridge turn --session KEY [--json] PROMPT`.
pub async fn run_turn(context: &CommandContext, args: TurnArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = open_app(&config).await?;
    let prompt = args.prompt.join(" ");
    let (tx, printer) = reply_printer(!args.json);
    let result = app
        .harness
        .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx))
        .await;
    let _ = printer.await;
    app.harness.shutdown().await;
    let report = result.map_err(|e| runtime_err("turn")(e.to_string()))?;
    if args.json {
        let json =
            serde_json::to_string(&report).map_err(|e| runtime_err("turn")(e.to_string()))?;
        println!("{json}");
    } else {
        println!();
    }
    Ok(EXIT_OK)
}

/// `ctxbridge compact --session KEY`.
pub async fn run_compact(context: &CommandContext, args: CompactArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = open_app(&config).await?;
    let result = app.harness.compact(&args.session).await;
    app.harness.shutdown().await;
    let report = result.map_err(|e| runtime_err("compact")(e.to_string()))?;
    if args.json {
        let json =
            serde_json::to_string(&report).map_err(|e| runtime_err("compact")(e.to_string()))?;
        println!("{json}");
    } else {
        println!(
            "compacted: {} (engine {}, native compaction: {}){}",
            report.result.compacted,
            report.engine_id,
            report.native_compaction,
            report
                .result
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
    Ok(if report.result.ok {
        EXIT_OK
    } else {
        EXIT_RUNTIME_FAILURE
    })
}

/// `ctxbridge chat --session KEY`: one turn per line; `/compact` compacts, `/quit` leaves.
pub async fn run_chat(context: &CommandContext, args: ChatArgs) -> Result<u8, CliError> {
    let config = context.load_config()?;
    let app = open_app(&config).await?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "ctxbridge chat — session {:?}; /compact, /quit",
        args.session
    );
    let mut code = EXIT_OK;
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| runtime_err("read stdin")(e.to_string()))?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line {
            "/quit" | "/exit" => break,
            "/compact" => match app.harness.compact(&args.session).await {
                Ok(r) => {
                    let _ = writeln!(
                        out,
                        "[compacted: {}, native: {}]",
                        r.result.compacted, r.native_compaction
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "[compaction failed: {e}]");
                    code = EXIT_RUNTIME_FAILURE;
                }
            },
            prompt => {
                let (tx, printer) = reply_printer(true);
                let result = app
                    .harness
                    .turn_streaming(TurnSpec::new(args.session.clone(), prompt), Some(tx))
                    .await;
                let _ = printer.await;
                match result {
                    Ok(r) => {
                        let _ = writeln!(
                            out,
                            "\n[{} · {} · {}]",
                            r.thread_action.as_str(),
                            r.reason,
                            r.mode
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "\n[turn failed: {e}]");
                        code = EXIT_RUNTIME_FAILURE;
                    }
                }
            }
        }
    }
    app.harness.shutdown().await;
    Ok(code)
}

/// The demo's scripted user prompts.
pub const DEMO_PROMPTS: [&str; 12] = [
    "I'm planning a three-day trip to Lisbon in May. What should I pack?",
    "Which neighbourhoods are good to stay in for a first visit?",
    "How do I get from the airport to Alfama?",
    "What are the must-see sights on day one?",
    "Recommend a seafood restaurant near the river.",
    "Is the Tram 28 worth it or too crowded?",
    "Plan a day trip to Sintra for day two.",
    "What pastries should I try besides pastel de nata?",
    "Where can I hear live fado in the evening?",
    "How much cash should I carry versus card?",
    "Suggest a relaxed plan for the last morning.",
    "Summarise my whole itinerary in five bullet points.",
];

/// One row of the demo table.
#[derive(Debug, Clone)]
pub struct DemoRow {
    pub turn: usize,
    pub report: TurnReport,
    pub cumulative_backend_chars: usize,
    /// What the model behind the (Codex-like) mock received so far: every request carries the
    /// thread's whole history.
    pub cumulative_model_chars: usize,
}

/// Runs the scripted session on the embedded mock with the sample engine in `mode`.
pub async fn demo_session(mode: ProjectionMode, turns: usize) -> Result<Vec<DemoRow>, CliError> {
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some(SAMPLE_ENGINE_ID.to_string());
    let engine_config = SampleEngineConfig {
        projection: mode,
        ..SampleEngineConfig::default()
    };
    config.plugins.entries.insert(
        SAMPLE_ENGINE_ID.to_string(),
        PluginEntry {
            config: Some(
                serde_json::to_value(engine_config)
                    .map_err(|e| runtime_err("demo")(e.to_string()))?,
            ),
            ..PluginEntry::default()
        },
    );
    config.agent.developer_instructions = Some("You are a concise travel assistant.".into());
    // The demo leaves nothing behind: state is in memory, and the engine's agent directory is a
    // temporary one (removed when the session ends).
    let scratch = tempfile::tempdir().map_err(|e| runtime_err("demo")(e.to_string()))?;
    config.store.path = scratch.path().join("state.db");
    let store: Arc<dyn StateStore> =
        Arc::new(SqliteStore::in_memory().map_err(|e| runtime_err("demo")(e.to_string()))?);
    let mock = MockBackend::with_store(store.clone());
    let app = app::open_with_backend(&config, store, Arc::new(mock.clone())).await;
    let harness: &Harness = &app.harness;
    let mut rows = Vec::with_capacity(turns);
    let mut cumulative = 0usize;
    for turn in 1..=turns {
        let prompt = DEMO_PROMPTS[(turn - 1) % DEMO_PROMPTS.len()];
        let report = harness
            .turn(TurnSpec::new("demo-session", prompt))
            .await
            .map_err(|e| runtime_err("demo turn")(e.to_string()))?;
        cumulative += report.metrics.backend_chars;
        rows.push(DemoRow {
            turn,
            report,
            cumulative_backend_chars: cumulative,
            cumulative_model_chars: mock.model_request_chars(),
        });
    }
    harness.shutdown().await;
    Ok(rows)
}

fn short_thread(id: &str) -> String {
    let tail: String = id
        .chars()
        .rev()
        .take(6)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

fn print_table(title: &str, rows: &[DemoRow]) {
    println!("\n{title}");
    println!(
        "{:>4}  {:<9}  {:<8}  {:<9}  {:<35}  {:>9}  {:>13}  {:>11}",
        "turn",
        "thread",
        "action",
        "projected",
        "reason",
        "rendered",
        "backend total",
        "model total"
    );
    for r in rows {
        println!(
            "{:>4}  {:<9}  {:<8}  {:<9}  {:<35}  {:>9}  {:>13}  {:>11}",
            r.turn,
            short_thread(&r.report.thread_id),
            r.report.thread_action.as_str(),
            if r.report.projected { "yes" } else { "no" },
            r.report.reason,
            r.report.metrics.rendered_context_chars,
            r.cumulative_backend_chars,
            r.cumulative_model_chars
        );
    }
}

/// `ctxbridge demo`: the scripted session, per epoch and then per turn.
pub async fn run_demo(_context: &CommandContext, args: DemoArgs) -> Result<u8, CliError> {
    let turns = args.turns.max(1);
    println!(
        "ctxbridge demo: {turns} turns on the embedded mock backend with the \"{SAMPLE_ENGINE_ID}\" engine"
    );
    let epoch = demo_session(ProjectionMode::ThreadBootstrap, turns).await?;
    print_table(
        "thread_bootstrap (projection once per epoch, thread reused in between):",
        &epoch,
    );
    let per_turn = demo_session(ProjectionMode::PerTurn, turns).await?;
    print_table("per_turn (projection every turn, same thread):", &per_turn);
    let total = |rows: &[DemoRow]| rows.last().map_or(0, |r| r.cumulative_backend_chars);
    let model = |rows: &[DemoRow]| rows.last().map_or(0, |r| r.cumulative_model_chars);
    let projections = |rows: &[DemoRow]| rows.iter().filter(|r| r.report.projected).count();
    println!(
        "\nthread_bootstrap: {} projections, {} chars sent to the backend, {} chars of model requests;\nper_turn:         {} projections, {} chars sent to the backend, {} chars of model requests.",
        projections(&epoch),
        total(&epoch),
        model(&epoch),
        projections(&per_turn),
        total(&per_turn),
        model(&per_turn)
    );
    println!("(rendered: assembled context projected this turn; backend total: what ctxbridge sent; model total: what the model behind the Codex-like mock received, each request carrying the thread's history.)");
    Ok(EXIT_OK)
}

/// `ctxbridge mock-model --port P --log FILE`.
pub async fn run_mock_model(
    _context: &CommandContext,
    args: MockModelArgs,
) -> Result<u8, CliError> {
    ctxbridge_mock_model::serve(args.port, args.log)
        .await
        .map_err(|e| runtime_err("mock-model")(e.to_string()))?;
    Ok(EXIT_OK)
}
