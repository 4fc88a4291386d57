//! The SQLite store's connections: how they reach the database, the writer and the pool of
//! readers, and running work on them (`with_conn`, `with_reader`, `write_tx`) with the time
//! each was held.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::group_commit::classify;
use super::StoreInner;
use crate::store::StoreError;
use crate::util::{lock, read, write};

/// Reader connections per store.
pub(super) const READERS: usize = 4;

/// How the connections of one store reach its database.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// A file on disk.
    File(PathBuf),
    /// A named in-memory database shared by this store's connections.
    Memory(String),
}

impl Target {
    pub(super) fn connect(&self) -> rusqlite::Result<Connection> {
        match self {
            Target::File(path) => Connection::open(path),
            Target::Memory(uri) => Connection::open_with_flags(
                uri,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            ),
        }
    }
}

fn add_elapsed(total: &AtomicU64, since: Instant) {
    let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    total.fetch_add(nanos, Ordering::Relaxed);
}

// Connections are locked with `util::lock`: a poisoned lock only means another thread
// panicked mid-statement, and SQLite's own transaction rollback keeps the database consistent,
// so it stays usable.

impl StoreInner {
    /// Runs `f` on the writer connection.
    pub(super) fn with_conn<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.writer);
        // A poisoned lock guards no data: the panic left nothing half-done behind it.
        let _exclusive = self.memory_lock.as_ref().map(|l| write(l));
        let held = Instant::now();
        let result =
            f(&mut conn).map_err(|e| classify(&self.path, operation, e, self.busy_timeout));
        add_elapsed(&self.writer_held_nanos, held);
        drop(conn);
        // Counts reads on the writer too (a few, rare): the checkpointer only runs sooner.
        if result.is_ok() {
            self.committed();
        }
        result
    }

    /// Runs `f` (reads only) on a reader connection: a free one if any, else the next in turn.
    pub(super) fn with_reader<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        if self.readers.is_empty() {
            return self.with_conn(operation, f);
        }
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        let free = (0..n).find_map(|i| match self.readers[(start + i) % n].try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        });
        let mut conn = match free {
            Some(guard) => guard,
            None => lock(&self.readers[start % n]),
        };
        let _shared = self.memory_lock.as_ref().map(|l| read(l));
        let held = Instant::now();
        let result =
            f(&mut conn).map_err(|e| classify(&self.path, operation, e, self.busy_timeout));
        add_elapsed(&self.readers_held_nanos, held);
        result
    }

    /// Runs `f` in a write transaction that holds the write lock from its start.
    pub(super) fn write_tx<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<(T, bool)>,
    ) -> Result<T, StoreError> {
        self.with_conn(operation, |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let (value, commit) = f(&tx)?;
            if commit {
                tx.commit()?;
            }
            Ok(value)
        })
    }

    /// Counts a commit for the checkpointer.
    fn committed(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.committed();
        }
    }

    /// Counts `more` writes of the commit last counted (a batch's) for the checkpointer.
    pub(super) fn wrote(&self, more: u64) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.wrote(more);
        }
    }
}
