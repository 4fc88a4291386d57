//! What a lease's own transaction read of its session ([`SessionSnapshot`]), taken into the
//! harness: the session's binding and an empty transcript seed the caches, and the rest become
//! the held lease's facts, so a new holder's turn does not read again what its lease read.

use std::sync::{Arc, Mutex};

use super::session::{SessionFacts, SessionGuard};
use super::transcript_cache::CachedTranscript;
use super::Harness;
use crate::contract::Messages;
use crate::projection::ThreadBinding;
use crate::store::SessionSnapshot;

impl Harness {
    /// Takes what the store read with `guard`'s lease (binding key `key`), if it read
    /// anything: the binding goes into the binding cache (one that does not decode is left to
    /// the next read of it, which reports it), an empty transcript with its cursor becomes the
    /// cached copy, and the guard keeps the rest as the session's facts.
    pub(super) async fn adopt_snapshot(&self, guard: &mut SessionGuard, key: &str) {
        let Some(snapshot) = guard.take_snapshot() else {
            return;
        };
        match snapshot
            .binding
            .as_ref()
            .map(|stored| serde_json::from_str::<ThreadBinding>(&stored.json))
            .transpose()
        {
            Ok(binding) => {
                self.bindings
                    .insert(key.to_string(), binding.map(Arc::new))
                    .await
            }
            Err(_) => self.bindings.invalidate(key).await,
        }
        self.seed_transcript(&snapshot).await;
        guard.keep_facts(SessionFacts::of_snapshot(&snapshot));
    }

    /// An empty transcript read with the lease becomes the cached copy at its cursor (what a
    /// read of the store would have left).
    async fn seed_transcript(&self, snapshot: &SessionSnapshot) {
        let Some(cursor) = snapshot.empty_transcript_cursor else {
            return;
        };
        let copy = CachedTranscript::new(cursor, Messages::new());
        self.transcripts
            .insert(
                snapshot.session_id.clone(),
                Arc::new(Mutex::new(Some(copy))),
            )
            .await;
    }
}
