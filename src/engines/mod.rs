//! Engines that ship with ctxbridge.

pub mod legacy;
pub mod sample;

pub use legacy::{LegacyEngine, LEGACY_ENGINE_ID, LEGACY_ENGINE_NAME};
