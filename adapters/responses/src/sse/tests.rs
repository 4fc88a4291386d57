//! The SSE parser's tests: typed events, chunking, errors, limits and the decoder's line rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use futures::stream::StreamExt;
use tokio::time::Instant;

use crate::error::ResponsesError;
use crate::types::{ResponseEvent, ResponseUsage};

use super::{ResponseStream, SseDecodeError, SseDecoder, SseEvent, StreamLimits};

const IDLE: Duration = Duration::from_secs(5);

fn sse(kind: &str, data: &str) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

fn happy_stream() -> String {
    [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}"#,
        ),
        sse(
            "response.in_progress",
            r#"{"type":"response.in_progress","response":{"id":"resp_1"}}"#,
        ),
        sse(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"Hel"}"#,
        ),
        sse(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"lo ✓"}"#,
        ),
        sse(
            "response.output_item.done",
            r#"{"type":"response.output_item.done","item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello ✓"}]}}"#,
        ),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":12,"output_tokens":3,"input_tokens_details":{"cached_tokens":8}}}}"#,
        ),
    ]
    .concat()
}

fn stream_of(chunks: Vec<Vec<u8>>) -> ResponseStream {
    let source = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
    ResponseStream::from_sse_bytes(source, IDLE, "test")
}

fn chunked(text: &str, size: usize) -> Vec<Vec<u8>> {
    text.as_bytes().chunks(size).map(<[u8]>::to_vec).collect()
}

async fn events_of(stream: ResponseStream) -> Vec<Result<ResponseEvent, ResponsesError>> {
    StreamExt::collect::<Vec<_>>(stream).await
}

/// A whole stream yields the typed events in order, skipping unknown ones, and ends after
/// response.completed.
#[tokio::test]
async fn parses_typed_events_in_order() {
    let events = events_of(stream_of(vec![happy_stream().into_bytes()])).await;
    let events: Vec<ResponseEvent> = events.into_iter().map(Result::unwrap).collect();
    assert_eq!(events.len(), 5);
    assert_eq!(
        events[0],
        ResponseEvent::Created {
            response_id: "resp_1".into()
        }
    );
    assert_eq!(
        events[1],
        ResponseEvent::OutputTextDelta {
            delta: "Hel".into()
        }
    );
    assert!(matches!(events[3], ResponseEvent::OutputItemDone { .. }));
    assert_eq!(
        events[4],
        ResponseEvent::Completed {
            response_id: "resp_1".into(),
            usage: Some(ResponseUsage {
                input_tokens: 12,
                output_tokens: 3,
                cached_tokens: 8
            })
        }
    );
}

/// Chunk boundaries anywhere — inside lines, inside a multi-byte character — change nothing.
#[tokio::test]
async fn chunk_boundaries_inside_events_change_nothing() {
    let whole = stream_of(vec![happy_stream().into_bytes()])
        .collect()
        .await
        .unwrap();
    for size in [1, 2, 3, 7, 64] {
        let split = stream_of(chunked(&happy_stream(), size))
            .collect()
            .await
            .unwrap();
        assert_eq!(split, whole, "chunk size {size}");
    }
    assert_eq!(whole.text, "Hello ✓");
    assert_eq!(whole.id, "resp_1");
}

/// Without deltas, collect() takes the text of the finished message items.
#[tokio::test]
async fn collect_falls_back_to_item_text() {
    let body = [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_2"}}"#,
        ),
        sse(
            "response.output_item.done",
            r#"{"type":"response.output_item.done","item":{"type":"message","content":[{"type":"output_text","text":"only items"}]}}"#,
        ),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_2"}}"#,
        ),
    ]
    .concat();
    let done = stream_of(vec![body.into_bytes()]).collect().await.unwrap();
    assert_eq!(done.text, "only items");
    assert_eq!(done.usage, None);
    assert_eq!(done.output_items.len(), 1);
}

/// The `type` field decides when the SSE event name is absent (data-only events).
#[tokio::test]
async fn data_only_events_use_the_type_field() {
    let body = "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
                data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n\
                data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\"}}\n\n";
    let done = stream_of(vec![body.as_bytes().to_vec()])
        .collect()
        .await
        .unwrap();
    assert_eq!((done.id.as_str(), done.text.as_str()), ("r", "x"));
}

/// An event whose name says it is of a type the client does not read is skipped unparsed:
/// its data may be anything. Under the default name `message`, the data's type decides.
#[tokio::test]
async fn unread_events_are_skipped_by_name_and_message_events_by_type() {
    let body = [
        sse("response.in_progress", "not JSON at all"),
        sse(
            "message",
            r#"{"type":"response.created","response":{"id":"resp_m"}}"#,
        ),
        sse("response.content_part.added", "{"),
        sse(
            "message",
            r#"{"type":"response.output_text.delta","delta":"hi"}"#,
        ),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_m","usage":null}}"#,
        ),
    ]
    .concat();
    let events: Vec<ResponseEvent> = events_of(stream_of(vec![body.into_bytes()]))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ResponseEvent::Created {
                response_id: "resp_m".into()
            },
            ResponseEvent::OutputTextDelta { delta: "hi".into() },
            ResponseEvent::Completed {
                response_id: "resp_m".into(),
                usage: None
            },
        ]
    );
}

/// A response.completed whose usage does not decode is an error naming it, as is one
/// without the response's id: the fast path leaves both to the general one.
#[tokio::test]
async fn a_completed_event_with_bad_usage_or_no_id_is_an_error() {
    for (data, expected) in [
        (
            r#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":"many"}}}"#,
            "invalid usage",
        ),
        (
            r#"{"type":"response.completed","response":{"status":"completed"}}"#,
            "missing response.id",
        ),
    ] {
        let body = sse("response.completed", data);
        let error = stream_of(vec![body.into_bytes()])
            .collect()
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ResponsesError::Decode { message, .. } if message.contains(expected)),
            "{error:?}"
        );
    }
}

/// response.failed ends the stream with its code and message.
#[tokio::test]
async fn response_failed_is_a_typed_error() {
    let body = [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_3"}}"#,
        ),
        sse(
            "response.failed",
            r#"{"type":"response.failed","response":{"id":"resp_3","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window"}}}"#,
        ),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_3"}}"#,
        ),
    ]
    .concat();
    let events = events_of(stream_of(vec![body.into_bytes()])).await;
    assert_eq!(events.len(), 2, "nothing is read after the failure");
    let error = events[1].as_ref().unwrap_err();
    assert_eq!(error.code(), Some("context_length_exceeded"));
    assert!(error.is_context_overflow());
    assert!(matches!(
        error,
        ResponsesError::ResponseFailed { response_id: Some(id), .. } if id == "resp_3"
    ));
}

/// An `error` event, flat or nested, carries its code and message.
#[tokio::test]
async fn error_event_is_a_typed_error() {
    for data in [
        r#"{"type":"error","code":"previous_response_not_found","message":"Previous response with id 'resp_x' not found."}"#,
        r#"{"type":"error","error":{"code":"previous_response_not_found","message":"Previous response with id 'resp_x' not found."}}"#,
    ] {
        let error = stream_of(vec![sse("error", data).into_bytes()])
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, ResponsesError::ErrorEvent { .. }));
        assert!(error.is_previous_response_not_found());
        assert!(error.to_string().contains("not found"));
    }
}

/// A body that ends before response.completed is the "stream closed" error.
#[tokio::test]
async fn early_end_is_stream_closed() {
    let body = [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_4"}}"#,
        ),
        sse(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"partial"}"#,
        ),
    ]
    .concat();
    let error = stream_of(vec![body.into_bytes()])
        .collect()
        .await
        .unwrap_err();
    assert!(matches!(
        &error,
        ResponsesError::StreamClosed { response_id: Some(id), .. } if id == "resp_4"
    ));
    assert!(error
        .to_string()
        .contains("stream closed before response.completed"));
}

/// Invalid JSON in an event is a decode error naming the event.
#[tokio::test]
async fn invalid_json_is_a_decode_error() {
    let error = stream_of(vec![b"event: response.created\ndata: {oops\n\n".to_vec()])
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ResponsesError::Decode { what, .. } if what.contains("response.created"))
    );
}

/// A source that goes quiet produces the idle-timeout error.
#[tokio::test]
async fn silence_is_an_idle_timeout() {
    let first = sse(
        "response.created",
        r#"{"type":"response.created","response":{"id":"resp_5"}}"#,
    );
    let source = futures::stream::iter(vec![Ok::<_, Infallible>(first.into_bytes())])
        .chain(futures::stream::pending());
    let stream = ResponseStream::from_sse_bytes(source, Duration::from_millis(50), "test");
    let events = events_of(stream).await;
    assert_eq!(events.len(), 2);
    assert!(matches!(events[1], Err(ResponsesError::IdleTimeout { .. })));
}

fn limits(idle: Duration, turn: Duration, max_event: usize, max_reply: usize) -> StreamLimits {
    StreamLimits {
        idle_timeout: idle,
        turn_timeout: turn,
        started: Instant::now(),
        max_event_bytes: max_event,
        max_reply_bytes: max_reply,
    }
}

fn delta_frame(delta: &str) -> String {
    sse(
        "response.output_text.delta",
        &serde_json::json!({"type": "response.output_text.delta", "delta": delta}).to_string(),
    )
}

/// One 8 MB delta event fed in 4 KiB chunks parses to exactly that text (the splitter scans
/// each byte once, so this runs in linear time; see benches/sse.rs for the figures).
#[tokio::test]
async fn an_eight_megabyte_event_in_small_chunks_yields_the_whole_text() {
    let big: String = "abcdefgh".repeat(1024 * 1024);
    let body = [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_big"}}"#,
        ),
        delta_frame(&big),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_big"}}"#,
        ),
    ]
    .concat();
    let done = stream_of(chunked(&body, 4096)).collect().await.unwrap();
    assert_eq!(done.text.len(), big.len());
    assert!(done.text == big);
}

/// A line longer than the event cap ends the stream with EventTooLarge, whether it arrives
/// whole or never finishes.
#[tokio::test]
async fn a_line_over_the_cap_is_event_too_large() {
    let long = delta_frame(&"x".repeat(2_000));
    let source = futures::stream::iter(chunked(&long, 100).into_iter().map(Ok::<_, Infallible>));
    let error =
        ResponseStream::from_sse_bytes_with(source, limits(IDLE, IDLE, 1_000, usize::MAX), "test")
            .collect()
            .await
            .unwrap_err();
    assert!(
        matches!(error, ResponsesError::EventTooLarge { limit: 1_000, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("1000 bytes"), "{error}");
    // A line that never ends: an endless source of bytes without a line break.
    let endless = futures::stream::repeat(Ok::<_, Infallible>(b"data: xxxxxxxx".to_vec()));
    let error =
        ResponseStream::from_sse_bytes_with(endless, limits(IDLE, IDLE, 1_000, usize::MAX), "test")
            .collect()
            .await
            .unwrap_err();
    assert!(
        matches!(error, ResponsesError::EventTooLarge { .. }),
        "{error:?}"
    );
}

/// Many data lines adding up past the cap within one event are EventTooLarge too.
#[tokio::test]
async fn event_data_over_the_cap_is_event_too_large() {
    let lines = "data: 0123456789\n".repeat(200);
    let error = ResponseStream::from_sse_bytes_with(
        futures::stream::iter(vec![Ok::<_, Infallible>(lines.into_bytes())]),
        limits(IDLE, IDLE, 1_000, usize::MAX),
        "test",
    )
    .collect()
    .await
    .unwrap_err();
    assert!(
        matches!(error, ResponsesError::EventTooLarge { .. }),
        "{error:?}"
    );
}

/// Deltas adding up past the reply cap end the stream with ReplyTooLarge.
#[tokio::test]
async fn a_reply_over_the_cap_is_reply_too_large() {
    let endless =
        futures::stream::repeat(Ok::<_, Infallible>(delta_frame("0123456789").into_bytes()));
    let error = ResponseStream::from_sse_bytes_with(
        endless,
        limits(IDLE, Duration::from_secs(3600), 1_000, 95),
        "test",
    )
    .collect()
    .await
    .unwrap_err();
    assert!(
        matches!(error, ResponsesError::ReplyTooLarge { limit: 95, .. }),
        "{error:?}"
    );
}

/// A stream of deltas that never completes ends at the turn deadline, even though events
/// keep arriving.
#[tokio::test]
async fn an_endless_stream_ends_at_the_deadline() {
    let endless = futures::stream::repeat(Ok::<_, Infallible>(delta_frame("x").into_bytes())).then(
        |chunk| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            chunk
        },
    );
    let events = events_of(ResponseStream::from_sse_bytes_with(
        endless,
        limits(IDLE, Duration::from_millis(100), 1_000, usize::MAX),
        "test",
    ))
    .await;
    let last = events.last().unwrap();
    assert!(
        matches!(last, Err(ResponsesError::Deadline { after, .. }) if *after == Duration::from_millis(100)),
        "{last:?}"
    );
    assert!(events[..events.len() - 1].iter().all(Result::is_ok));
}

/// A stream that stops after response.created ends at the deadline when that comes before
/// the idle timeout.
#[tokio::test]
async fn a_stall_ends_at_the_earlier_of_idle_and_deadline() {
    let first = sse(
        "response.created",
        r#"{"type":"response.created","response":{"id":"resp_7"}}"#,
    );
    let source = futures::stream::iter(vec![Ok::<_, Infallible>(first.into_bytes())])
        .chain(futures::stream::pending());
    let error = ResponseStream::from_sse_bytes_with(
        source,
        limits(
            Duration::from_secs(3600),
            Duration::from_millis(50),
            1_000,
            1_000,
        ),
        "test",
    )
    .collect()
    .await
    .unwrap_err();
    assert!(
        matches!(error, ResponsesError::Deadline { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("turn deadline"), "{error}");
}

/// CR, LF and CRLF line ends (a CRLF split across chunks included), comments and fields
/// without a space all decode alike.
#[test]
fn decoder_line_ends_and_fields() {
    let text = ": comment\r\nevent:a\r\ndata: 1\r\ndata:2\r\n\r\nevent: b\rdata: x\r\rdata: y\n\n";
    for size in [1, 2, 5, 100] {
        let mut decoder = SseDecoder::new(1_000);
        let mut out = VecDeque::new();
        for chunk in text.as_bytes().chunks(size) {
            decoder.feed(chunk, &mut out).unwrap();
        }
        let out: Vec<SseEvent> = out.into_iter().collect();
        assert_eq!(
            out,
            vec![
                SseEvent {
                    event: "a".into(),
                    data: "1\n2".into()
                },
                SseEvent {
                    event: "b".into(),
                    data: "x".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "y".into()
                },
            ],
            "chunk size {size}"
        );
    }
}

/// UTF-8 is checked per line, whatever the chunking: a character cut between chunks is
/// whole again, a line with invalid bytes (or ending inside a character) is an error, and a
/// comment's bytes are never looked at.
#[test]
fn decoder_checks_utf8_per_line() {
    let mut bytes = b": ".to_vec();
    bytes.push(0xff);
    bytes.extend_from_slice(" skipped\ndata: \u{2713} ok\n\n".as_bytes());
    for size in [1, 2, 3, 64] {
        let mut decoder = SseDecoder::new(1_000);
        let mut out = VecDeque::new();
        for chunk in bytes.chunks(size) {
            decoder.feed(chunk, &mut out).unwrap();
        }
        assert_eq!(
            out.pop_front().unwrap().data,
            "\u{2713} ok",
            "chunk size {size}"
        );
    }
    let invalid: [&[u8]; 3] = [b"data: a\xffb\n\n", b"id: \xff\n\n", b"data: \xe2\x9c\n\n"];
    for bytes in invalid {
        for size in [1, 2, 64] {
            let mut decoder = SseDecoder::new(1_000);
            let mut out = VecDeque::new();
            let fed: Result<(), SseDecodeError> = bytes
                .chunks(size)
                .try_for_each(|chunk| decoder.feed(chunk, &mut out));
            assert_eq!(fed, Err(SseDecodeError::InvalidUtf8), "{bytes:?} by {size}");
        }
    }
}

/// A delta with escapes, one without (cut out of the event in place), and one in a
/// data-only event decode to their text; a delta event whose payload lacks a string delta
/// is still the decode error naming the event.
#[tokio::test]
async fn escaped_and_plain_deltas_decode_alike() {
    let body = [
        sse(
            "response.created",
            r#"{"type":"response.created","response":{"id":"r"}}"#,
        ),
        delta_frame("plain "),
        delta_frame("esc\"aped\n\u{2713} "),
        "data: {\"delta\":\"data-only\",\"type\":\"response.output_text.delta\"}\n\n".into(),
        sse(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"r"}}"#,
        ),
    ]
    .concat();
    let done = stream_of(vec![body.into_bytes()]).collect().await.unwrap();
    assert_eq!(done.text, "plain esc\"aped\n\u{2713} data-only");
    let bad = sse(
        "response.output_text.delta",
        r#"{"type":"response.output_text.delta","delta":7}"#,
    );
    let error = stream_of(vec![bad.into_bytes()])
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ResponsesError::Decode { message, .. } if message.contains("missing string delta")),
        "{error:?}"
    );
}

/// A transport failure mid-stream is a transport error, not a silent end.
#[tokio::test]
async fn transport_error_mid_stream() {
    let first = sse(
        "response.created",
        r#"{"type":"response.created","response":{"id":"resp_6"}}"#,
    );
    let source = futures::stream::iter(vec![
        Ok(first.into_bytes()),
        Err("connection reset by peer".to_string()),
    ]);
    let error = ResponseStream::from_sse_bytes(source, IDLE, "test")
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ResponsesError::Transport { message, .. } if message.contains("connection reset"))
    );
}
