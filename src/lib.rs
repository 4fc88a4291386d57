//! # ctxbridge
//!
//! Bridges context engines (the OpenClaw context-engine contract) into threaded backends: the
//! Codex app-server and the OpenAI Responses API, which keep their own conversation threads.
//!
//! Layout, from the inside out:
//! - [`contract`]: the engine contract — messages, parameters, results, the `ContextEngine`
//!   trait and the host callbacks (SPEC §1).
//! - [`engines`]: engines that ship with ctxbridge (the built-in `legacy` engine).
//! - [`capabilities`]: host capabilities (SPEC §3).
//! - [`projection`]: projection onto threaded backends as pure functions — rendering,
//!   bounding, the thread binding, the project-or-reuse decision, developer instructions
//!   (SPEC §9).
//! - [`backend`]: the threaded-backend port and its implementations (SPEC §12).

pub mod backend;
pub mod capabilities;
pub mod contract;
pub mod engines;
pub mod projection;
