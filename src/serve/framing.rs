//! Newline-delimited JSON framing for the upstream child's stdout and the unix/stdio
//! transports: lines are read with a hard size bound, so an over-long line is consumed and
//! reported by length without ever being held whole.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// What a bounded line read produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line (without its `\n`) is in the buffer.
    Complete,
    /// A line longer than the bound was skipped; its length.
    TooLong(usize),
    /// End of input.
    Eof,
}

/// Reads one `\n`-terminated line into `line`, holding at most `max` bytes.
pub(crate) async fn read_bounded_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut skipped: Option<usize> = None;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match skipped {
                Some(len) => Line::TooLong(len),
                None if line.is_empty() => Line::Eof,
                None => Line::Complete,
            });
        }
        let (chunk_len, consumed, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i, i + 1, true),
            None => (buf.len(), buf.len(), false),
        };
        match skipped.as_mut() {
            Some(len) => *len += chunk_len,
            None if line.len() + chunk_len > max => {
                skipped = Some(line.len() + chunk_len);
                line.clear();
            }
            None => line.extend_from_slice(&buf[..chunk_len]),
        }
        reader.consume(consumed);
        if done {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(match skipped {
                Some(len) => Line::TooLong(len),
                None => Line::Complete,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<String, usize>> {
        let mut reader = BufReader::with_capacity(8, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_bounded_line(&mut reader, &mut line, max)
                .await
                .unwrap()
            {
                Line::Complete => out.push(Ok(String::from_utf8(line.clone()).unwrap())),
                Line::TooLong(len) => out.push(Err(len)),
                Line::Eof => return out,
            }
        }
    }

    /// Lines split across refills are reassembled, `\r\n` is accepted, an over-long line is
    /// skipped whole and the next one read intact.
    #[tokio::test]
    async fn bounded_lines() {
        let input = b"short\r\nthis line is far too long for the limit\n{\"a\":1}\ntail";
        assert_eq!(
            lines(input, 12).await,
            vec![
                Ok("short".to_owned()),
                Err(39),
                Ok("{\"a\":1}".to_owned()),
                Ok("tail".to_owned())
            ]
        );
    }
}
