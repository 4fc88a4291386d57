//! The connection to one engine child process.
//!
//! Shape (after mini-redis's client): one **connection task** owns the child, its stdout and
//! the requests in flight (the shared [`Peer`]: ids matched to waiting calls); callers hand it `(request line, oneshot reply)` through a
//! channel and wait on the reply with their own timeout. A separate **writer task** owns stdin
//! so that a child that stops reading can never stop the connection task from draining
//! stdout (two full pipes would otherwise deadlock). A **stderr task** forwards the engine's
//! log lines to tracing and keeps the last few for error messages.
//!
//! Engine → host requests (runtime callbacks) are served on their own tasks through the
//! [`RuntimeCallbacks`] of the lifecycle call in flight for the session the request names.

use std::process::ExitStatus;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxbridge_jsonrpc::{
    early_line_reader, Frame, LineReader, Peer, Piped, Received, RequestId, StderrTail,
};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::protocol::{self, error_code, RpcError, DIALECT};
use crate::contract::{
    CompactParams, EngineError, EngineMethod, LlmCompleteRequest, RuntimeCallbacks,
    TranscriptRewriteRequest,
};
use crate::util::lock;

/// How many stderr lines are kept for the detail of a process failure.
const STDERR_TAIL_LINES: usize = 8;
/// How long to wait for the exit status once stdout closed (the process is usually gone).
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(1);
/// How long to wait for the stderr task to drain after the child exited.
const STDERR_DRAIN_WAIT: Duration = Duration::from_millis(200);

/// Which runtime callbacks serve engine → host requests made while a call is in flight.
#[derive(Clone, Default)]
pub struct CallRoute {
    pub session_id: Option<String>,
    pub callbacks: Option<Arc<dyn RuntimeCallbacks>>,
}

/// The final answer to one request, as the connection task saw it.
enum Reply {
    Result(Value),
    Error(RpcError),
    /// The engine process is gone (exit, protocol violation, disposal).
    Dead(String),
}

struct PendingCall {
    method: EngineMethod,
    reply: oneshot::Sender<Reply>,
    route: CallRoute,
}

enum Command {
    Call {
        id: i64,
        method: EngineMethod,
        line: String,
        reply: oneshot::Sender<Reply>,
        route: CallRoute,
    },
    /// The caller stopped waiting (timeout, abort, dropped future).
    Cancel { id: i64 },
    /// A notification line to write (no answer expected).
    Notify { line: String },
    /// Close stdin, wait `grace` for the child to exit, then kill it; reply once reaped.
    Shutdown {
        grace: Duration,
        done: oneshot::Sender<Option<ExitStatus>>,
    },
}

enum WriterMsg {
    Line(String),
    Close,
}

/// Why the connection task stopped reading.
enum LoopEnd {
    HandleDropped,
    Shutdown {
        grace: Duration,
        done: oneshot::Sender<Option<ExitStatus>>,
    },
    StdoutClosed,
    StdoutError(std::io::Error),
    Violation(String),
}

/// Callbacks serving `runtime/llmComplete` outside any lifecycle call (see
/// [`Connection::set_host_callbacks`]).
type HostCallbacksSlot = Arc<Mutex<Option<Arc<dyn RuntimeCallbacks>>>>;

/// The caller side of the connection. Dropping it kills and reaps the child.
pub struct Connection {
    engine_id: String,
    commands: mpsc::UnboundedSender<Command>,
    /// Request ids are chosen here, so a caller can encode its request off the connection
    /// task and name it in a cancel.
    next_id: AtomicI64,
    /// Set by the connection task before it lets go of the request table.
    closed_reason: Arc<Mutex<Option<String>>>,
    host_callbacks: HostCallbacksSlot,
}

impl Connection {
    /// Callbacks for `runtime/llmComplete` requests that no lifecycle call in flight serves:
    /// made from a tool, a hook or a command, or naming no session.
    pub fn set_host_callbacks(&self, callbacks: Arc<dyn RuntimeCallbacks>) {
        *lock(&self.host_callbacks) = Some(callbacks);
    }

    /// Starts the tasks around a freshly spawned child (stdin, stdout, stderr piped).
    pub fn start(engine_id: String, piped: Piped) -> Self {
        let Piped {
            child,
            stdin,
            stdout,
            stderr,
        } = piped;

        // Unbounded: a cancel must be sendable from `Drop` (synchronously), and the number
        // of commands is bounded by the callers in flight.
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        let stderr_tail = Arc::new(StderrTail::new(STDERR_TAIL_LINES));
        let closed_reason = Arc::new(Mutex::new(None));
        let host_callbacks: HostCallbacksSlot = Arc::new(Mutex::new(None));

        tokio::spawn(write_stdin(stdin, writer_rx));
        let stderr_task = tokio::spawn(forward_stderr(
            engine_id.clone(),
            stderr,
            stderr_tail.clone(),
        ));
        let task = ConnectionTask {
            engine_id: engine_id.clone(),
            child,
            // Any stdout line over the limit is a protocol violation: reported as soon as it
            // passes the limit, not when (if ever) its newline comes.
            stdout: early_line_reader(stdout, protocol::MAX_STDOUT_LINE_BYTES),
            writer: writer_tx,
            commands: command_rx,
            calls: Peer::new(DIALECT),
            stderr_tail,
            stderr_task: Some(stderr_task),
            closed_reason: closed_reason.clone(),
            host_callbacks: host_callbacks.clone(),
        };
        tokio::spawn(task.run());
        Connection {
            engine_id,
            commands,
            next_id: AtomicI64::new(1),
            closed_reason,
            host_callbacks,
        }
    }

    /// Sends one request and waits for its result value. `timeout` elapsing gives
    /// [`EngineError::Timeout`], `abort` firing gives [`EngineError::Cancelled`]; both (and a
    /// dropped future) send `$/cancelRequest` for the request.
    pub async fn request<P: Serialize + ?Sized>(
        &self,
        method: EngineMethod,
        wire_method: &str,
        params: &P,
        route: CallRoute,
        timeout: Duration,
        abort: Option<&CancellationToken>,
    ) -> Result<Value, EngineError> {
        if abort.is_some_and(CancellationToken::is_cancelled) {
            return Err(EngineError::Cancelled { method });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = DIALECT.request_line(id, wire_method, params).map_err(|e| {
            EngineError::failed(
                method,
                format!("cannot encode the {wire_method} request: {e}"),
            )
        })?;
        let (reply_tx, reply_rx) = oneshot::channel();
        self.commands
            .send(Command::Call {
                id,
                method,
                line,
                reply: reply_tx,
                route,
            })
            .map_err(|_| self.gone(method))?;
        let mut guard = CancelOnDrop {
            id,
            commands: &self.commands,
            armed: true,
        };
        let aborted = async {
            match abort {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let reply = tokio::select! {
            reply = reply_rx => reply,
            _ = tokio::time::sleep(timeout) => {
                return Err(EngineError::Timeout { method, after: timeout });
            }
            _ = aborted => return Err(EngineError::Cancelled { method }),
        };
        guard.armed = false;
        match reply {
            Ok(Reply::Result(value)) => Ok(value),
            Ok(Reply::Error(error)) => Err(protocol::engine_error_of(method, &error)),
            Ok(Reply::Dead(detail)) => Err(EngineError::Process { method, detail }),
            Err(_) => Err(self.gone(method)),
        }
    }

    /// Sends a notification (no answer). Fails only when the connection has ended.
    pub fn notify<P: Serialize + ?Sized>(
        &self,
        method: EngineMethod,
        wire_method: &str,
        params: &P,
    ) -> Result<(), EngineError> {
        let line = DIALECT
            .notification_line(wire_method, Some(params))
            .map_err(|e| {
                EngineError::failed(
                    method,
                    format!("cannot encode the {wire_method} notification: {e}"),
                )
            })?;
        self.commands
            .send(Command::Notify { line })
            .map_err(|_| self.gone(method))
    }

    /// Closes stdin, waits up to `grace` for the child to exit, kills it otherwise, and
    /// returns once it is reaped. `None` when the connection had already ended (the child
    /// was reaped then).
    pub async fn shutdown(&self, grace: Duration) -> Option<ExitStatus> {
        let (done_tx, done_rx) = oneshot::channel();
        self.commands
            .send(Command::Shutdown {
                grace,
                done: done_tx,
            })
            .ok()?;
        done_rx.await.ok().flatten()
    }

    /// Why the connection ended, if it did.
    pub fn closed_reason(&self) -> Option<String> {
        lock(&self.closed_reason).clone()
    }

    fn gone(&self, method: EngineMethod) -> EngineError {
        EngineError::Process {
            method,
            detail: self.closed_reason().unwrap_or_else(|| {
                format!("the connection to engine \"{}\" has ended", self.engine_id)
            }),
        }
    }
}

/// Tells the connection task that nobody waits for `id` any more (timeout, abort, or the
/// caller's future was dropped), so it forgets the request and sends `$/cancelRequest`.
struct CancelOnDrop<'a> {
    id: i64,
    commands: &'a mpsc::UnboundedSender<Command>,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            // The task may be gone already; then there is nothing to cancel.
            let _ = self.commands.send(Command::Cancel { id: self.id });
        }
    }
}

struct ConnectionTask {
    engine_id: String,
    child: Child,
    stdout: LineReader<ChildStdout>,
    writer: mpsc::UnboundedSender<WriterMsg>,
    commands: mpsc::UnboundedReceiver<Command>,
    calls: Peer<PendingCall>,
    stderr_tail: Arc<StderrTail>,
    stderr_task: Option<JoinHandle<()>>,
    closed_reason: Arc<Mutex<Option<String>>>,
    host_callbacks: HostCallbacksSlot,
}

impl ConnectionTask {
    async fn run(mut self) {
        let end = loop {
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    None => break LoopEnd::HandleDropped,
                    Some(Command::Shutdown { grace, done }) => break LoopEnd::Shutdown { grace, done },
                    Some(command) => self.handle_command(command),
                },
                // Cancel-safe: the reader keeps a partial line across lost races.
                frame = self.stdout.next() => match frame {
                    None => break LoopEnd::StdoutClosed,
                    Some(Ok(Frame::Line(line))) => {
                        if let Err(violation) = self.handle_line(&line) {
                            break LoopEnd::Violation(violation);
                        }
                    }
                    Some(Ok(Frame::TooLong(_))) => {
                        break LoopEnd::Violation(format!(
                            "protocol violation: a stdout line exceeded {} bytes",
                            protocol::MAX_STDOUT_LINE_BYTES
                        ));
                    }
                    Some(Err(e)) => break LoopEnd::StdoutError(e),
                },
            }
        };
        match end {
            LoopEnd::HandleDropped => {
                let _ = self.child.kill().await;
                self.close("the engine handle was dropped".to_string());
            }
            LoopEnd::Shutdown { grace, done } => {
                let status = self.shut_down(grace).await;
                self.close(format!("engine \"{}\" was disposed", self.engine_id));
                let _ = done.send(status);
            }
            LoopEnd::StdoutClosed => {
                // A last message without its newline was still framed as a line.
                let detail = self
                    .died("engine process closed its stdout".into(), false)
                    .await;
                self.close(detail);
            }
            LoopEnd::StdoutError(e) => {
                let detail = self
                    .died(format!("reading the engine's stdout failed: {e}"), true)
                    .await;
                self.close(detail);
            }
            LoopEnd::Violation(violation) => {
                let detail = self.died(violation, true).await;
                self.close(detail);
            }
        }
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Call {
                id,
                method,
                line,
                reply,
                route,
            } => {
                if self.writer.send(WriterMsg::Line(line)).is_err() {
                    let _ = reply.send(Reply::Dead("the engine's stdin is closed".into()));
                    return;
                }
                self.calls.register(
                    id,
                    PendingCall {
                        method,
                        reply,
                        route,
                    },
                );
            }
            Command::Cancel { id } => {
                if let Some(call) = self.calls.take(id) {
                    tracing::debug!(engine = %self.engine_id, id, method = %call.method, "cancelling engine request");
                    let _ = self
                        .writer
                        .send(WriterMsg::Line(protocol::encode_cancel(id)));
                }
            }
            Command::Notify { line } => {
                let _ = self.writer.send(WriterMsg::Line(line));
            }
            Command::Shutdown { .. } => {}
        }
    }

    /// Routes one stdout line. A line that is not a JSON-RPC message is a protocol
    /// violation: the framing of everything after it is suspect, so the engine is failed.
    fn handle_line(&mut self, line: &[u8]) -> Result<(), String> {
        let received = self.calls.receive(line).map_err(|kind| {
            format!(
                "protocol violation: stdout line is {kind}: {}",
                protocol::preview(line)
            )
        })?;
        match received {
            None => {}
            Some(Received::Answer { call, outcome, .. }) => {
                let reply = match outcome {
                    Ok(value) => Reply::Result(value),
                    Err(error) => Reply::Error(error),
                };
                let _ = call.reply.send(reply);
            }
            Some(Received::Unmatched { id, .. }) => tracing::debug!(
                engine = %self.engine_id,
                %id,
                "ignoring a response to a request nobody waits for (cancelled or timed out)"
            ),
            Some(Received::Request { id, method, params }) => {
                self.serve_callback(id, method, params)
            }
            Some(Received::Notification { method, .. }) => {
                tracing::debug!(engine = %self.engine_id, %method, "ignoring engine notification");
            }
        }
        Ok(())
    }

    /// Finds the callbacks for an engine → host request: those of the call in flight for the
    /// `sessionId` the request names, else those of the only call in flight that has any.
    fn callbacks_for(&self, params: &Value) -> Option<Arc<dyn RuntimeCallbacks>> {
        let with_callbacks = || self.calls.waiting().filter(|c| c.route.callbacks.is_some());
        match params.get("sessionId").and_then(Value::as_str) {
            Some(session) => with_callbacks()
                .find(|c| c.route.session_id.as_deref() == Some(session))
                .and_then(|c| c.route.callbacks.clone()),
            None => {
                let mut candidates = with_callbacks();
                match (candidates.next(), candidates.next()) {
                    (Some(only), None) => only.route.callbacks.clone(),
                    _ => None,
                }
            }
        }
    }

    fn serve_callback(&self, id: RequestId, method: String, params: Value) {
        let callbacks = self.callbacks_for(&params).or_else(|| {
            if method == protocol::METHOD_LLM_COMPLETE {
                lock(&self.host_callbacks).clone()
            } else {
                None
            }
        });
        let writer = self.writer.clone();
        let engine_id = self.engine_id.clone();
        tokio::spawn(async move {
            let line = match answer_callback(&method, params, callbacks).await {
                Ok(result) => DIALECT.answer_line(&id, Ok(&result)),
                Err((code, message)) => {
                    tracing::debug!(engine = %engine_id, %method, code, %message, "engine callback refused");
                    DIALECT.answer_line(&id, Err(&RpcError::new(code, message)))
                }
            };
            let _ = writer.send(WriterMsg::Line(line));
        });
    }

    /// After an unexpected end: make sure the child is gone and reaped, and describe why.
    async fn died(&mut self, cause: String, kill: bool) -> String {
        if kill {
            let _ = self.child.start_kill();
        }
        let status = match tokio::time::timeout(EXIT_STATUS_WAIT, self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        };
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, task).await;
        }
        let mut detail = cause;
        if let Some(status) = status.filter(|_| !kill) {
            detail.push_str(&format!(" (engine process exited: {status})"));
        }
        let tail = self.stderr_tail.lines();
        if !tail.is_empty() {
            detail.push_str("; last stderr: ");
            detail.push_str(&tail.join(" | "));
        }
        tracing::warn!(engine = %self.engine_id, %detail, "engine process connection ended");
        detail
    }

    /// Disposal: close stdin, keep draining stdout, wait for the exit up to `grace`, then kill.
    async fn shut_down(&mut self, grace: Duration) -> Option<ExitStatus> {
        let _ = self.writer.send(WriterMsg::Close);
        let deadline = Instant::now() + grace;
        let mut stdout_open = true;
        let status = loop {
            tokio::select! {
                status = self.child.wait() => break status.ok(),
                frame = self.stdout.next(), if stdout_open => {
                    // Output after disposal is nobody's answer any more.
                    if matches!(frame, None | Some(Err(_))) {
                        stdout_open = false;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(engine = %self.engine_id, grace_ms = grace.as_millis() as u64, "engine did not exit after stdin closed; killing it");
                    let _ = self.child.kill().await;
                    break self.child.wait().await.ok();
                }
            }
        };
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, task).await;
        }
        status
    }

    /// Records why the connection ended and fails every request still waiting.
    fn close(&mut self, detail: String) {
        *lock(&self.closed_reason) = Some(detail.clone());
        for (_, call) in self.calls.drain() {
            let _ = call.reply.send(Reply::Dead(detail.clone()));
        }
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Call { reply, .. } => {
                    let _ = reply.send(Reply::Dead(detail.clone()));
                }
                Command::Shutdown { done, .. } => {
                    let _ = done.send(None);
                }
                Command::Cancel { .. } | Command::Notify { .. } => {}
            }
        }
    }
}

/// Serves one engine → host request. Errors are `(JSON-RPC code, message)`.
async fn answer_callback(
    method: &str,
    params: Value,
    callbacks: Option<Arc<dyn RuntimeCallbacks>>,
) -> Result<Value, (i64, String)> {
    fn decode<T: serde::de::DeserializeOwned>(
        method: &str,
        params: Value,
    ) -> Result<T, (i64, String)> {
        serde_path_to_error::deserialize(params).map_err(|e| {
            (
                error_code::INVALID_PARAMS,
                format!(
                    "invalid params for {method} at `{}`: {}",
                    e.path(),
                    e.inner()
                ),
            )
        })
    }
    fn encode<T: Serialize>(value: T) -> Result<Value, (i64, String)> {
        serde_json::to_value(value).map_err(|e| (error_code::CALLBACK_FAILED, e.to_string()))
    }
    let failed = |e: EngineError| (error_code::CALLBACK_FAILED, e.to_string());
    let known = [
        protocol::METHOD_LLM_COMPLETE,
        protocol::METHOD_REWRITE_TRANSCRIPT_ENTRIES,
        protocol::METHOD_DELEGATE_COMPACTION,
    ];
    if !known.contains(&method) {
        return Err((
            error_code::METHOD_NOT_FOUND,
            format!("the host has no method {method}"),
        ));
    }
    let Some(callbacks) = callbacks else {
        return Err((
            error_code::NO_CALLBACKS,
            format!(
                "no runtime callbacks are available for {method}: no call in flight offers a \
                 runtimeContext for this session"
            ),
        ));
    };
    match method {
        protocol::METHOD_LLM_COMPLETE => {
            let request: LlmCompleteRequest = decode(method, params)?;
            encode(callbacks.llm_complete(request).await.map_err(failed)?)
        }
        protocol::METHOD_REWRITE_TRANSCRIPT_ENTRIES => {
            let request: TranscriptRewriteRequest = decode(method, params)?;
            encode(
                callbacks
                    .rewrite_transcript_entries(request)
                    .await
                    .map_err(failed)?,
            )
        }
        _ => {
            let request: CompactParams = decode(method, params)?;
            encode(
                callbacks
                    .delegate_compaction(request)
                    .await
                    .map_err(failed)?,
            )
        }
    }
}

async fn write_stdin(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<WriterMsg>) {
    while let Some(message) = lines.recv().await {
        match message {
            WriterMsg::Line(line) => {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    // The child closed stdin (it is exiting); the stdout side reports it.
                    break;
                }
            }
            WriterMsg::Close => break,
        }
    }
    let _ = stdin.shutdown().await;
}

async fn forward_stderr(engine_id: String, stderr: ChildStderr, tail: Arc<StderrTail>) {
    ctxbridge_jsonrpc::forward_stderr(stderr, protocol::MAX_STDERR_LINE_BYTES, &tail, |text| {
        tracing::info!(target: "ctxbridge::engine_stderr", engine = %engine_id, "{text}");
    })
    .await;
}
