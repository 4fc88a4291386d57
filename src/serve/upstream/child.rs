//! A `codex app-server` child of serve's own: started as the Codex backend starts one, kept
//! (killed on order, reaped, its exit reported as the connection's end), its stdout read as
//! bounded lines, its stderr logged and kept to explain a death.

use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::{log_stderr_line, AppServerConfig};
use ctxbridge_jsonrpc::{
    next_frame, reader_with, spawn_piped, Frame, LineCodec, Piped, StderrTail,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc;

use super::oversize::OVERSIZE_ENDS;
use super::{
    event_of, handshake, Connector, Keep, Live, OversizeLine, Tail, UpstreamError, UpstreamEvent,
    EXIT_GRACE,
};

/// How many stderr lines are kept to explain a death.
const STDERR_TAIL_LINES: usize = 10;
/// The longest stderr line kept whole; a longer one is noted by its length.
const STDERR_MAX_LINE: usize = 64 * 1024;
/// After the process exits, how long its stdout may still drain before the death is reported.
const EXIT_DRAIN: Duration = Duration::from_millis(200);

/// Starts a `codex app-server` child per connection ([`spawn`]).
pub(crate) struct ChildConnector(pub AppServerConfig);

#[async_trait::async_trait]
impl Connector for ChildConnector {
    async fn connect(
        &self,
        generation: u64,
    ) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
        spawn(&self.0, generation).await
    }
}

/// Starts the child and performs the handshake. Returns the connection and its events.
pub(crate) async fn spawn(
    config: &AppServerConfig,
    generation: u64,
) -> Result<(Live, mpsc::UnboundedReceiver<UpstreamEvent>), UpstreamError> {
    let program = config
        .command
        .first()
        .cloned()
        .ok_or(UpstreamError::NoCommand)?;
    std::fs::create_dir_all(&config.codex_home).map_err(|source| UpstreamError::CodexHome {
        path: config.codex_home.clone(),
        source,
    })?;
    let command = config.process(&program);
    let Piped {
        child,
        stdin,
        stdout,
        stderr,
    } = spawn_piped(command).map_err(|source| UpstreamError::Spawn {
        program: program.clone(),
        source,
    })?;
    tracing::info!(%program, pid = ?child.id(), generation, "serve: started upstream codex app-server");
    let handshake_error = |reason: &str| UpstreamError::Handshake {
        program: program.clone(),
        reason: reason.to_owned(),
    };
    let tail: Tail = Arc::new(StderrTail::new(STDERR_TAIL_LINES));
    let (event_tx, events) = mpsc::unbounded_channel();
    let (writer, writer_rx) = mpsc::unbounded_channel();
    let (keeper, keeper_rx) = mpsc::unbounded_channel();
    let label = format!("upstream codex app-server `{program}`");
    tokio::spawn(read_stdout(
        stdout,
        config.max_line_bytes,
        event_tx.clone(),
        tail.clone(),
        label.clone(),
    ));
    tokio::spawn(write_lines(stdin, writer_rx));
    tokio::spawn(forward_stderr(stderr, tail.clone()));
    tokio::spawn(keep_child(child, keeper_rx, event_tx, tail, label));
    let live = Live {
        initialize_result: Value::Null,
        writer,
        keeper,
    };
    handshake(live, events, config.request_timeout, |reason| {
        handshake_error(reason)
    })
    .await
}

/// Owns the process: kills it on order, reaps it, and reports its exit as the connection's
/// end (a grandchild holding stdout open must not hide a death from the reader).
async fn keep_child(
    mut child: Child,
    mut orders: mpsc::UnboundedReceiver<Keep>,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    tail: Tail,
    label: String,
) {
    let mut waiters = Vec::new();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            order = orders.recv() => match order {
                Some(Keep::Kill) | None => {
                    if let Err(error) = child.start_kill() {
                        tracing::debug!(%error, "serve: killing the upstream failed");
                    }
                }
                Some(Keep::Shutdown(reply)) => {
                    waiters.push(reply);
                    match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                        Ok(status) => break status,
                        Err(_) => {
                            tracing::warn!("serve: upstream did not exit after stdin closed; killing it");
                            let _ = child.start_kill();
                        }
                    }
                }
            },
        }
    };
    let reason = match status {
        Ok(status) => {
            tracing::info!(%status, "serve: upstream codex app-server exited");
            format!("the process exited ({status})")
        }
        Err(error) => {
            tracing::warn!(%error, "serve: waiting for the upstream failed");
            format!("waiting for the process failed: {error}")
        }
    };
    // Let stdout deliver what the process wrote before it died; the reader may report first.
    tokio::time::sleep(EXIT_DRAIN).await;
    let _ = events.send(UpstreamEvent::Closed(format!(
        "{label}: {reason}{}",
        tail_summary(&tail)
    )));
    for waiter in waiters {
        let _ = waiter.send(());
    }
    // Late shutdown orders still get their answer.
    while let Ok(order) = orders.try_recv() {
        if let Keep::Shutdown(reply) = order {
            let _ = reply.send(());
        }
    }
}

async fn read_stdout<R: AsyncRead + Unpin>(
    stdout: R,
    max_line_bytes: usize,
    tx: mpsc::UnboundedSender<UpstreamEvent>,
    tail: Tail,
    label: String,
) {
    let mut reader = reader_with(
        stdout,
        LineCodec::keeping_ends(max_line_bytes, OVERSIZE_ENDS),
    );
    let reason = loop {
        match next_frame(&mut reader).await {
            Ok(Some(Frame::Line(line))) => {
                if let Some(event) = event_of(&line) {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
            Ok(Some(Frame::TooLong(over))) => {
                let line = OversizeLine::read(&over, max_line_bytes);
                tracing::warn!(
                    len = line.len,
                    max_line_bytes,
                    method = line.method.as_deref().unwrap_or_default(),
                    thread = line.thread.as_deref().unwrap_or_default(),
                    "serve: dropped an upstream message over the line limit"
                );
                if tx.send(UpstreamEvent::Oversize(line)).is_err() {
                    return;
                }
            }
            Ok(None) => break "its output closed (the process died or exited)".to_owned(),
            Err(error) => break format!("reading its output failed: {error}"),
        }
    };
    // Give stderr a moment to deliver the last words of a dying process.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = tx.send(UpstreamEvent::Closed(format!(
        "{label}: {reason}{}",
        tail_summary(&tail)
    )));
}

fn tail_summary(tail: &Tail) -> String {
    let lines = tail.lines();
    if lines.is_empty() {
        String::new()
    } else {
        format!("; last stderr: {}", lines.join(" | "))
    }
}

/// Writes queued lines into a child's stdin; when the queue closes, shuts it (EOF asks the
/// child to exit).
async fn write_lines<W: AsyncWrite + Unpin>(mut out: W, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = rx.recv().await {
        let written = match out.write_all(line.as_bytes()).await {
            Ok(()) => out.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            // The reader reports the death; nothing more can be written.
            tracing::debug!(%error, "serve: writing to the upstream failed");
            return;
        }
    }
    let _ = out.shutdown().await;
}

async fn forward_stderr<R: AsyncRead + Unpin>(stderr: R, tail: Tail) {
    ctxbridge_jsonrpc::forward_stderr(stderr, STDERR_MAX_LINE, &tail, |line| {
        log_stderr_line("serve upstream", line)
    })
    .await;
}
