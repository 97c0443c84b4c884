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
//! statement).

use std::time::SystemTime;

use statek_policy::TenantId;
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
