//! Child processes spoken to over stdio: spawning one with its three streams piped and tied
//! to its handle, and keeping the last lines of its stderr to explain a death.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tokio::io::AsyncRead;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::framing::{line_reader, next_frame, Frame};

/// A spawned child and its piped streams.
#[derive(Debug)]
pub struct Piped {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Spawns `command` with stdin, stdout and stderr piped, killed when its [`Child`] is
/// dropped (so a handle that goes away never leaves an orphan behind).
pub fn spawn_piped(mut command: Command) -> std::io::Result<Piped> {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let missing = |what: &str| std::io::Error::other(format!("the child's {what} is not piped"));
    let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    Ok(Piped {
        child,
        stdin,
        stdout,
        stderr,
    })
}

/// The last lines a child wrote to stderr, at most a fixed number; shared between the task
/// reading stderr and whoever explains the child's death.
#[derive(Debug)]
pub struct StderrTail {
    capacity: usize,
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// A tail keeping the last `capacity` lines.
    pub fn new(capacity: usize) -> StderrTail {
        StderrTail {
            capacity,
            lines: Mutex::new(VecDeque::with_capacity(capacity)),
        }
    }

    /// Adds a line, dropping the oldest when full.
    pub fn push(&self, line: String) {
        if self.capacity == 0 {
            return;
        }
        // A panic while holding this lock leaves whole lines behind: the data stays usable.
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == self.capacity {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Whether no line was kept.
    pub fn is_empty(&self) -> bool {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}

/// Reads `stderr` to its end in lines of at most `max_line` bytes (an over-long one becomes
/// a note of its length), hands each line to `on_line` (to log it) and keeps it in `tail`.
/// Read errors end it like the end of the stream: stderr only explains, it never decides.
pub async fn forward_stderr<R, F>(stderr: R, max_line: usize, tail: &StderrTail, mut on_line: F)
where
    R: AsyncRead + Unpin,
    F: FnMut(&str),
{
    let mut reader = line_reader(stderr, max_line);
    while let Ok(Some(frame)) = next_frame(&mut reader).await {
        let text = match frame {
            Frame::Line(line) => String::from_utf8_lossy(&line).into_owned(),
            Frame::TooLong(over) => format!(
                "[a stderr line of {} bytes, over {max_line}, was dropped]",
                over.len
            ),
        };
        on_line(&text);
        tail.push(text);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The tail keeps the newest lines only; a zero-sized tail keeps none.
    #[test]
    fn tail_keeps_the_newest_lines() {
        let tail = StderrTail::new(2);
        for line in ["a", "b", "c"] {
            tail.push(line.to_owned());
        }
        assert_eq!(tail.lines(), vec!["b", "c"]);
        let none = StderrTail::new(0);
        none.push("x".into());
        assert!(none.is_empty());
    }

    /// Every stderr line is logged and kept; an over-long one is noted by length, not held.
    #[tokio::test]
    async fn stderr_is_forwarded_in_bounded_lines() {
        let input = format!("one\r\n{}\nthree", "x".repeat(100));
        let tail = StderrTail::new(10);
        let mut seen = Vec::new();
        forward_stderr(input.as_bytes(), 16, &tail, |l| seen.push(l.to_owned())).await;
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], "one");
        assert!(seen[1].contains("100 bytes"), "{}", seen[1]);
        assert_eq!(seen[2], "three");
        assert_eq!(tail.lines(), seen);
    }

    /// A spawned child has its streams piped and is killed when its handle is dropped.
    #[tokio::test]
    async fn spawned_children_die_with_their_handle() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo $$; exec sleep 30"]);
        let piped = spawn_piped(command).unwrap();
        let mut reader = line_reader(piped.stdout, 64);
        let Some(Frame::Line(pid)) = next_frame(&mut reader).await.unwrap() else {
            panic!("no pid line");
        };
        let pid = String::from_utf8(pid.to_vec()).unwrap();
        drop(piped.child);
        // Dead once gone or a zombie (killed, not yet reaped).
        let dead = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))
                .map_or(true, |status| status.contains("State:\tZ"))
        };
        let mut alive = true;
        for _ in 0..250 {
            if dead(&pid) {
                alive = false;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(!alive, "the child outlived its handle");
    }
}
