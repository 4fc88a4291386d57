//! Sessions under load, signals and crashes, through the built binary: concurrent turns of
//! several processes on one store file all get recorded; a `ctxbridge turn` killed (SIGKILL)
//! or terminated (SIGTERM) mid-turn does not keep its session locked; a closed stdout, an
//! empty session key, an empty `store.path` and a non-UTF-8 `chat` line are reported rather
//! than panicking or silently misbehaving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use serde_json::{json, Value};

/// The binary in `dir`, Codex's home (`CODEX_HOME`) inside it, never the user's.
fn ctxbridge(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxbridge"));
    cmd.current_dir(dir)
        .env("CODEX_HOME", dir.join("codex-home"));
    cmd
}

fn write_config(dir: &Path, config: &Value) {
    std::fs::write(
        dir.join("ctxbridge.json5"),
        serde_json::to_string_pretty(config).unwrap(),
    )
    .unwrap();
}

fn turn(dir: &Path, session: &str, prompt: &str) -> Output {
    ctxbridge(dir)
        .args(["turn", "--session", session, "--json", prompt])
        .output()
        .unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Rows of `sql` (one integer column) in the store at `db`.
fn count(db: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Five `ctxbridge turn` processes on five sessions of one (fresh) store file, 30 rounds: every
/// turn succeeds, and every session ends with one thread and its whole transcript — no
/// "locked" failure after the backend answered, none when the processes open the fresh store.
#[test]
fn concurrent_turns_on_one_store_file_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state/state.db"}}));
    const SESSIONS: usize = 5;
    const ROUNDS: usize = 30;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let children: Vec<Child> = (0..SESSIONS)
            .map(|s| {
                ctxbridge(dir.path())
                    .args([
                        "turn",
                        "--session",
                        &format!("s{s}"),
                        "--json",
                        &format!("round {round}"),
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            if !out.status.success() {
                failures.push(describe(&out));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} turns failed; first: {}",
        failures.len(),
        SESSIONS * ROUNDS,
        failures[0]
    );
    let db = dir.path().join("state/state.db");
    for s in 0..SESSIONS {
        let entries = count(
            &db,
            &format!("SELECT count(*) FROM transcript WHERE session_id = 's{s}'"),
        );
        assert_eq!(entries, (2 * ROUNDS) as i64, "session s{s}");
    }
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM documents WHERE namespace = 'mock-thread'"
        ),
        SESSIONS as i64,
        "one mock thread per session, no orphan"
    );
}

/// A Responses-backend configuration against `mock` that does not wait for a busy session at
/// all: a turn only goes through when the session's lease is free or its holder is gone.
fn responses_config(mock: &MockModelServer) -> Value {
    json!({
        "backend": {"kind": "responses", "baseUrl": mock.base_url(), "model": "mock-model"},
        "store": {"path": "state.db", "leaseWaitMs": 0}
    })
}

/// Starts a turn whose backend reply stalls, and waits until the mock has received its request
/// (the turn then holds the session lease).
async fn stalled_turn(dir: &Path, mock: &MockModelServer, session: &str) -> Child {
    let before = mock.response_requests().len();
    mock.push_reply(ScriptedReply::text("late").with_delay(Duration::from_secs(600)));
    let child = ctxbridge(dir)
        .args(["turn", "--session", session, "--json", "stalls"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while mock.response_requests().len() == before {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

/// A turn killed with SIGKILL while the backend is answering leaves its lease behind; the next
/// turn of the session (which does not wait for busy sessions) takes it over at once because
/// the holder's process is gone, and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_turn_does_not_lock_its_session() {
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &responses_config(&mock));
    let first = turn(dir.path(), "k", "first");
    assert!(first.status.success(), "{}", describe(&first));
    let mut child = stalled_turn(dir.path(), &mock, "k").await;
    child.kill().unwrap();
    child.wait().unwrap();
    let db = dir.path().join("state.db");
    assert_eq!(
        count(&db, "SELECT count(*) FROM leases WHERE expires_at_ms > 0"),
        1,
        "the killed turn's lease is still in the store"
    );
    let path = dir.path().to_path_buf();
    let next = tokio::task::spawn_blocking(move || turn(&path, "k", "after the kill"))
        .await
        .unwrap();
    assert!(next.status.success(), "{}", describe(&next));
    assert_eq!(count(&db, "SELECT count(*) FROM transcript"), 4);
}

/// A signal mid-turn: the exit code for it, a message, the lease released (not merely taken
/// over later), the transcript unchanged.
async fn signal_mid_turn(signal: &str, name: &str, code: i32) {
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &responses_config(&mock));
    let first = turn(dir.path(), "t", "first");
    assert!(first.status.success(), "{}", describe(&first));
    let db = dir.path().join("state.db");
    let child = stalled_turn(dir.path(), &mock, "t").await;
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("interrupted by {name}")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM leases WHERE expires_at_ms > 0"),
        0,
        "the lease was released"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM transcript"), 2);
}

/// SIGTERM mid-turn exits 143, releases the session and records nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_turn_releases_the_session() {
    signal_mid_turn("-TERM", "SIGTERM", 143).await;
}

/// SIGINT (Ctrl-C) mid-turn exits 130, releases the session and records nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sigint_mid_turn_releases_the_session() {
    signal_mid_turn("-INT", "SIGINT", 130).await;
}

/// Runs `command` with a stdout whose reader leaves at once, before anything was written.
fn with_closed_stdout(command: &mut std::process::Command) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// `ctxbridge turn … | true`: a closed stdout is no panic; the exit code (141) says the
/// output was lost, and the turn is recorded.
#[test]
fn closed_stdout_is_reported_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let out = with_closed_stdout(ctxbridge(dir.path()).args(["turn", "--session", "p", "hello"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("output was lost"), "{stderr}");
    assert_eq!(
        count(
            &dir.path().join("state.db"),
            "SELECT count(*) FROM transcript"
        ),
        2
    );
}

/// `ctxbridge demo | head -1` and the like: every command that prints says a closed stdout
/// with exit 141 and a line on stderr, never a panic (exit 101).
#[test]
fn every_command_reports_a_closed_stdout() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    // `reset` refuses a session no turn has run on.
    let first = turn(dir.path(), "p", "hello");
    assert!(first.status.success(), "{}", describe(&first));
    for args in [
        vec!["demo", "--turns", "2"],
        vec!["doctor"],
        vec!["doctor", "--json"],
        vec!["reset", "--session", "p"],
    ] {
        let out = with_closed_stdout(ctxbridge(dir.path()).args(&args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains("output was lost"), "{args:?}: {stderr}");
    }
}

/// An empty session key is a usage error (exit 2) for `turn`, `chat` and `compact`, and a
/// blank one (only spaces) alike, with the same message; nothing is stored for either.
#[test]
fn empty_session_key_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["", "   "] {
        for args in [
            vec!["turn", "--session", key, "hi"],
            vec!["chat", "--session", key],
            vec!["compact", "--session", key],
            vec!["reset", "--session", key],
        ] {
            let out = ctxbridge(dir.path()).args(&args).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("a session key must not be empty or blank"),
                "{args:?}: {stderr}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "a refused session key left {left:?} behind"
    );
}

/// `store.path: ""` is a configuration error naming the key; a relative `store.path` in a
/// configuration file lives beside that file, not in the working directory.
#[test]
fn store_path_is_checked_and_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("conf")).unwrap();
    let config = dir.path().join("conf/ctxbridge.json5");
    std::fs::write(&config, r#"{store: {path: ""}}"#).unwrap();
    let out = ctxbridge(dir.path())
        .args([
            "--config",
            "conf/ctxbridge.json5",
            "turn",
            "--session",
            "a",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("store.path"),
        "{}",
        describe(&out)
    );

    std::fs::write(&config, r#"{store: {path: "data/state.db"}}"#).unwrap();
    let out = ctxbridge(dir.path())
        .args([
            "--config",
            "conf/ctxbridge.json5",
            "turn",
            "--session",
            "a",
            "hi",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(dir.path().join("conf/data/state.db").exists());
    assert!(!dir.path().join("data").exists());
}

/// A `chat` line that is not UTF-8 is reported and skipped; the lines after it still run, and
/// the exit code (1) says something went wrong.
#[test]
fn chat_skips_a_line_that_is_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let mut child = ctxbridge(dir.path())
        .args(["chat", "--session", "c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"first line\n\xff\xfe bad\nthird line\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(stdout.contains("line 2 skipped"), "{stdout}");
    assert_eq!(
        count(
            &dir.path().join("state.db"),
            "SELECT count(*) FROM transcript"
        ),
        4,
        "both valid lines ran as turns"
    );
}

fn doctor(dir: &Path) -> (Option<i32>, String) {
    let out = ctxbridge(dir).arg("doctor").output().unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `doctor` fails (exit 1) when the configured Codex program does not exist or the Responses
/// `apiKeyEnv` variable is unset: both would fail every turn.
#[test]
fn doctor_reports_an_unusable_backend() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({"backend": {"kind": "codex", "command": ["/nonexistent/codex", "app-server"]}}),
    );
    let (code, text) = doctor(dir.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("was not found"), "{text}");
    assert!(!text.contains("status: ok"), "{text}");

    write_config(
        dir.path(),
        &json!({"backend": {
            "kind": "responses",
            "baseUrl": "http://127.0.0.1:9/v1",
            "model": "m",
            "apiKeyEnv": "CTXBRIDGE_TEST_SURELY_UNSET_KEY"
        }}),
    );
    let (code, text) = doctor(dir.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("CTXBRIDGE_TEST_SURELY_UNSET_KEY (backend.apiKeyEnv) is not set"),
        "{text}"
    );
}

/// A store locked by another process is reported as busy and not damaged: doctor does not
/// advise moving it away.
#[test]
fn doctor_does_not_advise_abandoning_a_locked_store() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let first = turn(dir.path(), "d", "hello");
    assert!(first.status.success(), "{}", describe(&first));
    let holder = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let (code, text) = doctor(dir.path());
    holder.execute_batch("COMMIT").unwrap();
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("locked by another process"), "{text}");
    assert!(text.contains("not damaged"), "{text}");
    assert!(!text.contains("move it away"), "{text}");
}

/// `chat --help` says what its exit code means: 1 when a line was skipped (as a failed turn),
/// although the session went on.
#[test]
fn chat_help_documents_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = ctxbridge(dir.path())
        .args(["chat", "--help"])
        .output()
        .unwrap();
    // The help is wrapped to the terminal: compared with its lines joined.
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        help.contains("Exits 0 when every line went through"),
        "{help}"
    );
    assert!(help.contains("a line was skipped"), "{help}");
}

/// A `turn --json` that fails still prints one JSON object on stdout, `{"error": {kind,
/// message, session}}`, and keeps its exit code (here a configuration error: 2).
#[test]
fn a_failed_json_turn_prints_its_error_as_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.json5"),
        "{ agent: { tokenBudgte: 1 } }",
    )
    .unwrap();
    let out = ctxbridge(dir.path())
        .args([
            "--config",
            "bad.json5",
            "turn",
            "--session",
            "s",
            "--json",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["error"]["kind"], "config", "{report}");
    assert_eq!(report["error"]["session"], "s", "{report}");
    let message = report["error"]["message"].as_str().unwrap();
    assert!(message.contains("agent.tokenBudgte"), "{report}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("agent.tokenBudgte"));
}
