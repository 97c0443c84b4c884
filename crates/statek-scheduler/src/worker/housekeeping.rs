//! A [`Worker`](super::Worker)'s housekeeping: the executor's pass
//! (expired leases), and the gauges of retained reservations, executing
//! runs and runs awaiting their record.

use std::sync::Arc;

use statek_core::{ReservationSource, RunPool, TenantExecutor};
use tokio_util::sync::CancellationToken;

use super::shared::Shared;
use crate::scheduler::DurableFairScheduler;

/// Sets the executing-runs gauge (the pool's permits in use) and, when the
/// executor says, the gauge of finished runs awaiting their record.
pub(super) fn publish_executing<E: TenantExecutor>(shard: &str, pool: &RunPool, executor: &E) {
    let executing = pool.capacity().saturating_sub(pool.available());
    metrics::gauge!(crate::metrics::WORKER_RUNS_EXECUTING, "shard" => shard.to_owned())
        .set(executing as f64);
    if let Some(awaiting) = executor.runs_awaiting_record() {
        metrics::gauge!(crate::metrics::WORKER_RUNS_AWAITING_RECORD, "shard" => shard.to_owned())
            .set(awaiting as f64);
    }
}

/// The housekeeping passes after the first (which [`Worker::run`] makes
/// before its first reservation), every `maintenance_every`.
pub(super) async fn maintain<E: TenantExecutor, R: ReservationSource>(
    shared: Arc<Shared<E, R>>,
    pool: RunPool,
    stop: CancellationToken,
) {
    let every = shared.options.maintenance_every;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => housekeeping(&shared, &pool).await,
        }
    }
}

/// One housekeeping pass: the executor's, the retention gauge and the
/// executing-runs and awaiting-record gauges.
pub(super) async fn housekeeping<E: TenantExecutor, R: ReservationSource>(
    shared: &Shared<E, R>,
    pool: &RunPool,
) {
    shared.scheduler.executor().maintain().await;
    publish_oldest(&shared.scheduler).await;
    publish_executing(
        shared.scheduler.policy().shard_id().as_str(),
        pool,
        shared.scheduler.executor(),
    );
}

/// Sets the oldest-retained-reservation gauge of the worker's shard.
async fn publish_oldest<E: TenantExecutor, R: ReservationSource>(
    scheduler: &DurableFairScheduler<E, R>,
) {
    let policy = scheduler.policy();
    let shard = policy.shard_id();
    match scheduler.source().oldest_reservation(shard).await {
        Ok(Some(oldest)) => {
            if let Ok(at) = oldest.duration_since(std::time::SystemTime::UNIX_EPOCH) {
                metrics::gauge!(
                    crate::metrics::RETAINED_OLDEST_TIMESTAMP_SECONDS,
                    "shard" => shard.to_string()
                )
                .set(at.as_secs_f64());
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            error = %crate::error::chain(&e),
            "cannot read the oldest retained reservation"
        ),
    }
}
