//! # responses-client
//!
//! A streaming client for the OpenAI Responses API (`POST {base_url}/responses`, always
//! `stream: true`), the wire layer of ctxbridge's Responses backend (docs/architecture.md#backends). A conversation
//! thread on this API is either a chain of `previous_response_id`s with `store: true`, or a
//! durable conversation (`POST {base_url}/conversations`, then `conversation: <id>` on each
//! response); the API does not carry `instructions` over, so callers send them with every
//! request.
//!
//! Layout:
//! - [`config`]: [`ResponsesConfig`] (base URL, timeouts, retries) and [`ApiKey`], a key that never
//!   prints.
//! - [`types`]: the request bodies ([`CreateResponse`], [`CompactRequest`]) and what comes back
//!   ([`ResponseEvent`], [`CompletedResponse`], [`CompactedResponse`], [`ResponseUsage`]).
//! - [`sse`]: the SSE parser turning a byte stream into typed events ([`ResponseStream`]), linear
//!   in the body size, with an idle timeout between events, an overall deadline, and caps on the
//!   size of one event and of the reply; a stream that ends before `response.completed` is an
//!   error.
//! - [`urls`]: endpoint URLs joined with a URL library, and [`redact_url`] (userinfo and query
//!   values become `***`) for every URL that is printed.
//! - [`client`]: [`ResponsesClient`], the HTTP side: bearer auth, bounded retries with backoff for
//!   5xx and connection errors before the response started, none for 4xx; conversations
//!   (create — empty or with items —, retrieve, delete) and their items (create, list).
//! - [`error`]: [`ResponsesError`], carrying the operation, HTTP status and the API's error code.
//!
//! Secrets: the API key is sent only as a sensitive `Authorization` header. It is absent from
//! `Debug`/`Display` of every type here, from errors (server text echoing it is scrubbed) and from
//! tracing output. A secret written into the base URL (userinfo, query) is sent as written but
//! shown only redacted.

pub mod client;
pub mod config;
pub mod error;
pub mod relay;
pub mod sse;
pub mod types;
pub mod urls;

pub use client::{bearer, ResponsesClient};
pub use config::{ApiKey, ResponsesConfig};
pub use error::ResponsesError;
pub use relay::{RelayRequest, Relayed};
pub use sse::{ResponseStream, StreamLimits};
pub use types::output_item_text;
pub use types::{
    CompactRequest, CompactedResponse, CompletedResponse, Conversation, CreateResponse,
    InputContent, InputItem, InputMessage, InputRole, ResponseEvent, ResponseUsage,
};
pub use urls::{redact_url, redact_url_str};
