//! `plugins.requireDurableTurns` (OpenClaw 2026.9's rule for a turn whose transcript is
//! recorded): an engine that does not declare durable turns is served by legacy for the whole
//! turn — one warning, no quarantine — and tried again the next turn; a durable engine and
//! legacy itself are served as always; without the setting a non-durable engine serves with
//! `afterTurn`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ctxbridge::contract::{
    EngineMethod, TranscriptSemantics, CURRENT_TURN_FENCE_V1, TURN_ADVANCEMENT_IDEMPOTENCY_V1,
};
use ctxbridge::harness::HarnessConfig;
use support::*;
use tracing::Level;

fn required(on: bool) -> HarnessConfig {
    HarnessConfig {
        require_durable_turns: on,
        ..cfg()
    }
}

#[tokio::test]
async fn a_non_durable_engine_is_served_by_legacy_each_turn_when_durable_turns_are_required() {
    let (logs, _guard) = capture();
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), required(true));
    for prompt in ["one", "two"] {
        let r = turn(&h, prompt).await;
        assert_eq!(r.engine_id, "legacy", "{prompt}");
    }
    assert_eq!(engine.count("assemble"), 0);
    assert_eq!(engine.count("afterTurn"), 0);
    assert!(!h.engine().is_quarantined(), "tried again each turn");
    let warnings: Vec<String> = logs
        .at(Level::WARN)
        .into_iter()
        .filter(|w| w.contains("degraded to \"legacy\" for this turn"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("current-turn transcript fencing is not declared"),
        "{warnings:?}"
    );

    // Declared durable (and implementing commitTurn): served by the engine, durably.
    engine.add_methods(&[EngineMethod::CommitTurn]);
    engine.script().info.transcript_semantics = Some(TranscriptSemantics {
        current_turn_fence: Some(CURRENT_TURN_FENCE_V1.into()),
        turn_advancement_idempotency: Some(TURN_ADVANCEMENT_IDEMPOTENCY_V1.into()),
    });
    let r = turn(&h, "three").await;
    assert_ne!(r.engine_id, "legacy");
    assert_eq!(engine.count("commitTurn"), 1);
}

#[tokio::test]
async fn without_the_requirement_a_non_durable_engine_serves_with_after_turn() {
    let rig = Rig::new();
    let engine = ScriptEngine::bootstrap("e1");
    let h = rig.harness(Some(&engine), required(false));
    let r = turn(&h, "one").await;
    assert_ne!(r.engine_id, "legacy");
    assert_eq!(engine.count("afterTurn"), 1);
}

#[tokio::test]
async fn legacy_itself_is_never_degraded() {
    let (logs, _guard) = capture();
    let rig = Rig::new();
    let h = rig.harness(None, required(true));
    let r = turn(&h, "one").await;
    assert_eq!(r.engine_id, "legacy");
    assert!(
        logs.at(Level::WARN).is_empty(),
        "{:?}",
        logs.at(Level::WARN)
    );
}
