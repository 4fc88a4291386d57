//! Leases kept after their turn (parked) for the session's next turn in this process, and
//! their release when the linger is over.
//!
//! One reaper task per harness releases the leases whose linger has ended, rather than a timer
//! task per parked lease: a turn that parks its lease spawns nothing (a task and a timer per
//! turn, cancelled by the session's next turn, cost more than the turn's own store write), and
//! the leases whose lingers end close together are released in one write batch instead of a
//! transaction each. A lease is released between the end of its linger and an eighth of the
//! linger later.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::session::{Heartbeat, SessionFacts};
use crate::store::{Lease, StateStore, StateStoreExt, TurnWrite};
use crate::util::lock;

/// Leases kept after their turn, by lease key.
#[derive(Default)]
pub(super) struct Parking {
    /// How long a lease is kept after its turn; zero releases it at once.
    linger: Duration,
    parked: Mutex<ParkedSet>,
}

#[derive(Default)]
struct ParkedSet {
    leases: HashMap<String, Parked>,
    /// When each parking's linger ends, in the order the leases were parked. The linger is the
    /// same for all, so this is also the order of the ends. An entry whose lease has been taken
    /// back (and maybe parked anew since, with an end of its own) no longer matches the lease's
    /// `parking` number and is skipped.
    ends: VecDeque<LingerEnd>,
    /// The number of the next parking.
    next_parking: u64,
    /// The reaper task (see the module documentation): `None` once it has said it stops; a
    /// reaper whose runtime shut down under it is finished. Either way the next parking
    /// starts another.
    reaper: Option<JoinHandle<()>>,
}

struct LingerEnd {
    at: Instant,
    key: String,
    parking: u64,
}

/// A parked lease: what the session's next turn takes back.
pub(super) struct Parked {
    pub(super) lease: Lease,
    pub(super) store: Arc<dyn StateStore>,
    pub(super) heartbeat: Heartbeat,
    pub(super) facts: Option<SessionFacts>,
    /// Which parking this is (see [`ParkedSet::ends`]).
    parking: u64,
}

impl Parked {
    pub(super) fn new(
        lease: Lease,
        store: Arc<dyn StateStore>,
        heartbeat: Heartbeat,
        facts: Option<SessionFacts>,
    ) -> Parked {
        Parked {
            lease,
            store,
            heartbeat,
            facts,
            parking: 0,
        }
    }

    /// Stops renewing the lease and releases it in the store.
    pub(super) async fn release(self) {
        self.heartbeat.stop();
        if let Err(e) = self
            .store
            .submit(TurnWrite::ReleaseLease(self.lease.clone()))
            .await
        {
            tracing::warn!(session = %self.lease.session, error = %e, "could not release a parked session lease; it will expire");
        }
    }
}

/// Releases `leases` together: queued at once, they go to the store in one write batch rather
/// than in a transaction each.
pub(super) async fn release_all(leases: Vec<Parked>) {
    futures::future::join_all(leases.into_iter().map(Parked::release)).await;
}

impl Parking {
    pub(super) fn new(linger: Duration) -> Parking {
        Parking {
            linger,
            parked: Mutex::default(),
        }
    }

    pub(super) fn linger(&self) -> Duration {
        self.linger
    }

    fn lock(&self) -> MutexGuard<'_, ParkedSet> {
        // The set only holds leases, task handles and numbers; a panic while it was locked
        // leaves each entry whole.
        lock(&self.parked)
    }

    /// Parks `parked` under `key` until the linger ends, starting the reaper on `runtime` if
    /// none runs. Answers the lease parked under `key` before, if any (not reached: a
    /// session's lease is parked only by the guard that holds the session's local lock).
    pub(super) fn park(
        self: &Arc<Self>,
        key: String,
        mut parked: Parked,
        runtime: &Handle,
    ) -> Option<Parked> {
        let mut set = self.lock();
        parked.parking = set.next_parking;
        set.next_parking += 1;
        set.ends.push_back(LingerEnd {
            at: Instant::now() + self.linger,
            key: key.clone(),
            parking: parked.parking,
        });
        let replaced = set.leases.insert(key, parked);
        if set.reaper.as_ref().map_or(true, JoinHandle::is_finished) {
            set.reaper = Some(runtime.spawn(reap(Arc::downgrade(self))));
        }
        replaced
    }

    /// Takes the parked lease of `key`, if any.
    pub(super) fn take(&self, key: &str) -> Option<Parked> {
        self.lock().leases.remove(key)
    }

    /// Takes every parked lease.
    pub(super) fn take_all(&self) -> Vec<Parked> {
        let mut set = self.lock();
        set.ends.clear();
        set.leases.drain().map(|(_, parked)| parked).collect()
    }

    /// What the reaper does next: the leases whose linger ended by `now`, taken, and when the
    /// next linger ends (`None`: nothing is parked, and the reaper has stopped).
    fn due(&self, now: Instant) -> (Vec<Parked>, Option<Instant>) {
        let mut guard = self.lock();
        let set = &mut *guard;
        let ended = set.ends.iter().take_while(|end| end.at <= now).count();
        let mut due = Vec::new();
        for end in set.ends.drain(..ended) {
            if set.leases.get(&end.key).map(|p| p.parking) == Some(end.parking) {
                due.extend(set.leases.remove(&end.key));
            }
        }
        let next = set.ends.front().map(|end| end.at);
        if next.is_none() {
            set.reaper = None;
        }
        (due, next)
    }
}

/// The reaper: releases the parked leases whose linger has ended, waiting after each end for
/// an eighth of the linger so that the leases ending meanwhile go in the same batch; stops when
/// nothing is parked (or the harness is gone).
async fn reap(parking: Weak<Parking>) {
    loop {
        let Some(here) = parking.upgrade() else {
            return;
        };
        let (due, next) = here.due(Instant::now());
        let gather = here.linger / 8;
        drop(here);
        release_all(due).await;
        let Some(next) = next else {
            return;
        };
        tokio::time::sleep_until(next + gather).await;
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        // Dropped without a shutdown: queue each release, as a dropped guard does.
        for parked in self.take_all() {
            parked.heartbeat.stop();
            parked
                .store
                .submit_detached(TurnWrite::ReleaseLease(parked.lease));
        }
    }
}
