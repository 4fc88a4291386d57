//! `ctxbridge chat` on a terminal (a tmux pane): a `> ` prompt, `/help`, a turn, the Up arrow
//! recalling the earlier line from the history (kept in the state directory, so a second chat
//! recalls it too), and Ctrl-C at the prompt ending the chat with 130. Skips loudly without
//! tmux; every wait is bounded and the tmux server is killed on the way out, pass or fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "support/tmux.rs"]
mod tmux;

use tmux::TmuxServer;

/// How long any one wait may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// A chat in a tmux pane of its own.
struct Tmux(TmuxServer);

impl Tmux {
    fn screen(&self) -> String {
        self.0.screen()
    }

    fn keys(&self, keys: &[&str]) {
        self.0.keys(keys);
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
    fn start_chat(dir: &Path) -> Tmux {
        let tmux = Tmux(TmuxServer::new("chat", "chat"));
        let script = format!(
            "cd '{}' && '{}' chat --session t; echo $? > exit; sleep 60",
            dir.display(),
            env!("CARGO_BIN_EXE_ctxbridge")
        );
        let out = tmux.0.run(&[
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
        tmux
    }
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
    if !TmuxServer::available() {
        eprintln!("\n!!!!!!!! SKIPPED chat_terminal: tmux is not installed !!!!!!!!\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        r#"{store: {path: "state/state.db"}}"#,
    )
    .unwrap();
    let tmux = Tmux::start_chat(dir.path());
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
