//! Reading runs back as evidence: a run's state and attempts with every
//! claim of it, as the view `statek.run_attempts` shows them (the claim
//! history `statek.run_claims` and, since migration V13, the attempt each
//! run row holds), each with its finish time.
//! The demo checks from it that every run it enqueued completed exactly
//! once, and measures service lag in database time.

use std::time::SystemTime;

use statek_policy::{SchedulerShardId, TenantId};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Runs read per statement at most by [`PgStore::run_history`].
pub const MAX_RUN_HISTORY_BATCH: usize = 10_000;

/// Each run with its claims, oldest attempt first.
const SELECT_RUN_HISTORY: &str = "
    SELECT r.run_id, r.tenant_id, r.state, r.attempt, r.available_at, r.claimed_at,
           r.finished_at, c.attempt AS claim_attempt, c.shard_id AS claim_shard_id,
           c.sequence AS claim_sequence, c.claimed_at AS claim_claimed_at,
           c.finished_at AS claim_finished_at, c.cost AS claim_cost
    FROM statek.runs AS r
    LEFT JOIN statek.run_attempts AS c ON c.run_id = r.run_id
    WHERE r.run_id = ANY ($1::uuid[])
    ORDER BY r.run_id, c.attempt";

/// One claim of a run in the claim history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunClaimRecord {
    /// The attempt this claim started (1 for the first).
    pub attempt: u32,
    /// The shard and sequence of the slot that claimed it; `None` for a
    /// claim made without a slot ([`PgStore::claim_run`]).
    pub slot: Option<(SchedulerShardId, u64)>,
    /// Database time of the claim.
    pub claimed_at: SystemTime,
    /// Database time its holder completed or failed it; `None` while it
    /// runs or after its lease expired.
    pub finished_at: Option<SystemTime>,
    /// The cost its holder recorded with its finish (migration V18), in
    /// the handlers' cost units; `None` when it reported none, was not
    /// finished by its holder, or finished before V18.
    pub cost: Option<u64>,
}

/// A run as stored, with its claim history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run.
    pub run_id: Uuid,
    /// Its tenant.
    pub tenant: TenantId,
    /// `available`, `running`, `completed`, `failed` or `cancelled`.
    pub state: String,
    /// Claims so far (1 after the first execution).
    pub attempt: u32,
    /// Database time from which it is (or was last) claimable.
    pub available_at: SystemTime,
    /// Database time of its last claim.
    pub claimed_at: Option<SystemTime>,
    /// Database time it completed or finally failed.
    pub finished_at: Option<SystemTime>,
    /// Every claim recorded in the claim history, oldest first (empty for
    /// runs claimed by the plain FIFO baseline, which records none).
    pub claims: Vec<RunClaimRecord>,
}

impl PgStore {
    /// The stored state and claim history of the runs `run_ids`, in
    /// `run_id` order; ids that name no run are left out.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for more than
    /// [`MAX_RUN_HISTORY_BATCH`] ids; [`MigrationError::Behind`](crate::MigrationError::Behind) on a
    /// database not migrated to V18; [`StoreError::CorruptData`] for a
    /// stored id or counter out of range; connection and server errors.
    pub async fn run_history(&self, run_ids: &[Uuid]) -> Result<Vec<RunRecord>, StoreError> {
        if run_ids.len() > MAX_RUN_HISTORY_BATCH {
            return Err(StoreError::InvalidArgument(format!(
                "at most {MAX_RUN_HISTORY_BATCH} runs per call, got {}",
                run_ids.len()
            )));
        }
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(SELECT_RUN_HISTORY, &[(&run_ids, Type::UUID_ARRAY)])
                    .await?)
            })
            .await
            .map_err(|e| e.schema_behind(18, "reading the attempts' costs"))?;
        let mut records: Vec<RunRecord> = Vec::new();
        for row in &rows {
            let run_id: Uuid = row.try_get("run_id")?;
            if records.last().map(|r| r.run_id) != Some(run_id) {
                let tenant: String = row.try_get("tenant_id")?;
                records.push(RunRecord {
                    run_id,
                    tenant: TenantId::try_from(tenant.as_str()).map_err(|e| {
                        StoreError::corrupt("run", format!("tenant id {tenant:?}: {e}"))
                    })?,
                    state: row.try_get("state")?,
                    attempt: counter(row.try_get("attempt")?, "attempt")?,
                    available_at: row.try_get("available_at")?,
                    claimed_at: row.try_get("claimed_at")?,
                    finished_at: row.try_get("finished_at")?,
                    claims: Vec::new(),
                });
            }
            let Some(attempt) = row.try_get::<_, Option<i32>>("claim_attempt")? else {
                continue;
            };
            let shard: Option<String> = row.try_get("claim_shard_id")?;
            let sequence: Option<i64> = row.try_get("claim_sequence")?;
            let slot = match (shard, sequence) {
                (Some(shard), Some(sequence)) => Some((
                    SchedulerShardId::try_from(shard.as_str()).map_err(|e| {
                        StoreError::corrupt("run claim", format!("shard id {shard:?}: {e}"))
                    })?,
                    u64::try_from(sequence).map_err(|_| {
                        StoreError::corrupt("run claim", format!("sequence {sequence}"))
                    })?,
                )),
                _ => None,
            };
            let claim = RunClaimRecord {
                attempt: counter(attempt, "claim attempt")?,
                slot,
                claimed_at: row.try_get("claim_claimed_at")?,
                finished_at: row.try_get("claim_finished_at")?,
                cost: row
                    .try_get::<_, Option<i64>>("claim_cost")?
                    .map(|cost| {
                        u64::try_from(cost)
                            .map_err(|_| StoreError::corrupt("run claim", format!("cost {cost}")))
                    })
                    .transpose()?,
            };
            if let Some(record) = records.last_mut() {
                record.claims.push(claim);
            }
        }
        Ok(records)
    }
}

fn counter(value: i32, what: &'static str) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::corrupt("run", format!("{what} {value}")))
}
