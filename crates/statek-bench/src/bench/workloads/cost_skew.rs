//! Section `cost-skew` (issue 25 item 7): runs that differ in cost. Four
//! tenants of weight 1, all backlogged; `expensive`'s runs work 200 ms and
//! report a cost of 40, the three cheap tenants' 5 ms and 1. A fixed
//! concurrency ([`EXECUTING_RUNS`]) keeps every side bound by its
//! executors, not by the database. Five sides, interleaved per sample: the
//! fair Worker on PostgreSQL in slot mode and in cost mode (migration V19;
//! q = 1, C_max = 40, default 40, b_cap = 80, a shard of its own), the
//! batched plain (FIFO) queue, and the same workload without a database on
//! statek-testing's in-memory executor in slot mode and in cost mode
//! (`statek demo --cost-skew`'s sides, statek-cli's
//! `demo::cost_skew::run_side`). Each tenant's share of executor time and
//! of cost served over the window is reported (on PostgreSQL from the run
//! rows finished in it, on the fair sides also from the costs their
//! finishes recorded, which must agree; in memory from the runs whose
//! handlers started in it, with each tenant's cost served judged against
//! its proven bound `E ± B`, docs/guarantees.md "Cost mode: the bound").
//!
//! Slot mode gives every tenant a quarter of the slots, so a quarter of
//! the runs: `expensive` takes 200 / 215 of the executors and 40 / 43 of
//! the cost. Cost mode holds it near a quarter of the cost.

use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use statek_cli::demo::cost_skew as demo_skew;
use statek_policy::WeightedFairnessPolicy;
use statek_scheduler::{Completed, Run, RunHandler, RunResult};
use statek_store_pg::baseline::PlainFifoRun;
use tokio_util::sync::CancellationToken;

use super::results::DbWork;
use super::{batched, db_work, fair, feeder, window};

/// Executing runs per side (the demo's).
pub const EXECUTING_RUNS: usize = demo_skew::EXECUTING_RUNS;

/// The tenants: `(name, work per run, cost per run)`, the demo's.
const TENANTS: [(&str, Duration, u64); 4] = demo_skew::TENANTS;

/// Runs queued per tenant when a side starts: about ten times what a side
/// completes per tenant in a window (37 a second each).
const BACKLOG: u64 = 4_000;

/// Unmeasured time between a side's start and its window.
const WARM_UP: Duration = Duration::from_secs(2);

/// The measured window (ten of `expensive`'s runs per executor).
pub const WINDOW: Duration = Duration::from_secs(20);

const FAIR: &str = "fair (slots)";
const FAIR_COST: &str = "fair (cost)";
const FIFO: &str = "batched FIFO";
const MEMORY_SLOTS: &str = "in-memory (slots)";
const MEMORY_COST: &str = "in-memory (cost)";

/// Every side, in the order each sample runs them.
const SIDES: [&str; 5] = [FAIR, FAIR_COST, FIFO, MEMORY_SLOTS, MEMORY_COST];

/// Runs queued per tenant for the PostgreSQL cost-mode side: each cheap
/// tenant completes about 400 a second there.
const COST_BACKLOG: u64 = 12_000;

/// The work and cost of a run of `tenant`.
fn work(tenant: &str) -> (Duration, u64) {
    demo_skew::work(tenant)
}

/// The section's policy: its four tenants, weight 1 each.
fn policy() -> Result<WeightedFairnessPolicy> {
    demo_skew::policy("bench-cost-skew-v1")
}

/// The fair side's handler: works its tenant's time, reports its cost.
struct CostlyRun;

impl RunHandler for CostlyRun {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        let (time, cost) = work(run.tenant.as_str());
        tokio::time::sleep(time).await;
        Ok(Completed::with_cost(cost))
    }
}

/// One tenant in one sample of one side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantShare {
    /// The tenant.
    pub tenant: String,
    /// Runs it completed in the window.
    pub runs: i64,
    /// Its share of the executors' time: its runs × their work, over every
    /// tenant's.
    pub executor_share: f64,
    /// Its share of the cost served: its runs × their cost, over every
    /// tenant's.
    pub cost_share: f64,
    /// The costs its finishes recorded (`statek.runs.claim_cost`; the
    /// FIFO queue records none).
    pub recorded_cost: Option<i64>,
    /// In-memory sides: its entitled cost `E = q·|W|·w/L` over the
    /// window's slots (q = 1 on both: in slot mode what cost mode would
    /// entitle it to).
    #[serde(default)]
    pub entitled_cost: Option<f64>,
    /// In-memory sides: its proven slack `B = q·Δ + D·C_max + b_cap`.
    #[serde(default)]
    pub bound: Option<f64>,
}

/// One sample of one side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostSkewSample {
    /// `fair (slots)` or `batched FIFO`.
    pub side: String,
    /// 0-based sample number.
    pub sample: u32,
    /// The window, seconds (database clock).
    pub seconds: f64,
    /// Cost served per second, all tenants.
    pub cost_per_second: f64,
    /// In-memory sides: the slots reserved in the window.
    #[serde(default)]
    pub slots: Option<u64>,
    /// Per tenant.
    pub tenants: Vec<TenantShare>,
    /// The database's work per completed run over the side's life (a
    /// PostgreSQL side: WAL, rows, server time; `CHECKPOINT` before it).
    #[serde(default)]
    pub work: Option<DbWork>,
}

/// The section's results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CostSkew {
    /// Executing runs per side.
    pub executing_runs: usize,
    /// Seconds per window.
    pub window_seconds: u64,
    /// Every sample, in the order they ran.
    pub samples: Vec<CostSkewSample>,
}

/// Runs the section on the server of `url` (a migrated database):
/// `samples` samples of each side, interleaved.
pub async fn run(url: &str, samples: u32) -> Result<CostSkew> {
    let client = crate::bench::connection::connect(url).await?;
    // Server time per run comes from it (the bench's servers load it).
    crate::pg::enable_statement_statistics(&client).await;
    let policy = policy()?;
    let cost_policy = demo_skew::policy("bench-cost-skew-cost-v1")?.with_fairness(
        statek_policy::FairnessUnit::Cost(demo_skew::cost_parameters()?),
    );
    let mut out = CostSkew {
        executing_runs: EXECUTING_RUNS,
        window_seconds: WINDOW.as_secs(),
        samples: Vec::new(),
    };
    for sample in 0..samples {
        for side in SIDES {
            eprintln!(
                "==> cost-skew: {side}, sample {} of {samples}, {EXECUTING_RUNS} executing runs",
                sample + 1
            );
            let measured = match side {
                MEMORY_SLOTS => in_memory(false, sample).await?,
                MEMORY_COST => in_memory(true, sample).await?,
                FAIR_COST => measure(url, &client, &cost_policy, side, sample).await?,
                _ => measure(url, &client, &policy, side, sample).await?,
            };
            for t in &measured.tenants {
                eprintln!(
                    "    {:<10} {:>5} runs, executor time {:>5.1}%, cost {:>5.1}%",
                    t.tenant,
                    t.runs,
                    100.0 * t.executor_share,
                    100.0 * t.cost_share
                );
            }
            out.samples.push(measured);
        }
    }
    Ok(out)
}

/// One sample of one side: load, start, warm up, measure the window, stop.
async fn measure(
    url: &str,
    client: &tokio_postgres::Client,
    policy: &WeightedFairnessPolicy,
    side: &str,
    sample: u32,
) -> Result<CostSkewSample> {
    let queued = if side == FAIR_COST {
        COST_BACKLOG
    } else {
        BACKLOG
    };
    let backlog: Vec<(String, u64)> = TENANTS
        .iter()
        .map(|(name, ..)| ((*name).to_owned(), queued))
        .collect();
    feeder::load(client, &backlog).await?;
    let shard = policy.shard_id().to_string();
    super::checkpoint(client).await;
    let keep = window::sessions(client).await?;
    let work_before = db_work::read(client).await?;
    let born = window::edge(client, &shard).await?;
    let stop = CancellationToken::new();
    let fair_side = if side == FAIR || side == FAIR_COST {
        Some(fair::start_with(url, policy, EXECUTING_RUNS, CostlyRun, stop.clone()).await?)
    } else {
        None
    };
    let fifo_side = if side == FIFO {
        let work = |run: &PlainFifoRun| {
            let (time, _) = work(run.tenant.as_str());
            async move { tokio::time::sleep(time).await }
        };
        Some(
            batched::start_with(url, EXECUTING_RUNS, work, stop.clone())
                .await?
                .0,
        )
    } else {
        None
    };
    tokio::time::sleep(WARM_UP).await;
    let from = window::edge(client, &shard).await?;
    tokio::time::sleep(WINDOW).await;
    let to = window::edge(client, &shard).await?;
    let tenants: Vec<String> = backlog.iter().map(|(tenant, _)| tenant.clone()).collect();
    let left = window::available_of(client, &tenants).await?;
    stop.cancel();
    if let Some(fair_side) = fair_side {
        fair_side.join().await?;
    }
    if let Some(mut tasks) = fifo_side {
        while let Some(done) = tasks.join_next().await {
            done??;
        }
    }
    window::sessions_gone(client, &keep).await?;
    let work_after = db_work::read(client).await?;
    let died = window::edge(client, &shard).await?;
    if left.contains(&0) {
        bail!("cost-skew: a tenant's backlog of {queued} ran out inside the window ({left:?})");
    }
    let rows = client
        .query(
            "SELECT tenant_id, count(*) AS runs, sum(claim_cost)::bigint AS recorded
             FROM statek.runs
             WHERE state = 'completed' AND finished_at >= $1 AND finished_at < $2
             GROUP BY tenant_id ORDER BY tenant_id",
            &[&from.at, &to.at],
        )
        .await?;
    let mut counted = Vec::new();
    for row in &rows {
        let tenant: String = row.try_get("tenant_id")?;
        let runs: i64 = row.try_get("runs")?;
        let recorded: Option<i64> = row.try_get("recorded")?;
        counted.push((tenant, runs, recorded));
    }
    let seconds = window::seconds(&from, &to);
    let lifetime_runs = window::completed(client, &born, &died).await?;
    let mut measured = shares(side, sample, seconds, &counted)?;
    measured.work = db_work::per_run(&work_before, &work_after, lifetime_runs);
    Ok(measured)
}

/// One sample of an in-memory side: statek-cli's `demo --cost-skew` side
/// (the same tenants, executing runs, warm-up and window, on
/// `InMemoryReservations` and `InMemoryExecutor` with a Worker), in slot
/// mode or in cost mode.
async fn in_memory(cost_mode: bool, sample: u32) -> Result<CostSkewSample> {
    let side = if cost_mode { MEMORY_COST } else { MEMORY_SLOTS };
    let measured = demo_skew::run_side(cost_mode, WARM_UP, WINDOW).await?;
    let counted: Vec<(String, i64, Option<i64>)> = measured
        .tenants
        .iter()
        .map(|t| {
            let runs = i64::try_from(t.runs)?;
            let cost = i64::try_from(t.cost_served)?;
            Ok((t.tenant.clone(), runs, Some(cost)))
        })
        .collect::<Result<_>>()?;
    let mut sample = shares(side, sample, measured.seconds, &counted)?;
    sample.slots = Some(measured.slots);
    for (share, t) in sample.tenants.iter_mut().zip(&measured.tenants) {
        share.entitled_cost = Some(t.entitled_cost);
        share.bound = Some(t.bound);
    }
    Ok(sample)
}

/// Each tenant's shares from `(tenant, runs, recorded cost)`. On the fair
/// side every finish records its cost: the recorded sum must be the runs
/// times the tenant's cost.
fn shares(
    side: &str,
    sample: u32,
    seconds: f64,
    counted: &[(String, i64, Option<i64>)],
) -> Result<CostSkewSample> {
    let time_of = |tenant: &str, runs: i64| work(tenant).0.as_secs_f64() * runs as f64;
    let cost_of = |tenant: &str, runs: i64| work(tenant).1 as f64 * runs as f64;
    let total_time: f64 = counted.iter().map(|(t, n, _)| time_of(t, *n)).sum();
    let total_cost: f64 = counted.iter().map(|(t, n, _)| cost_of(t, *n)).sum();
    let mut tenants = Vec::new();
    for (tenant, runs, recorded) in counted {
        let expected = i64::try_from(work(tenant).1)? * runs;
        if (side == FAIR || side == FAIR_COST) && *recorded != Some(expected) {
            bail!(
                "cost-skew: {tenant}'s finishes recorded {recorded:?} cost units for {runs} runs \
                 of {} each",
                work(tenant).1
            );
        }
        tenants.push(TenantShare {
            tenant: tenant.clone(),
            runs: *runs,
            executor_share: time_of(tenant, *runs) / total_time.max(f64::MIN_POSITIVE),
            cost_share: cost_of(tenant, *runs) / total_cost.max(f64::MIN_POSITIVE),
            recorded_cost: *recorded,
            entitled_cost: None,
            bound: None,
        });
    }
    Ok(CostSkewSample {
        side: side.to_owned(),
        sample,
        seconds,
        cost_per_second: total_cost / seconds.max(1e-9),
        slots: None,
        work: None,
        tenants,
    })
}

impl CostSkew {
    /// Prints the medians per side and tenant.
    pub fn print(&self) {
        if self.samples.is_empty() {
            return;
        }
        println!(
            "cost-skew ({} executing runs, {} s windows; medians of {} samples): share of executor time / of cost served (entitled: 25% each)",
            self.executing_runs,
            self.window_seconds,
            self.samples.len() / SIDES.len()
        );
        for side in SIDES {
            let of_side: Vec<&CostSkewSample> =
                self.samples.iter().filter(|s| s.side == side).collect();
            let rate = median(of_side.iter().map(|s| s.cost_per_second).collect());
            match work_medians(&of_side) {
                Some((wal, server, rows)) => println!(
                    "  {side}: {rate:.0} cost units/s; per run: {wal:.0} WAL bytes, {server:.3} ms server time, {rows:.2} rows written"
                ),
                None => println!("  {side}: {rate:.0} cost units/s"),
            }
            for (name, ..) in TENANTS {
                let pick = |f: fn(&TenantShare) -> f64| {
                    median(
                        of_side
                            .iter()
                            .filter_map(|s| s.tenants.iter().find(|t| t.tenant == name))
                            .map(f)
                            .collect(),
                    )
                };
                let served = |t: &TenantShare| t.runs as f64 * work(&t.tenant).1 as f64;
                let judged = of_side
                    .iter()
                    .filter_map(|s| s.tenants.iter().find(|t| t.tenant == name))
                    .filter_map(|t| Some((served(t), t.entitled_cost?, t.bound?)))
                    .collect::<Vec<_>>();
                let within = judged
                    .iter()
                    .filter(|(s, e, b)| (*s - *e).abs() <= *b)
                    .count();
                let bound = if judged.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", cost served − entitled {:+.0} (bound ±{:.0}; within it in {within} of {} samples)",
                        // Rounded first, so that −0.3 prints as +0, not -0.
                        median(judged.iter().map(|(s, e, _)| s - e).collect()).round() + 0.0,
                        median(judged.iter().map(|(_, _, b)| *b).collect()),
                        judged.len()
                    )
                };
                println!(
                    "    {name:<10} executor time {:>5.1}%, cost {:>5.1}%{bound}",
                    100.0 * pick(|t| t.executor_share),
                    100.0 * pick(|t| t.cost_share)
                );
            }
        }
        let of = |side: &str| {
            let samples: Vec<&CostSkewSample> =
                self.samples.iter().filter(|s| s.side == side).collect();
            work_medians(&samples)
        };
        if let (Some(slots), Some(cost)) = (of(FAIR), of(FAIR_COST)) {
            println!(
                "  database work per run, cost mode / slot mode (PostgreSQL, medians): WAL {:.2}x, server time {:.2}x, rows written {:.2}x",
                cost.0 / slots.0.max(f64::MIN_POSITIVE),
                cost.1 / slots.1.max(f64::MIN_POSITIVE),
                cost.2 / slots.2.max(f64::MIN_POSITIVE)
            );
        }
    }
}

/// Medians over `samples` of the database's work per run: WAL bytes,
/// server milliseconds (execution and planning), rows written (inserted,
/// updated, deleted). `None` for a side without a database.
fn work_medians(samples: &[&CostSkewSample]) -> Option<(f64, f64, f64)> {
    let works: Vec<&DbWork> = samples.iter().filter_map(|s| s.work.as_ref()).collect();
    if works.is_empty() {
        return None;
    }
    Some((
        median(works.iter().map(|w| w.wal_bytes).collect()),
        median(
            works
                .iter()
                .map(|w| w.exec_ms.unwrap_or(0.0) + w.plan_ms.unwrap_or(0.0))
                .collect(),
        ),
        median(
            works
                .iter()
                .map(|w| w.inserted + w.updated + w.deleted)
                .collect(),
        ),
    ))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal runs per tenant (slot fairness): `expensive` takes 200/215 of
    /// the executors and 40/43 of the cost; a recorded cost that is not
    /// runs × cost fails the fair side.
    #[test]
    fn equal_runs_give_the_expensive_tenant_most_of_the_time_and_cost() {
        let counted: Vec<(String, i64, Option<i64>)> = TENANTS
            .iter()
            .map(|(name, _, cost)| ((*name).to_owned(), 10, Some(10 * *cost as i64)))
            .collect();
        let sample = shares(FAIR, 0, 2.0, &counted).unwrap();
        let expensive = &sample.tenants[3];
        assert_eq!(expensive.tenant, "expensive");
        assert!((expensive.executor_share - 200.0 / 215.0).abs() < 1e-12);
        assert!((expensive.cost_share - 40.0 / 43.0).abs() < 1e-12);
        assert!((sample.tenants[0].cost_share - 1.0 / 43.0).abs() < 1e-12);
        assert_eq!(sample.cost_per_second, 430.0 / 2.0);
        let mut wrong = counted.clone();
        wrong[3].2 = Some(399);
        assert_eq!(
            shares(FAIR, 0, 2.0, &wrong).unwrap_err().to_string(),
            "cost-skew: expensive's finishes recorded Some(399) cost units for 10 runs of 40 each"
        );
        // The FIFO queue records no cost: nothing to check.
        assert!(shares(FIFO, 0, 2.0, &[("expensive".into(), 3, None)]).is_ok());
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
    }
}
