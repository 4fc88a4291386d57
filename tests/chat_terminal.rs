//! `ctxbridge chat` on a terminal (a tmux pane): a `> ` prompt, `/help`, a turn, the Up arrow
//! recalling the earlier line from the history (kept in the state directory, so a second chat
//! recalls it too), and Ctrl-C at the prompt ending the chat with 130. Skips loudly without
//! tmux; every wait is bounded and the tmux server is killed on the way out, pass or fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long any one wait may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// A tmux server of its own (its own socket), killed with everything in it when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "chat"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "tmux send-keys: {out:?}");
    }

    /// Waits until `done` holds for the screen; fails with the screen after [`PATIENCE`].
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts `chat --session t` in `dir` in a 120×40 pane; the shell around it writes the exit
    /// code to `dir/exit` when the chat ends.
    fn start_chat(&self, dir: &Path) {
        let script = format!(
            "cd '{}' && '{}' chat --session t; echo $? > exit; sleep 60",
            dir.display(),
            env!("CARGO_BIN_EXE_ctxbridge")
        );
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            "chat",
            "-x",
            "120",
            "-y",
            "40",
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Waits for `dir/exit` and returns the exit code written there.
fn exit_code(dir: &Path, tmux: &Tmux) -> i32 {
    let path = dir.join("exit");
    let start = Instant::now();
    loop {
        if let Some(code) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return code;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the chat did not exit; screen:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn chat_on_a_terminal_edits_recalls_and_exits_130_on_ctrl_c() {
    if !tmux_available() {
        eprintln!("\n!!!!!!!! SKIPPED chat_terminal: tmux is not installed !!!!!!!!\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        r#"{store: {path: "state/state.db"}}"#,
    )
    .unwrap();
    let tmux = Tmux {
        socket: format!("ctxbridge-chat-{}", std::process::id()),
    };
    tmux.start_chat(dir.path());
    tmux.wait_for("the prompt", |s| s.lines().last_nonblank() == Some(">"));

    tmux.keys(&["-l", "/help"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the command list", |s| s.contains("list the commands"));

    tmux.keys(&["-l", "hello there"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the turn's end", |s| s.contains("[started"));

    // Up recalls the last line; Ctrl-U clears it again, unsent.
    tmux.keys(&["Up"]);
    tmux.wait_for("the recalled line", |s| {
        s.lines().last_nonblank() == Some("> hello there")
    });
    tmux.keys(&["C-u"]);
    tmux.wait_for("the cleared line", |s| {
        s.lines().last_nonblank() == Some(">")
    });

    tmux.keys(&["C-c"]);
    assert_eq!(exit_code(dir.path(), &tmux), 130);
    let screen = tmux.screen();
    assert_eq!(
        screen.matches("[started").count() + screen.matches("[resumed").count(),
        1,
        "only one turn ran: {screen}"
    );
    let history = std::fs::read_to_string(dir.path().join("state/chat-history")).unwrap();
    assert!(history.contains("hello there"), "{history}");
    assert!(history.contains("/help"), "{history}");
}

/// The last line of a screen that is not blank, trailing spaces removed.
trait LastNonblank<'a> {
    fn last_nonblank(self) -> Option<&'a str>;
}

impl<'a, I: DoubleEndedIterator<Item = &'a str>> LastNonblank<'a> for I {
    fn last_nonblank(self) -> Option<&'a str> {
        self.rev().map(str::trim_end).find(|l| !l.is_empty())
    }
}
