//! Host capabilities (docs/architecture.md#host-capabilities-and-requirements).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A capability a host may advertise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    Bootstrap,
    AssembleBeforePrompt,
    AfterTurn,
    Maintain,
    Compact,
    RuntimeLlmComplete,
    ThreadBootstrapProjection,
}

impl Capability {
    /// Every capability, in the documented order.
    pub const ALL: [Capability; 7] = [
        Capability::Bootstrap,
        Capability::AssembleBeforePrompt,
        Capability::AfterTurn,
        Capability::Maintain,
        Capability::Compact,
        Capability::RuntimeLlmComplete,
        Capability::ThreadBootstrapProjection,
    ];

    /// What a generic CLI host that cannot control the prompt offers.
    pub const CLI_HOST: [Capability; 3] = [
        Capability::Bootstrap,
        Capability::AfterTurn,
        Capability::Maintain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Bootstrap => "bootstrap",
            Capability::AssembleBeforePrompt => "assemble-before-prompt",
            Capability::AfterTurn => "after-turn",
            Capability::Maintain => "maintain",
            Capability::Compact => "compact",
            Capability::RuntimeLlmComplete => "runtime-llm-complete",
            Capability::ThreadBootstrapProjection => "thread-bootstrap-projection",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of host ctxbridge knows, each with its advertised capabilities (docs/architecture.md#host-capabilities-and-requirements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKind {
    /// The in-process mock backend.
    Mock,
    /// The Codex app-server.
    Codex,
    /// The OpenAI Responses API.
    Responses,
    /// A generic CLI host that cannot control the prompt.
    Cli,
}

impl HostKind {
    /// The capabilities this kind of host advertises.
    pub fn capabilities(self) -> Vec<Capability> {
        match self {
            HostKind::Mock | HostKind::Codex | HostKind::Responses => Capability::ALL.to_vec(),
            HostKind::Cli => Capability::CLI_HOST.to_vec(),
        }
    }

    /// The label used in messages (`Context engine "x" cannot run operation "y" on <label>`).
    pub fn label(self) -> &'static str {
        match self {
            HostKind::Mock => "the mock backend",
            HostKind::Codex => "the Codex app-server",
            HostKind::Responses => "the Responses API backend",
            HostKind::Cli => "a CLI host",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Mock => "mock",
            HostKind::Codex => "codex",
            HostKind::Responses => "responses",
            HostKind::Cli => "cli",
        }
    }
}

/// The OpenClaw hooks this host fires: `before_prompt_build` (after `assemble`, waited for),
/// `session_start`, `session_end` and `before_reset` (session life), `gateway_start` and
/// `gateway_stop` (process life). Engines are told in `initialize` (`host.hooks`); a plugin
/// that registers another hook is told it is not offered.
pub const FIRED_HOOKS: [&str; 6] = [
    "before_prompt_build",
    "session_start",
    "session_end",
    "before_reset",
    "gateway_start",
    "gateway_stop",
];
