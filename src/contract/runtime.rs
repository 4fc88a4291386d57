//! Host callbacks offered to engines through `runtimeContext` (docs/architecture.md#method-parameters-and-results, §8, §13).

use async_trait::async_trait;

use super::compact::{CompactParams, CompactResult};
use super::engine::EngineError;
use super::types::{
    LlmCompleteRequest, LlmCompleteResult, TranscriptRewriteRequest, TranscriptRewriteResult,
};

/// What the host lets an engine call back into while a lifecycle method runs.
#[async_trait]
pub trait RuntimeCallbacks: Send + Sync {
    /// Rewrites transcript entries atomically (docs/architecture.md#maintenance). Refused in pre-turn hooks.
    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> Result<TranscriptRewriteResult, EngineError>;

    /// A completion through the host's model (`llm.complete`).
    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError>;

    /// The host runtime's own compaction, which legacy and non-owning engines delegate to
    /// (docs/architecture.md#the-legacy-engine, §10): on a threaded backend, the backend's native compactor.
    async fn delegate_compaction(
        &self,
        params: CompactParams,
    ) -> Result<CompactResult, EngineError>;
}
