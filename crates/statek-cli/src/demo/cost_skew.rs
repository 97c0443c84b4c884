//! `statek demo --cost-skew` (issue 25 item 8): runs that differ in cost,
//! under slot fairness and under cost fairness, side by side, with no
//! database. Four tenants of weight 1, all backlogged: three cheap ones
//! whose runs work 5 ms and report a cost of 1, one expensive one whose
//! runs work 200 ms and report 40. One `Worker` with
//! [`EXECUTING_RUNS`] executing runs ticks the policy on
//! statek-testing's in-memory reservations and executor (which keep the
//! same ledger as the PostgreSQL run queue, migration V19; no database
//! needed), first in slot mode, then in cost mode (q = 1,
//! C_max = 40, default 40, b_cap = 80). Each side warms up, then measures
//! a window: per tenant, the runs its slots claimed (counted as their
//! handlers start), its share of the executors' time and of the cost
//! served, and its cost served against its entitlement `E = q·|W|/4` over
//! the window's `|W|` slots and its proven slack `B = q·Δ + D·C_max +
//! b_cap` (docs/guarantees.md, "Cost mode: the bound"). The bench's
//! section `cost-skew` runs the same sides ([`run_side`]).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use statek_policy::{
    CostFairness, FairnessUnit, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy,
};
use statek_scheduler::{
    Completed, DurableFairScheduler, Run, RunHandler, RunResult, SchedulerOptions, Worker,
    WorkerOptions,
};
use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations};
use tokio_util::sync::CancellationToken;

use plotters::prelude::*;

use crate::charts::{color, draw_error, font, HEIGHT, WIDTH};
use crate::out::{outln, Report};

/// Executing runs of the Worker (each side).
pub const EXECUTING_RUNS: usize = 8;

/// The tenants: `(name, work per run, cost per run)`.
pub const TENANTS: [(&str, Duration, u64); 4] = [
    ("cheap-1", Duration::from_millis(5), 1),
    ("cheap-2", Duration::from_millis(5), 1),
    ("cheap-3", Duration::from_millis(5), 1),
    ("expensive", Duration::from_millis(200), 40),
];

/// Runs queued per tenant: in cost mode each cheap tenant completes about
/// 400 a second (a quarter of 1,600 cost units a second at 1 unit each).
const BACKLOG_PER_SECOND: u64 = 500;

/// The work and cost of a run of `tenant` (none for another tenant).
#[must_use]
pub fn work(tenant: &str) -> (Duration, u64) {
    TENANTS
        .iter()
        .find(|(name, ..)| *name == tenant)
        .map_or((Duration::ZERO, 0), |(_, work, cost)| (*work, *cost))
}

/// The cost-mode side's parameters: q = 1, C_max = 40 (the expensive
/// tenant's cost), default 40, b_cap = 80.
///
/// # Errors
/// None in practice (the parameters are in range).
pub fn cost_parameters() -> Result<CostFairness> {
    Ok(CostFairness::new(1, 40, 40, 80)?)
}

/// The workload's policy in slot mode: its four tenants, weight 1 each, on
/// shard `shard`.
///
/// # Errors
/// None in practice (the ids and weights are valid).
pub fn policy(shard: &str) -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from(shard)?,
        TENANTS
            .iter()
            .map(|(name, ..)| TenantFairnessWeight::new(TenantId::try_from(*name)?, 1))
            .collect::<Result<Vec<_>, _>>()?,
    )?)
}

/// Per tenant: runs started, runs finished, the finished runs' time.
type Seen = HashMap<String, (u64, u64, Duration)>;

/// Works its tenant's time and reports its cost; counts each tenant's runs
/// as their handlers start (the attempt was just claimed), and the time
/// its handlers took.
#[derive(Clone, Default)]
struct CountedRun {
    seen: Arc<Mutex<Seen>>,
}

impl CountedRun {
    fn snapshot(&self) -> Seen {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn add(&self, tenant: &str, started: u64, finished: u64, took: Duration) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = seen.entry(tenant.to_owned()).or_default();
        entry.0 += started;
        entry.1 += finished;
        entry.2 += took;
    }
}

impl RunHandler for CountedRun {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        let (time, cost) = work(run.tenant.as_str());
        self.add(run.tenant.as_str(), 1, 0, Duration::ZERO);
        let start = Instant::now();
        tokio::time::sleep(time).await;
        self.add(run.tenant.as_str(), 0, 1, start.elapsed());
        Ok(Completed::with_cost(cost))
    }
}

/// One tenant over one side's window.
#[derive(Debug, Clone, Serialize)]
pub struct SkewTenant {
    /// The tenant.
    pub tenant: String,
    /// Runs its slots claimed in the window.
    pub runs: u64,
    /// Its share of the executors' time (runs × work over every tenant's).
    pub executor_share: f64,
    /// Its share of the cost served (runs × cost over every tenant's).
    pub cost_share: f64,
    /// Cost served in the window: runs × its cost, in cost units.
    pub cost_served: u64,
    /// Entitled cost `E = q·|W|·w/L` over the window's slots (q = 1 on
    /// both sides: in slot mode, what cost mode would entitle it to).
    pub entitled_cost: f64,
    /// Its proven slack `B = q·Δ + D·C_max + b_cap`, D = the executing
    /// runs.
    pub bound: f64,
    /// What its runs that finished in the window took on average,
    /// milliseconds (the work asked is 5 or 200 ms: a sleep takes a
    /// little longer, executor time that no cost is reported for).
    pub mean_run_ms: f64,
}

impl SkewTenant {
    /// Its cost served is within `E ± B`.
    #[must_use]
    pub fn within_bound(&self) -> bool {
        (self.cost_served as f64 - self.entitled_cost).abs() <= self.bound
    }
}

/// One side: slot mode or cost mode.
#[derive(Debug, Clone, Serialize)]
pub struct SkewSide {
    /// `slots` or `cost`.
    pub unit: &'static str,
    /// The window, seconds.
    pub seconds: f64,
    /// Slots reserved in the window.
    pub slots: u64,
    /// Cost served per second, all tenants.
    pub cost_per_second: f64,
    /// Per tenant, in [`TENANTS`] order.
    pub tenants: Vec<SkewTenant>,
}

/// Runs one side: the workload in slot mode or in cost mode on a fresh
/// in-memory queue, `warm_up` unmeasured, then a `window`.
///
/// # Errors
/// The Worker failed, or a tenant's backlog ran out inside the window
/// (its share would not be a backlogged tenant's).
pub async fn run_side(cost_mode: bool, warm_up: Duration, window: Duration) -> Result<SkewSide> {
    let cost = cost_parameters()?;
    let slot_policy = policy("demo-cost-skew-v1")?;
    let policy = if cost_mode {
        slot_policy.clone().with_fairness(FairnessUnit::Cost(cost))
    } else {
        slot_policy.clone()
    };
    let handler = CountedRun::default();
    let executor = InMemoryExecutor::new(handler.clone(), InMemoryExecutorOptions::new());
    let backlog = BACKLOG_PER_SECOND * (warm_up + window).as_secs().max(1) + 1_000;
    for (name, ..) in TENANTS {
        let tenant = TenantId::try_from(name)?;
        for _ in 0..backlog {
            executor.enqueue(&tenant, Vec::new())?;
        }
    }
    let source = InMemoryReservations::new();
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        policy.clone(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await?;
    let worker = Worker::new(
        Arc::new(scheduler),
        WorkerOptions::new().concurrency(EXECUTING_RUNS)?,
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    tokio::time::sleep(warm_up).await;
    let shard = policy.shard_id();
    let (from, from_seen, from_slot) = (
        Instant::now(),
        handler.snapshot(),
        source.next_sequence(shard).unwrap_or(0),
    );
    tokio::time::sleep(window).await;
    let (to, to_seen, to_slot) = (
        Instant::now(),
        handler.snapshot(),
        source.next_sequence(shard).unwrap_or(0),
    );
    stop.cancel();
    running.await.context("the Worker's task")??;
    let of = |seen: &Seen, tenant: &str| seen.get(tenant).copied().unwrap_or_default();
    if let Some((name, ..)) = TENANTS
        .iter()
        .find(|(name, ..)| of(&to_seen, name).0 >= backlog)
    {
        bail!("cost-skew: {name}'s backlog of {backlog} runs ran out inside the window");
    }
    let seconds = to.duration_since(from).as_secs_f64();
    let slots = to_slot.saturating_sub(from_slot);
    // Per tenant: runs started in the window, and the mean time of the
    // runs that finished in it.
    let counted: Vec<(&str, u64, f64)> = TENANTS
        .iter()
        .map(|(name, ..)| {
            let (a, b) = (of(&from_seen, name), of(&to_seen, name));
            let finished = b.1 - a.1;
            let took = b.2.saturating_sub(a.2).as_secs_f64() * 1000.0;
            (*name, b.0 - a.0, took / finished.max(1) as f64)
        })
        .collect();
    let time_of = |tenant: &str, runs: u64| work(tenant).0.as_secs_f64() * runs as f64;
    let cost_of = |tenant: &str, runs: u64| work(tenant).1 * runs;
    let total_time: f64 = counted.iter().map(|(t, n, _)| time_of(t, *n)).sum();
    let total_cost: u64 = counted.iter().map(|(t, n, _)| cost_of(t, *n)).sum();
    // q = 1 on both sides; the bound is the cost-mode policy's (slot mode
    // shows how far it strays from it).
    let bounds: Vec<_> = slot_policy
        .with_fairness(FairnessUnit::Cost(cost))
        .cost_bounds()
        .map(Iterator::collect)
        .unwrap_or_default();
    let concurrency = u32::try_from(EXECUTING_RUNS)?;
    let tenants = counted
        .iter()
        .zip(&bounds)
        .map(|((tenant, runs, mean_run_ms), bound)| SkewTenant {
            tenant: (*tenant).to_owned(),
            runs: *runs,
            executor_share: time_of(tenant, *runs) / total_time.max(f64::MIN_POSITIVE),
            cost_share: cost_of(tenant, *runs) as f64 / (total_cost.max(1)) as f64,
            cost_served: cost_of(tenant, *runs),
            entitled_cost: cost.quantum() as f64
                * slots as f64
                * f64::from(bound.discrepancy().weight())
                / f64::from(bound.discrepancy().cycle_length()),
            bound: bound.slack(concurrency),
            mean_run_ms: *mean_run_ms,
        })
        .collect();
    Ok(SkewSide {
        unit: if cost_mode { "cost" } else { "slots" },
        seconds,
        slots,
        cost_per_second: total_cost as f64 / seconds.max(1e-9),
        tenants,
    })
}

/// One check of the demo.
#[derive(Debug, Clone, Serialize)]
pub struct SkewCheck {
    /// What is checked.
    pub what: String,
    /// What was measured.
    pub measured: String,
    /// Whether it holds.
    pub passed: bool,
}

/// The result of `statek demo --cost-skew`.
#[derive(Debug, Clone, Serialize)]
pub struct CostSkewReport {
    /// Slot mode.
    pub slots: SkewSide,
    /// Cost mode.
    pub cost: SkewSide,
    /// The chart, if written.
    pub chart: Option<PathBuf>,
    /// The checks.
    pub checks: Vec<SkewCheck>,
}

impl CostSkewReport {
    /// The checks that failed.
    #[must_use]
    pub fn failed(&self) -> usize {
        self.checks.iter().filter(|c| !c.passed).count()
    }

    /// `Ok` when every check passed.
    ///
    /// # Errors
    /// [`crate::exit::CheckFailed`] naming how many checks failed.
    pub fn into_result(self) -> Result<()> {
        match self.failed() {
            0 => Ok(()),
            failed => Err(crate::exit::CheckFailed(format!("{failed} demo checks failed")).into()),
        }
    }
}

/// The demo's checks of the two sides: slot mode lets the expensive
/// tenant take most of the executors (it would not be worth showing
/// otherwise); cost mode keeps every tenant's cost served within its
/// proven bound.
fn checks(slots: &SkewSide, cost: &SkewSide) -> Vec<SkewCheck> {
    let expensive = |side: &SkewSide| {
        side.tenants
            .iter()
            .find(|t| t.tenant == "expensive")
            .map_or(0.0, |t| t.executor_share)
    };
    let outside: Vec<&str> = cost
        .tenants
        .iter()
        .filter(|t| !t.within_bound())
        .map(|t| t.tenant.as_str())
        .collect();
    vec![
        SkewCheck {
            what: "slot mode: the expensive tenant takes at least 90% of the executors' time"
                .to_owned(),
            measured: format!("{:.1}%", 100.0 * expensive(slots)),
            passed: expensive(slots) >= 0.9,
        },
        SkewCheck {
            what: "cost mode: every tenant's cost served is within its bound E ± B".to_owned(),
            measured: if outside.is_empty() {
                "all 4".to_owned()
            } else {
                format!("outside: {}", outside.join(", "))
            },
            passed: outside.is_empty() && !cost.tenants.is_empty(),
        },
        SkewCheck {
            what: "cost mode: the expensive tenant takes at most a third of the executors' time"
                .to_owned(),
            measured: format!("{:.1}%", 100.0 * expensive(cost)),
            passed: expensive(cost) <= 1.0 / 3.0,
        },
    ]
}

/// Runs both sides (slot mode, then cost mode), writes the chart into
/// `charts_dir` and judges them.
///
/// # Errors
/// A side failed ([`run_side`]), or the chart could not be written.
pub async fn run(warm_up: Duration, window: Duration, charts_dir: &Path) -> Result<CostSkewReport> {
    outln!(
        "cost-skew demo, no database: statek-testing's in-memory executor (the same cost ledger \
         as PostgreSQL's), one Worker with {EXECUTING_RUNS} executing runs"
    )?;
    outln!(
        "four tenants of weight 1, all backlogged: cheap-1..3's runs work 5 ms and cost 1, \
         expensive's work 200 ms and cost 40"
    )?;
    outln!(
        "==> slot mode ({} s warm-up, {} s window)",
        warm_up.as_secs(),
        window.as_secs()
    )?;
    let slots = run_side(false, warm_up, window).await?;
    outln!("==> cost mode (q = 1, C_max = 40, default 40, b_cap = 80)")?;
    let cost = run_side(true, warm_up, window).await?;
    let chart = charts_dir.join("cost-skew.png");
    self::chart(&chart, &slots, &cost)?;
    let checks = checks(&slots, &cost);
    Ok(CostSkewReport {
        slots,
        cost,
        chart: Some(chart),
        checks,
    })
}

impl Report for CostSkewReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "{:<10} | {:>27} | {:>27} | {:>22}",
            "", "slot mode", "cost mode", "cost mode: served − E"
        )?;
        writeln!(
            w,
            "{:<10} | {:>7} {:>10} {:>8} | {:>7} {:>10} {:>8} | {:>10} {:>11}",
            "tenant", "runs", "executors", "cost", "runs", "executors", "cost", "units", "bound ±B"
        )?;
        for (s, c) in self.slots.tenants.iter().zip(&self.cost.tenants) {
            writeln!(
                w,
                "{:<10} | {:>7} {:>9.1}% {:>7.1}% | {:>7} {:>9.1}% {:>7.1}% | {:>+10} {:>11.0}",
                s.tenant,
                s.runs,
                100.0 * s.executor_share,
                100.0 * s.cost_share,
                c.runs,
                100.0 * c.executor_share,
                100.0 * c.cost_share,
                // Rounded first: no "-0".
                (c.cost_served as f64 - c.entitled_cost).round() as i64,
                c.bound
            )?;
        }
        for side in [&self.slots, &self.cost] {
            let took = |name: &str| {
                side.tenants
                    .iter()
                    .find(|t| t.tenant == name)
                    .map_or(0.0, |t| t.mean_run_ms)
            };
            writeln!(
                w,
                "{} mode: {:.0} cost units/s, {} slots in {:.1} s; a run took {:.2} ms (cheap-1, 5 asked), {:.1} ms (expensive, 200 asked)",
                if side.unit == "cost" { "cost" } else { "slot" },
                side.cost_per_second,
                side.slots,
                side.seconds,
                took("cheap-1"),
                took("expensive")
            )?;
        }
        if let Some(chart) = &self.chart {
            writeln!(w, "chart: {}", chart.display())?;
        }
        writeln!(w, "checks:")?;
        for c in &self.checks {
            writeln!(
                w,
                "  [{}] {} ({})",
                if c.passed { "pass" } else { "FAIL" },
                c.what,
                c.measured
            )?;
        }
        Ok(())
    }
}

/// The demo's chart: each tenant's share of the
/// executors' time (left) and of the cost served (right), slot mode and
/// cost mode side by side, against the entitled quarter.
///
/// # Errors
/// The file cannot be written.
fn chart(path: &Path, slots: &SkewSide, cost: &SkewSide) -> Result<()> {
    font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let halves = root.split_evenly((1, 2));
    let tenants = slots.tenants.len().max(1);
    type Share = fn(&SkewTenant) -> f64;
    let panels: [(&str, Share); 2] = [
        ("share of the executors' time", |t| t.executor_share),
        ("share of the cost served", |t| t.cost_share),
    ];
    for (area, (title, share)) in halves.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..(3 * tenants) as f64, 0f64..100f64)
            .map_err(draw_error)?;
        let names: Vec<String> = slots.tenants.iter().map(|t| t.tenant.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            // Key points every half unit: a tenant's name under the
            // middle of its pair of bars, at 3·i + 1.5.
            .x_labels(6 * tenants + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x.fract() - 0.5).abs() < 1e-6 && i % 3 == 1 {
                    names.get(i / 3).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("%")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(draw_error)?;
        for (k, (side, label)) in [(slots, "slot mode"), (cost, "cost mode")]
            .into_iter()
            .enumerate()
        {
            let c = color(k);
            chart
                .draw_series(side.tenants.iter().enumerate().map(|(i, t)| {
                    let x = (3 * i + k) as f64 + 0.5;
                    Rectangle::new([(x, 0.0), (x + 0.9, 100.0 * share(t))], c.filled())
                }))
                .map_err(draw_error)?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        chart
            .draw_series(LineSeries::new(
                [(0.0, 25.0), ((3 * tenants) as f64, 25.0)],
                BLACK.stroke_width(1),
            ))
            .map_err(draw_error)?
            .label("entitled (25%)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str, executor_share: f64, served: u64, entitled: f64) -> SkewTenant {
        SkewTenant {
            tenant: name.to_owned(),
            runs: 1,
            executor_share,
            cost_share: 0.25,
            cost_served: served,
            entitled_cost: entitled,
            bound: 400.0,
            mean_run_ms: 5.0,
        }
    }

    fn side(unit: &'static str, tenants: Vec<SkewTenant>) -> SkewSide {
        SkewSide {
            unit,
            seconds: 20.0,
            slots: 32_000,
            cost_per_second: 1_600.0,
            tenants,
        }
    }

    /// The checks pass on the shares the workload is built for and fail
    /// one by one: slot mode fair by executor time, a tenant outside its
    /// bound, the expensive tenant above a third in cost mode.
    #[test]
    fn the_checks_judge_each_side() {
        let skewed = side(
            "slots",
            vec![
                tenant("cheap-1", 0.023, 700, 8_000.0),
                tenant("expensive", 0.93, 28_000, 8_000.0),
            ],
        );
        let fair = side(
            "cost",
            vec![
                tenant("cheap-1", 0.25, 8_000, 8_000.0),
                tenant("expensive", 0.25, 7_700, 8_000.0),
            ],
        );
        let passed = |c: Vec<SkewCheck>| c.iter().map(|c| c.passed).collect::<Vec<_>>();
        assert_eq!(passed(checks(&skewed, &fair)), [true, true, true]);
        // 7,599 is 401 below 8,000: outside ±400.
        let outside = side(
            "cost",
            vec![
                tenant("cheap-1", 0.25, 8_000, 8_000.0),
                tenant("expensive", 0.25, 7_599, 8_000.0),
            ],
        );
        let judged = checks(&skewed, &outside);
        assert_eq!(passed(judged.clone()), [true, false, true]);
        assert_eq!(judged[1].measured, "outside: expensive");
        let greedy = side(
            "cost",
            vec![
                tenant("cheap-1", 0.5, 8_000, 8_000.0),
                tenant("expensive", 0.34, 8_000, 8_000.0),
            ],
        );
        assert_eq!(passed(checks(&fair, &greedy)), [false, true, false]);
    }

    #[test]
    fn the_cost_skew_chart_is_written_as_png() {
        let side = |unit, shares: [f64; 2]| SkewSide {
            unit,
            seconds: 1.0,
            slots: 100,
            cost_per_second: 1.0,
            tenants: ["cheap-1", "expensive"]
                .into_iter()
                .zip(shares)
                .map(|(tenant, share)| SkewTenant {
                    tenant: tenant.to_owned(),
                    runs: 1,
                    executor_share: share,
                    cost_share: share,
                    cost_served: 1,
                    entitled_cost: 1.0,
                    bound: 1.0,
                    mean_run_ms: 1.0,
                })
                .collect(),
        };
        let dir = std::env::temp_dir().join(format!("statek-skew-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cost-skew.png");
        chart(
            &path,
            &side("slots", [0.07, 0.93]),
            &side("cost", [0.5, 0.5]),
        )
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
