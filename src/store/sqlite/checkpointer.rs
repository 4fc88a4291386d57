//! The SQLite store's background WAL checkpointer.
//!
//! SQLite checkpoints a WAL database in the connection that commits past the autocheckpoint
//! size: that writer then copies the WAL into the database file and waits for two `fsync`s
//! while it still holds the write lock, and every other write queues behind it. Here the
//! writer's automatic checkpoint is only a safety net for a WAL grown far too large; a thread
//! of the store's own, with its own connection, runs a passive checkpoint (which never blocks
//! the writer or the readers) after every [`CHECKPOINT_AFTER_COMMITS`] commits or
//! [`CHECKPOINT_AFTER_WRITES`] writes, and every [`CHECKPOINT_IDLE`] while fewer are pending.
//!
//! A passive checkpoint alone does not keep the WAL small under a steady load: SQLite starts
//! the WAL over only at a write that begins when every frame is back in the database and no
//! reader still reads from the WAL, and while turns keep writing and reading that moment does
//! not come. The WAL then grew until the writer's own checkpoint took over, on nearly every
//! commit (measured: two `fsync`s on about half the commits of a two-worker scale run). So when
//! a passive checkpoint leaves [`RESTART_AT_FRAMES`] frames or more in the WAL, the
//! checkpointer holds the store's writer lock (the one its writes queue on) and runs a
//! `RESTART` checkpoint: it copies what the passive one could not (the frames committed
//! meanwhile), waits for the readers still in the WAL to finish, and the next write starts the
//! WAL over. Writes wait that long, once per round of the checkpointer at most.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util::lock;
use rusqlite::Connection;

/// Commits after which the checkpointer runs.
pub(super) const CHECKPOINT_AFTER_COMMITS: u64 = 256;
/// Writes after which the checkpointer runs, however few commits held them: a busy store's
/// commits are batches of tens of writes (~60 WAL frames each on the scale run), and 256 of
/// them would fill the WAL up to the writer's own checkpoint before this one woke.
pub(super) const CHECKPOINT_AFTER_WRITES: u64 = 2_048;
/// How often the checkpointer runs anyway while commits are pending. Not much more often: at
/// a quiet store's pace a checkpoint copies the whole WAL back, so the next commit starts the
/// WAL over, and SQLite (`synchronous=NORMAL`) then syncs the WAL's header in that commit — an
/// `fsync` on a turn's path (0.2–0.4 ms on the project's machine). Every 250 ms, most turns of
/// a client waiting ~100 ms on its model paid it. The interval is also the longest a commit
/// at that pace waits for its first `fsync` (a power loss can undo it until then; a crash of
/// the process cannot).
pub(super) const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);
/// The writer's own automatic checkpoint, in WAL pages (4 KiB): only when the checkpointer
/// falls far behind (or is gone) does the writer checkpoint.
pub(super) const WRITER_AUTOCHECKPOINT_PAGES: u32 = 16_384;
/// WAL frames (4 KiB pages) a passive checkpoint may leave for the WAL to be started over by
/// a `RESTART` checkpoint under the writer lock (32 MiB; half the writer's own).
pub(super) const RESTART_AT_FRAMES: i64 = 8_192;
/// How long the `RESTART` checkpoint waits, in all, for the readers to leave the WAL (and for
/// another process's writer): the store's own writes wait behind it meanwhile.
const RESTART_PATIENCE: Duration = Duration::from_millis(5);
/// Between two looks at whether the readers have left the WAL: a reader's transaction takes
/// tens of µs, where SQLite's own busy handler would sleep 1 ms and more.
const RESTART_POLL: Duration = Duration::from_micros(50);

/// The writer connection's lock, which the checkpointer holds while it starts the WAL over
/// (it does not use the connection).
pub(super) type WriterLock = Arc<Mutex<Connection>>;

#[derive(Default)]
struct Shared {
    /// Commits since the last checkpoint.
    commits: AtomicU64,
    /// Writes since the last checkpoint (a batch's writes share one commit).
    writes: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    /// Enough commits or writes are pending for a checkpoint.
    fn due(&self) -> bool {
        self.commits.load(Ordering::Relaxed) >= CHECKPOINT_AFTER_COMMITS
            || self.writes.load(Ordering::Relaxed) >= CHECKPOINT_AFTER_WRITES
    }

    fn stopped(&self) -> MutexGuard<'_, bool> {
        // Holds only a flag; a panic elsewhere cannot leave it inconsistent.
        lock(&self.stop)
    }
}

/// The running checkpointer of one file store; stops (after a last checkpoint) when dropped.
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the checkpointer on `conn`, a connection of its own to the store's file (its
    /// busy handler becomes [`wait_briefly`]); it also checkpoints every `idle` while commits
    /// are pending, and holds `writer` while it starts the WAL over.
    pub(super) fn start(
        conn: Connection,
        writer: WriterLock,
        name: &str,
        idle: Duration,
    ) -> std::io::Result<Checkpointer> {
        conn.busy_handler(Some(wait_briefly))
            .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name(format!("ctxbridge-checkpoint-{name}"))
            .spawn({
                let shared = shared.clone();
                move || run(&conn, &writer, &shared, idle)
            })?;
        Ok(Checkpointer {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts a commit of the writer (of one write; see [`Checkpointer::wrote`]).
    pub(super) fn committed(&self) {
        self.count(1, 1);
    }

    /// Counts `more` writes of the commit last counted (a batch's).
    pub(super) fn wrote(&self, more: u64) {
        self.count(0, more);
    }

    /// Wakes the checkpointer when [`CHECKPOINT_AFTER_COMMITS`] commits or
    /// [`CHECKPOINT_AFTER_WRITES`] writes come to be pending.
    fn count(&self, commits: u64, writes: u64) {
        let commits_before = self.shared.commits.fetch_add(commits, Ordering::Relaxed);
        let writes_before = self.shared.writes.fetch_add(writes, Ordering::Relaxed);
        let crossed = |before: u64, added: u64, threshold: u64| {
            before < threshold && before.saturating_add(added) >= threshold
        };
        if crossed(commits_before, commits, CHECKPOINT_AFTER_COMMITS)
            || crossed(writes_before, writes, CHECKPOINT_AFTER_WRITES)
        {
            let _stop = self.shared.stopped();
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        *self.shared.stopped() = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!("the SQLite checkpointer thread panicked");
            }
        }
    }
}

fn run(conn: &Connection, writer: &WriterLock, shared: &Shared, idle: Duration) {
    let mut restart_at = RESTART_AT_FRAMES;
    loop {
        let stop = {
            let stop = shared.stopped();
            let (stop, _) = shared
                .wake
                .wait_timeout_while(stop, idle, |stop| !*stop && !shared.due())
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *stop
        };
        shared.writes.store(0, Ordering::Relaxed);
        if shared.commits.swap(0, Ordering::Relaxed) > 0 || stop {
            if let Some(frames) = checkpoint(conn, Mode::Passive) {
                let restarted = if frames >= restart_at {
                    // Once more without the lock, for what was committed meanwhile: the
                    // restart then has little left to copy while writes wait.
                    checkpoint(conn, Mode::Passive);
                    restart(conn, writer)
                } else {
                    false
                };
                restart_at = next_restart_at(restart_at, frames, restarted);
            }
        }
        if stop {
            return;
        }
    }
}

/// Starts the WAL over: holds the writer lock (no write of this store can begin meanwhile)
/// while a `RESTART` checkpoint copies the frames left and waits for the readers to leave the
/// WAL, so the next write begins it anew.
/// True when it did (false when the readers, or another process's writer, did not leave in
/// [`RESTART_PATIENCE`]).
fn restart(conn: &Connection, writer: &WriterLock) -> bool {
    let _writes_wait = lock(writer);
    let held = Instant::now();
    let restarted = checkpoint(conn, Mode::Restart).is_some();
    tracing::debug!(
        held_us = held.elapsed().as_micros() as u64,
        restarted,
        "WAL start-over under the writer lock"
    );
    restarted
}

/// WAL frames by which the WAL must grow after a failed restart before the next is tried: a
/// quarter of [`RESTART_AT_FRAMES`], so three more are tried before the WAL reaches the
/// writer's own checkpoint. One was too few: on a loaded machine a reader preempted inside its
/// read transaction outlasts [`RESTART_PATIENCE`] now and then, and the WAL then grew to the
/// writer's checkpoint at the first failure.
const RESTART_RETRY_FRAMES: i64 = RESTART_AT_FRAMES / 4;

/// The WAL size (in frames) at which the next restart is tried, after a passive checkpoint
/// found `frames` in the WAL and a restart was `restarted` (or not tried): a restart that
/// failed (readers that stayed in the WAL: another process's, or one of this process's that
/// was not scheduled) is tried again only once the WAL has grown by [`RESTART_RETRY_FRAMES`]
/// more, so writes do not wait in vain at every round; a WAL started over (by the restart or
/// by SQLite itself) starts the count over.
fn next_restart_at(restart_at: i64, frames: i64, restarted: bool) -> i64 {
    if restarted || frames < RESTART_AT_FRAMES {
        RESTART_AT_FRAMES
    } else if frames >= restart_at {
        frames.saturating_add(RESTART_RETRY_FRAMES)
    } else {
        restart_at
    }
}

/// How a checkpoint treats the store's readers and writer.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Copies what it can of the WAL into the database without waiting for anyone.
    Passive,
    /// Copies all of it and waits for the readers to leave the WAL (the connection's busy
    /// handler says how long), so the next write starts the WAL over.
    Restart,
}

impl Mode {
    fn pragma(self) -> &'static str {
        match self {
            Mode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
            Mode::Restart => "PRAGMA wal_checkpoint(RESTART)",
        }
    }
}

/// One checkpoint of `mode`. Returns the frames the WAL holds (`None` when the checkpoint
/// could not finish); a failure is logged (the writer's own checkpoint remains the safety
/// net).
fn checkpoint(conn: &Connection, mode: Mode) -> Option<i64> {
    let result = conn.query_row(mode.pragma(), [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((busy, log, checkpointed)) => {
            tracing::trace!(?mode, busy, log, checkpointed, "WAL checkpoint");
            (busy == 0).then_some(log)
        }
        Err(e) => {
            tracing::warn!(?mode, error = %e, "WAL checkpoint failed; the writer checkpoints instead");
            None
        }
    }
}

/// The checkpointer connection's busy handler: looks again after sleeping [`RESTART_POLL`],
/// until those sleeps come to [`RESTART_PATIENCE`] (a sleep runs somewhat longer than asked,
/// so the wait does too; only a `RESTART` checkpoint waits on anyone).
fn wait_briefly(attempt: i32) -> bool {
    let waited = RESTART_POLL.saturating_mul(u32::try_from(attempt).unwrap_or(u32::MAX));
    if waited >= RESTART_PATIENCE {
        return false;
    }
    std::thread::sleep(RESTART_POLL);
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Whether the database file itself (not its WAL) holds `marker`.
    fn in_database_file(path: &std::path::Path, marker: &str) -> bool {
        let bytes = std::fs::read(path).unwrap();
        bytes
            .windows(marker.len())
            .any(|window| window == marker.as_bytes())
    }

    /// Whether the database file holds `marker` within ten seconds (the checkpointer's thread
    /// copies it there).
    fn soon_in_database_file(path: &std::path::Path, marker: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !in_database_file(path, marker) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// A WAL database at `path` with a table `t` and its writer (no automatic checkpoint),
    /// and a checkpointer on it that runs on its counts only (its idle interval is an hour).
    fn started(path: &std::path::Path) -> (Connection, Checkpointer) {
        let writer = Connection::open(path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t (x);",
            )
            .unwrap();
        let checkpointer = Checkpointer::start(
            Connection::open(path).unwrap(),
            Arc::new(Mutex::new(Connection::open(path).unwrap())),
            "test",
            Duration::from_secs(3600),
        )
        .unwrap();
        (writer, checkpointer)
    }

    /// The checkpointer copies the WAL into the database file after its commit count, and on
    /// drop; before that the rows are only in the WAL.
    #[test]
    fn checkpoints_after_commits_and_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // Only the counts (and the drop) may start a checkpoint here.
        let (writer, checkpointer) = started(&path);
        for i in 0..CHECKPOINT_AFTER_COMMITS - 1 {
            writer
                .execute("INSERT INTO t VALUES (?1)", [format!("row-{i:04}")])
                .unwrap();
            checkpointer.committed();
        }
        assert!(!in_database_file(&path, "row-0000"), "checkpointed early");
        writer
            .execute("INSERT INTO t VALUES ('row-last-of-batch')", [])
            .unwrap();
        checkpointer.committed();
        assert!(
            soon_in_database_file(&path, "row-last-of-batch"),
            "no checkpoint after {CHECKPOINT_AFTER_COMMITS} commits"
        );
        writer
            .execute("INSERT INTO t VALUES ('row-after')", [])
            .unwrap();
        checkpointer.committed();
        drop(checkpointer);
        assert!(
            in_database_file(&path, "row-after"),
            "the last commit was not checkpointed on drop"
        );
    }

    /// A commit holding a batch's many writes counts them: the checkpointer runs after
    /// [`CHECKPOINT_AFTER_WRITES`] writes, however few commits held them.
    #[test]
    fn checkpoints_after_writes_of_few_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // Only the counts (and the drop) may start a checkpoint here.
        let (writer, checkpointer) = started(&path);
        writer
            .execute("INSERT INTO t VALUES ('row-of-a-batch')", [])
            .unwrap();
        checkpointer.committed();
        checkpointer.wrote(CHECKPOINT_AFTER_WRITES - 2);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !in_database_file(&path, "row-of-a-batch"),
            "checkpointed early"
        );
        checkpointer.wrote(1);
        assert!(
            soon_in_database_file(&path, "row-of-a-batch"),
            "no checkpoint after {CHECKPOINT_AFTER_WRITES} writes in one commit"
        );
    }

    /// A restart that failed is tried again only once the WAL has grown by another
    /// [`RESTART_RETRY_FRAMES`] (more than once before the writer's own checkpoint); one that
    /// succeeded, or a WAL SQLite started over itself, starts the count over.
    #[test]
    fn a_failed_restart_waits_for_the_wal_to_grow() {
        let first = RESTART_AT_FRAMES;
        assert_eq!(
            next_restart_at(first, first - 1, false),
            first,
            "not due yet"
        );
        let after_failure = next_restart_at(first, first + 10, false);
        assert_eq!(after_failure, first + RESTART_RETRY_FRAMES + 10);
        let mut tries = 1;
        let mut at = first;
        while at < i64::from(WRITER_AUTOCHECKPOINT_PAGES) {
            at = next_restart_at(at, at, false);
            tries += 1;
        }
        assert!(
            tries >= 4,
            "{tries} restarts tried before the writer's checkpoint"
        );
        assert_eq!(
            next_restart_at(after_failure, first + 500, false),
            after_failure,
            "not tried again before the WAL grew that much"
        );
        assert_eq!(next_restart_at(after_failure, after_failure, true), first);
        assert_eq!(
            next_restart_at(after_failure, 100, false),
            first,
            "SQLite restarted it"
        );
    }
}
