//! [`Messages`]: a list of messages shared by reference, so that a session's transcript can be
//! handed to `assemble` and returned in its result without copying it every turn.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::json_size::message_json_bytes;
use super::message::AgentMessage;

/// The list and its JSON size, kept together so the size never goes stale.
#[derive(Clone, Default)]
struct Inner {
    items: Vec<AgentMessage>,
    /// Sum of [`message_json_bytes`] over `items`.
    items_json_bytes: usize,
}

/// A list of messages behind an [`Arc`]: cloning it is O(1), reading it is reading a slice
/// (it derefs to `[AgentMessage]`), and appending changes it in place when this is the only
/// handle (else the list is copied first, so other handles never see the change). It also
/// keeps the JSON size of the list (docs/architecture.md#bounding) up to date as it grows, so bounding an
/// assembled result does not walk every message each turn. On the wire it is a plain JSON
/// array.
#[derive(Clone, Default)]
pub struct Messages(Arc<Inner>);

impl Messages {
    /// An empty list.
    pub fn new() -> Self {
        Messages::default()
    }

    /// The messages.
    pub fn as_slice(&self) -> &[AgentMessage] {
        &self.0.items
    }

    /// The messages as an owned vector (moved out when this is the only handle).
    pub fn into_vec(self) -> Vec<AgentMessage> {
        match Arc::try_unwrap(self.0) {
            Ok(inner) => inner.items,
            Err(shared) => shared.items.clone(),
        }
    }

    /// Appends `message`.
    pub fn push(&mut self, message: AgentMessage) {
        let inner = Arc::make_mut(&mut self.0);
        inner.items_json_bytes += message_json_bytes(&message);
        inner.items.push(message);
    }

    /// Whether both handles share one list.
    pub fn ptr_eq(&self, other: &Messages) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The JSON size of the list as a JSON array, strings counted unescaped (as
    /// [`super::transcript_json_bytes`] measures it), in O(1).
    pub fn json_bytes(&self) -> usize {
        2 + self.0.items_json_bytes + self.0.items.len().saturating_sub(1)
    }
}

impl Extend<AgentMessage> for Messages {
    fn extend<I: IntoIterator<Item = AgentMessage>>(&mut self, iter: I) {
        let mut iter = iter.into_iter().peekable();
        if iter.peek().is_none() {
            return;
        }
        let inner = Arc::make_mut(&mut self.0);
        for message in iter {
            inner.items_json_bytes += message_json_bytes(&message);
            inner.items.push(message);
        }
    }
}

impl Deref for Messages {
    type Target = [AgentMessage];

    fn deref(&self) -> &[AgentMessage] {
        &self.0.items
    }
}

impl AsRef<[AgentMessage]> for Messages {
    fn as_ref(&self) -> &[AgentMessage] {
        &self.0.items
    }
}

impl From<Vec<AgentMessage>> for Messages {
    fn from(items: Vec<AgentMessage>) -> Self {
        let items_json_bytes = items.iter().map(message_json_bytes).sum();
        Messages(Arc::new(Inner {
            items,
            items_json_bytes,
        }))
    }
}

impl From<&[AgentMessage]> for Messages {
    fn from(items: &[AgentMessage]) -> Self {
        Messages::from(items.to_vec())
    }
}

impl FromIterator<AgentMessage> for Messages {
    fn from_iter<I: IntoIterator<Item = AgentMessage>>(iter: I) -> Self {
        Messages::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a AgentMessage;
    type IntoIter = std::slice::Iter<'a, AgentMessage>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.items.iter()
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.0.items == other.0.items
    }
}

impl PartialEq<Vec<AgentMessage>> for Messages {
    fn eq(&self, other: &Vec<AgentMessage>) -> bool {
        self.0.items == *other
    }
}

impl PartialEq<[AgentMessage]> for Messages {
    fn eq(&self, other: &[AgentMessage]) -> bool {
        self.0.items == other
    }
}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.items.iter()).finish()
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.items.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<AgentMessage>::deserialize(deserializer).map(Messages::from)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::transcript_json_bytes;

    /// Appending to a shared list copies it first: the other handle keeps what it had; the
    /// only handle appends in place.
    #[test]
    fn appends_copy_on_write() {
        let mut a = Messages::from(vec![AgentMessage::user("one")]);
        let b = a.clone();
        assert!(a.ptr_eq(&b));
        a.push(AgentMessage::assistant("two"));
        assert!(!a.ptr_eq(&b));
        assert_eq!(b.len(), 1);
        assert_eq!(a.len(), 2);
        a.extend([AgentMessage::user("three")]);
        assert_eq!(a.len(), 3);
        assert_eq!(b.len(), 1);
        assert_eq!(a.into_vec().len(), 3);
    }

    /// The kept JSON size is the one measured over the whole list, through every way the
    /// list is built or grown, and a JSON round trip keeps the list.
    #[test]
    fn json_size_follows_the_list() {
        let mut m = Messages::new();
        assert_eq!(m.json_bytes(), transcript_json_bytes(&[]));
        m.push(AgentMessage::user("héllo \"there\""));
        m.extend([
            AgentMessage::assistant("hi").with_id("a-1"),
            AgentMessage::user("x"),
        ]);
        assert_eq!(m.json_bytes(), transcript_json_bytes(&m));
        let built: Messages = m.iter().cloned().collect();
        assert_eq!(built.json_bytes(), m.json_bytes());
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.starts_with('['));
        let back: Messages = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.json_bytes(), m.json_bytes());
    }
}
