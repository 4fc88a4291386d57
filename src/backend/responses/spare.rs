//! A conversation made ahead of need, for conversation threads in a long-running process
//! (`serve`; see [`ResponsesBackend::with_spare_conversation`](super::ResponsesBackend::with_spare_conversation)).
//!
//! A new thread — a session's first, or a new epoch's — needs a new conversation, and
//! `POST /conversations` is one round trip to the API on that turn's path, before the turn's
//! own request can leave. With a spare, the new thread takes the conversation made earlier and
//! the turn's request leaves at once; another is made in the background for the next new
//! thread. At most one waits, and one is being made at a time. The conversations are empty
//! when made (the backend's `start_thread` makes them so anyway): nothing of a session is in
//! one before its thread takes it. A spare left at shutdown is deleted; a short-lived process
//! (`turn`) makes none, since one it never used would be left on the server.

use std::sync::{Arc, Mutex};

use responses_client::ResponsesClient;

use crate::util::lock;

/// The spare's state, shared with the task that makes the next one.
#[derive(Debug, Default)]
struct State {
    /// A conversation made and not taken yet.
    ready: Option<String>,
    /// Whether one is being made.
    making: bool,
    /// The backend has shut down: nothing is kept any more.
    closed: bool,
}

/// The conversation made ahead of need, if any.
#[derive(Debug, Default)]
pub(super) struct SpareConversation(Arc<Mutex<State>>);

impl SpareConversation {
    /// Takes the spare conversation, if one is ready.
    pub(super) fn take(&self) -> Option<String> {
        lock(&self.0).ready.take()
    }

    /// Makes the next spare in the background, unless one is ready or being made (or the
    /// backend has shut down, or no runtime runs here). A failure is only logged: the next
    /// new thread makes its conversation itself, then tries again.
    pub(super) fn replenish(&self, client: &ResponsesClient) {
        let mut state = lock(&self.0);
        if state.closed || state.making || state.ready.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        state.making = true;
        let (shared, client) = (self.0.clone(), client.clone());
        runtime.spawn(async move {
            let made = client.create_conversation().await;
            let leftover = {
                let mut state = lock(&shared);
                state.making = false;
                match made {
                    Ok(conversation) if state.closed => Some(conversation.id),
                    Ok(conversation) => {
                        tracing::debug!(conversation = %conversation.id, "made a spare conversation for the next new thread");
                        state.ready = Some(conversation.id);
                        None
                    }
                    Err(error) => {
                        tracing::debug!(%error, "could not make a spare conversation; the next new thread makes its own");
                        None
                    }
                }
            };
            if let Some(id) = leftover {
                delete(&client, &id).await;
            }
        });
    }

    /// Stops making spares and deletes the one ready, if any (the backend shuts down).
    pub(super) async fn close(&self, client: &ResponsesClient) {
        let ready = {
            let mut state = lock(&self.0);
            state.closed = true;
            state.ready.take()
        };
        if let Some(id) = ready {
            delete(client, &id).await;
        }
    }
}

/// Deletes an unused spare (best effort: an empty conversation left behind holds nothing).
async fn delete(client: &ResponsesClient, id: &str) {
    match client.delete_conversation(id).await {
        Ok(()) => tracing::debug!(conversation = id, "deleted the unused spare conversation"),
        Err(error) => {
            tracing::warn!(conversation = id, %error, "could not delete the unused spare conversation; it is empty")
        }
    }
}
