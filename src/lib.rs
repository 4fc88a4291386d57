//! # ctxbridge
//!
//! Bridges context engines (the OpenClaw context-engine contract) into threaded backends: the
//! Codex app-server and the OpenAI Responses API, which keep their own conversation threads.
//!
//! Layout, from the inside out:
//! - [`contract`]: the engine contract — messages, parameters, results, the `ContextEngine`
//!   trait and the host callbacks (docs/architecture.md#the-engine-contract).
//! - [`engines`]: engines that ship with ctxbridge: the built-in `legacy` engine, the sample
//!   `sample-summary` thread_bootstrap engine, and out-of-process engines (docs/engine-protocol.md#the-engine-process-protocol).
//! - [`host`] (`host/`): what the host offers an engine — capabilities and the lists each kind
//!   of host advertises, the host-requirement check before an operation (docs/architecture.md#host-capabilities-and-requirements), and which
//!   host-added params an engine receives (docs/architecture.md#host-added-parameters-acceptedhostparams).
//! - [`runtime_settings`]: the read-only runtimeSettings snapshot (docs/architecture.md#runtimesettings).
//! - [`quarantine`]: the fault-isolating wrapper engine and the process-wide quarantine book
//!   (docs/architecture.md#selection-fault-isolation-and-quarantine).
//! - [`registry`]: engine registration by id and owner, slot resolution, contract validation
//!   (docs/architecture.md#selection-fault-isolation-and-quarantine).
//! - [`projection`]: projection onto threaded backends as pure functions — rendering,
//!   bounding, the thread binding, the project-or-reuse decision, developer instructions
//!   (docs/architecture.md#projection).
//! - [`backend`]: the threaded-backend port and its implementations: the in-process mock, the
//!   Codex app-server, the Responses API, and the shared conformance suite (docs/architecture.md#backends).
//! - [`store`]: durable state — bindings, transcripts, the durable-turn outbox, leases (docs/architecture.md#the-thread-binding-and-its-fingerprints).
//! - [`harness`]: the turn algorithm — the engine lifecycle around every turn (docs/architecture.md#durable-turns-committurn–§11).
//! - [`config`] (`config/`): the JSON5 configuration file (docs/config.md#configuration-reference) — the schema, loading with
//!   located errors, and the locator that finds a key path in the JSON5 text.
//! - [`doctor`]: the `doctor` report (docs/architecture.md#selection-fault-isolation-and-quarantine, §3).
//! - [`app`]: wiring a configuration into a running harness.
//! - [`cli`] (`cli/`): the `ctxbridge` command line (docs/config.md#configuration-reference) — parsing and dispatch, the shared
//!   command context and errors, and one file per command.
//! - `bench` (the `bench` feature, on by default): the measurements behind `ctxbridge bench` —
//!   projection cost, per-turn overhead and scale figures — written against the public API only.
//! - [`serve`] (`serve/`): `ctxbridge serve`, the Codex app-server proxy (docs/serve.md#the-serve-command) — listeners,
//!   one actor per client connection, the shared upstream, the thread-id map and the router.

pub mod app;
pub mod backend;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod config;
pub mod contract;
pub mod doctor;
pub mod engines;
pub mod harness;
pub mod host;
pub mod metrics;
pub mod projection;
pub mod quarantine;
pub mod registry;
pub mod runtime_settings;
pub mod serve;
pub mod store;
pub mod util;
