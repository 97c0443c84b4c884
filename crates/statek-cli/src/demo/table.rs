//! The demo's tables and summary: the statek side's order (slots against
//! entitlement, gaps against bounds) and what each tenant got under statek
//! against the plain FIFO queue.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::Serialize;
use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::TenantTickOutcome;

use super::fair_side::FairSide;
use super::service::{percentile, percentiles, SideEvidence};
use super::workload::Workload;

/// Per-tenant slot figures of the statek side.
#[derive(Default)]
struct Slots {
    slots: u64,
    executed: u64,
    idle: u64,
    contended: u64,
    /// Failed, cancelled, or no outcome (the tick failed after reserving).
    other: u64,
    max_gap: u64,
}

fn slots(policy: &WeightedFairnessPolicy, fair: &FairSide) -> BTreeMap<TenantId, Slots> {
    let mut out: BTreeMap<TenantId, Slots> = policy
        .tenants()
        .iter()
        .map(|t| (t.tenant().clone(), Slots::default()))
        .collect();
    let mut last: HashMap<TenantId, u64> = HashMap::new();
    for row in &fair.rows {
        let Some(tenant) = policy.tenant_for_slot(u64::from(row.slot())) else {
            continue;
        };
        let Some(entry) = out.get_mut(tenant) else {
            continue;
        };
        entry.slots += 1;
        entry.other += 1;
        if let Some(prev) = last.insert(tenant.clone(), row.sequence()) {
            entry.max_gap = entry.max_gap.max(row.sequence() - prev);
        }
    }
    for tick in &fair.ticks {
        let Some(entry) = out.get_mut(tick.tenant()) else {
            continue;
        };
        match tick.tenant_outcome() {
            TenantTickOutcome::Executed(_) => entry.executed += 1,
            TenantTickOutcome::Idle => entry.idle += 1,
            TenantTickOutcome::Contended => entry.contended += 1,
            _ => continue,
        }
        entry.other = entry.other.saturating_sub(1);
    }
    out
}

/// One tenant of the statek side's order table.
#[derive(Serialize)]
struct OrderRow {
    tenant: String,
    weight: u32,
    /// `backlog`, `trickle` or `no runs`.
    workload: &'static str,
    /// weight / L, in percent.
    entitled_percent: f64,
    /// The tenant's slots / all slots, in percent.
    received_percent: f64,
    slots: u64,
    /// Runs executed in its slots.
    runs: u64,
    idle: u64,
    contended: u64,
    other: u64,
    /// Largest gap between its slots, in reservations.
    max_gap: u64,
    /// Its starvation bound, in reservations.
    bound: u32,
    /// Lag p50/p99 in reservations (`-` without runs).
    lag: String,
}

/// The statek side's order: slots against entitlement, gaps against
/// bounds, per tenant.
#[derive(Serialize)]
pub struct OrderTable {
    rows: Vec<OrderRow>,
}

impl OrderTable {
    /// The table of the statek side.
    pub fn new(
        policy: &WeightedFairnessPolicy,
        workload: &Workload,
        fair: &FairSide,
        statek: &SideEvidence,
    ) -> Self {
        let slots = slots(policy, fair);
        let service = statek.service();
        let total = fair.rows.len().max(1) as f64;
        let l = f64::from(policy.cycle_length());
        let rows = policy
            .tenants()
            .iter()
            .filter_map(|t| {
                let s = slots.get(t.tenant())?;
                Some(OrderRow {
                    tenant: t.tenant().to_string(),
                    weight: t.weight(),
                    workload: workload.role(t.tenant()),
                    entitled_percent: 100.0 * f64::from(t.weight()) / l,
                    received_percent: 100.0 * s.slots as f64 / total,
                    slots: s.slots,
                    runs: s.executed,
                    idle: s.idle,
                    contended: s.contended,
                    other: s.other,
                    max_gap: s.max_gap,
                    bound: policy
                        .starvation_bound(t.tenant())
                        .map(|b| b.maximum_reservations_until_selection())
                        .unwrap_or(0),
                    lag: service
                        .get(t.tenant())
                        .map(|s| percentiles(&s.lag_reservations))
                        .unwrap_or_else(|| "-".into()),
                })
            })
            .collect();
        Self { rows }
    }

    /// The table, after an empty line.
    pub fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w)?;
        writeln!(w, "statek: slots and gaps per tenant")?;
        writeln!(
            w,
            "{:<12} {:>6} {:<8} {:>8} {:>8} {:>7} {:>6} {:>15} {:>7} {:>5} {:>13}",
            "tenant",
            "weight",
            "workload",
            "entitled",
            "received",
            "slots",
            "runs",
            "idle/cont/other",
            "max gap",
            "bound",
            "lag p50/p99 r"
        )?;
        for r in &self.rows {
            writeln!(
                w,
                "{:<12} {:>6} {:<8} {:>7.2}% {:>7.2}% {:>7} {:>6} {:>15} {:>7} {:>5} {:>13}",
                r.tenant,
                r.weight,
                r.workload,
                r.entitled_percent,
                r.received_percent,
                r.slots,
                r.runs,
                format!("{}/{}/{}", r.idle, r.contended, r.other),
                r.max_gap,
                r.bound,
                r.lag,
            )?;
        }
        writeln!(
            w,
            "(entitled = weight / L; received = slots / all slots; other = failed, cancelled at shutdown or \
             lost to an error after reserving; max gap, bound and lag r in reservations)"
        )
    }
}

fn seconds(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".into(), |ms| format!("{:.2}", ms / 1000.0))
}

/// One tenant under statek and under the plain FIFO queue.
#[derive(Serialize)]
struct ComparisonRow {
    tenant: String,
    workload: &'static str,
    /// Runs enqueued for the tenant.
    runs: u64,
    /// Lag p50/p99 in database milliseconds, each side.
    statek_lag_ms: String,
    fifo_lag_ms: String,
    /// Last completion, seconds after the workers started (`-` without
    /// completions), each side.
    statek_done_s: String,
    fifo_done_s: String,
}

/// The backlog tenant's throughput on one side while the workers were
/// saturated.
#[derive(Serialize)]
struct Throughput {
    runs: u64,
    runs_per_second: f64,
    seconds: f64,
}

/// What each tenant got under statek against the plain FIFO queue, and the
/// summary: the small tenants' p99 service lag on both sides, and the
/// throughput while the workers were saturated.
#[derive(Serialize)]
pub struct Comparison {
    rows: Vec<ComparisonRow>,
    /// The trickle tenants' pooled p99 lag in milliseconds, statek and
    /// FIFO (null when a side has none).
    small_tenants_p99_ms: Option<(f64, f64)>,
    backlog_tenant: String,
    statek: Throughput,
    fifo: Throughput,
}

impl Comparison {
    /// Compares the two sides.
    pub fn new(
        policy: &WeightedFairnessPolicy,
        workload: &Workload,
        statek: &SideEvidence,
        fifo: &SideEvidence,
    ) -> Self {
        let (fair, plain) = (statek.service(), fifo.service());
        let rows = policy
            .tenants()
            .iter()
            .filter_map(|t| {
                let (f, p) = (fair.get(t.tenant())?, plain.get(t.tenant())?);
                Some(ComparisonRow {
                    tenant: t.tenant().to_string(),
                    workload: workload.role(t.tenant()),
                    runs: f.enqueued,
                    statek_lag_ms: percentiles(&f.lag_ms),
                    fifo_lag_ms: percentiles(&p.lag_ms),
                    statek_done_s: seconds(f.completed_ms.last().copied()),
                    fifo_done_s: seconds(p.completed_ms.last().copied()),
                })
            })
            .collect();
        let small = &workload.trickle_tenants;
        let fair_p99 = percentile(&statek.pooled_lag_ms(small), 99.0);
        let plain_p99 = percentile(&fifo.pooled_lag_ms(small), 99.0);
        let backlog = &workload.backlog_tenant;
        let throughput = |side: &SideEvidence| {
            let (runs, runs_per_second, seconds) = side.throughput(backlog);
            Throughput {
                runs,
                runs_per_second,
                seconds,
            }
        };
        Self {
            rows,
            small_tenants_p99_ms: fair_p99.zip(plain_p99),
            backlog_tenant: backlog.to_string(),
            statek: throughput(statek),
            fifo: throughput(fifo),
        }
    }

    /// The table and the summary, after an empty line.
    pub fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w)?;
        writeln!(w, "statek against the plain FIFO SKIP LOCKED queue (same workload, workers, concurrency and handler)")?;
        writeln!(
            w,
            "{:<12} {:<8} {:>6} {:>17} {:>17} {:>14} {:>14}",
            "tenant",
            "workload",
            "runs",
            "statek lag p50/99",
            "FIFO lag p50/99",
            "statek done s",
            "FIFO done s"
        )?;
        for r in &self.rows {
            writeln!(
                w,
                "{:<12} {:<8} {:>6} {:>17} {:>17} {:>14} {:>14}",
                r.tenant,
                r.workload,
                r.runs,
                r.statek_lag_ms,
                r.fifo_lag_ms,
                r.statek_done_s,
                r.fifo_done_s,
            )?;
        }
        writeln!(
            w,
            "(lag = from runnable to claim, database milliseconds; done = last completion, seconds after \
             the workers started)"
        )?;
        writeln!(w)?;
        if let Some((f, p)) = self.small_tenants_p99_ms {
            writeln!(
                w,
                "summary: the small tenants' p99 service lag was {f:.0} ms under statek and {p:.0} ms under \
                 FIFO: {}",
                lag_verdict(f, p)
            )?;
        }
        let (backlog, fair, plain) = (&self.backlog_tenant, &self.statek, &self.fifo);
        writeln!(
            w,
            "summary: throughput until {backlog}'s backlog was done: {:.0} runs/s under statek \
             ({} runs in {:.2} s) and {:.0} runs/s under FIFO ({} runs \
             in {:.2} s): statek ran at {:.2}x the FIFO queue's rate",
            fair.runs_per_second,
            fair.runs,
            fair.seconds,
            plain.runs_per_second,
            plain.runs,
            plain.seconds,
            fair.runs_per_second / plain.runs_per_second.max(1e-9)
        )
    }
}

/// Which side served the small tenants sooner, and by how much: the
/// larger p99 lag over the smaller (each at least 1 ms), whole above 10,
/// one decimal below.
fn lag_verdict(statek_ms: f64, fifo_ms: f64) -> String {
    let (statek_ms, fifo_ms) = (statek_ms.max(1.0), fifo_ms.max(1.0));
    let ratio = |longer: f64, shorter: f64| {
        let r = longer / shorter;
        if r >= 10.0 {
            format!("{r:.0}x")
        } else {
            format!("{r:.1}x")
        }
    };
    if statek_ms < fifo_ms {
        format!("{} faster with statek", ratio(fifo_ms, statek_ms))
    } else if fifo_ms < statek_ms {
        format!("{} slower with statek", ratio(statek_ms, fifo_ms))
    } else {
        "the same under both".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::lag_verdict;

    #[test]
    fn the_lag_verdict_names_the_faster_side() {
        assert_eq!(lag_verdict(52.0, 1761.0), "34x faster with statek");
        assert_eq!(lag_verdict(40.0, 100.0), "2.5x faster with statek");
        // A trial's run where statek was slower printed "1x faster".
        assert_eq!(lag_verdict(19.0, 17.0), "1.1x slower with statek");
        assert_eq!(lag_verdict(300.0, 10.0), "30x slower with statek");
        assert_eq!(lag_verdict(0.0, 0.4), "the same under both");
    }
}
