//! `ctxbridge bench --serve`: what `serve` costs in front of the same upstream, the real
//! `codex app-server` run offline against the loopback mock model server.
//!
//! - **Turn latency** (`turn/start` sent → `turn/completed` received), the two paths
//!   interleaved, through `serve` (a WebSocket client, pass-through sessions) vs straight to an app-server child of the same
//!   binary and configuration (JSONL over its stdio), both warm; the CLI's spawn-per-turn
//!   (`ctxbridge turn`, a process and an app-server per turn) beside them.
//! - **Notification relay throughput**: one turn whose reply streams many deltas, through
//!   `serve` and direct (Codex itself is the bottleneck there), and `serve`'s relay in
//!   isolation: an in-process scripted upstream that answers `turn/start` with a flood of
//!   `item/agentMessage/delta` notifications (each parsed from its JSON line, as the upstream
//!   reader does), relayed to a WebSocket client.
//! - **Memory per idle connection**: a `ctxbridge serve` child process; its RSS before and after
//!   N idle initialized WebSocket connections, divided by N.
//! - **Concurrent clients**: many WebSocket clients, each on its own thread, running turns at
//!   once through one `serve`; errors and the latency percentiles.
//!
//! Figures are printed, never asserted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codex_app_server_client::{offline_overrides, AppServerConfig};
use ctxbridge_jsonrpc::Incoming;
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::bench::peer::Peer;
use crate::bench::{serve_engine, BenchError, BENCH_BASE_INSTRUCTIONS};
use crate::serve::{self as proxy, Connector, ListenAddr, Live, ServeOptions, UpstreamEvent};

/// How long one reply may take before the bench gives up (a broken setup fails, not hangs).
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);
/// Turns run before timing starts on each path.
pub(crate) const WARMUP_TURNS: usize = 3;

/// `ctxbridge bench --serve` arguments (flattened into `bench`'s).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeBenchArgs {
    /// Measure `serve` instead (latency vs direct, relay throughput, memory per idle
    /// connection, concurrent clients); needs the Codex binary. The other runs are skipped.
    #[arg(long = "serve")]
    pub enabled: bool,
    /// Timed turns per latency path.
    #[arg(long, default_value_t = 200)]
    pub serve_turns: usize,
    /// Timed harness turns per engine-session path (direct harness vs served; 0 skips them).
    #[arg(long, default_value_t = 100)]
    pub serve_engine_turns: usize,
    /// Timed `ctxbridge turn` processes (0 skips them).
    #[arg(long, default_value_t = 10)]
    pub serve_cli_turns: usize,
    /// Deltas of the long reply streamed through Codex.
    #[arg(long, default_value_t = 5_000)]
    pub serve_codex_deltas: usize,
    /// Notifications of the scripted upstream's flood.
    #[arg(long, default_value_t = 200_000)]
    pub serve_flood: usize,
    /// Idle connections of the memory figure (0 skips it).
    #[arg(long, default_value_t = 1_000)]
    pub serve_idle: usize,
    /// Concurrent clients (0 skips them).
    #[arg(long, default_value_t = 50)]
    pub serve_clients: usize,
    /// Turns per concurrent client.
    #[arg(long, default_value_t = 4)]
    pub serve_client_turns: usize,
    /// Which front to measure: `codex` (the app-server proxy, with the Codex binary) or
    /// `responses` (the Responses API front, against the mock model only).
    #[arg(long = "front", value_enum, default_value_t = crate::serve::command::Front::Codex)]
    pub front: crate::serve::command::Front,
}

impl ServeBenchArgs {
    /// The options these arguments ask for.
    pub fn options(&self) -> ServeBenchOptions {
        ServeBenchOptions {
            turns: self.serve_turns.max(1),
            engine_turns: self.serve_engine_turns,
            cli_turns: self.serve_cli_turns,
            codex_deltas: self.serve_codex_deltas.max(1),
            flood_messages: self.serve_flood.max(1),
            idle_connections: self.serve_idle,
            clients: self.serve_clients,
            client_turns: self.serve_client_turns.max(1),
        }
    }
}

/// Runs `bench --serve` and prints its table (with the machine load).
pub async fn run_and_print(args: &ServeBenchArgs) -> Result<(), BenchError> {
    if args.front == crate::serve::command::Front::Responses {
        let options = crate::bench::serve_responses::ResponsesBenchOptions {
            turns: args.serve_turns.max(1),
            clients: args.serve_clients,
            client_turns: args.serve_client_turns.max(1),
            idle_connections: args.serve_idle,
        };
        return crate::bench::serve_responses::run_and_print(&options).await;
    }
    let options = args.options();
    let report = run(&options).await?;
    print!("{}", format_table(&report, &options));
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "  load average (1/5/15 min): {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(())
}

/// What `bench --serve` runs.
#[derive(Debug, Clone)]
pub struct ServeBenchOptions {
    /// Timed turns per path (latency).
    pub turns: usize,
    /// Timed harness turns per engine-session path (0 skips them).
    pub engine_turns: usize,
    /// Timed `ctxbridge turn` processes (spawn-per-turn).
    pub cli_turns: usize,
    /// Deltas of the long reply streamed through Codex.
    pub codex_deltas: usize,
    /// Notifications of the scripted upstream's flood.
    pub flood_messages: usize,
    /// Idle connections opened for the memory figure.
    pub idle_connections: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Turns per concurrent client.
    pub client_turns: usize,
}

impl Default for ServeBenchOptions {
    fn default() -> Self {
        ServeBenchOptions {
            turns: 200,
            engine_turns: 100,
            cli_turns: 10,
            codex_deltas: 5_000,
            flood_messages: 200_000,
            idle_connections: 1_000,
            clients: 50,
            client_turns: 4,
        }
    }
}

/// Latency percentiles of one path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

impl Latency {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort_unstable();
        let at = |q: f64| {
            if samples.is_empty() {
                return Duration::ZERO;
            }
            let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
            samples[index.min(samples.len() - 1)]
        };
        Latency {
            n: samples.len(),
            p50: at(0.50),
            p99: at(0.99),
        }
    }
}

/// A relay throughput figure.
#[derive(Debug, Clone, Copy, Default)]
pub struct Throughput {
    /// Messages the client received.
    pub messages: usize,
    /// From `turn/start` sent to `turn/completed` received.
    pub elapsed: Duration,
}

impl Throughput {
    /// Messages per second.
    pub fn per_second(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Everything `bench --serve` measured.
#[derive(Debug, Clone, Default)]
pub struct ServeBenchReport {
    /// Straight to a warm app-server child.
    pub direct: Latency,
    /// Through `serve` (WebSocket, pass-through).
    pub through_serve: Latency,
    /// A harness turn on a Codex backend with its own child.
    pub engine_direct: Latency,
    /// The same harness turn served: a client's `turn/start` through serve's engine sessions.
    pub engine_served: Latency,
    /// `ctxbridge turn` per turn.
    pub cli: Latency,
    /// A long streamed reply, direct.
    pub codex_direct: Throughput,
    /// The same through `serve`.
    pub codex_serve: Throughput,
    /// `serve`'s relay with the scripted upstream.
    pub relay: Throughput,
    /// Idle connections opened, RSS of the serve process before and after.
    pub idle: (usize, u64, u64),
    /// Concurrent clients: clients, turns that failed, latency.
    pub concurrent: (usize, usize, Latency),
}

pub(crate) fn runtime_err(operation: &'static str) -> impl FnOnce(String) -> BenchError {
    move |message| BenchError::Runtime { operation, message }
}

/// The Codex app-server configuration of every path (offline against `mock`).
fn codex_config(binary: &Path, home: &Path, mock: &MockModelServer) -> AppServerConfig {
    AppServerConfig::new(home.join("codex-home"))
        .with_command([binary.display().to_string(), "app-server".to_owned()])
        .with_overrides(offline_overrides(&mock.base_url()))
        .with_cwd(home)
}

async fn mock_server(config: MockModelConfig) -> Result<MockModelServer, BenchError> {
    MockModelServer::start(config)
        .await
        .map_err(|source| BenchError::MockModel {
            operation: "start the mock model server",
            source,
        })
}

/// `serve` in this process in front of `upstream`, pass-through sessions, on a loopback port.
async fn serve_in_process(
    upstream: AppServerConfig,
) -> Result<(proxy::ServeHandle, String), BenchError> {
    let listen =
        ListenAddr::parse("ws://127.0.0.1:0").map_err(|e| runtime_err("serve")(e.to_string()))?;
    let handle = proxy::start(ServeOptions::new(listen, upstream))
        .await
        .map_err(|e| runtime_err("start serve")(crate::util::error_chain(&e)))?;
    let addr = handle
        .local_addr
        .ok_or_else(|| runtime_err("start serve")("no address".into()))?;
    Ok((handle, format!("ws://{addr}")))
}

/// Warm-up turns on both peers, then `turns` timed turns on each, interleaved (the order
/// alternating every round) so that load from elsewhere on the machine falls on both paths
/// alike. Returns (direct, through serve).
async fn time_turns_interleaved(
    direct: &mut Peer,
    through: &mut Peer,
    turns: usize,
) -> Result<(Latency, Latency), BenchError> {
    let mut threads = Vec::new();
    for peer in [&mut *direct, &mut *through] {
        peer.initialize().await?;
        let thread = peer.start_thread().await?;
        for i in 0..WARMUP_TURNS {
            peer.turn(2 + i as u64, &thread, &format!("warm up {i}"))
                .await?;
        }
        threads.push(thread);
    }
    let (mut d, mut s) = (Vec::with_capacity(turns), Vec::with_capacity(turns));
    for i in 0..turns {
        let id = 10 + i as u64;
        let text = format!("ping {i}");
        if i % 2 == 0 {
            d.push(direct.turn(id, &threads[0], &text).await?.elapsed);
            s.push(through.turn(id, &threads[1], &text).await?.elapsed);
        } else {
            s.push(through.turn(id, &threads[1], &text).await?.elapsed);
            d.push(direct.turn(id, &threads[0], &text).await?.elapsed);
        }
    }
    Ok((Latency::of(d), Latency::of(s)))
}

/// Long streamed replies, `rounds` on each peer (initialized), interleaved; the median
/// round of each by rate. Returns (direct, through serve).
async fn long_replies_interleaved(
    direct: &mut Peer,
    through: &mut Peer,
    mock: &MockModelServer,
    text: &str,
    rounds: usize,
) -> Result<(Throughput, Throughput), BenchError> {
    let mut threads = Vec::new();
    for peer in [&mut *direct, &mut *through] {
        let thread = peer.start_thread().await?;
        peer.turn(5, &thread, "warm up").await?;
        threads.push(thread);
    }
    let (mut d, mut s) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        let id = 10 + round as u64;
        mock.push_reply(ScriptedReply::text(text));
        let first = if round % 2 == 0 {
            &mut *direct
        } else {
            &mut *through
        };
        let one = first
            .turn(id, &threads[round % 2], "stream a long reply")
            .await?;
        mock.push_reply(ScriptedReply::text(text));
        let second = if round % 2 == 0 {
            &mut *through
        } else {
            &mut *direct
        };
        let other = second
            .turn(id, &threads[(round + 1) % 2], "stream a long reply")
            .await?;
        if round % 2 == 0 {
            d.push(one);
            s.push(other);
        } else {
            s.push(one);
            d.push(other);
        }
    }
    let median = |mut runs: Vec<Throughput>| {
        runs.sort_by(|a, b| a.per_second().total_cmp(&b.per_second()));
        runs.get(runs.len() / 2).copied().unwrap_or_default()
    };
    Ok((median(d), median(s)))
}

/// The configuration file of the CLI paths (`ctxbridge turn`, `ctxbridge serve`).
fn write_cli_config(upstream: &AppServerConfig, dir: &Path) -> Result<PathBuf, BenchError> {
    let overrides = codex_app_server_client::overrides_json(&upstream.config_overrides);
    let config = json!({
        "agent": {"baseInstructions": BENCH_BASE_INSTRUCTIONS},
        "backend": {"kind": "codex", "command": upstream.command, "codexHome": dir.join("cli-codex-home"), "config": overrides},
        "store": {"path": dir.join("cli-state").join("state.db")},
    });
    let path = dir.join("ctxbridge-bench.json5");
    std::fs::write(&path, config.to_string()).map_err(|source| BenchError::Io {
        operation: "write the bench configuration",
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn current_exe() -> Result<PathBuf, BenchError> {
    std::env::current_exe().map_err(|source| BenchError::Io {
        operation: "locate the ctxbridge binary",
        path: PathBuf::from("ctxbridge"),
        source,
    })
}

/// `ctxbridge turn` once per turn (one warm-up, then `turns` timed).
async fn cli_turns(config: &Path, dir: &Path, turns: usize) -> Result<Latency, BenchError> {
    let exe = current_exe()?;
    let mut samples = Vec::with_capacity(turns);
    for i in 0..=turns {
        let started = Instant::now();
        let output = tokio::process::Command::new(&exe)
            .arg("--config")
            .arg(config)
            .args(["turn", "--session", "bench-cli", &format!("ping {i}")])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|source| BenchError::Io {
                operation: "run ctxbridge turn",
                path: exe.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(runtime_err("ctxbridge turn")(
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ));
        }
        if i > 0 {
            samples.push(started.elapsed());
        }
    }
    Ok(Latency::of(samples))
}

/// A scripted in-process upstream: answers what `serve` asks, and a `turn/start` with
/// `turn/started`, `deltas` agent-message deltas and `turn/completed`, each parsed from its
/// JSON line as the upstream reader parses the child's stdout.
struct FloodConnector {
    deltas: usize,
}

#[async_trait::async_trait]
impl Connector for FloodConnector {
    async fn connect(
        &self,
        _generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), proxy::UpstreamError> {
        let (live, events, mut peer) =
            Live::in_memory(json!({"userAgent": "bench-flood/0", "codexHome": "/nonexistent"}));
        let deltas = self.deltas;
        tokio::spawn(async move {
            let parse = |line: &str| serde_json::from_str::<Map<String, Value>>(line).ok();
            let mut turns = 0u64;
            while let Some(line) = peer.written.recv().await {
                let Some(request) = parse(&line) else {
                    continue;
                };
                let (Some(id), Some(method)) = (
                    request.get("id").cloned(),
                    request.get("method").and_then(Value::as_str),
                ) else {
                    continue;
                };
                let thread = "bench-flood-thread";
                let result = match method {
                    "thread/start" | "thread/resume" => json!({"thread": {"id": thread}}),
                    "turn/start" => {
                        turns += 1;
                        json!({"turn": {"id": format!("turn-{turns}"), "status": "inProgress", "items": []}})
                    }
                    _ => json!({}),
                };
                let answer = json!({"id": id, "result": result}).to_string();
                let mut lines = vec![answer];
                if method == "turn/start" {
                    let turn = format!("turn-{turns}");
                    lines.push(json!({"method": "turn/started", "params": {"threadId": thread, "turn": {"id": turn, "status": "inProgress", "items": []}}}).to_string());
                    let delta = json!({"method": "item/agentMessage/delta", "params": {"threadId": thread, "turnId": turn, "itemId": "msg-1", "delta": "token "}}).to_string();
                    lines.extend(std::iter::repeat(delta).take(deltas));
                    lines.push(json!({"method": "turn/completed", "params": {"threadId": thread, "turn": {"id": turn, "status": "completed", "items": [], "error": null}}}).to_string());
                }
                // Classified as the upstream reader classifies Codex's stdout.
                for line in lines {
                    if let Ok(Some(message)) = Incoming::parse(line.as_bytes()) {
                        if peer.events.send(UpstreamEvent::Message(message)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok((live, events))
    }
}

/// `serve`'s relay alone: a WebSocket client's flood turn through the scripted upstream.
async fn relay_flood(messages: usize) -> Result<Throughput, BenchError> {
    let listen =
        ListenAddr::parse("ws://127.0.0.1:0").map_err(|e| runtime_err("serve")(e.to_string()))?;
    let options = ServeOptions::new(listen, AppServerConfig::new("/nonexistent"));
    let handle = proxy::start_with(options, Arc::new(FloodConnector { deltas: messages }))
        .await
        .map_err(|e| runtime_err("start serve")(crate::util::error_chain(&e)))?;
    let addr = handle
        .local_addr
        .ok_or_else(|| runtime_err("start serve")("no address".into()))?;
    let mut peer = Peer::ws(&format!("ws://{addr}")).await?;
    peer.initialize().await?;
    let thread = peer.start_thread().await?;
    // A small warm-up flood, then the measured one.
    let _ = peer.turn(2, &thread, "warm up").await?;
    let measured = peer.turn(3, &thread, "flood").await;
    drop(peer);
    handle.shutdown().await;
    measured
}

/// RSS of another process (`/proc/PID/status`), bytes.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix("VmRSS:")?;
        rest.split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
            .map(|kb| kb * 1024)
    })
}

/// A `ctxbridge serve` child; RSS before and after `n` idle initialized connections.
async fn idle_memory(config: &Path, dir: &Path, n: usize) -> Result<(usize, u64, u64), BenchError> {
    let exe = current_exe()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|source| BenchError::Io {
            operation: "pick a loopback port",
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })?
        .port();
    let mut child = tokio::process::Command::new(&exe)
        .arg("--config")
        .arg(config)
        .args(["serve", "--listen", &format!("ws://127.0.0.1:{port}")])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BenchError::Io {
            operation: "start ctxbridge serve",
            path: exe.clone(),
            source,
        })?;
    let pid = child
        .id()
        .ok_or_else(|| runtime_err("start ctxbridge serve")("no pid".into()))?;
    let url = format!("ws://127.0.0.1:{port}");
    let deadline = Instant::now() + PATIENCE;
    let mut first = loop {
        match Peer::ws(&url).await {
            Ok(peer) => break peer,
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    // The first client starts the upstream; a few more warm the allocator up.
    first.initialize().await?;
    let mut warm = Vec::new();
    for _ in 0..8 {
        let mut peer = Peer::ws(&url).await?;
        peer.initialize().await?;
        warm.push(peer);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_of(pid).unwrap_or(0);
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        let mut peer = Peer::ws(&url).await?;
        peer.initialize().await?;
        idle.push(peer);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss_of(pid).unwrap_or(0);
    drop(idle);
    drop(warm);
    drop(first);
    // SIGTERM: serve stops its upstream child cleanly.
    let _ = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
    Ok((n, before, after))
}

/// `clients` WebSocket clients at once, each on its own thread running `turns` turns.
async fn concurrent_clients(url: &str, clients: usize, turns: usize) -> (usize, usize, Latency) {
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut failed = 0usize;
            let setup = async {
                let mut peer = Peer::ws(&url).await?;
                peer.initialize().await?;
                let thread = peer.start_thread().await?;
                Ok::<_, BenchError>((peer, thread))
            };
            match setup.await {
                Ok((mut peer, thread)) => {
                    for i in 0..turns {
                        match peer
                            .turn(10 + i as u64, &thread, &format!("hello {i}"))
                            .await
                        {
                            Ok(turn) => samples.push(turn.elapsed),
                            Err(error) => {
                                tracing::warn!(%error, "bench: a concurrent turn failed");
                                failed += 1;
                            }
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "bench: a concurrent client could not start");
                    failed += turns;
                }
            }
            (samples, failed)
        }));
    }
    let mut samples = Vec::new();
    let mut failed = 0;
    for task in tasks {
        match task.await {
            Ok((mut s, f)) => {
                samples.append(&mut s);
                failed += f;
            }
            Err(_) => failed += turns,
        }
    }
    (clients, failed, Latency::of(samples))
}

/// Runs every measurement of `bench --serve`.
pub async fn run(options: &ServeBenchOptions) -> Result<ServeBenchReport, BenchError> {
    let binary = crate::app::find_codex_binary().ok_or(BenchError::NoCodexBinary)?;
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        operation: "create a temporary directory",
        path: std::env::temp_dir(),
        source,
    })?;
    let mut report = ServeBenchReport::default();
    let long_text = "token ".repeat(options.codex_deltas.max(1));
    let mock = mock_server(MockModelConfig {
        delta_chunks: 3,
        ..MockModelConfig::default()
    })
    .await?;
    let flood_mock = mock_server(MockModelConfig {
        delta_chunks: options.codex_deltas.max(1),
        ..MockModelConfig::default()
    })
    .await?;

    // (a) Latency: direct vs through serve, same binary and configuration, interleaved.
    let mut direct = Peer::stdio(&codex_config(&binary, &dir.path().join("direct"), &mock))?;
    let serve_home = dir.path().join("serve");
    std::fs::create_dir_all(&serve_home).map_err(|source| BenchError::Io {
        operation: "create a directory",
        path: serve_home.clone(),
        source,
    })?;
    let (handle, url) = serve_in_process(codex_config(&binary, &serve_home, &mock)).await?;
    let mut through = Peer::ws(&url).await?;
    (report.direct, report.through_serve) =
        time_turns_interleaved(&mut direct, &mut through, options.turns).await?;
    drop(direct);

    // (d) Concurrent clients through the same serve.
    if options.clients > 0 {
        report.concurrent = concurrent_clients(&url, options.clients, options.client_turns).await;
    }
    drop(through);
    handle.shutdown().await;

    // (a') The harness turn direct vs served by engine sessions, interleaved.
    if options.engine_turns > 0 {
        (report.engine_direct, report.engine_served) = serve_engine::engine_turns_interleaved(
            codex_config(&binary, &dir.path().join("engine-direct"), &mock),
            codex_config(&binary, &dir.path().join("engine-served"), &mock),
            dir.path(),
            options.engine_turns,
        )
        .await?;
    }

    // (b) Long streamed replies through Codex (direct and through serve, interleaved), then
    // serve's relay alone.
    let mut direct = Peer::stdio(&codex_config(
        &binary,
        &dir.path().join("flood-direct"),
        &flood_mock,
    ))?;
    direct.initialize().await?;
    let flood_home = dir.path().join("flood-serve");
    std::fs::create_dir_all(&flood_home).map_err(|source| BenchError::Io {
        operation: "create a directory",
        path: flood_home.clone(),
        source,
    })?;
    let (handle, url) = serve_in_process(codex_config(&binary, &flood_home, &flood_mock)).await?;
    let mut through = Peer::ws(&url).await?;
    through.initialize().await?;
    (report.codex_direct, report.codex_serve) =
        long_replies_interleaved(&mut direct, &mut through, &flood_mock, &long_text, 3).await?;
    drop(direct);
    drop(through);
    handle.shutdown().await;
    report.relay = relay_flood(options.flood_messages.max(1)).await?;

    // The CLI paths share one configuration file.
    let cli_config = write_cli_config(&codex_config(&binary, dir.path(), &mock), dir.path())?;
    if options.cli_turns > 0 {
        report.cli = cli_turns(&cli_config, dir.path(), options.cli_turns).await?;
    }
    // (c) Memory per idle connection of a serve process.
    if options.idle_connections > 0 {
        report.idle = idle_memory(&cli_config, dir.path(), options.idle_connections).await?;
    }
    Ok(report)
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The report as a table with the targets beside the figures.
pub fn format_table(report: &ServeBenchReport, options: &ServeBenchOptions) -> String {
    let mut out = String::new();
    let line = |out: &mut String, what: &str, figure: String, target: &str| {
        out.push_str(&format!("  {what:<58} {figure:>22}  {target}\n"));
    };
    out.push_str("\nserve in front of codex app-server (offline, loopback mock model)\n");
    line(&mut out, "what", "figure".into(), "target");
    let d = report.direct;
    let s = report.through_serve;
    line(
        &mut out,
        &format!(
            "turn latency direct (warm app-server, {} turns) p50 / p99 ms",
            d.n
        ),
        format!("{} / {}", ms(d.p50), ms(d.p99)),
        "",
    );
    line(
        &mut out,
        &format!(
            "turn latency through serve (ws, {} turns) p50 / p99 ms",
            s.n
        ),
        format!("{} / {}", ms(s.p50), ms(s.p99)),
        "",
    );
    let added = s.p50.as_secs_f64() - d.p50.as_secs_f64();
    line(
        &mut out,
        "serve added at p50 (ms)",
        format!("{:.2}", added * 1000.0),
        "<= 2 ms",
    );
    let added99 = s.p99.as_secs_f64() - d.p99.as_secs_f64();
    line(
        &mut out,
        "serve added at p99 (ms)",
        format!("{:.2}", added99 * 1000.0),
        "",
    );
    line(
        &mut out,
        "ratio through serve / direct (p50)",
        format!("{:.3}", s.p50.as_secs_f64() / d.p50.as_secs_f64().max(1e-9)),
        "<= 1.05",
    );
    let (ed, es) = (report.engine_direct, report.engine_served);
    if ed.n > 0 {
        line(
            &mut out,
            &format!(
                "harness turn direct (own app-server, {} turns) p50 / p99 ms",
                ed.n
            ),
            format!("{} / {}", ms(ed.p50), ms(ed.p99)),
            "",
        );
        line(
            &mut out,
            &format!(
                "harness turn served (ws, engine session, {} turns) p50 / p99 ms",
                es.n
            ),
            format!("{} / {}", ms(es.p50), ms(es.p99)),
            "",
        );
        line(
            &mut out,
            "serve added to a harness turn at p50 (ms)",
            format!(
                "{:.2}",
                (es.p50.as_secs_f64() - ed.p50.as_secs_f64()) * 1000.0
            ),
            "<= 0.3 ms",
        );
    }
    let c = report.cli;
    if c.n > 0 {
        line(
            &mut out,
            &format!(
                "CLI spawn-per-turn (`ctxbridge turn`, {} turns) p50 / p99 ms",
                c.n
            ),
            format!("{} / {}", ms(c.p50), ms(c.p99)),
            "",
        );
    }
    let cd = report.codex_direct;
    let cs = report.codex_serve;
    line(
        &mut out,
        &format!(
            "long reply via Codex, direct ({} msgs, median of 3) msg/s",
            cd.messages
        ),
        format!("{:.0}", cd.per_second()),
        "(Codex-bound)",
    );
    line(
        &mut out,
        &format!(
            "long reply via Codex, through serve ({} msgs, median of 3) msg/s",
            cs.messages
        ),
        format!("{:.0}", cs.per_second()),
        "(Codex-bound)",
    );
    let r = report.relay;
    line(
        &mut out,
        &format!(
            "serve relay alone, scripted upstream ({} msgs) msg/s",
            r.messages
        ),
        format!("{:.0}", r.per_second()),
        ">= 50000",
    );
    let (n, before, after) = report.idle;
    if n > 0 {
        let per = after.saturating_sub(before) as f64 / n as f64 / 1024.0;
        line(
            &mut out,
            &format!("serve RSS per idle initialized ws connection ({n} conns) KB"),
            format!("{per:.1}"),
            "<= 64 KB",
        );
        line(
            &mut out,
            "serve process RSS before / after (MB)",
            format!(
                "{:.1} / {:.1}",
                before as f64 / 1048576.0,
                after as f64 / 1048576.0
            ),
            "",
        );
    }
    let (clients, failed, l) = report.concurrent;
    if clients > 0 {
        line(
            &mut out,
            &format!(
                "{clients} concurrent clients x {} turns: failed turns",
                options.client_turns
            ),
            format!("{failed}"),
            "0",
        );
        line(
            &mut out,
            "  their turn latency p50 / p99 ms",
            format!("{} / {}", ms(l.p50), ms(l.p99)),
            "",
        );
    }
    out
}
