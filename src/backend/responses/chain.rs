//! Chain thread ids and what this process holds for a thread besides its id.

use serde_json::Value;

use super::super::ThreadId;
use super::{COMPACTED_CHAIN_PREFIX, FRESH_CHAIN_PREFIX};

/// Where a thread id stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainPosition {
    /// `chain:…` — no response yet.
    Fresh,
    /// `compacted:…` — continues from a compacted window held in memory.
    Compacted,
    /// The last response id of a stored chain.
    Response(String),
}

impl ChainPosition {
    pub fn of(thread_id: &ThreadId) -> Self {
        let id = thread_id.as_str();
        if id.starts_with(FRESH_CHAIN_PREFIX) {
            ChainPosition::Fresh
        } else if id.starts_with(COMPACTED_CHAIN_PREFIX) {
            ChainPosition::Compacted
        } else {
            ChainPosition::Response(id.to_owned())
        }
    }
}

/// What this process holds for a thread besides its id.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ChainState {
    /// Model override from `start_thread`.
    pub(super) model: Option<String>,
    /// Developer messages to send in front of the next turn.
    pub(super) pending_developer_messages: Vec<String>,
    /// The compacted window a `compacted:` thread continues from.
    pub(super) compacted_window: Option<Vec<Value>>,
}

impl ChainState {
    pub(super) fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.pending_developer_messages.is_empty()
            && self.compacted_window.is_none()
    }

    /// What follows the chain to its next id after a turn or compaction.
    pub(super) fn carried_forward(&self) -> ChainState {
        ChainState {
            model: self.model.clone(),
            ..ChainState::default()
        }
    }
}

pub(super) fn new_thread_id(prefix: &str) -> ThreadId {
    ThreadId(format!("{prefix}{}", uuid::Uuid::new_v4()))
}
