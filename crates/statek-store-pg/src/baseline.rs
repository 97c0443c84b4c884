//! Feature `baseline`: the plain FIFO `SKIP LOCKED` queue that statek is
//! compared with, in the demo (`statek demo`) and the bench
//! (`cargo xtask bench`). **It is the unfair comparison, not for
//! production**: it claims the oldest available run of *any* tenant, so a
//! tenant with a backlog delays every run queued after it. It takes no
//! reservation, records no claim evidence (no slot, no claim token), and
//! ignores policies, shards and tenants.
//!
//! It works on statek's own `statek.runs` table, with the same lease
//! columns statek's claims set, so both sides of a comparison enqueue the
//! same runs with [`PgStore::enqueue`]. Its claim needs an index of its
//! own (any tenant's oldest available run), which
//! [`PlainFifoQueue::create_index`] creates and
//! [`PlainFifoQueue::drop_index`] drops (owner role).
//!
//! The SQL is the bench's, unchanged but for returning more columns:
//! [`PlainFifoQueue::claim_one`] and [`PlainFifoQueue::complete_one`] are
//! the plain claimer's statements (one run per statement),
//! [`PlainFifoQueue::claim_up_to`] and [`PlainFifoQueue::complete`] the
//! batched queue's (River's producer and batch completer: many runs per
//! statement), which [`BatchedFifoWorker`] runs: the one FIFO worker of
//! both the demo and the bench.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use statek_policy::TenantId;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// The baseline's own index: any tenant's oldest available run.
const CREATE_INDEX: &str = "CREATE INDEX IF NOT EXISTS baseline_plain_fifo_claim_idx
    ON statek.runs (available_at, queue_seq) WHERE state = 'available'";

/// Drops [`CREATE_INDEX`]'s index.
const DROP_INDEX: &str = "DROP INDEX IF EXISTS statek.baseline_plain_fifo_claim_idx";

/// The plain FIFO claim of the oldest available runs of any tenant, leased
/// with token `$1`, at most `$limit` of them (a literal or a parameter).
macro_rules! claim_oldest {
    ($limit:literal) => {
        concat!(
            "
    WITH candidate AS MATERIALIZED (
        SELECT run_id FROM statek.runs
        WHERE state = 'available' AND available_at <= clock_timestamp()
        ORDER BY available_at, queue_seq
        LIMIT ",
            $limit,
            "
        FOR UPDATE SKIP LOCKED
    )
    UPDATE statek.runs AS r
    SET state = 'running', attempt = r.attempt + 1, lease_token = $1,
        lease_expires_at = clock_timestamp() + interval '30 seconds',
        claimed_at = clock_timestamp()
    FROM candidate WHERE r.run_id = candidate.run_id
    RETURNING r.run_id, r.tenant_id, r.available_at, r.claimed_at"
        )
    };
}

/// Claims any tenant's oldest available run, leased with token `$1`.
const CLAIM_ONE: &str = claim_oldest!("1");

/// Claims up to `$2` of the oldest available runs of any tenant, leased
/// with token `$1`, in one statement.
const CLAIM_UP_TO: &str = claim_oldest!("$2");

/// Completes run `$1` if it is still leased with token `$2`.
const COMPLETE_ONE: &str = "
    UPDATE statek.runs
    SET state = 'completed', finished_at = clock_timestamp(), lease_token = NULL,
        lease_expires_at = NULL
    WHERE run_id = $1 AND lease_token = $2 AND state = 'running'";

/// Completes the runs `$1` (each still leased with its token in `$2`), in
/// one statement.
const COMPLETE: &str = "
    UPDATE statek.runs AS r
    SET state = 'completed', finished_at = clock_timestamp(), lease_token = NULL,
        lease_expires_at = NULL
    FROM unnest($1::uuid[], $2::uuid[]) AS done (run_id, lease_token)
    WHERE r.run_id = done.run_id AND r.lease_token = done.lease_token
      AND r.state = 'running'";

/// A run claimed by the plain FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainFifoRun {
    /// The run.
    pub run_id: Uuid,
    /// Its tenant (the queue did not choose it: it came first).
    pub tenant: TenantId,
    /// Database time from which it was claimable.
    pub available_at: SystemTime,
    /// Database time of the claim.
    pub claimed_at: SystemTime,
    lease_token: Uuid,
}

/// The plain FIFO `SKIP LOCKED` queue: the unfair baseline of the demo and
/// the bench, **not for production** (see the [module docs](self)).
/// Claims take any tenant's oldest available run; a lease lasts 30 seconds
/// and nothing heartbeats or rescues it.
#[derive(Debug, Clone)]
pub struct PlainFifoQueue {
    store: PgStore,
}

impl PlainFifoQueue {
    /// The baseline on `store`'s pool and timeouts.
    pub fn new(store: PgStore) -> Self {
        Self { store }
    }

    /// Creates the baseline's claim index if it is missing (owner role).
    ///
    /// # Errors
    /// Permission, connection and server errors.
    pub async fn create_index(&self) -> Result<(), StoreError> {
        self.maintenance(CREATE_INDEX).await
    }

    /// Drops the baseline's claim index if it exists (owner role).
    ///
    /// # Errors
    /// Permission, connection and server errors.
    pub async fn drop_index(&self) -> Result<(), StoreError> {
        self.maintenance(DROP_INDEX).await
    }

    async fn maintenance(&self, sql: &'static str) -> Result<(), StoreError> {
        self.store
            .in_transaction(
                self.store.config().effective_maintenance_timeout(),
                async |db: &Db<'_>| Ok(db.batch_execute(sql).await?),
            )
            .await
    }

    /// Claims the oldest available run of any tenant (one statement), or
    /// `None` when none is available or all are locked.
    ///
    /// # Errors
    /// Connection and server errors; [`StoreError::CorruptData`] for a
    /// stored tenant id that does not parse.
    pub async fn claim_one(&self) -> Result<Option<PlainFifoRun>, StoreError> {
        let token = Uuid::now_v7();
        let row = self
            .store
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db.query_opt(CLAIM_ONE, &[(&token, Type::UUID)]).await?)
            })
            .await?;
        row.map(|row| plain_run(&row, token)).transpose()
    }

    /// Claims up to `limit` of the oldest available runs of any tenant, in
    /// one statement, all leased with one token.
    ///
    /// # Errors
    /// Connection and server errors; [`StoreError::CorruptData`] for a
    /// stored tenant id that does not parse.
    pub async fn claim_up_to(&self, limit: u32) -> Result<Vec<PlainFifoRun>, StoreError> {
        let token = Uuid::now_v7();
        let limit = i64::from(limit);
        let rows = self
            .store
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(CLAIM_UP_TO, &[(&token, Type::UUID), (&limit, Type::INT8)])
                    .await?)
            })
            .await?;
        rows.iter().map(|row| plain_run(row, token)).collect()
    }

    /// Completes one claimed run; false if its lease was no longer held.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn complete_one(&self, run: &PlainFifoRun) -> Result<bool, StoreError> {
        self.store
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .execute(
                        COMPLETE_ONE,
                        &[(&run.run_id, Type::UUID), (&run.lease_token, Type::UUID)],
                    )
                    .await?
                    == 1)
            })
            .await
    }

    /// Completes claimed runs in one statement; returns how many were
    /// still leased and are now completed.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn complete(&self, runs: &[PlainFifoRun]) -> Result<u64, StoreError> {
        let ids: Vec<Uuid> = runs.iter().map(|r| r.run_id).collect();
        let tokens: Vec<Uuid> = runs.iter().map(|r| r.lease_token).collect();
        self.store
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .execute(
                        COMPLETE,
                        &[(&ids, Type::UUID_ARRAY), (&tokens, Type::UUID_ARRAY)],
                    )
                    .await?)
            })
            .await
    }
}

/// What a [`BatchedFifoWorker`] did, counted as it goes.
#[derive(Debug, Default)]
pub struct BatchedFifoCounts {
    /// Claim statements.
    pub fetches: AtomicU64,
    /// Completion statements.
    pub completions: AtomicU64,
    /// Runs completed.
    pub runs: AtomicU64,
}

/// Pause after a claim that found nothing (the baseline does not listen
/// for notifications; River's poll interval is 1 s, woken by them).
const EMPTY_PAUSE: Duration = Duration::from_millis(5);

/// The batched plain queue's worker, run as the best PostgreSQL queues
/// run theirs (River's producer and batch completer): with free capacity
/// it claims that many of the oldest available runs of any tenant in one
/// statement, runs each run's work in its own task, and completes
/// finished runs in batches of up to its capacity per statement. A run
/// holds its capacity from its claim until its completion is committed,
/// as a statek Worker's run does, so "executing runs" means the same on
/// both sides of a comparison. The demo's FIFO side and the bench's
/// batched queue are this worker; **not for production** (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct BatchedFifoWorker {
    producer: PlainFifoQueue,
    completer: PlainFifoQueue,
    capacity: usize,
    counts: Arc<BatchedFifoCounts>,
}

impl BatchedFifoWorker {
    /// A worker that claims through `producer` and completes through
    /// `completer` (the same queue, or one with a connection of its own),
    /// with `capacity` runs executing at once (at least 1).
    pub fn new(producer: PlainFifoQueue, completer: PlainFifoQueue, capacity: usize) -> Self {
        Self {
            producer,
            completer,
            capacity: capacity.max(1),
            counts: Arc::default(),
        }
    }

    /// Its counts, updated while it runs.
    pub fn counts(&self) -> Arc<BatchedFifoCounts> {
        Arc::clone(&self.counts)
    }

    /// Claims and runs `work` for each claimed run until `stop` resolves,
    /// then waits for the runs in flight and completes them.
    ///
    /// # Errors
    /// The first claim or completion that failed (connection and server
    /// errors); the runs in flight are still completed when the claim
    /// failed.
    pub async fn run<W, Fut>(
        self,
        work: W,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), StoreError>
    where
        W: Fn(&PlainFifoRun) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let Self {
            producer,
            completer,
            capacity,
            counts,
        } = self;
        let free = Arc::new(Semaphore::new(capacity));
        let (done_tx, mut done_rx) =
            mpsc::unbounded_channel::<(PlainFifoRun, OwnedSemaphorePermit)>();
        let produce = async {
            let done_tx = done_tx;
            let mut stop = std::pin::pin!(stop);
            loop {
                let first = tokio::select! {
                    () = &mut stop => break,
                    permit = Arc::clone(&free).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
                let mut permits = vec![first];
                while let Ok(permit) = Arc::clone(&free).try_acquire_owned() {
                    permits.push(permit);
                }
                let limit = u32::try_from(permits.len()).unwrap_or(u32::MAX);
                let runs = producer.claim_up_to(limit).await?;
                counts.fetches.fetch_add(1, Ordering::Relaxed);
                if runs.is_empty() {
                    drop(permits);
                    tokio::select! {
                        () = &mut stop => break,
                        () = tokio::time::sleep(EMPTY_PAUSE) => continue,
                    }
                }
                // Capacity not filled goes back at once.
                permits.truncate(runs.len());
                for (run, permit) in runs.into_iter().zip(permits) {
                    let (done, working) = (done_tx.clone(), work(&run));
                    tokio::spawn(async move {
                        working.await;
                        done.send((run, permit)).ok();
                    });
                }
            }
            Ok::<(), StoreError>(())
        };
        let complete = async {
            // Ends when the producer and every run in flight have dropped
            // their senders.
            while let Some(first) = done_rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < capacity {
                    match done_rx.try_recv() {
                        Ok(done) => batch.push(done),
                        Err(_) => break,
                    }
                }
                let runs: Vec<PlainFifoRun> = batch.iter().map(|(run, _)| run.clone()).collect();
                let completed = completer.complete(&runs).await?;
                counts.completions.fetch_add(1, Ordering::Relaxed);
                counts.runs.fetch_add(completed, Ordering::Relaxed);
                // The capacity goes back once the completions are committed.
                drop(batch);
            }
            Ok::<(), StoreError>(())
        };
        let (produced, completed) = tokio::join!(produce, complete);
        produced.and(completed)
    }
}

fn plain_run(row: &tokio_postgres::Row, token: Uuid) -> Result<PlainFifoRun, StoreError> {
    let tenant: String = row.try_get("tenant_id")?;
    Ok(PlainFifoRun {
        run_id: row.try_get("run_id")?,
        tenant: TenantId::try_from(tenant.as_str())
            .map_err(|e| StoreError::corrupt("run", format!("tenant id {tenant:?}: {e}")))?,
        available_at: row.try_get("available_at")?,
        claimed_at: row.try_get("claimed_at")?,
        lease_token: token,
    })
}
