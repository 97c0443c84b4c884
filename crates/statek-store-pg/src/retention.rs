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
/// start). Per shard, only an unbroken oldest prefix in **sequence** order
/// is deleted: the rows before the shard's first row still inside the
/// retention. Never by `reserved_at` alone: two concurrent reservations can
/// commit their sequences in the other order of their start times
/// (`reserved_at` is the transaction's start), and deleting the younger
/// sequence first would leave a hole that every reader refuses as
/// `CorruptData`. A row due behind a row still inside the retention waits
/// until that row is due too.
///
/// The shards are found by a skip scan of the `(shard_id, sequence)` key
/// (the retention role cannot read the shard table), and each shard's
/// oldest rows (at most a batch) are read from that key in sequence
/// order. The due rows are locked `SKIP LOCKED`, so concurrent pruners
/// never wait for or delete the same row twice; a shard's rows are
/// deleted only up to its first due row that this batch could not lock (a
/// concurrent pruner holds it, or deleted it), so a pruner never deletes
/// past another one's uncommitted batch either. At most `$2` rows in all,
/// the shard whose oldest row is oldest first.
pub(crate) const PRUNE_BATCH: &str = "
    WITH RECURSIVE shards AS (
        (SELECT r.shard_id FROM statek.scheduler_reservations AS r
         ORDER BY r.shard_id LIMIT 1)
        UNION ALL
        SELECT (SELECT r.shard_id FROM statek.scheduler_reservations AS r
                WHERE r.shard_id > s.shard_id ORDER BY r.shard_id LIMIT 1)
        FROM shards AS s
        WHERE s.shard_id IS NOT NULL
    ),
    clock AS (
        SELECT now() AS observed_at, now() - make_interval(secs => $1) AS cutoff
    ),
    oldest AS MATERIALIZED (
        SELECT o.shard_id, o.sequence,
               -- True while every row of the shard up to this one is due.
               bool_and(o.reserved_at < (SELECT cutoff FROM clock))
                   OVER (PARTITION BY o.shard_id ORDER BY o.sequence) AS due,
               first_value(o.reserved_at)
                   OVER (PARTITION BY o.shard_id ORDER BY o.sequence) AS shard_oldest
        FROM shards AS s
        CROSS JOIN LATERAL (
            SELECT r.shard_id, r.sequence, r.reserved_at
            FROM statek.scheduler_reservations AS r
            WHERE r.shard_id = s.shard_id
            ORDER BY r.sequence
            LIMIT $2
        ) AS o
        WHERE s.shard_id IS NOT NULL
    ),
    due AS MATERIALIZED (
        SELECT o.shard_id, o.sequence
        FROM oldest AS o
        WHERE o.due
        ORDER BY o.shard_oldest, o.shard_id, o.sequence
        LIMIT $2
    ),
    locked AS MATERIALIZED (
        -- One key lookup per due row, never a join over the table.
        SELECT l.ctid, d.shard_id, d.sequence
        FROM due AS d
        CROSS JOIN LATERAL (
            SELECT r.ctid
            FROM statek.scheduler_reservations AS r
            WHERE r.shard_id = d.shard_id AND r.sequence = d.sequence
            FOR UPDATE SKIP LOCKED
        ) AS l
    ),
    unbroken AS (
        SELECT l.ctid,
               -- True while every due row of the shard up to this one is locked.
               bool_and(l.ctid IS NOT NULL)
                   OVER (PARTITION BY d.shard_id ORDER BY d.sequence) AS held
        FROM due AS d
        LEFT JOIN locked AS l ON l.shard_id = d.shard_id AND l.sequence = d.sequence
    ),
    deleted AS (
        -- By physical row id: a TID scan of exactly the locked candidates
        -- (locked rows cannot move), never a scan of the table.
        DELETE FROM statek.scheduler_reservations
        WHERE ctid = ANY (ARRAY(SELECT ctid FROM unbroken WHERE held))
        RETURNING 1
    )
    SELECT (SELECT observed_at FROM clock) AS observed_at,
           (SELECT cutoff FROM clock) AS cutoff,
           (SELECT count(*) FROM deleted) AS deleted,
           (SELECT count(*) FROM due) - (SELECT count(*) FROM locked) AS held_elsewhere";

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
    /// Rows deleted (at most the batch size).
    pub deleted: u64,
    /// Due rows this batch could not lock: a concurrent pruner held them
    /// (or deleted them after this batch's snapshot). This batch deletes
    /// nothing of a shard at or behind such a row, so it can report
    /// `deleted == 0` while rows are still due: pause briefly and call
    /// again (see [`PruneReport::drained`]).
    pub held_elsewhere: u64,
    /// The policy's batch size this batch ran with.
    pub batch_size: u32,
}

impl PruneReport {
    /// Pause before the next batch when [`PruneReport::blocked`]: 50 ms,
    /// about one concurrent batch of 1,000 rows.
    pub const RETRY_PAUSE: Duration = Duration::from_millis(50);

    /// True when this batch left nothing due behind: it deleted fewer rows
    /// than its batch size and no concurrent pruner held a due row. A loop
    /// that prunes "until empty" stops on it; on `false` it calls again,
    /// after a short pause ([`PruneReport::RETRY_PAUSE`]) when the batch deleted
    /// nothing because another pruner held the oldest due rows.
    pub fn drained(&self) -> bool {
        self.held_elsewhere == 0 && self.deleted < u64::from(self.batch_size)
    }

    /// True when the batch deleted nothing only because a concurrent pruner
    /// held the oldest due rows: pause before the next call.
    pub fn blocked(&self) -> bool {
        self.deleted == 0 && self.held_elsewhere > 0
    }
}

impl PgStore {
    /// Deletes at most one batch of the oldest reservation rows older than
    /// the retention window, in one transaction. Per shard it deletes only
    /// an unbroken oldest prefix in sequence order, never a row behind a
    /// row still inside the retention (whose `reserved_at` can be later
    /// than a higher sequence's: see the statement's comment), so the
    /// retained rows of a shard never have a hole. Never touches shard rows
    /// or cursors: the next reservation continues the sequence. Call it in
    /// a loop until [`PruneReport::drained`] to prune everything due; a
    /// batch can delete nothing while rows are due, when a concurrent
    /// pruner holds the oldest of them ([`PruneReport::blocked`]: pause
    /// [`PruneReport::RETRY_PAUSE`] and call again).
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
                    let held_elsewhere: i64 = row.try_get("held_elsewhere")?;
                    Ok(PruneReport {
                        observed_at: row.try_get("observed_at")?,
                        cutoff: row.try_get("cutoff")?,
                        deleted: u64::try_from(deleted).unwrap_or(0),
                        held_elsewhere: u64::try_from(held_elsewhere).unwrap_or(0),
                        batch_size: policy.batch_size,
                    })
                },
            )
            .await?;
        metrics::counter!(PRUNE_DELETED_TOTAL).increment(report.deleted);
        if let Ok(cutoff) = report.cutoff.duration_since(SystemTime::UNIX_EPOCH) {
            metrics::gauge!(PRUNE_CUTOFF_TIMESTAMP_SECONDS).set(cutoff.as_secs_f64());
        }
        metrics::histogram!(PRUNE_BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        tracing::info!(
            deleted = report.deleted,
            held_elsewhere = report.held_elsewhere,
            "pruned reservations"
        );
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
