//! Batch reservations: `k` contiguous sequences of a shard in one short
//! transaction, idempotent by a client-made UUIDv7 batch id.
//!
//! Every reservation of a shard serialises on its cursor row, so a shard
//! reserves at most one commit's worth of sequences at a time. A batch takes
//! the cursor lock once for `k` sequences and is stored as ONE immutable
//! range row (migration V5: the batch id, the first sequence, `k`, the
//! digest, `reserved_at`); each sequence's evidence is derived from it
//! (`slot = sequence mod L`). Retention prunes the range as one row. The
//! starvation bound, counted in reservations, is the same as for `k`
//! single reservations.

use crate::{ReservationError, RolloutError};
use std::time::SystemTime;

use statek_core::Reservation;
use statek_policy::{PolicyDigest, SchedulerShardId};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::durability_report::SynchronousCommit;
use crate::failover::Guarded;
use crate::reservation::{
    check_locked_shard, check_uuid_v7, expand_rows, guard_columns, reservation_write_error,
    why_nothing_inserted,
};
use crate::statement::Db;
use crate::{PgStore, StoreError};
use statek_core::MAX_RESERVATION_BATCH;

/// The rows of a batch, in sequence order, with their shard's cycle length:
/// its one range row, or (a batch made under V4) its `k` rows.
const SELECT_BATCH: &str = "
    SELECT r.reservation_id, r.shard_id, r.sequence, r.slot, r.policy_digest, r.reserved_at,
           r.sequence_count, s.cycle_length
    FROM statek.scheduler_reservations AS r
    JOIN statek.scheduler_shards AS s ON s.shard_id = r.shard_id
    WHERE r.batch_id = $1
    ORDER BY r.sequence";

/// The whole batch as one statement (one round trip, its own autocommit
/// transaction), built like `reserve`'s (`statek.reserve_batch`, migration
/// V5): set `synchronous_commit` ($7); refuse on another timeline than $6;
/// lock the cursor row; insert the range row (`k` sequences from the
/// cursor), whose reservation id is the batch id, unless that id already
/// exists (`ON CONFLICT` sees committed and in-flight rows, so a batch is
/// never inserted twice); advance the cursor by `k` only if it was
/// inserted. `$5` (tail ids, not stored) is NULL. The
/// locked row comes back so the caller can tell why nothing was inserted.
const RESERVE_BATCH: &str = "SELECT * FROM statek.reserve_batch($1, $2, $3, $4, $5, $6, $7)";

/// `k` contiguous reservations of one shard, made in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationBatch {
    batch_id: Uuid,
    reservations: Vec<Reservation>,
    replayed: bool,
}

impl ReservationBatch {
    /// The client-made batch id (UUIDv7).
    pub fn batch_id(&self) -> Uuid {
        self.batch_id
    }

    /// The reservations, in sequence order; never empty, contiguous.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    /// Takes the reservations out, in sequence order.
    pub fn into_reservations(self) -> Vec<Reservation> {
        self.reservations
    }

    /// The first sequence of the range.
    pub fn first_sequence(&self) -> u64 {
        self.reservations.first().map_or(0, Reservation::sequence)
    }

    /// The number of reservations, `k`.
    pub fn len(&self) -> usize {
        self.reservations.len()
    }

    /// Always false: a batch has 1..=[`MAX_RESERVATION_BATCH`] reservations.
    pub fn is_empty(&self) -> bool {
        self.reservations.is_empty()
    }

    /// True when this call found the batch already committed (a retry after
    /// a lost acknowledgement) and returned it instead of reserving anew.
    pub fn replayed(&self) -> bool {
        self.replayed
    }
}

/// Checks the committed rows of a batch found by id against the request.
fn existing_batch(
    batch_id: Uuid,
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    k: u32,
    rows: &[tokio_postgres::Row],
) -> Result<ReservationBatch, StoreError> {
    let reservations = expand_rows(rows, true, "reservation batch")?;
    let conflict = |detail: String| {
        StoreError::Reservation(ReservationError::BatchConflict { batch_id, detail })
    };
    if let Some(first) = reservations.first() {
        if first.shard() != shard {
            return Err(conflict(format!("it was made on shard {}", first.shard())));
        }
        if first.policy_digest() != digest {
            return Err(conflict(format!(
                "it was made under policy {}",
                first.policy_digest()
            )));
        }
    }
    if u32::try_from(reservations.len()).ok() != Some(k) {
        return Err(conflict(format!(
            "it holds {} retained reservations, not {k} (another size, or partly pruned)",
            reservations.len()
        )));
    }
    Ok(ReservationBatch {
        batch_id,
        reservations,
        replayed: true,
    })
}

impl PgStore {
    /// Reserves `k` contiguous sequences of `shard` under the policy
    /// `digest`, keyed by the client-made UUIDv7 `batch_id`.
    ///
    /// The same short READ COMMITTED transaction as
    /// [`reserve`](PgStore::reserve), one statement for `k` sequences: lock
    /// the shard row `FOR UPDATE`; check the digest; insert one range row at
    /// the cursor (`k` sequences; its reservation id is `batch_id` itself,
    /// which makes a second insert of the batch impossible) and advance the
    /// cursor by `k`; commit. Each returned [`Reservation`] has the batch id
    /// as its id and its own sequence and slot.
    /// If the batch exists (a retry after a lost acknowledgement) a second
    /// query returns it, `replayed() == true`. Single and batch reservers of
    /// one shard share the lock, so together they produce one contiguous
    /// sequence with no gaps or repeats.
    ///
    /// Retrying with the same `batch_id` and `k` after an error is always
    /// safe: a committed batch is returned whole.
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: `batch_id` is not a UUIDv7, or `k`
    ///   is outside 1..=[`MAX_RESERVATION_BATCH`].
    /// - [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard), [`RolloutError::PolicyDigestMismatch`](crate::RolloutError::PolicyDigestMismatch)
    ///   as for `reserve`.
    /// - [`ReservationError::BatchConflict`](crate::ReservationError::BatchConflict): the batch id names a batch on
    ///   another shard or digest, or of another size; nothing is written.
    /// - [`ReservationError::SequenceExhausted`](crate::ReservationError::SequenceExhausted): fewer than `k` sequences are
    ///   left before `i64::MAX`; nothing is written.
    /// - [`StoreError::CorruptData`]: stored rows fail their checks.
    /// - transient errors for which [`StoreError::is_retryable`] is true.
    pub async fn reserve_batch(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        batch_id: Uuid,
        k: u32,
    ) -> Result<ReservationBatch, StoreError> {
        check_uuid_v7(batch_id, "batch id")?;
        if !(1..=MAX_RESERVATION_BATCH).contains(&k) {
            return Err(StoreError::InvalidArgument(format!(
                "batch size {k} is outside 1..={MAX_RESERVATION_BATCH}"
            )));
        }
        let level = self.config().synchronous_commit_level();
        self.guarded_reservation(shard, |expected| {
            self.with_response_timeout(async move |db: &Db<'_>| {
                reserve_batch_on(db, shard, digest, batch_id, k, expected, level).await
            })
        })
        .await
    }
}

/// The batch statement on `client` (see [`PgStore::reserve_batch`]).
async fn reserve_batch_on(
    db: &Db<'_>,
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    batch_id: Uuid,
    k: u32,
    expected_timeline: Option<u32>,
    level: SynchronousCommit,
) -> Result<Guarded<ReservationBatch>, StoreError> {
    let tail_ids: Option<Vec<Uuid>> = None;
    let count = i64::from(k);
    let expected = expected_timeline.and_then(|t| i32::try_from(t).ok());
    let row = db
        .query_opt(
            RESERVE_BATCH,
            &[
                (&batch_id, Type::UUID),
                (&shard.as_str(), Type::TEXT),
                (&&digest.as_bytes()[..], Type::BYTEA),
                (&count, Type::INT8),
                (&tail_ids, Type::UUID_ARRAY),
                (&expected, Type::INT4),
                (&level.as_str(), Type::TEXT),
            ],
        )
        .await
        .map_err(|e| reservation_write_error(e, shard))?
        .ok_or_else(|| {
            StoreError::Rollout(RolloutError::UnknownShard {
                shard: shard.clone(),
            })
        })?;

    let timeline = match guard_columns(&row, level)? {
        Ok(timeline) => timeline,
        Err(now) => return Ok(Guarded::TimelineChanged(now)),
    };
    let done = |value: ReservationBatch| Guarded::Done {
        id: batch_id,
        first: value.first_sequence(),
        count: k,
        timeline,
        value,
    };

    let head: Option<i64> = row.try_get("sequence")?;
    let Some(head) = head else {
        // Nothing inserted: the batch id exists (a replay or a
        // conflict), or a check on the locked row failed.
        let rows = db.query(SELECT_BATCH, &[(&batch_id, Type::UUID)]).await?;
        if !rows.is_empty() {
            let mut found = existing_batch(batch_id, shard, digest, k, &rows)?;
            found.reservations = std::mem::take(&mut found.reservations)
                .into_iter()
                .map(|reservation| reservation.with_timeline(Some(timeline)))
                .collect();
            return Ok(done(found));
        }
        let owner = db
            .query_opt(
                "SELECT batch_id FROM statek.scheduler_reservations WHERE reservation_id = $1",
                &[(&batch_id, Type::UUID)],
            )
            .await?;
        if let Some(owner) = owner {
            let detail = match owner.try_get::<_, Option<Uuid>>(0)? {
                Some(other) => format!("the id names a reservation of batch {other}"),
                None => "the id names a single reservation, not a batch".to_owned(),
            };
            return Err(StoreError::Reservation(ReservationError::BatchConflict {
                batch_id,
                detail,
            }));
        }
        return Err(why_nothing_inserted(db, shard, digest, &row, count).await);
    };
    let (cycle_length, next) = check_locked_shard(shard, digest, &row)?;
    // The sequences the range covers after its first.
    let tail_rows: i64 = row.try_get("tail_rows")?;
    let advanced: i64 = row.try_get("advanced")?;
    if head != next || tail_rows != count - 1 || advanced != 1 {
        return Err(StoreError::corrupt(
                "reservation batch",
                format!(
                    "batch {batch_id}: range at {head} of {} at cursor {next}, advanced {advanced} row(s)",
                    tail_rows + 1
                ),
            ));
    }
    let reserved_at: SystemTime = row.try_get("reserved_at")?;
    let first = u64::try_from(next)
        .map_err(|_| StoreError::corrupt("shard cursor", format!("negative cursor {next}")))?;
    let reservations = (first..first + u64::from(k))
        .map(|sequence| {
            Reservation::new(
                batch_id,
                shard.clone(),
                sequence,
                cycle_length,
                *digest,
                reserved_at,
                false,
            )
            .with_timeline(Some(timeline))
        })
        .collect();
    Ok(done(ReservationBatch {
        batch_id,
        reservations,
        replayed: false,
    }))
}
