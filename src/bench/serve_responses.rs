//! `bench --serve --front responses`: what the Responses front adds to a streamed turn, in one
//! run against the loopback mock model. The front is the one `serve --front responses` runs
//! (built from a configuration as the command builds it, its state in a SQLite file), spoken
//! to over HTTP as an SDK speaks to it:
//! - a streamed turn sent to the mock directly, then the same through the front with no
//!   engine (`legacy`: the relay) and with `sample-summary` (thread bootstrap): p50/p99 to the
//!   stream's end (after `response.completed`, sent once the model has answered), the added
//!   p50 and the ratio, and the p50 to the first text and what the front adds to it, against
//!   the mock's own ~1 ms and with the model taking [`MODEL_TIME`]; the timed client and the
//!   mock run apart from the front, as other processes would (see [`Apart`]);
//! - concurrent clients, each a `previous_response_id` chain of several turns: failures and
//!   responses per second;
//! - idle keep-alive connections: resident memory per connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bench::process::rss_bytes;
use crate::bench::{percentile, BenchError};
use crate::config::Config;
use crate::serve::command::{responses_front, Front, ServeArgs};
use crate::serve::responses::ResponsesFront;

/// What the run measures, and how much.
#[derive(Debug, Clone, Copy)]
pub struct ResponsesBenchOptions {
    /// Timed streamed turns per path.
    pub turns: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Turns per concurrent client.
    pub client_turns: usize,
    /// Idle keep-alive connections opened for the memory figure.
    pub idle_connections: usize,
}

/// Latency figures of one path: the whole streamed turn (to the stream's end, after
/// `response.completed`), and its first text (the first `response.output_text.delta`).
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    pub first_text_p50: Duration,
}

/// What one streamed turn took.
struct TurnTimes {
    whole: Duration,
    first_text: Duration,
}

/// The run's figures.
#[derive(Debug, Clone)]
pub struct ResponsesBenchReport {
    pub direct: Latency,
    pub legacy: Latency,
    pub engine: Latency,
    /// The same paths with the model answering after [`MODEL_TIME`]: (direct, legacy,
    /// engine).
    pub with_model_time: (Latency, Latency, Latency),
    pub clients: usize,
    pub client_turns: usize,
    pub failed: usize,
    pub responses_per_second: f64,
    /// Resident bytes per idle keep-alive connection, when `/proc` tells.
    pub idle_bytes_per_connection: Option<f64>,
    pub idle_connections: usize,
}

/// A model's time to answer, for the figures beside the mock's own (~1 ms): the mock holds
/// each reply this long. A fast model's first token takes a few hundred milliseconds; 100 ms
/// is a floor.
pub const MODEL_TIME: Duration = Duration::from_millis(100);
/// Timed turns per path with [`MODEL_TIME`] (each costs it).
const MODEL_TIME_TURNS: usize = 30;

fn runtime(operation: &'static str) -> impl FnOnce(String) -> BenchError {
    move |message| BenchError::Runtime { operation, message }
}

/// A runtime on a thread of its own, as a process of its own has one. The timed client and
/// the mock model run apart from the front, as an SDK's process and the model's server do: a
/// client sharing the front's runtime hears its socket only when one of the front's worker
/// threads next polls for I/O, so whatever the front does after writing an event (recording
/// the turn, the engine's work after it) would delay the client's read and be counted as the
/// front's added time, though a client in another process is woken by its kernel at once.
struct Apart {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Apart {
    /// A single-threaded runtime (the SDKs' clients run on one thread) on a thread named
    /// `name`, running until dropped.
    fn start(name: &str) -> Result<Apart, BenchError> {
        let own = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| runtime("start a runtime apart from the front's")(e.to_string()))?;
        let handle = own.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                own.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| runtime("start a runtime apart from the front's")(e.to_string()))?;
        Ok(Apart {
            handle,
            stop: Some(stop),
        })
    }

    /// Runs `task` there; its output, here.
    async fn run<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, BenchError> {
        self.handle
            .spawn(task)
            .await
            .map_err(|e| runtime("a task apart from the front's")(e.to_string()))
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A front the bench started: its base URL, and how to stop it.
struct RunningFront {
    url: String,
    front: Arc<ResponsesFront>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningFront {
    /// Stops serving and shuts the front's engine and store down (before their directory goes).
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        self.front.shutdown().await;
    }
}

/// A front serving with `engine` (none: `legacy`) on the mock at `upstream`, its state in
/// `dir`.
async fn start_front(
    upstream: &str,
    engine: Option<&str>,
    dir: &std::path::Path,
) -> Result<RunningFront, BenchError> {
    let mut config = json!({
        "backend": {"kind": "responses", "baseUrl": upstream, "model": "mock-model"},
        "store": {"path": dir.join("state.db")},
    });
    if let Some(engine) = engine {
        config["plugins"] = json!({"slots": {"contextEngine": engine}});
    }
    let config = Config::parse(&config.to_string(), "bench")
        .map_err(|e| runtime("the Responses front's configuration")(e.to_string()))?;
    let args = ServeArgs {
        front: Front::Responses,
        ..ServeArgs::listening_on("http://127.0.0.1:0")
    };
    let (addr, front) = responses_front(&config, &args)
        .await
        .map_err(|e| runtime("start the Responses front")(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| runtime("bind the Responses front")(e.to_string()))?;
    let bound = listener
        .local_addr()
        .map_err(|e| runtime("bind the Responses front")(e.to_string()))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = front.clone();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(error) = serving.serve(listener, shutdown).await {
            tracing::warn!(%error, "bench: the Responses front stopped");
        }
    });
    Ok(RunningFront {
        url: format!("http://{bound}/v1"),
        front,
        stop,
        task,
    })
}

/// One streamed turn at `base`, read to its end; the new response's id, and when its first
/// text came (from `started`, when there was text).
async fn streamed_turn(
    client: &reqwest::Client,
    base: &str,
    input: &str,
    previous: Option<&str>,
) -> Result<(String, Option<Duration>), String> {
    let started = Instant::now();
    let mut body = json!({"model": "mock-model", "input": input, "stream": true, "store": true});
    if let Some(previous) = previous {
        body["previous_response_id"] = Value::from(previous);
    }
    let mut response = client
        .post(format!("{base}/responses"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        return Err(format!("HTTP {status} from {base}: {body}"));
    }
    let mut bytes = Vec::new();
    let mut first_text = None;
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        bytes.extend_from_slice(&chunk);
        if first_text.is_none()
            && String::from_utf8_lossy(&bytes).contains("event: response.output_text.delta")
        {
            first_text = Some(started.elapsed());
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    if !text.contains("event: response.completed") {
        return Err("the stream ended without response.completed".into());
    }
    // The last event is response.completed, carrying the response and its id.
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["type"] == "response.completed")
        .and_then(|v| v["response"]["id"].as_str().map(str::to_owned))
        .map(|id| (id, first_text))
        .ok_or_else(|| "no response.completed with an id in the stream".to_owned())
}

/// The timed client: its runtime, and the three paths' base URLs (direct, legacy, engine).
struct Timing {
    runtime: Apart,
    client: reqwest::Client,
    bases: [String; 3],
}

impl Timing {
    /// [`timed_chains`] of `turns` turns at the three paths, run on the client's runtime.
    async fn chains(&self, turns: usize) -> Result<[Latency; 3], BenchError> {
        let (client, bases) = (self.client.clone(), self.bases.clone());
        self.runtime
            .run(async move { timed_chains(&client, bases.each_ref().map(String::as_str), turns).await })
            .await?
    }
}

/// `turns` streamed turns at each of `bases`, one chain per base, each turn timed. The
/// chains take turns (the first base's turn, the second's, ..., then the next round), so that
/// the machine's drift over the run falls on every path alike.
async fn timed_chains<const N: usize>(
    client: &reqwest::Client,
    bases: [&str; N],
    turns: usize,
) -> Result<[Latency; N], BenchError> {
    let mut times: [Vec<TurnTimes>; N] = std::array::from_fn(|_| Vec::with_capacity(turns));
    let mut previous: [Option<String>; N] = std::array::from_fn(|_| None);
    for turn in 0..turns {
        for (path, base) in bases.iter().enumerate() {
            let started = Instant::now();
            let (id, first_text) = streamed_turn(
                client,
                base,
                &format!("bench turn {turn}"),
                previous[path].as_deref(),
            )
            .await
            .map_err(runtime("a timed streamed turn"))?;
            let whole = started.elapsed();
            times[path].push(TurnTimes {
                whole,
                first_text: first_text.unwrap_or(whole),
            });
            previous[path] = Some(id);
        }
    }
    Ok(times.map(|times| latency(&times)))
}

/// The percentiles of one path's turns.
fn latency(times: &[TurnTimes]) -> Latency {
    let mut whole: Vec<Duration> = times.iter().map(|t| t.whole).collect();
    let mut first_text: Vec<Duration> = times.iter().map(|t| t.first_text).collect();
    whole.sort_unstable();
    first_text.sort_unstable();
    Latency {
        p50: percentile(&whole, 50).unwrap_or_default(),
        p99: percentile(&whole, 99).unwrap_or_default(),
        first_text_p50: percentile(&first_text, 50).unwrap_or_default(),
    }
}

/// Runs the measurements.
pub async fn run(options: &ResponsesBenchOptions) -> Result<ResponsesBenchReport, BenchError> {
    let model_runtime = Apart::start("bench-mock-model")?;
    let mock = model_runtime
        .run(MockModelServer::start(MockModelConfig::stateful()))
        .await?
        .map_err(|source| BenchError::MockModel {
            operation: "start the mock model",
            source,
        })?;
    let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        operation: "create the bench state directory",
        path: std::env::temp_dir(),
        source,
    })?;
    let legacy_dir = dir.path().join("legacy");
    let engine_dir = dir.path().join("engine");
    for d in [&legacy_dir, &engine_dir] {
        std::fs::create_dir_all(d).map_err(|source| BenchError::Io {
            operation: "create the bench state directory",
            path: d.clone(),
            source,
        })?;
    }
    let legacy_front = start_front(&mock.base_url(), None, &legacy_dir).await?;
    let engine_front = start_front(&mock.base_url(), Some("sample-summary"), &engine_dir).await?;
    let measured = measure(options, &mock, &legacy_front.url, &engine_front.url).await;
    legacy_front.stop().await;
    engine_front.stop().await;
    drop(dir);
    measured
}

async fn measure(
    options: &ResponsesBenchOptions,
    mock: &MockModelServer,
    legacy: &str,
    engine: &str,
) -> Result<ResponsesBenchReport, BenchError> {
    let (legacy, engine) = (legacy.to_owned(), engine.to_owned());
    let client = reqwest::Client::new();
    // The timed client runs apart (see [`Apart`]), with connections of its own.
    let timing = Timing {
        runtime: Apart::start("bench-client")?,
        client: reqwest::Client::new(),
        bases: [mock.base_url(), legacy.clone(), engine.clone()],
    };
    // Warm both paths (connections, first thread) before timing.
    timing.chains(3).await?;
    eprintln!(
        "bench: Responses front, {} streamed turns per path",
        options.turns
    );
    let [direct, legacy_latency, engine_latency] = timing.chains(options.turns).await?;

    let model_turns = options.turns.min(MODEL_TIME_TURNS);
    eprintln!(
        "bench: Responses front, {model_turns} streamed turns per path with the model answering in {} ms",
        MODEL_TIME.as_millis()
    );
    mock.set_default_reply(ScriptedReply {
        delay: Some(MODEL_TIME),
        ..ScriptedReply::default()
    });
    let with_model_time = timing.chains(model_turns).await;
    mock.set_default_reply(ScriptedReply::default());
    let [slow_direct, slow_legacy, slow_engine] = with_model_time?;
    let with_model_time = (slow_direct, slow_legacy, slow_engine);

    eprintln!(
        "bench: Responses front, {} concurrent clients x {} turns",
        options.clients, options.client_turns
    );
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(options.clients);
    for c in 0..options.clients {
        let (client, base, turns) = (client.clone(), engine.clone(), options.client_turns);
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            let mut previous: Option<String> = None;
            for t in 0..turns {
                match streamed_turn(&client, &base, &format!("client {c} turn {t}"), previous.as_deref()).await {
                    Ok((id, _)) => previous = Some(id),
                    Err(error) => {
                        tracing::warn!(%error, client = c, turn = t, "bench: a concurrent turn failed");
                        failed += 1;
                    }
                }
            }
            failed
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap_or(options.client_turns);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let answered = options.clients * options.client_turns - failed;

    let idle_bytes_per_connection = idle_memory(&engine, options.idle_connections).await?;
    Ok(ResponsesBenchReport {
        direct,
        legacy: legacy_latency,
        engine: engine_latency,
        with_model_time,
        clients: options.clients,
        client_turns: options.client_turns,
        failed,
        responses_per_second: answered as f64 / elapsed.max(f64::EPSILON),
        idle_bytes_per_connection,
        idle_connections: options.idle_connections,
    })
}

/// Opens `count` keep-alive connections to the front, each after one answered request, and
/// returns the resident memory they added, per connection.
async fn idle_memory(base: &str, count: usize) -> Result<Option<f64>, BenchError> {
    if count == 0 {
        return Ok(None);
    }
    let authority = base
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let before = rss_bytes();
    let mut open = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| runtime("open an idle connection")(e.to_string()))?;
        let request = format!(
            "GET /v1/responses/resp_idle HTTP/1.1\r\nHost: {authority}\r\nConnection: keep-alive\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| runtime("write on an idle connection")(e.to_string()))?;
        let mut buffer = [0u8; 1024];
        let read = stream
            .read(&mut buffer)
            .await
            .map_err(|e| runtime("read on an idle connection")(e.to_string()))?;
        if !buffer[..read].starts_with(b"HTTP/1.1 404") {
            return Err(runtime("an idle connection's request")(
                String::from_utf8_lossy(&buffer[..read]).into_owned(),
            ));
        }
        open.push(stream);
    }
    // Let the server settle the connections' buffers before reading the figure.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_bytes();
    drop(open);
    Ok(before
        .zip(after)
        .map(|(b, a)| a.saturating_sub(b) as f64 / count as f64))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The report as the bench prints it.
pub fn format_report(report: &ResponsesBenchReport) -> String {
    let mut out = String::from("Responses front (serve --front responses), streamed turns against the loopback mock model:\n");
    out.push_str(
        "path                                  p50 ms    p99 ms   added p50 ms   p50 ÷ direct   first text p50 ms   added\n",
    );
    latency_rows(&mut out, report.direct, report.legacy, report.engine);
    out.push_str(&format!(
        "the same with the model answering in {} ms:\n",
        MODEL_TIME.as_millis()
    ));
    let (direct, legacy, engine) = report.with_model_time;
    latency_rows(&mut out, direct, legacy, engine);
    out.push_str(&format!(
        "{} concurrent clients x {} turns (sample-summary): {} failed, {:.0} responses/s\n",
        report.clients, report.client_turns, report.failed, report.responses_per_second
    ));
    match report.idle_bytes_per_connection {
        Some(bytes) => out.push_str(&format!(
            "{} idle keep-alive connections: {:.1} KB resident per connection\n",
            report.idle_connections,
            bytes / 1024.0
        )),
        None => out.push_str("idle keep-alive connections: not measured (no /proc)\n"),
    }
    out
}

/// The three paths' rows: p50, p99, and the p50 added to and divided by the direct one.
fn latency_rows(out: &mut String, direct: Latency, legacy: Latency, engine: Latency) {
    for (name, latency) in [
        ("direct to the upstream", direct),
        ("through the front, legacy (relay)", legacy),
        ("through the front, sample-summary", engine),
    ] {
        let added = ms(latency.p50) - ms(direct.p50);
        let ratio = ms(latency.p50) / ms(direct.p50).max(f64::EPSILON);
        let first_added = ms(latency.first_text_p50) - ms(direct.first_text_p50);
        out.push_str(&format!(
            "{name:<36} {:>7.3}   {:>7.3}   {added:>+12.3}   {ratio:>12.3}   {:>17.3}   {first_added:>+6.3}\n",
            ms(latency.p50),
            ms(latency.p99),
            ms(latency.first_text_p50),
        ));
    }
}

/// Runs and prints, with the machine's load.
pub async fn run_and_print(options: &ResponsesBenchOptions) -> Result<(), BenchError> {
    let report = run(options).await?;
    print!("{}", format_report(&report));
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("  load average (1/5/15 min): {}", load.join(" "));
    }
    Ok(())
}
