//! The context-engine contract (SPEC §1): messages, method parameters and results, the
//! `ContextEngine` trait, and the host callbacks of `runtimeContext`.

mod engine;
mod message;
mod runtime;
mod types;

pub use engine::{ContextEngine, EngineError, EngineMethod, MethodSet};
pub use message::{json_kind, AgentMessage, ContentPart, ContentPartError, MessageContent, Role};
pub use runtime::RuntimeCallbacks;
pub use types::*;
