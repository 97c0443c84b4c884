//! The plain `SKIP LOCKED` claimer, the baseline of the queue and
//! workloads sections: one connection per claimer, each looping "claim any
//! tenant's oldest available run, run the handler, complete it" (one claim
//! and one completion statement per run). No reservation, no fairness.
//! Its SQL is statek-store-pg's baseline ([`PlainFifoQueue::claim_one`],
//! [`PlainFifoQueue::complete_one`]), the one the demo compares with too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use statek_store_pg::baseline::PlainFifoQueue;
use statek_store_pg::{PgStore, StoreConfig};
use tokio_util::sync::CancellationToken;

/// The baseline on a store of `connections` pooled connections to `url`
/// (the bench's servers are not durable: the check reports, never refuses).
pub fn queue(url: &str, connections: usize) -> Result<PlainFifoQueue> {
    let config = StoreConfig::from_url(url)?
        .pool_size(connections.max(1))?
        .durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability);
    Ok(PlainFifoQueue::new(PgStore::new(config)?))
}

/// Creates the baseline's claim index (any tenant's oldest available run;
/// the run queue does not need it otherwise), for the baseline phases only.
pub async fn create_index(url: &str) -> Result<()> {
    Ok(queue(url, 1)?.create_index().await?)
}

/// Drops the index of [`create_index`].
pub async fn drop_index(url: &str) -> Result<()> {
    Ok(queue(url, 1)?.drop_index().await?)
}

/// Pause after a claim that found nothing.
const EMPTY_PAUSE: Duration = Duration::from_millis(5);

/// What the claimers did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Claim statements sent.
    pub attempts: AtomicU64,
    /// Runs claimed, handled and completed.
    pub runs: AtomicU64,
}

/// Runs `claimers` plain claimers (one connection each, opened before it
/// returns) until `stop` fires; each run's handler sleeps `handler` (none
/// when zero). Returns the claimers' tasks and their counts.
pub async fn start(
    url: &str,
    claimers: usize,
    handler: Duration,
    stop: CancellationToken,
) -> Result<(tokio::task::JoinSet<Result<()>>, Arc<Counts>)> {
    let counts = Arc::new(Counts::default());
    let mut queues = Vec::new();
    for _ in 0..claimers {
        // One connection each, opened before it returns (a claim of at
        // most zero runs claims nothing).
        let queue = queue(url, 1)?;
        queue.claim_up_to(0).await?;
        queues.push(queue);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for queue in queues {
        let (counts, stop) = (Arc::clone(&counts), stop.clone());
        tasks.spawn(async move {
            while !stop.is_cancelled() {
                counts.attempts.fetch_add(1, Ordering::Relaxed);
                let Some(run) = queue.claim_one().await? else {
                    tokio::time::sleep(EMPTY_PAUSE).await;
                    continue;
                };
                if !handler.is_zero() {
                    tokio::time::sleep(handler).await;
                }
                queue.complete_one(&run).await?;
                counts.runs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    Ok((tasks, counts))
}

/// Waits for every task of a baseline (`what` names it in a panic's
/// error); the first error wins.
pub async fn join(mut tasks: tokio::task::JoinSet<Result<()>>, what: &str) -> Result<()> {
    while let Some(joined) = tasks.join_next().await {
        joined.with_context(|| format!("{what} panicked"))??;
    }
    Ok(())
}
