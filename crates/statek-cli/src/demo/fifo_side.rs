//! The plain FIFO side of the demo: the same workload through
//! statek-store-pg's baseline [`PlainFifoQueue`] (the unfair comparison):
//! `--replicas` workers, each with its own pool and the statek Worker's
//! default concurrency ([`DEFAULT_CONCURRENCY`] runs executing at once),
//! each claiming as many of the oldest available runs of any tenant as it
//! has free capacity in one statement and completing finished runs in
//! batches (the shape of River's producer and completer), with the same
//! handler as the statek side.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use statek_policy::TenantId;
use statek_scheduler::DEFAULT_CONCURRENCY;
use statek_store_pg::baseline::{PlainFifoQueue, PlainFifoRun};
use statek_store_pg::{PgStore, StoreError};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::args::DemoArgs;
use super::side::{demo_store_config, wait_until_done, DemoHandler};
use super::workload::{self, Arrivals, Workload};
use crate::out::outln;

/// Pause after a claim that found nothing (the baseline does not listen
/// for notifications).
const EMPTY_PAUSE: Duration = Duration::from_millis(5);

/// What the FIFO side observed.
pub struct FifoSide {
    pub arrivals: Arrivals,
    pub origin: Option<SystemTime>,
}

/// Why the FIFO side cannot run on this database.
pub fn refusal(live_runs: u64) -> Option<String> {
    (live_runs > 0).then(|| {
        format!(
            "FIFO side skipped: the database holds {live_runs} live runs, and the plain FIFO \
             queue claims the runs of any tenant"
        )
    })
}

/// Runs the FIFO side (the statek side must have finished: both use the
/// same tenants' queues).
pub async fn run(
    args: &DemoArgs,
    url: &str,
    admin: &PgStore,
    tenants: &[TenantId],
    workload: &Workload,
) -> Result<FifoSide> {
    let fifo = PlainFifoQueue::new(admin.clone());
    fifo.create_index().await?;
    let arrivals: Arrivals = Arc::default();
    let queued = Instant::now();
    let origin = workload::enqueue_backlog(
        admin,
        &workload.backlog_tenant,
        args.backlog,
        None,
        &arrivals,
    )
    .await?;
    outln!(
        "FIFO: queued {} backlog runs for {} in {:.1} s; starting {} ({} runs executing at once each)",
        args.backlog,
        workload.backlog_tenant,
        queued.elapsed().as_secs_f64(),
        crate::out::count(u64::from(args.replicas), "plain FIFO worker", "plain FIFO workers"),
        DEFAULT_CONCURRENCY
    )?;
    let stop = CancellationToken::new();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.replicas {
        let queue = PlainFifoQueue::new(PgStore::new(demo_store_config(url)?)?);
        tasks.spawn(worker(queue, DemoHandler::new(args), stop.clone()));
    }
    let producer = workload::start_trickle(
        admin.clone(),
        None,
        workload.trickle_tenants.clone(),
        args.trickle,
        Arc::clone(&arrivals),
        stop.clone(),
    );
    let done = wait_until_done(
        admin,
        tenants,
        producer,
        &mut tasks,
        &stop,
        started,
        &arrivals,
        String::new,
    )
    .await?;
    stop.cancel();
    while let Some(result) = tasks.join_next().await {
        result.context("FIFO worker task")??;
    }
    fifo.drop_index().await?;
    outln!(
        "FIFO stopped: {}; in {:.1} s",
        done.as_deref().unwrap_or("stopped early"),
        started.elapsed().as_secs_f64()
    )?;
    Ok(FifoSide { arrivals, origin })
}

/// One plain FIFO worker: claims up to its free capacity, runs each run's
/// handler in its own task, completes finished runs in batches; on `stop`
/// it finishes the runs in flight.
async fn worker(
    queue: PlainFifoQueue,
    handler: DemoHandler,
    stop: CancellationToken,
) -> Result<()> {
    let capacity = Arc::new(Semaphore::new(DEFAULT_CONCURRENCY));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(PlainFifoRun, OwnedSemaphorePermit)>();
    let completer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            while let Some(first) = done_rx.recv().await {
                let mut batch = vec![first];
                while let Ok(done) = done_rx.try_recv() {
                    batch.push(done);
                }
                let runs: Vec<PlainFifoRun> = batch.iter().map(|(run, _)| run.clone()).collect();
                queue.complete(&runs).await?;
                // The capacity goes back once the completions are committed.
                drop(batch);
            }
            Ok::<(), StoreError>(())
        })
    };
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => break,
            permit = Arc::clone(&capacity).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let mut permits = vec![first];
        while let Ok(permit) = Arc::clone(&capacity).try_acquire_owned() {
            permits.push(permit);
        }
        let limit = u32::try_from(permits.len()).unwrap_or(u32::MAX);
        let runs = queue.claim_up_to(limit).await?;
        if runs.is_empty() {
            drop(permits);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(EMPTY_PAUSE) => continue,
            }
        }
        permits.truncate(runs.len());
        for (run, permit) in runs.into_iter().zip(permits) {
            let (done, handler) = (done_tx.clone(), handler.clone());
            tokio::spawn(async move {
                handler.work().await;
                done.send((run, permit)).ok();
            });
        }
    }
    drop(done_tx);
    completer.await.context("FIFO completer task")??;
    Ok(())
}
