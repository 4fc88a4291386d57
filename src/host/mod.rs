//! What the host offers an engine (docs/architecture.md#host-capabilities-and-requirements, §5): the capabilities each kind of host advertises,
//! the check of an engine's host requirements before an operation, and which host-added params
//! an engine receives.
//!
//! - [`capabilities`]: host capabilities and the kinds of host, each with its list (docs/architecture.md#host-capabilities-and-requirements).
//! - [`requirements`]: checking an engine's `hostRequirements` before an operation (docs/architecture.md#host-capabilities-and-requirements).
//! - [`params`]: which host-added params an engine receives (`acceptedHostParams`, docs/architecture.md#host-added-parameters-acceptedhostparams).
//! - [`node`]: Node versions and plugins' `engines.node` ranges (npm's syntax on `semver`).
//! - [`session_file`]: OpenClaw's JSONL session transcript format (`sessionFile`, docs/architecture.md#method-parameters-and-results).

pub mod capabilities;
pub mod node;
pub mod params;
pub mod requirements;
pub mod session_file;
