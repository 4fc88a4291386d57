//! The built `ctxbridge` binary: `doctor` reports and configuration errors with their exit codes
//! (SPEC §14, §15).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `ctxbridge args…` in `dir` (so no stray ./ctxbridge.json5 is picked up).
fn ctxbridge(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(args)
        .current_dir(dir)
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

/// Without any config file, doctor reports legacy selected by default and exits 0.
#[test]
fn doctor_without_config_reports_legacy_default() {
    let dir = tempfile::tempdir().unwrap();
    let out = ctxbridge(dir.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("context engine: legacy (default)"), "{text}");
    assert!(text.contains("quarantined engines: none"), "{text}");
}

/// An empty config file (and the default file in the working directory) means the defaults.
#[test]
fn doctor_on_empty_config_reports_legacy_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "empty.json5", "// nothing configured\n{}\n");
    let out = ctxbridge(dir.path(), &["--config", &path, "doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("context engine: legacy (default)"));

    write(
        dir.path(),
        "ctxbridge.json5",
        "{ backend: { kind: 'codex' } }",
    );
    let out = ctxbridge(dir.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("host: the Codex app-server"),
        "{}",
        stdout(&out)
    );
}

/// An unknown engine id is quarantined during resolve ("not registered"), logged once at error
/// level, and legacy runs (exit 0).
#[test]
fn unknown_engine_is_shown_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ plugins: { slots: { contextEngine: 'my-engine' } } }",
    );
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("context engine: my-engine (configured)"),
        "{text}"
    );
    assert!(text.contains("running: legacy"), "{text}");
    assert!(
        text.contains("  my-engine: failed during resolve: not registered"),
        "{text}"
    );
    let log = stderr(&out);
    assert_eq!(
        log.matches("context engine \"my-engine\" failed during resolve: not registered; quarantined for this process, falling back to \"legacy\"").count(),
        1,
        "{log}"
    );
}

/// A disabled engine is not a failure: legacy runs, nothing is quarantined.
#[test]
fn disabled_engine_is_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ plugins: { slots: { contextEngine: 'my-engine' }, entries: { 'my-engine': { enabled: false } } } }",
    );
    let out = ctxbridge(dir.path(), &["--config", &path, "doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("disabled by plugins.entries.my-engine.enabled = false"),
        "{text}"
    );
    assert!(text.contains("quarantined engines: none"), "{text}");
}

/// Text that is not JSON5 exits 2 with file:line:column.
#[test]
fn bad_json5_exits_2_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "bad.json5",
        "{\n  agent: {\n    id: 'main',,\n  },\n}\n",
    );
    let out = ctxbridge(dir.path(), &["--config", &path, "doctor"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("error: bad.json5:3:16: not valid JSON5: "),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

/// A wrong type in the default ./ctxbridge.json5 exits 2 with file:line:column and the key path.
#[test]
fn wrong_type_exits_2_with_key_path() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ctxbridge.json5",
        "{\n  plugins: {\n    slots: { contextEngine: 'my-engine' },\n    entries: { 'my-engine': { enabled: 'yes' } },\n  },\n}\n",
    );
    let out = ctxbridge(dir.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(
            "error: ctxbridge.json5:4:40: plugins.entries.my-engine.enabled: invalid type: string \"yes\", expected a boolean"
        ),
        "{err}"
    );
}

/// An unknown key exits 2 naming it; a missing explicitly given file exits 2 naming the file.
#[test]
fn unknown_key_and_missing_file_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ store: { path: 'x.db', mode: 'wal' } }",
    );
    let out = ctxbridge(dir.path(), &["--config", &path, "doctor"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("error: c.json5:1:26: store.mode: unknown field `mode`"),
        "{}",
        stderr(&out)
    );

    let out = ctxbridge(dir.path(), &["--config", "absent.json5", "doctor"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read config file absent.json5"),
        "{}",
        stderr(&out)
    );
}

/// Usage errors exit 2; --help exits 0.
#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        ctxbridge(dir.path(), &["frobnicate"]).status.code(),
        Some(2)
    );
    assert_eq!(
        ctxbridge(dir.path(), &["doctor", "--bogus"]).status.code(),
        Some(2)
    );
    assert_eq!(ctxbridge(dir.path(), &[]).status.code(), Some(2));
    let help = ctxbridge(dir.path(), &["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("doctor"));
}

/// An engine that rejects its configuration (`-32010` from `initialize`) is a configuration
/// error naming the key: `turn` exits 2 with it and runs nothing, `doctor` lists it and exits 1.
/// A Node-hosted engine's interpreter version is reported by doctor.
#[test]
fn engine_config_error_exits_2_and_doctor_names_the_key() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        eprintln!("SKIPPED: python3 is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engines/tool_engine.py");
    let config = serde_json::json!({
        "plugins": {
            "slots": {"contextEngine": "tooly"},
            "entries": {"tooly": {
                "command": ["python3", script.display().to_string(), "config_error"],
                "config": {"keepRecent": 0},
            }},
        },
        "store": {"path": "state/state.db"},
    });
    write(dir.path(), "ctxbridge.json5", &config.to_string());

    let out = ctxbridge(dir.path(), &["turn", "--session", "s", "hello"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("plugins.entries.tooly.config.keepRecent: must be >= 1"),
        "{err}"
    );
    assert!(
        stdout(&out).trim().is_empty(),
        "no turn ran: {}",
        stdout(&out)
    );

    let out = ctxbridge(dir.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("configuration errors:"), "{text}");
    assert!(
        text.contains("plugins.entries.tooly.config.keepRecent: must be >= 1"),
        "{text}"
    );

    // A Node-hosted entry: doctor runs the interpreter and reports its version.
    let node = std::process::Command::new("node")
        .args(["-p", "process.versions.node"])
        .output();
    if let Some(node) = node.ok().filter(|o| o.status.success()) {
        let version = String::from_utf8_lossy(&node.stdout).trim().to_string();
        let config = serde_json::json!({
            "plugins": {"entries": {"nodey": {
                "enabled": false,
                "command": ["node", "host.mjs", "plugin"],
            }}},
        });
        write(dir.path(), "ctxbridge.json5", &config.to_string());
        let out = ctxbridge(dir.path(), &["doctor"]);
        let text = stdout(&out);
        assert!(
            text.contains(&format!("node for nodey: {version} (node)")),
            "{text}"
        );
    }
}
