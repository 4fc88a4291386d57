//! Decodes one response whose single `response.output_text.delta` event carries N MB of text
//! (the body of `benches/sse.rs`), once or ITERATIONS times, and prints the median wall and CPU
//! time: `cargo run --release --example decode_one_event -p responses-client -- 8 50`. Meant for instruction counts that do not depend on the machine's
//! load: `valgrind --tool=callgrind --toggle-collect='*decode_once*' target/release/examples/decode_one_event 8`.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use responses_client::{ResponseStream, ResponsesConfig, StreamLimits};

/// A complete response whose single delta event carries `size` bytes of text.
fn body(size: usize) -> Vec<u8> {
    let text = "x".repeat(size);
    format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"r\"}}}}\n\n\
         event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"{text}\"}}\n\n\
         event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"r\"}}}}\n\n"
    )
    .into_bytes()
}

/// Parses and decodes the body, fed in 16 KiB chunks; returns the text's length.
#[inline(never)]
fn decode_once(
    runtime: &tokio::runtime::Runtime,
    chunks: Vec<Result<Vec<u8>, Infallible>>,
) -> usize {
    let limits = StreamLimits {
        max_event_bytes: ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
        max_reply_bytes: ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
        ..StreamLimits::with_idle_timeout(Duration::from_secs(60))
    };
    let stream =
        ResponseStream::from_sse_bytes_with(futures::stream::iter(chunks), limits, "example");
    match runtime.block_on(stream.collect()) {
        Ok(done) => done.text.len(),
        Err(error) => {
            eprintln!("decoding failed: {error}");
            std::process::exit(1);
        }
    }
}

/// This thread's CPU time so far (`/proc/thread-self/schedstat`, nanoseconds on a CPU), which
/// the machine's load does not stretch the way it stretches wall time.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let mut arg = |default: usize| match args.next() {
        None => default,
        Some(Ok(n)) => n,
        Some(Err(error)) => {
            eprintln!("usage: decode_one_event [MEGABYTES [ITERATIONS]]: {error}");
            std::process::exit(2);
        }
    };
    let megabytes = arg(8);
    let iterations = arg(1).max(1);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot build a tokio runtime: {error}");
            std::process::exit(1);
        }
    };
    let bytes = body(megabytes * 1_000_000);
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..iterations {
        let chunks: Vec<Result<Vec<u8>, Infallible>> =
            bytes.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
        let (started, cpu_started) = (Instant::now(), cpu_time());
        let len = decode_once(&runtime, chunks);
        wall.push(started.elapsed());
        if let (Some(before), Some(after)) = (cpu_started, cpu_time()) {
            cpu.push(after.saturating_sub(before));
        }
        assert_eq!(len, megabytes * 1_000_000, "the text came out whole");
    }
    wall.sort();
    cpu.sort();
    let median = |v: &[Duration]| v.get(v.len() / 2).copied().unwrap_or_default();
    println!(
        "{megabytes} MB event, {iterations} runs: wall median {:?} (min {:?}), CPU median {:?} (min {:?})",
        median(&wall),
        wall.first().copied().unwrap_or_default(),
        median(&cpu),
        cpu.first().copied().unwrap_or_default(),
    );
}
