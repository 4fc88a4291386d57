//! Responses whose client has heard their end while they are still being kept.
//!
//! A streamed answer ends (`response.completed`, then the end of the stream) as soon as the
//! model has answered; the turn's record and the response's own record are written after,
//! together. Until they are, a request that reads the response or its conversation — the
//! next response of the chain, `GET /v1/responses/{id}`, the conversation's items — waits
//! for them here, so what a client can see never runs ahead of what is kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::{FutureExt, Shared};
use tokio::sync::oneshot;

use crate::util::sync::lock;

/// The keeping of one response: resolves when it is over, kept or not.
type Settled = Shared<oneshot::Receiver<()>>;

/// What is being kept, by the ids a request may name: the response's, and its
/// conversation's.
#[derive(Default)]
pub(super) struct Unsettled(Arc<Mutex<HashMap<String, Settled>>>);

impl Unsettled {
    /// Marks `ids` as being kept until the returned guard is dropped.
    pub(super) fn begin(&self, ids: Vec<String>) -> Settling {
        let (done, settled) = oneshot::channel();
        let settled = settled.shared();
        let mut unsettled = lock(&self.0);
        for id in &ids {
            unsettled.insert(id.clone(), settled.clone());
        }
        Settling {
            unsettled: self.0.clone(),
            ids,
            settled,
            _done: done,
        }
    }

    /// Waits until nothing named `id` is being kept.
    pub(super) async fn settled(&self, id: &str) {
        loop {
            let Some(settled) = lock(&self.0).get(id).cloned() else {
                return;
            };
            // A keeping that ends, ends whether or not it kept: either way it is over.
            let _ = settled.await;
        }
    }
}

/// The keeping of one response under way; dropped, it is over (also when it failed, or the
/// task keeping it went away), and what waited on it goes on.
pub(super) struct Settling {
    unsettled: Arc<Mutex<HashMap<String, Settled>>>,
    ids: Vec<String>,
    settled: Settled,
    _done: oneshot::Sender<()>,
}

impl Drop for Settling {
    fn drop(&mut self) {
        let mut unsettled = lock(&self.unsettled);
        for id in &self.ids {
            // Only this keeping's mark goes: a later one under the same id stays.
            if unsettled
                .get(id)
                .is_some_and(|other| other.ptr_eq(&self.settled))
            {
                unsettled.remove(id);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A read of a response being kept waits until the keeping is over; other ids do not
    /// wait.
    #[tokio::test]
    async fn a_read_waits_for_the_keeping_of_what_it_names() {
        let unsettled = Arc::new(Unsettled::default());
        let settling = unsettled.begin(vec!["resp_1".into(), "conv_1".into()]);
        tokio::time::timeout(Duration::from_millis(50), unsettled.settled("resp_2"))
            .await
            .expect("an id nobody keeps does not wait");
        let waiting = tokio::spawn({
            let unsettled = unsettled.clone();
            async move { unsettled.settled("conv_1").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the read waits for the keeping");
        drop(settling);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the read goes on once the keeping is over")
            .unwrap();
        assert!(lock(&unsettled.0).is_empty(), "nothing is left marked");
    }

    /// A keeping that ends leaves a later one under the same id in place.
    #[tokio::test]
    async fn an_earlier_keeping_does_not_end_a_later_one() {
        let unsettled = Unsettled::default();
        let first = unsettled.begin(vec!["conv_1".into()]);
        let second = unsettled.begin(vec!["conv_1".into()]);
        drop(first);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), unsettled.settled("conv_1"))
                .await
                .is_err(),
            "the later keeping still holds the conversation"
        );
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), unsettled.settled("conv_1"))
            .await
            .expect("over once both are");
    }
}
