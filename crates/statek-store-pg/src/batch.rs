//! Batch reservations: `k` contiguous sequences of a shard in one short
//! transaction, idempotent by a client-made UUIDv7 batch id.
//!
//! Every reservation of a shard serialises on its cursor row, so a shard
//! reserves at most one commit's worth of sequences at a time. A batch takes
//! the cursor lock once for `k` sequences. Each sequence still gets its own
//! reservation row (own id, slot and `reserved_at`), so the evidence,
//! retention and the starvation bound, counted in reservations, are the same
//! as for `k` single reservations.

use std::time::SystemTime;

use statek_policy::{PolicyDigest, SchedulerShardId};
use uuid::Uuid;

use crate::reservation::{
    check_locked_shard, check_uuid_v7, lock_shard, reservation_from_row, Reservation,
};
use crate::shard::slot_of;
use crate::{PgStore, StoreError};

/// The largest batch, in reservations. A batch holds the cursor lock for
/// one insert of `k` rows; 1024 keeps that insert short.
pub const MAX_RESERVATION_BATCH: u32 = 1024;

/// The rows of a batch, in sequence order, with their shard's cycle length.
const SELECT_BATCH: &str = "
    SELECT r.reservation_id, r.shard_id, r.sequence, r.slot, r.policy_digest, r.reserved_at,
           s.cycle_length
    FROM statek.scheduler_reservations AS r
    JOIN statek.scheduler_shards AS s ON s.shard_id = r.shard_id
    WHERE r.batch_id = $1
    ORDER BY r.sequence";

/// Inserts `$7` rows at the locked cursor `$3` (ids `$1`, in order) and
/// advances the cursor by `$7`, in one statement. The `next_sequence = $3`
/// guard makes a lost lock visible as zero rows.
const INSERT_BATCH_AND_ADVANCE: &str = "
    WITH inserted AS (
        INSERT INTO statek.scheduler_reservations
            (reservation_id, shard_id, sequence, slot, policy_digest, batch_id)
        SELECT t.id, $2, $3 + t.ord - 1, (($3 + t.ord - 1) % $4)::integer, $5, $6
        FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, ord)
        RETURNING reserved_at
    )
    UPDATE statek.scheduler_shards
    SET next_sequence = $3 + $7
    WHERE shard_id = $2 AND next_sequence = $3
    RETURNING (SELECT min(reserved_at) FROM inserted), (SELECT count(*) FROM inserted)";

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
    let mut reservations = Vec::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.try_get("reservation_id")?;
        reservations.push(reservation_from_row(id, row, true)?);
    }
    let conflict = |detail: String| StoreError::BatchConflict { batch_id, detail };
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
    for pair in reservations.windows(2) {
        if let [a, b] = pair {
            if b.shard() != a.shard() || b.sequence() != a.sequence() + 1 {
                return Err(StoreError::corrupt(
                    "reservation batch",
                    format!(
                        "batch {batch_id}: sequence {} on {} follows {} on {}",
                        b.sequence(),
                        b.shard(),
                        a.sequence(),
                        a.shard()
                    ),
                ));
            }
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
    /// [`reserve`](PgStore::reserve), once for `k` sequences: look the batch
    /// up (found: return it, `replayed() == true`); lock the shard row
    /// `FOR UPDATE`; look it up again; check the digest; insert `k` rows at
    /// the cursor (each with its own UUIDv7 and slot, all with `batch_id`)
    /// and advance the cursor by `k`; commit. Single and batch reservers of
    /// one shard share the lock, so together they produce one contiguous
    /// sequence with no gaps or repeats.
    ///
    /// Retrying with the same `batch_id` and `k` after an error is always
    /// safe: a committed batch is returned whole.
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: `batch_id` is not a UUIDv7, or `k`
    ///   is outside 1..=[`MAX_RESERVATION_BATCH`].
    /// - [`StoreError::UnknownShard`], [`StoreError::PolicyDigestMismatch`]
    ///   as for `reserve`.
    /// - [`StoreError::BatchConflict`]: the batch id names a batch on
    ///   another shard or digest, or of another size; nothing is written.
    /// - [`StoreError::SequenceExhausted`]: fewer than `k` sequences are
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
        let mut client = self.client().await?;
        let tx = PgStore::begin(&mut client).await?;

        let rows = tx
            .query(&tx.prepare_cached(SELECT_BATCH).await?, &[&batch_id])
            .await?;
        if !rows.is_empty() {
            let found = existing_batch(batch_id, shard, digest, k, &rows)?;
            tx.commit().await?;
            return Ok(found);
        }

        let locked = lock_shard(&tx, shard).await?;

        let rows = tx
            .query(&tx.prepare_cached(SELECT_BATCH).await?, &[&batch_id])
            .await?;
        if !rows.is_empty() {
            let found = existing_batch(batch_id, shard, digest, k, &rows)?;
            tx.commit().await?;
            return Ok(found);
        }

        let (cycle_length, next) = check_locked_shard(shard, digest, &locked)?;
        let count = i64::from(k);
        if next.checked_add(count).is_none() {
            return Err(StoreError::SequenceExhausted {
                shard: shard.clone(),
            });
        }
        let ids: Vec<Uuid> = (0..k).map(|_| Uuid::now_v7()).collect();
        let advanced = tx
            .query_opt(
                &tx.prepare_cached(INSERT_BATCH_AND_ADVANCE).await?,
                &[
                    &ids,
                    &shard.as_str(),
                    &next,
                    &i64::from(cycle_length),
                    &&digest.as_bytes()[..],
                    &batch_id,
                    &count,
                ],
            )
            .await?
            .ok_or_else(|| {
                StoreError::corrupt(
                    "shard cursor",
                    format!("shard {shard}: cursor moved while locked"),
                )
            })?;
        let reserved_at: SystemTime = advanced.try_get(0)?;
        let inserted: i64 = advanced.try_get(1)?;
        if inserted != count {
            return Err(StoreError::corrupt(
                "reservation batch",
                format!("batch {batch_id}: inserted {inserted} rows, expected {k}"),
            ));
        }
        tx.commit().await?;

        let first = u64::try_from(next)
            .map_err(|_| StoreError::corrupt("shard cursor", format!("negative cursor {next}")))?;
        let reservations = (first..)
            .zip(ids)
            .map(|(sequence, id)| Reservation {
                id,
                shard: shard.clone(),
                sequence,
                slot: slot_of(sequence, cycle_length),
                cycle_length,
                policy_digest: *digest,
                reserved_at,
                replayed: false,
            })
            .collect();
        Ok(ReservationBatch {
            batch_id,
            reservations,
            replayed: false,
        })
    }
}
