//! The thread-id map: client thread id ↔ current backend thread id (docs/serve.md#the-serve-command "Sessions",
//! "Rewriting").
//!
//! A session's client thread id is the id of its first backend thread and never changes; when
//! the harness rotates the session onto a new backend thread the map points the client id at
//! it. Until then the map is the identity. Entries are kept durably in the state store's
//! documents (namespace [`NAMESPACE`], key = client thread id) with an in-memory cache.
//!
//! The rewriting of relayed messages is pure: [`rewrite`] walks a message and replaces every
//! `threadId` and every thread object's `id` (under `thread`, or the entries of
//! `thread/list`'s `data`), and the strings of `thread/loaded/list`'s `data`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::store::StateStoreExt;
use crate::store::{StateStore, StoreError};

/// The store documents namespace of the map.
pub const NAMESPACE: &str = "serve.thread-map";
/// The store documents namespace of hidden backend threads (started by ctxbridge for a
/// session's rotation; key = backend thread id). They never appear in thread lists.
pub const HIDDEN_NAMESPACE: &str = "serve.hidden-thread";
/// The store documents namespace of a session's thread settings: what the client gave
/// `thread/start`, overlaid with its later `thread/resume` settings (key = client thread id).
/// A backend thread started by rotation gets them.
pub const SETTINGS_NAMESPACE: &str = "serve.thread-settings";

/// The fields of `thread/start` / `thread/resume` params that describe the thread itself (and
/// that a backend thread started by rotation inherits); ids, history and bookkeeping fields
/// (`threadId`, `ephemeral`, `excludeTurns`, `threadSource`, …) are not settings, nor are
/// `developerInstructions`: a rotated thread gets the ones the harness computes.
const SETTING_FIELDS: &[&str] = &[
    "cwd",
    "model",
    "modelProvider",
    "serviceTier",
    "approvalPolicy",
    "approvalsReviewer",
    "sandbox",
    "config",
    "baseInstructions",
    "personality",
    "serviceName",
];

/// The thread settings in `params` (`thread/start` or `thread/resume`): the non-null
/// [`SETTING_FIELDS`].
pub fn thread_settings(params: &Value) -> serde_json::Map<String, Value> {
    SETTING_FIELDS
        .iter()
        .filter_map(|field| {
            params
                .get(*field)
                .filter(|v| !v.is_null())
                .map(|v| ((*field).to_owned(), v.clone()))
        })
        .collect()
}

/// Which way a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From a client to the backend: client ids become backend ids.
    ToBackend,
    /// From the backend to a client: backend ids become client ids.
    ToClient,
}

/// One stored entry: `{"backendThreadId": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    backend_thread_id: String,
}

/// Client thread id ↔ backend thread id, cached in memory, persisted in the store.
pub struct ThreadMap {
    store: Option<Arc<dyn StateStore>>,
    to_backend: HashMap<String, String>,
    to_client: HashMap<String, String>,
    /// Threads started with `ephemeral: true`: never sessions, never stored.
    ephemeral: HashSet<String>,
    /// Backend threads ctxbridge started itself (cache of [`HIDDEN_NAMESPACE`]).
    hidden: HashSet<String>,
    /// Cache of [`SETTINGS_NAMESPACE`].
    settings: HashMap<String, serde_json::Map<String, Value>>,
}

impl std::fmt::Debug for ThreadMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadMap")
            .field("sessions", &self.to_backend.len())
            .field("ephemeral", &self.ephemeral.len())
            .finish_non_exhaustive()
    }
}

impl ThreadMap {
    /// An empty map persisting to `store` (or only in memory without one).
    pub fn new(store: Option<Arc<dyn StateStore>>) -> ThreadMap {
        ThreadMap {
            store,
            to_backend: HashMap::new(),
            to_client: HashMap::new(),
            ephemeral: HashSet::new(),
            hidden: HashSet::new(),
            settings: HashMap::new(),
        }
    }

    /// Records a backend thread ctxbridge started for a session: it is never listed to
    /// clients. Written through to the store.
    pub fn hide(&mut self, backend: &str) -> Result<(), StoreError> {
        if self.hidden.contains(backend) {
            return Ok(());
        }
        if let Some(store) = &self.store {
            store.save_document(HIDDEN_NAMESPACE, backend, "{}")?;
        }
        self.hidden.insert(backend.to_owned());
        Ok(())
    }

    /// Whether a backend thread was started by ctxbridge for a session (memory, then store).
    pub fn is_hidden(&mut self, backend: &str) -> bool {
        if self.hidden.contains(backend) {
            return true;
        }
        let stored = self.store.as_ref().is_some_and(|store| {
            matches!(store.load_document(HIDDEN_NAMESPACE, backend), Ok(Some(_)))
        });
        if stored {
            self.hidden.insert(backend.to_owned());
        }
        stored
    }

    /// Records a session: `client` is served by backend thread `backend` (for a new session
    /// both are the same id). Written through to the store.
    pub fn bind(&mut self, client: &str, backend: &str) -> Result<(), StoreError> {
        if let Some(store) = &self.store {
            let json = serde_json::json!({"backendThreadId": backend}).to_string();
            store.save_document(NAMESPACE, client, &json)?;
        }
        if let Some(old) = self
            .to_backend
            .insert(client.to_owned(), backend.to_owned())
        {
            self.to_client.remove(&old);
        }
        self.to_client.insert(backend.to_owned(), client.to_owned());
        Ok(())
    }

    /// Records a session's thread settings ([`thread_settings`] of its `thread/start`), or
    /// overlays later ones (a `thread/resume`) on what is stored. Nothing without a store
    /// but the in-memory copy.
    pub fn record_settings(
        &mut self,
        client: &str,
        settings: serde_json::Map<String, Value>,
        overlay: bool,
    ) -> Result<(), StoreError> {
        if overlay && settings.is_empty() {
            return Ok(());
        }
        let mut merged = if overlay {
            self.settings(client).unwrap_or_default()
        } else {
            serde_json::Map::new()
        };
        merged.extend(settings);
        if let Some(store) = &self.store {
            store.save_document(
                SETTINGS_NAMESPACE,
                client,
                &Value::Object(merged.clone()).to_string(),
            )?;
        }
        self.settings.insert(client.to_owned(), merged);
        Ok(())
    }

    /// A session's recorded thread settings (memory, then store).
    pub fn settings(&mut self, client: &str) -> Option<serde_json::Map<String, Value>> {
        if let Some(settings) = self.settings.get(client) {
            return Some(settings.clone());
        }
        let store = self.store.as_ref()?;
        match store.load_document(SETTINGS_NAMESPACE, client) {
            Ok(Some(json)) => match serde_json::from_str::<serde_json::Map<String, Value>>(&json) {
                Ok(settings) => {
                    self.settings.insert(client.to_owned(), settings.clone());
                    Some(settings)
                }
                Err(error) => {
                    tracing::warn!(%client, %error, "serve: unreadable thread settings; ignored");
                    None
                }
            },
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%client, %error, "serve: loading thread settings failed");
                None
            }
        }
    }

    /// Marks an ephemeral thread (pure pass-through, never stored).
    pub fn mark_ephemeral(&mut self, thread_id: &str) {
        self.ephemeral.insert(thread_id.to_owned());
    }

    /// Whether a thread was started as ephemeral by a client of this process.
    pub fn is_ephemeral(&self, thread_id: &str) -> bool {
        self.ephemeral.contains(thread_id)
    }

    /// The backend thread currently serving a client thread id: the cache, then the store,
    /// else the id itself (a thread this proxy never mapped).
    pub fn backend_of(&mut self, client: &str) -> String {
        if let Some(backend) = self.to_backend.get(client) {
            return backend.clone();
        }
        if let Some(store) = &self.store {
            match store.load_document(NAMESPACE, client) {
                Ok(Some(json)) => match serde_json::from_str::<Entry>(&json) {
                    Ok(entry) => {
                        self.to_backend
                            .insert(client.to_owned(), entry.backend_thread_id.clone());
                        self.to_client
                            .insert(entry.backend_thread_id.clone(), client.to_owned());
                        return entry.backend_thread_id;
                    }
                    Err(error) => {
                        tracing::warn!(%client, %error, "serve: unreadable thread-map entry; using the id as is");
                    }
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%client, %error, "serve: thread-map lookup failed; using the id as is");
                }
            }
        }
        client.to_owned()
    }

    /// [`ThreadMap::is_hidden`] without caching (for use while the map is borrowed).
    fn is_hidden_cached_or_stored(&self, backend: &str) -> bool {
        self.hidden.contains(backend)
            || self.store.as_ref().is_some_and(|store| {
                matches!(store.load_document(HIDDEN_NAMESPACE, backend), Ok(Some(_)))
            })
    }

    /// The client thread id of a backend thread (the id itself when unmapped).
    pub fn client_of(&self, backend: &str) -> String {
        self.to_client
            .get(backend)
            .cloned()
            .unwrap_or_else(|| backend.to_owned())
    }

    /// Rewrites a message travelling in `direction`; `method` is the request's method for a
    /// response (list results are shaped by it).
    pub fn rewrite(&mut self, value: &mut Value, direction: Direction, method: Option<&str>) {
        match direction {
            Direction::ToClient => {
                // Lists show each session once, under its client id: hidden backend threads
                // are dropped from `thread/list` (the client's own thread stands for the
                // session) and `thread/loaded/list` loses the duplicates the mapping makes.
                if method == Some("thread/list") {
                    if let Some(data) = value.get_mut("data").and_then(Value::as_array_mut) {
                        data.retain(|thread| {
                            thread
                                .get("id")
                                .and_then(Value::as_str)
                                .map_or(true, |id| !self.is_hidden_cached_or_stored(id))
                        });
                    }
                }
                if method == Some("thread/loaded/list") {
                    // A hidden thread a session has moved on from stands for nothing.
                    if let Some(data) = value.get_mut("data").and_then(Value::as_array_mut) {
                        data.retain(|id| {
                            id.as_str().map_or(true, |id| {
                                self.to_client.contains_key(id)
                                    || !self.is_hidden_cached_or_stored(id)
                            })
                        });
                    }
                }
                let map = &self.to_client;
                rewrite(value, method, &|id| map.get(id).cloned());
                if method == Some("thread/loaded/list") {
                    if let Some(data) = value.get_mut("data").and_then(Value::as_array_mut) {
                        let mut seen = HashSet::new();
                        data.retain(|id| seen.insert(id.to_string()));
                    }
                }
            }
            Direction::ToBackend => {
                // Resolve every client id the message names first (the store may know it).
                let mut ids = Vec::new();
                collect_ids(value, method, &mut ids);
                let resolved: HashMap<String, String> = ids
                    .into_iter()
                    .map(|id| {
                        let backend = self.backend_of(&id);
                        (id, backend)
                    })
                    .collect();
                rewrite(value, method, &|id| resolved.get(id).cloned());
            }
        }
    }
}

/// Replaces thread ids in `value` with `map(id)` where it gives one: in the fields that hold
/// one (see [`holds_thread_id`]), thread objects' `id` and rollout paths' file names. `method`
/// names the request a result answers: `thread/list` results hold thread objects in `data`, `thread/loaded/list`
/// results hold thread ids in `data`.
pub fn rewrite(value: &mut Value, method: Option<&str>, map: &dyn Fn(&str) -> Option<String>) {
    if let Some(data) = value.get_mut("data").and_then(Value::as_array_mut) {
        match method {
            Some("thread/list") => {
                for thread in data.iter_mut() {
                    rewrite_field(thread, "id", map);
                }
            }
            Some("thread/loaded/list") => {
                for id in data.iter_mut() {
                    if let Some(new) = id.as_str().and_then(map) {
                        *id = Value::String(new);
                    }
                }
            }
            _ => {}
        }
    }
    walk(value, map);
}

/// Whether a field of this name holds a thread id: `threadId`, every `…ThreadId`
/// (`parentThreadId`, `attachedToThreadId`, `agentThreadId`, `senderThreadId`,
/// `beforeThreadId`, `reviewThreadId`), `forkedFromId`, and a thread's `sessionId` (the root
/// thread of its session tree: for a thread of its own, its id).
fn holds_thread_id(key: &str) -> bool {
    key == "threadId" || key.ends_with("ThreadId") || key == "forkedFromId" || key == "sessionId"
}

/// The thread id a Codex rollout path names: `…/rollout-<time>-<id>.jsonl`, `<id>` a UUID.
/// Returns the byte range of the id in `path`.
fn rollout_id_range(path: &str) -> Option<std::ops::Range<usize>> {
    const UUID_LEN: usize = 36;
    let stem = path.strip_suffix(".jsonl")?;
    let name_start = stem.rfind('/').map_or(0, |slash| slash + 1);
    if !stem[name_start..].starts_with("rollout-") {
        return None;
    }
    let start = stem.len().checked_sub(UUID_LEN)?;
    if start < name_start + "rollout-".len() || !stem.is_char_boundary(start) {
        return None;
    }
    let id = &stem[start..];
    let uuid_shaped = id.char_indices().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => c == '-',
        _ => c.is_ascii_hexdigit(),
    });
    uuid_shaped.then_some(start..stem.len())
}

/// Rewrites the thread id inside a rollout path (see [`rollout_id_range`]); other paths are
/// left alone.
fn rewrite_rollout_path(slot: &mut Value, map: &dyn Fn(&str) -> Option<String>) {
    let Some(path) = slot.as_str() else {
        return;
    };
    let Some(range) = rollout_id_range(path) else {
        return;
    };
    if let Some(new) = map(&path[range.clone()]) {
        let mut rewritten = path.to_owned();
        rewritten.replace_range(range, &new);
        *slot = Value::String(rewritten);
    }
}

fn walk(value: &mut Value, map: &dyn Fn(&str) -> Option<String>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                match key.as_str() {
                    id if holds_thread_id(id) => {
                        if let Some(new) = child.as_str().and_then(map) {
                            *child = Value::String(new);
                        }
                    }
                    "path" => rewrite_rollout_path(child, map),
                    "thread" => {
                        rewrite_field(child, "id", map);
                        walk(child, map);
                    }
                    _ => walk(child, map),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, map);
            }
        }
        _ => {}
    }
}

fn rewrite_field(object: &mut Value, field: &str, map: &dyn Fn(&str) -> Option<String>) {
    if let Some(slot) = object.get_mut(field) {
        if let Some(new) = slot.as_str().and_then(map) {
            *slot = Value::String(new);
        }
    }
}

/// Every thread id `rewrite` would look at.
fn collect_ids(value: &Value, method: Option<&str>, out: &mut Vec<String>) {
    let mut probe = value.clone();
    let seen = std::cell::RefCell::new(Vec::new());
    rewrite(&mut probe, method, &|id| {
        seen.borrow_mut().push(id.to_owned());
        None
    });
    out.extend(seen.into_inner());
}

/// The thread id a message is about: `params.threadId`, else `params.thread.id`.
pub fn thread_of(params: &Value) -> Option<&str> {
    params
        .get("threadId")
        .and_then(Value::as_str)
        .or_else(|| params.pointer("/thread/id").and_then(Value::as_str))
}

#[cfg(test)]
mod tests;
