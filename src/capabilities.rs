//! Host capabilities (SPEC §3).

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
    /// Every capability, in the SPEC's order.
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
