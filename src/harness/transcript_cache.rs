//! The harness's copies of session transcripts, per session id: a turn under a kept lease
//! takes the copy its session's last turn here left instead of reading the store, and a turn
//! that reads the store reads only what was appended since the copy.
//!
//! A copy grows in place. A turn's recorded entries are not added to the list the turn itself
//! still holds (that would copy the whole transcript every turn): they wait beside it and join
//! it when the next turn takes the copy.

use std::sync::{Arc, Mutex};

use super::{store_err, Harness, HarnessError};
use crate::contract::{AgentMessage, Messages};
use crate::store::{TranscriptCursor, TranscriptEntry};
use crate::util::lock;

/// The harness's copies of session transcripts, per session id.
pub(crate) type TranscriptCache = moka::future::Cache<String, Arc<Mutex<Option<CachedTranscript>>>>;

/// A session transcript as this harness last read or recorded it, with the store cursor where
/// it ends.
pub(crate) struct CachedTranscript {
    /// Where the store's transcript ends: after `messages` and `appended`.
    cursor: TranscriptCursor,
    messages: Messages,
    /// Entries a turn recorded after `messages`, added to them when the next turn takes the
    /// copy: by then the recording turn's handles on `messages` are gone, so the list grows
    /// in place instead of being copied whole while that turn still holds it.
    appended: Vec<AgentMessage>,
}

impl CachedTranscript {
    fn new(cursor: TranscriptCursor, messages: Messages) -> Self {
        CachedTranscript {
            cursor,
            messages,
            appended: Vec::new(),
        }
    }

    /// Continues the copy with a turn's recorded entries (which the store now holds after it).
    fn append(&mut self, entries: &[TranscriptEntry]) {
        // Not into `messages` yet: the turn recording them still holds that list.
        self.appended
            .extend(entries.iter().map(|e| e.message.clone()));
        self.cursor.next_seq += entries.len() as u64;
    }

    /// The whole copy, `appended` moved into `messages`; the handle shares the list.
    fn settle(&mut self) -> Messages {
        if !self.appended.is_empty() {
            self.messages.extend(std::mem::take(&mut self.appended));
        }
        self.messages.clone()
    }
}

impl Harness {
    /// The messages of a session's transcript: the cached list plus what was appended since,
    /// or the whole transcript when it was rewritten (or never read). The cached list grows in
    /// place (no copy of the transcript per turn) unless an engine still holds the previous
    /// turn's list; the returned handle shares it.
    pub(super) async fn session_messages(
        &self,
        session_key: &str,
        session_id: &str,
    ) -> Result<(Messages, Option<TranscriptCursor>), HarnessError> {
        let slot = match self.transcripts.get(session_id).await {
            Some(slot) => slot,
            None => {
                let slot = Arc::new(Mutex::new(None));
                self.transcripts
                    .insert(session_id.to_string(), slot.clone())
                    .await;
                slot
            }
        };
        // Held only across the synchronous store read; the session lock already orders turns.
        // A poisoned slot only means a panic mid-update: the cursor and list were replaced
        // together or not at all, so its content is still coherent.
        let mut cached = lock(&slot);
        let read = self
            .store_for(session_key)
            .transcript_since(session_id, cached.as_ref().map(|c| c.cursor))
            .map_err(store_err("load transcript"))?;
        let mut messages = match cached.take() {
            // The copy goes with this arm: the list it shares is this turn's alone.
            Some(mut c) if read.appended => c.settle(),
            _ => Messages::new(),
        };
        messages.extend(read.entries.into_iter().map(|e| e.message));
        *cached = read
            .cursor
            .map(|cursor| CachedTranscript::new(cursor, messages.clone()));
        Ok((messages, read.cursor))
    }

    /// Makes the cached copy of `session_id`'s transcript an empty one at `cursor`: what a
    /// read of the store would leave for a transcript known (read with the lease) to be empty.
    pub(super) async fn seed_empty_transcript(&self, session_id: &str, cursor: TranscriptCursor) {
        let copy = CachedTranscript::new(cursor, Messages::new());
        self.transcripts
            .insert(session_id.to_string(), Arc::new(Mutex::new(Some(copy))))
            .await;
    }

    /// The cached copy of `session_id`'s transcript when it is at `cursor`: what this harness
    /// appended under a lease it kept holds, unless a rewrite dropped the copy since.
    pub(super) async fn cached_transcript(
        &self,
        session_id: &str,
        cursor: TranscriptCursor,
    ) -> Option<Messages> {
        let slot = self.transcripts.get(session_id).await?;
        let mut cached = lock(&slot);
        cached
            .as_mut()
            .filter(|c| c.cursor == cursor)
            .map(CachedTranscript::settle)
    }

    /// Appends this turn's recorded entries to the cached copy of the transcript (the copy the
    /// turn read, which the store now continues with them) and returns where the copy ends;
    /// `None` when there is no copy to continue.
    pub(super) async fn extend_cached_transcript(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Option<TranscriptCursor> {
        let slot = self.transcripts.get(session_id).await?;
        let mut cached = lock(&slot);
        let copy = cached.as_mut()?;
        copy.append(entries);
        Some(copy.cursor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn entry(id: &str, text: &str) -> TranscriptEntry {
        TranscriptEntry {
            entry_id: id.into(),
            message: AgentMessage::user(text).with_id(id),
        }
    }

    /// A turn's entries do not copy the list the turn holds; the next turn gets them added in
    /// place, and the cursor covers them from the start.
    #[test]
    fn a_turns_entries_wait_beside_the_list_it_holds() {
        let list: Messages = (0..3)
            .map(|i| AgentMessage::user(format!("m{i}")))
            .collect();
        let cursor = TranscriptCursor {
            next_seq: 3,
            version: 0,
        };
        let mut copy = CachedTranscript::new(cursor, list);
        let held = copy.settle();
        copy.append(&[entry("u", "question"), entry("a", "answer")]);
        assert_eq!(copy.cursor.next_seq, 5);
        // No copy of the list while the turn holds it; the turn's view is unchanged.
        assert!(copy.messages.ptr_eq(&held));
        assert_eq!(held.len(), 3);
        drop(held);
        let next = copy.settle();
        assert_eq!(next.len(), 5);
        assert_eq!(next[4].id.as_deref(), Some("a"));
        assert!(copy.appended.is_empty());
        assert!(copy.messages.ptr_eq(&next));
    }
}
