//! A tmux server of a test's own (its own socket), for driving a program on a real terminal:
//! one session named by `target`, its screen read back, keys sent to it; the server and
//! everything in it are killed when the value is dropped, pass or fail.
// Each test binary that includes this file uses a part of it.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the sockets of the tmux servers of one test process.
static SOCKETS: AtomicU64 = AtomicU64::new(0);

/// A tmux server of its own; killed when dropped.
pub struct TmuxServer {
    socket: String,
    target: String,
}

impl TmuxServer {
    /// A server for a session named `target`, on a socket named after `purpose`, this process
    /// and a counter (the session itself is started with [`TmuxServer::run`]).
    pub fn new(purpose: &str, target: &str) -> TmuxServer {
        TmuxServer {
            socket: format!(
                "ctxbridge-{purpose}-{}-{}",
                std::process::id(),
                SOCKETS.fetch_add(1, Ordering::Relaxed)
            ),
            target: target.to_string(),
        }
    }

    /// Whether tmux can be run at all.
    pub fn available() -> bool {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Runs a tmux command on this server.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The whole screen, scrollback included, wrapped lines joined.
    pub fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", &self.target]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends keys (tmux `send-keys` arguments) to the session.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.target];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "tmux send-keys: {out:?}");
    }

    /// Whether the session still runs.
    pub fn alive(&self) -> bool {
        self.run(&["has-session", "-t", &self.target])
            .status
            .success()
    }
}

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
