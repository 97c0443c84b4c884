//! The fair side of a workload: ONE `statek_scheduler::Worker` (default
//! options except `concurrency`, set to the baselines' executing runs), on
//! the PostgreSQL run queue executor, with its own store (pool of
//! `concurrency + 2`), woken by `LISTEN/NOTIFY`, without an outcome sink
//! (as a Worker runs without a fairness monitor; its report counts at the
//! end, the windows read the database). One Worker per process is how statek is meant to
//! be deployed, as one River client per process is; the queue section
//! measures a fleet of replicas.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use statek_policy::WeightedFairnessPolicy;
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions, WorkerReport,
};
use tokio_util::sync::CancellationToken;

use crate::bench::reserve::store;

/// A handler that sleeps (or does nothing when its duration is zero).
struct Sleep(Duration);

impl RunHandler for Sleep {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        if !self.0.is_zero() {
            tokio::time::sleep(self.0).await;
        }
        Ok(Completed::new())
    }
}

/// A running fair side.
pub struct FairSide {
    /// The Worker's task.
    pub worker: tokio::task::JoinHandle<Result<WorkerReport, statek_scheduler::SchedulerError>>,
}

/// Registers `policy`, starts one Worker of `concurrency` whose handler
/// sleeps `handler`, and returns at once; it stops when `stop` fires.
pub async fn start(
    url: &str,
    policy: &WeightedFairnessPolicy,
    concurrency: usize,
    handler: Duration,
    stop: CancellationToken,
) -> Result<FairSide> {
    start_with(url, policy, concurrency, Sleep(handler), stop).await
}

/// [`start`] with any handler.
pub async fn start_with(
    url: &str,
    policy: &WeightedFairnessPolicy,
    concurrency: usize,
    handler: impl RunHandler + 'static,
    stop: CancellationToken,
) -> Result<FairSide> {
    let store = store(url, concurrency + 2)?;
    let executor = PgRunQueueExecutor::new(store.clone(), handler, ExecutorOptions::new());
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy.clone(),
            executor,
            SchedulerOptions::new(),
        )
        .await?,
    );
    let notifications = store.listen_for_runs().await?;
    let worker = Worker::new(scheduler, WorkerOptions::new().concurrency(concurrency)?)
        .with_notifications(notifications);
    Ok(FairSide {
        worker: tokio::spawn(worker.run(stop)),
    })
}

impl FairSide {
    /// Waits for the Worker to stop; its report.
    pub async fn join(self) -> Result<WorkerReport> {
        Ok(self.worker.await.context("the Worker panicked")??)
    }
}
