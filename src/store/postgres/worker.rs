//! The PostgreSQL store's worker: the thread with its own tokio runtime that runs every call's
//! job on a pooled connection.

use std::future::Future;
use std::sync::mpsc;

use deadpool_postgres::{Object, PoolError};
use tokio::sync::oneshot;

use super::PostgresStore;
use crate::store::StoreError;
use crate::util::error_chain;

/// The store's own thread and runtime; dropping it stops the thread (and with it every pooled
/// connection's task).
pub(super) struct Worker {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl Worker {
    pub(super) fn start() -> std::io::Result<Worker> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("ctxbridge-postgres".into())
            .spawn(move || {
                // Runs the spawned jobs until the store is dropped (or its sender is gone).
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Worker {
            handle,
            stop: Some(stop),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The thread may already be gone; then there is nothing to stop.
            let _ = stop.send(());
        }
    }
}

/// Why a job failed on the worker.
enum JobError {
    Pool(PoolError),
    Pg(tokio_postgres::Error),
    Timeout,
}

impl PostgresStore {
    /// Runs `job` with a pooled connection on the worker and waits for it (bounded by
    /// `call_timeout`).
    pub(super) fn run<T, F, Fut>(&self, operation: &'static str, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        let pool = self.pool.clone();
        let bound = self.call_timeout;
        self.worker.handle.spawn(async move {
            let work = async move {
                let client = pool.get().await.map_err(JobError::Pool)?;
                job(client).await.map_err(JobError::Pg)
            };
            let outcome = tokio::time::timeout(bound, work)
                .await
                .unwrap_or(Err(JobError::Timeout));
            // The caller is waiting on `answer` (it only goes away with the caller's thread).
            let _ = reply.send(outcome);
        });
        match answer.recv() {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(JobError::Pg(source))) => Err(StoreError::Backend {
                store: self.url.clone(),
                operation,
                message: error_chain(&source),
                source: Box::new(source),
            }),
            Ok(Err(JobError::Pool(PoolError::Timeout(_)))) | Ok(Err(JobError::Timeout)) => {
                Err(StoreError::PostgresTimeout {
                    url: self.url.clone(),
                    operation,
                    waited_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                })
            }
            Ok(Err(JobError::Pool(source))) => Err(StoreError::Backend {
                store: self.url.clone(),
                operation,
                message: format!(
                    "cannot get a PostgreSQL connection: {}",
                    error_chain(&source)
                ),
                source: Box::new(source),
            }),
            // The job was dropped unrun: the worker's runtime has stopped.
            Err(mpsc::RecvError) => Err(StoreError::PostgresSetup {
                url: self.url.clone(),
                operation,
                message: "the store's worker thread has stopped".into(),
            }),
        }
    }
}
