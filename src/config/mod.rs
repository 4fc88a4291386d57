//! The ctxbridge configuration file (docs/config.md#configuration-reference): JSON5, default path `ctxbridge.json5`, with the
//! OpenClaw `plugins` section accepted unchanged.
//!
//! - `schema.rs`: the typed sections ([`Config`] and below), their defaults, and the engine slot
//!   they select. Config owns its types: the harness, the projection and the backends are built
//!   from them by the application wiring (`app`); config depends on none of them.
//! - `load.rs`: reading and parsing the file ([`Config::load`], [`Config::parse`]); every
//!   [`ConfigError`] names the file, a line, a column and a key path.
//! - [`locator`]: finds where a key path sits in the JSON5 text.
//!
//! Unknown keys are rejected everywhere except inside the free-form maps
//! `plugins.entries.<id>.config` and `backend.config`.

pub mod discover;
mod load;
pub mod locator;
mod schema;

pub use load::{ConfigError, DEFAULT_CONFIG_PATH};
pub use schema::{
    AgentConfig, BackendConfig, BackendUrl, CodexBackendConfig, CodexConfigValue,
    CodexContextDelivery, Config, DeveloperInstructionDrift, EngineSlot, EngineThreads,
    PluginEntry, PluginsConfig, ProjectionConfig, ResponsesBackendConfig, ResponsesFrontConfig,
    ResponsesThreadKind, Retention, RetentionError, ServeConfig, SlotsConfig, StoreConfig,
    StoreKind, DEFAULT_AGENT_ID, DEFAULT_RETENTION, DEFAULT_STORE_PATH,
};
