//! The demo's tables and summary: the statek side's order (slots against
//! entitlement, gaps against bounds) and what each tenant got under statek
//! against the plain FIFO queue.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::TenantTickOutcome;

use super::fair_side::FairSide;
use super::service::{percentile, percentiles, SideEvidence};
use super::workload::Workload;
use crate::out::outln;

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

/// Prints the statek side's order table.
pub fn print_order(
    policy: &WeightedFairnessPolicy,
    workload: &Workload,
    fair: &FairSide,
    statek: &SideEvidence,
) -> Result<()> {
    let slots = slots(policy, fair);
    let service = statek.service();
    let total = fair.rows.len().max(1) as f64;
    let l = f64::from(policy.cycle_length());
    outln!()?;
    outln!("statek: slots and gaps per tenant")?;
    outln!(
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
    for t in policy.tenants() {
        let Some(s) = slots.get(t.tenant()) else {
            continue;
        };
        let bound = policy
            .starvation_bound(t.tenant())
            .map(|b| b.maximum_reservations_until_selection())
            .unwrap_or(0);
        let lag = service
            .get(t.tenant())
            .map(|s| percentiles(&s.lag_reservations))
            .unwrap_or_else(|| "-".into());
        outln!(
            "{:<12} {:>6} {:<8} {:>7.2}% {:>7.2}% {:>7} {:>6} {:>15} {:>7} {:>5} {:>13}",
            t.tenant().as_str(),
            t.weight(),
            workload.role(t.tenant()),
            100.0 * f64::from(t.weight()) / l,
            100.0 * s.slots as f64 / total,
            s.slots,
            s.executed,
            format!("{}/{}/{}", s.idle, s.contended, s.other),
            s.max_gap,
            bound,
            lag,
        )?;
    }
    outln!(
        "(entitled = weight / L; received = slots / all slots; other = failed, cancelled at shutdown or \
         lost to an error after reserving; max gap, bound and lag r in reservations)"
    )?;
    Ok(())
}

fn seconds(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".into(), |ms| format!("{:.2}", ms / 1000.0))
}

/// Prints what each tenant got under statek and under the plain FIFO
/// queue, and the summary: the small tenants' p99 service lag on both
/// sides, and the throughput while the workers were saturated.
pub fn print_comparison(
    policy: &WeightedFairnessPolicy,
    workload: &Workload,
    statek: &SideEvidence,
    fifo: &SideEvidence,
) -> Result<()> {
    let (fair, plain) = (statek.service(), fifo.service());
    outln!()?;
    outln!("statek against the plain FIFO SKIP LOCKED queue (same workload, workers, concurrency and handler)")?;
    outln!(
        "{:<12} {:<8} {:>6} {:>17} {:>17} {:>14} {:>14}",
        "tenant",
        "workload",
        "runs",
        "statek lag p50/99",
        "FIFO lag p50/99",
        "statek done s",
        "FIFO done s"
    )?;
    for t in policy.tenants() {
        let (Some(f), Some(p)) = (fair.get(t.tenant()), plain.get(t.tenant())) else {
            continue;
        };
        outln!(
            "{:<12} {:<8} {:>6} {:>17} {:>17} {:>14} {:>14}",
            t.tenant().as_str(),
            workload.role(t.tenant()),
            f.enqueued,
            percentiles(&f.lag_ms),
            percentiles(&p.lag_ms),
            seconds(f.completed_ms.last().copied()),
            seconds(p.completed_ms.last().copied()),
        )?;
    }
    outln!(
        "(lag = from runnable to claim, database milliseconds; done = last completion, seconds after \
         the workers started)"
    )?;
    let small = &workload.trickle_tenants;
    let fair_p99 = percentile(&statek.pooled_lag_ms(small), 99.0);
    let plain_p99 = percentile(&fifo.pooled_lag_ms(small), 99.0);
    let backlog = &workload.backlog_tenant;
    let (fair_runs, fair_rate, fair_s) = statek.throughput(backlog);
    let (plain_runs, plain_rate, plain_s) = fifo.throughput(backlog);
    outln!()?;
    if let (Some(f), Some(p)) = (fair_p99, plain_p99) {
        outln!(
            "summary: the small tenants' p99 service lag was {f:.0} ms under statek and {p:.0} ms under \
             FIFO: {:.0}x faster with statek",
            p / f.max(1.0)
        )?;
    }
    outln!(
        "summary: throughput until {backlog}'s backlog was done: {fair_rate:.0} runs/s under statek \
         ({fair_runs} runs in {fair_s:.2} s) and {plain_rate:.0} runs/s under FIFO ({plain_runs} runs \
         in {plain_s:.2} s): statek ran at {:.2}x the FIFO queue's rate",
        fair_rate / plain_rate.max(1e-9)
    )?;
    Ok(())
}
