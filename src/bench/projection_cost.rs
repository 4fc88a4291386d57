//! Projection cost: one scripted session, run as legacy, per_turn and thread_bootstrap, on the
//! in-process mock, on the real Codex app-server (offline against the loopback mock model
//! server, each mode with its own `CODEX_HOME` and its own server so every byte is attributable),
//! or on the Responses backend over HTTP to the loopback mock model server in its stateful mode,
//! once per thread kind (`chain`, `conversation`), each mode with its own server.
//!
//! Per turn it records what ctxbridge sent to the backend (`metrics.backend_chars`), what the
//! model received (the mock's Codex-like request size; for Codex the request bodies the mock model
//! server saw), and the **minimum** a model must receive for that turn: a fresh thread given only
//! the turn's assembled context rendered in bootstrap mode, the prompt, and the instructions.
//! - mock: computed — base instructions + effective developer instructions + the rendered
//!   bootstrap input, in characters (the mock counts a request the same way);
//! - codex: measured — one real fresh-thread turn per bench turn on a separate app-server and
//!   mock model server, so Codex's own request framing (tools, item envelopes) is included.
//! - responses: measured — one fresh thread of the same kind per bench turn on a separate
//!   backend and stateful mock model server.
//!
//! On the Responses backend the request on the wire carries only the new turn (the server holds
//! the thread), so two sizes are kept: `model_request_bytes` is the context the model was given
//! — the request a stateless client would send for it: the instructions and the whole
//! conversation the mock rebuilt from the chain or conversation, as JSON — and
//! `wire_request_bytes` is what ctxbridge actually sent (every request body, conversation calls
//! included). On the mock and Codex the two are the same.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use codex_app_server_client::offline_overrides;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RecordedRequest, RequestKind};
use tokio::sync::mpsc;

use super::{
    bench_harness, bench_prompt, engine, harness_err, BenchBackend, BenchEngine, BenchEngineConfig,
    BenchError, BenchMode, BenchView, BENCH_BASE_INSTRUCTIONS, BENCH_DEVELOPER_INSTRUCTIONS,
    BENCH_TOKEN_BUDGET,
};
use crate::backend::codex::{AppServerConfig, CodexBackend};
use crate::backend::responses::{ResponsesBackend, ResponsesBackendConfig, ResponsesThreads};
use crate::backend::{MockBackend, StartThread, ThreadedBackend, TurnRequest};
use crate::harness::Harness;
use crate::harness::TurnSpec;
use crate::projection::{
    effective_developer_instructions, render_turn_input, RenderMode, RenderOptions,
};
use crate::store::SqliteStore;
use crate::store::StateStore;

/// The session key of the scripted session.
pub const SESSION_KEY: &str = "bench-session";

/// How the per-turn minimum was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinimumMethod {
    /// Computed from the rendered bootstrap input and the instructions (mock).
    Computed,
    /// Measured: one fresh Codex thread per turn given only that input (codex).
    MeasuredFreshThread,
    /// Measured: one fresh Responses thread of the run's kind per turn given only that input;
    /// its context bytes (responses).
    MeasuredFreshResponsesThread,
}

impl MinimumMethod {
    pub fn describe(self) -> &'static str {
        match self {
            MinimumMethod::Computed => {
                "computed: base + developer instructions + the turn's assembled context rendered in bootstrap mode with the prompt"
            }
            MinimumMethod::MeasuredFreshThread => {
                "measured: a fresh Codex thread per turn given only the turn's assembled context rendered in bootstrap mode with the prompt"
            }
            MinimumMethod::MeasuredFreshResponsesThread => {
                "measured: a fresh Responses thread of the same kind per turn given only the turn's assembled context rendered in bootstrap mode with the prompt (its context bytes)"
            }
        }
    }
}

/// One turn of one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectionRow {
    pub mode: BenchMode,
    pub turn: usize,
    /// The scripted session's epoch at this turn (the bench engine's view).
    pub epoch: String,
    pub projected: bool,
    pub reason: String,
    pub thread_action: String,
    /// Characters ctxbridge sent to the backend this turn.
    pub backend_chars: usize,
    pub cumulative_backend_chars: usize,
    /// Model requests this turn caused (Codex may add compaction requests).
    pub model_requests: usize,
    /// Bytes of the context the model was given by those requests (mock: characters, the bench
    /// text is ASCII; Codex: the request bodies; Responses: instructions and the rebuilt
    /// conversation, see the module docs).
    pub model_request_bytes: usize,
    pub cumulative_model_request_bytes: usize,
    /// Bytes ctxbridge sent this turn (request bodies). Equal to `model_request_bytes` except on
    /// the Responses backend, where the server holds the thread.
    pub wire_request_bytes: usize,
    /// The minimum request for this turn (see [`MinimumMethod`]).
    pub min_model_request_bytes: usize,
    /// How the turn's context went (`turn-input`, `additional-context`, `none`).
    pub context_delivery: String,
}

impl ProjectionRow {
    /// Model-request bytes over the minimum.
    pub fn ratio_to_min(&self) -> f64 {
        if self.min_model_request_bytes == 0 {
            0.0
        } else {
            self.model_request_bytes as f64 / self.min_model_request_bytes as f64
        }
    }
}

/// A whole projection-cost run.
#[derive(Debug, Clone)]
pub struct ProjectionRun {
    pub backend: BenchBackend,
    /// The Responses thread kind the run used (`None` on the other backends).
    pub threads: Option<ResponsesThreads>,
    pub turns: usize,
    pub minimum: MinimumMethod,
    pub engine: BenchEngineConfig,
    /// Rows of every mode, mode by mode, turn by turn.
    pub rows: Vec<ProjectionRow>,
}

impl ProjectionRun {
    /// The backend as the table headings name it: `mock`, `codex`, `responses (chain threads)`.
    pub fn backend_label(&self) -> String {
        match self.threads {
            Some(threads) => format!("{} ({} threads)", self.backend.as_str(), threads.as_str()),
            None => self.backend.as_str().to_string(),
        }
    }

    /// A mode as the summary and the CSV name it: `thread_bootstrap`, or on the Responses
    /// backend with the thread kind, `thread_bootstrap (chain)`.
    pub fn mode_label(&self, mode: BenchMode) -> String {
        match self.threads {
            Some(threads) => format!("{} ({})", mode.as_str(), threads.as_str()),
            None => mode.as_str().to_string(),
        }
    }

    pub fn total_wire_bytes(&self, mode: BenchMode) -> usize {
        self.rows_of(mode).map(|r| r.wire_request_bytes).sum()
    }

    pub fn rows_of(&self, mode: BenchMode) -> impl Iterator<Item = &ProjectionRow> {
        self.rows.iter().filter(move |r| r.mode == mode)
    }

    /// Mean of the per-turn ratios to the minimum.
    pub fn mean_ratio(&self, mode: BenchMode) -> f64 {
        let ratios: Vec<f64> = self
            .rows_of(mode)
            .map(ProjectionRow::ratio_to_min)
            .collect();
        if ratios.is_empty() {
            0.0
        } else {
            ratios.iter().sum::<f64>() / ratios.len() as f64
        }
    }

    pub fn total_model_bytes(&self, mode: BenchMode) -> usize {
        self.rows_of(mode)
            .last()
            .map_or(0, |r| r.cumulative_model_request_bytes)
    }

    pub fn total_backend_chars(&self, mode: BenchMode) -> usize {
        self.rows_of(mode)
            .last()
            .map_or(0, |r| r.cumulative_backend_chars)
    }

    pub fn total_min_bytes(&self, mode: BenchMode) -> usize {
        self.rows_of(mode).map(|r| r.min_model_request_bytes).sum()
    }
}

/// Where a mode's model-request sizes come from.
enum Meter<'a> {
    Mock(&'a MockBackend),
    /// The mock model server behind Codex: every request is a model request carrying the whole
    /// context.
    Server(&'a MockModelServer),
    /// The stateful mock model server behind the Responses backend: the model's context is
    /// what the server rebuilt, the wire carries the new turn.
    Stateful(&'a MockModelServer),
}

/// What a meter has seen so far.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    requests: usize,
    model_bytes: usize,
    wire_bytes: usize,
}

impl Meter<'_> {
    fn totals(&self) -> Totals {
        match self {
            Meter::Mock(mock) => {
                let turns = mock
                    .calls()
                    .iter()
                    .filter(|c| matches!(c, crate::backend::mock::MockCall::Turn { .. }))
                    .count();
                let chars = mock.model_request_chars();
                Totals {
                    requests: turns,
                    model_bytes: chars,
                    wire_bytes: chars,
                }
            }
            Meter::Server(server) => {
                let requests = server.requests();
                let bytes = requests.iter().map(request_body_bytes).sum();
                Totals {
                    requests: requests.len(),
                    model_bytes: bytes,
                    wire_bytes: bytes,
                }
            }
            Meter::Stateful(server) => {
                let requests = server.requests();
                Totals {
                    requests: requests
                        .iter()
                        .filter(|r| r.kind == RequestKind::Responses)
                        .count(),
                    model_bytes: requests.iter().map(context_bytes).sum(),
                    wire_bytes: requests.iter().map(request_body_bytes).sum(),
                }
            }
        }
    }
}

/// The context a Responses request gave the model, as the stateful mock rebuilt it: the size of
/// `{"instructions": …, "input": [the whole conversation]}`, the request a stateless client
/// would send for the same answer. Requests that are not model responses (conversation calls)
/// and answered errors give the model nothing: 0.
pub fn context_bytes(request: &RecordedRequest) -> usize {
    if request.kind != RequestKind::Responses || request.status != 200 {
        return 0;
    }
    let context = serde_json::json!({
        "instructions": request.instructions,
        "input": request.conversation,
    });
    serde_json::to_vec(&context).map_or(0, |b| b.len())
}

/// A request body's size on the wire: its `content-length`, else its re-encoded size.
pub fn request_body_bytes(request: &RecordedRequest) -> usize {
    request
        .header("content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| match &request.raw_body {
            Some(raw) => raw.len(),
            None => serde_json::to_vec(&request.body).map_or(0, |b| b.len()),
        })
}

/// A separate backend (Codex app-server, or Responses backend) and mock model server that
/// measure fresh-thread requests.
struct Probe {
    backend: Box<dyn ThreadedBackend>,
    server: MockModelServer,
    /// Whether the server is the stateful one behind a Responses backend (see [`Meter`]).
    stateful: bool,
    _home: Option<tempfile::TempDir>,
}

impl Probe {
    fn meter(&self) -> Meter<'_> {
        if self.stateful {
            Meter::Stateful(&self.server)
        } else {
            Meter::Server(&self.server)
        }
    }

    async fn measure(
        &self,
        developer_instructions: Option<String>,
        input: String,
    ) -> Result<usize, BenchError> {
        let before = self.meter().totals().model_bytes;
        let thread = self
            .backend
            .start_thread(StartThread {
                base_instructions: Some(BENCH_BASE_INSTRUCTIONS.into()),
                developer_instructions: developer_instructions.clone(),
                model: None,
                tools: Vec::new(),
            })
            .await
            .map_err(|source| BenchError::Backend {
                operation: "minimum probe: start a thread",
                source,
            })?;
        // Nobody listens to the probe's reply; a closed receiver is not an error for a turn.
        let (tx, _) = mpsc::channel(1);
        self.backend
            .run_turn(
                TurnRequest {
                    thread_id: thread,
                    input,
                    developer_instructions,
                    base_instructions: Some(BENCH_BASE_INSTRUCTIONS.into()),
                    tools: Default::default(),
                    additional_context: None,
                    options: Default::default(),
                },
                tx,
            )
            .await
            .map_err(|source| BenchError::Backend {
                operation: "minimum probe: run a turn",
                source,
            })?;
        let after = self.meter().totals().model_bytes;
        Ok(after.saturating_sub(before))
    }

    async fn shutdown(self) {
        self.backend.shutdown().await;
        self.server.shutdown().await;
    }
}

enum Minimum<'a> {
    Computed,
    Probe(&'a Probe),
}

/// The turn input a fresh thread would need: the view rendered in bootstrap mode.
fn minimum_input(view: &BenchView, prompt: &str, turn_input_limit: usize) -> String {
    render_turn_input(
        &view.messages,
        prompt,
        &RenderOptions {
            mode: RenderMode::Bootstrap,
            token_budget: Some(BENCH_TOKEN_BUDGET),
            turn_input_limit,
        },
    )
    .text
}

fn effective_instructions() -> Option<String> {
    effective_developer_instructions(
        Some(BENCH_DEVELOPER_INSTRUCTIONS),
        Some(engine::BENCH_SYSTEM_PROMPT_ADDITION),
    )
}

/// Runs the scripted session on one harness, recording a row per turn.
async fn drive(
    mode: BenchMode,
    harness: &Harness,
    meter: Meter<'_>,
    minimum: Minimum<'_>,
    engine_config: BenchEngineConfig,
    turns: usize,
) -> Result<Vec<ProjectionRow>, BenchError> {
    // The same pure view the engine computes, for the epoch column and the minimum.
    let model_view = BenchEngine::new(engine_config);
    let dev = effective_instructions();
    let turn_input_limit = harness.backend().turn_input_limit();
    let mut rows = Vec::with_capacity(turns);
    let (mut cum_backend, mut cum_model) = (0usize, 0usize);
    for turn in 1..=turns {
        let prompt = bench_prompt(turn);
        let transcript = harness
            .transcript(SESSION_KEY)
            .map_err(harness_err("read the transcript"))?;
        let view = model_view.view(transcript);
        let input = minimum_input(&view, &prompt, turn_input_limit);
        let min = match minimum {
            Minimum::Computed => {
                BENCH_BASE_INSTRUCTIONS.chars().count()
                    + dev.as_deref().map_or(0, |d| d.chars().count())
                    + input.chars().count()
            }
            Minimum::Probe(probe) => probe.measure(dev.clone(), input).await?,
        };
        let before = meter.totals();
        let report = harness
            .turn(TurnSpec::new(SESSION_KEY, prompt))
            .await
            .map_err(harness_err("bench turn"))?;
        let after = meter.totals();
        let model = after.model_bytes.saturating_sub(before.model_bytes);
        cum_backend += report.metrics.backend_chars;
        cum_model += model;
        rows.push(ProjectionRow {
            mode,
            turn,
            epoch: view.epoch,
            projected: report.projected,
            reason: report.reason,
            thread_action: report.thread_action.as_str().to_string(),
            backend_chars: report.metrics.backend_chars,
            cumulative_backend_chars: cum_backend,
            model_requests: after.requests.saturating_sub(before.requests),
            model_request_bytes: model,
            cumulative_model_request_bytes: cum_model,
            wire_request_bytes: after.wire_bytes.saturating_sub(before.wire_bytes),
            min_model_request_bytes: min,
            context_delivery: report.context_delivery,
        });
    }
    Ok(rows)
}

fn memory_store() -> Result<Arc<dyn StateStore>, BenchError> {
    SqliteStore::in_memory()
        .map(|s| Arc::new(s) as Arc<dyn StateStore>)
        .map_err(|source| BenchError::Store {
            operation: "open an in-memory store",
            source,
        })
}

/// The three modes on the in-process mock backend.
pub async fn run_mock(turns: usize) -> Result<ProjectionRun, BenchError> {
    let engine_config = BenchEngineConfig::default();
    let mut rows = Vec::new();
    for mode in BenchMode::ALL {
        let mock = MockBackend::new();
        let (harness, _) =
            bench_harness(mode, engine_config, Arc::new(mock.clone()), memory_store()?);
        let result = drive(
            mode,
            &harness,
            Meter::Mock(&mock),
            Minimum::Computed,
            engine_config,
            turns,
        )
        .await;
        harness.shutdown().await;
        rows.extend(result?);
    }
    Ok(ProjectionRun {
        backend: BenchBackend::Mock,
        threads: None,
        turns,
        minimum: MinimumMethod::Computed,
        engine: engine_config,
        rows,
    })
}

async fn codex_backend(
    binary: &Path,
    server: &MockModelServer,
) -> Result<(CodexBackend, tempfile::TempDir), BenchError> {
    let home = tempfile::tempdir().map_err(|source| BenchError::Io {
        operation: "create a CODEX_HOME",
        path: std::env::temp_dir(),
        source,
    })?;
    let backend = CodexBackend::new(
        AppServerConfig::new(home.path().join("codex-home"))
            .with_command(vec![binary.display().to_string(), "app-server".into()])
            .with_overrides(offline_overrides(&server.base_url()))
            .with_cwd(home.path().to_path_buf()),
    );
    backend
        .connect()
        .await
        .map_err(|source| BenchError::Backend {
            operation: "start codex app-server",
            source,
        })?;
    Ok((backend, home))
}

async fn mock_model_server() -> Result<MockModelServer, BenchError> {
    MockModelServer::start(MockModelConfig::default())
        .await
        .map_err(|source| BenchError::MockModel {
            operation: "start the mock model server",
            source,
        })
}

/// Background characters of the additional-context row: small enough that the epoch's
/// bootstrap context fits the Codex `additionalContext` limit on most epochs.
pub const AC_BACKGROUND_CHARS: usize = 2_000;

/// The three modes on the real Codex app-server, offline against mock model servers, plus
/// thread_bootstrap with additional-context delivery (on a smaller background, see
/// [`AC_BACKGROUND_CHARS`]).
pub async fn run_codex(turns: usize) -> Result<ProjectionRun, BenchError> {
    let binary = crate::app::find_codex_binary().ok_or(BenchError::NoCodexBinary)?;
    let engine_config = BenchEngineConfig::default();
    let probe_server = mock_model_server().await?;
    let (probe_backend, probe_home) = codex_backend(&binary, &probe_server).await?;
    let probe = Probe {
        backend: Box::new(probe_backend),
        server: probe_server,
        stateful: false,
        _home: Some(probe_home),
    };
    let mut rows = Vec::new();
    let mut failure = None;
    let modes = BenchMode::ALL
        .into_iter()
        .chain([BenchMode::ThreadBootstrapAdditionalContext]);
    for mode in modes {
        let server = mock_model_server().await?;
        let (backend, _home) = codex_backend(&binary, &server).await?;
        // Codex passes an additionalContext value on whole only up to a few KB: the
        // additional-context row runs with a background small enough to use the channel.
        let mode_config = if mode == BenchMode::ThreadBootstrapAdditionalContext {
            BenchEngineConfig {
                background_chars: AC_BACKGROUND_CHARS,
                ..engine_config
            }
        } else {
            engine_config
        };
        let (harness, _) = bench_harness(mode, mode_config, Arc::new(backend), memory_store()?);
        let result = drive(
            mode,
            &harness,
            Meter::Server(&server),
            Minimum::Probe(&probe),
            mode_config,
            turns,
        )
        .await;
        harness.shutdown().await;
        server.shutdown().await;
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    probe.shutdown().await;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(ProjectionRun {
        backend: BenchBackend::Codex,
        threads: None,
        turns,
        minimum: MinimumMethod::MeasuredFreshThread,
        engine: engine_config,
        rows,
    })
}

/// The Responses thread kinds, in the order the Responses run measures them.
pub const RESPONSES_THREAD_KINDS: [ResponsesThreads; 2] =
    [ResponsesThreads::Chain, ResponsesThreads::Conversation];

async fn stateful_mock_model_server() -> Result<MockModelServer, BenchError> {
    MockModelServer::start(MockModelConfig::stateful())
        .await
        .map_err(|source| BenchError::MockModel {
            operation: "start the stateful mock model server",
            source,
        })
}

/// The Responses backend with `threads` on `server`.
pub fn responses_backend(
    server: &MockModelServer,
    threads: ResponsesThreads,
) -> Result<ResponsesBackend, BenchError> {
    ResponsesBackend::new(ResponsesBackendConfig {
        threads,
        ..ResponsesBackendConfig::new(server.base_url(), "mock-model")
    })
    .map_err(|source| BenchError::Backend {
        operation: "build the Responses backend",
        source: source.into(),
    })
}

/// One mode of the scripted session on the Responses backend with `threads`, against
/// `server` (a stateful mock model server the caller owns, so it can read the requests back),
/// measured against `probe`'s fresh threads.
async fn drive_responses(
    mode: BenchMode,
    threads: ResponsesThreads,
    server: &MockModelServer,
    probe: &Probe,
    turns: usize,
) -> Result<Vec<ProjectionRow>, BenchError> {
    let engine_config = BenchEngineConfig::default();
    let backend = responses_backend(server, threads)?;
    let (harness, _) = bench_harness(mode, engine_config, Arc::new(backend), memory_store()?);
    let result = drive(
        mode,
        &harness,
        Meter::Stateful(server),
        Minimum::Probe(probe),
        engine_config,
        turns,
    )
    .await;
    harness.shutdown().await;
    result
}

/// Runs one mode of the scripted session on the Responses backend with `threads` against
/// `server`, which must be a stateful mock model server (see [`MockModelConfig::stateful`]);
/// the minimum is measured on a probe of its own. For tests that read the requests back.
pub async fn run_responses_mode(
    mode: BenchMode,
    threads: ResponsesThreads,
    server: &MockModelServer,
    turns: usize,
) -> Result<Vec<ProjectionRow>, BenchError> {
    let probe = responses_probe(threads).await?;
    let result = drive_responses(mode, threads, server, &probe, turns.max(1)).await;
    probe.shutdown().await;
    result
}

async fn responses_probe(threads: ResponsesThreads) -> Result<Probe, BenchError> {
    let server = stateful_mock_model_server().await?;
    let backend = responses_backend(&server, threads)?;
    Ok(Probe {
        backend: Box::new(backend),
        server,
        stateful: true,
        _home: None,
    })
}

/// The three modes on the Responses backend, once per thread kind (chain, then
/// conversation): one run per kind, each mode on its own stateful mock model server.
pub async fn run_responses(turns: usize) -> Result<Vec<ProjectionRun>, BenchError> {
    let engine_config = BenchEngineConfig::default();
    let mut runs = Vec::with_capacity(RESPONSES_THREAD_KINDS.len());
    for threads in RESPONSES_THREAD_KINDS {
        let probe = responses_probe(threads).await?;
        let mut rows = Vec::new();
        let mut failure = None;
        for mode in BenchMode::ALL {
            let server = stateful_mock_model_server().await?;
            let result = drive_responses(mode, threads, &server, &probe, turns).await;
            server.shutdown().await;
            match result {
                Ok(r) => rows.extend(r),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        probe.shutdown().await;
        if let Some(e) = failure {
            return Err(e);
        }
        runs.push(ProjectionRun {
            backend: BenchBackend::Responses,
            threads: Some(threads),
            turns,
            minimum: MinimumMethod::MeasuredFreshResponsesThread,
            engine: engine_config,
            rows,
        });
    }
    Ok(runs)
}

/// The projection-cost runs of `backend`: one for the mock and Codex, one per thread kind for
/// the Responses backend.
pub async fn run(backend: BenchBackend, turns: usize) -> Result<Vec<ProjectionRun>, BenchError> {
    Ok(match backend {
        BenchBackend::Mock => vec![run_mock(turns).await?],
        BenchBackend::Codex => vec![run_codex(turns).await?],
        BenchBackend::Responses => run_responses(turns).await?,
    })
}

fn kb(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / 1000.0)
}

/// The per-turn table and the summary against the targets.
pub fn format_table(run: &ProjectionRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== Projection cost on the {} backend: {} turns, assembled context ~{} KB + one exchange per turn, epoch change every {} turns ==",
        run.backend_label(),
        run.turns,
        run.engine.background_chars / 1000,
        run.engine.epoch_turns
    );
    let _ = writeln!(
        out,
        "sent = chars ctxbridge sent to the backend; model = model-request bytes this turn; cum = cumulative model-request KB;\n×min = model / minimum, minimum {}",
        run.minimum.describe()
    );
    if run.threads.is_some() {
        let _ = writeln!(
            out,
            "model = the context the model was given (instructions + the conversation the server rebuilt, as the JSON a stateless client would send); wire = request bytes ctxbridge sent (the new turn only)"
        );
    }
    let _ = writeln!(
        out,
        "{:>4} {:>13} {:>8} | {:>7} {:>8} {:>7} | {:>7} {:>8} {:>7} {:>6} | {:>7} {:>8} {:>7} {:>6} {:<8}",
        "turn", "epoch", "min", "leg.sent", "model", "cum KB", "pt.sent", "model", "cum KB", "×min",
        "tb.sent", "model", "cum KB", "×min", "tb.thread"
    );
    let by_mode: Vec<Vec<&ProjectionRow>> = BenchMode::ALL
        .iter()
        .map(|m| run.rows_of(*m).collect())
        .collect();
    for i in 0..run.turns {
        let (Some(l), Some(p), Some(t)) = (by_mode[0].get(i), by_mode[1].get(i), by_mode[2].get(i))
        else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:>4} {:>13} {:>8} | {:>8} {:>8} {:>7} | {:>7} {:>8} {:>7} {:>6.2} | {:>7} {:>8} {:>7} {:>6.2} {:<8}",
            t.turn,
            t.epoch,
            t.min_model_request_bytes,
            l.backend_chars,
            l.model_request_bytes,
            kb(l.cumulative_model_request_bytes),
            p.backend_chars,
            p.model_request_bytes,
            kb(p.cumulative_model_request_bytes),
            p.ratio_to_min(),
            t.backend_chars,
            t.model_request_bytes,
            kb(t.cumulative_model_request_bytes),
            t.ratio_to_min(),
            t.thread_action
        );
    }
    let wire = run.threads.is_some();
    let _ = writeln!(
        out,
        "\n{:<31} {:>14} {:>16} {:>14} {:>11} {:>10} {:>12}{}",
        "mode",
        "sent (chars)",
        "model (bytes)",
        "minimum sum",
        "mean ×min",
        "max ×min",
        "projections",
        if wire {
            format!(" {:>14}", "wire (bytes)")
        } else {
            String::new()
        }
    );
    let ac = BenchMode::ThreadBootstrapAdditionalContext;
    let has_ac = run.rows_of(ac).next().is_some();
    let summary_modes = BenchMode::ALL.into_iter().chain(has_ac.then_some(ac));
    for mode in summary_modes {
        let max = run
            .rows_of(mode)
            .map(ProjectionRow::ratio_to_min)
            .fold(0.0f64, f64::max);
        let _ = writeln!(
            out,
            "{:<31} {:>14} {:>16} {:>14} {:>11.2} {:>10.2} {:>12}{}",
            run.mode_label(mode),
            run.total_backend_chars(mode),
            run.total_model_bytes(mode),
            run.total_min_bytes(mode),
            run.mean_ratio(mode),
            max,
            run.rows_of(mode).filter(|r| r.projected).count(),
            if wire {
                format!(" {:>14}", run.total_wire_bytes(mode))
            } else {
                String::new()
            }
        );
    }
    let tb = run.mean_ratio(BenchMode::ThreadBootstrap);
    let _ = writeln!(
        out,
        "model-request bytes ÷ the minimum, averaged over the turns: thread_bootstrap {}×; per_turn {}×; legacy {}× (legacy never sends the engine's context, so it stays below the minimum).",
        ratio_text(tb),
        ratio_text(run.mean_ratio(BenchMode::PerTurn)),
        ratio_text(run.mean_ratio(BenchMode::Legacy))
    );
    if has_ac {
        let ratio = run.mean_ratio(ac);
        let delivered: Vec<String> = run
            .rows_of(ac)
            .filter(|r| r.context_delivery != "none")
            .map(|r| format!("turn {}: {}", r.turn, r.context_delivery))
            .collect();
        let _ = writeln!(
            out,
            "thread_bootstrap_ac: thread_bootstrap with projection.codexContextDelivery = additional-context, on a {} KB background (its own minimum); projections went as [{}].",
            AC_BACKGROUND_CHARS / 1000,
            delivered.join(", ")
        );
        let _ = writeln!(
            out,
            "thread_bootstrap with additionalContext delivery: {}× the minimum, averaged over the turns.",
            ratio_text(ratio)
        );
    }
    out
}

/// A ratio to the minimum, with three decimals: two would round 1.052 onto 1.05, the very
/// figure such ratios are judged against.
pub fn ratio_text(ratio: f64) -> String {
    format!("{ratio:.3}")
}

/// The CSV columns, in order.
pub const CSV_COLUMNS: [&str; 15] = [
    "backend",
    "mode",
    "turn",
    "epoch",
    "projected",
    "reason",
    "thread_action",
    "backend_chars",
    "cumulative_backend_chars",
    "model_requests",
    "model_request_bytes",
    "cumulative_model_request_bytes",
    "min_model_request_bytes",
    "ratio_to_min",
    "wire_request_bytes",
];

fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
    }
}

/// The run as CSV text: a header and one row per mode and turn.
pub fn to_csv(run: &ProjectionRun) -> String {
    to_csv_runs(std::slice::from_ref(run))
}

/// Runs as one CSV text: a header, then one row per run, mode and turn.
pub fn to_csv_runs(runs: &[ProjectionRun]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for run in runs {
        for r in &run.rows {
            let fields = [
                run.backend.as_str().to_string(),
                run.mode_label(r.mode),
                r.turn.to_string(),
                r.epoch.clone(),
                r.projected.to_string(),
                r.reason.clone(),
                r.thread_action.clone(),
                r.backend_chars.to_string(),
                r.cumulative_backend_chars.to_string(),
                r.model_requests.to_string(),
                r.model_request_bytes.to_string(),
                r.cumulative_model_request_bytes.to_string(),
                r.min_model_request_bytes.to_string(),
                format!("{:.4}", r.ratio_to_min()),
                r.wire_request_bytes.to_string(),
            ];
            let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
            out.push_str(&line.join(","));
            out.push('\n');
        }
    }
    out
}

/// Writes [`to_csv_runs`] to `path`.
pub fn write_csv(runs: &[ProjectionRun], path: &Path) -> Result<(), BenchError> {
    std::fs::write(path, to_csv_runs(runs)).map_err(|source| BenchError::Io {
        operation: "write the CSV",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Ratios keep three decimals, so one just above a round figure does not print as it.
    #[test]
    fn ratios_show_three_decimals() {
        assert_eq!(ratio_text(1.052), "1.052");
        assert_eq!(ratio_text(1.05), "1.050");
        assert_eq!(ratio_text(0.9994), "0.999");
    }

    /// On the mock, thread_bootstrap's first turn costs exactly the minimum, its reused turns
    /// stay near it, and per_turn's cost grows with every turn; the CSV has a row per mode and
    /// turn with every column.
    #[tokio::test]
    async fn mock_run_shows_the_difference_between_modes() {
        let run = run_mock(12).await.unwrap();
        assert_eq!(run.rows.len(), 36);
        let tb: Vec<&ProjectionRow> = run.rows_of(BenchMode::ThreadBootstrap).collect();
        assert_eq!(tb[0].model_request_bytes, tb[0].min_model_request_bytes);
        assert!(tb[1..10].iter().all(|r| !r.projected));
        assert!(tb[10].projected, "epoch change at turn 11");
        assert_eq!(tb[10].thread_action, "rotated");
        let pt: Vec<&ProjectionRow> = run.rows_of(BenchMode::PerTurn).collect();
        assert!(pt.iter().all(|r| r.projected));
        assert!(pt[11].ratio_to_min() > 5.0 * tb[11].ratio_to_min());
        assert!(
            run.total_model_bytes(BenchMode::ThreadBootstrap)
                < run.total_model_bytes(BenchMode::PerTurn)
        );
        let csv = to_csv(&run);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 37);
        assert!(lines[1..]
            .iter()
            .all(|l| l.split(',').count() == CSV_COLUMNS.len()));
    }

    /// A request's size is its content-length when the client sent one.
    #[test]
    fn request_size_prefers_content_length() {
        let mut r: RecordedRequest = serde_json::from_value(serde_json::json!({
            "seq": 1, "received_at_ms": 0, "method": "POST", "path": "/v1/responses",
            "headers": [["content-length", "1234"]], "body": {"a": 1}, "raw_body": null,
            "kind": "responses", "instructions": null, "input": [], "previous_response_id": null,
            "store": false, "conversation": [], "status": 200, "response_id": null,
            "reply_text": null
        }))
        .unwrap();
        assert_eq!(request_body_bytes(&r), 1234);
        r.headers.clear();
        assert_eq!(request_body_bytes(&r), br#"{"a":1}"#.len());
    }
}
