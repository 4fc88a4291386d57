//! Projection onto threaded backends (docs/architecture.md#projection), as pure functions: no I/O, no clock, no
//! randomness. The harness calls [`plan_turn`] once per turn, which runs, in this order:
//!
//! 1. [`bound_assembled`] — fit the assembled result to the transcript byte limit (§9.3);
//! 2. [`decide`] — project or reuse, and on which thread (§9.4, §9.5), given the
//!    [`policy_fingerprint`] and [`tools_fingerprint`] the harness computed;
//! 3. [`effective_developer_instructions`] and [`plan_instruction_delivery`] (§9.6), where a
//!    `rotate` forces a new thread;
//! 4. [`render_turn_input`] — the rendered context only when the decision projects (§9.2).
//!
//! After the backend accepted the turn, the harness stores a [`ThreadBinding`] built from
//! [`ProjectionDecision::engine_binding`], keyed by [`binding_key`].
//!
//! Modules: [`plan`] (the composition), [`render`] (frame, elision, shapes, caps), [`redact`]
//! (defusing and secret redaction scanners), [`bound`], [`binding`], [`decision`] (the reason
//! table), [`mode`] ([`EffectiveMode`], shared by the decision and the binding),
//! [`instructions`], [`fingerprint`] (canonical JSON and SHA-256).

pub mod binding;
pub mod bound;
pub mod decision;
pub mod fingerprint;
pub mod instructions;
pub mod mode;
pub mod plan;
pub mod redact;
pub mod render;

pub use crate::contract::{message_json_bytes, transcript_json_bytes};
pub use binding::{
    binding_key, policy_canonical_json, policy_fingerprint, tool_catalogue_entry,
    tools_fingerprint, BindingProjection, EngineBinding, PolicyInputs, ThreadBinding,
    BINDING_SCHEMA_VERSION, POLICY_SCHEMA_VERSION,
};
pub use bound::{bound_assembled, Bounded, BOUNDED_EPOCH_PREFIX};
pub use decision::{
    decide, BlankEpochWarning, DecisionInput, DecisionReason, ProjectionAction, ProjectionDecision,
    ThreadChoice,
};
pub use fingerprint::{canonical_json, sha256_hex, write_canonical_json};
pub use instructions::{
    developer_instructions_sha256, effective_developer_instructions, plan_instruction_delivery,
    DriftPolicy, InstructionDelivery,
};
pub use mode::EffectiveMode;
pub use plan::{plan_turn, PlanInput, TurnPlan};
pub use render::{
    context_cap_chars, part_cap_chars, render_turn_input, RenderMode, RenderOptions, RenderedInput,
    CODEX_TURN_INPUT_LIMIT_CHARS, DEFAULT_CONTEXT_CAP_CHARS, FRAME_CLOSE_TAG, FRAME_HEAD,
    FRAME_TAIL, MAX_CONTEXT_CAP_CHARS,
};
