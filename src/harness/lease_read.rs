//! What a lease's own transaction read of its session ([`crate::store::SessionSnapshot`]),
//! taken into the harness: the session's binding and an empty transcript seed the caches, and
//! the rest become the held lease's facts, so a new holder's turn does not read again what its
//! lease read.

use super::session::{SessionFacts, SessionGuard};
use super::{decode_binding, Harness};

impl Harness {
    /// Takes what the store read with `guard`'s lease (binding key `key`), if it read
    /// anything: the binding goes into the binding cache (one that does not decode is left to
    /// the next read of it, which reports it), an empty transcript with its cursor becomes the
    /// cached copy, and the guard keeps the rest as the session's facts.
    pub(super) async fn adopt_snapshot(&self, guard: &mut SessionGuard, key: &str) {
        let Some(snapshot) = guard.take_snapshot() else {
            return;
        };
        match snapshot.binding.as_ref().map(decode_binding).transpose() {
            Ok(binding) => self.bindings.insert(key.to_string(), binding).await,
            Err(_) => self.bindings.invalidate(key).await,
        }
        if let Some(cursor) = snapshot.empty_transcript_cursor {
            self.seed_empty_transcript(&snapshot.session_id, cursor)
                .await;
        }
        guard.keep_facts(SessionFacts::of_snapshot(&snapshot));
    }
}
