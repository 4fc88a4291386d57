//! Property tests of the projection core (docs/architecture.md#projection): rendering, bounding and the decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxbridge::backend::{BackendKind, ThreadId};
use ctxbridge::contract::{
    AgentMessage, AssembleResult, ContentPart, ContextProjection, MessageContent, ProjectionMode,
    Role,
};
use ctxbridge::projection::{
    bound_assembled, context_cap_chars, decide, render_turn_input, transcript_json_bytes,
    BindingProjection, DecisionInput, EffectiveMode, EngineBinding, ProjectionAction, RenderMode,
    RenderOptions, ThreadBinding, ThreadChoice, BINDING_SCHEMA_VERSION,
    CODEX_TURN_INPUT_LIMIT_CHARS, FRAME_CLOSE_TAG, FRAME_HEAD, FRAME_TAIL,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const FRAME_OPEN_TAG: &str = "<conversation_context>";

/// Text pieces that stress the renderer: framing tags, sigils, secrets, multi-byte chars,
/// long runs.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .,:=\n]{0,40}",
        any::<String>(),
        Just(FRAME_CLOSE_TAG.to_string()),
        Just(FRAME_OPEN_TAG.to_string()),
        Just("< /Conversation_Context >".to_string()),
        Just("Current user request:\n".to_string()),
        Just("$deploy".to_string()),
        Just("[@Helper](plugin://helper@x)".to_string()),
        Just("API_KEY=abc123 Bearer abcdef123456".to_string()),
        (
            prop::sample::select(vec!['a', 'é', '😀', '\n', '<']),
            0usize..9_000
        )
            .prop_map(|(c, n)| std::iter::repeat(c).take(n).collect()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(fragment(), 0..5).prop_map(|parts| parts.concat())
}

fn part() -> impl Strategy<Value = ContentPart> {
    prop_oneof![
        text().prop_map(ContentPart::text),
        Just(ContentPart::Image { extra: Map::new() }),
        (text(), text(), text()).prop_map(|(id, name, arg)| ContentPart::tool_call(
            id,
            name,
            json!({"arg": arg, "n": 1, "flag": true, "list": [arg.len()]})
        )),
        (text(), text()).prop_map(|(id, content)| ContentPart::ToolResult {
            tool_call_id: id,
            content: Value::String(content),
            extra: Map::new(),
        }),
        text().prop_map(|t| ContentPart::Other(json!({"type": t}))),
    ]
}

fn role() -> impl Strategy<Value = Role> {
    prop::sample::select(vec![
        Role::User,
        Role::Assistant,
        Role::ToolResult,
        Role::CompactionSummary,
        Role::BranchSummary,
        Role::Custom,
    ])
}

fn message() -> impl Strategy<Value = AgentMessage> {
    let content = prop_oneof![
        text().prop_map(MessageContent::Text),
        prop::collection::vec(part(), 0..4).prop_map(MessageContent::Parts),
    ];
    (
        role(),
        prop::option::of(content),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(|(role, content, tool_call_id, summary)| {
            let mut m = AgentMessage::user("");
            m.role = role;
            m.content = content;
            m.tool_call_id = tool_call_id;
            m.summary = summary;
            m
        })
}

fn options() -> impl Strategy<Value = RenderOptions> {
    (
        prop::sample::select(vec![RenderMode::PerTurn, RenderMode::Bootstrap]),
        prop::option::of(prop_oneof![0u64..40_000, any::<u64>()]),
        prop_oneof![Just(CODEX_TURN_INPUT_LIMIT_CHARS), 0usize..30_000],
    )
        .prop_map(|(mode, token_budget, turn_input_limit)| RenderOptions {
            mode,
            token_budget,
            turn_input_limit,
        })
}

/// The text between the frame tags of a framed input.
fn context_of<'a>(text: &'a str, prompt: &str) -> &'a str {
    let without_prompt = text.strip_suffix(prompt).unwrap();
    without_prompt
        .strip_prefix(FRAME_HEAD)
        .and_then(|t| t.strip_suffix(FRAME_TAIL))
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Rendering is deterministic: the same input gives the same bytes.
    #[test]
    fn rendering_is_deterministic(messages in prop::collection::vec(message(), 0..12), prompt in text(), options in options()) {
        let a = render_turn_input(&messages, &prompt, &options);
        let b = render_turn_input(&messages.clone(), &prompt.clone(), &options);
        prop_assert_eq!(a, b);
    }

    /// The input never exceeds the turn-input limit, the context never exceeds its cap, and
    /// the reported char counts are the real ones (chars = Unicode scalar values; cuts never
    /// split one, or slicing would have panicked).
    #[test]
    fn rendering_respects_caps_and_limits(messages in prop::collection::vec(message(), 0..12), prompt in text(), options in options()) {
        let out = render_turn_input(&messages, &prompt, &options);
        prop_assert_eq!(out.text_chars, out.text.chars().count());
        prop_assert!(out.text_chars <= options.turn_input_limit);
        prop_assert!(out.context_chars <= out.cap_chars);
        prop_assert!(out.cap_chars <= context_cap_chars(options.token_budget));
        if out.projected {
            prop_assert_eq!(context_of(&out.text, &prompt).chars().count(), out.context_chars);
        } else {
            prop_assert_eq!(out.context_chars, 0);
        }
    }

    /// The current request is always kept whole when it fits the limit with the frame: the
    /// input ends with it (or is it).
    #[test]
    fn rendering_keeps_the_current_request(messages in prop::collection::vec(message(), 0..12), prompt in text(), options in options()) {
        let out = render_turn_input(&messages, &prompt, &options);
        let prompt_chars = prompt.chars().count();
        if prompt_chars + FRAME_HEAD.len() + FRAME_TAIL.len() <= options.turn_input_limit {
            prop_assert!(out.text.ends_with(&prompt));
            prop_assert_eq!(out.prompt_truncated_chars, 0);
            if !out.projected {
                prop_assert_eq!(&out.text, &prompt);
            }
        } else if prompt_chars <= options.turn_input_limit {
            prop_assert_eq!(&out.text, &prompt);
        } else {
            prop_assert!(out.prompt_truncated_chars > 0);
        }
    }

    /// Message content can neither close nor open the frame, nor carry skill/plugin sigils:
    /// the output has exactly the frame's own tags (plus any the prompt itself contains).
    #[test]
    fn message_content_cannot_escape_the_frame(messages in prop::collection::vec(message(), 0..12), prompt in text(), options in options()) {
        let out = render_turn_input(&messages, &prompt, &options);
        let in_prompt_close = prompt.matches(FRAME_CLOSE_TAG).count();
        let in_prompt_open = prompt.matches(FRAME_OPEN_TAG).count();
        if out.projected {
            prop_assert_eq!(out.text.matches(FRAME_CLOSE_TAG).count(), 1 + in_prompt_close);
            prop_assert_eq!(out.text.matches(FRAME_OPEN_TAG).count(), 1 + in_prompt_open);
            let context = context_of(&out.text, &prompt).to_ascii_lowercase();
            prop_assert!(!context.contains("plugin://"));
            prop_assert!(!context.contains("[@"));
            let bytes = context.as_bytes();
            prop_assert!(!bytes.windows(2).any(|w| w[0] == b'$' && (w[1].is_ascii_alphabetic() || w[1] == b'_')));
        } else if out.prompt_truncated_chars == 0 {
            prop_assert_eq!(out.text.matches(FRAME_CLOSE_TAG).count(), in_prompt_close);
        } else {
            // A prompt cut to fit the turn-input limit may lose its own tags, never gain one.
            prop_assert!(out.text.matches(FRAME_CLOSE_TAG).count() <= in_prompt_close);
        }
    }

    /// A random-looking `sk-` key in a tool result never reaches a bootstrap rendering.
    #[test]
    fn bootstrap_never_leaks_api_keys(before in "[a-z ]{0,20}", key in "[A-Za-z]{8}[0-9][A-Za-z0-9]{15,30}", after in "[a-z ]{0,20}") {
        let secret = format!("sk-{key}");
        let result = AgentMessage::tool_result("c1", format!("{before} {secret} {after}"));
        let out = render_turn_input(&[result], "p", &RenderOptions { mode: RenderMode::Bootstrap, ..RenderOptions::default() });
        prop_assert!(out.text.contains("sk-[REDACTED]"));
        prop_assert!(!out.text.contains(&secret));
    }
}

fn simple_message() -> impl Strategy<Value = AgentMessage> {
    let call_ids = prop::sample::select(vec!["c1", "c2", "c3"]);
    prop_oneof![
        "[a-z]{0,60}".prop_map(AgentMessage::user),
        "[a-z]{0,60}".prop_map(AgentMessage::assistant),
        (call_ids.clone(), "[a-z]{0,40}").prop_map(|(id, t)| AgentMessage::tool_result(id, t)),
        call_ids.prop_map(|id| {
            let mut m = AgentMessage::assistant("");
            m.content = Some(MessageContent::Parts(vec![ContentPart::tool_call(
                id,
                "shell",
                json!({"cmd": "ls"}),
            )]));
            m
        }),
    ]
}

/// The call ids a message answers, and the ones it makes.
fn results_and_calls(m: &AgentMessage) -> (Vec<String>, Vec<String>) {
    let mut results = Vec::new();
    if m.role == Role::ToolResult {
        results.extend(m.tool_call_id.clone());
    }
    let calls = m.tool_call_ids().into_iter().map(str::to_owned).collect();
    (results, calls)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Bounding keeps a suffix of whole user turns within the limit, never separates a tool
    /// result from its call, and leaves a fitting result untouched.
    #[test]
    fn bounding_keeps_whole_turns_within_the_limit(messages in prop::collection::vec(simple_message(), 0..30), limit in 0usize..3_000) {
        let result = AssembleResult {
            messages: messages.into(),
            context_projection: Some(ContextProjection::per_turn()),
            ..AssembleResult::default()
        };
        let bounded = bound_assembled(&result, limit);
        let total = transcript_json_bytes(&result.messages);
        prop_assert_eq!(bounded.transcript_bytes, total);
        if total <= limit || result.messages.is_empty() {
            prop_assert!(!bounded.bounded);
            prop_assert_eq!(bounded.messages, result.messages.as_slice());
            prop_assert_eq!(bounded.projection(), result.context_projection.as_ref());
            return Ok(());
        }
        prop_assert!(bounded.bounded);
        let start = bounded.omitted_messages;
        prop_assert_eq!(bounded.messages, &result.messages[start..]);
        // An empty retained transcript (2 bytes) is the floor.
        prop_assert!(transcript_json_bytes(bounded.messages) <= limit.max(2));
        prop_assert_eq!(bounded.retained_bytes, transcript_json_bytes(bounded.messages));
        if let Some(first) = bounded.messages.first() {
            prop_assert_eq!(first.role, Role::User);
        }
        let projection = bounded.projection().unwrap();
        prop_assert_eq!(projection.mode, ProjectionMode::ThreadBootstrap);
        prop_assert!(projection.epoch.as_deref().unwrap().starts_with("bounded:"));
        // Pair integrity: no retained result whose (earlier) call was dropped.
        let mut dropped_calls = Vec::new();
        for m in &result.messages[..start] {
            dropped_calls.extend(results_and_calls(m).1);
        }
        let mut kept_calls: Vec<String> = Vec::new();
        for m in bounded.messages {
            let (results, calls) = results_and_calls(m);
            for id in results {
                prop_assert!(kept_calls.contains(&id) || !dropped_calls.contains(&id), "result {id} kept without its call");
            }
            kept_calls.extend(calls);
        }
    }
}

const ENGINES: [&str; 3] = ["legacy", "a", "b"];

#[derive(Debug, Clone)]
struct DecisionCase {
    engine_active: bool,
    engine_id: &'static str,
    policy: &'static str,
    tools: &'static str,
    requested: Option<ContextProjection>,
    stored: Option<ThreadBinding>,
    backend: BackendKind,
}

fn epoch() -> impl Strategy<Value = Option<String>> {
    prop::option::of(
        prop::sample::select(vec!["", "  ", "e1", " e1 ", "e2"]).prop_map(str::to_owned),
    )
}

fn fingerprint() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec!["", "f1", "f2"]).prop_map(str::to_owned))
}

fn backend() -> impl Strategy<Value = BackendKind> {
    prop::sample::select(vec![BackendKind::Codex, BackendKind::Responses])
}

fn decision_case() -> impl Strategy<Value = DecisionCase> {
    let requested = prop::option::of(
        (
            prop::sample::select(vec![
                ProjectionMode::PerTurn,
                ProjectionMode::ThreadBootstrap,
            ]),
            epoch(),
            fingerprint(),
        )
            .prop_map(|(mode, epoch, fingerprint)| ContextProjection {
                mode,
                epoch,
                fingerprint,
            }),
    );
    let stored_projection = prop::option::of(
        (
            prop::sample::select(vec![
                ProjectionMode::PerTurn,
                ProjectionMode::ThreadBootstrap,
            ]),
            prop::sample::select(vec!["e1", "e2"]),
            fingerprint(),
        )
            .prop_map(|(mode, epoch, fingerprint)| BindingProjection {
                mode,
                epoch: epoch.into(),
                fingerprint,
            }),
    );
    let stored = prop::option::of(
        (
            prop::sample::select(ENGINES.to_vec()),
            prop::sample::select(vec!["p1", "p2"]),
            prop::sample::select(vec!["t1", "t2"]),
            stored_projection,
            prop::option::of(prop::sample::select(vec![
                EffectiveMode::None,
                EffectiveMode::PerTurn,
                EffectiveMode::ThreadBootstrap,
            ])),
            backend(),
            prop::sample::select(vec![1u32, 1, 1, 2]),
        )
            .prop_map(
                |(engine, policy, tools, projection, projection_mode, backend, schema_version)| {
                    ThreadBinding {
                        schema_version,
                        binding_key: "session:main:s".into(),
                        backend,
                        thread_id: ThreadId("thr".into()),
                        engine: EngineBinding {
                            engine_id: engine.into(),
                            policy_fingerprint: policy.into(),
                            projection,
                            projection_mode,
                        },
                        tools_fingerprint: tools.into(),
                        developer_instructions_sha256: String::new(),
                        developer_instructions: None,
                        context_refresh: false,
                        generation: 0,
                        updated_at: 0,
                    }
                },
            ),
    );
    (
        any::<bool>(),
        prop::sample::select(ENGINES.to_vec()),
        prop::sample::select(vec!["p1", "p2"]),
        prop::sample::select(vec!["t1", "t2"]),
        requested,
        stored,
        backend(),
    )
        .prop_map(
            |(engine_active, engine_id, policy, tools, requested, stored, backend)| DecisionCase {
                engine_active,
                engine_id,
                policy,
                tools,
                requested,
                stored,
                backend,
            },
        )
}

fn trimmed(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// A thread is reused with the bare prompt exactly when the engine is active and engine,
    /// policy, tools, mode, epoch and fingerprint all match a usable binding; a stored thread
    /// is only ever continued by the engine kind that fed it.
    #[test]
    fn reuse_only_when_everything_matches(case in decision_case()) {
        let d = decide(&DecisionInput {
            engine_active: case.engine_active,
            engine_id: case.engine_id,
            policy_fingerprint: case.policy,
            tools_fingerprint: case.tools,
            requested: case.requested.as_ref(),
            stored: case.stored.as_ref(),
            backend: case.backend,
        });
        let active = case.engine_active && case.engine_id != "legacy";
        let usable = case.stored.as_ref().filter(|b| b.backend == case.backend && b.schema_version == BINDING_SCHEMA_VERSION);
        let bootstrap_epoch = case
            .requested
            .as_ref()
            .filter(|p| p.mode == ProjectionMode::ThreadBootstrap)
            .and_then(|p| trimmed(&p.epoch));
        let everything_matches = match (usable, bootstrap_epoch) {
            (Some(b), Some(epoch)) => b.engine.projection.as_ref().is_some_and(|p| {
                b.engine.engine_id == case.engine_id
                    && b.engine.policy_fingerprint == case.policy
                    && b.tools_fingerprint == case.tools
                    && p.mode == ProjectionMode::ThreadBootstrap
                    && matches!(b.engine.projection_mode, None | Some(EffectiveMode::ThreadBootstrap))
                    && p.epoch == epoch
                    && p.fingerprint.as_deref() == trimmed(&case.requested.as_ref().unwrap().fingerprint)
            }),
            _ => false,
        };
        prop_assert_eq!(d.action == ProjectionAction::Reuse, active && everything_matches);
        prop_assert_eq!(d.action == ProjectionAction::Bare, !active);
        if let ThreadChoice::Reuse(id) = &d.thread {
            let b = usable.unwrap();
            prop_assert_eq!(id, &b.thread_id);
            if active {
                prop_assert_eq!(&b.engine.engine_id, case.engine_id);
            } else {
                prop_assert!(b.engine.engine_id == "legacy" && b.engine.projection.is_none());
            }
        }
        if d.action == ProjectionAction::Project && matches!(d.thread, ThreadChoice::Reuse(_)) {
            prop_assert_eq!(d.mode, EffectiveMode::PerTurn);
        }
        prop_assert_eq!(d.warning.is_some(), active && case.requested.as_ref().is_some_and(|p| p.mode == ProjectionMode::ThreadBootstrap) && bootstrap_epoch.is_none());
    }
}
