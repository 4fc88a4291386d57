//! SSE decoding time against the size of one `response.output_text.delta` event (1 to 8 MB),
//! fed in 16 KiB chunks as a network body would arrive (built before the timed part). Linear
//! decoding keeps the time proportional to the size. For load-independent figures, count
//! instructions with `examples/decode_one_event.rs` under callgrind.

use std::convert::Infallible;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
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

fn decode_large_events(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
    let mut group = c.benchmark_group("sse_one_large_delta_event");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for megabytes in [1usize, 2, 4, 8] {
        let size = megabytes * 1_000_000;
        let bytes = body(size);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{megabytes}MB")),
            &bytes,
            |b, bytes| {
                // The input chunks are built outside the measured time: only parsing and
                // decoding are timed, not copying the test body into 16 KiB pieces.
                b.iter_batched(
                    || -> Vec<Result<Vec<u8>, Infallible>> {
                        bytes.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect()
                    },
                    |chunks| {
                        let limits = StreamLimits {
                            max_event_bytes: ResponsesConfig::DEFAULT_MAX_EVENT_BYTES,
                            max_reply_bytes: ResponsesConfig::DEFAULT_MAX_REPLY_BYTES,
                            ..StreamLimits::with_idle_timeout(Duration::from_secs(60))
                        };
                        let stream = ResponseStream::from_sse_bytes_with(
                            futures::stream::iter(chunks),
                            limits,
                            "bench",
                        );
                        let done = runtime
                            .block_on(stream.collect())
                            .unwrap_or_else(|e| panic!("decoding failed: {e}"));
                        assert_eq!(done.text.len(), size);
                        done
                    },
                    BatchSize::PerIteration,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, decode_large_events);
criterion_main!(benches);
