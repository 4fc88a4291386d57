//! The chart of a projection-cost run, as SVG and PNG: cumulative model-request bytes per turn
//! for every mode the run measured (the Codex run's additional-context mode too), with the
//! cumulative minimum as a reference line. Several runs (the Responses backend's two thread
//! kinds) share one chart: the first run's lines solid, the others' dashed, and the legend
//! draws each line as the chart does.

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::projection_cost::ProjectionRun;
use super::{BenchError, BenchMode};

fn series_color(mode: BenchMode) -> RGBColor {
    match mode {
        BenchMode::Legacy => RGBColor(0x55, 0x55, 0x55),
        BenchMode::PerTurn => RGBColor(0xd6, 0x27, 0x28),
        BenchMode::ThreadBootstrap => RGBColor(0x1f, 0x77, 0xb4),
        BenchMode::ThreadBootstrapAdditionalContext => RGBColor(0x2c, 0xa0, 0x2c),
    }
}

/// The unit that keeps the y axis readable, and its divisor.
fn unit_for(max_bytes: usize) -> (&'static str, f64) {
    if max_bytes >= 2_000_000 {
        ("MB", 1_000_000.0)
    } else {
        ("KB", 1_000.0)
    }
}

/// Chart width and height in pixels (SVG user units).
const SIZE: (u32, u32) = (1000, 620);

/// The modes `run` measured, in the chart's order.
fn modes_of(run: &ProjectionRun) -> Vec<BenchMode> {
    BenchMode::ALL
        .into_iter()
        .chain([BenchMode::ThreadBootstrapAdditionalContext])
        .filter(|mode| run.rows_of(*mode).next().is_some())
        .collect()
}

/// A legend sample of a dashed series: dashes, as the series is drawn.
fn dashed_sample(
    x: i32,
    y: i32,
    color: RGBColor,
) -> DashedPathElement<std::vec::IntoIter<(i32, i32)>, i32> {
    DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, color.stroke_width(2))
}

/// Draws the chart of `runs` (one or more runs of the same session) into `path` (SVG).
pub fn write_svg(runs: &[ProjectionRun], path: &Path) -> Result<(), BenchError> {
    let error = |message: String| BenchError::Chart {
        path: path.to_path_buf(),
        message,
    };
    // The layout measures text with the same font the PNG draws it in.
    register_font().map_err(error)?;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(runs, &root).map_err(|e| error(e.to_string()))
}

/// Draws the same chart into `path` as PNG, its text in the embedded DejaVu Sans (a bitmap
/// needs a font, and the machine may have none installed).
pub fn write_png(runs: &[ProjectionRun], path: &Path) -> Result<(), BenchError> {
    let error = |message: String| BenchError::Chart {
        path: path.to_path_buf(),
        message,
    };
    register_font().map_err(error)?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(runs, &root).map_err(|e| error(e.to_string()))
}

/// Registers DejaVu Sans as the charts' `sans-serif` (once per process).
fn register_font() -> Result<(), String> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded DejaVu Sans font does not load".to_string())
        })
        .clone()
}

fn draw<DB: DrawingBackend>(
    runs: &[ProjectionRun],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let Some(run) = runs.first() else {
        return Err("no run to draw".into());
    };
    let max_bytes = runs
        .iter()
        .flat_map(|r| modes_of(r).into_iter().map(|m| r.total_model_bytes(m)))
        .max()
        .unwrap_or(0)
        .max(1);
    let (unit, divisor) = unit_for(max_bytes);
    let y_max = max_bytes as f64 / divisor * 1.05;
    let turns = run.turns.max(2);
    let decimals = if y_max >= 20.0 { 0 } else { 1 };
    let backend = if runs.len() == 1 {
        format!("{} backend", run.backend_label())
    } else {
        let kinds: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let kind = r.threads.map_or("", |t| t.as_str());
                format!("{kind} {}", if i == 0 { "solid" } else { "dashed" })
            })
            .collect();
        format!(
            "{} backend, threads {}",
            run.backend.as_str(),
            kinds.join(", ")
        )
    };

    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "Cumulative model-request size per turn — {} ({} turns, epoch every {})",
                backend, run.turns, run.engine.epoch_turns
            ),
            ("sans-serif", 17),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(1usize..turns, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("turn")
        .y_desc(format!("cumulative model-request {unit}"))
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    for (index, series_run) in runs.iter().enumerate() {
        for mode in modes_of(series_run) {
            let color = series_color(mode);
            let points: Vec<(usize, f64)> = series_run
                .rows_of(mode)
                .map(|r| (r.turn, r.cumulative_model_request_bytes as f64 / divisor))
                .collect();
            let label = if runs.len() == 1 {
                mode.as_str().to_string()
            } else {
                series_run.mode_label(mode)
            };
            if index == 0 {
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(3)))?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                    });
            } else {
                chart
                    .draw_series(DashedLineSeries::new(points, 4, 4, color.stroke_width(2)))?
                    .label(label)
                    .legend(move |(x, y)| dashed_sample(x, y, color));
            }
        }
    }
    // The minimum a model must receive, summed over the turns (of the thread_bootstrap run).
    let mut cumulative = 0usize;
    let minimum: Vec<(usize, f64)> = run
        .rows_of(BenchMode::ThreadBootstrap)
        .map(|r| {
            cumulative += r.min_model_request_bytes;
            (r.turn, cumulative as f64 / divisor)
        })
        .collect();
    let minimum_color = RGBColor(0x11, 0x11, 0x11);
    chart
        .draw_series(DashedLineSeries::new(
            minimum,
            8,
            6,
            minimum_color.stroke_width(2),
        ))?
        .label("minimum (fresh thread per turn)")
        .legend(move |(x, y)| dashed_sample(x, y, minimum_color));

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
