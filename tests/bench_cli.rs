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
