//! Issue 13.5: the token budget reaches the engine. Every engine call whose contract takes a
//! budget — `assemble`, `compact`, `afterTurn`, `maintain` (its runtime facts) and every
//! `runtimeSettings.limits.promptTokenBudget` — carries the configured `agent.tokenBudget`, or
//! ctxbridge's documented default when none is configured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use ctxbridge::backend::MockBackend;
use ctxbridge::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, CompactParams, CompactResult, ContextEngine,
    EngineError, EngineInfo, EngineMethod, IngestParams, IngestResult, MaintainParams,
    MaintainResult, MethodSet, RuntimeContext, RuntimeSettings,
};
use ctxbridge::harness::{Harness, HarnessConfig, TurnSpec, DEFAULT_TOKEN_BUDGET};
use ctxbridge::quarantine::{CallTimeouts, QuarantineBook, QuarantineEngine};
use ctxbridge::store::SqliteStore;

/// Records, per call, the budgets it was given (`None` where a budget was missing).
#[derive(Default)]
struct BudgetEngine {
    seen: Mutex<Vec<(&'static str, Option<u64>)>>,
}

impl BudgetEngine {
    fn note(&self, call: &'static str, budget: Option<u64>) {
        self.seen.lock().unwrap().push((call, budget));
    }

    fn settings(&self, call: &'static str, settings: Option<&RuntimeSettings>) {
        self.note(call, settings.and_then(|s| s.limits.prompt_token_budget));
    }

    fn facts(&self, call: &'static str, context: Option<&RuntimeContext>) {
        self.note(call, context.and_then(|c| c.facts.token_budget));
    }
}

#[async_trait::async_trait]
impl ContextEngine for BudgetEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo::new("budget-engine", "Budget Engine")
    }
    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[EngineMethod::AfterTurn, EngineMethod::Maintain])
    }
    async fn ingest(&self, _: IngestParams) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: true })
    }
    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        self.note("assemble", params.token_budget);
        self.settings("assemble.runtimeSettings", params.runtime_settings.as_ref());
        Ok(AssembleResult {
            messages: params.messages,
            ..Default::default()
        })
    }
    async fn compact(&self, params: CompactParams) -> Result<CompactResult, EngineError> {
        self.note("compact", params.token_budget);
        self.settings("compact.runtimeSettings", params.runtime_settings.as_ref());
        Ok(CompactResult {
            ok: true,
            compacted: true,
            reason: None,
            result: None,
        })
    }
    async fn after_turn(&self, params: AfterTurnParams) -> Result<(), EngineError> {
        self.note("afterTurn", params.token_budget);
        self.settings(
            "afterTurn.runtimeSettings",
            params.runtime_settings.as_ref(),
        );
        Ok(())
    }
    async fn maintain(&self, params: MaintainParams) -> Result<MaintainResult, EngineError> {
        self.settings("maintain.runtimeSettings", params.runtime_settings.as_ref());
        self.facts("maintain.runtimeContext", params.runtime_context.as_ref());
        Ok(MaintainResult::default())
    }
}

/// Runs a turn and a manual compaction; returns every budget the engine saw.
async fn budgets_seen(token_budget: Option<u64>) -> Vec<(&'static str, Option<u64>)> {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(BudgetEngine::default());
    let harness = Harness::new(
        HarnessConfig {
            token_budget,
            ..HarnessConfig::default()
        },
        Arc::new(QuarantineEngine::new(
            "budget-engine",
            engine.clone(),
            Arc::new(QuarantineBook::new()),
            CallTimeouts::default(),
        )),
        Arc::new(MockBackend::new()),
        Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap()),
    );
    harness.turn(TurnSpec::new("s", "hello")).await.unwrap();
    harness.compact("s").await.unwrap();
    harness.shutdown().await;
    let seen = engine.seen.lock().unwrap().clone();
    seen
}

/// Every call's list of budget-carrying calls is complete: each kind was seen at least once.
fn assert_all_calls_seen(seen: &[(&'static str, Option<u64>)]) {
    for call in [
        "assemble",
        "assemble.runtimeSettings",
        "compact",
        "compact.runtimeSettings",
        "afterTurn",
        "afterTurn.runtimeSettings",
        "maintain.runtimeSettings",
        "maintain.runtimeContext",
    ] {
        assert!(
            seen.iter().any(|(c, _)| *c == call),
            "{call} not seen: {seen:?}"
        );
    }
}

/// A configured `agent.tokenBudget` reaches every budget-taking call.
#[tokio::test]
async fn the_configured_budget_reaches_every_call() {
    let seen = budgets_seen(Some(400_000)).await;
    assert_all_calls_seen(&seen);
    for (call, budget) in &seen {
        assert_eq!(*budget, Some(400_000), "{call}: {seen:?}");
    }
}

/// Without a configured budget, every budget-taking call gets the documented default.
#[tokio::test]
async fn the_default_budget_reaches_every_call() {
    assert_eq!(DEFAULT_TOKEN_BUDGET, 128_000);
    let seen = budgets_seen(None).await;
    assert_all_calls_seen(&seen);
    for (call, budget) in &seen {
        assert_eq!(*budget, Some(DEFAULT_TOKEN_BUDGET), "{call}: {seen:?}");
    }
}
