//! The SQLite store split over several databases by session (`store: {path, shards: N}`), so
//! that turns of different sessions write on as many writers as there are shards: SQLite has
//! one writer per database, and one writer was the store's limit on two cores.
//!
//! A session key's state lives on one shard, picked by a hash of the key
//! ([`shard_index`]): its lease, binding, transcripts (of every session id the key has had),
//! outbox, bootstrap marks and session-id document. The harness reaches it through
//! [`StateStore::session_shard`], so a turn's writes stay one transaction on one database.
//! Everything else — quarantine records, the serve thread map, the mock backend's threads,
//! doctor notes, and any call made on the sharded store itself — is on shard 0, the file at
//! `path`; shard `i` is `path` with `.shard<i>` before its extension. Row counts and retention
//! sweeps cover every shard.
//!
//! The shard count is recorded in shard 0 when the store is created and never changes (a key's
//! shard depends on it): opening with another count, or opening a sharded store unsharded, is
//! refused, as is sharding a file that already holds an unsharded store's sessions.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{
    HeldTimes, OutboxRow, QuarantineRecord, SqliteStore, StateStore, StateStoreExt, StoreError,
    StoreStats, StoredBinding, SweepReport, SweepRequest, TranscriptCursor, TranscriptEntry,
    TranscriptRead, TurnWrite, WriteFuture, WriteMode, WriteOutcome,
};

/// Most shards a store may have.
pub const MAX_SHARDS: usize = 64;

/// The shard of a session key among `shards`: the first eight bytes of the key's SHA-256, as a
/// big-endian number, modulo the count. Stable across builds and processes (every instance
/// sharing the files must agree).
pub fn shard_index(session_key: &str, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let digest = Sha256::digest(session_key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % shards as u64) as usize
}

/// The file of shard `index` of the store at `base`: `base` itself for shard 0, else `base`
/// with `.shard<index>` before its extension (`state.db` → `state.shard1.db`).
pub fn shard_path(base: &Path, index: usize) -> PathBuf {
    if index == 0 {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match base.extension() {
        Some(ext) => format!("{stem}.shard{index}.{}", ext.to_string_lossy()),
        None => format!("{stem}.shard{index}"),
    };
    base.with_file_name(name)
}

/// The error for a store whose recorded layout is not the one asked for.
fn layout_error(path: &Path, message: String) -> StoreError {
    StoreError::ShardLayout {
        path: path.to_path_buf(),
        message,
    }
}

/// Refuses to open the database at `path` unsharded when it is shard 0 of a sharded store.
pub(crate) fn check_unsharded(store: &SqliteStore) -> Result<(), StoreError> {
    match store.recorded_shards()? {
        Some(n) if n > 1 => Err(layout_error(
            store.path(),
            format!("it is shard 0 of a store of {n} shards; set `store.shards: {n}` (opening it unsharded would hide the sessions kept on the other shards)"),
        )),
        _ => Ok(()),
    }
}

/// A SQLite store of several databases, one writer each (see the module documentation).
pub struct ShardedSqliteStore {
    base: PathBuf,
    shards: Vec<Arc<SqliteStore>>,
}

impl std::fmt::Debug for ShardedSqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedSqliteStore")
            .field("path", &self.base)
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl ShardedSqliteStore {
    /// Opens (creating if needed) the `shards` databases of the store at `path` (2 to
    /// [`MAX_SHARDS`]). Refused when shard 0 records another count, or holds an unsharded
    /// store's sessions.
    pub fn open(path: impl AsRef<Path>, shards: usize) -> Result<Self, StoreError> {
        let base = path.as_ref().to_path_buf();
        Self::check_count(&base, shards)?;
        let first = Arc::new(SqliteStore::open(&base)?);
        let recorded = first.recorded_shards()?;
        let recorded = match recorded {
            Some(n) => Some(n),
            // Not yet sharded: a file that holds sessions or bindings already is an unsharded
            // store's, whose keys would now be looked for on other shards.
            None => first.record_shards(shards, |stats| {
                stats.sessions == 0 && stats.bindings == 0 && stats.outbox_pending == 0
            })?,
        };
        match recorded {
            Some(n) if n == shards => {}
            Some(n) => {
                return Err(layout_error(
                    &base,
                    format!("it was created with {n} shards and is opened with {shards}; set `store.shards: {n}` (a session's shard depends on the count, so it cannot change)"),
                ))
            }
            None => {
                return Err(layout_error(
                    &base,
                    format!("it holds the sessions of an unsharded store and cannot become shard 0 of {shards}; open it without `store.shards`, or point `store.path` at a new file"),
                ))
            }
        }
        let mut all = vec![first];
        for index in 1..shards {
            all.push(Arc::new(SqliteStore::open(shard_path(&base, index))?));
        }
        Ok(ShardedSqliteStore { base, shards: all })
    }

    /// `shards` private in-memory databases (benchmarks and tests).
    pub fn in_memory(shards: usize) -> Result<Self, StoreError> {
        let base = PathBuf::from(":memory:");
        Self::check_count(&base, shards)?;
        let shards = (0..shards)
            .map(|_| SqliteStore::in_memory().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardedSqliteStore { base, shards })
    }

    fn check_count(base: &Path, shards: usize) -> Result<(), StoreError> {
        if (2..=MAX_SHARDS).contains(&shards) {
            Ok(())
        } else {
            Err(layout_error(
                base,
                format!("a sharded store has 2 to {MAX_SHARDS} shards, not {shards}"),
            ))
        }
    }

    /// The shards, shard 0 first.
    pub fn shards(&self) -> &[Arc<SqliteStore>] {
        &self.shards
    }

    /// The shard holding `session_key`'s state.
    pub fn shard_of(&self, session_key: &str) -> &Arc<SqliteStore> {
        &self.shards[shard_index(session_key, self.shards.len())]
    }

    /// The connections' held times of the busiest shard (by writer time): the part of a run
    /// no other writer overlaps.
    pub fn busiest_held_times(&self) -> HeldTimes {
        self.shards
            .iter()
            .map(|s| s.held_times())
            .max_by_key(|h| h.writer)
            .unwrap_or_default()
    }

    fn first(&self) -> &SqliteStore {
        &self.shards[0]
    }
}

/// Implements each listed [`StateStore`] method by the same call on shard 0.
macro_rules! on_shard_zero {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        $(
            fn $name(&self, $($arg: $ty),*) -> $ret {
                self.first().$name($($arg),*)
            }
        )*
    };
}

/// Every direct call goes to shard 0 (see the module documentation), except the row counts and
/// the retention sweep, which cover every shard.
impl StateStore for ShardedSqliteStore {
    fn location(&self) -> String {
        format!("{} ({} shards)", self.base.display(), self.shards.len())
    }

    fn session_shard(&self, session_key: &str) -> Option<Arc<dyn StateStore>> {
        Some(self.shard_of(session_key).clone())
    }

    on_shard_zero! {
        fn load_binding(binding_key: &str) -> Result<Option<StoredBinding>, StoreError>;
        fn load_transcript(session_id: &str) -> Result<Vec<TranscriptEntry>, StoreError>;
        fn transcript_since(
            session_id: &str,
            cursor: Option<TranscriptCursor>,
        ) -> Result<TranscriptRead, StoreError>;
        fn pending_outbox(session_id: &str) -> Result<Vec<OutboxRow>, StoreError>;
        fn quarantines() -> Result<Vec<QuarantineRecord>, StoreError>;
        fn is_bootstrapped(session_id: &str, engine_id: &str) -> Result<bool, StoreError>;
        fn load_document(namespace: &str, key: &str) -> Result<Option<String>, StoreError>;
    }

    /// Shard 0 carries every write out but the retention sweep, which covers every shard
    /// (sweeping them in order, each with what is left of the batch's limit: a batch that
    /// handled fewer keys than its limit found nothing more on any shard).
    fn write(&self, write: TurnWrite, mode: WriteMode) -> WriteFuture {
        let TurnWrite::SweepIdle(request) = &write else {
            return self.first().write(write, mode);
        };
        let mut report = SweepReport::default();
        for shard in &self.shards {
            let handled = usize::try_from(report.keys).unwrap_or(usize::MAX);
            let left = request.limit.saturating_sub(handled);
            if left == 0 {
                break;
            }
            let batch = match shard.sweep_idle(&SweepRequest {
                limit: left,
                ..request.clone()
            }) {
                Ok(batch) => batch,
                Err(e) => return Box::pin(std::future::ready(Err(e))),
            };
            report.add(&batch);
        }
        Box::pin(std::future::ready(Ok(WriteOutcome::Swept(report))))
    }

    /// The sum over the shards; the oldest session of them all.
    fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut total = StoreStats::default();
        for shard in &self.shards {
            let s = shard.stats()?;
            total.sessions += s.sessions;
            total.bindings += s.bindings;
            total.transcript_entries += s.transcript_entries;
            total.outbox_pending += s.outbox_pending;
            total.documents += s.documents;
            total.oldest_session_ms = match (total.oldest_session_ms, s.oldest_session_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(total)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The index is a fixed function of the key: the same for every process and build (the
    /// figures are SHA-256's), within range, and spread over the shards.
    #[test]
    fn shard_index_is_stable_and_spread() {
        // sha256("abc") begins ba7816bf8f01cfea.
        assert_eq!(shard_index("abc", 2), (0xba7816bf8f01cfea_u64 % 2) as usize);
        assert_eq!(shard_index("abc", 7), (0xba7816bf8f01cfea_u64 % 7) as usize);
        assert_eq!(shard_index("abc", 1), 0);
        assert_eq!(shard_index("abc", 0), 0);
        for shards in [2, 3, 4, 8] {
            let mut counts = vec![0usize; shards];
            for i in 0..4_000 {
                let index = shard_index(&format!("session-{i}"), shards);
                assert!(index < shards);
                counts[index] += 1;
            }
            let fair = 4_000 / shards;
            for (shard, count) in counts.iter().enumerate() {
                assert!(
                    count * 10 > fair * 8 && count * 10 < fair * 12,
                    "{shards} shards: shard {shard} got {count} of 4000 keys"
                );
            }
        }
    }

    /// Shard 0 is the configured file; the others sit beside it, named after it.
    #[test]
    fn shard_paths() {
        let base = Path::new("/var/lib/ctxbridge/state.db");
        assert_eq!(shard_path(base, 0), base);
        assert_eq!(
            shard_path(base, 1),
            Path::new("/var/lib/ctxbridge/state.shard1.db")
        );
        assert_eq!(
            shard_path(base, 12),
            Path::new("/var/lib/ctxbridge/state.shard12.db")
        );
        assert_eq!(shard_path(Path::new("state"), 3), Path::new("state.shard3"));
    }
}
