//! `ctxbridge bench` on the mock writes the projection-cost CSV and SVG, and the CSV shows what
//! the benchmark exists to show: thread_bootstrap sends the model less than per_turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const COLUMNS: &str = "backend,mode,turn,epoch,projected,reason,thread_action,backend_chars,cumulative_backend_chars,model_requests,model_request_bytes,cumulative_model_request_bytes,min_model_request_bytes,ratio_to_min";

/// `bench --turns 12 --skip-scale` writes a CSV with 3×12 rows and the expected columns and an
/// SVG chart with a legend, and thread_bootstrap's cumulative model bytes end below per_turn's.
#[test]
fn bench_writes_csv_and_svg_and_thread_bootstrap_costs_less() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .args([
            "bench",
            "--turns",
            "12",
            "--skip-scale",
            "--overhead-sessions",
            "1",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
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

/// Runs `ctxbridge bench` with `extra` after a minimal projection run (2 turns, no overhead
/// run) into a fresh output directory; the exit status and stdout.
fn bench(extra: &[&str]) -> (bool, String, String) {
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
    let (ok, stdout, stderr) = bench(&[
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
    let (_, probe, _) = bench(&[
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

/// The SQLite scale runs print both rows and the 1 → 2 ratio too.
#[test]
fn sqlite_scale_runs_print_both_rows_and_the_ratio() {
    for store in ["memory", "file"] {
        let (ok, stdout, stderr) = bench(&["--scale-store", store, "--sessions", "4"]);
        assert!(ok, "bench --scale-store {store} failed: {stderr}\n{stdout}");
        assert_eq!(scale_rows(&stdout), [(1, 4, 20), (2, 4, 20)], "{stdout}");
        assert!(stdout.contains("scaling 1 → 2 workers:"), "{stdout}");
    }
}
