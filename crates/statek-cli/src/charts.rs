//! The demo's PNG charts (plotters): cumulative slots per tenant against
//! its entitlement, and each tenant's observed selection gaps against its
//! starvation bound. Text uses the bundled DejaVu Sans (assets/, Bitstream
//! Vera license), so no system font is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use statek_policy::{TenantId, WeightedFairnessPolicy};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const WIDTH: u32 = 1200;
const HEIGHT: u32 = 700;
/// Points per line at most (the cumulative chart samples the sequence).
const MAX_POINTS: usize = 600;

fn font() -> Result<()> {
    // Registering twice (a second demo in one process) is harmless.
    register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled chart font does not load"))
}

fn color(index: usize) -> RGBColor {
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

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart failed: {e}")
}

/// Writes both charts into `dir` and returns their paths.
///
/// `selections` is the tenant of every reservation of the run, in sequence
/// order (from the reservation rows).
///
/// # Errors
/// The directory cannot be created or a PNG cannot be written.
pub fn write(
    dir: &Path,
    policy: &WeightedFairnessPolicy,
    selections: &[&TenantId],
) -> Result<Vec<PathBuf>> {
    font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cumulative = dir.join("cumulative-slots.png");
    let gaps = dir.join("selection-gaps.png");
    cumulative_chart(&cumulative, policy, selections)?;
    gap_chart(&gaps, policy, selections)?;
    Ok(vec![cumulative, gaps])
}

fn cumulative_chart(
    path: &Path,
    policy: &WeightedFairnessPolicy,
    selections: &[&TenantId],
) -> Result<()> {
    let n = selections.len();
    let step = (n / MAX_POINTS).max(1);
    let index: BTreeMap<&TenantId, usize> = policy
        .tenants()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.tenant(), i))
        .collect();
    let mut counts = vec![0u64; policy.tenants().len()];
    let mut series: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0)]; counts.len()];
    for (i, tenant) in selections.iter().enumerate() {
        if let Some(&t) = index.get(tenant) {
            counts[t] += 1;
        }
        if (i + 1) % step == 0 || i + 1 == n {
            for (t, count) in counts.iter().enumerate() {
                series[t].push(((i + 1) as u64, *count));
            }
        }
    }
    let max_y = counts.iter().copied().max().unwrap_or(1).max(1);
    let l = f64::from(policy.cycle_length());

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Cumulative slots per tenant (solid) against entitlement weight/L (dashed), shard {}",
                policy.shard_id()
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0u64..(n as u64).max(1), 0u64..max_y + max_y / 20 + 1)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("reservations since the demo started")
        .y_desc("slots received")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(draw_error)?;
    for (t, weight) in policy.tenants().iter().enumerate() {
        let c = color(t);
        let share = f64::from(weight.weight()) / l;
        chart
            .draw_series(LineSeries::new(
                series[t].iter().copied(),
                c.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label(format!("{} (w={})", weight.tenant(), weight.weight()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        let end = n as u64;
        chart
            .draw_series(DashedLineSeries::new(
                [(0u64, 0u64), (end, (end as f64 * share).round() as u64)],
                6,
                4,
                c.stroke_width(1),
            ))
            .map_err(draw_error)?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(draw_error)?;
    root.present().map_err(draw_error)?;
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
        let paths = write(&dir, &policy, &selections).unwrap();
        for path in &paths {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
