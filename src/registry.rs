//! The engine registry (docs/architecture.md#selection-fault-isolation-and-quarantine): engines register by id with an owner and a factory; the
//! configured slot picks one; resolving it validates the contract and wraps the engine in a
//! [`QuarantineEngine`].
//!
//! Resolution never fails: an engine that is not registered, whose factory fails (error,
//! panic, timeout), or whose contract is incomplete is quarantined (operation `resolve` or
//! `factory`) and legacy answers in its place.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::Value;

use crate::config::{Config, EngineSlot};
use crate::contract::{ContextEngine, EngineMethod, SelectionSource};
use crate::engines::LEGACY_ENGINE_ID;
use crate::quarantine::{
    panic_message, CallTimeouts, FailedOperation, QuarantineBook, QuarantineEngine,
};
use crate::util::lock;

/// The owner of the built-in engines (and of the reserved id `legacy`).
pub const CORE_OWNER: &str = "core";

/// The quarantine reason of a selected id nobody registered.
pub const NOT_REGISTERED: &str = "not registered";

/// What an engine factory receives (docs/architecture.md#selection-fault-isolation-and-quarantine: `{config, agentDir?, workspaceDir?}`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineFactoryContext {
    /// `plugins.entries.<id>.config` (an empty object when absent).
    pub config: Value,
    pub agent_dir: Option<PathBuf>,
    pub workspace_dir: Option<PathBuf>,
}

/// The future an engine factory returns. Out-of-process engines spawn their child here.
pub type EngineFactoryFuture = BoxFuture<'static, Result<Arc<dyn ContextEngine>, String>>;

/// Creates an engine instance.
pub type EngineFactory = Arc<dyn Fn(EngineFactoryContext) -> EngineFactoryFuture + Send + Sync>;

/// A registration the registry refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The engine id is empty.
    #[error("cannot register an engine with an empty id (owner \"{owner}\")")]
    EmptyId { owner: String },
    /// The id `legacy` is reserved for the built-in fallback engine; nobody registers it.
    #[error("engine id \"legacy\" belongs to the core; \"{owner}\" cannot register it")]
    ReservedId { owner: String },
    /// Another owner registered this id first; owners replace only their own engines.
    #[error(
        "engine \"{id}\" is registered by \"{existing_owner}\"; \"{owner}\" cannot replace it"
    )]
    OwnedByOther {
        id: String,
        owner: String,
        existing_owner: String,
    },
}

struct Registration {
    owner: String,
    factory: EngineFactory,
}

/// Registered engines plus the process-wide quarantine book.
pub struct EngineRegistry {
    engines: Mutex<BTreeMap<String, Registration>>,
    book: Arc<QuarantineBook>,
}

impl fmt::Debug for EngineRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineRegistry")
            .field("engines", &self.registered_ids())
            .field("quarantined", &self.book.records())
            .finish()
    }
}

impl Default for EngineRegistry {
    fn default() -> Self {
        Self::new()
    }
}

/// What one resolution produced.
#[derive(Debug, Clone)]
pub struct ResolvedEngine {
    /// The guarded engine; use it as `Arc<dyn ContextEngine>`.
    pub engine: Arc<QuarantineEngine>,
    /// The slot as configured (selected id, disabled note).
    pub slot: EngineSlot,
}

impl ResolvedEngine {
    /// The id selected by configuration (what runs if nothing fails).
    pub fn selected_id(&self) -> &str {
        &self.slot.engine_id
    }

    pub fn source(&self) -> SelectionSource {
        self.slot.source()
    }
}

/// Directories handed to factories.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineDirs {
    pub agent_dir: Option<PathBuf>,
    pub workspace_dir: Option<PathBuf>,
}

impl EngineRegistry {
    /// An empty registry (legacy is always available) with its own quarantine book.
    pub fn new() -> Self {
        Self::with_quarantine_book(Arc::new(QuarantineBook::new()))
    }

    /// An empty registry sharing `book` (e.g. restored from the state store).
    pub fn with_quarantine_book(book: Arc<QuarantineBook>) -> Self {
        EngineRegistry {
            engines: Mutex::new(BTreeMap::new()),
            book,
        }
    }

    pub fn quarantine_book(&self) -> &Arc<QuarantineBook> {
        &self.book
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Registration>> {
        // Inserts and removals are single map operations; a poisoned lock holds a valid map.
        lock(&self.engines)
    }

    /// Registers `factory` for `id` on behalf of `owner`. The id `legacy` is the core's; an id
    /// registered by another owner cannot be replaced; re-registering an id by its owner
    /// replaces the factory and clears the id's quarantine.
    pub fn register<F, Fut>(&self, id: &str, owner: &str, factory: F) -> Result<(), RegistryError>
    where
        F: Fn(EngineFactoryContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn ContextEngine>, String>> + Send + 'static,
    {
        let factory: EngineFactory = Arc::new(move |ctx| factory(ctx).boxed());
        self.register_factory(id, owner, factory)
    }

    /// [`register`](Self::register) with an already boxed factory.
    pub fn register_factory(
        &self,
        id: &str,
        owner: &str,
        factory: EngineFactory,
    ) -> Result<(), RegistryError> {
        if id.trim().is_empty() {
            return Err(RegistryError::EmptyId {
                owner: owner.to_string(),
            });
        }
        if id == LEGACY_ENGINE_ID {
            return Err(RegistryError::ReservedId {
                owner: owner.to_string(),
            });
        }
        let mut engines = self.lock();
        if let Some(existing) = engines.get(id) {
            if existing.owner != owner {
                return Err(RegistryError::OwnedByOther {
                    id: id.to_string(),
                    owner: owner.to_string(),
                    existing_owner: existing.owner.clone(),
                });
            }
        }
        engines.insert(
            id.to_string(),
            Registration {
                owner: owner.to_string(),
                factory,
            },
        );
        drop(engines);
        if let Some(record) = self.book.clear(id) {
            tracing::info!(
                "context engine \"{id}\" registered again by \"{owner}\"; its quarantine (during {}: {}) is cleared",
                record.operation,
                record.reason
            );
        }
        Ok(())
    }

    /// Who registered `id` (`core` for legacy).
    pub fn owner_of(&self, id: &str) -> Option<String> {
        if id == LEGACY_ENGINE_ID {
            return Some(CORE_OWNER.to_string());
        }
        self.lock().get(id).map(|r| r.owner.clone())
    }

    /// Every registered id, legacy included.
    pub fn registered_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.push(LEGACY_ENGINE_ID.to_string());
        ids.sort();
        ids
    }

    /// Resolves the engine `config` selects (docs/architecture.md#selection-fault-isolation-and-quarantine), with its entry's config and timeout.
    /// A disabled engine yields legacy with an info-level note.
    pub async fn resolve_selected(&self, config: &Config, dirs: &EngineDirs) -> ResolvedEngine {
        let slot = config.engine_slot();
        if let Some(disabled) = &slot.disabled_id {
            tracing::info!(
                "context engine \"{disabled}\" is disabled (plugins.entries.{disabled}.enabled = false); using \"{LEGACY_ENGINE_ID}\""
            );
        }
        let entry = config.plugins.entries.get(&slot.engine_id);
        let context = EngineFactoryContext {
            config: entry
                .and_then(|e| e.config.clone())
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            agent_dir: dirs.agent_dir.clone(),
            workspace_dir: dirs.workspace_dir.clone(),
        };
        let timeouts = CallTimeouts::from_timeout_ms(entry.and_then(|e| e.timeout_ms));
        let engine = self.resolve(&slot.engine_id, context, timeouts).await;
        ResolvedEngine { engine, slot }
    }

    /// Resolves `engine_id`: creates it through its factory, validates its contract, and wraps
    /// it. Never fails; every problem is a quarantine and legacy answers.
    pub async fn resolve(
        &self,
        engine_id: &str,
        context: EngineFactoryContext,
        timeouts: CallTimeouts,
    ) -> Arc<QuarantineEngine> {
        let book = Arc::clone(&self.book);
        if engine_id.trim().is_empty() || engine_id == LEGACY_ENGINE_ID {
            return Arc::new(QuarantineEngine::legacy(book));
        }
        if book.is_quarantined(engine_id) {
            return Arc::new(QuarantineEngine::quarantined(engine_id, book));
        }
        let factory = self.lock().get(engine_id).map(|r| Arc::clone(&r.factory));
        let Some(factory) = factory else {
            book.quarantine(engine_id, FailedOperation::Resolve, NOT_REGISTERED);
            return Arc::new(QuarantineEngine::quarantined(engine_id, book));
        };
        let engine = match run_factory(&factory, context, timeouts).await {
            Ok(engine) => engine,
            Err(reason) => {
                book.quarantine(engine_id, FailedOperation::Factory, reason);
                return Arc::new(QuarantineEngine::quarantined(engine_id, book));
            }
        };
        if let Err(reason) = validate_contract(engine.as_ref()) {
            book.quarantine(engine_id, FailedOperation::Resolve, reason);
            dispose_rejected(engine.as_ref(), timeouts).await;
            return Arc::new(QuarantineEngine::quarantined(engine_id, book));
        }
        Arc::new(QuarantineEngine::new(engine_id, engine, book, timeouts))
    }
}

/// Runs a factory with the default call timeout, catching panics (also in the synchronous
/// part of the factory call).
async fn run_factory(
    factory: &EngineFactory,
    context: EngineFactoryContext,
    timeouts: CallTimeouts,
) -> Result<Arc<dyn ContextEngine>, String> {
    let creating = AssertUnwindSafe(async move { factory(context).await }).catch_unwind();
    match tokio::time::timeout(timeouts.default, creating).await {
        Ok(Ok(Ok(engine))) => Ok(engine),
        Ok(Ok(Err(message))) => Err(message),
        Ok(Err(payload)) => Err(format!("panicked: {}", panic_message(payload.as_ref()))),
        Err(_) => Err(format!(
            "timed out after {}ms",
            timeouts.default.as_millis()
        )),
    }
}

/// Contract validation (docs/architecture.md#selection-fault-isolation-and-quarantine): non-empty `info.id` and `info.name`, and `ingest`,
/// `assemble`, `compact` present. The error names every missing piece.
pub fn validate_contract(engine: &dyn ContextEngine) -> Result<(), String> {
    let described =
        std::panic::catch_unwind(AssertUnwindSafe(|| (engine.info(), engine.methods())));
    let (info, methods) = match described {
        Ok(pair) => pair,
        Err(payload) => {
            return Err(format!(
                "contract validation failed: info panicked: {}",
                panic_message(payload.as_ref())
            ))
        }
    };
    let mut problems = Vec::new();
    if info.id.trim().is_empty() {
        problems.push("info.id is empty".to_string());
    }
    if info.name.trim().is_empty() {
        problems.push("info.name is empty".to_string());
    }
    let missing: Vec<&str> = [
        EngineMethod::Ingest,
        EngineMethod::Assemble,
        EngineMethod::Compact,
    ]
    .into_iter()
    .filter(|m| !methods.contains(*m))
    .map(EngineMethod::as_str)
    .collect();
    if !missing.is_empty() {
        problems.push(format!("missing required methods: {}", missing.join(", ")));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "contract validation failed: {}",
            problems.join("; ")
        ))
    }
}

/// Lets a rejected engine release what its factory acquired (a child process), bounded by the
/// call timeout; its errors no longer matter.
async fn dispose_rejected(engine: &dyn ContextEngine, timeouts: CallTimeouts) {
    let declares_dispose = std::panic::catch_unwind(AssertUnwindSafe(|| {
        engine.methods().contains(EngineMethod::Dispose)
    }))
    .unwrap_or(false);
    if declares_dispose {
        let disposing = AssertUnwindSafe(engine.dispose()).catch_unwind();
        let _ = tokio::time::timeout(timeouts.default, disposing).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::contract::*;

    /// A minimal engine whose info and member list are set by the test.
    struct Shaped {
        info: EngineInfo,
        methods: MethodSet,
    }

    #[async_trait]
    impl ContextEngine for Shaped {
        fn info(&self) -> EngineInfo {
            self.info.clone()
        }
        fn methods(&self) -> MethodSet {
            self.methods.clone()
        }
        async fn ingest(&self, _: IngestParams) -> Result<IngestResult, EngineError> {
            Ok(IngestResult { ingested: true })
        }
        async fn assemble(&self, p: AssembleParams) -> Result<AssembleResult, EngineError> {
            Ok(AssembleResult {
                messages: p.messages,
                estimated_tokens: 7.0,
                ..Default::default()
            })
        }
        async fn compact(&self, _: CompactParams) -> Result<CompactResult, EngineError> {
            Ok(CompactResult::default())
        }
    }

    fn shaped(id: &str, name: &str, methods: MethodSet) -> Arc<dyn ContextEngine> {
        Arc::new(Shaped {
            info: EngineInfo::new(id, name),
            methods,
        })
    }

    fn ctx() -> EngineFactoryContext {
        EngineFactoryContext::default()
    }

    /// `legacy` is reserved, empty ids are refused, and another owner cannot replace an id.
    #[test]
    fn registration_rules() {
        let registry = EngineRegistry::new();
        let ok =
            |_: EngineFactoryContext| async { Ok(shaped("e", "E", MethodSet::required_plus(&[]))) };
        assert_eq!(
            registry.register("legacy", "plugin-a", ok),
            Err(RegistryError::ReservedId {
                owner: "plugin-a".into()
            })
        );
        assert!(matches!(
            registry.register(" ", "plugin-a", ok),
            Err(RegistryError::EmptyId { .. })
        ));
        registry.register("e", "plugin-a", ok).unwrap();
        let err = registry.register("e", "plugin-b", ok).unwrap_err();
        assert_eq!(
            err.to_string(),
            "engine \"e\" is registered by \"plugin-a\"; \"plugin-b\" cannot replace it"
        );
        registry.register("e", "plugin-a", ok).unwrap();
        assert_eq!(registry.owner_of("e").as_deref(), Some("plugin-a"));
        assert_eq!(registry.owner_of("legacy").as_deref(), Some("core"));
        assert_eq!(registry.registered_ids(), vec!["e", "legacy"]);
    }

    /// Validation names every missing piece: empty id, empty name and each missing method.
    #[test]
    fn contract_validation_names_every_missing_piece() {
        let engine = shaped(
            "",
            " ",
            MethodSet::exactly([EngineMethod::Info, EngineMethod::Assemble]),
        );
        assert_eq!(
            validate_contract(engine.as_ref()).unwrap_err(),
            "contract validation failed: info.id is empty; info.name is empty; missing required methods: ingest, compact"
        );
        let fine = shaped("e", "E", MethodSet::required_plus(&[]));
        assert!(validate_contract(fine.as_ref()).is_ok());
    }

    /// An unknown id is quarantined during resolve as "not registered" and legacy answers.
    #[tokio::test]
    async fn unknown_id_is_quarantined() {
        let registry = EngineRegistry::new();
        let engine = registry
            .resolve("ghost", ctx(), CallTimeouts::default())
            .await;
        assert!(engine.is_quarantined());
        assert_eq!(engine.active_engine_id(), "legacy");
        assert_eq!(engine.info().id, "legacy");
        let record = registry.quarantine_book().get("ghost").unwrap();
        assert_eq!(record.operation, FailedOperation::Resolve);
        assert_eq!(record.reason, NOT_REGISTERED);
    }

    /// Factory errors, panics and timeouts quarantine under `factory`; a failed validation
    /// under `resolve`.
    #[tokio::test]
    async fn factory_and_validation_failures_quarantine() {
        let registry = EngineRegistry::new();
        registry
            .register("err", "p", |_| async {
                Err("no python3 on PATH".to_string())
            })
            .unwrap();
        registry
            .register("boom", "p", |_| async {
                if true {
                    panic!("factory exploded");
                }
                Err(String::new())
            })
            .unwrap();
        registry
            .register("slow", "p", |_| async {
                std::future::pending::<()>().await;
                Err(String::new())
            })
            .unwrap();
        registry
            .register("half", "p", |_| async {
                Ok(shaped(
                    "half",
                    "",
                    MethodSet::exactly([EngineMethod::Ingest]),
                ))
            })
            .unwrap();
        let fast = CallTimeouts::uniform(std::time::Duration::from_millis(30));
        for id in ["err", "boom", "slow", "half"] {
            let engine = registry.resolve(id, ctx(), fast).await;
            assert!(engine.is_quarantined(), "{id}");
        }
        let book = registry.quarantine_book();
        let rec = |id: &str| book.get(id).unwrap();
        assert_eq!(
            (rec("err").operation, rec("err").reason.as_str()),
            (FailedOperation::Factory, "no python3 on PATH")
        );
        assert_eq!(rec("boom").operation, FailedOperation::Factory);
        assert_eq!(rec("boom").reason, "panicked: factory exploded");
        assert_eq!(rec("slow").reason, "timed out after 30ms");
        assert_eq!(rec("half").operation, FailedOperation::Resolve);
        assert_eq!(
            rec("half").reason,
            "contract validation failed: info.name is empty; missing required methods: assemble, compact"
        );
    }

    /// The factory receives the entry's config and the directories; a quarantined id is not
    /// created again; a disabled engine resolves to legacy without a quarantine.
    #[tokio::test]
    async fn resolve_selected_passes_config() {
        let registry = EngineRegistry::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(None));
        {
            let calls = Arc::clone(&calls);
            let seen = Arc::clone(&seen);
            registry
                .register("e", "p", move |ctx: EngineFactoryContext| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    *seen.lock().unwrap() = Some(ctx);
                    async { Ok(shaped("e", "E", MethodSet::required_plus(&[]))) }
                })
                .unwrap();
        }
        let config = Config::parse(
            "{plugins: {slots: {contextEngine: 'e'}, entries: {e: {config: {depth: 3}, timeoutMs: 1234}}}}",
            "c.json5",
        )
        .unwrap();
        let dirs = EngineDirs {
            agent_dir: Some("/a".into()),
            workspace_dir: Some("/w".into()),
        };
        let resolved = registry.resolve_selected(&config, &dirs).await;
        assert_eq!(resolved.selected_id(), "e");
        assert_eq!(resolved.source(), SelectionSource::Configured);
        assert!(!resolved.engine.is_quarantined());
        assert_eq!(
            resolved.engine.timeouts(),
            CallTimeouts::uniform(std::time::Duration::from_millis(1234))
        );
        let ctx = seen.lock().unwrap().clone().unwrap();
        assert_eq!(ctx.config, serde_json::json!({"depth": 3}));
        assert_eq!(ctx.agent_dir, Some(PathBuf::from("/a")));
        assert_eq!(ctx.workspace_dir, Some(PathBuf::from("/w")));

        registry.quarantine_book().quarantine(
            "e",
            FailedOperation::Method(EngineMethod::Assemble),
            "x",
        );
        let again = registry.resolve_selected(&config, &dirs).await;
        assert!(again.engine.is_quarantined());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "factory not run for a quarantined id"
        );

        let disabled = Config::parse(
            "{plugins: {slots: {contextEngine: 'off'}, entries: {off: {enabled: false}}}}",
            "c.json5",
        )
        .unwrap();
        let resolved = registry.resolve_selected(&disabled, &dirs).await;
        assert_eq!(resolved.engine.engine_id(), "legacy");
        assert_eq!(resolved.slot.disabled_id.as_deref(), Some("off"));
        assert!(!registry.quarantine_book().is_quarantined("off"));
    }

    /// An empty config resolves legacy with source `default`.
    #[tokio::test]
    async fn default_is_legacy() {
        let registry = EngineRegistry::new();
        let resolved = registry
            .resolve_selected(&Config::default(), &EngineDirs::default())
            .await;
        assert_eq!(resolved.engine.engine_id(), "legacy");
        assert_eq!(resolved.source(), SelectionSource::Default);
        assert!(!resolved.engine.is_quarantined());
        assert!(registry.quarantine_book().records().is_empty());
    }
}
