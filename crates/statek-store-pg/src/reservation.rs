//! The reservation protocol: one short transaction claims the next global
//! sequence of a shard, idempotently by a client-made UUIDv7.

use crate::{ConnectionError, DurabilityError, ReservationError, RolloutError};
use statek_core::Reservation;
use statek_policy::{PolicyDigest, SchedulerShardId};
use tokio_postgres::types::Type;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::durability_report::SynchronousCommit;
use crate::failover::Guarded;
use crate::shard::{decode_digest, slot_of};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Finds an existing reservation by id, with its shard's cycle length so the
/// slot can be re-checked.
const SELECT_RESERVATION: &str = "
    SELECT r.shard_id, r.sequence, r.slot, r.policy_digest, r.reserved_at, s.cycle_length,
           r.batch_id, r.sequence_count
    FROM statek.scheduler_reservations AS r
    JOIN statek.scheduler_shards AS s ON s.shard_id = r.shard_id
    WHERE r.reservation_id = $1";

/// The whole reservation as one statement (one round trip, its own
/// autocommit transaction): `statek.reserve` (migration V5, a SECURITY
/// DEFINER function owned by the owner role, the only way the runtime role
/// can write a reservation) sets `synchronous_commit` ($5) for its own
/// transaction; refuses, writing nothing, when the server's timeline is not
/// `$4` (a failover since the store's last acknowledged reservation); locks
/// the shard's cursor row; inserts the reservation at the cursor unless the
/// id already exists (`ON CONFLICT` sees every committed or in-flight row,
/// not just the statement's snapshot) or a check fails; advances the cursor
/// only if a row was inserted. The locked row comes back so the caller can
/// tell why nothing was inserted (replay, digest, exhaustion, corruption).
///
/// Under READ COMMITTED a `FOR UPDATE` that waited returns the newest
/// version of the row, and the `UPDATE` follows it to that version, so the
/// sequence used is the cursor as committed by the previous holder of the
/// lock. The function re-checks, inside the database, that the stored bytes
/// still hash to the stored digest, so a tampered policy stops
/// reservations without shipping the bytes to every replica.
const RESERVE: &str = "SELECT * FROM statek.reserve($1, $2, $3, $4, $5)";

/// The rows holding the sequences `>= $2` of shard `$1`: the row at or
/// before `$2` (a range may cover `$2` from below) and the `$3` rows after
/// it, in sequence order. A row is one reservation or one range of a batch
/// (`sequence_count` sequences from `sequence`, migration V5).
const SELECT_RESERVATIONS: &str = "
    SELECT r.reservation_id, r.shard_id, r.sequence, r.slot, r.policy_digest, r.reserved_at,
           r.sequence_count, s.cycle_length
    FROM (
        (SELECT * FROM statek.scheduler_reservations
         WHERE shard_id = $1 AND sequence <= $2
         ORDER BY sequence DESC
         LIMIT 1)
        UNION ALL
        (SELECT * FROM statek.scheduler_reservations
         WHERE shard_id = $1 AND sequence > $2
         ORDER BY sequence
         LIMIT $3)
    ) AS r
    JOIN statek.scheduler_shards AS s ON s.shard_id = r.shard_id
    ORDER BY r.sequence";

pub(crate) fn decode_sequence(value: i64, what: &'static str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::corrupt(what, format!("negative sequence {value}")))
}

/// Checks a stored cycle length: 1..=[`statek_policy::MAX_CYCLE_LENGTH`].
pub(crate) fn check_cycle_length(cycle_length: i32) -> Result<u32, StoreError> {
    u32::try_from(cycle_length)
        .ok()
        .filter(|l| (1..=statek_policy::MAX_CYCLE_LENGTH).contains(l))
        .ok_or_else(|| {
            StoreError::corrupt(
                "shard policy",
                format!("cycle length {cycle_length} out of range"),
            )
        })
}

/// Checks a stored reservation's slot against its sequence and cycle length.
fn check_slot(sequence: u64, slot: i32, cycle_length: i32) -> Result<u32, StoreError> {
    let cycle_length = check_cycle_length(cycle_length)?;
    let expected = slot_of(sequence, cycle_length);
    if i64::from(slot) != i64::from(expected) {
        return Err(StoreError::corrupt(
            "reservation",
            format!(
                "sequence {sequence} has slot {slot}, expected {expected} (L = {cycle_length})"
            ),
        ));
    }
    Ok(expected)
}

pub(crate) fn reservation_from_row(
    id: Uuid,
    row: &Row,
    replayed: bool,
) -> Result<Reservation, StoreError> {
    let shard: String = row.try_get("shard_id")?;
    let shard = SchedulerShardId::try_from(shard.as_str())
        .map_err(|e| StoreError::corrupt("reservation", format!("shard id: {e}")))?;
    let sequence = decode_sequence(row.try_get("sequence")?, "reservation")?;
    let cycle_length = check_cycle_length(row.try_get("cycle_length")?)?;
    check_slot(sequence, row.try_get("slot")?, row.try_get("cycle_length")?)?;
    let digest: Vec<u8> = row.try_get("policy_digest")?;
    Ok(Reservation::new(
        id,
        shard,
        sequence,
        cycle_length,
        decode_digest(&digest, "reservation")?,
        row.try_get("reserved_at")?,
        replayed,
    ))
}

/// The stored `sequence_count` of a row: 1 for a single reservation, `k`
/// for the range row of a batch.
pub(crate) fn sequence_count(row: &Row) -> Result<u64, StoreError> {
    let count: i32 = row.try_get("sequence_count")?;
    u64::try_from(count)
        .ok()
        .filter(|c| *c >= 1)
        .ok_or_else(|| StoreError::corrupt("reservation", format!("sequence count {count}")))
}

/// The reservations one stored row holds, in sequence order, each checked
/// fail-closed: the row's own checks, then one reservation per sequence of
/// its range with `slot = sequence mod L`.
pub(crate) fn reservations_of_row(
    id: Uuid,
    row: &Row,
    replayed: bool,
) -> Result<Vec<Reservation>, StoreError> {
    let first = reservation_from_row(id, row, replayed)?;
    let count = sequence_count(row)?;
    let end = first
        .sequence()
        .checked_add(count)
        .filter(|end| i64::try_from(*end).is_ok())
        .ok_or_else(|| {
            StoreError::corrupt(
                "reservation",
                format!("range {id} of {count} from {} overflows", first.sequence()),
            )
        })?;
    Ok((first.sequence()..end)
        .map(|sequence| {
            Reservation::new(
                first.id(),
                first.shard().clone(),
                sequence,
                first.cycle_length(),
                *first.policy_digest(),
                first.reserved_at(),
                first.replayed(),
            )
            .with_timeline(first.timeline())
        })
        .collect())
}

/// Expands stored rows (in sequence order) into reservations and checks
/// that each row starts where the one before it ends: a range that
/// overlaps the next row, or leaves a hole before it, is `CorruptData`.
pub(crate) fn expand_rows(
    rows: &[Row],
    replayed: bool,
    what: &'static str,
) -> Result<Vec<Reservation>, StoreError> {
    let mut out: Vec<Reservation> = Vec::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.try_get("reservation_id")?;
        let held = reservations_of_row(id, row, replayed)?;
        if let (Some(last), Some(first)) = (out.last(), held.first()) {
            let expected = last.sequence() + 1;
            if first.shard() != last.shard() || first.sequence() != expected {
                let kind = if first.sequence() < expected {
                    "overlaps"
                } else {
                    "leaves a hole after"
                };
                return Err(StoreError::corrupt(
                    what,
                    format!(
                        "row {id} at sequence {} on {} {kind} row {} ending at sequence {} on {}",
                        first.sequence(),
                        first.shard(),
                        last.id(),
                        last.sequence(),
                        last.shard()
                    ),
                ));
            }
        }
        out.extend(held);
    }
    Ok(out)
}

/// The answer to "does this id already name a reservation?" for `reserve`.
fn existing(
    id: Uuid,
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    row: &Row,
) -> Result<Reservation, StoreError> {
    let found = reservation_from_row(id, row, true)?;
    // A row of a batch is not a single reservation, whatever its id.
    let batch: Option<Uuid> = row.try_get("batch_id")?;
    if found.shard() != shard || found.policy_digest() != digest || batch.is_some() {
        return Err(StoreError::Reservation(
            ReservationError::ReservationConflict { reservation_id: id },
        ));
    }
    Ok(found)
}

/// Checks a locked shard row against the caller's digest, fail-closed:
/// returns the cycle length and the cursor.
pub(crate) fn check_locked_shard(
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    locked: &Row,
) -> Result<(u32, i64), StoreError> {
    let stored_digest = decode_digest(
        &locked.try_get::<_, Vec<u8>>("policy_digest")?,
        "shard policy",
    )?;
    if !locked.try_get::<_, bool>("digest_ok")? {
        return Err(StoreError::corrupt(
            "shard policy",
            format!("shard {shard}: stored bytes do not hash to the stored digest"),
        ));
    }
    if stored_digest != *digest {
        return Err(StoreError::Rollout(RolloutError::PolicyDigestMismatch {
            shard: shard.clone(),
            stored: stored_digest,
            offered: *digest,
        }));
    }
    let cycle_length = check_cycle_length(locked.try_get("cycle_length")?)?;
    let next: i64 = locked.try_get("next_sequence")?;
    decode_sequence(next, "shard cursor")?;
    Ok((cycle_length, next))
}

/// Maps an error of a reservation-writing statement: a unique violation on
/// `(shard_id, sequence)` means the cursor points at an existing row.
pub(crate) fn reservation_write_error(
    e: tokio_postgres::Error,
    shard: &SchedulerShardId,
) -> StoreError {
    let constraint = e.as_db_error().and_then(|db| db.constraint());
    if constraint == Some("scheduler_reservations_shard_sequence_key") {
        StoreError::corrupt(
            "shard cursor",
            format!("shard {shard}: the cursor points at an existing sequence"),
        )
    } else {
        StoreError::from(e)
    }
}

/// Why a reservation statement that found its id (or batch id) unused
/// inserted nothing, from the locked shard row: the digest checks, else
/// fewer than `count` sequences left, else a cursor that cannot be used.
pub(crate) fn nothing_inserted(
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    locked: &Row,
    count: i64,
) -> StoreError {
    let next = match check_locked_shard(shard, digest, locked) {
        Ok((_, next)) => next,
        Err(e) => return e,
    };
    if next.checked_add(count).is_none() {
        return StoreError::Reservation(ReservationError::SequenceExhausted {
            shard: shard.clone(),
        });
    }
    StoreError::corrupt(
        "shard cursor",
        format!("shard {shard}: cursor {next} could not be used"),
    )
}

/// [`nothing_inserted`] after the digest checks, the halt (migration V10:
/// [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted) naming the open halts) and the seal
/// (migration V8): a sealed shard, or a successor whose predecessor is not
/// sealed, is its own typed error naming the shard that goes on.
pub(crate) async fn why_nothing_inserted(
    db: &Db<'_>,
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    locked: &Row,
    count: i64,
) -> StoreError {
    if let Err(e) = check_locked_shard(shard, digest, locked) {
        return e;
    }
    match crate::halt::refusal(db, shard).await {
        Ok(Some(halted)) => return halted,
        Ok(None) => {}
        Err(e) => return e,
    }
    match crate::succession::refusal(db, shard).await {
        Ok(Some(refused)) => refused,
        Ok(None) => nothing_inserted(shard, digest, locked, count),
        Err(e) => e,
    }
}

/// Rejects ids that are not UUIDv7 (`what`: "reservation id", "batch id").
pub(crate) fn check_uuid_v7(id: Uuid, what: &str) -> Result<(), StoreError> {
    if id.get_version_num() != 7 || id.get_variant() != uuid::Variant::RFC4122 {
        return Err(StoreError::InvalidArgument(format!(
            "{what} {id} is not a UUIDv7"
        )));
    }
    Ok(())
}

impl PgStore {
    /// Reserves the next sequence of `shard` under the policy `digest`, keyed
    /// by the client-made UUIDv7 `reservation_id`.
    ///
    /// One short READ COMMITTED transaction, sent as one statement (one
    /// round trip): lock the shard row `FOR UPDATE`; check the digest;
    /// insert the reservation at the cursor unless the id already exists;
    /// advance the cursor; commit. If the id exists (a retry after a lost
    /// acknowledgement, or a concurrent same-id call that committed first) a
    /// second query returns the original reservation, `replayed() == true`.
    /// No queue scan and no user code run inside it.
    ///
    /// Retrying with the same id after an error is always safe: if the first
    /// attempt committed (its acknowledgement lost), the retry returns that
    /// reservation; if not, the retry reserves. Distinct ids yield one
    /// contiguous sequence `0, 1, 2, …` per shard with no gaps or repeats.
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: the id is not a UUIDv7.
    /// - [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard): the shard is not registered.
    /// - [`RolloutError::PolicyDigestMismatch`](crate::RolloutError::PolicyDigestMismatch): the shard runs another policy.
    /// - [`ReservationError::ReservationConflict`](crate::ReservationError::ReservationConflict): the id names a reservation on
    ///   another shard or digest; nothing is written.
    /// - [`ReservationError::SequenceExhausted`](crate::ReservationError::SequenceExhausted): the cursor is at `i64::MAX`.
    /// - [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted): the shard is halted in the database
    ///   after a reservation loss (or this store is the first to reserve
    ///   after a change of the server's timeline: the shard is then halted
    ///   as unverified); nothing is written.
    /// - [`DurabilityError::ReservationsLostInFailover`](crate::DurabilityError::ReservationsLostInFailover): this store found
    ///   reservations it had acknowledged lost on a new timeline (recorded,
    ///   and the shard halted, in the database).
    /// - [`StoreError::CorruptData`]: stored rows fail their checks.
    /// - transient errors for which [`StoreError::is_retryable`] is true.
    pub async fn reserve(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        reservation_id: Uuid,
    ) -> Result<Reservation, StoreError> {
        check_uuid_v7(reservation_id, "reservation id")?;
        let level = self.config().synchronous_commit_level();
        self.guarded_reservation(shard, |expected| {
            self.with_response_timeout(async move |db: &Db<'_>| {
                reserve_on(db, shard, digest, reservation_id, expected, level).await
            })
        })
        .await
    }

    /// Reads up to `limit` retained reservations of `shard` with sequence
    /// `>= from_sequence`, in sequence order, each checked fail-closed. A
    /// batch is stored as one range row and comes back as one reservation
    /// per sequence (all with the batch id as [`Reservation::id`]).
    ///
    /// # Errors
    /// [`StoreError::CorruptData`] if a row fails its checks, or a range
    /// overlaps the next retained row or leaves a hole before it;
    /// connection and server errors.
    pub async fn reservations(
        &self,
        shard: &SchedulerShardId,
        from_sequence: u64,
        limit: u32,
    ) -> Result<Vec<Reservation>, StoreError> {
        let from = i64::try_from(from_sequence)
            .map_err(|_| StoreError::InvalidArgument("from_sequence exceeds i64::MAX".into()))?;
        let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
        let limit = i64::from(limit);
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        SELECT_RESERVATIONS,
                        &[
                            (&shard.as_str(), Type::TEXT),
                            (&from, Type::INT8),
                            (&limit, Type::INT8),
                        ],
                    )
                    .await?)
            })
            .await?;
        let mut out = expand_rows(&rows, false, "reservation range")?;
        out.retain(|r| r.sequence() >= from_sequence);
        out.truncate(wanted);
        Ok(out)
    }
}

/// The answer's guard columns: `None` when the server was on another
/// timeline than `expected` (nothing tried), else the timeline; and the
/// check that the transaction ran with the `synchronous_commit` asked for.
pub(crate) fn guard_columns(
    row: &Row,
    level: SynchronousCommit,
) -> Result<Result<u32, Option<u32>>, StoreError> {
    let status: String = row.try_get("status")?;
    let timeline = row
        .try_get::<_, Option<i32>>("timeline")?
        .and_then(|t| u32::try_from(t).ok());
    if status == "timeline" {
        return Ok(Err(timeline));
    }
    let in_force: String = row.try_get("synchronous_commit")?;
    if in_force.parse::<SynchronousCommit>().ok() != Some(level) {
        return Err(StoreError::Durability(DurabilityError::NotInForce {
            expected: level,
            found: crate::error::truncated(&in_force),
        }));
    }
    // A primary always reports its timeline; in recovery nothing inserts.
    timeline
        .map(Ok)
        .ok_or(StoreError::Connection(ConnectionError::InRecovery))
}

/// The reservation statement on `db` (see [`PgStore::reserve`]).
async fn reserve_on(
    db: &Db<'_>,
    shard: &SchedulerShardId,
    digest: &PolicyDigest,
    reservation_id: Uuid,
    expected_timeline: Option<u32>,
    level: SynchronousCommit,
) -> Result<Guarded<Reservation>, StoreError> {
    let expected = expected_timeline.and_then(|t| i32::try_from(t).ok());
    let row = db
        .query_opt(
            RESERVE,
            &[
                (&reservation_id, Type::UUID),
                (&shard.as_str(), Type::TEXT),
                (&&digest.as_bytes()[..], Type::BYTEA),
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

    let inserted: Option<i64> = row.try_get("sequence")?;
    let Some(inserted) = inserted else {
        // Nothing inserted: the id exists (a replay, or a conflict), or
        // a check on the locked row failed. The id first, as before the
        // single-statement form: an existing reservation is returned
        // even if the shard has since become unusable.
        if let Some(found) = db
            .query_opt(SELECT_RESERVATION, &[(&reservation_id, Type::UUID)])
            .await?
        {
            let found =
                existing(reservation_id, shard, digest, &found)?.with_timeline(Some(timeline));
            return Ok(Guarded::Done {
                id: reservation_id,
                first: found.sequence(),
                count: 1,
                timeline,
                value: found,
            });
        }
        return Err(why_nothing_inserted(db, shard, digest, &row, 1).await);
    };
    let (cycle_length, next) = check_locked_shard(shard, digest, &row)?;
    let advanced: i64 = row.try_get("advanced")?;
    if inserted != next || advanced != 1 {
        return Err(StoreError::corrupt(
                "shard cursor",
                format!(
                    "shard {shard}: reserved sequence {inserted} at cursor {next}, advanced {advanced} row(s)"
                ),
            ));
    }
    let sequence = decode_sequence(inserted, "reservation")?;
    check_slot(sequence, row.try_get("slot")?, row.try_get("cycle_length")?)?;
    Ok(Guarded::Done {
        id: reservation_id,
        first: sequence,
        count: 1,
        timeline,
        value: Reservation::new(
            reservation_id,
            shard.clone(),
            sequence,
            cycle_length,
            *digest,
            row.try_get("reserved_at")?,
            false,
        )
        .with_timeline(Some(timeline)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_checks() {
        assert_eq!(check_slot(0, 0, 4).unwrap(), 0);
        assert_eq!(check_slot(7, 3, 4).unwrap(), 3);
        assert_eq!(check_slot(4096, 0, 4096).unwrap(), 0);
        assert!(check_slot(7, 2, 4).is_err());
        assert!(check_slot(1, 0, 0).is_err());
        assert!(check_slot(1, 1, 4097).is_err());
        assert!(check_slot(1, -1, 4).is_err());
    }
}
