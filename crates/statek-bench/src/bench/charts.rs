//! PNG charts of a bench run (plotters, with the DejaVu Sans that
//! statek-cli bundles, so no system font is needed).

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::report::Report;

const FONT: &[u8] = include_bytes!("../../../statek-cli/assets/DejaVuSans.ttf");

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart failed: {e}")
}

/// Writes `reservations-throughput.png` and `reservations-p99.png`.
pub fn write(out: &Path, report: &Report) -> Result<()> {
    register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled chart font does not load"))?;
    // x: the position of the client count (1, 4, 16, 64 evenly spaced).
    let series = |f: &dyn Fn(&super::report::ReservationRow) -> f64| -> Vec<(f64, f64)> {
        report
            .reservations
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, f(r)))
            .collect()
    };
    let clients: Vec<usize> = report.reservations.iter().map(|r| r.clients).collect();
    let batch_label = format!("statek reserve_batch k={} (reservations/s)", report.batch);
    line_chart(
        &out.join("reservations-throughput.png"),
        "Reservations per second by concurrent clients (one shard)",
        "reservations / s",
        &clients,
        // Throughput falls with clients: the upper right is free.
        SeriesLabelPosition::UpperRight,
        &[
            ("statek reserve", series(&|r| r.statek.units_per_second)),
            (
                "pgbench, same transaction",
                series(&|r| r.pgbench.units_per_second),
            ),
            (batch_label.as_str(), series(&|r| r.batch.units_per_second)),
        ],
    )?;
    line_chart(
        &out.join("reservations-p99.png"),
        "p99 latency per call by concurrent clients",
        "p99 latency (ms)",
        &clients,
        // Latency grows with clients: the upper left is free.
        SeriesLabelPosition::UpperLeft,
        &[
            ("statek reserve", series(&|r| r.statek.p99_ms)),
            ("pgbench, same transaction", series(&|r| r.pgbench.p99_ms)),
            (
                format!("statek reserve_batch k={} (per batch)", report.batch).as_str(),
                series(&|r| r.batch.p99_ms),
            ),
        ],
    )?;
    Ok(())
}

fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    clients: &[usize],
    legend_at: SeriesLabelPosition,
    lines: &[(&str, Vec<(f64, f64)>)],
) -> Result<()> {
    let max_x = clients.len().saturating_sub(1) as f64;
    let max_y = lines
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0_f64, f64::max)
        * 1.1
        + 1e-9;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(-0.3_f64..max_x + 0.3, 0.0_f64..max_y)
        .map_err(draw_error)?;
    let x_label = |x: &f64| {
        let nearest = x.round();
        if (x - nearest).abs() < 1e-6 && nearest >= 0.0 {
            clients
                .get(nearest as usize)
                .map_or_else(String::new, ToString::to_string)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(clients.len().max(2))
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("concurrent clients")
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(draw_error)?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label(*label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(draw_error)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(legend_at)
        .draw()
        .map_err(draw_error)?;
    root.present()
        .map_err(draw_error)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
