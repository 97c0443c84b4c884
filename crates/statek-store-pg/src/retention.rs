//! Retention: pruning old reservation rows in small batches by database time.

use std::borrow::Borrow;
use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Shortest retention: 1 hour.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);
/// Longest retention: 366 days.
pub const MAX_RETENTION: Duration = Duration::from_secs(366 * 86_400);
/// Counter: reservation rows deleted by pruning.
pub const PRUNE_DELETED_TOTAL: &str = "statek_prune_deleted_total";
/// Gauge, Unix seconds: the cutoff of the last prune batch.
pub const PRUNE_CUTOFF_TIMESTAMP_SECONDS: &str = "statek_prune_cutoff_timestamp_seconds";
/// Histogram, seconds: one prune batch transaction.
pub const PRUNE_BATCH_DURATION_SECONDS: &str = "statek_prune_batch_duration_seconds";

/// Largest batch: 10,000 rows per transaction.
pub const MAX_PRUNE_BATCH: u32 = 10_000;

/// One batch: the database clock is read once (`now()`, the transaction's
/// start), candidates are the oldest rows strictly older than the cutoff in
/// retention-index order, locked with `SKIP LOCKED` so concurrent pruners
/// never wait for or delete the same row twice.
pub(crate) const PRUNE_BATCH: &str = "
    WITH clock AS (
        SELECT now() AS observed_at, now() - make_interval(secs => $1) AS cutoff
    ),
    candidates AS MATERIALIZED (
        SELECT ctid
        FROM statek.scheduler_reservations
        WHERE reserved_at < (SELECT cutoff FROM clock)
        ORDER BY reserved_at, reservation_id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    deleted AS (
        -- By physical row id: a TID scan of exactly the locked candidates
        -- (locked rows cannot move), never a scan of the table.
        DELETE FROM statek.scheduler_reservations
        WHERE ctid = ANY (ARRAY(SELECT ctid FROM candidates))
        RETURNING 1
    )
    SELECT (SELECT observed_at FROM clock) AS observed_at,
           (SELECT cutoff FROM clock) AS cutoff,
           (SELECT count(*) FROM deleted) AS deleted";

/// How long reservation rows are kept as evidence, and how many one prune
/// transaction may delete.
///
/// Keep rows longer than any reservation retry can take (a retried id whose
/// row was pruned reserves a *new* sequence), and longer than your incident
/// replay and audit window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerFairnessRetentionPolicy {
    retain_for: Duration,
    batch_size: u32,
}

impl SchedulerFairnessRetentionPolicy {
    /// `retain_for` 1 hour..=366 days; `batch_size` 1..=10,000 rows.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the limit that failed.
    pub fn new(retain_for: Duration, batch_size: u32) -> Result<Self, StoreError> {
        if !(MIN_RETENTION..=MAX_RETENTION).contains(&retain_for) {
            return Err(StoreError::InvalidArgument(format!(
                "retention must be 1 hour..=366 days, got {} s",
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

    /// How long rows are kept.
    pub fn retain_for(&self) -> Duration {
        self.retain_for
    }

    /// Rows deleted per transaction at most.
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }
}

/// What one prune batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneReport {
    /// Database time the batch ran at (read once).
    pub observed_at: SystemTime,
    /// Exclusive cutoff: rows reserved before it were candidates.
    pub cutoff: SystemTime,
    /// Rows deleted (at most the batch size; 0 when nothing is left).
    pub deleted: u64,
}

impl PgStore {
    /// Deletes at most one batch of the oldest reservation rows older than
    /// the retention window, in one transaction. Never touches shard rows or
    /// cursors: the next reservation continues the sequence. Call it in a
    /// loop until `deleted == 0` to prune everything due.
    ///
    /// Takes the retention policy by value or by reference (it is `Copy`):
    /// both `prune_scheduler_fairness_reservations(policy)` and
    /// `prune_scheduler_fairness_reservations(&policy)` compile.
    ///
    /// # Errors
    /// [`StoreError::PermissionDenied`] for a role without DELETE on
    /// reservations; connection and server errors.
    pub async fn prune_scheduler_fairness_reservations(
        &self,
        policy: impl Borrow<SchedulerFairnessRetentionPolicy>,
    ) -> Result<PruneReport, StoreError> {
        let policy = *policy.borrow();
        let started = std::time::Instant::now();
        let retain_secs = policy.retain_for.as_secs_f64();
        let batch = i64::from(policy.batch_size);
        let report = self
            .in_transaction(
                self.config().effective_maintenance_timeout(),
                async |db: &Db<'_>| {
                    let row = db
                        .query_one(
                            PRUNE_BATCH,
                            &[(&retain_secs, Type::FLOAT8), (&batch, Type::INT8)],
                        )
                        .await?;
                    let deleted: i64 = row.try_get("deleted")?;
                    Ok(PruneReport {
                        observed_at: row.try_get("observed_at")?,
                        cutoff: row.try_get("cutoff")?,
                        deleted: u64::try_from(deleted).unwrap_or(0),
                    })
                },
            )
            .await?;
        metrics::counter!(PRUNE_DELETED_TOTAL).increment(report.deleted);
        if let Ok(cutoff) = report.cutoff.duration_since(SystemTime::UNIX_EPOCH) {
            metrics::gauge!(PRUNE_CUTOFF_TIMESTAMP_SECONDS).set(cutoff.as_secs_f64());
        }
        metrics::histogram!(PRUNE_BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        tracing::info!(deleted = report.deleted, "pruned reservations");
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(retain_secs: u64, batch: u32, ok: bool) {
        let result = SchedulerFairnessRetentionPolicy::new(Duration::from_secs(retain_secs), batch);
        assert_eq!(
            result.is_ok(),
            ok,
            "{retain_secs} s, batch {batch}: {result:?}"
        );
    }

    #[test]
    fn limits() {
        check(60, 100, false);
        check(3599, 100, false);
        check(3600, 100, true);
        check(366 * 86_400, 100, true);
        check(367 * 86_400, 100, false);
        check(86_400, 0, false);
        check(86_400, 1, true);
        check(86_400, 10_000, true);
        check(86_400, 10_001, false);
    }
}
