//! The load of one chaos cell: a fleet of `Worker`s (each its own store,
//! 16 runs at once, handlers of about 5 ms) under a producer that keeps a
//! queue depth, and the handlers' own count of executions.
//!
//! The handlers' table (`chaos.executions`) is the harness's evidence, not
//! statek's: each execution inserts one row (run, attempt, worker, the
//! lease deadline the claim gave it) on the handler's own connection, so
//! double executions are judged from what the handlers did, beside what
//! statek's claim history says.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError,
    RunHandler, RunResult, SchedulerError, SchedulerOptions, Worker, WorkerOptions, WorkerReport,
};
use statek_store_pg::{DurabilityPolicy, NewRun, PgStore, StoreConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The harness's own table: one row per handler execution.
pub const CREATE_EXECUTIONS: &str = "CREATE SCHEMA chaos;
     CREATE TABLE chaos.executions (
         run_id uuid NOT NULL,
         attempt integer NOT NULL,
         worker integer NOT NULL,
         lease_expires_at timestamptz NOT NULL,
         executed_at timestamptz NOT NULL DEFAULT clock_timestamp()
     )";

const INSERT_EXECUTION: &str =
    "INSERT INTO chaos.executions (run_id, attempt, worker, lease_expires_at)
     VALUES ($1, $2, $3, $4)";

/// The cell's tenants and weights (L = 8).
pub fn policy() -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("chaos-v1")?,
        [("t-a", 3), ("t-b", 2), ("t-c", 2), ("t-d", 1)]
            .into_iter()
            .map(|(t, w)| TenantFairnessWeight::new(TenantId::try_from(t)?, w))
            .collect::<Result<Vec<_>, _>>()?,
    )?)
}

/// What the fleet runs with.
#[derive(Debug, Clone, Copy)]
pub struct FleetShape {
    pub workers: u32,
    pub concurrency: usize,
    pub work: Duration,
    pub lease: Duration,
    pub depth: u64,
}

/// A store of the fleet: durable server required (the default policy).
pub fn store(url: &str, pool: usize) -> Result<PgStore> {
    Ok(PgStore::new(
        StoreConfig::from_url(url)?
            .pool_size(pool)?
            .create_timeout(Duration::from_secs(2))?
            .durability_policy(DurabilityPolicy::Require),
    )?)
}

/// One handler's connection for its evidence rows, opened again after a
/// fault closed it.
struct EvidenceDb {
    config: StoreConfig,
    client: tokio::sync::Mutex<Option<Arc<tokio_postgres::Client>>>,
}

impl EvidenceDb {
    async fn client(&self) -> Result<Arc<tokio_postgres::Client>> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(client));
        }
        let fresh = Arc::new(self.config.connect_client().await?);
        *slot = Some(Arc::clone(&fresh));
        Ok(fresh)
    }
}

/// Works `work`, then records the execution; a run whose row could not be
/// written fails (and is retried by the queue), so every row is one
/// execution that did its work.
struct RecordingHandler {
    db: EvidenceDb,
    worker: i32,
    work: Duration,
    /// Executions whose handler returned an error (its row may still have
    /// committed, its acknowledgement lost): the queue retries those runs
    /// by its retry rule, not by a lease.
    failed: Arc<Mutex<HashSet<(Uuid, i32)>>>,
}

impl RunHandler for RecordingHandler {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        tokio::time::sleep(self.work).await;
        let attempt = i32::try_from(run.attempt).unwrap_or(i32::MAX);
        let recorded = async {
            let client = self.db.client().await?;
            client
                .execute(
                    INSERT_EXECUTION,
                    &[&run.run_id, &attempt, &self.worker, &run.lease_expires_at],
                )
                .await?;
            anyhow::Ok(Completed::new())
        };
        recorded.await.map_err(|e| {
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((run.run_id, attempt));
            RunError::new(format!("recording the execution: {e:#}"))
        })
    }
}

/// A running fleet and its producer.
pub struct Fleet {
    shutdown: CancellationToken,
    workers: Vec<JoinHandle<Result<WorkerReport, SchedulerError>>>,
    producing: CancellationToken,
    producer: JoinHandle<()>,
    /// Runs whose enqueue was acknowledged (committed and answered).
    acknowledged: Arc<Mutex<Vec<Uuid>>>,
    /// Executions whose handler failed, over all Workers.
    failed: Arc<Mutex<HashSet<(Uuid, i32)>>>,
}

impl Fleet {
    /// Starts `shape.workers` Workers on `url` (shard registered by the
    /// first) and the producer.
    pub async fn start(url: &str, shape: FleetShape) -> Result<Self> {
        let shutdown = CancellationToken::new();
        let failed = Arc::new(Mutex::new(HashSet::new()));
        let mut workers = Vec::new();
        for index in 0..shape.workers {
            let store = store(url, 4)?;
            let handler = RecordingHandler {
                db: EvidenceDb {
                    config: StoreConfig::from_url(url)?,
                    client: tokio::sync::Mutex::new(None),
                },
                worker: i32::try_from(index)?,
                work: shape.work,
                failed: Arc::clone(&failed),
            };
            let executor = PgRunQueueExecutor::new(
                store.clone(),
                handler,
                ExecutorOptions::new().lease(shape.lease)?,
            );
            let scheduler = Arc::new(
                DurableFairScheduler::register(store, policy()?, executor, SchedulerOptions::new())
                    .await
                    .context("registering the chaos shard")?,
            );
            let options = WorkerOptions::new()
                .concurrency(shape.concurrency)?
                .maintenance_every(Duration::from_secs(1))?
                .shutdown_grace(Duration::from_secs(10))?;
            let worker = Worker::new(scheduler, options);
            workers.push(tokio::spawn(worker.run(shutdown.clone())));
        }
        let producing = CancellationToken::new();
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let producer = tokio::spawn(produce(
            store(url, 2)?,
            shape.depth,
            producing.clone(),
            Arc::clone(&acknowledged),
        ));
        Ok(Self {
            shutdown,
            workers,
            producing,
            producer,
            acknowledged,
            failed,
        })
    }

    /// Whether every Worker still runs (none ended with an error).
    pub fn workers_running(&self) -> bool {
        self.workers.iter().all(|w| !w.is_finished())
    }

    /// Stops producing; returns the acknowledged runs.
    pub async fn stop_producing(&mut self) -> Vec<Uuid> {
        self.producing.cancel();
        let _ = (&mut self.producer).await;
        std::mem::take(&mut *self.acknowledged.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Executions whose handler failed so far.
    pub fn failed_executions(&self) -> HashSet<(Uuid, i32)> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Shuts the Workers down; their reports, or the first error.
    pub async fn stop(self) -> Result<Vec<WorkerReport>> {
        self.shutdown.cancel();
        let mut reports = Vec::new();
        for (index, worker) in self.workers.into_iter().enumerate() {
            let report = worker
                .await
                .context("worker task")?
                .with_context(|| format!("worker {index} ended with an error"))?;
            reports.push(report);
        }
        Ok(reports)
    }
}

/// Keeps `depth` live runs queued: tops up in bulk every 20 ms; a failed
/// enqueue (the fault) is tried again on the next round, and its runs are
/// not counted as acknowledged.
async fn produce(
    store: PgStore,
    depth: u64,
    stop: CancellationToken,
    acknowledged: Arc<Mutex<Vec<Uuid>>>,
) {
    let tenants: Vec<TenantId> = ["t-a", "t-b", "t-c", "t-d"]
        .into_iter()
        .filter_map(|t| TenantId::try_from(t).ok())
        .collect();
    let mut next = 0usize;
    while !stop.is_cancelled() {
        if let Ok(live) = store.count_live_runs().await {
            let missing = depth.saturating_sub(live).min(500);
            if missing > 0 {
                let runs: Vec<NewRun> = (0..missing)
                    .map(|_| {
                        next += 1;
                        // Attempts enough that faults never fail a run for
                        // good (each fault can fail an attempt).
                        NewRun::new(tenants[next % tenants.len()].clone(), Vec::new())
                            .max_attempts(1000)
                    })
                    .collect();
                if let Ok(enqueued) = store.enqueue_many(&runs).await {
                    acknowledged
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(enqueued.iter().map(|e| e.run_id));
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Seconds since the Unix epoch (the database's `finished_at` and the
/// faults' times, on one host's clock).
pub fn since_epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
