//! What the host offers an engine (SPEC §3, §5): the capabilities each kind of host advertises,
//! the check of an engine's host requirements before an operation, and which host-added params
//! an engine receives.
//!
//! - [`capabilities`]: host capabilities and the kinds of host, each with its list (SPEC §3).
//! - [`requirements`]: checking an engine's `hostRequirements` before an operation (SPEC §3).
//! - [`params`]: which host-added params an engine receives (`acceptedHostParams`, SPEC §5).
//! - [`session_file`]: OpenClaw's JSONL session transcript format (`sessionFile`, SPEC §1.3).

pub mod capabilities;
pub mod params;
pub mod requirements;
pub mod session_file;
