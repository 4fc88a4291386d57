//! What earlier runs left in the state store, as `doctor` reads it without ever creating a
//! store.

use std::path::Path;

use serde::Serialize;

use crate::store::{open_store, StateStore, StoreError, StoreStats, StoreTarget};

/// What doctor found in the state store that earlier runs wrote. Its JSON form (in
/// `doctor --json`) names the variant in `state`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum PersistedState {
    /// The store was not looked at (a report built without one).
    NotInspected,
    /// The configured store file does not exist yet: no earlier run left anything. Its JSON
    /// form names the file `location`, as in every other state.
    NoStore {
        #[serde(rename = "location")]
        path: String,
    },
    /// Read from the store at `location`.
    Read {
        location: String,
        /// Quarantines persisted by earlier runs, by engine id.
        #[serde(serialize_with = "super::json::persisted_quarantines")]
        quarantines: Vec<crate::store::QuarantineRecord>,
        /// The harness's notes for doctor (also listed as warnings).
        notes: Vec<String>,
        /// Row counts and the oldest session (`None` when not counted).
        stats: Option<StoreStats>,
    },
    /// The store exists but cannot be used; the message names the file.
    Unusable { error: String },
    /// Another process holds the store's lock (the store itself may be fine).
    Locked { error: String },
}

impl PersistedState {
    /// False when the store exists and cannot be used.
    pub fn is_usable(&self) -> bool {
        !matches!(
            self,
            PersistedState::Unusable { .. } | PersistedState::Locked { .. }
        )
    }
}

/// The key of the harness's note about a no-op `compact` of `engine_id` (docs/architecture.md#compaction-on-threaded-backends), in the
/// documents namespace [`crate::harness::DOCTOR_NAMESPACE`].
pub fn no_op_compact_note_key(engine_id: &str) -> String {
    format!("noop-compact:{engine_id}")
}

/// Reads the persisted quarantines and the doctor notes of `engine_ids` from `store`.
pub fn read_persisted_state(
    store: &dyn StateStore,
    engine_ids: &[String],
) -> Result<PersistedState, StoreError> {
    let quarantines = store.quarantines()?;
    let mut notes = Vec::new();
    for id in engine_ids {
        let key = no_op_compact_note_key(id);
        if let Some(json) = store.load_document(crate::harness::DOCTOR_NAMESPACE, &key)? {
            // The harness stores the note as a JSON string; anything else is shown as stored.
            notes.push(serde_json::from_str::<String>(&json).unwrap_or(json));
        }
    }
    let stats = store.stats()?;
    Ok(PersistedState::Read {
        location: store.location(),
        quarantines,
        notes,
        stats: Some(stats),
    })
}

/// Opens the store at `path` if the file exists (never creating one) and reads what earlier
/// runs left there for `engine_ids`.
pub fn inspect_store(path: &Path, engine_ids: &[String]) -> PersistedState {
    inspect_sqlite(path, engine_ids, || {
        open_store(&StoreTarget::Sqlite(path.to_path_buf()))
    })
}

/// [`inspect_store`] for a SQLite store whose shard 0 is `path`, opened by `open`.
fn inspect_sqlite(
    path: &Path,
    engine_ids: &[String],
    open: impl FnOnce() -> Result<std::sync::Arc<dyn crate::store::StateStore>, StoreError>,
) -> PersistedState {
    match path.try_exists() {
        Ok(false) => PersistedState::NoStore {
            path: path.display().to_string(),
        },
        Err(error) => PersistedState::Unusable {
            error: format!(
                "state store {}: cannot check the file: {error}",
                path.display()
            ),
        },
        Ok(true) => open()
            .and_then(|store| read_persisted_state(store.as_ref(), engine_ids))
            .unwrap_or_else(|error| match error {
                StoreError::Locked { .. } => PersistedState::Locked {
                    error: error.to_string(),
                },
                _ => PersistedState::Unusable {
                    error: error.to_string(),
                },
            }),
    }
}

/// Connects to the configured store of any kind and reads what earlier runs left there; a
/// PostgreSQL store that cannot be reached is reported unusable (naming the URL without its
/// password), never created anew.
pub fn inspect_target(target: &StoreTarget, engine_ids: &[String]) -> PersistedState {
    match target {
        StoreTarget::Sqlite(path) => inspect_store(path, engine_ids),
        StoreTarget::ShardedSqlite { path, .. } => {
            inspect_sqlite(path, engine_ids, || open_store(target))
        }
        StoreTarget::Postgres { .. } => open_store(target)
            .and_then(|store| read_persisted_state(store.as_ref(), engine_ids))
            .unwrap_or_else(|error| PersistedState::Unusable {
                error: error.to_string(),
            }),
    }
}
