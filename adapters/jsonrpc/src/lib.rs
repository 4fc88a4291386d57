//! JSON-RPC over newline-delimited streams, as three peers of ctxbridge speak it: the Codex
//! app-server (a child's stdio, or a client of `ctxbridge serve` on stdio), serve's upstream
//! connection, and context engines running as child processes. It knows nothing of any of
//! them.
//!
//! Layout:
//! - [`framing`]: the one bounded line framing — a tokio-util [`Decoder`](tokio_util::codec::Decoder)
//!   that never holds more than its limit of an unfinished line and reports an over-long line
//!   by its length instead of failing the stream.
//! - [`error`]: the standard error codes and the error object ([`RpcError`]).
//! - [`id`]: a request id kept as the peer wrote it ([`RequestId`]), and the answer written
//!   around it ([`answer_text`]).
//! - [`message`]: what one peer reads from the other, classified ([`Incoming`], or
//!   [`Malformed`] saying why not), and the lines it writes in its [`Dialect`].
//! - [`peer`]: the requests a peer sent and the calls waiting on their answers, matched by id
//!   ([`Peer`]); the task owning a connection drives it (mini-redis's actor shape).
//! - [`child`]: spawning a child with piped stdio that dies with its handle, and the bounded
//!   tail of its stderr kept to explain a death.

pub mod child;
pub mod error;
pub mod framing;
pub mod id;
pub mod message;
pub mod peer;

/// The buffer and trait a [`LineCodec`] is driven with by hand (fuzzing, tests).
pub use bytes::BytesMut;
pub use child::{forward_stderr, spawn_piped, Piped, StderrTail};
pub use error::{codes, RpcError};
pub use id::{answer_text, RequestId};
pub use message::{json_kind, Dialect, Incoming, Malformed};
pub use peer::{Peer, Received};
pub use tokio_util::codec::Decoder;

pub use framing::{
    early_line_reader, line_reader, next_frame, reader_with, Frame, LineCodec, LineReader, Overlong,
};
