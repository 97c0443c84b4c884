//! The fair side of a workload: ONE `statek_scheduler::Worker` (default
//! options except `concurrency`, set to the baselines' executing runs), on
//! the PostgreSQL run queue executor, with its own store (pool of
//! `concurrency + 2`), woken by `LISTEN/NOTIFY`, every outcome sent to a
//! sink that counts them. One Worker per process is how statek is meant to
//! be deployed, as one River client per process is; the queue section
//! measures a fleet of replicas.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use statek_policy::WeightedFairnessPolicy;
use statek_scheduler::{
    DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError, RunHandler,
    SchedulerOptions, TenantTickOutcome, TickOutcome, Worker, WorkerOptions, WorkerReport,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::bench::reserve::store;

/// A handler that sleeps (or does nothing when its duration is zero).
struct Sleep(Duration);

impl RunHandler for Sleep {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> Result<(), RunError> {
        if !self.0.is_zero() {
            tokio::time::sleep(self.0).await;
        }
        Ok(())
    }
}

/// Outcomes the Worker sent to its sink.
#[derive(Debug, Default)]
pub struct Counts {
    /// Every outcome (slots consumed).
    pub outcomes: AtomicU64,
    /// `Executed` outcomes.
    pub executed: AtomicU64,
}

/// A running fair side.
pub struct FairSide {
    /// The Worker's task.
    pub worker: tokio::task::JoinHandle<Result<WorkerReport, statek_scheduler::SchedulerError>>,
    /// The sink's counts.
    pub counts: Arc<Counts>,
    drain: tokio::task::JoinHandle<()>,
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
    let store = store(url, concurrency + 2)?;
    let executor = PgRunQueueExecutor::new(store.clone(), Sleep(handler), ExecutorOptions::new());
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
    let (sink, mut outcomes) = mpsc::unbounded_channel::<TickOutcome>();
    let counts = Arc::new(Counts::default());
    let drain = {
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            while let Some(outcome) = outcomes.recv().await {
                counts.outcomes.fetch_add(1, Ordering::Relaxed);
                if matches!(outcome.tenant_outcome(), TenantTickOutcome::Executed(_)) {
                    counts.executed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let worker = Worker::new(scheduler, WorkerOptions::new().concurrency(concurrency)?)
        .with_notifications(notifications)
        .with_outcome_sink(sink);
    Ok(FairSide {
        worker: tokio::spawn(worker.run(stop)),
        counts,
        drain,
    })
}

impl FairSide {
    /// Waits for the Worker to stop; its report.
    pub async fn join(self) -> Result<WorkerReport> {
        let report = self.worker.await.context("the Worker panicked")??;
        self.drain.await.context("the outcome sink panicked")?;
        Ok(report)
    }
}
