//! The whole projection plan of one turn (docs/architecture.md#projection), as one pure function: [`plan_turn`].
//!
//! It composes the steps the harness runs before it touches the backend: bound the assembled
//! result (§9.3), decide project-or-reuse and the thread (§9.4, §9.5), plan the delivery of
//! the developer instructions (§9.6) — where the `rotate` drift policy overrides the decision
//! with a new thread — and render the turn input (§9.2). Everything it needs comes in as a
//! [`PlanInput`]; the fingerprints are computed by the caller, which knows the engine and the
//! host's settings. It logs nothing: the decision's warning and the figures for the decision
//! log are part of the returned [`TurnPlan`].

use super::binding::ThreadBinding;
use super::bound::bound_assembled;
use super::decision::{decide, DecisionInput, ProjectionDecision, ThreadChoice};
use super::instructions::developer_instructions_sha256;
use super::instructions::{
    effective_developer_instructions, plan_instruction_delivery, DriftPolicy, InstructionDelivery,
};
use super::mode::EffectiveMode;
use super::render::{render_turn_input, split_framed_input, RenderMode, RenderOptions};
use crate::backend::{BackendKind, ContextDelivery};
use crate::contract::{AgentMessage, AssembleResult, PromptBuildResult};

/// Everything [`plan_turn`] needs to know about one turn.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The user's prompt of this turn.
    pub prompt: &'a str,
    /// Whether the serving engine is active (false: legacy, quarantined, degraded to legacy).
    pub engine_active: bool,
    /// The serving engine's id.
    pub engine_id: &'a str,
    /// The serving engine's policy fingerprint ([`super::binding::policy_fingerprint`]).
    pub policy_fingerprint: &'a str,
    /// The host's tool catalogue fingerprint ([`super::binding::tools_fingerprint`]).
    pub tools_fingerprint: &'a str,
    /// The engine's assembled result (before bounding).
    pub assembled: &'a AssembleResult,
    /// The session's stored binding, if any (`None` on a retry with the projection cleared).
    pub stored: Option<&'a ThreadBinding>,
    /// The backend the turn runs on.
    pub backend: BackendKind,
    /// The host's transcript byte limit for a projected view (docs/architecture.md#bounding).
    pub transcript_byte_limit: usize,
    /// The configured developer instructions (the engine's `systemPromptAddition` is added).
    pub developer_instructions: Option<&'a str>,
    /// What to do when the effective developer instructions drift from the thread's.
    pub drift_policy: DriftPolicy,
    /// Whether the backend sends the developer instructions with every request.
    pub sends_instructions_per_request: bool,
    /// The turn's token budget, when known (drives the context cap).
    pub token_budget: Option<u64>,
    /// The backend's limit on the whole turn input, in chars.
    pub turn_input_limit: usize,
    /// The engine's `before_prompt_build` hook result, if it ran: its system context wraps the
    /// engine's part of the developer instructions (so §9.6 drift applies to it), its context
    /// wraps this turn's prompt. Ignored for an inactive engine.
    pub prompt_build: Option<&'a PromptBuildResult>,
    /// Where a projecting turn puts its rendered context.
    pub context_delivery: ContextDelivery,
    /// The largest context (UTF-8 bytes) the backend passes on whole as additional context;
    /// a larger one goes in the turn input even under
    /// [`ContextDelivery::AdditionalContext`].
    pub additional_context_limit: usize,
}

/// What one turn sends, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnPlan {
    /// The project-or-reuse decision, after a `rotate` override (then on a new thread).
    pub decision: ProjectionDecision,
    /// The turn input: the rendered context and the prompt, or the bare prompt (also when the
    /// context goes as `additional_context`).
    pub input: String,
    /// The rendered context frame when it is delivered apart from the input
    /// ([`ContextDelivery::AdditionalContext`]); `None` when the turn projects nothing.
    pub additional_context: Option<String>,
    /// How the rendered context was delivered; `None` when the turn projects nothing.
    pub context_delivery: Option<ContextDelivery>,
    /// Chars of rendered context (in `input` or `additional_context`; 0 without a frame).
    pub rendered_context_chars: usize,
    /// Whether the assembled result was cut to the transcript byte limit.
    pub bounded: bool,
    /// The effective developer instructions (configured plus the engine's addition).
    pub effective_instructions: Option<String>,
    /// How the instructions reach the thread: never [`InstructionDelivery::Rotate`] (a
    /// rotation is planned as a new thread that receives them on start).
    pub delivery: InstructionDelivery,
    /// The developer instructions the reused thread holds, re-sent when it is resumed: the
    /// text its binding records, or — for a record that predates the text — the effective
    /// instructions when their hash is the recorded one. `None` on a new thread or when the
    /// thread's text is unknown.
    pub resume_instructions: Option<String>,
}

/// Plans one turn: bound, decide, plan the instruction delivery (a `rotate` forces a new
/// thread), render. Pure: the same input always gives the same plan.
pub fn plan_turn(input: &PlanInput<'_>) -> TurnPlan {
    let bounded = bound_assembled(input.assembled, input.transcript_byte_limit);
    // An inactive engine's output is not used at all: no projection, no instruction addition.
    let requested = if input.engine_active {
        bounded.projection()
    } else {
        None
    };
    let mut decision = decide(&DecisionInput {
        engine_active: input.engine_active,
        engine_id: input.engine_id,
        policy_fingerprint: input.policy_fingerprint,
        tools_fingerprint: input.tools_fingerprint,
        requested,
        stored: input.stored,
        backend: input.backend,
    });
    let hooks = input.prompt_build.filter(|_| input.engine_active);
    let addition = if input.engine_active {
        bounded.system_prompt_addition
    } else {
        None
    };
    let engine_part = match hooks {
        Some(h) => h.system_part(addition),
        None => addition.map(str::to_owned),
    };
    let effective_instructions =
        effective_developer_instructions(input.developer_instructions, engine_part.as_deref());
    let thread_is_new = matches!(decision.thread, ThreadChoice::New);
    let mut delivery = plan_instruction_delivery(
        effective_instructions.as_deref(),
        input
            .stored
            .map(|b| b.developer_instructions_sha256.as_str()),
        input.drift_policy,
        thread_is_new,
        input.sends_instructions_per_request,
    );
    if delivery == InstructionDelivery::Rotate {
        decision = decision.force_new_thread();
        delivery = InstructionDelivery::ThreadStart;
    }
    // A reused bootstrap thread whose additional context a compaction dropped gets it again
    // (re-rendered from this turn's assembled view), still as additional context.
    let refresh = input.context_delivery == ContextDelivery::AdditionalContext
        && decision.render_mode().is_none()
        && decision.mode == EffectiveMode::ThreadBootstrap
        && matches!(decision.thread, ThreadChoice::Reuse(_))
        && input.stored.is_some_and(|b| b.context_refresh);
    let render_mode = if refresh {
        Some(RenderMode::Bootstrap)
    } else {
        decision.render_mode()
    };
    let mut messages: &[AgentMessage] = if render_mode.is_some() {
        bounded.messages
    } else {
        &[]
    };
    let decorated = hooks.map(|h| h.decorate_prompt(input.prompt));
    if decorated.is_some() {
        // The renderer drops a trailing copy of the prompt; with a decorated prompt it would
        // no longer recognise it, so the copy of the original prompt is dropped here.
        if let Some((last, rest)) = messages.split_last() {
            if last.role == crate::contract::Role::User && last.plain_text() == input.prompt {
                messages = rest;
            }
        }
    }
    let rendered = render_turn_input(
        messages,
        decorated.as_deref().unwrap_or(input.prompt),
        &RenderOptions {
            mode: render_mode.unwrap_or(RenderMode::PerTurn),
            token_budget: input.token_budget,
            turn_input_limit: input.turn_input_limit,
        },
    );
    let framed = if rendered.context_chars > 0 {
        split_framed_input(&rendered.text)
    } else {
        None
    };
    let (text, additional_context, context_delivery) = match (framed, input.context_delivery) {
        (None, _) => (rendered.text, None, None),
        (Some(_), ContextDelivery::TurnInput) => {
            (rendered.text, None, Some(ContextDelivery::TurnInput))
        }
        (Some((fragment, _)), ContextDelivery::AdditionalContext)
            if fragment.len() > input.additional_context_limit =>
        {
            (rendered.text, None, Some(ContextDelivery::TurnInput))
        }
        (Some((fragment, prompt)), ContextDelivery::AdditionalContext) => (
            prompt.to_string(),
            Some(fragment.to_string()),
            Some(ContextDelivery::AdditionalContext),
        ),
    };
    let resume_instructions = match &decision.thread {
        ThreadChoice::New => None,
        ThreadChoice::Reuse(_) => input.stored.and_then(|b| {
            b.developer_instructions.clone().or_else(|| {
                let hash = developer_instructions_sha256(effective_instructions.as_deref());
                (hash == b.developer_instructions_sha256)
                    .then(|| effective_instructions.clone())
                    .flatten()
            })
        }),
    };
    TurnPlan {
        decision,
        input: text,
        additional_context,
        context_delivery,
        rendered_context_chars: rendered.context_chars,
        bounded: bounded.bounded,
        effective_instructions,
        delivery,
        resume_instructions,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::backend::ThreadId;
    use crate::contract::ContextProjection;
    use crate::projection::binding::{EngineBinding, BINDING_SCHEMA_VERSION};
    use crate::projection::decision::{DecisionReason, ProjectionAction};
    use crate::projection::instructions::developer_instructions_sha256;
    use crate::projection::mode::EffectiveMode;
    use crate::projection::render::{CODEX_TURN_INPUT_LIMIT_CHARS, FRAME_HEAD};

    const ENGINE: &str = "lossless";
    const POLICY: &str = "policy-1";
    const TOOLS: &str = "tools-1";
    const PROMPT: &str = "What next?";
    const HISTORY: &str = "we talked about the blue bicycle";
    const BASE: &str = "Be brief.";

    fn assembled(projection: Option<ContextProjection>, addition: Option<&str>) -> AssembleResult {
        AssembleResult {
            messages: vec![
                AgentMessage::user(HISTORY),
                AgentMessage::assistant("noted"),
            ]
            .into(),
            estimated_tokens: 10.0,
            system_prompt_addition: addition.map(str::to_owned),
            prompt_authority: None,
            context_projection: projection,
        }
    }

    fn input<'a>(
        assembled: &'a AssembleResult,
        stored: Option<&'a ThreadBinding>,
    ) -> PlanInput<'a> {
        PlanInput {
            prompt: PROMPT,
            engine_active: true,
            engine_id: ENGINE,
            policy_fingerprint: POLICY,
            tools_fingerprint: TOOLS,
            assembled,
            stored,
            backend: BackendKind::Codex,
            transcript_byte_limit: 4 * 1024 * 1024,
            developer_instructions: Some(BASE),
            drift_policy: DriftPolicy::Inject,
            sends_instructions_per_request: false,
            token_budget: None,
            turn_input_limit: CODEX_TURN_INPUT_LIMIT_CHARS,
            prompt_build: None,
            context_delivery: ContextDelivery::TurnInput,
            additional_context_limit: crate::backend::CODEX_ADDITIONAL_CONTEXT_BYTES,
        }
    }

    /// A binding as the harness writes it after a turn planned from `plan`, on `thread`.
    fn binding_after(plan: &TurnPlan, thread: &str) -> ThreadBinding {
        ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: "session:main:s1".into(),
            backend: BackendKind::Codex,
            thread_id: ThreadId(thread.into()),
            engine: plan.decision.engine_binding(ENGINE, POLICY),
            tools_fingerprint: TOOLS.into(),
            developer_instructions_sha256: developer_instructions_sha256(
                plan.effective_instructions.as_deref(),
            ),
            developer_instructions: plan.effective_instructions.clone(),
            context_refresh: false,
            generation: 1,
            updated_at: 0,
        }
    }

    fn legacy_binding(thread: &str) -> ThreadBinding {
        ThreadBinding {
            schema_version: BINDING_SCHEMA_VERSION,
            binding_key: "session:main:s1".into(),
            backend: BackendKind::Codex,
            thread_id: ThreadId(thread.into()),
            engine: EngineBinding {
                engine_id: "legacy".into(),
                policy_fingerprint: POLICY.into(),
                projection: None,
                projection_mode: Some(EffectiveMode::None),
            },
            tools_fingerprint: TOOLS.into(),
            developer_instructions_sha256: developer_instructions_sha256(Some(BASE)),
            developer_instructions: None,
            context_refresh: false,
            generation: 1,
            updated_at: 0,
        }
    }

    fn reused(thread: &str) -> ThreadChoice {
        ThreadChoice::Reuse(ThreadId(thread.into()))
    }

    /// An inactive engine sends the bare prompt: no frame, none of its projection or
    /// instruction addition, on the legacy thread it already had.
    #[test]
    fn inactive_engine_sends_the_bare_prompt() {
        let result = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Recall: X."),
        );
        let stored = legacy_binding("thr-legacy");
        let mut plan_input = input(&result, Some(&stored));
        plan_input.engine_active = false;
        plan_input.engine_id = "legacy";
        let plan = plan_turn(&plan_input);
        assert_eq!(plan.input, PROMPT);
        assert_eq!(plan.rendered_context_chars, 0);
        assert_eq!(plan.decision.action, ProjectionAction::Bare);
        assert_eq!(plan.decision.reason, DecisionReason::LegacyEngine);
        assert_eq!(plan.decision.mode, EffectiveMode::None);
        assert_eq!(plan.decision.thread, reused("thr-legacy"));
        assert_eq!(plan.effective_instructions.as_deref(), Some(BASE));
        assert_eq!(plan.delivery, InstructionDelivery::Unchanged);
        // Without a binding the bare prompt goes to a new thread with the instructions.
        let plan = plan_turn(&PlanInput {
            stored: None,
            ..plan_input
        });
        assert_eq!(plan.input, PROMPT);
        assert_eq!(plan.decision.thread, ThreadChoice::New);
        assert_eq!(plan.delivery, InstructionDelivery::ThreadStart);
    }

    /// The first thread_bootstrap turn projects the assembled context (framed, before the
    /// prompt) into a new thread that receives the instructions on start.
    #[test]
    fn first_bootstrap_turn_projects_on_a_new_thread() {
        let result = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Recall: X."),
        );
        let plan = plan_turn(&input(&result, None));
        assert_eq!(plan.decision.reason, DecisionReason::MissingThreadBinding);
        assert_eq!(plan.decision.action, ProjectionAction::Project);
        assert_eq!(plan.decision.mode, EffectiveMode::ThreadBootstrap);
        assert_eq!(plan.decision.thread, ThreadChoice::New);
        assert!(plan.input.starts_with(FRAME_HEAD), "{}", plan.input);
        assert!(plan.input.contains(HISTORY), "{}", plan.input);
        assert!(plan.input.ends_with(PROMPT), "{}", plan.input);
        assert!(plan.rendered_context_chars > HISTORY.len());
        assert!(!plan.bounded);
        assert_eq!(
            plan.effective_instructions.as_deref(),
            Some("Be brief.\n\nRecall: X.")
        );
        assert_eq!(plan.delivery, InstructionDelivery::ThreadStart);
    }

    /// The next turn with the same epoch reuses the thread with the bare prompt, and the
    /// unchanged instructions need no delivery.
    #[test]
    fn matching_bootstrap_reuses_with_the_bare_prompt() {
        let result = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&input(&result, None));
        let stored = binding_after(&first, "thr-1");
        let plan = plan_turn(&input(&result, Some(&stored)));
        assert_eq!(
            plan.decision.reason,
            DecisionReason::MatchingThreadBootstrapBinding
        );
        assert_eq!(plan.decision.action, ProjectionAction::Reuse);
        assert_eq!(plan.decision.thread, reused("thr-1"));
        assert_eq!(plan.input, PROMPT);
        assert_eq!(plan.rendered_context_chars, 0);
        assert_eq!(plan.delivery, InstructionDelivery::Unchanged);
    }

    /// Under the rotate policy, drifted instructions on a reusable thread force a new thread
    /// that receives them on start; the reuse becomes a projection and the reason stays.
    #[test]
    fn rotate_drift_forces_a_new_thread() {
        let before = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&input(&before, None));
        let stored = binding_after(&first, "thr-1");
        let drifted = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Recall: Y."),
        );
        let plan = plan_turn(&PlanInput {
            drift_policy: DriftPolicy::Rotate,
            ..input(&drifted, Some(&stored))
        });
        assert_eq!(plan.decision.thread, ThreadChoice::New);
        assert_eq!(plan.decision.action, ProjectionAction::Project);
        assert_eq!(
            plan.decision.reason,
            DecisionReason::MatchingThreadBootstrapBinding
        );
        assert_eq!(plan.delivery, InstructionDelivery::ThreadStart);
        assert!(plan.input.starts_with(FRAME_HEAD), "{}", plan.input);
        assert!(plan.input.contains(HISTORY), "{}", plan.input);
        assert_eq!(
            plan.effective_instructions.as_deref(),
            Some("Be brief.\n\nRecall: Y.")
        );
    }

    /// Under the inject policy, drifted instructions on a reused thread are injected as the
    /// new text, and the turn stays a bare-prompt reuse.
    #[test]
    fn inject_drift_on_a_reused_thread() {
        let before = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&input(&before, None));
        let stored = binding_after(&first, "thr-1");
        let drifted = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Recall: Y."),
        );
        let plan = plan_turn(&input(&drifted, Some(&stored)));
        assert_eq!(plan.decision.thread, reused("thr-1"));
        assert_eq!(plan.decision.action, ProjectionAction::Reuse);
        assert_eq!(plan.input, PROMPT);
        assert_eq!(
            plan.delivery,
            InstructionDelivery::Inject("Be brief.\n\nRecall: Y.".into())
        );
    }

    /// An assembled result over the transcript byte limit is bounded: the oldest turn is
    /// dropped, the projection becomes a bounded bootstrap on a new thread, and only the
    /// newest turn is rendered.
    #[test]
    fn bounded_view_projects_the_newest_turns() {
        let old = "an old turn ".repeat(40);
        let result = AssembleResult {
            messages: vec![
                AgentMessage::user(old.clone()),
                AgentMessage::assistant("ok"),
                AgentMessage::user(HISTORY),
                AgentMessage::assistant("noted"),
            ]
            .into(),
            estimated_tokens: 10.0,
            system_prompt_addition: None,
            prompt_authority: None,
            context_projection: Some(ContextProjection::per_turn()),
        };
        let plan = plan_turn(&PlanInput {
            transcript_byte_limit: 300,
            ..input(&result, None)
        });
        assert!(plan.bounded);
        assert_eq!(plan.decision.mode, EffectiveMode::ThreadBootstrap);
        assert!(plan
            .decision
            .epoch
            .as_deref()
            .is_some_and(|e| e.starts_with("bounded:")));
        assert_eq!(plan.decision.thread, ThreadChoice::New);
        assert!(plan.input.contains(HISTORY), "{}", plan.input);
        assert!(!plan.input.contains(old.trim()), "{}", plan.input);
        let unbounded = plan_turn(&input(&result, None));
        assert!(!unbounded.bounded);
        assert_eq!(unbounded.decision.mode, EffectiveMode::PerTurn);
        assert!(unbounded.input.contains(old.trim()));
    }

    /// A backend that sends the instructions with every request needs no delivery even when
    /// they drifted, under either policy: the thread is reused.
    #[test]
    fn per_request_instructions_need_no_delivery() {
        let before = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&input(&before, None));
        let stored = binding_after(&first, "thr-1");
        let drifted = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Recall: Y."),
        );
        for drift_policy in [DriftPolicy::Inject, DriftPolicy::Rotate] {
            let plan = plan_turn(&PlanInput {
                drift_policy,
                sends_instructions_per_request: true,
                ..input(&drifted, Some(&stored))
            });
            assert_eq!(plan.delivery, InstructionDelivery::Unchanged);
            assert_eq!(plan.decision.thread, reused("thr-1"));
            assert_eq!(plan.input, PROMPT);
        }
    }

    /// The turn-input limit passed in caps the rendered input.
    #[test]
    fn turn_input_limit_caps_the_input() {
        let long = "x".repeat(5_000);
        let result = AssembleResult {
            messages: vec![AgentMessage::user(long), AgentMessage::assistant("ok")].into(),
            ..assembled(Some(ContextProjection::per_turn()), None)
        };
        let limit = 2_000;
        let plan = plan_turn(&PlanInput {
            turn_input_limit: limit,
            ..input(&result, None)
        });
        assert!(plan.input.chars().count() <= limit, "{}", plan.input.len());
        assert!(plan.input.ends_with(PROMPT));
        let roomy = plan_turn(&input(&result, None));
        assert!(roomy.input.chars().count() > limit);
    }

    /// `before_prompt_build` results: the system context wraps the engine's addition in the
    /// developer instructions (a change there is drift, delivered by injection on a reused
    /// thread), the context wraps the prompt in the turn input (also for a bare-prompt reuse);
    /// an inactive engine's hook result is ignored.
    #[test]
    fn prompt_build_hook_results_wrap_instructions_and_prompt() {
        let hook = PromptBuildResult {
            prepend_system_context: Some("Plugin guidance.".into()),
            prepend_context: Some("Summary: earlier.".into()),
            ..Default::default()
        };
        let assembled = assembled(
            Some(ContextProjection::thread_bootstrap("e1")),
            Some("Addition."),
        );
        let first = plan_turn(&PlanInput {
            prompt_build: Some(&hook),
            ..input(&assembled, None)
        });
        assert_eq!(
            first.effective_instructions.as_deref(),
            Some(format!("{BASE}\n\nPlugin guidance.\n\nAddition.").as_str())
        );
        assert!(
            first
                .input
                .ends_with(&format!("Summary: earlier.\n\n{PROMPT}")),
            "{}",
            first.input
        );
        // Reuse: the bare prompt still carries the hook's context; instructions unchanged.
        let stored = binding_after(&first, "thr-1");
        let reuse = plan_turn(&PlanInput {
            prompt_build: Some(&hook),
            ..input(&assembled, Some(&stored))
        });
        assert_eq!(reuse.decision.thread, reused("thr-1"));
        assert_eq!(reuse.input, format!("Summary: earlier.\n\n{PROMPT}"));
        assert_eq!(reuse.delivery, InstructionDelivery::Unchanged);
        // A changed system context is drift: injected into the reused thread.
        let changed = PromptBuildResult {
            prepend_system_context: Some("New guidance.".into()),
            ..hook.clone()
        };
        let drift = plan_turn(&PlanInput {
            prompt_build: Some(&changed),
            ..input(&assembled, Some(&stored))
        });
        assert!(
            matches!(&drift.delivery, InstructionDelivery::Inject(text) if text.contains("New guidance.")),
            "{:?}",
            drift.delivery
        );
        // Inactive engine: ignored.
        let inactive = plan_turn(&PlanInput {
            engine_active: false,
            prompt_build: Some(&hook),
            ..input(&assembled, None)
        });
        assert_eq!(inactive.input, PROMPT);
        assert_eq!(inactive.effective_instructions.as_deref(), Some(BASE));
    }

    /// With additional-context delivery a projecting turn's input is the bare prompt and the
    /// frame (without the "Current user request" part) goes apart, byte for byte the head of
    /// the turn-input rendering; a reused turn sends none.
    #[test]
    fn additional_context_splits_the_frame_from_the_prompt() {
        let result = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let framed = plan_turn(&input(&result, None));
        let split = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            ..input(&result, None)
        });
        assert_eq!(split.input, PROMPT);
        assert_eq!(
            split.context_delivery,
            Some(ContextDelivery::AdditionalContext)
        );
        assert_eq!(framed.context_delivery, Some(ContextDelivery::TurnInput));
        let fragment = split.additional_context.clone().unwrap();
        assert!(fragment.starts_with(FRAME_HEAD), "{fragment}");
        assert!(
            fragment.ends_with("\n</conversation_context>"),
            "{fragment}"
        );
        assert!(fragment.contains(HISTORY));
        assert!(!fragment.contains("Current user request"));
        assert!(framed.input.starts_with(&fragment));
        assert_eq!(split.rendered_context_chars, framed.rendered_context_chars);
        let stored = binding_after(&split, "thr-1");
        let reused = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            ..input(&result, Some(&stored))
        });
        assert_eq!(reused.decision.action, ProjectionAction::Reuse);
        assert_eq!(reused.input, PROMPT);
        assert_eq!(reused.additional_context, None);
        assert_eq!(reused.context_delivery, None);
    }

    /// A reused bootstrap thread marked for a context refresh (compacted after receiving its
    /// context as additional context) gets the context again, apart from the bare prompt,
    /// without a new thread; under turn-input delivery the mark changes nothing.
    #[test]
    fn compacted_additional_context_is_sent_again() {
        let result = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            ..input(&result, None)
        });
        let mut stored = binding_after(&first, "thr-1");
        stored.context_refresh = true;
        let again = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            ..input(&result, Some(&stored))
        });
        assert_eq!(again.decision.thread, reused("thr-1"));
        assert_eq!(again.input, PROMPT);
        assert_eq!(again.additional_context, first.additional_context);
        let turn_input = plan_turn(&input(&result, Some(&stored)));
        assert_eq!(turn_input.input, PROMPT);
        assert_eq!(turn_input.additional_context, None);
    }

    /// A context larger than the backend passes on whole as additional context goes in the
    /// turn input instead (and the plan says so).
    #[test]
    fn an_oversized_context_goes_in_the_turn_input() {
        let result = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let fits = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            ..input(&result, None)
        });
        let size = fits.additional_context.as_deref().unwrap().len();
        let too_big = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            additional_context_limit: size - 1,
            ..input(&result, None)
        });
        assert_eq!(too_big.context_delivery, Some(ContextDelivery::TurnInput));
        assert_eq!(too_big.additional_context, None);
        assert!(too_big.input.starts_with(FRAME_HEAD), "{}", too_big.input);
        assert!(too_big.input.ends_with(PROMPT));
        let exact = plan_turn(&PlanInput {
            context_delivery: ContextDelivery::AdditionalContext,
            additional_context_limit: size,
            ..input(&result, None)
        });
        assert_eq!(
            exact.context_delivery,
            Some(ContextDelivery::AdditionalContext)
        );
    }

    /// A reused thread is resumed with the instructions its binding records; a record without
    /// the text falls back to the effective instructions when their hash matches, else none;
    /// a new thread needs no resume.
    #[test]
    fn resume_instructions_come_from_the_binding() {
        let result = assembled(Some(ContextProjection::thread_bootstrap("e1")), None);
        let first = plan_turn(&input(&result, None));
        assert_eq!(first.resume_instructions, None);
        let mut stored = binding_after(&first, "thr-1");
        stored.developer_instructions = Some("What the thread got.".into());
        let plan = plan_turn(&input(&result, Some(&stored)));
        assert_eq!(
            plan.resume_instructions.as_deref(),
            Some("What the thread got.")
        );
        stored.developer_instructions = None;
        let plan = plan_turn(&input(&result, Some(&stored)));
        assert_eq!(plan.resume_instructions.as_deref(), Some(BASE));
        stored.developer_instructions_sha256 = "unknown".into();
        let plan = plan_turn(&input(&result, Some(&stored)));
        assert_eq!(plan.resume_instructions, None);
    }
}
