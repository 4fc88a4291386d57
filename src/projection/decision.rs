//! The project-or-reuse decision (docs/architecture.md#the-project-or-reuse-decision): one function, [`decide`].
//!
//! # Reasons
//! | reason | when | action | thread |
//! |---|---|---|---|
//! | `legacy-engine` | the engine is inactive (legacy, quarantined, or the id `legacy`) | bare prompt, mode `none` | reuse a binding made by legacy; **new** when the stored binding was made by an active engine (its thread holds mirrored history that must not be continued), or when there is none |
//! | `per-turn-projection` | active engine, no `contextProjection`, `per_turn`, or `thread_bootstrap` with a blank epoch (with a [`BlankEpochWarning`]) | project (per-turn rendering) | reuse when the stored binding is the same engine's and was fed per turn (or does not say how it was fed and has no projection); **new** when there is none, the engine differs (including a binding made by legacy), or the thread was fed a bootstrap or bare prompts |
//! | `missing-thread-binding` | `thread_bootstrap`, no stored binding (for this backend kind) | project (bootstrap rendering) | new |
//! | `missing-projection-binding` | `thread_bootstrap`, the binding records no projection (e.g. a per-turn thread: the per-turn → bootstrap switch) | project | new |
//! | `context-engine-binding-mismatch` | engine id or policy fingerprint differs | project | new |
//! | `dynamic-tools-mismatch` | tools fingerprint differs | project | new |
//! | `projection-mismatch` | projection mode, epoch or fingerprint differs | project | new |
//! | `matching-thread-bootstrap-binding` | everything matches | reuse: bare prompt | reuse |
//!
//! The rows of `thread_bootstrap` are checked in the order shown. A bootstrap always lands on
//! a new thread: a thread that holds anything but exactly this projection must not receive it.
//! A binding made for another backend kind, or with another schema version, counts as missing.
//! The model is not an input: a model change alone never rotates the thread. Developer
//! instruction drift is handled separately ([`super::instructions`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::binding::{BindingProjection, EngineBinding, ThreadBinding, BINDING_SCHEMA_VERSION};
use super::mode::EffectiveMode;
use super::render::RenderMode;
use crate::backend::{BackendKind, ThreadId};
use crate::contract::LEGACY_ENGINE_ID;
use crate::contract::{ContextProjection, ProjectionMode};

/// What the turn sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjectionAction {
    /// The rendered context and the prompt.
    Project,
    /// The bare prompt into a thread that already holds this projection.
    Reuse,
    /// The bare prompt, no projection (inactive engine).
    Bare,
}

impl ProjectionAction {
    /// The action's name for logs: `project`, `reuse` or `bare`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectionAction::Project => "project",
            ProjectionAction::Reuse => "reuse",
            ProjectionAction::Bare => "bare",
        }
    }
}

/// Which thread the turn runs on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ThreadChoice {
    /// The stored binding's thread.
    Reuse(ThreadId),
    /// A new thread.
    New,
}

/// Why (docs/architecture.md#the-project-or-reuse-decision); the strings are the contract's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecisionReason {
    /// `thread_bootstrap` and no usable stored binding.
    MissingThreadBinding,
    /// `thread_bootstrap` and the binding records no projection.
    MissingProjectionBinding,
    /// The binding's engine id or policy fingerprint differs.
    ContextEngineBindingMismatch,
    /// The binding's tools fingerprint differs.
    DynamicToolsMismatch,
    /// The binding's projection mode, epoch or fingerprint differs.
    ProjectionMismatch,
    /// Everything matches: the thread is reused with the bare prompt.
    MatchingThreadBootstrapBinding,
    /// An active engine projecting every turn.
    PerTurnProjection,
    /// An inactive engine: the bare prompt.
    LegacyEngine,
}

impl DecisionReason {
    /// The contract's string for the reason (e.g. `missing-thread-binding`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionReason::MissingThreadBinding => "missing-thread-binding",
            DecisionReason::MissingProjectionBinding => "missing-projection-binding",
            DecisionReason::ContextEngineBindingMismatch => "context-engine-binding-mismatch",
            DecisionReason::DynamicToolsMismatch => "dynamic-tools-mismatch",
            DecisionReason::ProjectionMismatch => "projection-mismatch",
            DecisionReason::MatchingThreadBootstrapBinding => "matching-thread-bootstrap-binding",
            DecisionReason::PerTurnProjection => "per-turn-projection",
            DecisionReason::LegacyEngine => "legacy-engine",
        }
    }
}

impl fmt::Display for DecisionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `thread_bootstrap` projection with a blank epoch, downgraded to per-turn; the caller logs
/// it (its `Display` is the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlankEpochWarning {
    /// The epoch as the engine sent it (`None` when absent).
    pub epoch: Option<String>,
}

impl fmt::Display for BlankEpochWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.epoch {
            Some(epoch) => write!(
                f,
                "contextProjection.mode is \"thread_bootstrap\" but the epoch {epoch:?} is blank; projecting per turn"
            ),
            None => f.write_str(
                "contextProjection.mode is \"thread_bootstrap\" but there is no epoch; projecting per turn",
            ),
        }
    }
}

/// The inputs of [`decide`]. The model is deliberately not one of them.
#[derive(Debug, Clone, Copy)]
pub struct DecisionInput<'a> {
    /// Whether the serving engine is active (false: legacy, quarantined, degraded to legacy).
    pub engine_active: bool,
    /// The serving engine's id.
    pub engine_id: &'a str,
    /// The serving engine's policy fingerprint.
    pub policy_fingerprint: &'a str,
    /// The host's tool catalogue fingerprint.
    pub tools_fingerprint: &'a str,
    /// The projection of the (bounded) assembled result.
    pub requested: Option<&'a ContextProjection>,
    /// The session's stored binding, if any.
    pub stored: Option<&'a ThreadBinding>,
    /// The backend the turn runs on.
    pub backend: BackendKind,
}

/// The decision for one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionDecision {
    /// What the turn sends.
    pub action: ProjectionAction,
    /// Which thread the turn runs on.
    pub thread: ThreadChoice,
    /// Why (the row of the table that applied).
    pub reason: DecisionReason,
    /// The projection mode of the turn.
    pub mode: EffectiveMode,
    /// The (trimmed) epoch in thread_bootstrap mode.
    pub epoch: Option<String>,
    /// The (trimmed, non-blank) fingerprint in thread_bootstrap mode.
    pub fingerprint: Option<String>,
    /// Set when a `thread_bootstrap` request with a blank epoch was downgraded to per-turn.
    pub warning: Option<BlankEpochWarning>,
    /// The stored binding's thread (for the decision log), when a usable binding exists.
    pub previous_thread: Option<ThreadId>,
    /// The stored binding's epoch (for the decision log).
    pub previous_epoch: Option<String>,
}

impl ProjectionDecision {
    /// Whether the turn input carries the rendered context.
    pub fn projected(&self) -> bool {
        self.action == ProjectionAction::Project
    }

    /// How to render the context, when the turn projects.
    pub fn render_mode(&self) -> Option<RenderMode> {
        match (self.action, self.mode) {
            (ProjectionAction::Project, EffectiveMode::ThreadBootstrap) => {
                Some(RenderMode::Bootstrap)
            }
            (ProjectionAction::Project, _) => Some(RenderMode::PerTurn),
            _ => None,
        }
    }

    /// The `engine` record to store once the thread has received this turn's input.
    pub fn engine_binding(&self, engine_id: &str, policy_fingerprint: &str) -> EngineBinding {
        let projection = match (self.mode, &self.epoch) {
            (EffectiveMode::ThreadBootstrap, Some(epoch)) => Some(BindingProjection {
                mode: ProjectionMode::ThreadBootstrap,
                epoch: epoch.clone(),
                fingerprint: self.fingerprint.clone(),
            }),
            _ => None,
        };
        EngineBinding {
            engine_id: engine_id.to_owned(),
            policy_fingerprint: policy_fingerprint.to_owned(),
            projection,
            projection_mode: Some(self.mode),
        }
    }

    /// The same decision on a fresh thread (developer-instruction rotation, a retry after a
    /// context overflow or a lost thread): a reuse becomes a projection, the reason stays.
    pub fn force_new_thread(mut self) -> Self {
        self.thread = ThreadChoice::New;
        if self.action == ProjectionAction::Reuse {
            self.action = ProjectionAction::Project;
        }
        self
    }
}

/// The requested mode after the blank-epoch rule.
enum Requested {
    PerTurn(Option<BlankEpochWarning>),
    Bootstrap {
        epoch: String,
        fingerprint: Option<String>,
    },
}

fn requested_mode(requested: Option<&ContextProjection>) -> Requested {
    match requested {
        Some(p) if p.mode == ProjectionMode::ThreadBootstrap => {
            match p.epoch.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
                Some(epoch) => Requested::Bootstrap {
                    epoch: epoch.to_owned(),
                    fingerprint: p
                        .fingerprint
                        .as_deref()
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(str::to_owned),
                },
                None => Requested::PerTurn(Some(BlankEpochWarning {
                    epoch: p.epoch.clone(),
                })),
            }
        }
        _ => Requested::PerTurn(None),
    }
}

/// Decides whether this turn projects or reuses, and on which thread (see the module
/// documentation for the table).
pub fn decide(input: &DecisionInput<'_>) -> ProjectionDecision {
    let stored = input
        .stored
        .filter(|b| b.backend == input.backend && b.schema_version == BINDING_SCHEMA_VERSION);
    let mut decision = ProjectionDecision {
        action: ProjectionAction::Project,
        thread: ThreadChoice::New,
        reason: DecisionReason::PerTurnProjection,
        mode: EffectiveMode::PerTurn,
        epoch: None,
        fingerprint: None,
        warning: None,
        previous_thread: stored.map(|b| b.thread_id.clone()),
        previous_epoch: stored.and_then(|b| b.engine.projection.as_ref().map(|p| p.epoch.clone())),
    };
    let reuse = |b: &ThreadBinding| ThreadChoice::Reuse(b.thread_id.clone());

    if !input.engine_active || input.engine_id == LEGACY_ENGINE_ID {
        decision.action = ProjectionAction::Bare;
        decision.reason = DecisionReason::LegacyEngine;
        decision.mode = EffectiveMode::None;
        decision.thread = match stored {
            Some(b) if !made_by_active_engine(b) => reuse(b),
            _ => ThreadChoice::New,
        };
        return decision;
    }

    match requested_mode(input.requested) {
        Requested::PerTurn(warning) => {
            decision.warning = warning;
            decision.thread = match stored {
                Some(b) if b.engine.engine_id == input.engine_id && fed_per_turn(b) => reuse(b),
                _ => ThreadChoice::New,
            };
        }
        Requested::Bootstrap { epoch, fingerprint } => {
            decision.mode = EffectiveMode::ThreadBootstrap;
            let (action, reason) = bootstrap_rule(input, stored, &epoch, fingerprint.as_deref());
            decision.action = action;
            decision.reason = reason;
            if action == ProjectionAction::Reuse {
                if let Some(b) = stored {
                    decision.thread = reuse(b);
                }
            }
            decision.epoch = Some(epoch);
            decision.fingerprint = fingerprint;
        }
    }
    decision
}

/// Rows 1–6 of docs/architecture.md#the-project-or-reuse-decision, in order.
fn bootstrap_rule(
    input: &DecisionInput<'_>,
    stored: Option<&ThreadBinding>,
    epoch: &str,
    fingerprint: Option<&str>,
) -> (ProjectionAction, DecisionReason) {
    let Some(binding) = stored else {
        return (
            ProjectionAction::Project,
            DecisionReason::MissingThreadBinding,
        );
    };
    let Some(projection) = &binding.engine.projection else {
        return (
            ProjectionAction::Project,
            DecisionReason::MissingProjectionBinding,
        );
    };
    if binding.engine.engine_id != input.engine_id
        || binding.engine.policy_fingerprint != input.policy_fingerprint
    {
        return (
            ProjectionAction::Project,
            DecisionReason::ContextEngineBindingMismatch,
        );
    }
    if binding.tools_fingerprint != input.tools_fingerprint {
        return (
            ProjectionAction::Project,
            DecisionReason::DynamicToolsMismatch,
        );
    }
    let recorded_mode_ok = matches!(
        binding.engine.projection_mode,
        None | Some(EffectiveMode::ThreadBootstrap)
    );
    if !recorded_mode_ok
        || projection.mode != ProjectionMode::ThreadBootstrap
        || projection.epoch != epoch
        || projection.fingerprint.as_deref() != fingerprint
    {
        return (
            ProjectionAction::Project,
            DecisionReason::ProjectionMismatch,
        );
    }
    (
        ProjectionAction::Reuse,
        DecisionReason::MatchingThreadBootstrapBinding,
    )
}

/// Whether an active engine fed the binding's thread (projected history into it).
fn made_by_active_engine(binding: &ThreadBinding) -> bool {
    binding.engine.engine_id != LEGACY_ENGINE_ID
        || binding.engine.projection.is_some()
        || matches!(
            binding.engine.projection_mode,
            Some(EffectiveMode::PerTurn | EffectiveMode::ThreadBootstrap)
        )
}

/// Whether the binding's thread was fed per turn (recorded, or — without a record of the mode
/// — implied by the absence of a bootstrap projection).
fn fed_per_turn(binding: &ThreadBinding) -> bool {
    match binding.engine.projection_mode {
        Some(mode) => mode == EffectiveMode::PerTurn && binding.engine.projection.is_none(),
        None => binding.engine.projection.is_none(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const ENGINE: &str = "lossless";
    const POLICY: &str = "policy-1";
    const TOOLS: &str = "tools-1";

    fn binding(engine_id: &str, mode: Option<EffectiveMode>, epoch: Option<&str>) -> ThreadBinding {
        ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: "session:main:s1".into(),
            backend: BackendKind::Codex,
            thread_id: ThreadId("thr-old".into()),
            engine: EngineBinding {
                engine_id: engine_id.into(),
                policy_fingerprint: POLICY.into(),
                projection: epoch.map(|e| BindingProjection {
                    mode: ProjectionMode::ThreadBootstrap,
                    epoch: e.into(),
                    fingerprint: Some("fp".into()),
                }),
                projection_mode: mode,
            },
            tools_fingerprint: TOOLS.into(),
            developer_instructions_sha256: String::new(),
            developer_instructions: None,
            context_refresh: false,
            generation: 1,
            updated_at: 0,
        }
    }

    fn bootstrap_binding() -> ThreadBinding {
        binding(ENGINE, Some(EffectiveMode::ThreadBootstrap), Some("e1"))
    }

    fn bootstrap_request(epoch: &str) -> ContextProjection {
        ContextProjection {
            mode: ProjectionMode::ThreadBootstrap,
            epoch: Some(epoch.into()),
            fingerprint: Some("fp".into()),
        }
    }

    fn input<'a>(
        requested: Option<&'a ContextProjection>,
        stored: Option<&'a ThreadBinding>,
    ) -> DecisionInput<'a> {
        DecisionInput {
            engine_active: true,
            engine_id: ENGINE,
            policy_fingerprint: POLICY,
            tools_fingerprint: TOOLS,
            requested,
            stored,
            backend: BackendKind::Codex,
        }
    }

    fn old_thread() -> ThreadChoice {
        ThreadChoice::Reuse(ThreadId("thr-old".into()))
    }

    /// The reasons serialise and print as the contract's exact strings.
    #[test]
    fn reason_strings() {
        let all = [
            (
                DecisionReason::MissingThreadBinding,
                "missing-thread-binding",
            ),
            (
                DecisionReason::MissingProjectionBinding,
                "missing-projection-binding",
            ),
            (
                DecisionReason::ContextEngineBindingMismatch,
                "context-engine-binding-mismatch",
            ),
            (
                DecisionReason::DynamicToolsMismatch,
                "dynamic-tools-mismatch",
            ),
            (DecisionReason::ProjectionMismatch, "projection-mismatch"),
            (
                DecisionReason::MatchingThreadBootstrapBinding,
                "matching-thread-bootstrap-binding",
            ),
            (DecisionReason::PerTurnProjection, "per-turn-projection"),
            (DecisionReason::LegacyEngine, "legacy-engine"),
        ];
        for (reason, text) in all {
            assert_eq!(reason.as_str(), text);
            assert_eq!(reason.to_string(), text);
            assert_eq!(
                serde_json::to_string(&reason).unwrap(),
                format!("\"{text}\"")
            );
        }
        assert_eq!(EffectiveMode::None.as_str(), "none");
        assert_eq!(
            serde_json::to_string(&EffectiveMode::PerTurn).unwrap(),
            "\"per_turn\""
        );
    }

    /// Row 1: thread_bootstrap without a binding projects on a new thread.
    #[test]
    fn bootstrap_without_binding() {
        let req = bootstrap_request("e1");
        let d = decide(&input(Some(&req), None));
        assert_eq!(d.action, ProjectionAction::Project);
        assert_eq!(d.thread, ThreadChoice::New);
        assert_eq!(d.reason, DecisionReason::MissingThreadBinding);
        assert_eq!(d.mode, EffectiveMode::ThreadBootstrap);
        assert_eq!(d.epoch.as_deref(), Some("e1"));
        assert_eq!(d.fingerprint.as_deref(), Some("fp"));
        assert_eq!(d.render_mode(), Some(RenderMode::Bootstrap));
        assert_eq!(d.previous_thread, None);
    }

    /// Row 2: a binding without a projection (a per-turn thread: the per-turn → bootstrap
    /// switch, or a record that does not say) projects on a new thread.
    #[test]
    fn bootstrap_over_binding_without_projection() {
        let req = bootstrap_request("e1");
        for mode in [Some(EffectiveMode::PerTurn), None] {
            let stored = binding(ENGINE, mode, None);
            let d = decide(&input(Some(&req), Some(&stored)));
            assert_eq!(d.reason, DecisionReason::MissingProjectionBinding);
            assert_eq!(
                (d.action, d.thread.clone()),
                (ProjectionAction::Project, ThreadChoice::New)
            );
            assert_eq!(d.previous_thread, Some(ThreadId("thr-old".into())));
        }
    }

    /// Row 3: another engine id or policy fingerprint projects on a new thread (and wins over
    /// later rows).
    #[test]
    fn bootstrap_engine_or_policy_mismatch() {
        let req = bootstrap_request("e2");
        let other_engine = binding("other", Some(EffectiveMode::ThreadBootstrap), Some("e1"));
        let mut other_policy = bootstrap_binding();
        other_policy.engine.policy_fingerprint = "policy-2".into();
        other_policy.tools_fingerprint = "tools-2".into();
        for stored in [other_engine, other_policy] {
            let d = decide(&input(Some(&req), Some(&stored)));
            assert_eq!(d.reason, DecisionReason::ContextEngineBindingMismatch);
            assert_eq!(
                (d.action, d.thread),
                (ProjectionAction::Project, ThreadChoice::New)
            );
        }
    }

    /// Row 4: another tool catalogue projects on a new thread (before the epoch check).
    #[test]
    fn bootstrap_tools_mismatch() {
        let req = bootstrap_request("e2");
        let mut stored = bootstrap_binding();
        stored.tools_fingerprint = "tools-2".into();
        let d = decide(&input(Some(&req), Some(&stored)));
        assert_eq!(d.reason, DecisionReason::DynamicToolsMismatch);
        assert_eq!(
            (d.action, d.thread),
            (ProjectionAction::Project, ThreadChoice::New)
        );
    }

    /// Row 5: a different epoch, fingerprint or recorded mode projects on a new thread.
    #[test]
    fn bootstrap_projection_mismatch() {
        let stored = bootstrap_binding();
        let new_epoch = bootstrap_request("e2");
        let mut new_fingerprint = bootstrap_request("e1");
        new_fingerprint.fingerprint = Some("fp2".into());
        let mut no_fingerprint = bootstrap_request("e1");
        no_fingerprint.fingerprint = None;
        for req in [new_epoch, new_fingerprint, no_fingerprint] {
            let d = decide(&input(Some(&req), Some(&stored)));
            assert_eq!(d.reason, DecisionReason::ProjectionMismatch, "{req:?}");
            assert_eq!(
                (d.action, d.thread),
                (ProjectionAction::Project, ThreadChoice::New)
            );
            assert_eq!(d.previous_epoch.as_deref(), Some("e1"));
        }
        let mut odd_mode = bootstrap_binding();
        odd_mode.engine.projection.as_mut().unwrap().mode = ProjectionMode::PerTurn;
        let mut odd_record = bootstrap_binding();
        odd_record.engine.projection_mode = Some(EffectiveMode::PerTurn);
        let req = bootstrap_request("e1");
        for stored in [odd_mode, odd_record] {
            assert_eq!(
                decide(&input(Some(&req), Some(&stored))).reason,
                DecisionReason::ProjectionMismatch
            );
        }
    }

    /// Row 6: everything matches → reuse the thread with the bare prompt; the epoch and
    /// fingerprint are compared trimmed, and a blank fingerprint is no fingerprint.
    #[test]
    fn bootstrap_matching_binding_reuses() {
        let stored = bootstrap_binding();
        let mut req = bootstrap_request("  e1\n");
        req.fingerprint = Some(" fp ".into());
        let d = decide(&input(Some(&req), Some(&stored)));
        assert_eq!(d.reason, DecisionReason::MatchingThreadBootstrapBinding);
        assert_eq!(d.action, ProjectionAction::Reuse);
        assert_eq!(d.thread, old_thread());
        assert!(!d.projected());
        assert_eq!(d.render_mode(), None);
        let mut no_fp = bootstrap_binding();
        no_fp.engine.projection.as_mut().unwrap().fingerprint = None;
        let mut blank_fp = bootstrap_request("e1");
        blank_fp.fingerprint = Some("   ".into());
        assert_eq!(
            decide(&input(Some(&blank_fp), Some(&no_fp))).action,
            ProjectionAction::Reuse
        );
        // A record without projectionMode (the documented shape) but with a projection matches too.
        let mut spec_shape = bootstrap_binding();
        spec_shape.engine.projection_mode = None;
        let req = bootstrap_request("e1");
        assert_eq!(
            decide(&input(Some(&req), Some(&spec_shape))).action,
            ProjectionAction::Reuse
        );
    }

    /// Per-turn mode projects every turn into the same thread of the same engine, whether the
    /// projection is absent or `per_turn`, even when policy or tools changed.
    #[test]
    fn per_turn_reuses_its_own_thread() {
        let per_turn = ContextProjection::per_turn();
        let mut stored = binding(ENGINE, Some(EffectiveMode::PerTurn), None);
        for requested in [None, Some(&per_turn)] {
            let d = decide(&input(requested, Some(&stored)));
            assert_eq!(d.reason, DecisionReason::PerTurnProjection);
            assert_eq!(d.action, ProjectionAction::Project);
            assert_eq!(d.thread, old_thread());
            assert_eq!(d.mode, EffectiveMode::PerTurn);
            assert_eq!(d.render_mode(), Some(RenderMode::PerTurn));
            assert_eq!(d.warning, None);
        }
        stored.engine.policy_fingerprint = "policy-2".into();
        stored.tools_fingerprint = "tools-2".into();
        assert_eq!(decide(&input(None, Some(&stored))).thread, old_thread());
        // A documented-shape record (no projectionMode, no projection) of the same engine is per-turn.
        let spec_shape = binding(ENGINE, None, None);
        assert_eq!(decide(&input(None, Some(&spec_shape))).thread, old_thread());
    }

    /// Per-turn mode starts a new thread without a binding, on an engine change (including a
    /// legacy-made binding), after a bootstrap binding (the switch), or after bare prompts.
    #[test]
    fn per_turn_new_thread_cases() {
        let cases = [
            None,
            Some(binding("other", Some(EffectiveMode::PerTurn), None)),
            Some(binding("legacy", Some(EffectiveMode::None), None)),
            Some(binding("legacy", None, None)),
            Some(bootstrap_binding()),
            Some(binding(ENGINE, None, Some("e1"))),
            Some(binding(ENGINE, Some(EffectiveMode::None), None)),
        ];
        for stored in &cases {
            let d = decide(&input(None, stored.as_ref()));
            assert_eq!(d.reason, DecisionReason::PerTurnProjection, "{stored:?}");
            assert_eq!(
                (d.action, d.thread),
                (ProjectionAction::Project, ThreadChoice::New),
                "{stored:?}"
            );
        }
    }

    /// A blank or missing epoch downgrades thread_bootstrap to per-turn, with a warning.
    #[test]
    fn blank_epoch_is_per_turn_with_warning() {
        let stored = binding(ENGINE, Some(EffectiveMode::PerTurn), None);
        let mut blank = bootstrap_request("  \t");
        let d = decide(&input(Some(&blank), Some(&stored)));
        assert_eq!(d.mode, EffectiveMode::PerTurn);
        assert_eq!(d.reason, DecisionReason::PerTurnProjection);
        assert_eq!(d.thread, old_thread());
        assert_eq!(d.epoch, None);
        let warning = d.warning.unwrap();
        assert_eq!(warning.epoch.as_deref(), Some("  \t"));
        assert_eq!(
            warning.to_string(),
            "contextProjection.mode is \"thread_bootstrap\" but the epoch \"  \\t\" is blank; projecting per turn"
        );
        blank.epoch = None;
        let d = decide(&input(Some(&blank), None));
        assert_eq!(
            d.warning.unwrap().to_string(),
            "contextProjection.mode is \"thread_bootstrap\" but there is no epoch; projecting per turn"
        );
    }

    /// An inactive engine sends the bare prompt: on the legacy thread it had, or on a new one
    /// when the stored thread was fed by an active engine (never re-fed mirrored history).
    #[test]
    fn inactive_engine_is_bare() {
        let req = bootstrap_request("e1");
        let legacy_made = [
            binding("legacy", Some(EffectiveMode::None), None),
            binding("legacy", None, None),
        ];
        let active_made = [
            bootstrap_binding(),
            binding(ENGINE, Some(EffectiveMode::PerTurn), None),
            binding(ENGINE, None, None),
            binding("legacy", None, Some("e1")),
            binding("legacy", Some(EffectiveMode::PerTurn), None),
        ];
        let inactive = |stored: Option<&ThreadBinding>| {
            let mut i = input(Some(&req), stored);
            i.engine_active = false;
            i.engine_id = "legacy";
            decide(&i)
        };
        for stored in &legacy_made {
            let d = inactive(Some(stored));
            assert_eq!(
                (d.action, d.reason, d.mode),
                (
                    ProjectionAction::Bare,
                    DecisionReason::LegacyEngine,
                    EffectiveMode::None
                )
            );
            assert_eq!(d.thread, old_thread(), "{stored:?}");
            assert_eq!(d.render_mode(), None);
        }
        for stored in &active_made {
            let d = inactive(Some(stored));
            assert_eq!(
                (d.action, d.reason),
                (ProjectionAction::Bare, DecisionReason::LegacyEngine)
            );
            assert_eq!(d.thread, ThreadChoice::New, "{stored:?}");
        }
        assert_eq!(inactive(None).thread, ThreadChoice::New);
        // Quarantined engine still named by its id, and an "active" legacy: both bare.
        let mut quarantined = input(Some(&req), None);
        quarantined.engine_active = false;
        assert_eq!(decide(&quarantined).reason, DecisionReason::LegacyEngine);
        let mut active_legacy = input(Some(&req), None);
        active_legacy.engine_id = "legacy";
        assert_eq!(decide(&active_legacy).action, ProjectionAction::Bare);
    }

    /// A binding for another backend kind or schema version counts as missing.
    #[test]
    fn foreign_bindings_are_missing() {
        let req = bootstrap_request("e1");
        let mut other_backend = bootstrap_binding();
        other_backend.backend = BackendKind::Responses;
        let mut other_schema = bootstrap_binding();
        other_schema.schema_version = 2;
        for stored in [other_backend, other_schema] {
            let d = decide(&input(Some(&req), Some(&stored)));
            assert_eq!(d.reason, DecisionReason::MissingThreadBinding);
            assert_eq!(d.thread, ThreadChoice::New);
            assert_eq!(d.previous_thread, None);
        }
        let mut per_turn_other = binding(ENGINE, Some(EffectiveMode::PerTurn), None);
        per_turn_other.backend = BackendKind::Mock;
        assert_eq!(
            decide(&input(None, Some(&per_turn_other))).thread,
            ThreadChoice::New
        );
    }

    /// The engine record built from a decision makes the next identical turn reuse the thread.
    #[test]
    fn engine_binding_round_trip() {
        let req = bootstrap_request("e1");
        let first = decide(&input(Some(&req), None));
        let mut stored = bootstrap_binding();
        stored.engine = first.engine_binding(ENGINE, POLICY);
        assert_eq!(
            stored.engine.projection_mode,
            Some(EffectiveMode::ThreadBootstrap)
        );
        assert_eq!(stored.engine.projection.as_ref().unwrap().epoch, "e1");
        let second = decide(&input(Some(&req), Some(&stored)));
        assert_eq!(second.action, ProjectionAction::Reuse);

        let first = decide(&input(None, None));
        stored.engine = first.engine_binding(ENGINE, POLICY);
        assert_eq!(stored.engine.projection, None);
        assert_eq!(stored.engine.projection_mode, Some(EffectiveMode::PerTurn));
        let second = decide(&input(None, Some(&stored)));
        assert_eq!(
            (second.action, second.thread),
            (ProjectionAction::Project, old_thread())
        );
    }

    /// Forcing a fresh thread turns a reuse into a projection and keeps the reason.
    #[test]
    fn force_new_thread() {
        let req = bootstrap_request("e1");
        let stored = bootstrap_binding();
        let d = decide(&input(Some(&req), Some(&stored))).force_new_thread();
        assert_eq!(d.action, ProjectionAction::Project);
        assert_eq!(d.thread, ThreadChoice::New);
        assert_eq!(d.reason, DecisionReason::MatchingThreadBootstrapBinding);
        assert_eq!(d.render_mode(), Some(RenderMode::Bootstrap));
    }
}
