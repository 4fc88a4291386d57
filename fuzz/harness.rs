//! What each fuzz target does with one input, shared by the fuzz targets (`fuzz_targets/`)
//! and by the regression tests that replay their crashers under `cargo test`
//! (`tests/fuzz_regressions.rs`), so a kept crasher runs exactly the code that crashed.
//!
//! Each function takes the raw fuzz input, feeds it to one parser of untrusted input and
//! checks the invariants named in its doc comment with `assert!`; a panic is a finding.
#![allow(dead_code)]

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use codex_app_server_client::fuzzing::read_stdout_messages;
use ctxbridge::config::Config;
use ctxbridge::contract::{
    AssembleResult, BootstrapResult, CommitTurnResult, CompactParams, CompactResult, EngineMethod,
    IngestBatchResult, IngestResult, MaintainResult, PrepareSubagentSpawnResult, SessionTarget,
};
use ctxbridge::engines::process::decode_result;
use ctxbridge::engines::process::protocol::{
    check_unit_result, decode_initialize, fill_estimated_tokens, preview,
};
use ctxbridge::quarantine::{
    validate_assemble_result, validate_compact_result, validate_ingest_batch_result, CallerSession,
};
use ctxbridge::serve::fuzzing::{client_frames, Frame};
use ctxbridge::serve::thread_map::{thread_of, Direction};
use ctxbridge::serve::{ThreadMap, DEFAULT_MAX_MESSAGE_BYTES};
use ctxbridge_jsonrpc::{
    answer_text, BytesMut, Decoder, Frame as LineFrame, Incoming, LineCodec, RequestId,
};
use futures::StreamExt;
use responses_client::sse::ResponseStream;
use responses_client::types::ResponseEvent;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// One current-thread runtime (with timers) for the async parsers, built once per process.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap_or_else(|e| panic!("cannot build the runtime: {e}"))
    })
}

/// The next chunk size of a deterministic, seed-driven sequence in `1..=modulus`.
fn next_step(step: usize, modulus: usize) -> usize {
    (step * 7 + 3) % modulus + 1
}

/// `data` cut into chunks whose sizes follow the sequence started by `seed`.
fn chunked(data: &[u8], seed: u8, modulus: usize) -> Vec<&[u8]> {
    let mut chunks = Vec::new();
    let mut rest = data;
    let mut step = usize::from(seed) % modulus + 1;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(step.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
        step = next_step(step, modulus);
    }
    chunks
}

// ------------------------------------------------------------------------------------------
// config_json5
// ------------------------------------------------------------------------------------------

/// The JSON5 config loader, `Config::parse` (what `Config::load` runs on a file's text), on
/// arbitrary UTF-8: a config or a located error (whose message is rendered), never a panic,
/// hang or unbounded allocation.
pub fn config_json5(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(error) = Config::parse(source, "fuzz.json5") {
        let _ = error.to_string();
    }
}

// ------------------------------------------------------------------------------------------
// codex_jsonrpc_line
// ------------------------------------------------------------------------------------------

/// Serves bytes in chunks of a seed-driven size, whatever the reader asks for.
struct ChunkedReader<'a> {
    data: &'a [u8],
    step: usize,
}

impl AsyncRead for ChunkedReader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.step.min(self.data.len()).min(buf.remaining());
        let (chunk, rest) = self.data.split_at(n);
        buf.put_slice(chunk);
        self.data = rest;
        self.step = next_step(self.step, 29);
        Poll::Ready(Ok(()))
    }
}

/// The Codex app-server client's stdout reader (bounded line reads, `\r` trimming, JSON
/// objects handed on, garbage and over-long lines skipped) over arbitrary bytes in arbitrary
/// chunks. Byte 0 sets the line limit (×4 bytes), byte 1 the chunking, the rest is stdout.
/// Checked: no more messages come out than lines went in.
pub fn codex_jsonrpc_line(data: &[u8]) {
    let [limit, seed, stream @ ..] = data else {
        return;
    };
    let reader = ChunkedReader {
        data: stream,
        step: usize::from(*seed) % 29 + 1,
    };
    let messages = runtime().block_on(read_stdout_messages(reader, usize::from(*limit) * 4));
    let lines = stream.iter().filter(|b| **b == b'\n').count() + 1;
    assert!(messages.len() <= lines, "more messages than lines");
}

// ------------------------------------------------------------------------------------------
// engine_jsonrpc_line
// ------------------------------------------------------------------------------------------

/// The engine process protocol's stdout framing: the shared line codec (reporting over-long
/// lines early, as the engine connection does) fed in arbitrary chunks, then the end of the
/// stream; each framed line classified by the shared `Incoming::parse` and previewed (as the error path
/// does). Byte 0 sets the line limit (0xff: unbounded), byte 1 the chunking, the rest is
/// stdout. Checked: no returned line exceeds the limit and no line within it is reported too
/// long; unbounded, the lines are exactly the `\n`-separated pieces of the input (one
/// trailing `\r` removed, the unfinished last piece included).
pub fn engine_jsonrpc_line(data: &[u8]) {
    let [limit, seed, stream @ ..] = data else {
        return;
    };
    let max_line = if *limit == 0xff {
        usize::MAX
    } else {
        usize::from(*limit)
    };
    // As the engine connection frames stdout: over-long lines reported as they pass the limit.
    let mut codec = LineCodec::reporting_early(max_line);
    let mut buffer = BytesMut::new();
    let mut lines = Vec::new();
    let mut too_long = false;
    let mut take = |frame: LineFrame, lines: &mut Vec<Vec<u8>>| match frame {
        LineFrame::Line(line) => {
            assert!(line.len() <= max_line, "a line over the limit was returned");
            let _ = preview(&line);
            let _ = Incoming::parse(&line);
            lines.push(line.to_vec());
        }
        LineFrame::TooLong(over) => {
            assert!(
                over.len > max_line,
                "a line within the limit was reported too long"
            );
            too_long = true;
        }
    };
    for chunk in chunked(stream, *seed, 23) {
        buffer.extend_from_slice(chunk);
        while let Some(frame) = codec
            .decode(&mut buffer)
            .unwrap_or_else(|e| panic!("decoding failed: {e}"))
        {
            take(frame, &mut lines);
        }
    }
    while let Some(frame) = codec
        .decode_eof(&mut buffer)
        .unwrap_or_else(|e| panic!("decoding at the end failed: {e}"))
    {
        take(frame, &mut lines);
    }
    if max_line == usize::MAX {
        assert!(!too_long, "an unbounded codec reported a line too long");
        let mut pieces: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
        if pieces.last().is_some_and(|last| last.is_empty()) {
            pieces.pop();
        }
        let expected: Vec<Vec<u8>> = pieces
            .into_iter()
            .map(|p| p.strip_suffix(b"\r").unwrap_or(p).to_vec())
            .collect();
        assert_eq!(lines, expected, "framing lost or changed bytes");
    }
}

// ------------------------------------------------------------------------------------------
// engine_result_decode
// ------------------------------------------------------------------------------------------

const RESULT_METHODS: [EngineMethod; 13] = [
    EngineMethod::Info,
    EngineMethod::Ingest,
    EngineMethod::IngestBatch,
    EngineMethod::Bootstrap,
    EngineMethod::Assemble,
    EngineMethod::Compact,
    EngineMethod::AfterTurn,
    EngineMethod::Maintain,
    EngineMethod::CommitTurn,
    EngineMethod::PrepareSubagentSpawn,
    EngineMethod::RollbackSubagentSpawn,
    EngineMethod::OnSubagentEnded,
    EngineMethod::Dispose,
];

/// Engine-protocol result decoding: the `initialize` answer (`decode_initialize`; `info`
/// stands for it) and each lifecycle method's result (`decode_result` into the contract type,
/// `check_unit_result` for the methods that return nothing), then the quarantine's result
/// checks (`validate_*`). Byte 0 picks the method (mod 13), the rest is the JSON result.
pub fn engine_result_decode(data: &[u8]) {
    let [selector, json @ ..] = data else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let method = RESULT_METHODS[usize::from(*selector) % RESULT_METHODS.len()];
    match method {
        EngineMethod::Info => {
            if let Ok(outcome) = decode_initialize(value) {
                let _ = outcome.methods.missing_required();
            }
        }
        EngineMethod::Ingest => {
            let _ = decode_result::<IngestResult>(method, value);
        }
        EngineMethod::IngestBatch => {
            if let Ok(result) = decode_result::<IngestBatchResult>(method, value) {
                let _ = validate_ingest_batch_result(&result, usize::from(*selector));
            }
        }
        EngineMethod::Bootstrap => {
            let _ = decode_result::<BootstrapResult>(method, value);
        }
        EngineMethod::Assemble => {
            // As `ProcessEngine::assemble`: a missing estimate is filled in before decoding.
            let mut value = value;
            fill_estimated_tokens(&mut value);
            if let Ok(result) = decode_result::<AssembleResult>(method, value) {
                let _ = validate_assemble_result(&result);
            }
        }
        EngineMethod::Compact => {
            if let Ok(result) = decode_result::<CompactResult>(method, value) {
                let params = CompactParams {
                    session_id: "s".into(),
                    session_key: Some("k".into()),
                    session_target: Some(SessionTarget {
                        agent_id: Some("main".into()),
                        session_key: Some("k".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                let _ = validate_compact_result(&result, &CallerSession::of_compact(&params));
            }
        }
        EngineMethod::Maintain => {
            let _ = decode_result::<MaintainResult>(method, value);
        }
        EngineMethod::CommitTurn => {
            let _ = decode_result::<CommitTurnResult>(method, value);
        }
        EngineMethod::PrepareSubagentSpawn => {
            let _ = decode_result::<PrepareSubagentSpawnResult>(method, value);
        }
        _ => {
            let _ = check_unit_result(&value);
        }
    }
}

// ------------------------------------------------------------------------------------------
// responses_sse
// ------------------------------------------------------------------------------------------

/// The Responses SSE parser (`ResponseStream::from_sse_bytes`) over an arbitrary body in
/// arbitrary chunks, read once with `collect` and once event by event. Byte 0 is the chunking
/// seed, the rest is the body. Checked: the stream ends with exactly one final item
/// (`Completed` or an error) and yields nothing after it.
pub fn responses_sse(data: &[u8]) {
    let [seed, body @ ..] = data else {
        return;
    };
    let idle = Duration::from_secs(3600);
    let stream_of = |seed: u8| {
        let chunks: Vec<Result<Vec<u8>, Infallible>> = chunked(body, seed, 41)
            .into_iter()
            .map(|c| Ok(c.to_vec()))
            .collect();
        ResponseStream::from_sse_bytes(futures::stream::iter(chunks), idle, "fuzz")
    };
    runtime().block_on(async {
        if let Err(error) = stream_of(*seed).collect().await {
            let _ = error.to_string();
        }
        let mut stream = stream_of(seed.wrapping_add(1));
        let mut ended = false;
        while let Some(item) = stream.next().await {
            assert!(!ended, "an event after the final one");
            ended = matches!(item, Err(_) | Ok(ResponseEvent::Completed { .. }));
        }
        assert!(ended, "the stream ended without a final event");
    });
}

// ------------------------------------------------------------------------------------------
// serve_client_frame
// ------------------------------------------------------------------------------------------

/// `ctxbridge serve`'s client side of a unix-socket or stdio connection
/// (`serve::fuzzing::client_frames`): the bounded line reader, the client actor's frame
/// classification with its handshake state, and the router's client→backend thread-id
/// rewriting, with one session rotated (client thread `client-th` served by `backend-th`).
/// Byte 0 sets the message limit (×16 bytes; 0xff: the default 8 MiB), byte 1 the chunking,
/// the rest is what the client sends. Checked: no more frames than lines; nothing reaches the
/// router before the one accepted `initialize`; every rejection is a JSON-RPC error with an id,
/// a numeric code and a message (an oversize line's names the limit); the client thread id
/// never reaches the backend as a request's thread; rewriting a notification or answer back to
/// the client restores it.
/// A client message's id and kind survive the client actor: a JSON object with an `id` is
/// always answered or routed, never skipped, and under that same id; one with a string
/// `method` is never taken for an answer to a server request, one without a `method` never
/// for a request, and an answer carries exactly one of `result` and `error`.
fn check_id_and_kind(entry: &ctxbridge::serve::fuzzing::Routed) {
    let Some(Value::Object(message)) = entry
        .line
        .as_deref()
        .and_then(|line| serde_json::from_str::<Value>(line).ok())
    else {
        return;
    };
    let Some(sent_id) = message.get("id") else {
        return;
    };
    // The id as the client wrote it (a number beyond 64 bits included).
    let sent_id = entry
        .line
        .as_deref()
        .map(|line| RequestId::of_message(line, sent_id));
    let has_method = message.get("method").is_some_and(Value::is_string);
    let (kept_id, is_request, is_response) = match &entry.frame {
        Frame::Skip | Frame::Notification { .. } => {
            panic!("a message with an id was not answered: {message:?}")
        }
        Frame::Reject { id, .. } => (id, false, false),
        Frame::Initialize { id } | Frame::Request { id, .. } => (id, true, false),
        Frame::Response { id, .. } => (id, false, true),
    };
    assert_eq!(
        Some(kept_id),
        sent_id.as_ref(),
        "the id changed: {message:?}"
    );
    assert!(
        !(has_method && is_response),
        "a request was taken for an answer: {message:?}"
    );
    assert!(
        has_method || !is_request,
        "an answer was taken for a request: {message:?}"
    );
    assert!(
        !is_response || message.contains_key("result") != message.contains_key("error"),
        "an answer needs exactly one of `result` and `error`: {message:?}"
    );
}

pub fn serve_client_frame(data: &[u8]) {
    let [limit, seed, stream @ ..] = data else {
        return;
    };
    let max = if *limit == 0xff {
        DEFAULT_MAX_MESSAGE_BYTES
    } else {
        usize::from(*limit) * 16
    };
    let mut threads = ThreadMap::new(None);
    threads
        .bind("client-th", "backend-th")
        .unwrap_or_else(|e| panic!("binding in memory failed: {e}"));
    let reader = ChunkedReader {
        data: stream,
        step: usize::from(*seed) % 29 + 1,
    };
    let routed = runtime().block_on(client_frames(reader, max, &mut threads));
    let lines = stream.iter().filter(|b| **b == b'\n').count() + 1;
    assert!(routed.len() <= lines, "more frames than lines");
    let mut initialized = false;
    for entry in &routed {
        check_id_and_kind(entry);
        let original = match &entry.frame {
            Frame::Skip => None,
            Frame::Initialize { .. } => {
                assert!(!initialized, "a second initialize was accepted");
                initialized = true;
                None
            }
            Frame::Reject { id, error } => {
                // The answer the client gets is one JSON object under that id, with a code
                // and a message.
                let answer: Value = serde_json::from_str(&answer_text(id, Err(error)))
                    .unwrap_or_else(|e| panic!("a rejection is not JSON: {e}"));
                assert!(answer.get("id").is_some(), "a rejection without an id");
                assert!(
                    answer["error"]["code"].is_i64(),
                    "a rejection without a code"
                );
                let text = answer["error"]["message"].as_str();
                assert!(text.is_some(), "a rejection without a message");
                if text.is_some_and(|t| t.starts_with("message of ")) {
                    assert!(text.is_some_and(|t| t.contains(&format!("limit of {max} bytes"))));
                }
                None
            }
            Frame::Request { .. } => {
                assert!(
                    initialized,
                    "a request reached the router before initialize"
                );
                assert_ne!(
                    entry.thread.as_deref(),
                    Some("client-th"),
                    "a client thread id reached the backend"
                );
                None
            }
            Frame::Notification { params, .. } => {
                assert!(
                    initialized,
                    "a notification reached the router before initialize"
                );
                Some(params.clone().unwrap_or(Value::Null))
            }
            Frame::Response { outcome, .. } => {
                assert!(
                    initialized,
                    "an answer reached the router before initialize"
                );
                outcome.as_ref().ok().cloned()
            }
        };
        if let (Some(original), Some(rewritten)) = (original, &entry.rewritten) {
            assert_ne!(
                thread_of(rewritten),
                Some("client-th"),
                "a client thread id went upstream"
            );
            if !original.to_string().contains("backend-th") {
                let mut back = rewritten.clone();
                threads.rewrite(&mut back, Direction::ToClient, None);
                assert_eq!(
                    back, original,
                    "rewriting there and back changed the message"
                );
            }
        }
    }
}
