//! The demo's workload, the same for statek and for the plain FIFO queue:
//! the heaviest tenant's backlog, queued before the workers start, and the
//! small tenants' runs, which trickle in while they run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::{NewRun, PgStore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::lock::lock;

/// Time between two trickled runs (round robin over the small tenants).
pub const TRICKLE_EVERY: Duration = Duration::from_millis(20);

/// Roles of the policy's tenants in the demo workload.
pub struct Workload {
    pub backlog_tenant: TenantId,
    pub idle_tenant: Option<TenantId>,
    pub trickle_tenants: Vec<TenantId>,
}

impl Workload {
    pub fn for_policy(policy: &WeightedFairnessPolicy) -> Self {
        let tenants = policy.tenants();
        // Heaviest, ties to the first by id (tenants are sorted by id).
        let heaviest = tenants.iter().fold(&tenants[0], |best, t| {
            if t.weight() > best.weight() {
                t
            } else {
                best
            }
        });
        let backlog_tenant = heaviest.tenant().clone();
        // Lightest among the rest, ties to the last by id; only with 3+ tenants.
        let idle_tenant = if tenants.len() >= 3 {
            tenants
                .iter()
                .filter(|t| t.tenant() != &backlog_tenant)
                .fold(None, |best: Option<&TenantFairnessWeight>, t| match best {
                    Some(b) if b.weight() < t.weight() => Some(b),
                    _ => Some(t),
                })
                .map(|t| t.tenant().clone())
        } else {
            None
        };
        let trickle_tenants = tenants
            .iter()
            .map(|t| t.tenant().clone())
            .filter(|t| t != &backlog_tenant && Some(t) != idle_tenant.as_ref())
            .collect();
        Self {
            backlog_tenant,
            idle_tenant,
            trickle_tenants,
        }
    }

    pub fn role(&self, tenant: &TenantId) -> &'static str {
        if tenant == &self.backlog_tenant {
            "backlog"
        } else if Some(tenant) == self.idle_tenant.as_ref() {
            "no runs"
        } else {
            "trickle"
        }
    }
}

/// A run the demo enqueued.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub run_id: Uuid,
    pub tenant: TenantId,
    /// The shard's cursor when the run became runnable (statek only).
    pub cursor_at_enqueue: Option<u64>,
}

/// The runs one side of the demo enqueued, shared with the trickle task.
pub type Arrivals = Arc<Mutex<Vec<Arrival>>>;

/// Queues `count` runs for `tenant`; returns the database time of the last
/// insert (the moment the workers may start), if any.
pub async fn enqueue_backlog(
    store: &PgStore,
    tenant: &TenantId,
    count: u32,
    cursor: Option<u64>,
    arrivals: &Arrivals,
) -> Result<Option<SystemTime>> {
    let mut last = None;
    for _ in 0..count {
        let run = store
            .enqueue(&NewRun::new(tenant.clone(), Vec::new()))
            .await?;
        last = Some(run.enqueued_at);
        lock(arrivals).push(Arrival {
            run_id: run.run_id,
            tenant: tenant.clone(),
            cursor_at_enqueue: cursor,
        });
    }
    Ok(last)
}

/// Starts the trickle: `per_tenant` runs for each of `tenants`, one every
/// [`TRICKLE_EVERY`], round robin, until done or `stop`. With a `shard`,
/// each arrival records the shard's cursor at its enqueue.
pub fn start_trickle(
    store: PgStore,
    shard: Option<SchedulerShardId>,
    tenants: Vec<TenantId>,
    per_tenant: u32,
    arrivals: Arrivals,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(TRICKLE_EVERY);
        for _ in 0..per_tenant {
            for tenant in &tenants {
                ticker.tick().await;
                if stop.is_cancelled() {
                    return Ok(());
                }
                let cursor = match &shard {
                    Some(shard) => Some(store.next_sequence(shard).await?),
                    None => None,
                };
                let run = store
                    .enqueue(&NewRun::new(tenant.clone(), Vec::new()))
                    .await?;
                lock(&arrivals).push(Arrival {
                    run_id: run.run_id,
                    tenant: tenant.clone(),
                    cursor_at_enqueue: cursor,
                });
            }
        }
        Ok(())
    })
}
