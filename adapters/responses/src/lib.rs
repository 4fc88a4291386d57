//! # responses-client
//!
//! A streaming client for the OpenAI Responses API (`POST {base_url}/responses`, always
//! `stream: true`), the wire layer of ctxbridge's Responses backend (SPEC §12). A conversation
//! thread on this API is a chain of `previous_response_id`s with `store: true`; the API does not
//! carry `instructions` over, so callers send them with every request.
//!
//! Layout:
//! - [`config`]: [`ResponsesConfig`] (base URL, timeouts, retries) and [`ApiKey`], a key that never
//!   prints.
//! - [`types`]: the request bodies ([`CreateResponse`], [`CompactRequest`]) and what comes back
//!   ([`ResponseEvent`], [`CompletedResponse`], [`CompactedResponse`], [`ResponseUsage`]).
//! - [`sse`]: the SSE parser turning a byte stream into typed events ([`ResponseStream`]), with a
//!   per-event idle timeout; a stream that ends before `response.completed` is an error.
//! - [`client`]: [`ResponsesClient`], the HTTP side: bearer auth, bounded retries with backoff for
//!   5xx and connection errors before the response started, none for 4xx.
//! - [`error`]: [`ResponsesError`], carrying the operation, HTTP status and the API's error code.
//!
//! Secrets: the API key is sent only as a sensitive `Authorization` header. It is absent from
//! `Debug`/`Display` of every type here, from errors (server text echoing it is scrubbed) and from
//! tracing output.

pub mod client;
pub mod config;
pub mod error;
pub mod sse;
pub mod types;

pub use client::ResponsesClient;
pub use config::{ApiKey, ResponsesConfig};
pub use error::ResponsesError;
pub use sse::ResponseStream;
pub use types::output_item_text;
pub use types::{
    CompactRequest, CompactedResponse, CompletedResponse, CreateResponse, InputContent, InputItem,
    InputMessage, InputRole, ResponseEvent, ResponseUsage,
};
