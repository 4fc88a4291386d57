//! Newline-delimited JSON framing for the upstream child's stdout and the unix/stdio
//! transports: lines are read with a hard size bound, so an over-long line is consumed and
//! reported by length without ever being held whole.

// One bounded line reader for every line transport of the app-server protocol: the Codex
// adapter's (it strips a `\r` before the `\n` too).
pub(crate) use codex_app_server_client::{read_bounded_line, Line};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use tokio::io::BufReader;

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
