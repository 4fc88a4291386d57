//! The client's own `codex app-server` child as a [`Transport`]: requests go to the
//! connection actor (`connection`), which owns the child's stdio.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::connection::{Command, Health};
use crate::error::AppServerError;
use crate::transport::{loaded_thread, Route, Transport};

/// A running child and the actor owning its stdio.
pub(crate) struct ChildConnection {
    commands: mpsc::Sender<Command>,
    health: Arc<Health>,
    next_id: AtomicI64,
    request_timeout: Duration,
    /// Threads this child has loaded (started, resumed or forked by it).
    attached: Mutex<HashSet<String>>,
    pid: Option<u32>,
}

impl ChildConnection {
    pub(crate) fn new(
        commands: mpsc::Sender<Command>,
        health: Arc<Health>,
        request_timeout: Duration,
        pid: Option<u32>,
    ) -> ChildConnection {
        ChildConnection {
            commands,
            health,
            next_id: AtomicI64::new(1),
            request_timeout,
            attached: Mutex::new(HashSet::new()),
            pid,
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    fn closed_error(&self, method: &str) -> AppServerError {
        AppServerError::Transport {
            method: method.to_owned(),
            reason: self
                .health
                .death_reason()
                .unwrap_or_else(|| "codex app-server is not running".to_owned()),
        }
    }

    fn attached(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.attached.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a notification (the handshake's `initialized`).
    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), AppServerError> {
        let command = Command::Notify {
            method: method.to_owned(),
            params,
        };
        self.commands
            .send(command)
            .await
            .map_err(|_| self.closed_error(method))
    }

    /// SIGKILL the child and wait until every pending call and turn has been failed.
    pub(crate) async fn kill(&self) {
        let (reply, done) = oneshot::channel();
        if self.commands.send(Command::Kill { reply }).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Close stdin (the app-server exits on EOF) and wait for the exit.
    pub(crate) async fn shutdown(&self) {
        let (reply, done) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown { reply })
            .await
            .is_ok()
        {
            let _ = done.await;
        }
    }
}

#[async_trait]
impl Transport for ChildConnection {
    async fn request(
        &self,
        method: &str,
        params: Value,
        route: Option<Route>,
    ) -> Result<Value, AppServerError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (reply, response) = oneshot::channel();
        let command = Command::Request {
            id,
            method: method.to_owned(),
            params,
            route,
            reply,
        };
        if self.commands.send(command).await.is_err() {
            return Err(self.closed_error(method));
        }
        let result = match tokio::time::timeout(self.request_timeout, response).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.closed_error(method)),
            Err(_) => {
                let _ = self.commands.send(Command::Cancel { id }).await;
                Err(AppServerError::Timeout {
                    method: method.to_owned(),
                    after: self.request_timeout,
                })
            }
        }?;
        if let Some(thread) = loaded_thread(method, &result) {
            self.attached().insert(thread);
        }
        Ok(result)
    }

    fn respond(&self, id: Value, result: Result<Value, String>) {
        let commands = self.commands.clone();
        tokio::spawn(async move {
            if commands
                .send(Command::Respond { id, result })
                .await
                .is_err()
            {
                tracing::warn!(
                    "codex app-server: the connection closed before a server request was answered"
                );
            }
        });
    }

    async fn attach(&self, thread_id: &str, mut params: Value) -> Result<(), AppServerError> {
        if self.attached().contains(thread_id) {
            return Ok(());
        }
        if let Some(object) = params.as_object_mut() {
            object.insert("threadId".to_owned(), Value::String(thread_id.to_owned()));
        }
        self.request("thread/resume", params, None).await?;
        // An answer naming another thread still leaves this one resumed.
        self.attached().insert(thread_id.to_owned());
        Ok(())
    }

    fn is_alive(&self) -> bool {
        self.health.alive.load(Ordering::SeqCst)
    }

    fn death_reason(&self) -> Option<String> {
        self.health.death_reason()
    }
}
