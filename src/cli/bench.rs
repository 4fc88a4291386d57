//! `ctxbridge bench`: the arguments, and the order in which the measurements of
//! [`crate::bench`] run and are printed; CSV, SVG and PNG go to `--out`.

use std::path::PathBuf;

use clap::Args;

use crate::bench::scale::{self, ScaleStore, ScaleTarget};
use crate::bench::scale_rounds::{format_rounds, ScaleRound};
use crate::bench::{chart, engines, overhead, projection_cost, BenchBackend, BenchError};
use crate::cli::context::{errln, outln, CliError, CommandContext, Stdout, EXIT_OK};

/// Says on stderr what is measured next, so a run of many seconds is never silent (the
/// figures go to stdout).
fn phase(what: std::fmt::Arguments<'_>) {
    errln!("bench: {what} …");
}

/// `ctxbridge bench` arguments.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Turns of the scripted session (projection cost) and per overhead session.
    #[arg(long, default_value_t = 30)]
    pub turns: usize,
    /// The backend of the projection-cost run (overhead and scale always use the in-process mock).
    #[arg(long, value_enum, default_value_t = BenchBackend::Mock)]
    pub backend: BenchBackend,
    /// Where the CSV, SVG and PNG go.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Sessions of the scale run (5 turns each; default 10 000, 200 on PostgreSQL).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Skip the scale run.
    #[arg(long)]
    pub skip_scale: bool,
    /// Also run the scale sessions on 2 workers that share nothing (each its own single-thread
    /// runtime, harness and store): the ceiling the shared 2-worker run can approach.
    #[arg(long)]
    pub scale_split: bool,
    /// Run the scale sessions on lanes, as `serve --front responses` serves turns: a
    /// single-threaded runtime per worker, all sharing one harness and store, instead of one
    /// multi-thread runtime (as `serve --front codex` and `turn` run them).
    #[arg(long)]
    pub scale_lanes: bool,
    /// Where the scale run keeps its state: `memory` isolates ctxbridge's own cost, `file` is
    /// what the CLI uses, `postgres` a fresh schema on `--pg-url` (dropped afterwards).
    #[arg(long, value_enum, default_value_t = ScaleStore::Memory)]
    pub scale_store: ScaleStore,
    /// Run the 1-worker and 2-worker scale runs this many times in turn and print each
    /// round's ratio and their median (the detailed report is the first round's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub scale_rounds: u64,
    /// SQLite scale stores: split the state by session over this many databases, one writer
    /// each (`store.shards`), in every run of the scale measurement.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=crate::store::MAX_SHARDS as u64))]
    pub scale_shards: u64,
    /// The PostgreSQL server of `--scale-store postgres` (else `CTXBRIDGE_TEST_PG_URL`, else
    /// postgres://postgres@127.0.0.1:5432/test).
    #[arg(long)]
    pub pg_url: Option<String>,
    /// Also time one session of 2 005 turns: reused-turn overhead at turns 10, 100, 1 000 and
    /// 2 000.
    #[arg(long)]
    pub long_session: bool,
    /// Sessions per mode of the overhead run (0 skips it).
    #[arg(long, default_value_t = 100)]
    pub overhead_sessions: usize,
    /// Measure what a context engine costs a turn instead, by where it runs: legacy,
    /// in-process Rust, the Python example over stdio, lossless-claw through the Node plugin
    /// host (each skipped, loudly, when its runtime is missing). The other runs are skipped.
    #[arg(long)]
    pub engines: bool,
    /// Timed turns per engine of `--engines`.
    #[arg(long, default_value_t = 100)]
    pub engine_turns: usize,
    /// lossless-claw's build (a folder with `dist/index.js`) for `--engines`; default: the
    /// shared plugin folder beside the repository.
    #[arg(long)]
    pub lossless_claw: Option<PathBuf>,
    /// `--serve` and its sizes.
    #[command(flatten)]
    pub serve: crate::bench::serve::ServeBenchArgs,
}

/// Runs the benchmarks `args` ask for and prints their figures.
pub async fn run(context: &CommandContext, args: BenchArgs) -> Result<u8, CliError> {
    measure(&context.stdout, args)
        .await
        .map_err(|source| CliError::Bench {
            source: Box::new(source),
        })?;
    Ok(EXIT_OK)
}

/// Projection cost (table, CSV, SVG), then overhead, then scale, as configured.
async fn measure(out: &Stdout, args: BenchArgs) -> Result<(), BenchError> {
    if args.serve.enabled {
        return crate::bench::serve::run_and_print(&args.serve).await;
    }
    if args.engines {
        let sources = engines::EngineSources::discover(args.lossless_claw.clone());
        let dir = tempfile::tempdir().map_err(|source| BenchError::Io {
            operation: "create a temporary directory",
            path: std::env::temp_dir(),
            source,
        })?;
        let cases = sources.cases(dir.path());
        let rows = engines::run(&cases, dir.path(), args.engine_turns.max(1)).await?;
        out.write(&engines::format_table(&rows));
        return Ok(());
    }
    let turns = args.turns.max(1);
    std::fs::create_dir_all(&args.out).map_err(|source| BenchError::Io {
        operation: "create the output directory",
        path: args.out.clone(),
        source,
    })?;
    let sessions = args
        .sessions
        .unwrap_or_else(|| args.scale_store.default_sessions())
        .max(1);
    let target = ScaleTarget {
        store: args.scale_store,
        pg_url: scale::pg_url(args.pg_url.as_deref()),
        shards: usize::try_from(args.scale_shards).unwrap_or(1),
    };
    if target.store == ScaleStore::Postgres && target.shards > 1 {
        return Err(BenchError::Runtime {
            operation: "--scale-shards",
            message: "applies to the SQLite scale stores (memory, file) only; PostgreSQL writes sessions in parallel without it".into(),
        });
    }
    // Without a server the PostgreSQL scale run is skipped, loudly; the rest still runs.
    let skip_scale = args.skip_scale || !postgres_ready(out, &target);
    // The binding-memory measurement goes first, while the heap holds nothing else to reuse.
    let binding_memory = if skip_scale {
        None
    } else {
        phase(format_args!(
            "binding cache memory ({sessions} cached bindings)"
        ));
        Some(scale::measure_binding_cache(sessions).await?)
    };

    phase(format_args!(
        "projection cost on the {} backend ({turns} turns per mode)",
        args.backend.as_str()
    ));
    let runs = projection_cost::run(args.backend, turns).await?;
    for run in &runs {
        out.write(&projection_cost::format_table(run));
    }
    let csv = args
        .out
        .join(format!("projection-{}.csv", args.backend.as_str()));
    projection_cost::write_csv(&runs, &csv)?;
    let svg = args
        .out
        .join(format!("projection-{}.svg", args.backend.as_str()));
    chart::write_svg(&runs, &svg)?;
    let png = svg.with_extension("png");
    chart::write_png(&runs, &png)?;
    outln!(
        out,
        "wrote {}, {} and {}",
        csv.display(),
        svg.display(),
        png.display()
    );

    if args.overhead_sessions > 0 {
        phase(format_args!(
            "overhead per turn ({} sessions × {turns} turns per mode)",
            args.overhead_sessions
        ));
        let report = overhead::run(args.overhead_sessions, turns).await?;
        out.write(&overhead::format_table(
            &report,
            args.overhead_sessions,
            turns,
        ));
    }

    if args.long_session {
        phase(format_args!("one long session (2 005 turns)"));
        let points = overhead::long_session(&overhead::LONG_SESSION_CHECKPOINTS).await?;
        out.write(&overhead::format_long_session(&points));
    }

    if let Some(memory) = binding_memory {
        let mut rounds = Vec::new();
        for round in 1..=args.scale_rounds {
            let of_rounds = if args.scale_rounds > 1 {
                format!(", round {round} of {}", args.scale_rounds)
            } else {
                String::new()
            };
            let run = |workers: usize| {
                phase(format_args!(
                    "scale on {workers} {}{} ({sessions} sessions × {} turns{of_rounds}; --sessions N or --skip-scale for less)",
                    if args.scale_lanes { "lane" } else { "worker" },
                    if workers == 1 { "" } else { "s" },
                    scale::TURNS_PER_SESSION,
                ));
                scale::run_on_own_runtime(sessions, workers, target.clone(), args.scale_lanes)
            };
            let one = run(1).await?;
            let two = run(2).await?;
            rounds.push(ScaleRound { one, two });
        }
        let mut results: Vec<_> = rounds
            .first()
            .map(|first| vec![first.one.clone(), first.two.clone()])
            .unwrap_or_default();
        if args.scale_split {
            phase(format_args!(
                "scale on 2 workers sharing nothing ({sessions} sessions × {} turns)",
                scale::TURNS_PER_SESSION
            ));
            results.push(scale::run_split_on_own_threads(sessions, 2, target.clone()).await?);
        }
        out.write(&scale::format_report(&results, &memory));
        if rounds.len() > 1 {
            out.write(&format_rounds(&rounds));
        }
    }
    Ok(())
}

/// Whether the scale run's store can be reached: always for SQLite; for PostgreSQL, whether a
/// server answers (if not, a SKIPPED line says why and how to point at one).
fn postgres_ready(out: &Stdout, target: &ScaleTarget) -> bool {
    if target.store != ScaleStore::Postgres {
        return true;
    }
    match scale::postgres_answers(&target.pg_url) {
        Ok(()) => true,
        Err(reason) => {
            outln!(out,
                "\n*** SKIPPED the scale run on PostgreSQL: no server answers at {} ({reason}). Start one, or pass --pg-url / set CTXBRIDGE_TEST_PG_URL.",
                crate::store::redact_url(&target.pg_url)
            );
            false
        }
    }
}
