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

use bytes::{Buf, BytesMut};
use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::{Decoder, FramedRead};

/// One frame of a newline-delimited stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line, without its `\n` and without a `\r` before it.
    Line(BytesMut),
    /// A line longer than the limit was dropped; its length in bytes (without the `\n`).
    TooLong(usize),
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
                    buf.advance(end + 1);
                    self.scanned = 0;
                    if std::mem::take(&mut self.reported) {
                        // Reported when it passed the limit: go on with the next line.
                        continue;
                    }
                    return Ok(Some(Frame::TooLong(dropped + end)));
                }
                (Some(end), None) => {
                    self.scanned = 0;
                    let mut line = buf.split_to(end + 1);
                    line.truncate(end);
                    strip_cr(&mut line);
                    if line.len() > self.max {
                        return Ok(Some(Frame::TooLong(end)));
                    }
                    return Ok(Some(Frame::Line(line)));
                }
                (None, Some(dropped)) => {
                    self.dropping = Some(dropped + buf.len());
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                // One byte of grace: a line of exactly `max` bytes may still be waiting for
                // the `\n` after its `\r`.
                (None, None) if buf.len() > self.max.saturating_add(1) => {
                    let seen = buf.len();
                    self.dropping = Some(seen);
                    buf.clear();
                    self.scanned = 0;
                    if self.early {
                        self.reported = true;
                        return Ok(Some(Frame::TooLong(seen)));
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
            buf.clear();
            if std::mem::take(&mut self.reported) {
                return Ok(None);
            }
            return Ok(Some(Frame::TooLong(dropped)));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let mut line = buf.split();
        strip_cr(&mut line);
        if line.len() > self.max {
            return Ok(Some(Frame::TooLong(line.len())));
        }
        Ok(Some(Frame::Line(line)))
    }
}

/// A bounded line reader over any byte stream: [`FramedRead`] with a [`LineCodec`].
pub type LineReader<R> = FramedRead<R, LineCodec>;

/// A [`LineReader`] over `reader` with lines of at most `max` bytes, reading in chunks of up
/// to 64 KiB.
pub fn line_reader<R: AsyncRead>(reader: R, max: usize) -> LineReader<R> {
    FramedRead::with_capacity(reader, LineCodec::new(max), 64 * 1024)
}

/// A [`LineReader`] whose over-long lines are reported as soon as they pass `max`
/// ([`LineCodec::reporting_early`]).
pub fn early_line_reader<R: AsyncRead>(reader: R, max: usize) -> LineReader<R> {
    FramedRead::with_capacity(reader, LineCodec::reporting_early(max), 64 * 1024)
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
                vec![line("ok"), Frame::TooLong(50), line("next")],
                "step {step}"
            );
        }
        assert_eq!(frames(10, &[long.as_bytes()]), vec![Frame::TooLong(50)]);
        // Exactly at the limit, with a `\r`, is a line.
        assert_eq!(frames(4, &[b"abcd", b"\r", b"\n"]), vec![line("abcd")]);
        assert_eq!(frames(4, &[b"abcde\n"]), vec![Frame::TooLong(5)]);
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
            vec![Frame::TooLong(10), line("ok")]
        );
        assert_eq!(early(&[b"0123456789"]), vec![Frame::TooLong(10)]);
        assert_eq!(
            early(&[b"0123456789\nok"]),
            vec![Frame::TooLong(10), line("ok")]
        );
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
            vec![
                line("short"),
                Frame::TooLong(39),
                line("{\"a\":1}"),
                line("tail")
            ]
        );
        assert_eq!(frames(4, &[b"0123456789abcdef"]), vec![Frame::TooLong(16)]);
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
                    Frame::TooLong(n) => panic!("unbounded reported {n}"),
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
                    Frame::TooLong(n) => proptest::prop_assert!(*n > max),
                }
            }
        }
    }
}
