//! The batched plain queue, as the best PostgreSQL queues do it (River's
//! producer and batch completer): a producer that has capacity fetches up
//! to that many available runs of any tenant in ONE statement
//! (`FOR UPDATE SKIP LOCKED`), executes them concurrently, and a completer
//! marks finished runs completed in batches of up to `capacity` per
//! statement. No reservation, no fairness. A run holds its capacity from
//! its fetch until its completion is committed (as a claimer's run does),
//! so "executing runs" means the same on every side. Its SQL is
//! statek-store-pg's baseline ([`PlainFifoQueue::claim_up_to`](statek_store_pg::baseline::PlainFifoQueue::claim_up_to),
//! [`PlainFifoQueue::complete`](statek_store_pg::baseline::PlainFifoQueue::complete)), not product code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use statek_store_pg::baseline::PlainFifoRun;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Pause after a fetch that found nothing (River's poll interval is 1 s,
/// woken by notifications; the workloads never run dry in a window).
const EMPTY_PAUSE: Duration = Duration::from_millis(5);

/// What the queue did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Fetch statements.
    pub fetches: AtomicU64,
    /// Completion statements.
    pub completions: AtomicU64,
    /// Runs completed.
    pub runs: AtomicU64,
}

/// Starts the producer and the completer (two connections, opened before
/// it returns) with `capacity` executing runs; each handler sleeps
/// `handler` (none when zero). They stop when `stop` fires, after the runs
/// in flight are completed.
pub async fn start(
    url: &str,
    capacity: usize,
    handler: Duration,
    stop: CancellationToken,
) -> Result<(tokio::task::JoinSet<Result<()>>, Arc<Counts>)> {
    let counts = Arc::new(Counts::default());
    // Two connections, opened before it returns (a claim of at most zero
    // runs claims nothing).
    let producer = crate::bench::plain_claimer::queue(url, 1)?;
    producer.claim_up_to(0).await?;
    let completer = crate::bench::plain_claimer::queue(url, 1)?;
    completer.claim_up_to(0).await?;
    let slots = Arc::new(Semaphore::new(capacity));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(PlainFifoRun, OwnedSemaphorePermit)>();
    let mut tasks = tokio::task::JoinSet::new();
    {
        let counts = Arc::clone(&counts);
        tasks.spawn(async move {
            loop {
                let first = tokio::select! {
                    _ = stop.cancelled() => break,
                    permit = Arc::clone(&slots).acquire_owned() => permit?,
                };
                let mut permits = vec![first];
                while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
                    permits.push(permit);
                }
                let limit = u32::try_from(permits.len())?;
                let rows = producer.claim_up_to(limit).await?;
                counts.fetches.fetch_add(1, Ordering::Relaxed);
                if rows.is_empty() {
                    drop(permits);
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(EMPTY_PAUSE) => continue,
                    }
                }
                // Capacity not filled goes back at once.
                permits.truncate(rows.len());
                for (run, permit) in rows.into_iter().zip(permits) {
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        if !handler.is_zero() {
                            tokio::time::sleep(handler).await;
                        }
                        done.send((run, permit)).ok();
                    });
                }
            }
            Ok(())
        });
    }
    let completer_counts = Arc::clone(&counts);
    tasks.spawn(async move {
        let counts = completer_counts;
        // Ends when the producer and every run in flight have dropped their
        // senders.
        while let Some(first) = done_rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < capacity {
                match done_rx.try_recv() {
                    Ok(done) => batch.push(done),
                    Err(_) => break,
                }
            }
            let runs: Vec<PlainFifoRun> = batch.iter().map(|d| d.0.clone()).collect();
            let completed = completer.complete(&runs).await?;
            counts.completions.fetch_add(1, Ordering::Relaxed);
            counts.runs.fetch_add(completed, Ordering::Relaxed);
            // The permits go back with the batch, now that it is committed.
            drop(batch);
        }
        Ok(())
    });
    Ok((tasks, counts))
}
