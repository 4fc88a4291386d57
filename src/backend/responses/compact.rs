//! Native compaction of a conversation thread.

use responses_client::{CompactRequest, InputItem};

use super::super::{BackendError, NativeCompaction, ThreadId};
use super::errors::backend_error;
use super::ResponsesBackend;

impl ResponsesBackend {
    /// Native compaction of a conversation thread. The compaction endpoint takes a chain
    /// (`previous_response_id`) or an explicit `input`, never a `conversation`, so: the
    /// conversation's items are listed, compacted as `input`, and the compacted window (the
    /// kept messages and the opaque `compaction` item) seeds a new conversation, which becomes
    /// the thread. An empty conversation has nothing to compact (no compaction call, thread
    /// unchanged). The old conversation is left as it was.
    pub(super) async fn compact_conversation(
        &self,
        thread_id: &ThreadId,
    ) -> Result<NativeCompaction, BackendError> {
        const OPERATION: &str = "compact thread";
        self.check_known(OPERATION, thread_id)?;
        let err = |e| backend_error(OPERATION, thread_id.as_str(), e);
        let listed = self
            .client
            .list_conversation_items(thread_id.as_str())
            .await
            .map_err(err);
        self.live.learn(thread_id, &listed).await;
        let items = listed?;
        if items.is_empty() {
            return Ok(NativeCompaction {
                thread_id: None,
                summary: None,
            });
        }
        let model = self
            .chains()
            .get(thread_id)
            .and_then(|state| state.model.clone())
            .unwrap_or_else(|| self.model.clone());
        let compacted = self
            .client
            .compact(CompactRequest {
                model,
                input: items.into_iter().map(InputItem::Raw).collect(),
                instructions: None,
                previous_response_id: None,
            })
            .await
            .map_err(err)?;
        let window: Vec<InputItem> = compacted.output.into_iter().map(InputItem::Raw).collect();
        let conversation = self
            .client
            .create_conversation_with_items(&window)
            .await
            .map_err(err)?;
        let new_thread = ThreadId(conversation.id);
        self.live.seen(&new_thread).await;
        {
            let mut chains = self.chains();
            if let Some(previous) = chains.remove(thread_id) {
                if !previous.is_empty() {
                    chains.insert(new_thread.clone(), previous);
                }
            }
        }
        tracing::info!(from = %thread_id, to = %new_thread, items = window.len(), "compacted a Responses conversation into a new one");
        Ok(NativeCompaction {
            thread_id: Some(new_thread),
            summary: None,
        })
    }
}
