//! The SQLite store's background WAL checkpointer.
//!
//! SQLite checkpoints a WAL database in the connection that commits past the autocheckpoint
//! size: that writer then copies the WAL into the database file and waits for two `fsync`s
//! while it still holds the write lock, and every other write queues behind it. Here the
//! writer's automatic checkpoint is only a safety net for a WAL grown far too large; a thread
//! of the store's own, with its own connection, runs a passive checkpoint (which never blocks
//! the writer or the readers) after every [`CHECKPOINT_AFTER_COMMITS`] commits, and every
//! [`CHECKPOINT_IDLE`] while fewer are pending.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::util::lock;
use rusqlite::Connection;

/// Commits after which the checkpointer runs.
pub(super) const CHECKPOINT_AFTER_COMMITS: u64 = 256;
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

#[derive(Default)]
struct Shared {
    /// Commits since the last checkpoint.
    commits: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
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
    /// Starts the checkpointer on `conn`, a connection of its own to the store's file; it
    /// also checkpoints every `idle` while commits are pending.
    pub(super) fn start(
        conn: Connection,
        name: &str,
        idle: Duration,
    ) -> std::io::Result<Checkpointer> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name(format!("ctxbridge-checkpoint-{name}"))
            .spawn({
                let shared = shared.clone();
                move || run(&conn, &shared, idle)
            })?;
        Ok(Checkpointer {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts a commit of the writer; wakes the checkpointer every
    /// [`CHECKPOINT_AFTER_COMMITS`] commits.
    pub(super) fn committed(&self) {
        let commits = self.shared.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if commits % CHECKPOINT_AFTER_COMMITS == 0 {
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

fn run(conn: &Connection, shared: &Shared, idle: Duration) {
    loop {
        let stop = {
            let stop = shared.stopped();
            let (stop, _) = shared
                .wake
                .wait_timeout_while(stop, idle, |stop| {
                    !*stop && shared.commits.load(Ordering::Relaxed) < CHECKPOINT_AFTER_COMMITS
                })
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *stop
        };
        if shared.commits.swap(0, Ordering::Relaxed) > 0 || stop {
            checkpoint(conn);
        }
        if stop {
            return;
        }
    }
}

/// One passive checkpoint: copies what it can of the WAL into the database without waiting
/// for anyone; a failure is logged (the writer's own checkpoint remains the safety net).
fn checkpoint(conn: &Connection) {
    let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((_, log, checkpointed)) => {
            tracing::trace!(log, checkpointed, "WAL checkpoint");
        }
        Err(e) => {
            tracing::warn!(error = %e, "WAL checkpoint failed; the writer checkpoints instead")
        }
    }
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

    /// The checkpointer copies the WAL into the database file after its commit count, and on
    /// drop; before that the rows are only in the WAL.
    #[test]
    fn checkpoints_after_commits_and_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t (x);",
            )
            .unwrap();
        // Only the commit count (and the drop) may start a checkpoint here.
        let checkpointer = Checkpointer::start(
            Connection::open(&path).unwrap(),
            "test",
            Duration::from_secs(3600),
        )
        .unwrap();
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
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !in_database_file(&path, "row-last-of-batch") {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint after {CHECKPOINT_AFTER_COMMITS} commits"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
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
}
