//! A scheduler's per-tenant selection metrics (selections, tick outcomes
//! by label, service lag), with each series' handle registered once per
//! shard and tenant rather than looked up (and its labels allocated) per
//! slot.
//!
//! Handles are registered with the recorder in force when a shard's first
//! slot is counted: install the recorder before the first tick (as the
//! `metrics` crate asks of every application).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use metrics::{Counter, Histogram};
use statek_core::TenantTickOutcome;
use statek_policy::{SchedulerShardId, TenantId, WeightedFairnessPolicy};

/// The handles of one tenant's series.
struct TenantSeries {
    selections: Counter,
    /// One per [`TenantTickOutcome::LABELS`], in that order.
    outcomes: Vec<Counter>,
    lag: Histogram,
}

/// The handles of every tenant of one shard's policy.
struct ShardSeries {
    shard: SchedulerShardId,
    tenants: HashMap<TenantId, TenantSeries>,
}

/// The selection metrics of one scheduler: the live shard's handles.
#[derive(Default)]
pub(crate) struct SelectionMetrics {
    live: RwLock<Option<Arc<ShardSeries>>>,
}

impl std::fmt::Debug for SelectionMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = read(&self.live);
        f.debug_struct("SelectionMetrics")
            .field("shard", &live.as_ref().map(|series| &series.shard))
            .field(
                "tenants",
                &live.as_ref().map_or(0, |series| series.tenants.len()),
            )
            .finish()
    }
}

impl SelectionMetrics {
    /// Counts one slot of `tenant` under `policy` with `outcome`:
    /// `statek_selections_total`, `statek_tick_outcomes_total` and, for a
    /// claimed run, `statek_service_lag_seconds`.
    pub(crate) fn count(
        &self,
        policy: &WeightedFairnessPolicy,
        tenant: &TenantId,
        outcome: &TenantTickOutcome,
    ) {
        let series = self.series(policy);
        let Some(tenant_series) = series.tenants.get(tenant) else {
            return;
        };
        tenant_series.selections.increment(1);
        let label = outcome.label();
        if let Some(index) = TenantTickOutcome::LABELS.iter().position(|l| *l == label) {
            if let Some(counter) = tenant_series.outcomes.get(index) {
                counter.increment(1);
            }
        }
        if let TenantTickOutcome::Executed(run) | TenantTickOutcome::ExecutionFailed { run, .. } =
            outcome
        {
            let lag = run
                .claimed_at
                .duration_since(run.available_at)
                .unwrap_or_default();
            tenant_series.lag.record(lag.as_secs_f64());
        }
    }

    /// The handles of `policy`'s shard, registered on its first slot.
    fn series(&self, policy: &WeightedFairnessPolicy) -> Arc<ShardSeries> {
        if let Some(series) = read(&self.live).as_ref() {
            if &series.shard == policy.shard_id() {
                return Arc::clone(series);
            }
        }
        let series = Arc::new(register(policy));
        *write(&self.live) = Some(Arc::clone(&series));
        series
    }
}

fn register(policy: &WeightedFairnessPolicy) -> ShardSeries {
    let shard = policy.shard_id().to_string();
    let tenants = policy
        .tenants()
        .iter()
        .map(|weight| {
            let tenant = weight.tenant();
            let name = tenant.to_string();
            let series = TenantSeries {
                selections: metrics::counter!(
                    crate::metrics::SELECTIONS_TOTAL,
                    "shard" => shard.clone(),
                    "tenant" => name.clone()
                ),
                outcomes: TenantTickOutcome::LABELS
                    .iter()
                    .map(|label| {
                        metrics::counter!(
                            crate::metrics::TICK_OUTCOMES_TOTAL,
                            "shard" => shard.clone(),
                            "tenant" => name.clone(),
                            "outcome" => *label
                        )
                    })
                    .collect(),
                lag: metrics::histogram!(
                    crate::metrics::SERVICE_LAG_SECONDS,
                    "shard" => shard.clone(),
                    "tenant" => name
                ),
            };
            (tenant.clone(), series)
        })
        .collect();
    ShardSeries {
        shard: policy.shard_id().clone(),
        tenants,
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
