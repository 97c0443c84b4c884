//! The plain `SKIP LOCKED` claimer, the baseline of the queue and
//! workloads sections: one connection per claimer, each looping "claim any
//! tenant's oldest available run, run the handler, complete it" (one claim
//! and one completion statement per run). No reservation, no fairness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The plain claimer's own index: any tenant's oldest available run (the
/// run queue does not need it otherwise). Created for the baseline phases
/// only.
pub const PLAIN_INDEX: &str = "CREATE INDEX IF NOT EXISTS bench_plain_claim_idx
    ON statek.runs (available_at, queue_seq) WHERE state = 'available'";

/// Drops [`PLAIN_INDEX`].
pub const DROP_PLAIN_INDEX: &str = "DROP INDEX IF EXISTS statek.bench_plain_claim_idx";

/// Claims any tenant's oldest run (the common `SKIP LOCKED` queue), with
/// the same lease columns statek sets.
const PLAIN_CLAIM: &str = "
    WITH candidate AS MATERIALIZED (
        SELECT run_id FROM statek.runs
        WHERE state = 'available' AND available_at <= clock_timestamp()
        ORDER BY available_at, queue_seq
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE statek.runs AS r
    SET state = 'running', attempt = r.attempt + 1, lease_token = $1,
        lease_expires_at = clock_timestamp() + interval '30 seconds',
        claimed_at = clock_timestamp()
    FROM candidate WHERE r.run_id = candidate.run_id
    RETURNING r.run_id";

const PLAIN_COMPLETE: &str = "
    UPDATE statek.runs
    SET state = 'completed', finished_at = clock_timestamp(), lease_token = NULL,
        lease_expires_at = NULL
    WHERE run_id = $1 AND lease_token = $2 AND state = 'running'";

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
    let mut clients = Vec::new();
    for _ in 0..claimers {
        clients.push(super::connect(url).await?);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let (counts, stop) = (Arc::clone(&counts), stop.clone());
        tasks.spawn(async move {
            let claim = client.prepare(PLAIN_CLAIM).await?;
            let complete = client.prepare(PLAIN_COMPLETE).await?;
            while !stop.is_cancelled() {
                let token = Uuid::now_v7();
                counts.attempts.fetch_add(1, Ordering::Relaxed);
                let Some(row) = client.query_opt(&claim, &[&token]).await? else {
                    tokio::time::sleep(EMPTY_PAUSE).await;
                    continue;
                };
                let run_id: Uuid = row.try_get("run_id")?;
                if !handler.is_zero() {
                    tokio::time::sleep(handler).await;
                }
                client.execute(&complete, &[&run_id, &token]).await?;
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
