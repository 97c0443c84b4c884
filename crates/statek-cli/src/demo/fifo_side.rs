//! The plain FIFO side of the demo: the same workload through
//! statek-store-pg's baseline [`PlainFifoQueue`] (the unfair comparison):
//! `--replicas` workers, each with its own pool and the statek Worker's
//! default concurrency ([`DEFAULT_CONCURRENCY`] runs executing at once),
//! each claiming as many of the oldest available runs of any tenant as it
//! has free capacity in one statement and completing finished runs in
//! batches (the shape of River's producer and completer: the baseline's
//! [`BatchedFifoWorker`], the bench's batched queue too), with the same
//! handler as the statek side.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use statek_policy::TenantId;
use statek_scheduler::DEFAULT_CONCURRENCY;
use statek_store_pg::baseline::{BatchedFifoWorker, PlainFifoQueue};
use statek_store_pg::PgStore;
use tokio_util::sync::CancellationToken;

use super::args::DemoArgs;
use super::side::{demo_store_config, wait_until_done, DemoHandler};
use super::workload::{self, Arrivals, Workload};
use crate::out::outln;

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

/// One plain FIFO worker (the baseline's batched worker, with the
/// statek Worker's default concurrency and the same handler as the
/// statek side); on `stop` it finishes the runs in flight.
async fn worker(
    queue: PlainFifoQueue,
    handler: DemoHandler,
    stop: CancellationToken,
) -> Result<()> {
    BatchedFifoWorker::new(queue.clone(), queue, DEFAULT_CONCURRENCY)
        .run(
            move |_run| {
                let handler = handler.clone();
                async move { handler.work().await }
            },
            stop.cancelled_owned(),
        )
        .await?;
    Ok(())
}
