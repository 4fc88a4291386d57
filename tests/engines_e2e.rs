//! Out-of-process engines end to end through the built `ctxbridge` binary (issue 6; docs/architecture.md#selection-fault-isolation-and-quarantine,
//! §5, §13, §14, §15).
//!
//! Every test works in a temporary directory holding a `ctxbridge.json5` and the state store
//! (mock backend), and runs `ctxbridge` as a new process per command, as a user would: state
//! carries over between invocations only through the store (and the engine's own files).
//!
//! The configurations of the Python example engine and of the Node-hosted OpenClaw sample plugin
//! are read from their READMEs (the first `json5` block, with `examples/…` and `hosts/…` paths
//! made absolute), so the documented configuration is the tested one.
//!
//! Python 3 and Node are needed; a test whose tool is missing says so on stderr and passes
//! without running (CI has both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const QUARANTINE_SUFFIX: &str = "; quarantined for this process, falling back to \"legacy\"";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> String {
    repo()
        .join("tests/fixtures/engines")
        .join(name)
        .display()
        .to_string()
}

/// True when `tool --version` runs; otherwise says loudly that `test` is skipped.
fn have(tool: &str, test: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "SKIPPED {test}: `{tool}` is not on PATH (tests/engines_e2e.rs needs python3 and node)"
        );
    }
    found
}

/// The first ```json5 block of an example's or a host's README, parsed, with every command
/// argument that starts with `examples/` or `hosts/` made absolute (the tests run in a
/// temporary directory).
fn readme_config(readme: &str) -> Value {
    let text = std::fs::read_to_string(repo().join(readme)).unwrap();
    let start = text.find("```json5\n").expect("README has a json5 block") + "```json5\n".len();
    let len = text[start..].find("```").unwrap();
    let mut config: Value = json5::from_str(&text[start..start + len]).unwrap();
    for entry in config["plugins"]["entries"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        for arg in entry["command"].as_array_mut().unwrap() {
            let s = arg.as_str().unwrap();
            if s.starts_with("examples/") || s.starts_with("hosts/") {
                *arg = Value::String(repo().join(s).display().to_string());
            }
        }
    }
    config
}

/// The Python example's documented configuration.
fn python_config() -> Value {
    readme_config("examples/python-engine/README.md")
}

/// The Node-hosted sample plugin's documented configuration.
fn node_config() -> Value {
    readme_config("hosts/openclaw-node/README.md")
}

/// A configuration selecting `tests/fixtures/engines/broken_engine.py MODE` under the id the
/// fixture reports (`broken-MODE`).
fn broken_config(mode: &str, timeout_ms: Option<u64>) -> Value {
    let id = format!("broken-{mode}");
    let mut entry = json!({ "command": ["python3", fixture("broken_engine.py"), mode] });
    if let Some(ms) = timeout_ms {
        entry["timeoutMs"] = json!(ms);
    }
    json!({
        "plugins": { "slots": { "contextEngine": id }, "entries": { id.clone(): entry } },
        "backend": { "kind": "mock" },
        "store": { "path": ".ctxbridge/state.db" },
    })
}

/// The single selected entry of `config`.
fn selected_entry(config: &mut Value) -> &mut Value {
    let id = config["plugins"]["slots"]["contextEngine"]
        .as_str()
        .unwrap()
        .to_string();
    &mut config["plugins"]["entries"][id]
}

/// Prefixes the selected engine's command with `exec_with_pid.py PID_FILE`, which records the
/// pid of the engine process (the command then replaces it, keeping the pid).
fn record_engine_pid(config: &mut Value, pid_file: &Path) {
    let entry = selected_entry(config);
    let mut command = vec![
        json!("python3"),
        json!(fixture("exec_with_pid.py")),
        json!(pid_file.display().to_string()),
    ];
    command.extend(entry["command"].as_array().unwrap().iter().cloned());
    entry["command"] = Value::Array(command);
}

/// A working directory with a `ctxbridge.json5`.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new(config: &Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ctxbridge.json5"),
            serde_json::to_string_pretty(config).unwrap(),
        )
        .unwrap();
        Workspace { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
            .args(args)
            .current_dir(self.path())
            .env_remove("CTXBRIDGE_LOG")
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    }

    /// `ctxbridge turn --session SESSION --json PROMPT`: must exit 0; returns the JSON object
    /// and stderr.
    fn turn(&self, session: &str, prompt: &str) -> (Value, String) {
        let out = self.run(&["turn", "--session", session, "--json", prompt]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "turn failed: {err}");
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("turn --json printed no JSON ({e}): {}", stdout(&out)));
        (report, err)
    }

    /// `ctxbridge doctor`: returns exit code and stdout.
    fn doctor(&self) -> (i32, String) {
        let out = self.run(&["doctor"]);
        (out.status.code().unwrap(), stdout(&out))
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The stderr lines that announce a quarantine.
fn quarantine_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("quarantined for this process"))
        .collect()
}

/// Field `key` of every report, as strings (null → "null").
fn column(reports: &[Value], key: &str) -> Vec<String> {
    reports
        .iter()
        .map(|r| match &r[key] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// Where process `pid` stands: `None` when it no longer exists, else its /proc state line.
fn process_state(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(
        status
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or("State: ?")
            .to_string(),
    )
}

fn recorded_pid(pid_file: &Path) -> u32 {
    std::fs::read_to_string(pid_file)
        .unwrap_or_else(|e| panic!("engine pid not recorded in {}: {e}", pid_file.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Asserts the doctor report of a selected, healthy out-of-process engine.
fn assert_doctor_selects(ws: &Workspace, id: &str) {
    let (code, text) = ws.doctor();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.starts_with(&format!("context engine: {id} (configured)\nhost: ")),
        "{text}"
    );
    assert!(!text.contains("running: legacy"), "{text}");
    assert!(text.contains("\nquarantined engines: none\n"), "{text}");
    assert!(
        text.contains("\nquarantines seen in earlier runs: none ("),
        "{text}"
    );
    assert!(text.ends_with("status: ok\n"), "{text}");
}

/// The Python engine runs three turns of one session in three processes: the first projects
/// its thread_bootstrap context onto a new thread, the next two reuse that thread with the bare
/// prompt; doctor shows it selected (`configured`) and able to run.
#[test]
fn python_engine_three_turns_across_processes() {
    if !have("python3", "python_engine_three_turns_across_processes") {
        return;
    }
    let ws = Workspace::new(&python_config());
    let mut reports = Vec::new();
    for prompt in ["first question", "second question", "third question"] {
        let (report, err) = ws.turn("trip", prompt);
        assert!(quarantine_lines(&err).is_empty(), "{err}");
        assert_eq!(
            report["reply"].as_str().unwrap(),
            format!("mock reply {} to: {prompt}", reports.len() + 1)
        );
        reports.push(report);
    }
    assert_eq!(column(&reports, "engineId"), ["python-engine"; 3]);
    assert_eq!(column(&reports, "mode"), ["thread_bootstrap"; 3]);
    assert_eq!(column(&reports, "epoch"), ["epoch-1"; 3]);
    assert_eq!(
        column(&reports, "reason"),
        [
            "missing-thread-binding",
            "matching-thread-bootstrap-binding",
            "matching-thread-bootstrap-binding"
        ]
    );
    assert_eq!(column(&reports, "projected"), ["true", "false", "false"]);
    assert_eq!(
        column(&reports, "threadAction"),
        ["started", "resumed", "resumed"]
    );
    let threads = column(&reports, "threadId");
    assert!(threads.iter().all(|t| t == &threads[0]), "{threads:?}");
    // A reused thread gets the bare prompt.
    assert_eq!(reports[2]["promptChars"], json!("third question".len()));
    assert!(ws.path().join(".ctxbridge/state.db").exists());
    assert_doctor_selects(&ws, "python-engine");
}

/// `ctxbridge compact` with the Python engine (which owns compaction) compacts the engine's
/// own state and moves it to the next epoch; the next turn, in a new process, rotates to a fresh
/// thread with the new projection (`projection-mismatch`).
#[test]
fn python_engine_compaction_rotates_the_thread() {
    if !have("python3", "python_engine_compaction_rotates_the_thread") {
        return;
    }
    let ws = Workspace::new(&python_config());
    let mut last = Value::Null;
    for prompt in ["one", "two", "three"] {
        last = ws.turn("s", prompt).0;
    }
    assert_eq!(last["epoch"], "epoch-1");

    let out = ws.run(&["compact", "--session", "s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let compact: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compact["engineId"], "python-engine");
    assert_eq!(compact["nativeCompaction"], false);
    assert_eq!(compact["result"]["compacted"], true, "{compact}");
    assert_eq!(compact["result"]["result"]["details"]["epoch"], "epoch-2");

    let (next, err) = ws.turn("s", "four");
    assert!(quarantine_lines(&err).is_empty(), "{err}");
    assert_eq!(next["engineId"], "python-engine");
    assert_eq!(next["epoch"], "epoch-2");
    assert_eq!(next["reason"], "projection-mismatch");
    assert_eq!(next["threadAction"], "rotated");
    assert_eq!(next["projected"], true);
    assert_ne!(next["threadId"], last["threadId"]);
}

/// The OpenClaw sample plugin, served by the Node host, runs three turns of one session in
/// three processes with the same epoch sequence, and its developer instructions stay unchanged
/// within the epoch; doctor shows it selected and able to run.
#[test]
fn node_hosted_plugin_three_turns_across_processes() {
    if !have("node", "node_hosted_plugin_three_turns_across_processes") {
        return;
    }
    let ws = Workspace::new(&node_config());
    let mut reports = Vec::new();
    for prompt in ["hello", "what did I say?", "and before that?"] {
        let (report, err) = ws.turn("demo", prompt);
        assert!(quarantine_lines(&err).is_empty(), "{err}");
        reports.push(report);
    }
    assert_eq!(column(&reports, "engineId"), ["recent-window"; 3]);
    assert_eq!(column(&reports, "mode"), ["thread_bootstrap"; 3]);
    assert_eq!(column(&reports, "epoch"), ["window-0"; 3]);
    assert_eq!(
        column(&reports, "reason"),
        [
            "missing-thread-binding",
            "matching-thread-bootstrap-binding",
            "matching-thread-bootstrap-binding"
        ]
    );
    assert_eq!(column(&reports, "projected"), ["true", "false", "false"]);
    assert_eq!(
        column(&reports, "threadAction"),
        ["started", "resumed", "resumed"]
    );
    assert_eq!(
        column(&reports, "developerInstructionsDelivery"),
        ["thread-start", "unchanged", "unchanged"]
    );
    assert_eq!(reports[2]["reply"], "mock reply 3 to: and before that?");
    assert_doctor_selects(&ws, "recent-window");
}

/// Manual compaction in a new process with an engine that does not own compaction (it
/// delegates to the runtime, i.e. the backend's native compaction) reaches the session's
/// backend thread, and the engine is not quarantined.
#[test]
fn non_owning_engine_compaction_in_a_new_process() {
    if !have("node", "non_owning_engine_compaction_in_a_new_process") {
        return;
    }
    let ws = Workspace::new(&node_config());
    ws.turn("s", "one");
    ws.turn("s", "two");
    let out = ws.run(&["compact", "--session", "s", "--json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(quarantine_lines(&err).is_empty(), "{err}");
    let compact: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compact["engineId"], "recent-window");
    assert_eq!(compact["nativeCompaction"], true, "{compact}");
}

/// One failure kind through the binary: the turn completes on legacy (exit 0, a reply,
/// `engineId: "legacy"`), stderr carries exactly one quarantine line naming the engine, the
/// operation and a reason containing `reason_part`; afterwards doctor shows that quarantine as
/// seen in an earlier run, with the same operation and reason, and still exits 0.
fn assert_fault_falls_back(
    mode: &str,
    timeout_ms: Option<u64>,
    operation: &str,
    reason_part: &str,
) {
    let test = format!("fault {mode}");
    if !have("python3", &test) {
        return;
    }
    let id = format!("broken-{mode}");
    let ws = Workspace::new(&broken_config(mode, timeout_ms));
    let (report, err) = ws.turn("s", "are you there?");
    assert_eq!(report["engineId"], "legacy", "{report}");
    assert_eq!(report["mode"], "none");
    assert_eq!(report["reason"], "legacy-engine");
    assert_eq!(report["reply"], "mock reply 1 to: are you there?");

    let lines = quarantine_lines(&err);
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one quarantine line:\n{err}"
    );
    let prefix = format!("context engine \"{id}\" failed during {operation}: ");
    let start = lines[0]
        .find(&prefix)
        .unwrap_or_else(|| panic!("wrong engine or operation in: {}", lines[0]));
    let rest = &lines[0][start + prefix.len()..];
    let reason = rest
        .strip_suffix(QUARANTINE_SUFFIX)
        .unwrap_or_else(|| panic!("line does not end with the fallback note: {}", lines[0]));
    assert!(
        reason.contains(reason_part),
        "reason {reason:?} lacks {reason_part:?}"
    );

    // Doctor tells the truth about the degraded engine: exit 1, the quarantine, and legacy
    // serving instead; a failure to start or load is labelled as a load failure.
    let (code, text) = ws.doctor();
    assert_eq!(code, 1, "{text}");
    assert!(
        text.starts_with(&format!("context engine: {id} (configured)\n")),
        "{text}"
    );
    let label = if operation == "factory" {
        "failed to load (factory)".to_string()
    } else {
        format!("failed during {operation}")
    };
    assert!(
        text.contains(&format!(
            "quarantines seen in earlier runs (.ctxbridge/state.db):\n  {id}: {label}: {reason} (recorded "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "status: degraded: context engine \"{id}\" is quarantined ("
        )),
        "{text}"
    );
    assert!(text.contains(&format!("{label}: ")), "{text}");
    assert!(text.ends_with("; \"legacy\" serves instead\n"), "{text}");
    assert!(!text.contains("status: ok"), "{text}");
}

/// An engine that exits before answering `initialize` is quarantined during `factory`.
#[test]
fn fault_crash_on_start() {
    assert_fault_falls_back("crash_on_start", None, "factory", "exit status: 3");
}

/// An engine that never answers `initialize` is quarantined during `factory` after its
/// per-call timeout.
#[test]
fn fault_never_answers_initialize() {
    assert_fault_falls_back(
        "no_initialize",
        Some(1_000),
        "factory",
        "timed out after 1000ms",
    );
}

/// An engine that exits in the middle of `assemble` is quarantined during `assemble`.
#[test]
fn fault_crash_mid_call() {
    assert_fault_falls_back("crash_mid_call", None, "assemble", "exit status: 7");
}

/// An engine that never answers `assemble` is quarantined during `assemble` after its per-call
/// timeout.
#[test]
fn fault_hang() {
    assert_fault_falls_back("hang", Some(2_000), "assemble", "timed out after 2000ms");
}

/// An engine that writes a line that is not JSON is quarantined during `assemble`.
#[test]
fn fault_malformed_json() {
    assert_fault_falls_back("garbage", None, "assemble", "not JSON");
}

/// An engine whose `assemble` result has the wrong shape is quarantined during `assemble`.
#[test]
fn fault_wrong_result_shape() {
    assert_fault_falls_back("wrong_shape", None, "assemble", "malformed result");
}

/// An engine that answers `assemble` with a JSON-RPC error is quarantined during `assemble`.
#[test]
fn fault_error_reply() {
    assert_fault_falls_back("error_reply", None, "assemble", "engine exploded");
}

/// The keys of the params of every call of `method` recorded by `recording_engine.py`.
fn recorded_keys(log: &Path, method: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["method"] == method)
        .map(|v| {
            v["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// Host params the Python engine does not list in `acceptedHostParams` (`["sessionKey",
/// "prompt"]`) are absent from the JSON it receives through `ctxbridge turn`: no
/// `runtimeSettings`, `runtimeContext` or `sessionTarget` in any call, while `prompt` and the
/// non-host keys arrive; without the declaration the same engine gets them.
#[test]
fn unaccepted_host_params_are_absent_from_the_engine_json() {
    if !have(
        "python3",
        "unaccepted_host_params_are_absent_from_the_engine_json",
    ) {
        return;
    }
    let run = |declare: bool| {
        let mut config = python_config();
        let entry = selected_entry(&mut config);
        entry["command"] = json!(["python3", fixture("recording_engine.py")]);
        // Relative to the engine's working directory, which is ctxbridge's (the workspace).
        entry["config"]["recordParamsTo"] = json!("params.jsonl");
        entry["config"]["declareAcceptedHostParams"] = json!(declare);
        let ws = Workspace::new(&config);
        let (report, err) = ws.turn("s", "hello");
        assert_eq!(report["engineId"], "python-engine", "{err}");
        let log = ws.path().join("params.jsonl");
        (ws, log)
    };

    let (_ws, log) = run(true);
    let assemble = recorded_keys(&log, "assemble");
    assert_eq!(assemble.len(), 1, "one assemble per turn");
    for key in ["prompt", "sessionKey", "sessionId", "messages"] {
        assert!(
            assemble[0].iter().any(|k| k == key),
            "{key} missing: {assemble:?}"
        );
    }
    for method in ["assemble", "bootstrap", "maintain", "commitTurn"] {
        let calls = recorded_keys(&log, method);
        assert!(!calls.is_empty(), "{method} was not called");
        for keys in calls {
            for host_key in ["runtimeSettings", "runtimeContext", "sessionTarget"] {
                assert!(
                    !keys.iter().any(|k| k == host_key),
                    "{method} received unaccepted {host_key}: {keys:?}"
                );
            }
        }
    }

    let (_ws, log) = run(false);
    let assemble = recorded_keys(&log, "assemble");
    for key in ["prompt", "runtimeSettings", "runtimeContext"] {
        assert!(
            assemble[0].iter().any(|k| k == key),
            "without acceptedHostParams {key} should arrive: {assemble:?}"
        );
    }
}

/// After `ctxbridge turn` and `ctxbridge doctor` exit, the engine process they spawned — the
/// Python engine, and the Node host of the sample plugin — is gone: reaped by ctxbridge, neither
/// a zombie nor an orphan still running.
#[test]
fn engine_child_is_gone_after_ctxbridge_exits() {
    let mut cases = Vec::new();
    if have(
        "python3",
        "engine_child_is_gone_after_ctxbridge_exits (python)",
    ) {
        cases.push(python_config());
    }
    if have("node", "engine_child_is_gone_after_ctxbridge_exits (node)")
        && have(
            "python3",
            "engine_child_is_gone_after_ctxbridge_exits (node)",
        )
    {
        cases.push(node_config());
    }
    for mut config in cases {
        let pid_dir = tempfile::tempdir().unwrap();
        let pid_file = pid_dir.path().join("engine.pid");
        record_engine_pid(&mut config, &pid_file);
        let ws = Workspace::new(&config);
        for command in ["turn", "doctor"] {
            let _ = std::fs::remove_file(&pid_file);
            if command == "turn" {
                let (report, _) = ws.turn("s", "hello");
                assert_ne!(report["engineId"], "legacy", "{report}");
            } else {
                assert_eq!(ws.doctor().0, 0);
            }
            let pid = recorded_pid(&pid_file);
            assert_eq!(
                process_state(pid),
                None,
                "engine process {pid} still exists after `ctxbridge {command}` exited"
            );
        }
    }
}

/// After a quarantine that leaves the engine process alive (it answered with a JSON-RPC error
/// or the wrong shape), ctxbridge still reaps it before exiting.
#[test]
fn quarantined_engine_child_is_reaped_before_exit() {
    if !have("python3", "quarantined_engine_child_is_reaped_before_exit") {
        return;
    }
    for mode in ["error_reply", "wrong_shape"] {
        let pid_dir = tempfile::tempdir().unwrap();
        let pid_file = pid_dir.path().join("engine.pid");
        let mut config = broken_config(mode, None);
        record_engine_pid(&mut config, &pid_file);
        let ws = Workspace::new(&config);
        let (report, _) = ws.turn("s", "hello");
        assert_eq!(report["engineId"], "legacy");
        let pid = recorded_pid(&pid_file);
        assert_eq!(
            process_state(pid),
            None,
            "{mode}: quarantined engine process {pid} not reaped when ctxbridge exited"
        );
    }
}

/// A quarantined engine that ignores its stdin closing and SIGTERM is not left running once
/// `ctxbridge turn` has exited (no orphans): ctxbridge kills it. (Whether it is also reaped is
/// `quarantined_engine_child_is_reaped_before_exit`.)
#[test]
fn quarantined_stubborn_engine_is_not_left_running() {
    if !have("python3", "quarantined_stubborn_engine_is_not_left_running") {
        return;
    }
    let pid_dir = tempfile::tempdir().unwrap();
    let pid_file = pid_dir.path().join("engine.pid");
    let mut config = json!({
        "plugins": {
            "slots": { "contextEngine": "stubborn" },
            "entries": { "stubborn": { "command": ["python3", fixture("stubborn_engine.py"), "30"] } },
        },
        "backend": { "kind": "mock" },
        "store": { "path": ".ctxbridge/state.db" },
    });
    record_engine_pid(&mut config, &pid_file);
    let ws = Workspace::new(&config);
    let (report, err) = ws.turn("s", "hello");
    assert_eq!(report["engineId"], "legacy");
    assert_eq!(quarantine_lines(&err).len(), 1, "{err}");
    let pid = recorded_pid(&pid_file);
    // A SIGKILLed process may still be on its way out when ctxbridge exits; left alone it would
    // run for 30 s. Wait (bounded) until it is gone or a zombie.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut state = process_state(pid);
    while state.as_deref().is_some_and(|s| !s.contains("zombie"))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
        state = process_state(pid);
    }
    assert!(
        state.as_deref().map_or(true, |s| s.contains("zombie")),
        "engine process {pid} still running after ctxbridge exited: {state:?}"
    );
}

/// A no-op `compact` by an engine that does not own compaction is noted by the harness in the
/// store, and a later `doctor` shows the note as a warning (exit 0).
#[test]
fn doctor_shows_the_no_op_compact_note_of_an_earlier_run() {
    if !have(
        "python3",
        "doctor_shows_the_no_op_compact_note_of_an_earlier_run",
    ) {
        return;
    }
    // broken_engine.py in `echo_keys` mode answers compact with {ok: true, compacted: false}.
    let ws = Workspace::new(&broken_config("echo_keys", None));
    // `compact` refuses a session no turn has run on.
    let out = ws.run(&["turn", "--session", "s", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = ws.run(&["compact", "--session", "s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, text) = ws.doctor();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("\nwarning: context engine \"broken-echo_keys\" does not own compaction but its compact was a no-op"),
        "{text}"
    );
    assert!(text.ends_with("status: ok\n"), "{text}");
}

/// Doctor never creates the state store: on a fresh directory it reports that there is none yet
/// and leaves no file behind.
#[test]
fn doctor_does_not_create_the_store() {
    let ws = Workspace::new(
        &json!({ "backend": { "kind": "mock" }, "store": { "path": ".ctxbridge/state.db" } }),
    );
    let (code, text) = ws.doctor();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "quarantines seen in earlier runs: none (no state store at .ctxbridge/state.db yet)\n"
        ),
        "{text}"
    );
    assert!(!ws.path().join(".ctxbridge").exists());
}

/// A corrupt state store: doctor still prints its report, names the file and the problem, and
/// exits 1; the file is left as it was.
#[test]
fn doctor_reports_a_corrupt_store_and_fails() {
    let ws =
        Workspace::new(&json!({ "backend": { "kind": "mock" }, "store": { "path": "state.db" } }));
    let garbage = "this file is not a SQLite database but it is long enough to look like one";
    std::fs::write(ws.path().join("state.db"), garbage).unwrap();
    let (code, text) = ws.doctor();
    assert_eq!(code, 1, "{text}");
    assert!(
        text.starts_with("context engine: legacy (default)\n"),
        "{text}"
    );
    assert!(
        text.contains("\nunusable state store: state store state.db is corrupt"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "status: the state store cannot be used; fix it or move it away before running turns\n"
        ),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("state.db")).unwrap(),
        garbage
    );
}
