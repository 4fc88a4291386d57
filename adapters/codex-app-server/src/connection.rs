//! The actor that owns the child process and its stdio.
//!
//! Three tasks per child: a reader turns stdout into JSON-RPC messages (bounded lines,
//! classified by the shared `ctxbridge_jsonrpc` reader, garbage skipped), a writer drains an
//! unbounded queue into stdin, and the actor matches responses to pending requests by id (the
//! shared [`Peer`]), routes notifications to the turn streaming on their thread, answers
//! server-initiated requests, and watches the process. The actor never awaits I/O on the child,
//! so a child that stops reading stdin cannot wedge the reader, and vice versa.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ctxbridge_jsonrpc::codes::{INTERNAL_ERROR, METHOD_NOT_FOUND};
use ctxbridge_jsonrpc::{
    line_reader, next_frame, Dialect, Frame, Incoming as Message, Malformed, Peer, Piped, Received,
    RequestId, RpcError, StderrTail,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::AppServerError;
use crate::notifications::KNOWN_NOTIFICATIONS;
use crate::stderr::{log_stderr_line, summarize_stderr};
use crate::transport::{Route, Routed, ROUTED_SERVER_REQUESTS};

/// How many stderr lines are kept to explain a death.
const STDERR_TAIL_LINES: usize = 20;
/// The longest stderr line kept whole; a longer one is noted by its length.
const STDERR_MAX_LINE: usize = 64 * 1024;
/// After the process exits, how long stdout may still drain before pending calls fail.
const EXIT_DRAIN: Duration = Duration::from_millis(200);
/// After stdout closes, how long the process may take to exit before it is killed.
const EOF_GRACE: Duration = Duration::from_millis(500);
/// How long a graceful shutdown waits for the process to exit after stdin closes.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The Codex app-server speaks JSON-RPC without the `jsonrpc` member.
const DIALECT: Dialect = Dialect::Bare;

/// What the reader and writer tasks tell the actor.
#[derive(Debug)]
pub(crate) enum Incoming {
    Message(Message),
    /// A line that is no JSON-RPC message, naming the id of one of this client's requests:
    /// that request fails (skipped, it would wait until its timeout).
    Malformed {
        id: RequestId,
        kind: Malformed,
    },
    /// stdout reached EOF (or failed to read).
    Eof(String),
    /// Writing to stdin failed.
    WriteFailed(String),
}

pub(crate) type Reply = oneshot::Sender<Result<Value, AppServerError>>;

#[derive(Debug)]
pub(crate) enum Command {
    Request {
        id: i64,
        method: String,
        params: Value,
        route: Option<Route>,
        reply: Reply,
    },
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// The caller gave up waiting (timeout): forget the pending entry and its route.
    Cancel { id: i64 },
    /// Answer a server request: a `result`, or an `error` with this message.
    Respond {
        id: Value,
        result: Result<Value, String>,
    },
    /// SIGKILL the child; the reply comes once the death has been processed.
    Kill { reply: oneshot::Sender<()> },
    /// Close stdin, wait for the exit (kill after a grace period).
    Shutdown { reply: oneshot::Sender<()> },
}

/// State shared between the actor and client handles.
#[derive(Debug)]
pub(crate) struct Health {
    pub alive: AtomicBool,
    pub death: Mutex<Option<String>>,
    pub stderr_tail: StderrTail,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            alive: AtomicBool::new(false),
            death: Mutex::new(None),
            stderr_tail: StderrTail::new(STDERR_TAIL_LINES),
        }
    }
}

impl Health {
    pub fn death_reason(&self) -> Option<String> {
        self.death
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn stderr_summary(&self) -> String {
        let tail = self.stderr_tail.lines();
        summarize_stderr(tail.iter().map(String::as_str))
    }
}

struct Pending {
    method: String,
    reply: Reply,
    route_thread: Option<String>,
    turn_from_result: bool,
}

struct Subscription {
    tx: mpsc::UnboundedSender<Routed>,
    turn_id: Option<String>,
    method: String,
}

pub(crate) struct Actor {
    child: Child,
    writer: Option<mpsc::UnboundedSender<String>>,
    commands: mpsc::Receiver<Command>,
    incoming: mpsc::Receiver<Incoming>,
    health: Arc<Health>,
    calls: Peer<Pending>,
    subscriptions: HashMap<String, Subscription>,
    warned_methods: HashSet<String>,
}

/// Start the reader, writer and stderr tasks and the actor for a spawned child.
pub(crate) fn start(
    piped: Piped,
    max_line_bytes: usize,
    health: Arc<Health>,
) -> mpsc::Sender<Command> {
    let Piped {
        child,
        stdin,
        stdout,
        stderr,
    } = piped;
    let (incoming_tx, incoming_rx) = mpsc::channel(256);
    let (writer_tx, writer_rx) = mpsc::unbounded_channel();
    let (command_tx, command_rx) = mpsc::channel(64);
    tokio::spawn(read_stdout(stdout, max_line_bytes, incoming_tx.clone()));
    tokio::spawn(write_stdin(stdin, writer_rx, incoming_tx));
    tokio::spawn(forward_stderr(stderr, health.clone()));
    health.alive.store(true, Ordering::SeqCst);
    let actor = Actor {
        child,
        writer: Some(writer_tx),
        commands: command_rx,
        incoming: incoming_rx,
        health,
        calls: Peer::new(DIALECT),
        subscriptions: HashMap::new(),
        warned_methods: HashSet::new(),
    };
    tokio::spawn(actor.run());
    command_tx
}

async fn read_stdout<R: AsyncRead + Unpin>(
    stdout: R,
    max_line_bytes: usize,
    tx: mpsc::Sender<Incoming>,
) {
    let mut reader = line_reader(stdout, max_line_bytes);
    loop {
        let reason = match next_frame(&mut reader).await {
            Ok(Some(Frame::Line(line))) => {
                let incoming = match Message::parse(&line) {
                    Ok(Some(message)) => Some(Incoming::Message(message)),
                    Ok(None) => None,
                    Err(kind) => {
                        tracing::warn!(%kind, preview = %preview(&line), "codex app-server: skipped a stdout line that is no JSON-RPC message");
                        RequestId::in_line(&line).map(|id| Incoming::Malformed { id, kind })
                    }
                };
                if let Some(incoming) = incoming {
                    if tx.send(incoming).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            Ok(Some(Frame::TooLong(over))) => {
                tracing::warn!(
                    len = over.len,
                    max_line_bytes,
                    "codex app-server: skipped an over-long stdout line"
                );
                continue;
            }
            Ok(None) => "stdout closed".to_owned(),
            Err(error) => format!("reading stdout failed: {error}"),
        };
        let _ = tx.send(Incoming::Eof(reason)).await;
        return;
    }
}

/// Fuzzing hook: runs the stdout reader over `stdout` (bounded lines of at most
/// `max_line_bytes`) and returns the messages it hands to the actor, in order. Not part of the
/// API.
#[doc(hidden)]
pub async fn read_stdout_messages<R: AsyncRead + Unpin>(
    stdout: R,
    max_line_bytes: usize,
) -> Vec<Message> {
    let (tx, mut rx) = mpsc::channel(16);
    let collect = async move {
        let mut messages = Vec::new();
        while let Some(incoming) = rx.recv().await {
            if let Incoming::Message(message) = incoming {
                messages.push(message);
            }
        }
        messages
    };
    let ((), messages) = tokio::join!(read_stdout(stdout, max_line_bytes, tx), collect);
    messages
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(200)]);
    text.into_owned()
}

async fn write_stdin(
    mut stdin: ChildStdin,
    mut rx: mpsc::UnboundedReceiver<String>,
    tx: mpsc::Sender<Incoming>,
) {
    while let Some(line) = rx.recv().await {
        let written = match stdin.write_all(line.as_bytes()).await {
            Ok(()) => stdin.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            let _ = tx
                .send(Incoming::WriteFailed(format!(
                    "writing to stdin failed: {error}"
                )))
                .await;
            return;
        }
    }
    // The queue closed: dropping stdin sends EOF, which asks the app-server to exit.
}

async fn forward_stderr<R: AsyncRead + Unpin>(stderr: R, health: Arc<Health>) {
    ctxbridge_jsonrpc::forward_stderr(stderr, STDERR_MAX_LINE, &health.stderr_tail, |line| {
        log_stderr_line("codex app-server", line)
    })
    .await;
}

impl Actor {
    async fn run(mut self) {
        let mut exit_status: Option<String> = None;
        let mut stdout_closed: Option<String> = None;
        let mut deadline: Option<Instant> = None;
        let mut shutdown_waiters: Vec<oneshot::Sender<()>> = Vec::new();
        let mut kill_waiters: Vec<oneshot::Sender<()>> = Vec::new();
        let mut incoming_open = true;
        let reason = loop {
            let sleep_until =
                deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                command = self.commands.recv() => match command {
                    Some(Command::Kill { reply }) => {
                        kill_waiters.push(reply);
                        if exit_status.is_none() {
                            if let Err(error) = self.child.start_kill() {
                                tracing::warn!(%error, "codex app-server: kill failed");
                            }
                        }
                    }
                    Some(Command::Shutdown { reply }) => {
                        shutdown_waiters.push(reply);
                        // Closing the writer queue drops stdin after queued lines are written.
                        self.writer = None;
                        if deadline.is_none() {
                            deadline = Some(Instant::now() + SHUTDOWN_GRACE);
                        }
                    }
                    Some(command) => self.handle_command(command),
                    None => break "the client was dropped".to_owned(),
                },
                incoming = self.incoming.recv(), if incoming_open => match incoming {
                    Some(Incoming::Message(message)) => self.handle_message(message),
                    Some(Incoming::Malformed { id, kind }) => self.fail_malformed(&id, &kind),
                    Some(Incoming::Eof(reason)) | Some(Incoming::WriteFailed(reason)) => {
                        if let Some(status) = &exit_status {
                            break format!("codex app-server exited ({status}); {reason}");
                        }
                        if stdout_closed.is_none() {
                            stdout_closed = Some(reason);
                            deadline = Some(Instant::now() + EOF_GRACE);
                        }
                    }
                    // The reader reported EOF before ending; the exit or the deadline decides.
                    None => incoming_open = false,
                },
                status = self.child.wait(), if exit_status.is_none() => {
                    let status = match status {
                        Ok(status) => status.to_string(),
                        Err(error) => format!("wait failed: {error}"),
                    };
                    if let Some(reason) = &stdout_closed {
                        break format!("codex app-server exited ({status}); {reason}");
                    }
                    exit_status = Some(status);
                    deadline = Some(Instant::now() + EXIT_DRAIN);
                },
                () = tokio::time::sleep_until(sleep_until), if deadline.is_some() => {
                    break match (&exit_status, &stdout_closed) {
                        (Some(status), _) => format!("codex app-server exited ({status})"),
                        (None, Some(reason)) => format!("codex app-server {reason} but did not exit; killed"),
                        (None, None) => "codex app-server did not exit after stdin closed; killed".to_owned(),
                    };
                },
            }
        };
        let expected = !shutdown_waiters.is_empty() || !kill_waiters.is_empty();
        self.die(reason, exit_status.is_none(), expected).await;
        for waiter in kill_waiters.into_iter().chain(shutdown_waiters) {
            let _ = waiter.send(());
        }
        // Late commands (sent before the client noticed the death) get the same error.
        self.commands.close();
        while let Some(command) = self.commands.recv().await {
            self.reject(command);
        }
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Request {
                id,
                method,
                params,
                route,
                reply,
            } => {
                let mut route_thread = None;
                let mut turn_from_result = false;
                if let Some(route) = route {
                    let busy = self
                        .subscriptions
                        .get(&route.thread_id)
                        .is_some_and(|s| !s.tx.is_closed());
                    if busy {
                        let _ = reply.send(Err(AppServerError::TurnActive {
                            method,
                            thread_id: route.thread_id,
                        }));
                        return;
                    }
                    turn_from_result = route.turn_from_result;
                    route_thread = Some(route.thread_id.clone());
                    self.subscriptions.insert(
                        route.thread_id,
                        Subscription {
                            tx: route.tx,
                            turn_id: None,
                            method: method.clone(),
                        },
                    );
                }
                let line = match DIALECT.request_line(id, &method, &params) {
                    Ok(line) => line,
                    Err(error) => {
                        if let Some(thread_id) = route_thread {
                            self.subscriptions.remove(&thread_id);
                        }
                        let _ = reply.send(Err(AppServerError::Transport {
                            method,
                            reason: format!("the request could not be written: {error}"),
                        }));
                        return;
                    }
                };
                tracing::debug!(id, %method, "codex app-server: request");
                self.send_line(line);
                self.calls.register(
                    id,
                    Pending {
                        method,
                        reply,
                        route_thread,
                        turn_from_result,
                    },
                );
            }
            Command::Notify { method, params } => {
                match DIALECT.notification_line(&method, params.as_ref()) {
                    Ok(line) => self.send_line(line),
                    Err(error) => {
                        tracing::warn!(%method, %error, "codex app-server: a notification could not be written")
                    }
                }
            }
            Command::Cancel { id } => {
                if let Some(pending) = self.calls.take(id) {
                    if let Some(thread_id) = pending.route_thread {
                        self.subscriptions.remove(&thread_id);
                    }
                }
            }
            Command::Respond { id, result } => {
                let id = RequestId::from_value(&id);
                let line = match result {
                    Ok(result) => DIALECT.answer_line(&id, Ok(&result)),
                    Err(message) => {
                        DIALECT.answer_line(&id, Err(&RpcError::new(INTERNAL_ERROR, message)))
                    }
                };
                self.send_line(line);
            }
            Command::Kill { reply } | Command::Shutdown { reply } => {
                let _ = reply.send(());
            }
        }
    }

    fn send_line(&mut self, line: String) {
        match &self.writer {
            Some(writer) => {
                if writer.send(line).is_err() {
                    tracing::debug!("codex app-server: writer already gone");
                }
            }
            None => tracing::debug!("codex app-server: stdin closed; dropping a message"),
        }
    }

    fn handle_message(&mut self, message: Message) {
        match self.calls.receive_message(message) {
            Received::Answer { call, outcome, .. } => self.complete_request(call, outcome),
            Received::Unmatched { id, .. } => {
                tracing::warn!(%id, "codex app-server: response to an unknown request id")
            }
            Received::Request { id, method, params } => {
                self.answer_server_request(&method, id, params)
            }
            Received::Notification { method, params } => self.route_notification(method, params),
        }
    }

    /// A line naming request `id` was no JSON-RPC message: that request fails with why.
    fn fail_malformed(&mut self, id: &RequestId, kind: &Malformed) {
        let Some(pending) = id.as_i64().and_then(|id| self.calls.take(id)) else {
            return;
        };
        let outcome = Err(RpcError::new(
            INTERNAL_ERROR,
            format!("the app-server's answer is no JSON-RPC message: {kind}"),
        ));
        self.complete_request(pending, outcome);
    }

    /// A server request of [`ROUTED_SERVER_REQUESTS`] (a dynamic tool call) goes to the turn
    /// streaming on its thread, whose consumer answers it. Any other request (approvals, user
    /// input, …), or one for a thread no turn is streaming on, is declined: answering with an
    /// error keeps the server from waiting forever.
    fn answer_server_request(&mut self, method: &str, id: RequestId, params: Value) {
        if ROUTED_SERVER_REQUESTS.contains(&method) {
            let thread_id = params.get("threadId").and_then(Value::as_str);
            let subscription = thread_id.and_then(|t| self.subscriptions.get(t));
            if let Some(subscription) = subscription {
                let routed = Routed::ServerRequest {
                    // The app-server's ids are integers, which a `Value` keeps exactly.
                    id: id.to_value(),
                    method: method.to_owned(),
                    params,
                };
                if subscription.tx.send(routed).is_ok() {
                    tracing::debug!(%method, "codex app-server: server request routed to its turn");
                    return;
                }
            }
        }
        tracing::warn!(%method, "codex app-server: declining a server request");
        let error = RpcError::new(
            METHOD_NOT_FOUND,
            format!("ctxbridge does not handle {method}"),
        );
        self.send_line(DIALECT.answer_line(&id, Err(&error)));
    }

    fn complete_request(&mut self, pending: Pending, outcome: Result<Value, RpcError>) {
        let result = outcome.map_err(|error| AppServerError::Server {
            method: pending.method.clone(),
            code: error.code,
            message: error.message,
            data: error.data,
        });
        if let Some(thread_id) = &pending.route_thread {
            match &result {
                Err(_) => {
                    self.subscriptions.remove(thread_id);
                }
                Ok(value) if pending.turn_from_result => {
                    let turn_id = value
                        .pointer("/turn/id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    if let Some(subscription) = self.subscriptions.get_mut(thread_id) {
                        if subscription.turn_id.is_none() {
                            subscription.turn_id = turn_id;
                        }
                    }
                }
                Ok(_) => {}
            }
        }
        let _ = pending.reply.send(result);
    }

    fn route_notification(&mut self, method: String, params: Value) {
        if !KNOWN_NOTIFICATIONS.contains(&method.as_str())
            && self.warned_methods.insert(method.clone())
        {
            tracing::debug!(%method, "codex app-server: unknown notification (further ones are not logged)");
        }
        let Some(thread_id) = params
            .get("threadId")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            tracing::trace!(%method, "codex app-server: notification without a thread");
            return;
        };
        let Some(subscription) = self.subscriptions.get_mut(&thread_id) else {
            tracing::trace!(%method, %thread_id, "codex app-server: no turn waiting on this thread");
            return;
        };
        let notification_turn = params
            .get("turnId")
            .and_then(Value::as_str)
            .or_else(|| params.pointer("/turn/id").and_then(Value::as_str))
            .map(str::to_owned);
        if let (Some(expected), Some(actual)) = (&subscription.turn_id, &notification_turn) {
            if expected != actual {
                tracing::debug!(%method, %actual, %expected, "codex app-server: notification of another turn");
                return;
            }
        }
        if method == "turn/started" && subscription.turn_id.is_none() {
            subscription.turn_id = notification_turn;
        }
        let ends_turn = method == "turn/completed";
        let delivered = subscription
            .tx
            .send(Routed::Notification { method, params })
            .is_ok();
        if ends_turn || !delivered {
            self.subscriptions.remove(&thread_id);
        }
    }

    /// Fail everything waiting and make sure the process is gone.
    async fn die(&mut self, reason: String, kill: bool, expected: bool) {
        let reason = format!("{reason}{}", self.health.stderr_summary());
        if expected {
            tracing::info!(%reason, "codex app-server stopped");
        } else {
            tracing::warn!(%reason, "codex app-server connection closed");
        }
        self.health.alive.store(false, Ordering::SeqCst);
        *self
            .health
            .death
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        for (_, pending) in self.calls.drain() {
            let _ = pending.reply.send(Err(AppServerError::Transport {
                method: pending.method,
                reason: reason.clone(),
            }));
        }
        for (_, subscription) in self.subscriptions.drain() {
            let _ = subscription
                .tx
                .send(Routed::Closed(AppServerError::Transport {
                    method: subscription.method,
                    reason: reason.clone(),
                }));
        }
        self.writer = None;
        if kill {
            if let Err(error) = self.child.start_kill() {
                tracing::debug!(%error, "codex app-server: kill after close failed");
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        }
    }

    fn reject(&self, command: Command) {
        let reason = self
            .health
            .death_reason()
            .unwrap_or_else(|| "codex app-server is not running".to_owned());
        match command {
            Command::Request { method, reply, .. } => {
                let _ = reply.send(Err(AppServerError::Transport { method, reason }));
            }
            Command::Kill { reply } | Command::Shutdown { reply } => {
                let _ = reply.send(());
            }
            Command::Notify { .. } | Command::Cancel { .. } | Command::Respond { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Lines split across reads are reassembled; an over-long line is skipped whole and the
    /// next line is read intact; a final unterminated line still counts; a `\r` before the
    /// `\n` is dropped.
    #[tokio::test]
    async fn stdout_lines_are_bounded() {
        let input = b"{\"method\":\"a\"}\r\n{\"method\":\"this line is far too long\"}\n{\"method\":\"b\"}\n{\"method\":\"c\"}";
        let messages = read_stdout_messages(&input[..], 16).await;
        let methods: Vec<&str> = messages
            .iter()
            .map(|m| match m {
                Message::Notification { method, .. } => method.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(methods, ["a", "b", "c"]);
    }

    /// Only JSON-RPC messages are messages; blank lines, other JSON and garbage are skipped,
    /// and a malformed answer naming a request's id is reported against that id.
    #[tokio::test]
    async fn only_json_rpc_messages_are_messages() {
        let input = b"{\"id\":1,\"result\":null}\r\n   \n[1,2]\nError: not json\n{\"id\":2}\n";
        let (tx, mut rx) = mpsc::channel(16);
        read_stdout(&input[..], 1024, tx).await;
        let mut seen = Vec::new();
        while let Some(incoming) = rx.recv().await {
            seen.push(match incoming {
                Incoming::Message(Message::Response { id, .. }) => format!("answer {id}"),
                Incoming::Malformed { id, kind } => format!("malformed {id}: {kind}"),
                Incoming::Eof(_) => "eof".to_owned(),
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(
            seen,
            [
                "answer 1",
                "malformed 2: neither a request nor a response",
                "eof"
            ]
        );
    }
}
