//! Small helpers every layer uses, each defined once: the wall clock and its UTC renderings,
//! SHA-256 in hex, an error with its sources on one line, and poison-tolerant locks.

pub mod clock;
pub mod digest;
pub mod errors;
pub mod sync;

pub use clock::{format_utc_ms, iso_timestamp, now_ms};
pub use digest::sha256_hex;
pub use errors::error_chain;
pub use sync::{lock, read, write};
