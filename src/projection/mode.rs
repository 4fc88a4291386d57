//! The projection mode a turn runs in. Its own module because both the decision
//! ([`super::decision`]) and the binding record ([`super::binding`]) use it, and neither
//! should depend on the other for it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The projection mode a turn runs in (`mode` of `turn --json`), also recorded in the binding
/// as `engine.projectionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectiveMode {
    /// Bare prompt (inactive engine).
    None,
    /// The assembled context is rendered into every turn's input.
    PerTurn,
    /// The assembled context is rendered once into a new thread, which later turns reuse.
    ThreadBootstrap,
}

impl EffectiveMode {
    /// The mode's wire name: `none`, `per_turn` or `thread_bootstrap`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectiveMode::None => "none",
            EffectiveMode::PerTurn => "per_turn",
            EffectiveMode::ThreadBootstrap => "thread_bootstrap",
        }
    }
}

impl fmt::Display for EffectiveMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every mode prints and serialises as its wire name.
    #[test]
    fn mode_names() {
        for (mode, text) in [
            (EffectiveMode::None, "none"),
            (EffectiveMode::PerTurn, "per_turn"),
            (EffectiveMode::ThreadBootstrap, "thread_bootstrap"),
        ] {
            assert_eq!(mode.as_str(), text);
            assert_eq!(mode.to_string(), text);
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{text}\""));
            assert_eq!(
                serde_json::from_str::<EffectiveMode>(&format!("\"{text}\"")).unwrap(),
                mode
            );
        }
    }
}
