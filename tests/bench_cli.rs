//! `ctxbridge bench` on the mock and on the Responses backend writes the projection-cost CSV and
//! SVG, and the CSV shows what the benchmark exists to show: thread_bootstrap sends the model less
//! than per_turn. On conversation threads the requests the mock model server recorded never carry
//! history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use ctxbridge::backend::responses::ResponsesThreads;
use ctxbridge::bench::projection_cost::run_responses_mode;
use ctxbridge::bench::{bench_prompt, BenchMode};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, RequestKind};

const COLUMNS: &str = "backend,mode,turn,epoch,projected,reason,thread_action,backend_chars,cumulative_backend_chars,model_requests,model_request_bytes,cumulative_model_request_bytes,min_model_request_bytes,ratio_to_min,wire_request_bytes";

/// Runs `ctxbridge bench` with `args` and the output directory, and returns stdout.
fn bench(args: &[&str], out: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `bench --engines` prints one row per engine it can run, legacy first as the baseline
/// (÷ legacy 1.00×), then the in-process engine; the Python example and lossless-claw when
/// their runtimes are here (this machine's CI has both: each row is then required, so a
/// quarantine or a missing build fails the test instead of shrinking the table). Figures are
/// not asserted.
#[test]
fn bench_engines_prints_a_row_per_engine() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = bench(&["--engines", "--engine-turns", "2"], dir.path());
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.starts_with("engine "))
        .skip(1)
        .take_while(|line| !line.starts_with("machine load"))
        .collect();
    assert!(
        rows[0].starts_with("legacy") && rows[0].ends_with("1.00×"),
        "{stdout}"
    );
    assert!(rows[1].starts_with("sample-summary"), "{stdout}");
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    if python.is_ok_and(|out| out.status.success()) {
        assert!(
            rows.iter().any(|r| r.starts_with("python-engine")),
            "{stdout}"
        );
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pinned = repo.join("hosts/openclaw-node/node_modules/.bin/node");
    if repo
        .join("../shared/plugins/lossless-claw/dist/index.js")
        .is_file()
        && pinned.exists()
    {
        assert!(
            rows.iter().any(|r| r.starts_with("lossless-claw")),
            "{stdout}"
        );
    } else {
        eprintln!("SKIPPED the lossless-claw row of bench_engines: no build or no pinned Node");
    }
}

/// `bench --turns 12 --skip-scale` writes a CSV with 3×12 rows and the expected columns and an
/// SVG chart with a legend, and thread_bootstrap's cumulative model bytes end below per_turn's.
#[test]
fn bench_writes_csv_and_svg_and_thread_bootstrap_costs_less() {
    let out = tempfile::tempdir().unwrap();
    let stdout = bench(
        &["--turns", "12", "--skip-scale", "--overhead-sessions", "1"],
        out.path(),
    );
    assert!(stdout.contains("Projection cost on the mock backend"));

    let csv = std::fs::read_to_string(out.path().join("projection-mock.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), COLUMNS);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3 * 12);
    assert!(rows.iter().all(|r| r.len() == COLUMNS.split(',').count()));
    for mode in ["legacy", "per_turn", "thread_bootstrap"] {
        let turns: Vec<&str> = rows.iter().filter(|r| r[1] == mode).map(|r| r[2]).collect();
        let expected: Vec<String> = (1..=12).map(|t| t.to_string()).collect();
        assert_eq!(turns, expected, "{mode}");
    }
    let cumulative = |mode: &str| -> u64 {
        rows.iter()
            .filter(|r| r[1] == mode && r[2] == "12")
            .map(|r| r[11].parse::<u64>().unwrap())
            .next()
            .unwrap()
    };
    assert!(
        cumulative("thread_bootstrap") < cumulative("per_turn"),
        "thread_bootstrap {} vs per_turn {}",
        cumulative("thread_bootstrap"),
        cumulative("per_turn")
    );

    let svg = std::fs::read_to_string(out.path().join("projection-mock.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    for label in ["legacy", "per_turn", "thread_bootstrap", "turn"] {
        assert!(svg.contains(label), "the chart lacks {label:?}");
    }
}

/// `bench --backend responses --turns 12` runs the session on both Responses thread kinds: the
/// CSV has 2×3×12 rows (modes named with their kind), thread_bootstrap's cumulative model bytes
/// end below per_turn's on both kinds, on a conversation the turns that reuse the thread send
/// only the new turn on the wire while the model gets the whole thread, and the SVG names every
/// series.
#[test]
fn bench_on_responses_covers_both_thread_kinds() {
    let out = tempfile::tempdir().unwrap();
    let stdout = bench(
        &[
            "--backend",
            "responses",
            "--turns",
            "12",
            "--skip-scale",
            "--overhead-sessions",
            "0",
        ],
        out.path(),
    );
    assert!(stdout.contains("Projection cost on the responses (chain threads) backend"));
    assert!(stdout.contains("Projection cost on the responses (conversation threads) backend"));

    let csv = std::fs::read_to_string(out.path().join("projection-responses.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), COLUMNS);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2 * 3 * 12);
    assert!(rows.iter().all(|r| r.len() == COLUMNS.split(',').count()));
    assert!(rows.iter().all(|r| r[0] == "responses"));
    let col = |name: &str| COLUMNS.split(',').position(|c| c == name).unwrap();
    let (mode, turn) = (col("mode"), col("turn"));
    let of = |m: &str| -> Vec<&Vec<&str>> { rows.iter().filter(|r| r[mode] == m).collect() };
    let num = |r: &Vec<&str>, name: &str| r[col(name)].parse::<u64>().unwrap();
    for kind in ["chain", "conversation"] {
        for m in ["legacy", "per_turn", "thread_bootstrap"] {
            let turns: Vec<&str> = of(&format!("{m} ({kind})"))
                .iter()
                .map(|r| r[turn])
                .collect();
            let expected: Vec<String> = (1..=12).map(|t| t.to_string()).collect();
            assert_eq!(turns, expected, "{m} ({kind})");
        }
        let last = |m: &str| {
            num(
                of(&format!("{m} ({kind})"))[11],
                "cumulative_model_request_bytes",
            )
        };
        assert!(
            last("thread_bootstrap") < last("per_turn"),
            "{kind}: thread_bootstrap {} vs per_turn {}",
            last("thread_bootstrap"),
            last("per_turn")
        );
    }
    // Conversation threads: the thread_bootstrap turns that reuse the thread send the wire only
    // the new turn (far below the turn's minimum), while the context the model got is the
    // whole thread (at least the minimum's bootstrap).
    let tb = of("thread_bootstrap (conversation)");
    let reused: Vec<&&Vec<&str>> = tb
        .iter()
        .filter(|r| r[col("projected")] == "false")
        .collect();
    assert_eq!(
        reused.len(),
        10,
        "turns 2-10 and 12 reuse the thread: {tb:?}"
    );
    for r in reused {
        let (wire, model, min) = (
            num(r, "wire_request_bytes"),
            num(r, "model_request_bytes"),
            num(r, "min_model_request_bytes"),
        );
        assert!(
            wire * 10 < min,
            "turn {}: wire {wire} vs minimum {min}",
            r[turn]
        );
        assert!(
            model >= min * 9 / 10,
            "turn {}: model {model} vs minimum {min}",
            r[turn]
        );
    }

    let svg = std::fs::read_to_string(out.path().join("projection-responses.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    for label in [
        "legacy (chain)",
        "per_turn (conversation)",
        "thread_bootstrap (chain)",
        "thread_bootstrap (conversation)",
    ] {
        assert!(svg.contains(label), "the chart lacks {label:?}");
    }
}

/// On conversation threads every model request the stateful mock recorded names the
/// conversation, never a previous response, and carries exactly one input item — the turn's
/// own — however long the thread: legacy sends the bare prompt, thread_bootstrap the bootstrap
/// once and then bare prompts, while the conversation the model sees grows turn by turn.
#[tokio::test]
async fn conversation_requests_never_resend_history() {
    for mode in [BenchMode::Legacy, BenchMode::ThreadBootstrap] {
        let server = MockModelServer::start(MockModelConfig::stateful())
            .await
            .unwrap();
        let rows = run_responses_mode(mode, ResponsesThreads::Conversation, &server, 6)
            .await
            .unwrap();
        assert_eq!(rows.len(), 6);
        let requests = server.response_requests();
        assert_eq!(requests.len(), 6, "{mode:?}: one model request per turn");
        let conversation = requests[0].conversation_id.clone().unwrap();
        for (i, r) in requests.iter().enumerate() {
            let turn = i + 1;
            assert_eq!(r.conversation_id.as_deref(), Some(conversation.as_str()));
            assert_eq!(r.previous_response_id, None);
            assert_eq!(r.input.len(), 1, "{mode:?} turn {turn}: {:?}", r.input);
            let user = r.input_texts("user");
            assert_eq!(user.len(), 1);
            assert!(
                user[0].contains(&bench_prompt(turn)),
                "{mode:?} turn {turn}"
            );
            if turn > 1 {
                assert_eq!(
                    user[0],
                    bench_prompt(turn),
                    "{mode:?} turn {turn}: bare prompt"
                );
                assert!(r.input_texts("assistant").is_empty());
                assert_eq!(
                    r.conversation_texts("user").len(),
                    turn,
                    "{mode:?} turn {turn}: the server holds the history"
                );
            }
        }
        // Conversation calls (create) are recorded too, and none is a model request.
        assert!(server
            .requests()
            .iter()
            .any(|r| r.kind == RequestKind::Conversations));
        server.shutdown().await;
    }
}

/// `bench --serve` with tiny sizes runs every measurement against the real Codex and prints
/// one row each (latency direct / through serve / CLI, the relay figures, memory per idle
/// connection, concurrent clients with no failed turn). Figures are not asserted. Skips
/// loudly without Codex.
#[test]
fn bench_serve_prints_its_rows() {
    if codex_app_server_client::locate_codex_binary().is_none() {
        eprintln!("\n!!!!!!!! SKIPPED bench_serve: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--serve",
            "--serve-turns",
            "3",
            "--serve-cli-turns",
            "1",
            "--serve-codex-deltas",
            "50",
            "--serve-flood",
            "500",
            "--serve-idle",
            "5",
            "--serve-clients",
            "3",
            "--serve-client-turns",
            "2",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench --serve failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    for row in [
        "turn latency direct (warm app-server, 3 turns)",
        "turn latency through serve (ws, 3 turns)",
        "serve added at p50",
        "ratio through serve / direct",
        "CLI spawn-per-turn (`ctxbridge turn`, 1 turns)",
        "long reply via Codex, direct",
        "long reply via Codex, through serve",
        "serve relay alone, scripted upstream (503 msgs)",
        "serve RSS per idle initialized ws connection (5 conns)",
        "load average",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    let failed = stdout
        .lines()
        .find(|l| l.contains("3 concurrent clients x 2 turns: failed turns"))
        .unwrap_or_else(|| panic!("no concurrent-clients row in:\n{stdout}"));
    assert_eq!(failed.split_whitespace().nth(8), Some("0"), "{failed}");
    assert!(
        !stdout.contains("Projection cost"),
        "--serve runs only the serve bench"
    );
}

/// `bench --serve --front responses` needs only the mock model: it prints the three latency
/// rows (direct, legacy and sample-summary through the front; to the stream's end and to the
/// first text), the concurrent clients with no
/// failed turn, the idle-connection memory and the load.
#[test]
fn bench_serve_responses_front_prints_its_rows() {
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--serve",
            "--front",
            "responses",
            "--serve-turns",
            "3",
            "--serve-idle",
            "5",
            "--serve-clients",
            "3",
            "--serve-client-turns",
            "2",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench --serve --front responses failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    for row in [
        "first text p50 ms",
        "direct to the upstream",
        "through the front, legacy",
        "through the front, sample-summary",
        "the same with the model answering in 100 ms",
        "3 concurrent clients x 2 turns (sample-summary): 0 failed",
        "5 idle keep-alive connections",
        "load average",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
}

/// Runs `ctxbridge bench` with `extra` after a minimal projection run (2 turns, no overhead
/// run) into a fresh output directory; the exit status and stdout.
fn bench_scale(extra: &[&str]) -> (bool, String, String) {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args(["bench", "--turns", "2", "--overhead-sessions", "0", "--out"])
        .arg(out.path())
        .args(extra)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The PostgreSQL server of the tests (as tests/store_postgres.rs finds it).
fn pg_url() -> String {
    std::env::var("CTXBRIDGE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// The rows of the scale table: (workers, sessions, turns).
fn scale_rows(stdout: &str) -> Vec<(usize, usize, usize)> {
    let table = stdout.split("== Scale:").nth(1).unwrap_or("");
    table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect()
}

/// With no server at the URL the PostgreSQL scale run is skipped with a line saying where it
/// looked (password hidden) and how to point it elsewhere; the rest of the bench still runs and
/// succeeds.
#[test]
fn postgres_scale_run_skips_loudly_without_a_server() {
    let (ok, stdout, stderr) = bench_scale(&[
        "--scale-store",
        "postgres",
        "--pg-url",
        "postgres://bench:secret@127.0.0.1:1/none",
    ]);
    assert!(ok, "bench failed: {stderr}\n{stdout}");
    assert!(
        stdout.contains("Projection cost on the mock backend"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIPPED the scale run on PostgreSQL")
            && stdout.contains("127.0.0.1:1")
            && stdout.contains("--pg-url"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("secret"),
        "the password was shown: {stdout}"
    );
    assert!(scale_rows(&stdout).is_empty(), "{stdout}");
}

/// On a PostgreSQL server the scale run prints a row for 1 and for 2 workers with every turn
/// of every session, the 1 → 2 ratio and the machine's load.
#[test]
fn postgres_scale_run_prints_both_rows_and_the_ratio() {
    let url = pg_url();
    let (_, probe, _) = bench_scale(&[
        "--scale-store",
        "postgres",
        "--pg-url",
        &url,
        "--sessions",
        "3",
    ]);
    if probe.contains("SKIPPED the scale run on PostgreSQL") {
        if std::env::var("CTXBRIDGE_TEST_PG_REQUIRED").as_deref() == Ok("1") {
            panic!("PostgreSQL is required but does not answer: {probe}");
        }
        eprintln!("\n*** SKIPPED postgres_scale_run_prints_both_rows_and_the_ratio: no PostgreSQL at {url}\n");
        return;
    }
    assert!(probe.contains("PostgresStore"), "{probe}");
    assert_eq!(scale_rows(&probe), [(1, 3, 15), (2, 3, 15)], "{probe}");
    assert!(probe.contains("scaling 1 → 2 workers:"), "{probe}");
    assert!(probe.contains("machine load average"), "{probe}");
}

/// `--scale-split` adds a row for 2 workers sharing nothing, with every turn, and the line
/// comparing it with the shared runs.
#[test]
fn the_split_run_prints_its_row_and_the_ceiling() {
    let (ok, stdout, stderr) =
        bench_scale(&["--scale-store", "file", "--sessions", "4", "--scale-split"]);
    assert!(ok, "bench --scale-split failed: {stderr}\n{stdout}");
    assert_eq!(scale_rows(&stdout), [(1, 4, 20), (2, 4, 20)], "{stdout}");
    let split = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("2 split "))
        .unwrap_or_else(|| panic!("no split row in:\n{stdout}"));
    let fields: Vec<&str> = split.split_whitespace().collect();
    assert_eq!(fields[2..4], ["4", "20"], "{split}");
    assert!(
        stdout.contains("2 workers sharing nothing (a runtime, harness and store each): "),
        "{stdout}"
    );
}

/// `--scale-rounds 3` runs both worker counts three times in turn: the detailed report once,
/// then a row per round and the median of their ratios.
#[test]
fn scale_rounds_print_each_round_and_the_median() {
    let (ok, stdout, stderr) = bench_scale(&[
        "--scale-store",
        "memory",
        "--sessions",
        "4",
        "--scale-rounds",
        "3",
    ]);
    assert!(ok, "bench --scale-rounds failed: {stderr}\n{stdout}");
    // The detailed report (the first round's), before the rounds' table.
    let report = stdout.split("== Scale rounds").next().unwrap_or("");
    assert_eq!(scale_rows(report), [(1, 4, 20), (2, 4, 20)], "{stdout}");
    assert_eq!(stderr.matches("round 2 of 3").count(), 2, "{stderr}");
    let table = stdout
        .split("== Scale rounds: 1 and 2 workers in turn, 3 rounds ==")
        .nth(1)
        .unwrap_or_else(|| panic!("no rounds table in:\n{stdout}"));
    let rounds: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 4 && f[0].parse::<usize>().is_ok())
        .collect();
    assert_eq!(rounds.len(), 3, "{table}");
    for (i, fields) in rounds.iter().enumerate() {
        assert_eq!(fields[0], (i + 1).to_string(), "{table}");
        assert!(fields[3].ends_with('×'), "{table}");
    }
    assert!(table.contains("median 1 → 2: "), "{table}");
    // Without the flag there is one round and no rounds table.
    let (ok, stdout, _) = bench_scale(&["--scale-store", "memory", "--sessions", "4"]);
    assert!(ok && !stdout.contains("Scale rounds"), "{stdout}");
}

/// The SQLite scale runs print both rows and the 1 → 2 ratio too.
#[test]
fn sqlite_scale_runs_print_both_rows_and_the_ratio() {
    for store in ["memory", "file"] {
        let (ok, stdout, stderr) = bench_scale(&["--scale-store", store, "--sessions", "4"]);
        assert!(ok, "bench --scale-store {store} failed: {stderr}\n{stdout}");
        assert_eq!(scale_rows(&stdout), [(1, 4, 20), (2, 4, 20)], "{stdout}");
        assert!(stdout.contains("scaling 1 → 2 workers:"), "{stdout}");
        // Each run says how many cores it kept busy and its CPU per turn.
        for workers in [1, 2] {
            let line = stdout
                .lines()
                .find(|l| {
                    l.starts_with(&format!("{workers} worker(s): ")) && l.contains("cores busy")
                })
                .unwrap_or_else(|| panic!("no CPU line for {workers} worker(s) in:\n{stdout}"));
            // A tiny run may see no tick of the 10 ms CPU clock: a number, whatever its size.
            let cores: Result<f64, _> = line.split_whitespace().nth(2).unwrap().parse();
            assert!(cores.is_ok(), "{line}");
            assert!(line.contains("µs of CPU per turn"), "{line}");
        }
    }
}

/// `--scale-shards` runs the SQLite scale stores split by session (every turn done, the report
/// saying so); on PostgreSQL it is refused with an error naming the flag.
#[test]
fn sharded_scale_runs_and_postgres_refuses_shards() {
    for store in ["memory", "file"] {
        let (ok, stdout, stderr) = bench_scale(&[
            "--scale-store",
            store,
            "--sessions",
            "6",
            "--scale-shards",
            "3",
            "--scale-split",
        ]);
        assert!(
            ok,
            "bench --scale-shards on {store} failed: {stderr}\n{stdout}"
        );
        assert_eq!(scale_rows(&stdout), [(1, 6, 30), (2, 6, 30)], "{stdout}");
        assert!(
            stdout.contains("store split by session over 3 SQLite databases (store.shards: 3)"),
            "{stdout}"
        );
    }
    let (ok, stdout, stderr) = bench_scale(&[
        "--scale-store",
        "postgres",
        "--sessions",
        "2",
        "--scale-shards",
        "2",
    ]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("--scale-shards"), "{stderr}");
    let (ok, _, stderr) = bench_scale(&["--scale-shards", "0"]);
    assert!(!ok);
    assert!(stderr.contains("--scale-shards"), "{stderr}");
}

/// `bench` says on stderr what it measures next (a scale run of many seconds is never silent),
/// writes the chart as PNG beside the SVG, and prints figures and ratios, not verdicts against
/// targets.
#[test]
fn bench_reports_progress_writes_a_png_and_prints_no_verdicts() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--turns",
            "3",
            "--overhead-sessions",
            "1",
            "--sessions",
            "20",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for phase in [
        "bench: projection cost on the mock backend (3 turns per mode) …",
        "bench: overhead per turn (1 sessions × 3 turns per mode) …",
        "bench: scale on 1 worker (20 sessions × 5 turns;",
        "bench: scale on 2 workers (20 sessions × 5 turns;",
    ] {
        assert!(stderr.contains(phase), "no {phase:?} in: {stderr}");
    }
    assert!(
        !stdout.contains("MISSED") && !stdout.contains("target:"),
        "{stdout}"
    );
    assert!(stdout.contains("scaling 1 → 2 workers: "), "{stdout}");
    let png = std::fs::read(out.path().join("projection-mock.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "a chart with text: {} bytes", png.len());
    assert!(stdout.contains("projection-mock.png"), "{stdout}");
}

/// `bench --backend codex` finds `codex` on `PATH` as `turn`, `doctor` and `serve` do, before
/// the npm install: here a `codex` on `PATH` that only leaves a mark that it was run.
#[test]
fn bench_finds_codex_on_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let fake = dir.path().join("codex");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\ntouch '{}'\nexit 3\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--backend",
            "codex",
            "--turns",
            "1",
            "--skip-scale",
        ])
        .args(["--overhead-sessions", "0", "--out"])
        .arg(dir.path().join("out"))
        .env("PATH", path)
        .env_remove("CODEX_BIN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(!stderr.contains("no Codex binary found"), "{stderr}");
    assert!(mark.exists(), "the codex on PATH was not run: {stderr}");
}

/// On the real Codex, the chart shows every mode the run measured, the additional-context
/// delivery included (the CSV has its rows; the chart used to leave it out).
#[test]
fn bench_on_codex_charts_every_mode() {
    let Some(binary) = codex_app_server_client::locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED bench_on_codex_charts_every_mode: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--backend",
            "codex",
            "--turns",
            "2",
            "--skip-scale",
        ])
        .args(["--overhead-sessions", "0", "--out"])
        .arg(out.path())
        .env("CODEX_BIN", &binary)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let csv = std::fs::read_to_string(out.path().join("projection-codex.csv")).unwrap();
    let svg = std::fs::read_to_string(out.path().join("projection-codex.svg")).unwrap();
    for mode in [
        "legacy",
        "per_turn",
        "thread_bootstrap",
        "thread_bootstrap_ac",
    ] {
        assert!(csv.contains(&format!(",{mode},")), "the CSV lacks {mode}");
        assert!(
            svg.lines().any(|line| line.trim() == mode),
            "the chart's legend lacks {mode}"
        );
    }
}
