//! Engines that ship with ctxbridge.

pub mod legacy;
pub mod process;
pub mod sample;

pub use crate::contract::LEGACY_ENGINE_ID;
pub use legacy::{LegacyEngine, LEGACY_ENGINE_NAME};
pub use process::{HostIdentity, ProcessEngine, ProcessEngineConfig};
