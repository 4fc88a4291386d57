//! The built `ctxbridge` binary: `doctor` reports and configuration errors with their exit codes
//! (docs/config.md#configuration-reference, §15).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxbridge::store::StateStoreExt;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `ctxbridge args…` in `dir` (so no stray ./ctxbridge.json5 is picked up).
/// The binary in `dir`, its logs at the default, and Codex's home (`CODEX_HOME`) inside `dir`,
/// never the user's.
fn ctxbridge(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(args)
        .current_dir(dir)
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .env("CODEX_HOME", dir.join("codex-home"))
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
/// level, and legacy runs: doctor reports the selected engine degraded (exit 1).
#[test]
fn unknown_engine_is_shown_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ plugins: { slots: { contextEngine: 'my-engine' } } }",
    );
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("status: degraded: context engine \"my-engine\" is quarantined (in this run): failed during resolve: not registered; \"legacy\" serves instead\n"),
        "{}",
        stdout(&out)
    );
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
/// A `store.url` that does not parse (a password typed where the URL's `//` should be, or
/// no URL at all) is a configuration error naming the file, line, column and key (exit 2),
/// and the value — which may hold the password — is printed by no command.
#[test]
fn unparsable_postgres_url_is_located_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "postgres:/root:MalSecret1@127.0.0.1:5433/db",
        "not a url TopSecretPW",
    ] {
        let path = write(
            dir.path(),
            "pg.json5",
            &format!("{{\n  store: {{ kind: 'postgres',\n    url: '{url}' }},\n}}\n"),
        );
        for args in [
            vec!["--config", &path, "turn", "--session", "s", "hi"],
            vec!["--config", &path, "doctor"],
            vec!["--config", &path, "doctor", "--json"],
        ] {
            let out = ctxbridge(dir.path(), &args);
            let (text, err) = (stdout(&out), stderr(&out));
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("pg.json5:3:10: store.url"), "{args:?}: {err}");
            for secret in ["MalSecret1", "TopSecretPW"] {
                assert!(
                    !err.contains(secret) && !text.contains(secret),
                    "{args:?}: {err}{text}"
                );
            }
        }
    }
}

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

/// `doctor --json` prints one JSON object with the same facts as the text report: the
/// selection, the host, the state store's row counts and oldest session after two turns, and
/// the configured retention (reported, not run: the rows are still there afterwards).
#[test]
fn doctor_json_reports_store_counts_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ctxbridge.json5",
        r#"{ backend: { kind: "mock" }, store: { retention: "12h" } }"#,
    );
    for prompt in ["first", "second"] {
        let out = ctxbridge(dir.path(), &["turn", "--session", "s1", prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = ctxbridge(dir.path(), &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["selectedId"], "legacy");
    assert_eq!(report["source"], "default");
    assert_eq!(report["passes"], true);
    assert_eq!(report["retentionMs"], 12 * 3_600_000);
    assert_eq!(report["degradation"], serde_json::Value::Null);
    assert_eq!(
        report["codex"],
        serde_json::Value::Null,
        "not the Codex backend"
    );
    let persisted = &report["persisted"];
    assert_eq!(persisted["state"], "read");
    let stats = &persisted["stats"];
    assert_eq!(stats["sessions"], 1, "{report}");
    assert_eq!(stats["bindings"], 1, "{report}");
    assert_eq!(stats["outboxPending"], 0, "{report}");
    assert!(
        stats["transcriptEntries"].as_u64().unwrap() >= 4,
        "{report}"
    );
    assert!(stats["oldestSessionMs"].as_u64().unwrap() > 0, "{report}");

    // The text report says the same, and doctor swept nothing.
    let text = stdout(&ctxbridge(dir.path(), &["doctor"]));
    assert!(
        text.contains("state store: 1 session, 1 binding, "),
        "{text}"
    );
    assert!(text.contains("oldest session: last active 20"), "{text}");
    assert!(
        text.contains("retention: sessions idle longer than 12h are swept"),
        "{text}"
    );
    let again: serde_json::Value =
        serde_json::from_str(&stdout(&ctxbridge(dir.path(), &["doctor", "--json"]))).unwrap();
    assert_eq!(again["persisted"]["stats"], *stats);
}

/// `store.shards` splits the SQLite store by session over that many files: turns of several
/// sessions run on it from the CLI, `doctor --json` adds up the shards' rows, and the shard
/// files sit beside `store.path`. Changing the count, dropping it, an out-of-range count and
/// shards on PostgreSQL are refused with errors naming the key and the file; nothing is lost.
#[test]
fn sharded_store_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "two.json5",
        r#"{ backend: { kind: "mock" }, store: { path: "state/s.db", shards: 2 } }"#,
    );
    let turn = |config: &str, session: &str, prompt: &str| {
        ctxbridge(
            dir.path(),
            &["--config", config, "turn", "--session", session, prompt],
        )
    };
    let sessions = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
    for session in sessions {
        for prompt in ["first", "second"] {
            let out = turn("two.json5", session, prompt);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
    }
    assert!(dir.path().join("state/s.db").exists());
    assert!(dir.path().join("state/s.shard1.db").exists());
    let out = ctxbridge(dir.path(), &["--config", "two.json5", "doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let stats = &report["persisted"]["stats"];
    assert_eq!(stats["sessions"], sessions.len(), "{report}");
    assert_eq!(stats["bindings"], sessions.len(), "{report}");
    // Both files hold some of the sessions.
    for file in ["state/s.db", "state/s.shard1.db"] {
        let conn = rusqlite::Connection::open(dir.path().join(file)).unwrap();
        let bindings: i64 = conn
            .query_row("SELECT count(*) FROM bindings", [], |r| r.get(0))
            .unwrap();
        assert!(bindings > 0, "{file} holds no session");
    }

    let refused = |name: &str, config: &str, needle: &str| {
        write(dir.path(), name, config);
        let out = turn(name, "alpha", "third");
        assert_ne!(out.status.code(), Some(0), "{name}");
        let err = stderr(&out);
        assert!(err.contains(needle), "{name}: {err}");
    };
    refused(
        "three.json5",
        r#"{ backend: { kind: "mock" }, store: { path: "state/s.db", shards: 3 } }"#,
        "created with 2 shards",
    );
    refused(
        "one.json5",
        r#"{ backend: { kind: "mock" }, store: { path: "state/s.db" } }"#,
        "store.shards: 2",
    );
    refused(
        "zero.json5",
        r#"{ backend: { kind: "mock" }, store: { path: "state/s.db", shards: 0 } }"#,
        "store.shards is 0",
    );
    refused(
        "pg.json5",
        r#"{ backend: { kind: "mock" }, store: { kind: "postgres", url: "postgres://u@127.0.0.1:1/x", shards: 2 } }"#,
        "store.shards applies to the SQLite store only",
    );
    // Nothing was lost: the session continues with the right count.
    let out = turn("two.json5", "alpha", "third");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = ctxbridge(dir.path(), &["--config", "two.json5", "doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["persisted"]["stats"]["transcriptEntries"],
        sessions.len() * 4 + 2,
        "{report}"
    );
}

/// `store.retention` accepts durations and "off"; anything else is a configuration error
/// naming the key.
#[test]
fn retention_values() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "off.json5",
        r#"{ store: { retention: "off" } }"#,
    );
    let out = ctxbridge(dir.path(), &["--config", "off.json5", "doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["retentionMs"], serde_json::Value::Null);

    write(
        dir.path(),
        "bad.json5",
        r#"{ store: { retention: "soon" } }"#,
    );
    let out = ctxbridge(dir.path(), &["--config", "bad.json5", "doctor"]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("store.retention: \"soon\" is not a duration"),
        "{err}"
    );
    assert_eq!(err.matches("store.retention").count(), 1, "{err}");
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

/// Issue 13.6: a quarantine of the selected engine recorded by an earlier run (and not
/// cleared) makes doctor report `status: degraded` with the quarantine's operation and error
/// and what serves instead, and exit 1 — although the engine itself loads fine now.
#[test]
fn an_earlier_runs_quarantine_degrades_the_selected_engine() {
    use ctxbridge::contract::EngineMethod;
    use ctxbridge::quarantine::FailedOperation;
    use ctxbridge::store::{QuarantineRecord, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ plugins: { slots: { contextEngine: 'sample-summary' } }, store: { path: 'state.db' } }",
    );
    let store = SqliteStore::open(dir.path().join("state.db")).unwrap();
    store
        .record_quarantine(&QuarantineRecord {
            engine_id: "sample-summary".into(),
            operation: FailedOperation::Method(EngineMethod::Assemble),
            reason: "assemble failed: out of cheese".into(),
            at_ms: 1_700_000_000_000,
        })
        .unwrap();
    drop(store);
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(!text.contains("status: ok"), "{text}");
    assert!(text.contains("\nquarantined engines: none\n"), "{text}");
    assert!(
        text.ends_with("status: degraded: context engine \"sample-summary\" is quarantined (recorded by an earlier run at 2023-11-14T22:13:20Z): failed during assemble: assemble failed: out of cheese; \"legacy\" serves instead\n"),
        "{text}"
    );
    // Once cleared, the engine is healthy again.
    SqliteStore::open(dir.path().join("state.db"))
        .unwrap()
        .clear_quarantine("sample-summary")
        .unwrap();
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).ends_with("status: ok\n"), "{}", stdout(&out));
}

/// Issue 13.6: an engine process whose plugin fails to load (its `initialize` answers an
/// error) is labelled a load failure with the host's reason, not "failed during factory: info
/// failed"; the selected engine is degraded (exit 1).
#[test]
fn a_plugin_that_fails_to_load_is_labelled_as_such() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("\n!!!!!!!! SKIPPED: no python3 !!!!!!!!\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"import sys, json
request = json.loads(sys.stdin.readline())
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32010, "message": "invalid config for plugin \"p\": depth: must be a number"}}), flush=True)
sys.stdin.read()
"#;
    std::fs::write(dir.path().join("host.py"), script).unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ plugins: { slots: { contextEngine: 'p' }, entries: { p: { command: ['python3', 'host.py'] } } } }",
    );
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains("  p: failed to load (factory): the engine process could not load or register the plugin (initialize failed): invalid config for plugin \"p\": depth: must be a number (JSON-RPC error -32010)\n"),
        "{text}"
    );
    assert!(!text.contains("info failed"), "{text}");
    // Two problems (the degradation and the configuration error) under one status line.
    assert!(text.contains("status: 2 problems:\n"), "{text}");
    assert!(text.contains("\n  - degraded: context engine \"p\" is quarantined (in this run): failed to load (factory): "), "{text}");
}

/// Doctor names the Codex home (from `CODEX_HOME`, else `~/.codex`, unless
/// `backend.codexHome`), whether it holds a login, and the binary it starts; a home without
/// a login is a warning, not a failure.
#[test]
fn doctor_names_the_codex_home_its_login_and_binary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctxbridge.json5"),
        "{ backend: { kind: 'codex', command: ['/nonexistent/codex', 'app-server'] } }",
    )
    .unwrap();
    let run = |envs: &[(&str, &Path)], json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ctxbridge"));
        command
            .arg("doctor")
            .current_dir(dir.path())
            .env_remove("CTXBRIDGE_LOG")
            .env_remove("RUST_LOG")
            .env_remove("CODEX_HOME");
        if json {
            command.arg("--json");
        }
        for (key, value) in envs {
            command.env(key, value);
        }
        String::from_utf8(command.output().unwrap().stdout).unwrap()
    };
    let env_home = dir.path().join("from-env");
    std::fs::create_dir_all(&env_home).unwrap();
    std::fs::write(env_home.join("auth.json"), "{}").unwrap();
    let text = run(&[("CODEX_HOME", &env_home)], false);
    assert!(
        text.contains(&format!(
            "\ncodex home: {} (from CODEX_HOME; logged in)\n",
            env_home.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("\ncodex binary: /nonexistent/codex\n"),
        "{text}"
    );
    assert!(!text.contains("holds no login"), "{text}");
    // Without CODEX_HOME: the user's ~/.codex, as Codex's own default; no login there.
    let user = dir.path().join("user");
    let report: serde_json::Value = serde_json::from_str(&run(&[("HOME", &user)], true)).unwrap();
    let setup = &report["codexSetup"];
    assert_eq!(
        setup["home"],
        user.join(".codex").display().to_string(),
        "{setup}"
    );
    assert_eq!(setup["homeFrom"], "~/.codex, Codex's default", "{setup}");
    assert_eq!(setup["loggedIn"], false, "{setup}");
    assert_eq!(setup["binary"], "/nonexistent/codex", "{setup}");
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("holds no login"), "{warnings}");
}

/// Issue 13.2: on the Codex backend doctor spawns the app-server once and reports the version
/// `initialize` gave (the pinned 0.171.0), with the tested range, and no warning about it.
#[test]
fn doctor_reports_the_codex_version() {
    let Some(binary) = codex_app_server_client::locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED: no codex binary (run `npm ci`) !!!!!!!!\n");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "backend": {"kind": "codex", "command": [binary.display().to_string(), "app-server"]}
    });
    let path = write(dir.path(), "c.json5", &config.to_string());
    // A Codex home with a login (an API key), as a user's would be.
    std::fs::create_dir_all(dir.path().join("codex-home")).unwrap();
    write(
        &dir.path().join("codex-home"),
        "auth.json",
        r#"{"OPENAI_API_KEY": "sk-test-not-used"}"#,
    );
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("(from CODEX_HOME; logged in)\n"), "{text}");
    assert!(
        text.contains("\ncodex: 0.171.0 (tested: 0.169.0 to 0.171.0)\n"),
        "{text}"
    );
    assert!(!text.contains("warning: "), "{text}");
    assert!(text.ends_with("status: ok\n"), "{text}");
}

/// Issue 13.2: a Codex older than the oldest tested version is reported with a warning naming
/// both versions (a stand-in app-server answers `initialize` with an old user agent).
#[test]
fn doctor_warns_about_a_codex_older_than_tested() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("\n!!!!!!!! SKIPPED: no python3 !!!!!!!!\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"import sys, json
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        print(json.dumps({"id": message["id"], "result": {"userAgent": "codex_cli_rs/0.160.0 (Linux; x86_64)", "codexHome": "/tmp", "platformFamily": "unix", "platformOs": "linux"}}), flush=True)
"#;
    std::fs::write(dir.path().join("old_codex.py"), script).unwrap();
    let path = write(
        dir.path(),
        "c.json5",
        "{ backend: { kind: 'codex', command: ['python3', 'old_codex.py'] } }",
    );
    let out = ctxbridge(dir.path(), &["doctor", "--config", &path]);
    let text = stdout(&out);
    assert!(
        text.contains("\ncodex: 0.160.0 (tested: 0.169.0 to 0.171.0)\n"),
        "{text}{}",
        stderr(&out)
    );
    assert!(
        text.contains("\nwarning: Codex 0.160.0 is older than 0.169.0, the oldest version ctxbridge is tested with; upgrade @openai/codex\n"),
        "{text}"
    );
}

/// `CTXBRIDGE_LOG` (or `RUST_LOG`) that is no log filter is an error naming the variable
/// (exit 2, nothing run) instead of being replaced by the default silently; a valid one
/// shows timestamped lines.
#[test]
fn an_invalid_log_filter_is_refused_and_logs_are_timestamped() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["CTXBRIDGE_LOG", "RUST_LOG"] {
        let out = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
            .args(["turn", "--session", "a", "hi"])
            .current_dir(dir.path())
            .env_remove("CTXBRIDGE_LOG")
            .env_remove("RUST_LOG")
            .env(name, "ctxbridge=loud")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{name}=\"ctxbridge=loud\" is not a log filter")),
            "{name}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{name}: a turn ran");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(["turn", "--session", "a", "hi"])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env("CTXBRIDGE_LOG", "debug")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stamped = |line: &str| {
        let b = line.as_bytes();
        b.len() > 20 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
    };
    assert!(stderr.lines().any(stamped), "no timestamped line: {stderr}");
}

/// The binary in `dir` with `env` set, the user config directory inside `home` (never the
/// user's own) and no `CTXBRIDGE_CONFIG` unless `env` sets it.
fn ctxbridge_with(dir: &Path, home: &Path, env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxbridge"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("CTXBRIDGE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("CTXBRIDGE_CONFIG")
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("HOME", home)
        .env("CODEX_HOME", dir.join("codex-home"));
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// Config discovery, in order: `--config`, then `CTXBRIDGE_CONFIG`, then the nearest
/// `ctxbridge.json5` from the working directory upward, then the user config directory; doctor
/// (text and JSON) names the file and where it came from, or says none was found.
#[test]
fn the_configuration_is_found_in_order_and_named_by_doctor() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let project = root.path().join("project");
    let sub = project.join("a").join("b");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(home.join(".config/ctxbridge")).unwrap();
    let select =
        |engine: &str| format!("{{ plugins: {{ slots: {{ contextEngine: '{engine}' }} }} }}");
    let report = |out: &Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
    };

    let none = ctxbridge_with(&sub, &home, &[], &["doctor"]);
    assert!(
        stdout(&none).contains("config: none found (defaults)"),
        "{}",
        stdout(&none)
    );

    std::fs::write(
        home.join(".config/ctxbridge/ctxbridge.json5"),
        select("sample-summary"),
    )
    .unwrap();
    let user = report(&ctxbridge_with(&sub, &home, &[], &["doctor", "--json"]));
    assert_eq!(
        user["configFile"]["from"], "the user config directory",
        "{user}"
    );
    assert_eq!(user["selectedId"], "sample-summary", "{user}");

    std::fs::write(project.join("ctxbridge.json5"), "{}").unwrap();
    let nearest = report(&ctxbridge_with(&sub, &home, &[], &["doctor", "--json"]));
    assert_eq!(
        nearest["configFile"]["from"], "the nearest ctxbridge.json5",
        "{nearest}"
    );
    assert_eq!(
        nearest["configFile"]["path"],
        project.join("ctxbridge.json5").display().to_string()
    );
    assert_eq!(nearest["selectedId"], "legacy", "{nearest}");

    let named = root.path().join("named.json5");
    std::fs::write(&named, select("sample-summary")).unwrap();
    let by_env = ctxbridge_with(&sub, &home, &[("CTXBRIDGE_CONFIG", &named)], &["doctor"]);
    assert!(
        stdout(&by_env).contains(&format!(
            "config: {} (from CTXBRIDGE_CONFIG)",
            named.display()
        )),
        "{}",
        stdout(&by_env)
    );

    let flag = root.path().join("flag.json5");
    std::fs::write(&flag, "{}").unwrap();
    let by_flag = report(&ctxbridge_with(
        &sub,
        &home,
        &[("CTXBRIDGE_CONFIG", &named)],
        &["--config", flag.to_str().unwrap(), "doctor", "--json"],
    ));
    assert_eq!(by_flag["configFile"]["from"], "--config", "{by_flag}");
    assert_eq!(by_flag["selectedId"], "legacy", "{by_flag}");

    let missing = root.path().join("missing.json5");
    let env_missing = ctxbridge_with(&sub, &home, &[("CTXBRIDGE_CONFIG", &missing)], &["doctor"]);
    assert_eq!(
        env_missing.status.code(),
        Some(2),
        "{}",
        stderr(&env_missing)
    );
    assert!(
        stderr(&env_missing).contains("missing.json5"),
        "{}",
        stderr(&env_missing)
    );
}

/// Commands that run without a configuration still refuse a file the user named that is
/// missing or invalid (exit 2): `demo`, `mock-model` and `bench`.
#[test]
fn every_command_refuses_a_missing_or_invalid_named_config() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(root.path().join("bad.json5"), "{ plugins: 5 }").unwrap();
    for args in [
        &["--config", "nope.json5", "demo"][..],
        &["--config", "bad.json5", "demo"],
        &["--config", "bad.json5", "mock-model"],
        &["--config", "nope.json5", "bench", "--skip-scale"],
    ] {
        let out = ctxbridge_with(root.path(), &home, &[], args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(
            message.contains("nope.json5") || message.contains("bad.json5:1:"),
            "{args:?}: {message}"
        );
    }
}

/// `doctor --json` on a configuration it cannot read still prints one JSON object on stdout —
/// `{"error": {"kind": "config", "message"}, "passes": false}`, the message naming file, line,
/// column and key — and exits 2, as without `--json`.
#[test]
fn doctor_json_on_a_bad_config_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.json5", "{\n  plugins: 5,\n}\n");
    let out = ctxbridge(dir.path(), &["--config", &path, "doctor", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let printed: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(printed["error"]["kind"], "config", "{printed}");
    assert_eq!(printed["passes"], false, "{printed}");
    let message = printed["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("c.json5:2:"), "{message}");
    assert!(message.contains("plugins"), "{message}");
}
