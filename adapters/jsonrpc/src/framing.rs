//! Newline-delimited framing with a hard bound on a line's size.
//!
//! [`LineCodec`] splits a byte stream at `\n` (dropping a `\r` before it). A line longer than
//! the limit is never held: from the moment the unfinished line passes the limit its bytes
//! are counted and dropped, and when its `\n` (or the end of the stream) comes the codec yields
//! [`Frame::TooLong`] with the line's length. Each reader decides what that means: the Codex
//! connections skip the line, the engine protocol treats it as a violation. Framing then
//! resumes at the next line, so one oversize message never desynchronises the stream.
//! A reader for which any over-long line is fatal (the engine protocol) can have it reported
//! the moment it passes the limit instead ([`LineCodec::reporting_early`]), by the bytes seen.
//!
//! As a [`tokio_util::codec::Decoder`] it runs inside [`FramedRead`], whose `next()` is
//! cancel-safe: a reader racing other work in a `select!` loses no bytes.

use bytes::{Buf, Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::{Decoder, FramedRead};

/// One frame of a newline-delimited stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line, without its `\n` and without a `\r` before it.
    Line(BytesMut),
    /// A line longer than the limit was dropped.
    TooLong(Overlong),
}

/// What is known of a dropped over-long line: its length and, when the codec keeps them
/// ([`LineCodec::keeping_ends`]), its first and last bytes — enough for a reader to tell whose
/// message it was (a JSON-RPC `method`, a `threadId`) without ever holding it whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overlong {
    /// Its length in bytes (without the `\n`; with early reporting, the bytes seen so far).
    pub len: usize,
    /// Its first bytes (empty unless the codec keeps ends).
    pub head: Bytes,
    /// Its last bytes (empty unless the codec keeps ends; with early reporting, empty).
    pub tail: Bytes,
}

impl Overlong {
    /// A dropped line known by its length only.
    pub fn of_len(len: usize) -> Overlong {
        Overlong {
            len,
            ..Overlong::default()
        }
    }
}

/// The bounded line decoder; see the module docs.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max: usize,
    /// Bytes of the buffer already searched for a `\n`.
    scanned: usize,
    /// While dropping an over-long line: how many of its bytes were dropped so far.
    dropping: Option<usize>,
    /// Report an over-long line when it passes the limit, not when it ends.
    early: bool,
    /// The line being dropped was reported already (early mode).
    reported: bool,
    /// How many bytes of each end of an over-long line are kept (0: none).
    ends: usize,
    /// The kept ends of the line being dropped.
    head: BytesMut,
    tail: BytesMut,
}

impl LineCodec {
    /// A codec yielding lines of at most `max` bytes.
    pub fn new(max: usize) -> LineCodec {
        LineCodec {
            max,
            scanned: 0,
            dropping: None,
            early: false,
            reported: false,
            ends: 0,
            head: BytesMut::new(),
            tail: BytesMut::new(),
        }
    }

    /// A codec that keeps the first and last `ends` bytes of an over-long line
    /// ([`Overlong::head`], [`Overlong::tail`]).
    pub fn keeping_ends(max: usize, ends: usize) -> LineCodec {
        LineCodec {
            ends,
            ..LineCodec::new(max)
        }
    }

    /// Keeps the last `ends` bytes of what is dropped, `chunk` being the newest part (one more
    /// byte than asked: a `\r` before the `\n` may have come in its own chunk).
    fn keep_tail(&mut self, chunk: &[u8]) {
        if self.ends == 0 {
            return;
        }
        let keep = self.ends + 1;
        if chunk.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - keep..]);
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.advance(excess);
        }
    }

    /// Starts dropping a line whose first bytes are `start`.
    fn start_dropping(&mut self, start: &[u8]) {
        self.dropping = Some(start.len());
        self.head.clear();
        self.tail.clear();
        if self.ends > 0 {
            self.head
                .extend_from_slice(&start[..start.len().min(self.ends)]);
            self.keep_tail(start);
        }
    }

    /// The dropped line, `len` bytes long, with the ends kept.
    fn overlong(&mut self, len: usize) -> Overlong {
        let mut tail = self.tail.split();
        strip_cr(&mut tail);
        let excess = tail.len().saturating_sub(self.ends);
        tail.advance(excess);
        Overlong {
            len,
            head: self.head.split().freeze(),
            tail: tail.freeze(),
        }
    }

    /// A whole line over the limit, with its ends if they are kept.
    fn overlong_line(&self, line: &[u8]) -> Overlong {
        let n = self.ends.min(line.len());
        Overlong {
            len: line.len(),
            head: Bytes::copy_from_slice(&line[..n]),
            tail: Bytes::copy_from_slice(&line[line.len() - n..]),
        }
    }

    /// A codec that reports an over-long line as soon as its unfinished part passes `max`
    /// ([`Frame::TooLong`] with the bytes seen so far), then drops the rest of it silently.
    pub fn reporting_early(max: usize) -> LineCodec {
        LineCodec {
            early: true,
            ..LineCodec::new(max)
        }
    }

    /// The limit of one line.
    pub fn max_line(&self) -> usize {
        self.max
    }
}

/// Removes a `\r` that ended the line before its `\n`.
fn strip_cr(line: &mut BytesMut) {
    if line.last() == Some(&b'\r') {
        line.truncate(line.len() - 1);
    }
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        loop {
            let newline = memchr::memchr(b'\n', &buf[self.scanned..]).map(|at| self.scanned + at);
            match (newline, self.dropping.take()) {
                (Some(end), Some(dropped)) => {
                    let last = buf.split_to(end + 1);
                    self.keep_tail(&last[..end]);
                    self.scanned = 0;
                    if std::mem::take(&mut self.reported) {
                        // Reported when it passed the limit: go on with the next line.
                        continue;
                    }
                    return Ok(Some(Frame::TooLong(self.overlong(dropped + end))));
                }
                (Some(end), None) => {
                    self.scanned = 0;
                    let mut line = buf.split_to(end + 1);
                    line.truncate(end);
                    strip_cr(&mut line);
                    if line.len() > self.max {
                        let mut over = self.overlong_line(&line);
                        over.len = end;
                        return Ok(Some(Frame::TooLong(over)));
                    }
                    return Ok(Some(Frame::Line(line)));
                }
                (None, Some(dropped)) => {
                    let chunk = buf.split();
                    self.keep_tail(&chunk);
                    self.dropping = Some(dropped + chunk.len());
                    self.scanned = 0;
                    return Ok(None);
                }
                // One byte of grace: a line of exactly `max` bytes may still be waiting for
                // the `\n` after its `\r`.
                (None, None) if buf.len() > self.max.saturating_add(1) => {
                    let start = buf.split();
                    self.start_dropping(&start);
                    self.scanned = 0;
                    if self.early {
                        self.reported = true;
                        return Ok(Some(Frame::TooLong(Overlong {
                            len: start.len(),
                            head: self.head.split().freeze(),
                            tail: Bytes::new(),
                        })));
                    }
                    return Ok(None);
                }
                (None, None) => {
                    self.scanned = buf.len();
                    return Ok(None);
                }
            }
        }
    }

    /// At the end of the stream a last line without its `\n` is still a line.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        self.scanned = 0;
        if let Some(dropped) = self.dropping.take() {
            let rest = buf.split();
            self.keep_tail(&rest);
            if std::mem::take(&mut self.reported) {
                return Ok(None);
            }
            return Ok(Some(Frame::TooLong(self.overlong(dropped + rest.len()))));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let mut line = buf.split();
        strip_cr(&mut line);
        if line.len() > self.max {
            return Ok(Some(Frame::TooLong(self.overlong_line(&line))));
        }
        Ok(Some(Frame::Line(line)))
    }
}

/// A bounded line reader over any byte stream: [`FramedRead`] with a [`LineCodec`].
pub type LineReader<R> = FramedRead<R, LineCodec>;

/// A [`LineReader`] over `reader` framing with `codec`, reading in chunks of up to 64 KiB.
pub fn reader_with<R: AsyncRead>(reader: R, codec: LineCodec) -> LineReader<R> {
    FramedRead::with_capacity(reader, codec, 64 * 1024)
}

/// A [`LineReader`] over `reader` with lines of at most `max` bytes.
pub fn line_reader<R: AsyncRead>(reader: R, max: usize) -> LineReader<R> {
    reader_with(reader, LineCodec::new(max))
}

/// A [`LineReader`] whose over-long lines are reported as soon as they pass `max`
/// ([`LineCodec::reporting_early`]).
pub fn early_line_reader<R: AsyncRead>(reader: R, max: usize) -> LineReader<R> {
    reader_with(reader, LineCodec::reporting_early(max))
}

/// The next frame of `reader`: `Ok(None)` at the end of the stream.
pub async fn next_frame<R: AsyncRead + Unpin>(
    reader: &mut LineReader<R>,
) -> std::io::Result<Option<Frame>> {
    reader.next().await.transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Decodes `chunks` fed one after the other, then the end of the stream.
    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        decode_all(LineCodec::new(max), chunks)
    }

    fn decode_all(mut codec: LineCodec, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                out.push(frame);
            }
        }
        while let Some(frame) = codec.decode_eof(&mut buf).unwrap() {
            out.push(frame);
        }
        out
    }

    fn line(text: &str) -> Frame {
        Frame::Line(BytesMut::from(text))
    }

    fn too_long(len: usize) -> Frame {
        Frame::TooLong(Overlong::of_len(len))
    }

    /// Lines split at `\n`, a `\r` before it dropped, a last line without `\n` kept, an empty
    /// line kept as an empty line.
    #[test]
    fn splits_lines() {
        assert_eq!(
            frames(100, &[b"a\r\nbc", b"\n\nlast"]),
            vec![line("a"), line("bc"), line(""), line("last")]
        );
        assert_eq!(frames(100, &[b""]), vec![]);
    }

    /// An over-long line is reported by its whole length, however it arrives, and the next
    /// line is framed normally; the buffer never holds more than the limit (plus one chunk).
    #[test]
    fn over_long_lines_are_reported_and_skipped() {
        let long = "x".repeat(50);
        let input = format!("ok\n{long}\nnext\n");
        for step in 1..input.len() {
            let chunks: Vec<&[u8]> = input.as_bytes().chunks(step).collect();
            assert_eq!(
                frames(10, &chunks),
                vec![line("ok"), too_long(50), line("next")],
                "step {step}"
            );
        }
        assert_eq!(frames(10, &[long.as_bytes()]), vec![too_long(50)]);
        // Exactly at the limit, with a `\r`, is a line.
        assert_eq!(frames(4, &[b"abcd", b"\r", b"\n"]), vec![line("abcd")]);
        assert_eq!(frames(4, &[b"abcde\n"]), vec![too_long(5)]);
        let mut codec = LineCodec::new(10);
        let mut buf = BytesMut::from(&b"y"[..]);
        for _ in 0..1000 {
            buf.extend_from_slice(&[b'y'; 64]);
            assert!(codec.decode(&mut buf).unwrap().is_none());
            assert!(buf.len() <= 64 + 11, "the buffer holds {} bytes", buf.len());
        }
    }

    /// Early reporting: an unfinished line is reported once, when it passes the limit, by
    /// the bytes seen; the rest of it is dropped silently and the next line comes through.
    #[test]
    fn early_reporting_fails_fast() {
        let early = |chunks: &[&[u8]]| decode_all(LineCodec::reporting_early(8), chunks);
        assert_eq!(
            early(&[b"0123456789", b"abcdef", b"\nok\n"]),
            vec![too_long(10), line("ok")]
        );
        assert_eq!(early(&[b"0123456789"]), vec![too_long(10)]);
        assert_eq!(early(&[b"0123456789\nok"]), vec![too_long(10), line("ok")]);
        assert_eq!(
            early(&[b"{\"a\":", b"1}\r\n{\"b\":2}\nrest"]),
            vec![line("{\"a\":1}"), line("{\"b\":2}"), line("rest")]
        );
    }

    /// The line readers' cases of the three protocols: lines reassembled across reads, an
    /// over-long line skipped whole with the next one intact, a final unterminated line kept.
    #[test]
    fn protocol_cases() {
        let input: &[u8] = b"short\nthis line is far too long for the limit\n{\"a\":1}\ntail";
        let chunks: Vec<&[u8]> = input.chunks(8).collect();
        assert_eq!(
            frames(12, &chunks),
            vec![line("short"), too_long(39), line("{\"a\":1}"), line("tail")]
        );
        assert_eq!(frames(4, &[b"0123456789abcdef"]), vec![too_long(16)]);
    }

    /// Kept ends: the first and last bytes of an over-long line, however it arrives, and
    /// nothing of the line after it.
    #[test]
    fn over_long_lines_keep_their_ends() {
        let long = format!("HEAD{}TAIL", "x".repeat(100));
        let input = format!("{long}\r\nnext\n{long}");
        for step in 1..input.len() {
            let chunks: Vec<&[u8]> = input.as_bytes().chunks(step).collect();
            let frames = decode_all(LineCodec::keeping_ends(10, 4), &chunks);
            let Frame::TooLong(first) = &frames[0] else {
                panic!("step {step}: {frames:?}");
            };
            assert_eq!(
                (first.len, &first.head[..], &first.tail[..]),
                (109, &b"HEAD"[..], &b"TAIL"[..]),
                "step {step}"
            );
            assert_eq!(frames[1], line("next"), "step {step}");
            let Frame::TooLong(last) = &frames[2] else {
                panic!("step {step}: {frames:?}");
            };
            assert_eq!(
                (last.len, &last.head[..], &last.tail[..]),
                (108, &b"HEAD"[..], &b"TAIL"[..]),
                "step {step}"
            );
        }
    }

    proptest::proptest! {
        /// Unbounded, the lines are exactly the `\n`-separated pieces (one trailing `\r` each
        /// removed), whatever the chunking; bounded, no line over the limit is returned and
        /// every piece is accounted for once, as a line or as a length.
        #[test]
        fn frames_are_the_pieces(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), step in 1usize..40, max in 0usize..40) {
            let chunks: Vec<&[u8]> = data.chunks(step).collect();
            let mut pieces: Vec<Vec<u8>> = data.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
            if pieces.last().is_some_and(Vec::is_empty) {
                pieces.pop();
            }
            for piece in &mut pieces {
                if piece.last() == Some(&b'\r') {
                    piece.pop();
                }
            }
            let unbounded: Vec<Vec<u8>> = frames(usize::MAX, &chunks)
                .into_iter()
                .map(|f| match f {
                    Frame::Line(l) => l.to_vec(),
                    Frame::TooLong(over) => panic!("unbounded reported {over:?}"),
                })
                .collect();
            proptest::prop_assert_eq!(&unbounded, &pieces);
            let bounded = frames(max, &chunks);
            proptest::prop_assert_eq!(bounded.len(), pieces.len());
            for (frame, piece) in bounded.iter().zip(&pieces) {
                match frame {
                    Frame::Line(l) => {
                        proptest::prop_assert!(l.len() <= max);
                        proptest::prop_assert_eq!(&l.to_vec(), piece);
                    }
                    Frame::TooLong(over) => proptest::prop_assert!(over.len > max),
                }
            }
        }
    }
}
