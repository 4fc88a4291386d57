//! Serialising the turns of one session: an in-process async mutex per session, and a lease in
//! the store so that processes sharing one store serialise too (docs/architecture.md#the-thread-binding-and-its-fingerprints).
//!
//! A lease names its holder as `ctxbridge@HOST:PID:START:NONCE` (START: the process's start
//! time in clock ticks since boot, which tells a reused PID from the original process). A lease
//! whose holder ran on this host and no longer exists is taken over at once; any other lease
//! is waited for until it is released or expires. Held leases are renewed by a heartbeat every
//! third of their TTL, so the TTL only bounds how long a vanished holder on another host (or
//! one whose liveness cannot be checked) blocks the session.
//!
//! A lease is kept (parked) for a short linger after its turn: the session's next turn in this
//! process takes it back without a store write, so a run of turns costs one lease acquisition
//! and one release instead of one of each per turn. Nothing else changes: the heartbeat keeps
//! renewing a parked lease, its generation still fences, another process waits at most the
//! linger for it, and shutdown releases every parked lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::task::JoinHandle;

use super::parking::{release_all, Parked, Parking};
use crate::store::StateStoreExt;
use crate::store::{
    Lease, LeaseAttempt, SessionRead, SessionSnapshot, StateStore, StoreError, TurnWrite,
};
use crate::util::lock;
use crate::util::now_ms;

/// The prefix of holder ids written by this build.
const HOLDER_PREFIX: &str = "ctxbridge@";

/// A lease holder's identity, parsed from its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderId {
    /// The host name the holder ran on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its start time (clock ticks since boot; 0 when unknown).
    pub start: u64,
    /// A nonce telling apart the harnesses of one process.
    pub nonce: String,
}

impl HolderId {
    /// This process's holder id with a fresh nonce.
    pub fn for_this_process() -> HolderId {
        let pid = std::process::id();
        HolderId {
            host: host_name(),
            pid,
            start: process_start(pid).unwrap_or(0),
            nonce: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
        }
    }

    /// Parses an id written by [`HolderId::render`]; `None` for other (older) formats.
    pub fn parse(id: &str) -> Option<HolderId> {
        let rest = id.strip_prefix(HOLDER_PREFIX)?;
        let mut parts = rest.rsplitn(4, ':');
        let nonce = parts.next()?.to_string();
        let start = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_string();
        Some(HolderId {
            host,
            pid,
            start,
            nonce,
        })
    }

    /// The id stored in the lease.
    pub fn render(&self) -> String {
        format!(
            "{HOLDER_PREFIX}{}:{}:{}:{}",
            self.host, self.pid, self.start, self.nonce
        )
    }
}

/// Whether a lease holder is known to be gone: it ran on this host and its process no longer
/// exists (or its PID now belongs to a process started at another time). Unknown formats,
/// other hosts and hosts without `/proc` are never declared dead.
pub fn holder_is_dead(holder: &str) -> bool {
    let Some(id) = HolderId::parse(holder) else {
        return false;
    };
    if id.host != host_name() || !std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    match process_start(id.pid) {
        None => true,
        Some(start) => id.start != 0 && start != id.start,
    }
}

/// Describes a holder for messages: "process PID on HOST" when the id is parseable.
pub fn describe_holder(holder: &str) -> String {
    match HolderId::parse(holder) {
        Some(id) => format!(
            "process {} on host {} (lease holder {holder})",
            id.pid, id.host
        ),
        None => format!("lease holder {holder}"),
    }
}

/// This host's name (the kernel's, by `gethostname`; `$HOSTNAME`, else `localhost`, when it
/// is empty or not UTF-8).
pub fn host_name() -> String {
    gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".into())
}

/// A process's start time in clock ticks since boot (`starttime` of `/proc/PID/stat`);
/// `None` when the process does not exist, or off Linux.
pub fn process_start(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let pid = i32::try_from(pid).ok()?;
        procfs::process::Process::new(pid)
            .and_then(|process| process.stat())
            .map(|stat| stat.starttime)
            .ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Why a session could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionLockError {
    /// Another holder kept the session's lease for longer than the harness waits.
    #[error("session {session:?} is busy: {holder_description} is running a turn on it (waited {waited_ms} ms; its lease expires in {expires_in_ms} ms unless renewed)")]
    Busy {
        /// The session key.
        session: String,
        /// The lease's holder id.
        holder: String,
        /// The holder for people: its process and host.
        holder_description: String,
        /// How long this harness waited.
        waited_ms: u64,
        /// When the lease runs out unless its holder renews it.
        expires_in_ms: u64,
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
    /// Leases kept after their turn for the session's next one.
    parking: Arc<Parking>,
}

/// What a turn learnt of its session's stored state that stays true while this process keeps
/// the session's lease: nobody else can write the session meanwhile, so the next turn under
/// the kept lease need not read it again. Kept with a parked lease, gone with its release.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFacts {
    /// The session id the session key maps to.
    pub session_id: String,
    /// The session's outbox holds no queued commit.
    pub outbox_empty: bool,
    /// Engines whose bootstrap of the session is marked done.
    pub bootstrapped: Vec<String>,
    /// `bootstrapped` is every engine marked (read with the lease), not only those this
    /// process saw: an engine missing from it is known not to be marked.
    pub all_bootstrapped: bool,
    /// Where the harness's copy of the transcript ended after this process's own append: the
    /// next turn under the kept lease uses the copy without reading the store, if it is still
    /// there at this cursor (a rewrite drops it).
    pub transcript: Option<crate::store::TranscriptCursor>,
    /// The transcript is known to hold no entry (read with the lease from a store that hands
    /// out no cursor to keep a copy at).
    pub transcript_empty: bool,
}

impl SessionFacts {
    /// What a lease's own transaction read of the session, as facts of a held lease.
    pub fn of_snapshot(snapshot: &SessionSnapshot) -> Self {
        SessionFacts {
            session_id: snapshot.session_id.clone(),
            outbox_empty: snapshot.outbox_empty,
            bootstrapped: snapshot.bootstrapped.clone(),
            all_bootstrapped: true,
            transcript: snapshot.empty_transcript_cursor,
            transcript_empty: snapshot.transcript_empty,
        }
    }
}

/// A held session: the in-process guard plus the store lease (released or parked on
/// `release`).
pub struct SessionGuard {
    _local: OwnedMutexGuard<()>,
    /// The store lease held.
    pub lease: Lease,
    store: Arc<dyn StateStore>,
    released: bool,
    heartbeat: Option<Heartbeat>,
    /// Where `release` parks the lease.
    parking: Arc<Parking>,
    /// How long the store lease was waited for while another holder had it (zero: free).
    waited: Duration,
    /// The lease was taken over from a holder that no longer runs.
    took_over: bool,
    /// The lease was taken back from this process's parking, without a store write.
    reused: bool,
    /// What the previous turn under this (kept) lease learnt, or what this turn leaves for the
    /// next.
    facts: Option<SessionFacts>,
    /// What the store read of the session with the lease, when it was taken from the store
    /// with a [`SessionRead`].
    snapshot: Option<SessionSnapshot>,
}

impl SessionGuard {
    /// How long acquiring waited for another holder's lease (zero when it was free).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Whether the lease was taken over from a dead holder.
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// Whether the lease was kept from this process's previous turn of the session (no store
    /// write took it; its generation is the one this process last held).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// What the previous turn under this kept lease learnt of the session (`None` for a lease
    /// taken from the store: then nothing is known but what the store says).
    pub fn take_facts(&mut self) -> Option<SessionFacts> {
        self.facts.take()
    }

    /// What the store read of the session in the transaction that took this lease (`None`
    /// for a kept lease, or when nothing was asked or the store read nothing).
    pub fn take_snapshot(&mut self) -> Option<SessionSnapshot> {
        self.snapshot.take()
    }

    /// Leaves `facts` for the session's next turn, if it takes this lease back.
    pub fn keep_facts(&mut self, facts: SessionFacts) {
        self.facts = Some(facts);
    }

    /// The store holding the session's state, on which the lease is held: the session's
    /// writes under this guard go there.
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// The fencing generation of this holder.
    pub fn generation(&self) -> u64 {
        self.lease.generation
    }

    /// Ends the turn's hold of the session: the lease is parked for the linger (the
    /// session's next turn in this process takes it back), or released in the store when there
    /// is no linger, no heartbeat keeps it alive, or the heartbeat lost it.
    pub async fn release(mut self) -> Result<(), StoreError> {
        self.released = true;
        let Some(heartbeat) = self.heartbeat.take() else {
            return self.release_now().await;
        };
        let linger = self.parking.linger();
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(runtime) if !linger.is_zero() && !heartbeat.state.lost.load(Ordering::Acquire) => {
                let parked = Parked::new(
                    self.lease.clone(),
                    self.store.clone(),
                    heartbeat,
                    self.facts.take(),
                );
                let key = self.lease.session.clone();
                if let Some(old) = self.parking.park(key, parked, &runtime) {
                    // Not reached (see `Parking::park`). Released all the same rather than
                    // leaked.
                    old.release().await;
                }
                Ok(())
            }
            _ => {
                heartbeat.stop();
                self.release_now().await
            }
        }
    }

    async fn release_now(&self) -> Result<(), StoreError> {
        self.store
            .submit(TurnWrite::ReleaseLease(self.lease.clone()))
            .await
            .map(|_| ())
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.stop();
        }
        if !self.released {
            // A failure is logged by the store; the lease then expires.
            self.store
                .submit_detached(TurnWrite::ReleaseLease(self.lease.clone()));
        }
    }
}

impl SessionLocks {
    /// Locks whose leases are kept for `linger` after each turn (zero: released at once).
    pub fn with_linger(linger: Duration) -> Self {
        SessionLocks {
            parking: Arc::new(Parking::new(linger)),
            ..SessionLocks::default()
        }
    }

    /// Releases every parked lease in the store (shutdown; the benches' measured runs).
    pub async fn release_parked(&self) {
        release_all(self.parking.take_all()).await;
    }

    /// A parked lease of `key` on `store` that is still good to run a turn under: its
    /// heartbeat has not lost it and renewed it recently enough that it outlives a third of
    /// its TTL. A parked lease that is not is released.
    async fn take_back(
        &self,
        store: &Arc<dyn StateStore>,
        key: &str,
        ttl_ms: u64,
    ) -> Option<Parked> {
        let parked = self.parking.take(key)?;
        let same_store = std::ptr::eq(
            Arc::as_ptr(&parked.store).cast::<()>(),
            Arc::as_ptr(store).cast::<()>(),
        );
        let state = &parked.heartbeat.state;
        let good_until = state
            .renewed_at_ms
            .load(Ordering::Acquire)
            .saturating_add(ttl_ms - ttl_ms / 3);
        if same_store && !state.lost.load(Ordering::Acquire) && now_ms() < good_until {
            return Some(parked);
        }
        parked.release().await;
        None
    }

    fn entry(
        map: &Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
        session: &str,
    ) -> Arc<AsyncMutex<()>> {
        // The map only holds Arcs; a panic while it was locked cannot corrupt it.
        let mut map = lock(map);
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
    /// another process's lease, which expires after `ttl` unless its holder renews it; a
    /// holder that died on this host is taken over at once). `key` is the lease's key; `read`
    /// names the session (its key also names it in messages) and what a lease taken from the
    /// store reads of it in the same transaction ([`SessionGuard::take_snapshot`]).
    pub async fn acquire(
        &self,
        store: &Arc<dyn StateStore>,
        read: &SessionRead,
        key: &str,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<SessionGuard, SessionLockError> {
        let session_key = read.session_key.as_str();
        let local = self.local(key).lock_owned().await;
        // Deferred maintenance of the previous turn finishes before this turn starts.
        drop(Self::entry(&self.maintenance, key).lock().await);
        let started = now_ms();
        let ttl_ms = ttl.as_millis() as u64;
        if let Some(parked) = self.take_back(store, key, ttl_ms).await {
            return Ok(SessionGuard {
                _local: local,
                lease: parked.lease,
                store: parked.store,
                released: false,
                heartbeat: Some(parked.heartbeat),
                parking: self.parking.clone(),
                waited: Duration::ZERO,
                took_over: false,
                reused: true,
                facts: parked.facts,
                snapshot: None,
            });
        }
        let mut pause = Duration::from_millis(10);
        let clock = std::time::Instant::now();
        let mut had_to_wait = false;
        loop {
            let acquire = |dead_holder: Option<&str>| {
                TurnWrite::acquire(key, holder, dead_holder, now_ms(), ttl_ms, Some(read))
            };
            let (mut attempt, mut snapshot) =
                store.submit(acquire(None)).await?.into_session_lease();
            let mut took_over = false;
            if let LeaseAttempt::Busy { holder: other, .. } = &attempt {
                if holder_is_dead(other) {
                    tracing::warn!(session = %session_key, holder = %other, "the session's lease holder no longer runs; taking the session over");
                    (attempt, snapshot) = store
                        .submit(acquire(Some(other)))
                        .await?
                        .into_session_lease();
                    took_over = matches!(attempt, LeaseAttempt::Acquired(_));
                }
            }
            match attempt {
                LeaseAttempt::Acquired(lease) => {
                    let heartbeat = spawn_heartbeat(store.clone(), lease.clone(), ttl);
                    return Ok(SessionGuard {
                        _local: local,
                        lease,
                        store: store.clone(),
                        released: false,
                        heartbeat,
                        parking: self.parking.clone(),
                        reused: false,
                        facts: None,
                        snapshot,
                        waited: if had_to_wait {
                            clock.elapsed()
                        } else {
                            Duration::ZERO
                        },
                        took_over,
                    });
                }
                LeaseAttempt::Busy {
                    holder: other,
                    expires_at_ms,
                } => {
                    let now = now_ms();
                    let waited = now.saturating_sub(started);
                    if waited >= wait.as_millis() as u64 {
                        return Err(SessionLockError::Busy {
                            session: session_key.to_string(),
                            holder_description: describe_holder(&other),
                            holder: other,
                            waited_ms: waited,
                            expires_in_ms: expires_at_ms.saturating_sub(now),
                        });
                    }
                    had_to_wait = true;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
            }
        }
    }
}

/// A lease's heartbeat: the task renewing it and what it found.
pub(super) struct Heartbeat {
    handle: JoinHandle<()>,
    state: Arc<HeartbeatState>,
}

impl Heartbeat {
    /// Stops renewing the lease.
    pub(super) fn stop(&self) {
        self.handle.abort();
    }
}

#[derive(Debug)]
struct HeartbeatState {
    /// When the lease was last acquired or renewed (ms since the Unix epoch).
    renewed_at_ms: AtomicU64,
    /// A renewal found the lease gone: another holder may have it.
    lost: AtomicBool,
}

/// Renews `lease` every third of `ttl` until aborted (by the guard's release or drop, or the
/// parked lease's release). A renewal that finds the lease gone (taken over after all) stops
/// with a warning: the store's generation fencing then refuses this holder's writes.
fn spawn_heartbeat(store: Arc<dyn StateStore>, lease: Lease, ttl: Duration) -> Option<Heartbeat> {
    let period = ttl / 3;
    if period.is_zero() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let state = Arc::new(HeartbeatState {
        renewed_at_ms: AtomicU64::new(now_ms()),
        lost: AtomicBool::new(false),
    });
    let shared = state.clone();
    let handle = runtime.spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let now = now_ms();
            match store.renew_lease(&lease, now, ttl.as_millis() as u64) {
                Ok(true) => shared.renewed_at_ms.store(now, Ordering::Release),
                Ok(false) => {
                    shared.lost.store(true, Ordering::Release);
                    tracing::warn!(session = %lease.session, "the session lease could not be renewed; another holder may take the session");
                    return;
                }
                Err(e) => {
                    tracing::warn!(session = %lease.session, error = %e, "could not renew the session lease; retrying");
                }
            }
        }
    });
    Some(Heartbeat { handle, state })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use crate::store::SqliteStore;

    const TTL: Duration = Duration::from_secs(30);

    /// Takes session `key` in `locks` and ends the turn (parking the lease); whether the lease
    /// was taken back from the parking.
    async fn turn_on(locks: &SessionLocks, store: &Arc<dyn StateStore>, key: &str) -> bool {
        let read = SessionRead {
            session_key: key.to_owned(),
            id_namespace: "session".to_owned(),
        };
        let guard = locks
            .acquire(store, &read, key, "this-process", TTL, TTL)
            .await
            .unwrap();
        let reused = guard.reused();
        guard.release().await.unwrap();
        reused
    }

    /// Whether another holder can take `key` now.
    fn free(store: &Arc<dyn StateStore>, key: &str) -> bool {
        let attempt = store
            .try_acquire_lease(key, "another-process", now_ms(), 1)
            .unwrap();
        matches!(attempt, LeaseAttempt::Acquired(_))
    }

    /// A lease taken back and parked again keeps its own linger: the end of its first
    /// parking does not release it.
    #[tokio::test(start_paused = true)]
    async fn a_lease_parked_again_is_kept_for_its_own_linger() {
        let sqlite = SqliteStore::in_memory().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(sqlite);
        let locks = SessionLocks::with_linger(Duration::from_secs(1));
        assert!(!turn_on(&locks, &store, "s").await);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            turn_on(&locks, &store, "s").await,
            "taken back within the linger"
        );
        // Past the first parking's end (and its gathering), within the second's linger.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !free(&store, "s"),
            "released at the end of the first parking"
        );
        // Past the second parking's end and the reaper's gathering (an eighth of the linger).
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(free(&store, "s"), "kept after its linger");
    }

    /// Leases whose lingers end close together are released in one write batch, and so are
    /// the leases released at shutdown.
    #[tokio::test(start_paused = true)]
    async fn leases_ending_together_are_released_in_one_batch() {
        let sqlite = SqliteStore::in_memory().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(sqlite.clone());
        let locks = SessionLocks::with_linger(Duration::from_secs(1));
        for i in 0..5 {
            turn_on(&locks, &store, &format!("a{i}")).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = sqlite.held_times();
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let released = sqlite.held_times().since(&before);
        assert!((0..5).all(|i| free(&store, &format!("a{i}"))));
        assert_eq!(
            (released.queued_writes, released.write_batches),
            (5, 1),
            "five releases in one batch"
        );

        for i in 0..4 {
            turn_on(&locks, &store, &format!("b{i}")).await;
        }
        let before = sqlite.held_times();
        locks.release_parked().await;
        let released = sqlite.held_times().since(&before);
        assert!((0..4).all(|i| free(&store, &format!("b{i}"))));
        assert_eq!((released.queued_writes, released.write_batches), (4, 1));
    }

    /// The reaper stops when nothing is parked and a later parking starts another: a lease
    /// parked after a quiet spell is still released when its linger ends.
    #[tokio::test(start_paused = true)]
    async fn a_lease_parked_after_the_reaper_stopped_is_released() {
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let locks = SessionLocks::with_linger(Duration::from_millis(400));
        turn_on(&locks, &store, "first").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(free(&store, "first"));
        turn_on(&locks, &store, "second").await;
        assert!(!free(&store, "second"), "kept for the linger");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(free(&store, "second"), "released by a new reaper");
    }

    /// A holder id round-trips through its text, also with colons in the host name.
    #[test]
    fn holder_ids_round_trip() {
        let id = HolderId {
            host: "a:b".into(),
            pid: 42,
            start: 7,
            nonce: "n".into(),
        };
        assert_eq!(HolderId::parse(&id.render()), Some(id));
        assert_eq!(HolderId::parse("ctxbridge-12-abc"), None);
    }

    /// This process has a start time that does not change; a PID that does not exist has none.
    #[cfg(target_os = "linux")]
    #[test]
    fn start_times_of_processes() {
        let started = process_start(std::process::id()).unwrap();
        assert!(started > 0);
        assert_eq!(process_start(std::process::id()), Some(started));
        assert_eq!(process_start(u32::MAX - 1), None);
    }

    /// This process is alive; a PID that does not exist on this host, or this PID with another
    /// start time (a reused PID), is dead; another host and an unknown format are not judged.
    #[test]
    fn liveness_of_holders() {
        let me = HolderId::for_this_process();
        assert!(!holder_is_dead(&me.render()));
        let reused = HolderId {
            start: me.start + 1,
            ..me.clone()
        };
        assert!(holder_is_dead(&reused.render()));
        let gone = HolderId {
            pid: u32::MAX - 1,
            ..me.clone()
        };
        assert!(holder_is_dead(&gone.render()));
        let elsewhere = HolderId {
            host: format!("{}-other", me.host),
            pid: u32::MAX - 1,
            ..me
        };
        assert!(!holder_is_dead(&elsewhere.render()));
        assert!(!holder_is_dead("ctxbridge-1-abc"));
    }
}
