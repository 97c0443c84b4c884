//! The batched plain queue, as the best PostgreSQL queues do it (River's
//! producer and batch completer): a producer that has capacity fetches up
//! to that many available runs of any tenant in ONE statement
//! (`FOR UPDATE SKIP LOCKED`), executes them concurrently, and a completer
//! marks finished runs completed in batches of up to `capacity` per
//! statement. No reservation, no fairness. A run holds its capacity from
//! its fetch until its completion is committed (as a claimer's run does),
//! so "executing runs" means the same on every side. Its SQL is
//! statek-store-pg's baseline ([`PlainFifoQueue::claim_up_to`](statek_store_pg::baseline::PlainFifoQueue::claim_up_to),
//! [`PlainFifoQueue::complete`](statek_store_pg::baseline::PlainFifoQueue::complete)), not product code, and
//! so is its worker ([`BatchedFifoWorker`]), which the demo's FIFO side
//! runs too.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use statek_store_pg::baseline::{BatchedFifoCounts, BatchedFifoWorker, PlainFifoRun};
use tokio_util::sync::CancellationToken;

/// Starts the batched queue's worker (two connections, one to claim and
/// one to complete, opened before it returns) with `capacity` executing
/// runs; each handler sleeps `handler` (none when zero). It stops when
/// `stop` fires, after the runs in flight are completed.
pub async fn start(
    url: &str,
    capacity: usize,
    handler: Duration,
    stop: CancellationToken,
) -> Result<(tokio::task::JoinSet<Result<()>>, Arc<BatchedFifoCounts>)> {
    start_with(
        url,
        capacity,
        move |_run: &PlainFifoRun| async move {
            if !handler.is_zero() {
                tokio::time::sleep(handler).await;
            }
        },
        stop,
    )
    .await
}

/// [`start`] with any work per run.
pub async fn start_with<W, Fut>(
    url: &str,
    capacity: usize,
    work: W,
    stop: CancellationToken,
) -> Result<(tokio::task::JoinSet<Result<()>>, Arc<BatchedFifoCounts>)>
where
    W: Fn(&PlainFifoRun) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    // Two connections, opened before it returns (a claim of at most zero
    // runs claims nothing).
    let producer = crate::bench::plain_claimer::queue(url, 1)?;
    producer.claim_up_to(0).await?;
    let completer = crate::bench::plain_claimer::queue(url, 1)?;
    completer.claim_up_to(0).await?;
    let worker = BatchedFifoWorker::new(producer, completer, capacity);
    let counts = worker.counts();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(async move {
        worker.run(work, stop.cancelled_owned()).await?;
        Ok(())
    });
    Ok((tasks, counts))
}
