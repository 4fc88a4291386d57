//! The real Codex TUI as a client of `ctxbridge serve` (docs/serve.md#the-serve-command): the README's
//! `codex --remote ws://…` driven under tmux (type, wait a second, Enter; assertions poll the
//! screen), in front of the real `codex app-server` pointed at the loopback mock model by
//! `backend.config` (the TUI takes its model and provider from the server), with the sample
//! `sample-summary` engine behind it. Skips loudly without tmux or Codex; every wait is bounded,
//! and the tmux server and the TUI are killed on the way out, pass or fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/serve.rs"]
mod serve_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use codex_app_server_client::locate_codex_binary;
use ctxbridge::serve::{self, ServeHandle};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{
    MockModelConfig, MockModelServer, RecordedRequest, RequestKind, ScriptedReply,
};
use serde_json::{json, Value};

#[path = "support/tmux.rs"]
mod tmux;

use tmux::TmuxServer;

/// How long one screen condition may take to appear on a loaded machine before the test fails.
const PATIENCE: Duration = Duration::from_secs(120);
/// The marker of a rendered projection in a turn input (docs/architecture.md#rendering).
const CONTEXT: &str = "<conversation_context>";
/// Text of the sample engine's `systemPromptAddition`.
const ENGINE_INSTRUCTIONS: &str = "Context comes from the sample summary engine";
/// How the TUI's title-generation helper turn begins.
const TITLE_PROMPT: &str = "Generate a concise, single-line task title";
/// The scripted title (Codex 0.171 names the thread after the first prompt anyway).
const TITLE: &str = "Greek letter roll call";
/// What the TUI prints when a turn ended.
const WORKED: &str = "Worked for";
/// The reply to anything not scripted.
const UNSCRIPTED: &str = "Unscripted mock reply";
/// Texts of the projection's frame that must never reach the screen.
const PROJECTION_TEXTS: [&str; 4] = [
    CONTEXT,
    "Assembled context for this turn",
    "Current user request",
    "[compactionSummary]",
];
/// The prompts typed, each with the reply the mock gives it.
const DIALOGUE: [(&str, &str); 5] = [
    ("first prompt alpha", "Reply one acknowledges alpha"),
    ("second prompt beta", "Reply two acknowledges beta"),
    ("third prompt gamma", "Reply three acknowledges gamma"),
    ("fourth prompt delta", "Reply four acknowledges delta"),
    ("fifth prompt epsilon", "Reply five acknowledges epsilon"),
];

/// The TUI in a tmux server of its own, killed with everything in it when dropped.
struct Tmux {
    server: TmuxServer,
    /// Where the TUI's stderr goes (shown when a wait fails).
    stderr: PathBuf,
    /// The pid of the pane's process (the TUI), killed too in case it ignores the hangup.
    pane_pid: Option<u32>,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        self.server.run(args)
    }

    /// The whole screen, scrollback included, wrapped lines joined.
    fn screen(&self) -> String {
        self.server.screen()
    }

    fn keys(&self, keys: &[&str]) {
        self.server.keys(keys);
    }

    /// Wait until `done` holds for the screen; fail with the screen (and the TUI's stderr)
    /// after [`PATIENCE`].
    async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            let gone = !self.server.alive();
            if gone || start.elapsed() > PATIENCE {
                let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
                let why = if gone { "the TUI exited" } else { "timed out" };
                panic!("{why} waiting for {what}; screen:\n{screen}\nTUI stderr:\n{err}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Type `text` into the composer and submit it; returns once the TUI reported a finished
    /// turn more than before (its "Worked for …" line) and `done` holds for the screen.
    async fn submit(&self, text: &str, done: impl Fn(&str) -> bool) -> String {
        let turns_before = self.screen().matches(WORKED).count();
        self.keys(&["-l", text]);
        self.wait_for(&format!("{text:?} in the composer"), |s| {
            s.contains(&format!("› {text}"))
        })
        .await;
        // Typed text arrives as one burst; an Enter inside the burst would be a newline.
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.keys(&["Enter"]);
        self.wait_for(&format!("the end of the turn of {text:?}"), |s| {
            s.matches(WORKED).count() > turns_before && done(s)
        })
        .await
    }
}

impl Tmux {
    /// Quit the TUI with `/quit` and wait (at most [`PATIENCE`]) until it exited and its tmux
    /// session with it.
    async fn quit(&self) {
        self.keys(&["-l", "/quit"]);
        self.wait_for("/quit in the composer", |s| s.contains("› /quit"))
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.keys(&["Enter"]);
        let start = Instant::now();
        while self.server.alive() {
            assert!(
                start.elapsed() < PATIENCE,
                "the TUI did not quit; screen:\n{}",
                self.screen()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // The server goes with `server`; the TUI too, should it ignore the hangup.
        let _ = self.run(&["kill-server"]);
        if let Some(pid) = self.pane_pid {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
    }
}

/// `serve` on `dir` (store, Codex home) with the sample engine keeping a window of 2 messages
/// and summarising `chunk` at a time (chunks of 4: prompts 1–3 share the first epoch, the
/// fourth starts a new one and the fifth stays in it).
async fn serve_in(dir: &Path, mock: &MockModelServer, binary: &Path, chunk: u64) -> ServeHandle {
    serve_support::serve_sample_engine(dir, mock, binary, chunk, json!({})).await
}

/// Settings that keep the TUI itself off the network (the update check, analytics, feedback,
/// the plugin marketplace). No model-provider overrides: the TUI takes the model and provider
/// from the server it connects to, so the mock provider of `backend.config` is all it needs —
/// the command is the README's `codex --remote ws://…`.
const TUI_OFFLINE: [&str; 4] = [
    "check_for_update_on_startup=false",
    "analytics.enabled=false",
    "feedback.enabled=false",
    "features.plugins=false",
];

/// Start `codex --remote URL` (with `resume`: `codex resume --remote URL THREAD`) in a
/// detached 200×50 tmux session; the TUI's own Codex home is `home`, its stderr goes to
/// `stderr`.
fn start_tui(
    binary: &Path,
    url: &str,
    home: &Path,
    cwd: &Path,
    stderr: &Path,
    resume: Option<&str>,
) -> Tmux {
    let mut tmux = Tmux {
        server: TmuxServer::new("tui", "tui"),
        stderr: stderr.to_owned(),
        pane_pid: None,
    };
    // `sh -c 'exec "$0" "$@" 2>FILE'` keeps every argument intact (no quoting) and the TUI's
    // stderr out of the screen.
    let mut command: Vec<String> = vec![
        "new-session".into(),
        "-d".into(),
        "-s".into(),
        "tui".into(),
        "-x".into(),
        "200".into(),
        "-y".into(),
        "50".into(),
        "-c".into(),
        cwd.display().to_string(),
        "env".into(),
        format!("CODEX_HOME={}", home.display()),
        "sh".into(),
        "-c".into(),
        format!("exec \"$0\" \"$@\" 2>'{}'", stderr.display()),
        binary.display().to_string(),
    ];
    if resume.is_some() {
        command.push("resume".into());
    }
    command.push("--remote".into());
    command.push(url.into());
    for setting in TUI_OFFLINE {
        command.push("-c".into());
        command.push(setting.into());
    }
    if let Some(thread) = resume {
        command.push(thread.into());
    }
    let args: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = tmux.run(&args);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    let pid = tmux.run(&["display-message", "-p", "-t", "tui", "#{pane_pid}"]);
    tmux.pane_pid = String::from_utf8_lossy(&pid.stdout).trim().parse().ok();
    tmux
}

/// The mock's requests for the session's turns: the one whose last user message ends with
/// each prompt, in dialogue order (title-helper requests, which quote the prompt, excluded).
fn turn_requests(requests: &[RecordedRequest]) -> Vec<RecordedRequest> {
    DIALOGUE
        .iter()
        .map(|(prompt, _)| {
            let matching: Vec<&RecordedRequest> = requests
                .iter()
                .filter(|r| !is_title_request(r))
                .filter(|r| r.last_user_text().is_some_and(|t| t.ends_with(prompt)))
                .collect();
            assert_eq!(matching.len(), 1, "one model request for {prompt:?}");
            matching[0].clone()
        })
        .collect()
}

fn is_title_request(request: &RecordedRequest) -> bool {
    request
        .last_user_text()
        .is_some_and(|t| t.starts_with(TITLE_PROMPT))
}

/// The input items of a request, of any role, that carry a rendered projection (serve
/// delivers it per `projection.codexContextDelivery`: in the turn input, or as Codex's
/// additional context, a developer message), as JSON text.
fn context_items_of(request: &RecordedRequest) -> Vec<String> {
    request.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .map(Value::to_string)
        .filter(|item| item.contains(CONTEXT))
        .collect()
}

/// How many input items of a request carry a rendered projection.
fn context_items(request: &RecordedRequest) -> usize {
    context_items_of(request).len()
}

/// The different projections the model was sent over `requests`.
fn distinct_contexts(requests: &[RecordedRequest]) -> std::collections::BTreeSet<String> {
    requests.iter().flat_map(context_items_of).collect()
}

/// The backend thread the store maps a client thread id to (docs/serve.md#the-serve-command "Sessions").
fn backend_of(state: &Path, client: &str) -> String {
    let store = SqliteStore::open(state.join("state.db")).unwrap();
    let doc = store
        .load_document(serve::thread_map::NAMESPACE, client)
        .unwrap()
        .unwrap_or_else(|| panic!("no thread-map entry for {client}"));
    let doc: Value = serde_json::from_str(&doc).unwrap();
    doc["backendThreadId"].as_str().unwrap().to_owned()
}

/// The thread a model request was made for (Codex's `thread-id` header).
fn thread_of(request: &RecordedRequest) -> String {
    request
        .header("thread-id")
        .unwrap_or_else(|| panic!("no thread-id header: {:?}", request.headers))
        .to_owned()
}

/// The rig: the mock model (unscripted requests get a fixed text, so no reply can echo a
/// projection to the screen; the title helper gets [`TITLE`]), `serve` on a temp dir and the
/// TUI connected to it, its composer ready. `None` (after a loud message): no tmux or Codex.
struct Rig {
    mock: MockModelServer,
    dir: tempfile::TempDir,
    handle: ServeHandle,
    tmux: Tmux,
    binary: PathBuf,
}

impl Rig {
    async fn start(chunk: u64) -> Option<Rig> {
        if !TmuxServer::available() {
            eprintln!("\n!!!!!!!! SKIPPED serve_tui: tmux is not installed !!!!!!!!\n");
            return None;
        }
        let Some(binary) = locate_codex_binary() else {
            eprintln!("\n!!!!!!!! SKIPPED serve_tui: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
            return None;
        };
        // `RUST_LOG=ctxbridge::serve=debug` shows what the TUI asks serve (its requests'
        // methods and history/paging params).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let mock = MockModelServer::start(MockModelConfig::default())
            .await
            .unwrap();
        mock.set_default_reply(ScriptedReply::text(UNSCRIPTED));
        mock.push_reply_when(is_title_request, ScriptedReply::text(TITLE));
        let dir = tempfile::tempdir().unwrap();
        let handle = serve_in(dir.path(), &mock, &binary, chunk).await;
        std::fs::create_dir_all(dir.path().join("tui-home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let tmux = Rig::tui(&binary, dir.path(), &handle, None);
        tmux.wait_for("the TUI's composer", |s| {
            s.contains("OpenAI Codex") && s.contains("for shortcuts")
        })
        .await;
        Some(Rig {
            mock,
            dir,
            handle,
            tmux,
            binary,
        })
    }

    /// The TUI on `dir` (its Codex home, working directory and stderr file there) connected to
    /// `handle`'s serve, resuming `resume` if given.
    fn tui(binary: &Path, dir: &Path, handle: &ServeHandle, resume: Option<&str>) -> Tmux {
        let url = format!("ws://{}", handle.local_addr.unwrap());
        let stderr = dir.join(match resume {
            None => "tui.stderr",
            Some(_) => "tui-resume.stderr",
        });
        start_tui(
            binary,
            &url,
            &dir.join("tui-home"),
            &dir.join("work"),
            &stderr,
            resume,
        )
    }

    /// The mock answers the session's turn for `prompt` with `reply`.
    fn script(&self, prompt: &'static str, reply: &str) {
        self.mock.push_reply_when(
            move |r: &RecordedRequest| {
                !is_title_request(r) && r.last_user_text().is_some_and(|t| t.ends_with(prompt))
            },
            ScriptedReply::text(reply),
        );
    }

    /// Types `prompt` and waits for `reply` on screen.
    async fn converse(&self, prompt: &str, reply: &str) -> String {
        self.tmux.submit(prompt, |s| s.contains(reply)).await
    }

    async fn stop(self) {
        drop(self.tmux);
        self.handle.shutdown().await;
    }
}

/// The screen holds no trace of a projection and no unscripted reply.
fn assert_clean(screen: &str) {
    for text in PROJECTION_TEXTS {
        assert!(
            !screen.contains(text),
            "projection text {text:?} on screen:\n{screen}"
        );
    }
    assert!(!screen.contains(UNSCRIPTED), "{screen}");
}

/// The screen shows each prompt of `dialogue` (as the TUI shows the user's messages) followed
/// by its reply, in order.
fn assert_in_order(screen: &str, dialogue: &[(&str, &str)]) {
    let mut at = 0;
    for (prompt, reply) in dialogue {
        let p = screen[at..]
            .find(&format!("› {prompt}"))
            .unwrap_or_else(|| panic!("{prompt:?} not on screen in order:\n{screen}"));
        let r = screen[at + p..]
            .find(reply)
            .unwrap_or_else(|| panic!("{reply:?} not on screen after its prompt:\n{screen}"));
        at += p + r;
    }
}

/// Five prompts typed into the real Codex TUI connected to `ctxbridge serve`, across an epoch
/// change of the sample engine: the screen shows every prompt and every reply and never the
/// projection (though the rotated backend thread holds it); the model got the
/// engine's context once for the new epoch (the fourth prompt's request carries it, the fifth
/// — same epoch, same backend thread — gets the bare prompt with the context once in its
/// history) and none before; the TUI's ephemeral title helper got neither context nor engine
/// instructions; the session stayed one client thread.
#[tokio::test(flavor = "multi_thread")]
async fn codex_tui_converses_across_an_epoch_change() {
    let Some(rig) = Rig::start(4).await else {
        return;
    };
    for (prompt, reply) in DIALOGUE {
        rig.script(prompt, reply);
    }
    for (prompt, reply) in DIALOGUE {
        rig.converse(prompt, reply).await;
    }
    let screen = rig.tmux.screen();

    // The screen: every prompt and reply, in order, and no projection.
    assert_in_order(&screen, &DIALOGUE);
    assert_clean(&screen);
    // The model: no context in the first epoch; the new epoch's context once, on the turn
    // that started it, then kept (not re-sent) by its backend thread.
    let requests = rig.mock.response_requests();
    let turns = turn_requests(&requests);
    assert!(
        turns[0].body_contains(ENGINE_INSTRUCTIONS),
        "the engine's instructions reached the session's thread"
    );
    for (request, (prompt, _)) in turns.iter().zip(DIALOGUE).take(3) {
        assert_eq!(request.last_user_text().unwrap(), prompt, "bare prompt");
        assert_eq!(context_items(request), 0, "the first epoch has no context");
    }
    assert_eq!(context_items(&turns[3]), 1, "the new epoch projects");
    let fourth = context_items_of(&turns[3]).join("");
    assert!(
        fourth.contains("first prompt alpha"),
        "the context summarises the earlier prompts: {fourth}"
    );
    assert!(
        !turns[3]
            .conversation_texts("user")
            .iter()
            .any(|t| t == DIALOGUE[0].0),
        "the new backend thread does not hold the old turns verbatim"
    );
    assert_eq!(
        turns[4].last_user_text().unwrap(),
        DIALOGUE[4].0,
        "same epoch: the bare prompt"
    );
    assert_eq!(
        context_items(&turns[4]),
        1,
        "the epoch's context sits once in the thread's history"
    );
    assert_eq!(
        distinct_contexts(&requests).len(),
        1,
        "the context was rendered once for its one epoch"
    );

    // The TUI's title helper: ephemeral, passed through untouched.
    let titles: Vec<&RecordedRequest> = requests.iter().filter(|r| is_title_request(r)).collect();
    assert!(!titles.is_empty(), "the TUI generated a title");
    for title in titles {
        assert_eq!(context_items(title), 0, "no context for the title helper");
        assert!(!title.body_contains(CONTEXT));
        assert!(!title.body_contains(ENGINE_INSTRUCTIONS));
    }

    // One session: the TUI's thread served the first epoch; the new epoch moved it to a
    // hidden backend thread, which the store maps the TUI's thread id to.
    let client = thread_of(&turns[0]);
    for request in &turns[1..3] {
        assert_eq!(thread_of(request), client);
    }
    let backend = thread_of(&turns[3]);
    assert_ne!(backend, client, "the fourth prompt moved the session");
    assert_eq!(thread_of(&turns[4]), backend, "the fifth stayed");
    assert_eq!(backend_of(&rig.dir.path().join("state"), &client), backend);
    rig.stop().await;
}

/// `/compact` in the TUI on a session whose engine owns compaction: the TUI shows the
/// compaction end (serve shows it the compaction turn Codex would have run; the upstream ran
/// none and the model was not asked to summarise), and the next prompt starts the engine's new
/// epoch — a new backend thread whose first request carries the summary of the compacted
/// turns — with no projection on screen.
#[tokio::test(flavor = "multi_thread")]
async fn codex_tui_compact_runs_the_engine_and_ends() {
    let Some(rig) = Rig::start(4).await else {
        return;
    };
    let dialogue = &DIALOGUE[..3];
    for (prompt, reply) in dialogue {
        rig.script(prompt, reply);
    }
    for (prompt, reply) in &dialogue[..2] {
        rig.converse(prompt, reply).await;
    }
    rig.tmux
        .submit("/compact", |s| s.contains("Context compacted"))
        .await;
    let (prompt, reply) = dialogue[2];
    let screen = rig.converse(prompt, reply).await;
    assert_clean(&screen);

    let requests = rig.mock.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.kind != RequestKind::Compact && !r.body_contains("CONTEXT CHECKPOINT")),
        "the engine compacted; the model was not asked to"
    );
    let requests = rig.mock.response_requests();
    let find = |prompt: &str| {
        requests
            .iter()
            .find(|r| {
                !is_title_request(r) && r.last_user_text().is_some_and(|t| t.ends_with(prompt))
            })
            .unwrap_or_else(|| panic!("no model request for {prompt:?}"))
    };
    let first = find(DIALOGUE[0].0);
    let third = find(prompt);
    assert_eq!(context_items(third), 1, "the new epoch projects");
    let input = context_items_of(third).join("");
    assert!(
        input.contains(DIALOGUE[0].0),
        "the summary covers the compacted turns: {input}"
    );
    assert_ne!(
        thread_of(third),
        thread_of(first),
        "the compaction's epoch moved the session to a new backend thread"
    );
    rig.stop().await;
}

/// Esc in the TUI during a turn on a rotated backend thread interrupts it (serve maps the
/// TUI's `turn/interrupt` to the backend thread): the TUI shows the interruption and the
/// session keeps working — the next prompt gets its reply, under the same client thread.
#[tokio::test(flavor = "multi_thread")]
async fn codex_tui_interrupts_a_turn_on_a_rotated_thread() {
    let Some(rig) = Rig::start(2).await else {
        return;
    };
    let dialogue = &DIALOGUE[..4];
    for (prompt, reply) in &dialogue[..2] {
        rig.script(prompt, reply);
        rig.converse(prompt, reply).await;
    }
    // The third prompt moves the session to a new backend thread; its reply never comes.
    let (slow, _) = dialogue[2];
    rig.mock.push_reply_when(
        move |r: &RecordedRequest| r.last_user_text().is_some_and(|t| t.ends_with(slow)),
        ScriptedReply::text("Too late").with_delay(Duration::from_secs(600)),
    );
    rig.tmux.keys(&["-l", slow]);
    rig.tmux
        .wait_for("the slow prompt in the composer", |s| {
            s.contains(&format!("› {slow}"))
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    rig.tmux.keys(&["Enter"]);
    rig.tmux
        .wait_for("the model to be asked", |_| {
            rig.mock
                .response_requests()
                .iter()
                .any(|r| r.last_user_text().is_some_and(|t| t.ends_with(slow)))
        })
        .await;
    rig.tmux
        .wait_for("the turn running", |s| s.contains("esc to interrupt"))
        .await;
    rig.tmux.keys(&["Escape"]);
    let screen = rig
        .tmux
        .wait_for("the interruption on screen", |s| {
            s.to_lowercase().contains("interrupted") && !s.contains("esc to interrupt")
        })
        .await;
    assert!(!screen.contains("Too late"), "{screen}");
    let (prompt, reply) = dialogue[3];
    rig.script(prompt, reply);
    let screen = rig.converse(prompt, reply).await;
    assert_clean(&screen);

    let requests = rig.mock.response_requests();
    let thread_for = |prompt: &str| {
        let request = requests
            .iter()
            .find(|r| {
                !is_title_request(r) && r.last_user_text().is_some_and(|t| t.ends_with(prompt))
            })
            .unwrap_or_else(|| panic!("no model request for {prompt:?}"));
        thread_of(request)
    };
    let first = thread_for(dialogue[0].0);
    assert_ne!(
        thread_for(slow),
        first,
        "the interrupted turn ran on a rotated backend thread"
    );
    assert_eq!(
        backend_of(&rig.dir.path().join("state"), &first),
        thread_for(prompt),
        "the next prompt ran on the session's current backend thread"
    );
    rig.stop().await;
}

/// `codex resume --remote ws://… ID` of a session that moved to a new backend thread: after
/// four prompts across an epoch change and quitting the TUI, the resumed TUI — which resumes
/// with `excludeTurns` and fetches the history with `thread/turns/list` and
/// `thread/items/list` from the resume's backwards cursors — shows the whole conversation (the
/// first epoch's prompts and replies, rebuilt by serve from its transcript, then the current
/// backend thread's) in order, with the user's own words and no projection; the next prompt
/// runs on the session's current backend thread as a bare prompt (same epoch: the context
/// stays once in that thread's history; nothing is projected again).
#[tokio::test(flavor = "multi_thread")]
async fn codex_tui_resumes_a_rotated_session() {
    let Some(mut rig) = Rig::start(4).await else {
        return;
    };
    let (before, (prompt, reply)) = (&DIALOGUE[..4], DIALOGUE[4]);
    for (prompt, reply) in DIALOGUE {
        rig.script(prompt, reply);
    }
    for (prompt, reply) in before {
        rig.converse(prompt, reply).await;
    }
    rig.tmux.quit().await;
    let find = |requests: &[RecordedRequest], prompt: &str| -> RecordedRequest {
        let matching: Vec<&RecordedRequest> = requests
            .iter()
            .filter(|r| !is_title_request(r))
            .filter(|r| r.last_user_text().is_some_and(|t| t.ends_with(prompt)))
            .collect();
        assert_eq!(matching.len(), 1, "one model request for {prompt:?}");
        matching[0].clone()
    };
    let requests = rig.mock.response_requests();
    let client = thread_of(&find(&requests, before[0].0));
    let backend = thread_of(&find(&requests, before[3].0));
    assert_ne!(backend, client, "the epoch change moved the session");
    assert_eq!(
        context_items(&find(&requests, before[3].0)),
        1,
        "the new epoch projected"
    );

    rig.tmux = Rig::tui(&rig.binary, rig.dir.path(), &rig.handle, Some(&client));
    let screen = rig
        .tmux
        .wait_for("the resumed conversation and the composer", |s| {
            s.contains(before[3].1) && s.contains("for shortcuts")
        })
        .await;
    assert_in_order(&screen, before);
    assert_clean(&screen);
    assert!(!screen.contains("<ctxbridge>"), "{screen}");
    for (prompt, reply) in before {
        assert_eq!(
            screen.matches(&format!("› {prompt}")).count(),
            1,
            "{prompt:?} shown once:\n{screen}"
        );
        assert_eq!(
            screen.matches(reply).count(),
            1,
            "{reply:?} once:\n{screen}"
        );
    }

    let screen = rig.converse(prompt, reply).await;
    assert_clean(&screen);
    let requests = rig.mock.response_requests();
    let next = find(&requests, prompt);
    assert_eq!(
        thread_of(&next),
        backend,
        "the resumed session runs on its current backend thread"
    );
    assert_eq!(next.last_user_text().unwrap(), prompt, "bare prompt");
    assert_eq!(
        context_items(&next),
        1,
        "the epoch's context sits once in the thread's history: {}",
        next.body["input"]
    );
    let contexts = distinct_contexts(&requests);
    assert_eq!(
        contexts.len(),
        1,
        "one projection, not re-rendered: {contexts:?}"
    );
    assert_eq!(backend_of(&rig.dir.path().join("state"), &client), backend);
    rig.stop().await;
}
