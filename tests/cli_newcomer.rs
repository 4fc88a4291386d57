//! What a new user meets at the command line, through the built binary: `help` (also
//! `help --help`), shell completions, the manual page and help lines that fit a terminal;
//! `chat`'s `/help`, its refusal of an unknown `/word` and its Ctrl-C; `reset` and `compact`
//! refusing a session no turn has run on; doctor's problems as one status and as a JSON list;
//! whole token counts written as integers; absent log fields left out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// The binary in `dir`, Codex's home (`CODEX_HOME`) inside it, never the user's.
fn ctxbridge(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxbridge"));
    cmd.current_dir(dir)
        .env("CODEX_HOME", dir.join("codex-home"))
        .env_remove("CTXBRIDGE_CONFIG")
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG");
    cmd
}

fn run(dir: &Path, args: &[&str]) -> Output {
    ctxbridge(dir).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write_config(dir: &Path, config: &Value) {
    std::fs::write(
        dir.join("ctxbridge.json5"),
        serde_json::to_string_pretty(config).unwrap(),
    )
    .unwrap();
}

/// Rows of `sql` (one integer column) in the store at `db`.
fn count(db: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The subcommands `ctxbridge --help` lists.
fn subcommands(dir: &Path) -> Vec<String> {
    let help = stdout(&run(dir, &["--help"]));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// `ctxbridge help` is a subcommand like the others: `help --help` works, `help doctor`
/// prints doctor's long help, and an unknown name is a usage error listing the subcommands.
#[test]
fn help_is_a_command_with_help_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["help", "--help"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("Usage: ctxbridge help"),
        "{}",
        describe(&out)
    );

    let out = run(dir.path(), &["help", "doctor"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("Usage: ctxbridge doctor"),
        "{}",
        describe(&out)
    );
    assert!(
        stdout(&out).contains("Exits 1 when"),
        "the long help: {}",
        describe(&out)
    );

    let out = run(dir.path(), &["help", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no subcommand \"nope\""), "{stderr}");
    assert!(stderr.contains("doctor, turn, chat"), "{stderr}");
}

/// Every line of the help of ctxbridge and of each subcommand, short and long, fits a
/// 100-column terminal.
#[test]
fn help_lines_fit_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let commands = subcommands(dir.path());
    assert!(commands.len() >= 10, "{commands:?}");
    let mut invocations: Vec<Vec<String>> = vec![vec!["-h".into()], vec!["--help".into()]];
    for command in &commands {
        for flag in ["-h", "--help"] {
            invocations.push(vec![command.clone(), flag.into()]);
        }
    }
    for args in invocations {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = ctxbridge(dir.path())
            .env_remove("COLUMNS")
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        for line in stdout(&out).lines() {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: a line of {} characters: {line}",
                line.chars().count()
            );
        }
    }
}

/// `completions SHELL` writes a completion script naming every subcommand; `man` a roff page
/// with a section per subcommand.
#[test]
fn completions_and_the_manual_page_cover_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let commands = subcommands(dir.path());
    for shell in ["bash", "zsh", "fish"] {
        let out = run(dir.path(), &["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", describe(&out));
        let script = stdout(&out);
        for command in &commands {
            assert!(script.contains(command.as_str()), "{shell} lacks {command}");
        }
    }
    assert!(stdout(&run(dir.path(), &["completions", "bash"])).contains("complete -F _ctxbridge"));
    let out = run(dir.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));

    let out = run(dir.path(), &["man"]);
    assert!(out.status.success(), "{}", describe(&out));
    let page = stdout(&out);
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{page}");
    assert!(page.contains(".TH ctxbridge"), "{page}");
    for command in &commands {
        assert!(
            page.contains(&format!("CTXBRIDGE {}", command.to_uppercase())),
            "no section for {command}"
        );
    }
}

/// `chat` reads `/help` as a list of the commands and refuses an unknown `/word` (exit 1 in
/// the end, the session going on); neither reaches the model. `//TEXT` sends `/TEXT`.
#[test]
fn chat_lists_its_commands_and_refuses_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let mut child = ctxbridge(dir.path())
        .args(["chat", "--session", "c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"/help\n/hlep\n//etc is a path\n/quit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    for listed in ["/help", "/compact", "/reset", "/quit", "//TEXT"] {
        assert!(text.contains(listed), "/help lacks {listed}: {text}");
    }
    assert!(
        text.contains("/hlep is no command, and was not sent to the model"),
        "{text}"
    );
    let db = dir.path().join("state.db");
    assert_eq!(
        count(&db, "SELECT count(*) FROM transcript"),
        2,
        "one turn (user and assistant): the escaped line only"
    );
    let first: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT message FROM transcript ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(first.contains("/etc is a path"), "{first}");
}

/// Ctrl-C (SIGINT) while `chat` waits for a line ends it with 130 and a message, not 0.
#[test]
fn chat_interrupted_at_the_prompt_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = ctxbridge(dir.path())
        .args(["chat", "--session", "c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open until the child is gone: closing it would end the chat before the signal.
    let stdin = child.stdin.take().unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(banner.contains("ctxbridge chat"), "{banner}");
    // The handlers are installed before the banner is written.
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    drop(stdin);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("chat interrupted by SIGINT"), "{stderr}");
}

/// `reset` and `compact` of a session no turn has run on fail (exit 1) naming the session and
/// the store, and leave no file behind; on a session with turns they run.
#[test]
fn reset_and_compact_refuse_an_unknown_session() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let turn = run(dir.path(), &["turn", "--session", "known", "hello"]);
    assert!(turn.status.success(), "{}", describe(&turn));
    let before: Vec<_> = walk(dir.path());
    for command in ["reset", "compact"] {
        let out = run(dir.path(), &[command, "--session", "nobody"]);
        assert_eq!(out.status.code(), Some(1), "{command}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{command}: no session \"nobody\" in the state store"
            )),
            "{stderr}"
        );
        assert!(stderr.contains("state.db"), "{stderr}");
    }
    let after: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| !p.ends_with("state.db-wal") && !p.ends_with("state.db-shm"))
        .collect();
    let before: Vec<_> = before
        .into_iter()
        .filter(|p| !p.ends_with("state.db-wal") && !p.ends_with("state.db-shm"))
        .collect();
    assert_eq!(
        before, after,
        "a refused reset or compact left files behind"
    );
    for command in ["compact", "reset"] {
        let out = run(dir.path(), &[command, "--session", "known"]);
        assert!(out.status.success(), "{command}: {}", describe(&out));
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found.sort();
    found
}

/// `compact --json` writes whole token counts as integers (`"tokensBefore":0`, never `0.0`).
#[test]
fn compact_json_writes_whole_token_counts_as_integers() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({"store": {"path": "state.db"}, "plugins": {"slots": {"contextEngine": "sample-summary"}}}),
    );
    for prompt in ["one", "two"] {
        let out = run(dir.path(), &["turn", "--session", "s", prompt]);
        assert!(out.status.success(), "{}", describe(&out));
    }
    let out = run(dir.path(), &["compact", "--session", "s", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    let report: Value = serde_json::from_str(text.trim()).unwrap();
    let tokens = &report["result"]["result"]["tokensBefore"];
    assert!(tokens.is_u64() || tokens.is_i64(), "{text}");
    assert!(!text.contains(".0,") && !text.contains(".0}"), "{text}");
}

/// With several problems doctor prints one `status:` line counting them and lists each;
/// `doctor --json` lists them under `problems` beside `passes: false` (and none when it
/// passes), and names the store's file `location` whether or not it exists.
#[test]
fn doctor_lists_its_problems_under_one_status() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({
            "plugins": {"slots": {"contextEngine": "sample-summary"}},
            "backend": {"kind": "codex", "command": ["/nonexistent/codex", "app-server"]},
            "store": {"path": "state.db"},
        }),
    );
    let holder_dir = dir.path().to_path_buf();
    std::fs::write(holder_dir.join("state.db"), b"this is no database").unwrap();
    let out = run(dir.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = stdout(&out);
    assert_eq!(
        text.matches("status:").count(),
        1,
        "one status line: {text}"
    );
    assert!(text.contains("status: 2 problems:\n"), "{text}");
    assert!(text.contains("  - the backend cannot run turns"), "{text}");
    assert!(
        text.contains("  - the state store cannot be used"),
        "{text}"
    );

    let out = run(dir.path(), &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let report: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["passes"], false);
    let kinds: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["backend", "storeUnusable"], "{report}");

    // Passing: no problems; a store not created yet is named `location` too.
    write_config(dir.path(), &json!({"store": {"path": "fresh.db"}}));
    let out = run(dir.path(), &["doctor", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let report: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["passes"], true);
    assert_eq!(report["problems"], json!([]));
    assert_eq!(report["persisted"]["state"], "noStore");
    assert!(
        report["persisted"]["location"]
            .as_str()
            .unwrap()
            .ends_with("fresh.db"),
        "{report}"
    );
    assert!(report["persisted"].get("path").is_none(), "{report}");
}

/// The projection decision's log event leaves out what the turn did not have (legacy: no
/// epoch, no fingerprint) instead of writing empty strings; an engine's fingerprint shows.
#[test]
fn absent_fields_are_left_out_of_the_projection_event() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &json!({"store": {"path": "state.db"}}));
    let out = ctxbridge(dir.path())
        .env("CTXBRIDGE_LOG", "info")
        .args(["turn", "--session", "l", "hello"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let event = stderr
        .lines()
        .find(|l| l.contains("projection decision"))
        .unwrap_or_else(|| panic!("no projection event: {stderr}"));
    assert!(!event.contains("fingerprint="), "{event}");
    assert!(!event.contains("epoch="), "{event}");
    assert!(!event.contains("=\"\""), "{event}");
    assert!(event.contains("mode="), "{event}");
}

/// A first turn that fails before the backend answers (here a Codex that exits at once)
/// leaves no session behind: no bootstrap mark, no session in doctor's count; the next turn
/// starts the session anew and is recorded.
#[test]
fn a_first_turn_the_backend_never_answered_leaves_no_session() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &json!({
            "store": {"path": "state.db"},
            "plugins": {"slots": {"contextEngine": "sample-summary"}},
            "backend": {"kind": "codex", "command": ["/bin/false"]},
        }),
    );
    let out = run(dir.path(), &["turn", "--session", "gone", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let db = dir.path().join("state.db");
    assert_eq!(count(&db, "SELECT count(*) FROM bootstrapped"), 0);
    assert_eq!(
        count(&db, "SELECT count(*) FROM activity WHERE scope = 's'"),
        0
    );
    assert_eq!(count(&db, "SELECT count(*) FROM transcript"), 0);
    let doctor = stdout(&run(dir.path(), &["doctor"]));
    assert!(doctor.contains("state store: 0 sessions"), "{doctor}");

    write_config(
        dir.path(),
        &json!({
            "store": {"path": "state.db"},
            "plugins": {"slots": {"contextEngine": "sample-summary"}},
        }),
    );
    let out = run(dir.path(), &["turn", "--session", "gone", "hello"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(count(&db, "SELECT count(*) FROM bootstrapped"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM transcript"), 2);
}

/// The README's quick start: its first configuration (the shipped engine on the Codex
/// backend), written as the README says, passes `doctor` with the Codex binary found and its
/// version read (Codex's home here a scratch one, so doctor warns of no login, which is not a
/// failure).
#[test]
fn the_readmes_quick_start_configuration_passes_doctor() {
    let Some(codex) = codex_app_server_client::locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED the_readmes_quick_start_configuration_passes_doctor: no codex binary (run `npm ci` at the repo root) !!!!!!!!\n");
        return;
    };
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("```json5\n").expect("a json5 block") + "```json5\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(
        block.contains("sample-summary") && block.contains("codex"),
        "{block}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ctxbridge.json5"), block).unwrap();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(&codex, bin_dir.join("codex")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = ctxbridge(dir.path())
        .env("PATH", path)
        .arg("doctor")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        text.contains("context engine: sample-summary (configured)"),
        "{text}"
    );
    assert!(text.contains("codex: 0."), "the version was read: {text}");
    assert!(text.ends_with("status: ok\n"), "{text}");
}

/// `plugins.requireDurableTurns: true` reaches the turn: the shipped engine, which does not
/// declare durable turns, is served by legacy (and by itself without the setting).
#[test]
fn require_durable_turns_is_read_from_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    for (required, engine) in [(true, "legacy"), (false, "sample-summary")] {
        write_config(
            dir.path(),
            &json!({
                "store": {"path": "state.db"},
                "plugins": {
                    "slots": {"contextEngine": "sample-summary"},
                    "requireDurableTurns": required,
                },
            }),
        );
        let out = run(dir.path(), &["turn", "--session", "d", "--json", "hello"]);
        assert!(out.status.success(), "{}", describe(&out));
        let report: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(report["engineId"], engine, "required: {required}");
    }
}
