//! Serialising the turns of one session: an in-process async mutex per session, and a lease in
//! the store so that processes sharing one store serialise too (SPEC §9.4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::store::{Lease, LeaseAttempt, StateStore, StoreError};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a session could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionLockError {
    /// Another holder kept the session's lease for longer than the harness waits.
    #[error("session {session:?} is busy: another process ({holder}) is running a turn on it; waited {waited_ms} ms")]
    Busy {
        /// The session (its binding key).
        session: String,
        /// The lease's holder.
        holder: String,
        /// How long this harness waited.
        waited_ms: u64,
    },
    /// The store failed to hand out the lease.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Per-session locks of this process.
#[derive(Default)]
pub struct SessionLocks {
    locks: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    /// Held by a session's deferred (background) maintenance while it runs; a new turn of the
    /// session waits for it, so the two never overlap.
    maintenance: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

/// A held session: the in-process guard plus the store lease (released on `release`).
pub struct SessionGuard {
    _local: OwnedMutexGuard<()>,
    /// The store lease held.
    pub lease: Lease,
    store: Arc<dyn StateStore>,
    released: bool,
}

impl SessionGuard {
    /// The fencing generation of this holder.
    pub fn generation(&self) -> u64 {
        self.lease.generation
    }

    /// Releases the store lease.
    pub fn release(mut self) -> Result<(), StoreError> {
        self.released = true;
        self.store.release_lease(&self.lease)
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.store.release_lease(&self.lease) {
                tracing::warn!(session = %self.lease.session, error = %e, "could not release the session lease; it will expire");
            }
        }
    }
}

impl SessionLocks {
    fn entry(
        map: &Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
        session: &str,
    ) -> Arc<AsyncMutex<()>> {
        // The map only holds Arcs; a panic while it was locked cannot corrupt it.
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(session.to_string())
            .or_insert_with(|| Arc::new(AsyncMutex::new(())))
            .clone()
    }

    fn local(&self, session: &str) -> Arc<AsyncMutex<()>> {
        Self::entry(&self.locks, session)
    }

    /// Marks deferred maintenance of `session` as running until the returned guard drops.
    /// Called by the turn that defers it (which holds the session), so the mark is in place
    /// before the session can be taken again.
    pub(crate) async fn hold_for_maintenance(&self, session: &str) -> OwnedMutexGuard<()> {
        Self::entry(&self.maintenance, session).lock_owned().await
    }

    /// Takes the session: first in this process, then in the store (waiting up to `wait` for
    /// another process's lease, which expires after `ttl` if that process died).
    pub async fn acquire(
        &self,
        store: &Arc<dyn StateStore>,
        session: &str,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<SessionGuard, SessionLockError> {
        let local = self.local(session).lock_owned().await;
        // Deferred maintenance of the previous turn finishes before this turn starts.
        drop(Self::entry(&self.maintenance, session).lock().await);
        let started = now_ms();
        let mut pause = Duration::from_millis(10);
        loop {
            match store.try_acquire_lease(session, holder, now_ms(), ttl.as_millis() as u64)? {
                LeaseAttempt::Acquired(lease) => {
                    return Ok(SessionGuard {
                        _local: local,
                        lease,
                        store: store.clone(),
                        released: false,
                    })
                }
                LeaseAttempt::Busy { holder: other, .. } => {
                    let waited = now_ms().saturating_sub(started);
                    if waited >= wait.as_millis() as u64 {
                        return Err(SessionLockError::Busy {
                            session: session.to_string(),
                            holder: other,
                            waited_ms: waited,
                        });
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
            }
        }
    }
}
