//! The demo's PNG charts (plotters): statek against the plain FIFO queue
//! (each tenant's runs completed over time on both sides, and its p99
//! service lag on both), and each tenant's observed selection gaps against
//! its starvation bound. Text uses the bundled DejaVu Sans (assets/, Bitstream
//! Vera license), so no system font is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use statek_policy::{TenantId, WeightedFairnessPolicy};

use crate::demo::service::{percentile, SideEvidence, TenantService};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const WIDTH: u32 = 1200;
pub(crate) const HEIGHT: u32 = 700;

pub(crate) fn font() -> Result<()> {
    // Registering twice (a second demo in one process) is harmless.
    register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled chart font does not load"))
}

pub(crate) fn color(index: usize) -> RGBColor {
    const PALETTE: [RGBColor; 12] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(57, 59, 121),
        RGBColor(173, 73, 74),
    ];
    PALETTE[index % PALETTE.len()]
}

pub(crate) fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart failed: {e}")
}

/// One side of the comparison as the chart draws it: per tenant, its
/// completion times and its service lags.
pub struct SideSeries {
    name: &'static str,
    tenants: BTreeMap<TenantId, TenantService>,
}

impl SideSeries {
    /// The series of one side's evidence.
    pub fn new(side: &SideEvidence) -> Self {
        Self {
            name: side.name,
            tenants: side.service(),
        }
    }
}

/// Writes the charts into `dir` and returns their paths: statek against
/// the plain FIFO queue (when `sides` holds both) and the selection gaps.
///
/// `selections` is the tenant of every reservation of the statek side, in
/// sequence order (from the reservation rows).
///
/// # Errors
/// The directory cannot be created or a PNG cannot be written.
pub fn write(
    dir: &Path,
    policy: &WeightedFairnessPolicy,
    selections: &[&TenantId],
    sides: Option<&(SideSeries, SideSeries)>,
) -> Result<Vec<PathBuf>> {
    font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut paths = Vec::new();
    if let Some((fair, fifo)) = sides {
        let comparison = dir.join("fair-vs-fifo.png");
        comparison_chart(&comparison, policy, fair, fifo)?;
        paths.push(comparison);
    }
    let gaps = dir.join("selection-gaps.png");
    gap_chart(&gaps, policy, selections)?;
    paths.push(gaps);
    Ok(paths)
}

/// Three panels: the share of each tenant's runs completed over time under
/// statek and under FIFO, and each tenant's p99 service lag on both sides
/// (log scale).
fn comparison_chart(
    path: &Path,
    policy: &WeightedFairnessPolicy,
    fair: &SideSeries,
    fifo: &SideSeries,
) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT + 300)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let (top, bottom) = root.split_vertically(HEIGHT / 2 + 150);
    let halves = top.split_evenly((1, 2));
    let end_ms = [fair, fifo]
        .iter()
        .flat_map(|s| s.tenants.values())
        .filter_map(|t| t.completed_ms.last().copied())
        .fold(1.0f64, f64::max);
    for (area, side) in halves.iter().zip([fair, fifo]) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{}: share of each tenant's runs completed", side.name),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..end_ms / 1000.0 * 1.02, 0f64..101f64)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds after the workers started")
            .y_desc("% completed")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(draw_error)?;
        for (i, t) in policy.tenants().iter().enumerate() {
            let Some(service) = side.tenants.get(t.tenant()) else {
                continue;
            };
            let total = service.enqueued.max(1) as f64;
            let c = color(i);
            // A step per completion: flat until the next run completes.
            let mut points = vec![(0.0, 0.0)];
            for (n, ms) in service.completed_ms.iter().enumerate() {
                let x = ms / 1000.0;
                points.push((x, 100.0 * n as f64 / total));
                points.push((x, 100.0 * (n + 1) as f64 / total));
            }
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))
                .map_err(draw_error)?
                .label(format!("{} (w={})", t.tenant(), t.weight()))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(draw_error)?;
    }
    lag_panel(&bottom, policy, fair, fifo)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

fn lag_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    policy: &WeightedFairnessPolicy,
    fair: &SideSeries,
    fifo: &SideSeries,
) -> Result<()> {
    let p99 = |side: &SideSeries, t: &TenantId| {
        side.tenants
            .get(t)
            .and_then(|s| percentile(&s.lag_ms, 99.0))
            .map(|ms| ms.max(0.5))
    };
    let names: Vec<String> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().to_string())
        .collect();
    let max_ms = policy
        .tenants()
        .iter()
        .flat_map(|t| [p99(fair, t.tenant()), p99(fifo, t.tenant())])
        .flatten()
        .fold(1.0f64, f64::max);
    let tenants = names.len() as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "p99 service lag per tenant (runnable to claim, ms, log scale): {} (blue) against {} (orange)",
                fair.name, fifo.name
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (0u32..tenants.saturating_sub(1)).into_segmented(),
            (0.4f64..max_ms * 2.0).log_scale(),
        )
        .map_err(draw_error)?;
    let labels = names.clone();
    chart
        .configure_mesh()
        .y_desc("p99 lag, ms")
        .x_labels(names.len())
        .x_label_formatter(&move |v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(draw_error)?;
    for (i, t) in policy.tenants().iter().enumerate() {
        let i = i as u32;
        for (side, c) in [(fair, color(0)), (fifo, color(1))] {
            if let Some(ms) = p99(side, t.tenant()) {
                chart
                    .draw_series(std::iter::once(Circle::new(
                        (SegmentValue::CenterOf(i), ms),
                        7,
                        c.filled(),
                    )))
                    .map_err(draw_error)?;
            }
        }
    }
    Ok(())
}

fn gap_chart(path: &Path, policy: &WeightedFairnessPolicy, selections: &[&TenantId]) -> Result<()> {
    // Distinct observed gaps per tenant, with how often each occurred.
    let mut gaps: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); policy.tenants().len()];
    let index: BTreeMap<&TenantId, usize> = policy
        .tenants()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.tenant(), i))
        .collect();
    let mut last: Vec<Option<usize>> = vec![None; gaps.len()];
    for (seq, tenant) in selections.iter().enumerate() {
        if let Some(&t) = index.get(tenant) {
            if let Some(prev) = last[t] {
                *gaps[t].entry((seq - prev) as u64).or_default() += 1;
            }
            last[t] = Some(seq);
        }
    }
    let bounds: Vec<u64> = policy
        .tenants()
        .iter()
        .map(|t| {
            policy
                .starvation_bound(t.tenant())
                .map(|b| u64::from(b.maximum_reservations_until_selection()))
                .unwrap_or(0)
        })
        .collect();
    let max_y = bounds
        .iter()
        .copied()
        .chain(gaps.iter().filter_map(|g| g.keys().next_back().copied()))
        .max()
        .unwrap_or(1);
    let names: Vec<String> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().to_string())
        .collect();

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let tenants = names.len() as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Observed selection gaps (dots, larger = more often) against the starvation bound (red bar)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(60)
        .y_label_area_size(60)
        // A segmented 0..n range has a segment per value 0..=n.
        .build_cartesian_2d(
            (0u32..tenants.saturating_sub(1)).into_segmented(),
            0u64..max_y + 2,
        )
        .map_err(draw_error)?;
    let labels = names.clone();
    chart
        .configure_mesh()
        .x_desc("tenant")
        .y_desc("reservations between selections")
        .x_labels(names.len())
        .x_label_formatter(&move |v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(draw_error)?;
    for (t, bound) in bounds.iter().enumerate() {
        let t32 = t as u32;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(t32), *bound),
                    (SegmentValue::Exact(t32 + 1), *bound),
                ],
                RED.stroke_width(3),
            )))
            .map_err(draw_error)?;
        let total: u64 = gaps[t].values().sum::<u64>().max(1);
        chart
            .draw_series(gaps[t].iter().map(|(gap, count)| {
                let radius = 3 + (12.0 * (*count as f64 / total as f64)).round() as i32;
                Circle::new(
                    (SegmentValue::CenterOf(t32), *gap),
                    radius,
                    color(t).filled(),
                )
            }))
            .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use statek_policy::policy_file::PolicyFile;

    #[test]
    fn charts_are_written_as_png() {
        let policy = PolicyFile::parse(
            "t.toml",
            "shard = \"primary-v1\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
        )
        .unwrap()
        .into_policy();
        let selections: Vec<&TenantId> = (0..400u64)
            .map(|s| policy.tenant_for_slot(s % 4).unwrap())
            .collect();
        let dir = std::env::temp_dir().join(format!("statek-charts-{}", std::process::id()));
        let paths = write(&dir, &policy, &selections, None).unwrap();
        for path in &paths {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
