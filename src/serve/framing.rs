//! Newline-delimited JSON framing for the upstream child's stdout and the stdio transport:
//! lines are read with a hard size bound, so an over-long line is consumed and reported by
//! length without ever being held whole.

// One bounded line reader for every line transport of the app-server protocol: the Codex
// adapter's (it strips a `\r` before the `\n` too).
pub(crate) use codex_app_server_client::{read_bounded_line, Line};
