//! The host side of `runtimeContext` callbacks (docs/architecture.md#method-parameters-and-results, §8): transcript rewrites over the
//! store, completions through the backend's model, and delegated (native) compaction.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{BackendError, CompletionRequest, ThreadId, ThreadedBackend};
use crate::contract::{
    AgentMessage, CompactDetails, CompactParams, CompactResult, EngineError, LlmCompleteRequest,
    LlmCompleteResult, LlmUsage, RuntimeCallbacks, TranscriptRewriteRequest,
    TranscriptRewriteResult,
};
use crate::store::StateStoreExt;
use crate::store::{StateStore, TranscriptEntry};

/// Callbacks bound to one session and one lifecycle call.
pub struct HostCallbacks {
    pub(crate) store: Arc<dyn StateStore>,
    pub(crate) backend: Arc<dyn ThreadedBackend>,
    pub(crate) session_id: String,
    /// The session's bound backend thread, for delegated compaction.
    pub(crate) thread_id: Option<ThreadId>,
    /// Pre-turn hooks (bootstrap, assemble) get no rewrite callback.
    pub(crate) allow_rewrite: bool,
    /// Set when the engine delegated compaction to the runtime during the call.
    pub(crate) delegated: Arc<AtomicBool>,
    /// Set by a successful transcript rewrite (the mirrored transcript changed).
    pub(crate) rewrote: Arc<AtomicBool>,
    /// The harness's cached transcripts: a rewrite drops the session's copy, which a turn
    /// under a kept lease would otherwise use without reading the store.
    pub(crate) transcripts: super::transcript_cache::TranscriptCache,
    /// The session's transcript file, rewritten after a transcript rewrite.
    pub(crate) session_file: Option<std::path::PathBuf>,
    /// The working directory written in a rewritten session file's header.
    pub(crate) cwd: String,
}

impl HostCallbacks {
    fn refuse(operation: &str, message: impl Into<String>) -> EngineError {
        EngineError::Refused {
            operation: operation.to_string(),
            message: message.into(),
        }
    }
}

/// The backend request of an `llm.complete` (pure): the messages rendered as one input, the
/// `systemPrompt` as the backend's instructions, `model` and `maxTokens` forwarded.
pub fn completion_request(request: &LlmCompleteRequest) -> CompletionRequest {
    let input = request
        .messages
        .iter()
        .map(|m| format!("[{}]\n{}", m.role.as_str(), m.plain_text()))
        .collect::<Vec<_>>()
        .join("\n\n");
    CompletionRequest {
        instructions: request
            .system_prompt
            .clone()
            .filter(|s| !s.trim().is_empty()),
        input,
        model: request.model.clone().filter(|m| !m.trim().is_empty()),
        max_tokens: request.max_tokens,
    }
}

/// Serves an `llm.complete` through the backend's model: logs its purpose, returns text,
/// model and usage.
pub async fn complete_through(
    backend: &dyn ThreadedBackend,
    request: LlmCompleteRequest,
) -> Result<LlmCompleteResult, EngineError> {
    tracing::info!(
        purpose = request.purpose.as_deref(),
        session = request.session_id.as_deref(),
        model = request.model.as_deref(),
        "llm.complete for the engine"
    );
    let done = backend
        .complete(completion_request(&request))
        .await
        .map_err(|e| EngineError::Refused {
            operation: "llm.complete".to_string(),
            message: e.to_string(),
        })?;
    Ok(LlmCompleteResult {
        text: done.text,
        model: done.model,
        usage: done.usage.map(|u| LlmUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_input_tokens: u.cached_input_tokens,
        }),
    })
}

/// Callbacks for engine → host requests made outside any lifecycle call (from a tool, a hook
/// or a command, or with no session at all): only `llm.complete` is served; transcript
/// rewrites and delegated compaction need a lifecycle call's session and are refused.
pub struct HostLlmCallbacks {
    pub(crate) backend: Arc<dyn ThreadedBackend>,
}

impl HostLlmCallbacks {
    /// Callbacks completing through `backend`.
    pub fn new(backend: Arc<dyn ThreadedBackend>) -> Self {
        HostLlmCallbacks { backend }
    }
}

#[async_trait]
impl RuntimeCallbacks for HostLlmCallbacks {
    async fn rewrite_transcript_entries(
        &self,
        _request: TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        Err(HostCallbacks::refuse(
            "rewriteTranscriptEntries",
            "transcript rewrites are only available inside a lifecycle call",
        ))
    }

    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        complete_through(self.backend.as_ref(), request).await
    }

    async fn delegate_compaction(
        &self,
        _params: CompactParams,
    ) -> Result<CompactResult, EngineError> {
        Err(HostCallbacks::refuse(
            "delegateCompaction",
            "delegated compaction is only available inside compact",
        ))
    }
}

fn message_bytes(m: &AgentMessage) -> u64 {
    serde_json::to_string(m).map_or(0, |s| s.len() as u64)
}

#[async_trait]
impl RuntimeCallbacks for HostCallbacks {
    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        const OP: &str = "rewriteTranscriptEntries";
        if !self.allow_rewrite {
            return Err(Self::refuse(
                OP,
                "transcript rewrites are not available in pre-turn hooks (bootstrap, assemble)",
            ));
        }
        if request.replacements.is_empty() {
            return Ok(TranscriptRewriteResult {
                reason: Some("no replacements".into()),
                ..Default::default()
            });
        }
        let current = self
            .store
            .load_transcript(&self.session_id)
            .map_err(|e| Self::refuse(OP, e.to_string()))?;
        if let Some(allowed) = &request.allowed_rewrite_suffix_entry_ids {
            // The allowed ids must form a suffix of the transcript, and every replacement must
            // fall inside it.
            let allowed: HashSet<&str> = allowed.iter().map(String::as_str).collect();
            let suffix_start = current
                .iter()
                .rposition(|e| !allowed.contains(e.entry_id.as_str()))
                .map_or(0, |i| i + 1);
            let suffix: HashSet<&str> = current[suffix_start..]
                .iter()
                .map(|e| e.entry_id.as_str())
                .collect();
            if let Some(outside) = request
                .replacements
                .iter()
                .find(|r| !suffix.contains(r.entry_id.as_str()))
            {
                return Err(Self::refuse(
                    OP,
                    format!(
                        "entry {:?} is outside the allowed rewrite suffix",
                        outside.entry_id
                    ),
                ));
            }
        }
        let mut bytes_before = 0u64;
        let mut bytes_after = 0u64;
        for r in &request.replacements {
            let Some(old) = current.iter().find(|e| e.entry_id == r.entry_id) else {
                return Err(Self::refuse(
                    OP,
                    format!(
                        "no transcript entry {:?} in session {:?}",
                        r.entry_id, self.session_id
                    ),
                ));
            };
            bytes_before += message_bytes(&old.message);
            bytes_after += message_bytes(&r.message);
        }
        // The replacement keeps the entry's id: engines address entries by the message id
        // they were shown, so a replacement without it would be unreachable afterwards.
        let entries: Vec<TranscriptEntry> = request
            .replacements
            .into_iter()
            .map(|r| TranscriptEntry {
                message: AgentMessage {
                    id: Some(r.entry_id.clone()),
                    ..r.message
                },
                entry_id: r.entry_id,
            })
            .collect();
        self.store
            .replace_transcript_entries(&self.session_id, &entries)
            .map_err(|e| Self::refuse(OP, e.to_string()))?;
        self.rewrote.store(true, Ordering::SeqCst);
        self.transcripts.invalidate(&self.session_id).await;
        if let Some(path) = self.session_file.as_deref().filter(|p| p.exists()) {
            super::session_file::rewrite_session_file(
                path,
                self.store.as_ref(),
                &self.session_id,
                &self.cwd,
            );
        }
        Ok(TranscriptRewriteResult {
            changed: true,
            bytes_freed: bytes_before.saturating_sub(bytes_after),
            rewritten_entries: entries.len() as u64,
            reason: None,
        })
    }

    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        complete_through(self.backend.as_ref(), request).await
    }

    async fn delegate_compaction(
        &self,
        _params: CompactParams,
    ) -> Result<CompactResult, EngineError> {
        self.delegated.store(true, Ordering::SeqCst);
        let Some(thread) = &self.thread_id else {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("no backend thread bound to this session yet".into()),
                result: None,
            });
        };
        match self.backend.compact_thread(thread).await {
            Ok(native) => Ok(CompactResult {
                ok: true,
                compacted: true,
                reason: None,
                result: Some(CompactDetails {
                    summary: native.summary,
                    tokens_before: 0.0,
                    details: Some(serde_json::json!({
                        "nativeCompaction": self.backend.kind().as_str(),
                        "threadId": native.thread_id.as_ref().unwrap_or(thread).as_str(),
                    })),
                    ..Default::default()
                }),
            }),
            Err(BackendError::Unsupported { .. }) => Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some(format!("{} has no native compaction", self.backend.label())),
                result: None,
            }),
            Err(e) => Err(Self::refuse("delegateCompaction", e.to_string())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// `systemPrompt` becomes the backend's instructions, `model` and `maxTokens` are
    /// forwarded, blank values are dropped, and the messages render as one input.
    #[test]
    fn completion_request_carries_system_prompt_model_and_max_tokens() {
        let request: LlmCompleteRequest = serde_json::from_value(serde_json::json!({
            "messages": [{"role": "user", "content": "Write the summary."}],
            "systemPrompt": "You summarise.",
            "model": "gpt-x",
            "purpose": "summary",
            "maxTokens": 200,
            "temperature": 0.2,
        }))
        .unwrap();
        assert_eq!(request.extra["temperature"], 0.2);
        let backend = completion_request(&request);
        assert_eq!(backend.instructions.as_deref(), Some("You summarise."));
        assert_eq!(backend.model.as_deref(), Some("gpt-x"));
        assert_eq!(backend.max_tokens, Some(200));
        assert_eq!(backend.input, "[user]\nWrite the summary.");
        let blank = LlmCompleteRequest {
            system_prompt: Some("  ".into()),
            model: Some(String::new()),
            ..request
        };
        let backend = completion_request(&blank);
        assert_eq!(backend.instructions, None);
        assert_eq!(backend.model, None);
    }
}
