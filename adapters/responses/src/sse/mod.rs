//! SSE → typed events. The same parser reads a live HTTP body and the scripted byte chunks of
//! the tests.
//!
//! The line splitter ([`SseDecoder`]) is linear in the body size: each byte is scanned for a line
//! end once, however the body is chunked, and a line or event longer than the configured cap
//! ends the stream with [`ResponsesError::EventTooLarge`] instead of growing without bound.
//! Around it, [`ResponseStream`] enforces the idle timeout between events, the overall turn
//! deadline, and the cap on the reply text.
//!
//! Layout:
//! - `decoder`: [`SseDecoder`], bytes → [`SseEvent`]s (the `text/event-stream` line rules).
//! - `events`: one [`SseEvent`] → a typed [`ResponseEvent`] or the error it reports.
//! - `limits`: [`StreamLimits`], the bounds of one response.
//! - `stream`: [`ResponseStream`], the typed events of one response within its limits.
//!
//! [`ResponsesError::EventTooLarge`]: crate::error::ResponsesError::EventTooLarge
//! [`ResponseEvent`]: crate::types::ResponseEvent

mod decoder;
mod events;
mod limits;
mod stream;
#[cfg(test)]
mod tests;

pub use decoder::{SseDecodeError, SseDecoder, SseEvent};
pub use limits::StreamLimits;
pub use stream::ResponseStream;
