//! `ctxbridge demo`, the README's main job: the scripted session runs in both modes and shows
//! what per-epoch projection saves over per-turn projection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use ctxbridge::cli::demo::demo_session;
use ctxbridge::contract::ProjectionMode;

/// thread_bootstrap projects once per epoch and reuses the thread in between; per_turn projects
/// every turn into one thread; the model pays far more for per_turn.
#[tokio::test]
async fn demo_sessions_compare_the_modes() {
    let epoch = demo_session(ProjectionMode::ThreadBootstrap, 12)
        .await
        .unwrap();
    let per_turn = demo_session(ProjectionMode::PerTurn, 12).await.unwrap();
    assert_eq!(epoch.len(), 12);
    let projections = epoch.iter().filter(|r| r.report.projected).count();
    assert!((2..12).contains(&projections), "{projections} projections");
    for r in epoch.iter().filter(|r| !r.report.projected) {
        assert_eq!(r.report.reason, "matching-thread-bootstrap-binding");
        assert_eq!(r.report.thread_action.as_str(), "resumed");
    }
    for r in epoch.iter().filter(|r| r.report.projected).skip(1) {
        assert_eq!(r.report.reason, "projection-mismatch");
        assert_eq!(r.report.thread_action.as_str(), "rotated");
    }
    assert!(per_turn
        .iter()
        .all(|r| r.report.projected && r.report.reason == "per-turn-projection"));
    assert!(per_turn
        .iter()
        .all(|r| r.report.thread_id == per_turn[0].report.thread_id));
    let last = |rows: &[ctxbridge::cli::demo::DemoRow]| rows.last().unwrap().clone();
    assert!(last(&epoch).cumulative_model_chars * 3 < last(&per_turn).cumulative_model_chars);
    assert!(last(&epoch).cumulative_backend_chars < last(&per_turn).cumulative_backend_chars);
}

/// The binary prints both tables (12 rows each) and the summary, and exits 0, touching no
/// files (the demo keeps its state in memory).
#[test]
fn demo_command_prints_both_tables() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbridge"))
        .current_dir(dir.path())
        .arg("demo")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("thread_bootstrap (projection once per epoch"));
    assert!(stdout.contains("per_turn (projection every turn"));
    let rows = stdout
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .count();
    assert_eq!(rows, 24, "{stdout}");
    assert!(stdout.contains("chars of model requests"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the demo wrote files"
    );
}
