//! The batched plain queue, as the best PostgreSQL queues do it (River's
//! producer and batch completer): a producer that has capacity fetches up
//! to that many available runs of any tenant in ONE statement
//! (`FOR UPDATE SKIP LOCKED`), executes them concurrently, and a completer
//! marks finished runs completed in batches of up to `capacity` per
//! statement. No reservation, no fairness. A run holds its capacity from
//! its fetch until its completion is committed (as a claimer's run does),
//! so "executing runs" means the same on every side. This is the bench's
//! SQL, not product code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Fetches up to `$2` of the oldest available runs of any tenant and
/// leases them with token `$1`, in one statement.
const FETCH: &str = "
    WITH candidate AS MATERIALIZED (
        SELECT run_id FROM statek.runs
        WHERE state = 'available' AND available_at <= clock_timestamp()
        ORDER BY available_at, queue_seq
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    )
    UPDATE statek.runs AS r
    SET state = 'running', attempt = r.attempt + 1, lease_token = $1,
        lease_expires_at = clock_timestamp() + interval '30 seconds',
        claimed_at = clock_timestamp()
    FROM candidate WHERE r.run_id = candidate.run_id
    RETURNING r.run_id";

/// Completes the runs `$1` (each still leased with its token in `$2`), in
/// one statement.
const COMPLETE: &str = "
    UPDATE statek.runs AS r
    SET state = 'completed', finished_at = clock_timestamp(), lease_token = NULL,
        lease_expires_at = NULL
    FROM unnest($1::uuid[], $2::uuid[]) AS done (run_id, lease_token)
    WHERE r.run_id = done.run_id AND r.lease_token = done.lease_token
      AND r.state = 'running'";

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
    let producer = crate::bench::connect(url).await?;
    let completer = crate::bench::connect(url).await?;
    let slots = Arc::new(Semaphore::new(capacity));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Uuid, Uuid, OwnedSemaphorePermit)>();
    let mut tasks = tokio::task::JoinSet::new();
    {
        let counts = Arc::clone(&counts);
        tasks.spawn(async move {
            let fetch = producer.prepare(FETCH).await?;
            loop {
                let first = tokio::select! {
                    _ = stop.cancelled() => break,
                    permit = Arc::clone(&slots).acquire_owned() => permit?,
                };
                let mut permits = vec![first];
                while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
                    permits.push(permit);
                }
                let token = Uuid::now_v7();
                let limit = i64::try_from(permits.len())?;
                let rows = producer.query(&fetch, &[&token, &limit]).await?;
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
                for (row, permit) in rows.iter().zip(permits) {
                    let run_id: Uuid = row.try_get("run_id")?;
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        if !handler.is_zero() {
                            tokio::time::sleep(handler).await;
                        }
                        done.send((run_id, token, permit)).ok();
                    });
                }
            }
            Ok(())
        });
    }
    let completer_counts = Arc::clone(&counts);
    tasks.spawn(async move {
        let counts = completer_counts;
        let complete = completer.prepare(COMPLETE).await?;
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
            let ids: Vec<Uuid> = batch.iter().map(|d| d.0).collect();
            let tokens: Vec<Uuid> = batch.iter().map(|d| d.1).collect();
            let completed = completer.execute(&complete, &[&ids, &tokens]).await?;
            counts.completions.fetch_add(1, Ordering::Relaxed);
            counts.runs.fetch_add(completed, Ordering::Relaxed);
            // The permits go back with the batch, now that it is committed.
            drop(batch);
        }
        Ok(())
    });
    Ok((tasks, counts))
}
