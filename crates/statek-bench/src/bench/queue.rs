//! The fairness tax: runs executed per second by fair replicas (reserve a
//! slot, claim from that slot's tenant only) against a plain claimer that
//! takes any tenant's oldest run with `SKIP LOCKED`, on the same queue
//! contents; and the cost of a slot whose tenant queue is empty.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use statek_policy::WeightedFairnessPolicy;
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, TenantTickOutcome,
};
use tokio_util::sync::CancellationToken;

use super::reserve::store;

/// Runs per tenant put in the queue before each throughput phase: more than
/// either side can execute in the window, so no queue runs dry.
pub const RUNS_PER_TENANT: u64 = 12_500;

/// Empties the run queue between phases, as the superuser: the claim
/// history (migration V7) refers to runs and refuses TRUNCATE to every
/// other role, so the superuser steps around its trigger.
const EMPTY_RUNS: &str = "SET session_replication_role = replica;
     TRUNCATE statek.runs CASCADE;
     RESET session_replication_role";

/// A handler that does nothing: the figures are the scheduling overhead.
struct NoOp;

impl RunHandler for NoOp {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
    }
}

/// One throughput phase.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct QueuePhase {
    /// What ran.
    pub name: String,
    /// Concurrent replicas or claimers.
    pub workers: usize,
    /// Ticks (fair) or claim attempts (plain) in the window.
    pub ticks: u64,
    /// Runs executed and completed.
    pub runs: u64,
    /// Window, seconds.
    pub seconds: f64,
    /// Runs per second.
    pub runs_per_second: f64,
    /// Ticks (or claim attempts) per second.
    pub ticks_per_second: f64,
}

/// Empties the run queue and fills it with `RUNS_PER_TENANT` runs for each
/// tenant of `policy`, interleaved so every tenant's runs span the queue.
pub async fn refill(
    client: &tokio_postgres::Client,
    policy: &WeightedFairnessPolicy,
) -> Result<()> {
    client.batch_execute(EMPTY_RUNS).await?;
    let tenants: Vec<String> = policy
        .tenants()
        .iter()
        .map(|t| t.tenant().to_string())
        .collect();
    let total = i64::try_from(RUNS_PER_TENANT * tenants.len() as u64)?;
    client
        .execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload)
             SELECT gen_random_uuid(), ($1::text[])[1 + g % array_length($1::text[], 1)], ''::bytea
             FROM generate_series(0, $2::bigint - 1) AS g",
            &[&tenants, &total],
        )
        .await?;
    client.batch_execute("VACUUM ANALYZE statek.runs").await?;
    Ok(())
}

/// Empties the run queue.
pub async fn empty(client: &tokio_postgres::Client) -> Result<()> {
    client.batch_execute(EMPTY_RUNS).await?;
    Ok(())
}

/// `replicas` fair schedulers (own pool each), ticking `k` slots per round
/// trip for `duration` with a no-op handler.
pub async fn fair(
    url: &str,
    policy: &WeightedFairnessPolicy,
    replicas: usize,
    k: u32,
    duration: Duration,
    name: &str,
) -> Result<QueuePhase> {
    let mut schedulers = Vec::new();
    for _ in 0..replicas {
        let store = store(url, 2)?;
        let executor = PgRunQueueExecutor::new(store.clone(), NoOp, ExecutorOptions::new());
        schedulers.push(Arc::new(
            DurableFairScheduler::register(
                store,
                policy.clone(),
                executor,
                SchedulerOptions::new(),
            )
            .await?,
        ));
    }
    let ticks = Arc::new(AtomicU64::new(0));
    let runs = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for scheduler in schedulers {
        let (ticks, runs) = (Arc::clone(&ticks), Arc::clone(&runs));
        tasks.push(tokio::spawn(async move {
            let shutdown = CancellationToken::new();
            while Instant::now() < deadline {
                let outcomes = if k == 1 {
                    vec![scheduler.tick(&shutdown).await?]
                } else {
                    scheduler
                        .tick_batch(k, &shutdown)
                        .await?
                        .into_iter()
                        .collect::<Result<Vec<_>, _>>()?
                };
                for outcome in outcomes {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    if matches!(outcome.tenant_outcome(), TenantTickOutcome::Executed(_)) {
                        runs.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await.context("a replica panicked")??;
    }
    Ok(phase(name, replicas, &ticks, &runs, started))
}

fn phase(
    name: &str,
    workers: usize,
    ticks: &AtomicU64,
    runs: &AtomicU64,
    started: Instant,
) -> QueuePhase {
    let seconds = started.elapsed().as_secs_f64();
    let (ticks, runs) = (ticks.load(Ordering::Relaxed), runs.load(Ordering::Relaxed));
    QueuePhase {
        name: name.to_owned(),
        workers,
        ticks,
        runs,
        seconds,
        runs_per_second: runs as f64 / seconds,
        ticks_per_second: ticks as f64 / seconds,
    }
}

/// `claimers` plain claimers ([`super::plain_claimer`]) for `duration`.
pub async fn plain(url: &str, claimers: usize, duration: Duration) -> Result<QueuePhase> {
    let stop = CancellationToken::new();
    let (tasks, counts) =
        super::plain_claimer::start(url, claimers, Duration::ZERO, stop.clone()).await?;
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.cancel();
    super::plain_claimer::join(tasks, "a plain claimer").await?;
    Ok(phase(
        "plain SKIP LOCKED claimer",
        claimers,
        &counts.attempts,
        &counts.runs,
        started,
    ))
}
