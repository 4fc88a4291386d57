//! `ctxbridge demo`: a scripted multi-turn session on the embedded mock backend with the sample
//! engine, run per epoch (thread_bootstrap) and then per turn, printed as two tables.

use std::sync::Arc;

use clap::Args;

use crate::app;
use crate::backend::MockBackend;
use crate::cli::context::{outln, CliError, CommandContext, Stdout, EXIT_OK};
use crate::config::{Config, PluginEntry};
use crate::contract::ProjectionMode;
use crate::engines::sample::{SampleEngineConfig, SAMPLE_ENGINE_ID};
use crate::harness::{Harness, TurnReport, TurnSpec};
use crate::store::{SqliteStore, StateStore};

/// `ctxbridge demo` arguments.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Number of scripted turns.
    #[arg(long, default_value_t = 12)]
    pub turns: usize,
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
    /// 1-based turn number.
    pub turn: usize,
    /// The harness's report of the turn.
    pub report: TurnReport,
    /// What ctxbridge sent the backend so far.
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
            config: Some(serde_json::to_value(engine_config).map_err(CliError::json("demo"))?),
            ..PluginEntry::default()
        },
    );
    config.agent.developer_instructions = Some("You are a concise travel assistant.".into());
    // The demo leaves nothing behind: state is in memory, and the engine's agent directory is a
    // temporary one (removed when the session ends).
    let scratch = tempfile::tempdir().map_err(CliError::io("demo"))?;
    config.store.path = scratch.path().join("state.db");
    let store: Arc<dyn StateStore> =
        Arc::new(SqliteStore::in_memory().map_err(CliError::store("demo"))?);
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
            .map_err(CliError::harness("demo turn"))?;
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

fn print_table(out: &Stdout, title: &str, rows: &[DemoRow]) {
    outln!(out, "\n{title}");
    outln!(
        out,
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
        outln!(
            out,
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
pub async fn run(context: &CommandContext, args: DemoArgs) -> Result<u8, CliError> {
    let turns = args.turns.max(1);
    let out = &context.stdout;
    outln!(out,
        "ctxbridge demo: {turns} turns on the embedded mock backend with the \"{SAMPLE_ENGINE_ID}\" engine"
    );
    let epoch = demo_session(ProjectionMode::ThreadBootstrap, turns).await?;
    print_table(
        out,
        "thread_bootstrap (projection once per epoch, thread reused in between):",
        &epoch,
    );
    let per_turn = demo_session(ProjectionMode::PerTurn, turns).await?;
    print_table(
        out,
        "per_turn (projection every turn, same thread):",
        &per_turn,
    );
    let total = |rows: &[DemoRow]| rows.last().map_or(0, |r| r.cumulative_backend_chars);
    let model = |rows: &[DemoRow]| rows.last().map_or(0, |r| r.cumulative_model_chars);
    let projections = |rows: &[DemoRow]| rows.iter().filter(|r| r.report.projected).count();
    outln!(out,
        "\nthread_bootstrap: {} projections, {} chars sent to the backend, {} chars of model requests;\nper_turn:         {} projections, {} chars sent to the backend, {} chars of model requests.",
        projections(&epoch),
        total(&epoch),
        model(&epoch),
        projections(&per_turn),
        total(&per_turn),
        model(&per_turn)
    );
    outln!(out, "(rendered: assembled context projected this turn; backend total: what ctxbridge sent; model total: what the model behind the Codex-like mock received, each request carrying the thread's history.)");
    Ok(EXIT_OK)
}
