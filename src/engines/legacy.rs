//! The built-in `legacy` engine (docs/architecture.md#the-legacy-engine): the host's transcript is the context, and
//! compaction is the host runtime's.

use async_trait::async_trait;

use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, CompactParams, CompactResult, ContextEngine,
    EngineError, EngineInfo, EngineMethod, IngestParams, IngestResult, MethodSet, LEGACY_ENGINE_ID,
};

/// Its display name.
pub const LEGACY_ENGINE_NAME: &str = "Legacy Context Engine";

/// Pass-through engine: the default when none is configured and the fallback for a
/// quarantined one.
#[derive(Debug, Clone, Copy, Default)]
pub struct LegacyEngine;

impl LegacyEngine {
    /// Legacy's `info`.
    pub fn engine_info() -> EngineInfo {
        EngineInfo::new(LEGACY_ENGINE_ID, LEGACY_ENGINE_NAME)
    }
}

#[async_trait]
impl ContextEngine for LegacyEngine {
    fn info(&self) -> EngineInfo {
        Self::engine_info()
    }

    fn methods(&self) -> MethodSet {
        MethodSet::required_plus(&[EngineMethod::AfterTurn, EngineMethod::Dispose])
    }

    /// The host's transcript store already persists messages.
    async fn ingest(&self, _params: IngestParams) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    /// The same messages, no estimate, no addition, no projection.
    async fn assemble(&self, params: AssembleParams) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult {
            messages: params.messages,
            estimated_tokens: 0.0,
            system_prompt_addition: None,
            prompt_authority: None,
            context_projection: None,
        })
    }

    /// Delegates to the host runtime's compaction (the backend's native compactor on a
    /// threaded backend). Without a runtime to delegate to, nothing is compacted.
    async fn compact(&self, mut params: CompactParams) -> Result<CompactResult, EngineError> {
        let callbacks = params
            .runtime_context
            .as_ref()
            .and_then(|ctx| ctx.callbacks.clone());
        match callbacks {
            Some(cb) => {
                params.runtime_context = None;
                cb.delegate_compaction(params).await
            }
            None => Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some("no host runtime compaction available".into()),
                result: None,
            }),
        }
    }

    async fn after_turn(&self, _params: AfterTurnParams) -> Result<(), EngineError> {
        Ok(())
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        Ok(())
    }
}
