//! The durable halt of a shard (migration V10): what a store found lost in
//! a failover, recorded in the database so that every store refuses the
//! shard until an owner resumes it, and what the resume says about the
//! sequences that are handed out again.
//!
//! - A store that finds acknowledged reservations lost (`failover.rs`)
//!   records them with `statek.record_reservation_loss`; a store with
//!   nothing to re-read that meets a shard last reserved on another
//!   timeline makes the reservation function halt it as
//!   [`HaltCause::Unverified`].
//! - Every reservation on a halted shard fails with
//!   [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted) naming the open halts (a replay of an id
//!   reserved before the halt still returns its sequence).
//! - [`PgStore::resume_shard`] (owner role only; `statek shard resume
//!   SHARD --acknowledge-loss`) records one [`ShardResume`] per open halt
//!   with its [`ReissuedRange`], and the shard accepts reservations again.
//!
//! Halts and resumes are never changed or deleted, by any role. Their
//! values are in `shard_halt.rs`.

use crate::{DurabilityError, RolloutError};
use statek_policy::SchedulerShardId;
use tokio_postgres::types::Type;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::lost_reservations::{LossEvidence, LostReservation, LostReservations};
use crate::shard_halt::{HaltCause, ReissuedRange, ShardHalt, ShardHalted, ShardResume};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Gauge `{shard}`: 1 while the shard is halted in the database (a
/// reservation loss, or an unverified failover) until an owner runs
/// `statek shard resume`; 0 otherwise. Set by every store that reserves on
/// the shard, at each change it sees.
pub const SHARD_HALTED: &str = "statek_shard_halted";

/// The halts of a shard, each with its lost reservations as arrays (in
/// sequence order) and its resume.
const SELECT_HALTS: &str = "
    SELECT h.halt_id, h.shard_id, h.cause, h.halts, h.from_timeline, h.to_timeline, h.checked,
           h.cursor_at_detection, h.detected_by, h.detected_role, h.detected_at,
           l.ids, l.sequences, l.counts, l.evidence, l.held_by, l.moved_to,
           r.reissued_first, r.reissued_end, r.resumed_role, r.resumed_at, r.note
    FROM statek.shard_halts AS h
    LEFT JOIN statek.shard_resumes AS r ON r.halt_id = h.halt_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(e.reservation_id ORDER BY e.sequence, e.reservation_id), '{}') AS ids,
               coalesce(array_agg(e.sequence ORDER BY e.sequence, e.reservation_id), '{}') AS sequences,
               coalesce(array_agg(e.count ORDER BY e.sequence, e.reservation_id), '{}') AS counts,
               coalesce(array_agg(e.evidence ORDER BY e.sequence, e.reservation_id), '{}') AS evidence,
               coalesce(array_agg(e.held_by ORDER BY e.sequence, e.reservation_id), '{}') AS held_by,
               coalesce(array_agg(e.moved_to ORDER BY e.sequence, e.reservation_id), '{}') AS moved_to
        FROM jsonb_to_recordset(h.lost)
             AS e(reservation_id uuid, sequence bigint, count integer, evidence text,
                  held_by uuid, moved_to bigint)
    ) AS l
    WHERE h.shard_id = $1 AND ($2 OR (h.halts AND r.halt_id IS NULL))
    ORDER BY h.halt_id";

/// Records a store's losses (the arrays are one entry per lost
/// reservation, in sequence order).
const RECORD_LOSS: &str = "
    SELECT * FROM statek.record_reservation_loss($1, $2, $3, $4,
        (SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                    'reservation_id', a.id, 'sequence', a.sequence, 'count', a.count,
                    'evidence', a.evidence, 'held_by', a.held_by, 'moved_to', a.moved_to))
                ORDER BY a.ord)
         FROM unnest($5::uuid[], $6::bigint[], $7::integer[], $8::text[], $9::uuid[],
                     $10::bigint[]) WITH ORDINALITY
              AS a(id, sequence, count, evidence, held_by, moved_to, ord)),
        $11, $12)";

const RESUME: &str = "SELECT * FROM statek.resume_shard($1, $2)";

/// A shard's halt, if any, for the error path of a reservation.
const SELECT_HALT_ID: &str = "SELECT halt_id FROM statek.scheduler_shards WHERE shard_id = $1";

fn timeline(row: &Row, column: &str) -> Result<u32, StoreError> {
    let value: i32 = row.try_get(column)?;
    u32::try_from(value).map_err(|_| StoreError::corrupt("shard halt", format!("{column} {value}")))
}

fn sequence(value: i64, what: &'static str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::corrupt(what, format!("negative sequence {value}")))
}

fn halt_from_row(row: &Row) -> Result<ShardHalt, StoreError> {
    let shard: String = row.try_get("shard_id")?;
    let shard = SchedulerShardId::try_from(shard.as_str())
        .map_err(|e| StoreError::corrupt("shard halt", format!("shard id: {e}")))?;
    let halt_id: i64 = row.try_get("halt_id")?;
    let ids: Vec<Uuid> = row.try_get("ids")?;
    let sequences: Vec<i64> = row.try_get("sequences")?;
    let counts: Vec<i32> = row.try_get("counts")?;
    let evidence: Vec<String> = row.try_get("evidence")?;
    let held_by: Vec<Option<Uuid>> = row.try_get("held_by")?;
    let moved_to: Vec<Option<i64>> = row.try_get("moved_to")?;
    let mut lost = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        let bad = || StoreError::corrupt("shard halt", format!("halt {halt_id}: lost entry {i}"));
        let evidence = match (
            evidence.get(i).map(String::as_str),
            held_by.get(i),
            moved_to.get(i),
        ) {
            (Some("missing"), _, _) => LossEvidence::Missing,
            (Some("reissued"), Some(Some(held)), _) => LossEvidence::Reissued {
                reservation_id: *held,
            },
            (Some("moved"), _, Some(Some(to))) => LossEvidence::Moved {
                sequence: sequence(*to, "shard halt")?,
            },
            _ => return Err(bad()),
        };
        lost.push(LostReservation {
            reservation_id: *id,
            acknowledged_sequence: sequence(*sequences.get(i).ok_or_else(bad)?, "shard halt")?,
            count: u32::try_from(*counts.get(i).ok_or_else(bad)?).map_err(|_| bad())?,
            evidence,
        });
    }
    let resume = match row.try_get::<_, Option<i64>>("reissued_first")? {
        None => None,
        Some(first) => Some(ShardResume {
            reissued: ReissuedRange {
                halt_id,
                first: sequence(first, "shard resume")?,
                end: row
                    .try_get::<_, Option<i64>>("reissued_end")?
                    .map(|end| sequence(end, "shard resume"))
                    .transpose()?,
            },
            resumed_role: row.try_get("resumed_role")?,
            resumed_at: row.try_get("resumed_at")?,
            note: row.try_get("note")?,
        }),
    };
    let checked: i32 = row.try_get("checked")?;
    Ok(ShardHalt {
        halt_id,
        shard,
        cause: {
            let cause: String = row.try_get("cause")?;
            HaltCause::from_stored(&cause).ok_or_else(|| {
                StoreError::corrupt(
                    "shard halt",
                    format!("cause {:?}", crate::error::truncated(&cause)),
                )
            })?
        },
        halts: row.try_get("halts")?,
        from_timeline: timeline(row, "from_timeline")?,
        to_timeline: timeline(row, "to_timeline")?,
        checked: u32::try_from(checked).unwrap_or(0),
        lost,
        cursor_at_detection: sequence(row.try_get("cursor_at_detection")?, "shard halt")?,
        detected_by: row.try_get("detected_by")?,
        detected_role: row.try_get("detected_role")?,
        detected_at: row.try_get("detected_at")?,
        resume,
    })
}

async fn halts_on(
    db: &Db<'_>,
    shard: &SchedulerShardId,
    all: bool,
) -> Result<Vec<ShardHalt>, StoreError> {
    let rows = db
        .query(
            SELECT_HALTS,
            &[(&shard.as_str(), Type::TEXT), (&all, Type::BOOL)],
        )
        .await?;
    rows.iter().map(halt_from_row).collect()
}

/// For a reservation that inserted nothing: [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted)
/// when the shard is halted, else `None`.
pub(crate) async fn refusal(
    db: &Db<'_>,
    shard: &SchedulerShardId,
) -> Result<Option<StoreError>, StoreError> {
    let Some(row) = db
        .query_opt(SELECT_HALT_ID, &[(&shard.as_str(), Type::TEXT)])
        .await?
    else {
        return Ok(None);
    };
    if row.try_get::<_, Option<i64>>("halt_id")?.is_none() {
        return Ok(None);
    }
    let halts = halts_on(db, shard, false).await?;
    if halts.is_empty() {
        return Err(StoreError::corrupt(
            "shard halt",
            format!("shard {shard} is halted by no open halt"),
        ));
    }
    Ok(Some(StoreError::Durability(DurabilityError::ShardHalted(
        Box::new(ShardHalted {
            shard: shard.clone(),
            halts,
        }),
    ))))
}

/// What the database answered to a recorded loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) halt_id: i64,
    pub(crate) shard_halted: bool,
}

impl PgStore {
    /// Every recorded halt of `shard`, oldest first, open or resumed, with
    /// its lost reservations and its resume.
    ///
    /// # Errors
    /// [`StoreError::CorruptData`] if a stored halt fails its checks;
    /// connection and server errors (a role without SELECT on
    /// `statek.shard_halts` gets [`StoreError::PermissionDenied`]).
    pub async fn shard_halts(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Vec<ShardHalt>, StoreError> {
        self.with_response_timeout(async |db: &Db<'_>| halts_on(db, shard, true).await)
            .await
    }

    /// The reissued ranges of `shard`, from its resumed halts, oldest
    /// first: the sequences a reader accepts as decided twice.
    ///
    /// # Errors
    /// As [`PgStore::shard_halts`].
    pub async fn reissued_ranges(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Vec<ReissuedRange>, StoreError> {
        Ok(self
            .shard_halts(shard)
            .await?
            .into_iter()
            .filter_map(|h| h.resume.map(|r| r.reissued))
            .collect())
    }

    /// Resumes a halted shard: records, for each open halt, the owner's
    /// resume with its reissued range (computed by the database from the
    /// halt) and `note`, and lets the shard accept reservations again.
    /// Returns the halts it resumed, each with its resume; an empty list
    /// when the shard was not halted (nothing written).
    ///
    /// Needs the owner role: the runtime and retention roles may not run
    /// it ([`StoreError::PermissionDenied`]).
    ///
    /// # Errors
    /// - [`StoreError::InvalidArgument`]: `note` is over 1,024 bytes.
    /// - [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard): the shard is not registered.
    /// - connection and server errors.
    pub async fn resume_shard(
        &self,
        shard: &SchedulerShardId,
        note: Option<&str>,
    ) -> Result<Vec<ShardHalt>, StoreError> {
        if note.is_some_and(|n| n.len() > 1024) {
            return Err(StoreError::InvalidArgument(
                "a resume note is at most 1024 bytes".into(),
            ));
        }
        let after = self.config().effective_response_timeout();
        let resumed = self
            .in_transaction(after, async |db: &Db<'_>| {
                let rows = db
                    .query(
                        RESUME,
                        &[(&shard.as_str(), Type::TEXT), (&note, Type::TEXT)],
                    )
                    .await?;
                let ids: Vec<i64> = rows
                    .iter()
                    .map(|r| r.try_get("resumed_halt_id"))
                    .collect::<Result<_, _>>()?;
                if ids.is_empty() {
                    // Unknown shard, or nothing to resume.
                    if db
                        .query_opt(SELECT_HALT_ID, &[(&shard.as_str(), Type::TEXT)])
                        .await?
                        .is_none()
                    {
                        return Err(StoreError::Rollout(RolloutError::UnknownShard {
                            shard: shard.clone(),
                        }));
                    }
                    return Ok(Vec::new());
                }
                let all = halts_on(db, shard, true).await?;
                Ok(all
                    .into_iter()
                    .filter(|h| ids.contains(&h.halt_id))
                    .collect())
            })
            .await?;
        if !resumed.is_empty() {
            metrics::gauge!(SHARD_HALTED, "shard" => shard.to_string()).set(0.0);
            tracing::warn!(shard = %shard, halts = resumed.len(), "shard resumed by an owner");
        }
        Ok(resumed)
    }

    /// Records what this store found lost (see `failover.rs`).
    pub(crate) async fn record_loss(
        &self,
        report: &LostReservations,
        halts: bool,
    ) -> Result<Recorded, StoreError> {
        let ids: Vec<Uuid> = report.lost.iter().map(|l| l.reservation_id).collect();
        let sequences: Vec<i64> = report
            .lost
            .iter()
            .map(|l| i64::try_from(l.acknowledged_sequence).unwrap_or(i64::MAX))
            .collect();
        let counts: Vec<i32> = report
            .lost
            .iter()
            .map(|l| i32::try_from(l.count).unwrap_or(i32::MAX))
            .collect();
        let evidence: Vec<&str> = report
            .lost
            .iter()
            .map(|l| match l.evidence {
                LossEvidence::Missing => "missing",
                LossEvidence::Reissued { .. } => "reissued",
                LossEvidence::Moved { .. } => "moved",
            })
            .collect();
        let held_by: Vec<Option<Uuid>> = report
            .lost
            .iter()
            .map(|l| match l.evidence {
                LossEvidence::Reissued { reservation_id } => Some(reservation_id),
                _ => None,
            })
            .collect();
        let moved_to: Vec<Option<i64>> = report
            .lost
            .iter()
            .map(|l| match l.evidence {
                LossEvidence::Moved { sequence } => i64::try_from(sequence).ok(),
                _ => None,
            })
            .collect();
        let from = i32::try_from(report.from_timeline).unwrap_or(i32::MAX);
        let checked = i32::try_from(report.checked).unwrap_or(i32::MAX);
        let replica = self.replica_name();
        let level = self.config().synchronous_commit_level();
        let shard = &report.shard;
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(
                        RECORD_LOSS,
                        &[
                            (&shard.as_str(), Type::TEXT),
                            (&halts, Type::BOOL),
                            (&from, Type::INT4),
                            (&checked, Type::INT4),
                            (&ids, Type::UUID_ARRAY),
                            (&sequences, Type::INT8_ARRAY),
                            (&counts, Type::INT4_ARRAY),
                            (&evidence, Type::TEXT_ARRAY),
                            (&held_by, Type::UUID_ARRAY),
                            (&moved_to, Type::INT8_ARRAY),
                            (&replica, Type::TEXT),
                            (&level.as_str(), Type::TEXT),
                        ],
                    )
                    .await?)
            })
            .await?
            .ok_or_else(|| {
                StoreError::Rollout(RolloutError::UnknownShard {
                    shard: shard.clone(),
                })
            })?;
        Ok(Recorded {
            halt_id: row.try_get("recorded_id")?,
            shard_halted: row.try_get("shard_halted")?,
        })
    }

    /// How this store names itself in a recorded halt: its connection's
    /// application name, process id and host.
    pub(crate) fn replica_name(&self) -> String {
        let app = self
            .config()
            .pg_config()
            .get_application_name()
            .unwrap_or("statek");
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let mut name = format!("{app} pid {}", std::process::id());
        if !host.is_empty() {
            name.push_str(" on ");
            name.push_str(&host);
        }
        name.chars().take(256).collect()
    }
}
