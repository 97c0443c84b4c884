//! Retention of finished runs: pruning completed, failed and cancelled
//! runs (and their claim history) by age, in small batches by database
//! time, like reservations (`retention.rs`).
//!
//! Live runs are never candidates, and a run is pruned only when the
//! database lets every claim row of it go (`statek.run_claim_deletable`,
//! migration V9): the claim is at least an hour old and, for a claim made
//! for a slot, the slot's reservation has been pruned already. A run whose
//! claim history is still inside the reservation retention window stays,
//! and is pruned by a later pass once the reservations are.

use std::borrow::Borrow;
use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::retention::{MAX_PRUNE_BATCH, MAX_RETENTION, MIN_RETENTION};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Counter: finished runs deleted by run pruning.
pub const RUNS_PRUNED_TOTAL: &str = "statek_runs_pruned_total";

/// One batch, part one: the clock is read once (`now()`, the
/// transaction's start); candidates are the finished runs that finished
/// before the cutoff, oldest finish first, whose every claim may go,
/// locked `SKIP LOCKED` (concurrent pruners never wait for each other; a
/// retry of a candidate waits for this transaction and then finds it
/// gone); their claim rows are deleted (each checked again by the
/// trigger).
const PRUNE_RUN_CLAIMS: &str = "
    WITH clock AS (
        SELECT now() AS observed_at, now() - make_interval(secs => $1) AS cutoff
    ),
    candidates AS MATERIALIZED (
        SELECT r.run_id
        FROM statek.runs AS r
        WHERE r.state IN ('completed', 'failed', 'cancelled')
          AND r.finished_at < (SELECT cutoff FROM clock)
          -- The attempt the run row holds (migration V13), by the same rule.
          AND (r.claim_token IS NULL
               OR statek.run_claim_deletable(r.run_id, r.claim_shard_id, r.claim_sequence,
                                             r.claimed_at))
          AND NOT EXISTS (
              SELECT 1 FROM statek.run_claims AS c
              WHERE c.run_id = r.run_id
                AND NOT statek.run_claim_deletable(c.run_id, c.shard_id, c.sequence, c.claimed_at))
        ORDER BY r.finished_at, r.run_id
        LIMIT $2
        FOR UPDATE OF r SKIP LOCKED
    ),
    claims AS (
        DELETE FROM statek.run_claims
        WHERE run_id IN (SELECT run_id FROM candidates)
        RETURNING 1
    )
    SELECT (SELECT observed_at FROM clock) AS observed_at,
           (SELECT cutoff FROM clock) AS cutoff,
           ARRAY(SELECT run_id FROM candidates) AS runs,
           (SELECT count(*) FROM claims) AS claims";

/// Part two: the runs themselves (locked by part one).
const PRUNE_RUNS: &str = "DELETE FROM statek.runs WHERE run_id = ANY ($1)";

/// Finished runs past this many seconds `$1`, whether or not V9's claim
/// rule lets pruning delete them yet (the prune backlog).
const COUNT_PRUNABLE: &str = "
    SELECT count(*) AS prunable FROM statek.runs AS r
    WHERE r.state IN ('completed', 'failed', 'cancelled')
      AND r.finished_at < now() - make_interval(secs => $1)";

/// How long finished runs are kept, and how many one prune transaction may
/// delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRetentionPolicy {
    retain_for: Duration,
    batch_size: u32,
}

impl RunRetentionPolicy {
    /// `retain_for` 1 hour..=366 days after a run finished; `batch_size`
    /// 1..=10,000 runs.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the limit that failed.
    pub fn new(retain_for: Duration, batch_size: u32) -> Result<Self, StoreError> {
        if !(MIN_RETENTION..=MAX_RETENTION).contains(&retain_for) {
            return Err(StoreError::InvalidArgument(format!(
                "run retention must be 1 hour..=366 days, got {} s",
                retain_for.as_secs()
            )));
        }
        if !(1..=MAX_PRUNE_BATCH).contains(&batch_size) {
            return Err(StoreError::InvalidArgument(format!(
                "prune batch size must be 1..={MAX_PRUNE_BATCH}, got {batch_size}"
            )));
        }
        Ok(Self {
            retain_for,
            batch_size,
        })
    }

    /// How long finished runs are kept.
    pub fn retain_for(&self) -> Duration {
        self.retain_for
    }

    /// Runs deleted per transaction at most.
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }
}

/// What one run prune batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPruneReport {
    /// Database time the batch ran at (read once).
    pub observed_at: SystemTime,
    /// Exclusive cutoff: runs that finished before it were candidates.
    pub cutoff: SystemTime,
    /// Runs deleted (at most the batch size; 0 when nothing is left).
    pub deleted_runs: u64,
    /// Their claim history rows deleted.
    pub deleted_claims: u64,
}

impl PgStore {
    /// Deletes at most one batch of the oldest finished runs past the
    /// retention, with their claim history, in one transaction. Never
    /// touches live runs, nor a run any of whose claims the database still
    /// keeps (younger than an hour, or made for a slot whose reservation is
    /// still retained). Call it in a loop until `deleted_runs == 0`.
    ///
    /// # Errors
    /// [`StoreError::PermissionDenied`] for a role without DELETE on runs
    /// (the role profile's retention role has it); connection and server
    /// errors.
    pub async fn prune_finished_runs(
        &self,
        policy: impl Borrow<RunRetentionPolicy>,
    ) -> Result<RunPruneReport, StoreError> {
        let policy = *policy.borrow();
        let retain_secs = policy.retain_for.as_secs_f64();
        let batch = i64::from(policy.batch_size);
        let report = self
            .in_transaction(
                self.config().effective_maintenance_timeout(),
                async |db: &Db<'_>| {
                    let row = db
                        .query_one(
                            PRUNE_RUN_CLAIMS,
                            &[(&retain_secs, Type::FLOAT8), (&batch, Type::INT8)],
                        )
                        .await?;
                    let runs: Vec<Uuid> = row.try_get("runs")?;
                    let claims: i64 = row.try_get("claims")?;
                    let deleted = if runs.is_empty() {
                        0
                    } else {
                        db.execute(PRUNE_RUNS, &[(&runs, Type::UUID_ARRAY)]).await?
                    };
                    Ok(RunPruneReport {
                        observed_at: row.try_get("observed_at")?,
                        cutoff: row.try_get("cutoff")?,
                        deleted_runs: deleted,
                        deleted_claims: u64::try_from(claims).unwrap_or(0),
                    })
                },
            )
            .await?;
        metrics::counter!(RUNS_PRUNED_TOTAL).increment(report.deleted_runs);
        tracing::info!(
            runs = report.deleted_runs,
            claims = report.deleted_claims,
            "pruned finished runs"
        );
        Ok(report)
    }

    /// Finished runs that finished more than `retain_for` ago (whether or
    /// not their claim history lets them go yet).
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn count_finished_runs_older_than(
        &self,
        retain_for: Duration,
    ) -> Result<u64, StoreError> {
        let secs = retain_for.as_secs_f64();
        let count: i64 = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(COUNT_PRUNABLE, &[(&secs, Type::FLOAT8)])
                    .await?
                    .try_get("prunable")?)
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let check = |secs: u64, batch: u32| {
            RunRetentionPolicy::new(Duration::from_secs(secs), batch).is_ok()
        };
        assert!(!check(3599, 10));
        assert!(check(3600, 10));
        assert!(check(366 * 86_400, 10_000));
        assert!(!check(367 * 86_400, 10));
        assert!(!check(86_400, 0));
        assert!(!check(86_400, 10_001));
    }
}
