//! The bench engine: a context engine whose assembled context has a known, steady shape, so the
//! three projection modes can be compared on exactly the same input.
//!
//! Its view of a session is `background(epoch) + the session's transcript`:
//! - the **background** stands for what a real engine retrieves or summarises (a compaction
//!   summary and a few older exchanges), about `background_chars` characters, deterministic
//!   text that differs from one epoch to the next;
//! - the **transcript** grows by one exchange (prompt + reply) per turn;
//! - the **epoch** is `bench-epoch-<k>` with `k = completed turns / epoch_turns`, so it changes
//!   every `epoch_turns` turns (turns 1–10 are epoch 0, 11–20 epoch 1, …).
//!
//! The projection mode it asks for (`per_turn` or `thread_bootstrap`) is configured. Its
//! assemble time is accumulated so the overhead benchmark can tell engine time from harness
//! time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use crate::contract::{
    estimate_tokens, AgentMessage, AssembleParams, AssembleResult, CompactParams, CompactResult,
    ContextEngine, ContextProjection, EngineError, EngineInfo, EngineMethod, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, Messages, MethodSet, ProjectionMode, Role,
};
use crate::util::lock;

/// The engine's id.
pub const BENCH_ENGINE_ID: &str = "ctxbridge-bench";

/// The `systemPromptAddition` the engine returns every turn (constant: no drift).
pub const BENCH_SYSTEM_PROMPT_ADDITION: &str =
    "Context is assembled by the ctxbridge bench engine; treat it as background.";

/// Settings of the bench engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchEngineConfig {
    /// Characters of background context per epoch (the assembled context before any exchange).
    pub background_chars: usize,
    /// Turns per epoch.
    pub epoch_turns: usize,
    /// The projection mode the engine asks for.
    pub projection: ProjectionMode,
}

impl Default for BenchEngineConfig {
    /// About 20 KB of background, an epoch change every 10 turns, thread_bootstrap.
    fn default() -> Self {
        BenchEngineConfig {
            background_chars: 20_000,
            epoch_turns: 10,
            projection: ProjectionMode::ThreadBootstrap,
        }
    }
}

/// What the engine shows the model for one turn (a pure function of the transcript).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchView {
    pub messages: Vec<AgentMessage>,
    pub epoch: String,
    pub epoch_index: usize,
}

/// The view the engine last assembled for a session, and what it was built from: the next
/// turn's view is this one plus the transcript's new messages while the epoch stays (an
/// engine keeping its view incrementally, so its assemble does not copy the whole session).
#[derive(Debug)]
struct SessionView {
    epoch_index: usize,
    /// Transcript messages in the view (after the background).
    transcript_len: usize,
    /// `user` messages among them.
    users: usize,
    /// Characters of the view's plain text.
    chars: usize,
    messages: Messages,
}

/// The bench engine.
#[derive(Debug)]
pub struct BenchEngine {
    config: BenchEngineConfig,
    backgrounds: Mutex<HashMap<usize, Arc<[AgentMessage]>>>,
    views: Mutex<HashMap<String, SessionView>>,
    assemble_nanos: AtomicU64,
}

impl BenchEngine {
    pub fn new(config: BenchEngineConfig) -> Self {
        BenchEngine {
            config: BenchEngineConfig {
                epoch_turns: config.epoch_turns.max(1),
                ..config
            },
            backgrounds: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            assemble_nanos: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> BenchEngineConfig {
        self.config
    }

    /// Nanoseconds spent in `assemble` so far.
    pub fn assemble_nanos(&self) -> u64 {
        self.assemble_nanos.load(Ordering::Relaxed)
    }

    /// The epoch of a turn whose transcript (before the turn) is `transcript`.
    pub fn epoch_index(&self, transcript: &[AgentMessage]) -> usize {
        let completed_turns = transcript.iter().filter(|m| m.role == Role::User).count();
        completed_turns / self.config.epoch_turns
    }

    /// The epoch label of an epoch index.
    pub fn epoch_label(index: usize) -> String {
        format!("bench-epoch-{index}")
    }

    /// The background of an epoch (built once, then shared).
    pub fn background(&self, epoch_index: usize) -> Arc<[AgentMessage]> {
        // Plain cache of immutable values: a panic elsewhere cannot leave it inconsistent.
        let mut cache = lock(&self.backgrounds);
        cache
            .entry(epoch_index)
            .or_insert_with(|| build_background(epoch_index, self.config.background_chars).into())
            .clone()
    }

    /// The engine's view of a turn whose transcript (before the turn) is `transcript`.
    pub fn view(&self, transcript: Vec<AgentMessage>) -> BenchView {
        let epoch_index = self.epoch_index(&transcript);
        let background = self.background(epoch_index);
        let mut messages = Vec::with_capacity(background.len() + transcript.len());
        messages.extend(background.iter().cloned());
        messages.extend(transcript);
        BenchView {
            messages,
            epoch: Self::epoch_label(epoch_index),
            epoch_index,
        }
    }

    /// The view of a turn whose transcript (before the turn) is `transcript`, as [`Self::view`]
    /// gives it, grown from the session's previous view when that one is a prefix of it in the
    /// same epoch (O(new messages)); rebuilt otherwise. Also its plain-text size.
    fn session_view(
        &self,
        session_id: &str,
        transcript: &[AgentMessage],
    ) -> (Messages, String, usize) {
        // Plain map of owned values: a panic elsewhere cannot leave it inconsistent.
        let previous = lock(&self.views).remove(session_id);
        // The previous view still describes this transcript's start (same length prefix, same
        // last message: the host's transcript only grows unless it is rewritten).
        let grown = previous.filter(|v| {
            v.transcript_len <= transcript.len()
                && (v.transcript_len == 0
                    || v.messages.last() == transcript.get(v.transcript_len - 1))
        });
        let view = match grown {
            Some(mut v) => {
                let new = &transcript[v.transcript_len..];
                let users = v.users + new.iter().filter(|m| m.role == Role::User).count();
                if users / self.config.epoch_turns == v.epoch_index {
                    v.chars += new.iter().map(|m| m.plain_text().len()).sum::<usize>();
                    v.messages.extend(new.iter().cloned());
                    v.transcript_len = transcript.len();
                    v.users = users;
                    Some(v)
                } else {
                    None
                }
            }
            None => None,
        };
        let view = view.unwrap_or_else(|| {
            let full = self.view(transcript.to_vec());
            SessionView {
                epoch_index: full.epoch_index,
                transcript_len: transcript.len(),
                users: transcript.iter().filter(|m| m.role == Role::User).count(),
                chars: full.messages.iter().map(|m| m.plain_text().len()).sum(),
                messages: Messages::from(full.messages),
            }
        });
        let out = (
            view.messages.clone(),
            Self::epoch_label(view.epoch_index),
            view.chars,
        );
        lock(&self.views).insert(session_id.to_string(), view);
        out
    }
}

#[async_trait]
impl ContextEngine for BenchEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
            ..EngineInfo::new(BENCH_ENGINE_ID, "ctxbridge bench engine")
        }
    }

    /// `ingestBatch` rather than `afterTurn`: the host hands over only the turn's two new
    /// messages instead of a copy of the whole transcript.
    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[EngineMethod::IngestBatch])
    }

    /// The host's transcript store persists messages; the view is derived from it.
    async fn ingest(&self, _params: IngestParams) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    async fn ingest_batch(
        &self,
        _params: IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        Ok(IngestBatchResult { ingested_count: 0 })
    }

    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        let started = Instant::now();
        let (messages, epoch, chars) = self.session_view(&params.session_id, &params.messages);
        let projection = match self.config.projection {
            ProjectionMode::ThreadBootstrap => ContextProjection::thread_bootstrap(epoch),
            ProjectionMode::PerTurn => ContextProjection::per_turn(),
        };
        let result = AssembleResult {
            messages,
            estimated_tokens: estimate_tokens(chars).floor(),
            system_prompt_addition: Some(BENCH_SYSTEM_PROMPT_ADDITION.to_string()),
            prompt_authority: None,
            context_projection: Some(projection),
        };
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.assemble_nanos.fetch_add(nanos, Ordering::Relaxed);
        Ok(result)
    }

    async fn compact(&self, _params: CompactParams) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: true,
            compacted: false,
            reason: Some("the bench engine does not compact".into()),
            result: None,
        })
    }
}

const WORDS: [&str; 32] = [
    "the",
    "service",
    "deploys",
    "through",
    "a",
    "staging",
    "cluster",
    "before",
    "release",
    "config",
    "values",
    "live",
    "in",
    "vault",
    "and",
    "are",
    "read",
    "at",
    "startup",
    "latency",
    "budget",
    "is",
    "two",
    "hundred",
    "milliseconds",
    "per",
    "request",
    "on",
    "the",
    "checkout",
    "path",
    "today",
];

/// Deterministic ASCII prose of exactly `chars` characters (a simple LCG picks the words).
pub fn prose(seed: u64, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 16);
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut words_in_sentence = 0;
    while out.len() < chars {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let word = WORDS[((state >> 33) % WORDS.len() as u64) as usize];
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        words_in_sentence += 1;
        if words_in_sentence == 12 {
            out.push('.');
            words_in_sentence = 0;
        }
    }
    out.truncate(chars);
    out
}

/// The background of an epoch: a compaction summary (a fifth) and four older exchanges.
fn build_background(epoch_index: usize, chars: usize) -> Vec<AgentMessage> {
    let seed = (epoch_index as u64 + 1) * 1_000;
    let summary_chars = chars / 5;
    let exchange_chars = (chars - summary_chars) / 4;
    let user_chars = exchange_chars / 4;
    let assistant_chars = exchange_chars - user_chars;
    let mut messages = vec![AgentMessage::compaction_summary(format!(
        "Summary of epoch {epoch_index}: {}",
        prose(seed, summary_chars.saturating_sub(24))
    ))];
    for i in 0..4u64 {
        messages.push(AgentMessage::user(prose(seed + 10 + i, user_chars)));
        messages.push(AgentMessage::assistant(prose(
            seed + 20 + i,
            assistant_chars,
        )));
    }
    messages
}

/// The scripted prompt of turn `turn` (about 200 characters).
pub fn bench_prompt(turn: usize) -> String {
    format!(
        "Turn {turn}: {}?",
        prose(turn as u64 * 7 + 3, 190 - format!("Turn {turn}: ").len())
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn transcript(turns: usize) -> Vec<AgentMessage> {
        (0..turns)
            .flat_map(|i| {
                [
                    AgentMessage::user(bench_prompt(i + 1)),
                    AgentMessage::assistant(format!("reply {i}")),
                ]
            })
            .collect()
    }

    /// The background is about the configured size and the view grows by exactly one
    /// exchange per turn.
    #[test]
    fn view_is_background_plus_transcript() {
        let engine = BenchEngine::new(BenchEngineConfig::default());
        let bg: usize = engine
            .background(0)
            .iter()
            .map(|m| m.plain_text().len())
            .sum();
        assert!((19_000..=20_000).contains(&bg), "background {bg}");
        let v3 = engine.view(transcript(3));
        let v4 = engine.view(transcript(4));
        assert_eq!(v4.messages.len(), v3.messages.len() + 2);
        assert_eq!(&v4.messages[..v3.messages.len()], &v3.messages[..]);
    }

    /// The epoch changes exactly every `epoch_turns` turns, and so does the background.
    #[test]
    fn epoch_changes_every_ten_turns() {
        let engine = BenchEngine::new(BenchEngineConfig::default());
        let epochs: Vec<String> = (0..=20).map(|t| engine.view(transcript(t)).epoch).collect();
        assert!(epochs[..10].iter().all(|e| e == "bench-epoch-0"));
        assert!(epochs[10..20].iter().all(|e| e == "bench-epoch-1"));
        assert_eq!(epochs[20], "bench-epoch-2");
        assert_ne!(engine.background(0), engine.background(1));
    }

    /// assemble asks for the configured projection with the view's epoch.
    #[tokio::test]
    async fn assemble_reports_the_configured_projection() {
        for mode in [ProjectionMode::PerTurn, ProjectionMode::ThreadBootstrap] {
            let engine = BenchEngine::new(BenchEngineConfig {
                projection: mode,
                ..BenchEngineConfig::default()
            });
            let r = engine
                .assemble(AssembleParams {
                    session_id: "s".into(),
                    messages: transcript(12).into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let p = r.context_projection.unwrap();
            assert_eq!(p.mode, mode);
            match mode {
                ProjectionMode::ThreadBootstrap => {
                    assert_eq!(p.epoch.as_deref(), Some("bench-epoch-1"))
                }
                ProjectionMode::PerTurn => assert_eq!(p.epoch, None),
            }
            assert_eq!(r.messages.len(), 9 + 24);
        }
    }

    /// Prompts are ASCII (chars = bytes) and about 190 characters.
    #[test]
    fn prompts_are_ascii_and_sized() {
        for t in [1, 9, 10, 123] {
            let p = bench_prompt(t);
            assert!(p.is_ascii());
            assert_eq!(p.len(), 191, "{p}");
        }
    }
}
