//! Engines that ship with ctxbridge.

pub mod legacy;

pub use legacy::{LegacyEngine, LEGACY_ENGINE_ID, LEGACY_ENGINE_NAME};
