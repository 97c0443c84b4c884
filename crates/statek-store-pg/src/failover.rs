//! Failover detection: a promotion that lost acknowledged reservations is
//! never silent.
//!
//! A standby's promotion keeps the system identifier but starts a new WAL
//! timeline. Every reservation statement reports the server's timeline and
//! refuses to reserve when it is not the timeline the store last reserved
//! on for that shard (`statek.reserve` in migration V5). A [`PgStore`]
//! remembers, per shard, the ids and sequences of its last
//! [`StoreConfig::failover_ring`](crate::StoreConfig::failover_ring)
//! acknowledged reservations (a batch counts once). When a reservation meets
//! a new timeline, the store re-reads those ids on the new primary before
//! it reserves there: an id that is missing, or found at another sequence,
//! or whose sequence now belongs to another id, was acknowledged and then
//! lost. That is [`DurabilityError::ReservationsLostInFailover`](crate::DurabilityError::ReservationsLostInFailover), counted in
//! [`RESERVATIONS_LOST_TOTAL`] and recorded in the database
//! (`halt.rs`, migration V10), which halts the shard for every store until
//! an owner resumes it (unless this store is configured to continue). A
//! record that does not commit is retried before anything else this store
//! does on the shard.
//!
//! A process that restarted since (its ring is gone) sends no expected
//! timeline; the reservation function then compares the shard's last
//! reservation's timeline with the server's, and halts the shard as
//! unverified when they differ.
//!
//! What it cannot see: a loss older than the ring; a failover after which
//! no store reserves on the shard again; another replica's losses when
//! that replica never reserves again (each replica checks its own ring).
//! A row missing because retention pruned it is told apart from a lost one:
//! a pruned row's sequence lies below the cursor and no other row holds it.

use crate::{ConnectionError, DurabilityError};
use std::sync::Arc;

use statek_policy::SchedulerShardId;
use uuid::Uuid;

use tokio_postgres::types::Type;

use crate::acknowledged_log::{lock, Acknowledged, Guard};
use crate::halt::{Recorded, SHARD_HALTED};
use crate::lost_reservations::{
    LossEvidence, LostReservation, LostReservationAction, LostReservations,
};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Counter `{shard}`: acknowledged reservations found lost after a change
/// of the server's timeline (a failover).
pub const RESERVATIONS_LOST_TOTAL: &str = "statek_reservations_lost_total";

/// Counter `{shard}`: changes of the server's timeline met by reservations
/// (each followed by a check of the recently acknowledged reservations).
pub const TIMELINE_CHANGES_TOTAL: &str = "statek_timeline_changes_total";

/// The answer of a guarded reservation statement.
pub(crate) enum Guarded<T> {
    /// Reserved (or replayed) on `timeline`.
    Done {
        value: T,
        timeline: u32,
        id: Uuid,
        first: u64,
        count: u32,
    },
    /// Nothing tried: the server is on another timeline (`None`: in
    /// recovery).
    TimelineChanged(Option<u32>),
}

/// The ring's entries on the current server: the id's row (a batch's
/// evidence is its one range row, found by the batch id at its first
/// sequence with its `k`), and the row whose range holds the entry's
/// first sequence (the last row at or below it, if it reaches it).
const VERIFY: &str = "
    SELECT a.ord, f.sequence AS found_sequence, f.sequence_count AS found_count,
           o.reservation_id AS holder
    FROM unnest($2::uuid[], $3::bigint[]) WITH ORDINALITY AS a(id, first, ord)
    LEFT JOIN statek.scheduler_reservations AS f ON f.reservation_id = a.id
    LEFT JOIN LATERAL (
        SELECT c.reservation_id
        FROM (SELECT reservation_id, sequence, sequence_count
              FROM statek.scheduler_reservations
              WHERE shard_id = $1 AND sequence <= a.first
              ORDER BY sequence DESC
              LIMIT 1) AS c
        WHERE a.first < c.sequence + c.sequence_count
    ) AS o ON true
    ORDER BY a.ord";

const VERIFY_SERVER: &str = "
    SELECT statek.server_timeline() AS timeline,
           (SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = $1) AS cursor";

impl PgStore {
    /// Runs a reservation statement under the failover guard: verifies the
    /// ring first when needed, sends the statement with the timeline it
    /// must find, verifies and resends when the timeline changed, and
    /// records what was acknowledged.
    pub(crate) async fn guarded_reservation<T, F, Fut>(
        &self,
        shard: &SchedulerShardId,
        attempt: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Option<u32>) -> Fut,
        Fut: std::future::Future<Output = Result<Guarded<T>, StoreError>>,
    {
        // Each pass either reserves, or verifies and adopts the server's
        // timeline; a server whose timeline keeps moving is retried by the
        // caller.
        for _ in 0..3 {
            match self.failover_log().guard(shard)? {
                Guard::Verify => self.verify_acknowledged(shard).await?,
                Guard::Record(report, halts) => self.record_found_loss(&report, halts).await?,
                Guard::Reserve(expected) => match self.note_halt(shard, attempt(expected).await)? {
                    Guarded::Done {
                        value,
                        timeline,
                        id,
                        first,
                        count,
                    } => {
                        let was_halted = self.failover_log().acknowledge(
                            shard,
                            Acknowledged {
                                id,
                                first,
                                count,
                                timeline,
                            },
                        );
                        if was_halted {
                            metrics::gauge!(SHARD_HALTED, "shard" => shard.to_string()).set(0.0);
                        }
                        return Ok(value);
                    }
                    Guarded::TimelineChanged(None) => {
                        return Err(StoreError::Connection(ConnectionError::InRecovery))
                    }
                    Guarded::TimelineChanged(Some(_)) => self.verify_acknowledged(shard).await?,
                },
            }
        }
        Err(StoreError::Connection(ConnectionError::InRecovery))
    }

    /// Sets the [`SHARD_HALTED`] gauge to 1 the first time this store
    /// sees the shard halted ([`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted)); an accepted
    /// reservation sets it back to 0 (`acknowledge`).
    fn note_halt<T>(
        &self,
        shard: &SchedulerShardId,
        answer: Result<Guarded<T>, StoreError>,
    ) -> Result<Guarded<T>, StoreError> {
        if matches!(
            answer,
            Err(StoreError::Durability(DurabilityError::ShardHalted(_)))
        ) && self.failover_log().note_halted(shard)
        {
            metrics::gauge!(SHARD_HALTED, "shard" => shard.to_string()).set(1.0);
        }
        answer
    }

    /// Records a loss found earlier whose record did not commit then;
    /// nothing else happens on the shard in this store before it does.
    async fn record_found_loss(
        &self,
        report: &Arc<LostReservations>,
        halts: bool,
    ) -> Result<(), StoreError> {
        let recorded = self.record_loss(report, halts).await?;
        if let Some(state) = lock(&self.failover_log().shards).get_mut(&report.shard) {
            state.unrecorded = None;
        }
        self.loss_recorded(report, recorded);
        Ok(())
    }

    fn loss_recorded(&self, report: &LostReservations, recorded: Recorded) {
        tracing::error!(
            shard = %report.shard, halt_id = recorded.halt_id, shard_halted = recorded.shard_halted,
            "reservation loss recorded in the database"
        );
        if recorded.shard_halted && self.failover_log().note_halted(&report.shard) {
            metrics::gauge!(SHARD_HALTED, "shard" => report.shard.to_string()).set(1.0);
        }
    }

    /// What a verification found, applied to the ring (under its lock,
    /// no await): the pruned entries leave it; with nothing lost the store
    /// adopts the new timeline (`None` returned); else the lost entries
    /// leave it too, the loss is kept as unrecorded, and returned with
    /// whether it halts.
    fn adopt_verified(
        &self,
        shard: &SchedulerShardId,
        timeline: u32,
        from: u32,
        checked: usize,
        pruned: &[Uuid],
        lost: Vec<LostReservation>,
    ) -> Option<(Arc<LostReservations>, bool)> {
        let log = self.failover_log();
        let mut shards = lock(&log.shards);
        let state = shards.get_mut(shard)?;
        state.ring.retain(|e| !pruned.contains(&e.id));
        // The ring moves on to the new timeline either way: what was lost
        // is recorded in the database (which halts the shard for every
        // store, unless this one is configured to continue), not kept here.
        state.timeline = Some(timeline);
        state.dirty = false;
        if lost.is_empty() {
            tracing::info!(
                shard = %shard, from_timeline = from, to_timeline = timeline, checked,
                "server timeline changed; every recently acknowledged reservation is on the new primary"
            );
            return None;
        }
        metrics::counter!(RESERVATIONS_LOST_TOTAL, "shard" => shard.to_string())
            .increment(lost.len() as u64);
        let report = LostReservations {
            shard: shard.clone(),
            from_timeline: from,
            to_timeline: timeline,
            checked,
            lost,
        };
        tracing::error!(shard = %shard, lost = report.lost.len(), "{report}");
        let lost_ids: Vec<Uuid> = report.lost.iter().map(|l| l.reservation_id).collect();
        state.ring.retain(|e| !lost_ids.contains(&e.id));
        let halts = self.config().lost_reservation_action() == LostReservationAction::Halt;
        let report = Arc::new(report);
        state.unrecorded = Some((Arc::clone(&report), halts));
        Some((report, halts))
    }

    /// Re-reads the shard's recently acknowledged reservations on the
    /// current server and adopts its timeline if none was lost (or the
    /// store is configured to continue).
    async fn verify_acknowledged(&self, shard: &SchedulerShardId) -> Result<(), StoreError> {
        let log = self.failover_log();
        let _one_at_a_time = log.verifying.lock().await;
        let server = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(VERIFY_SERVER, &[(&shard.as_str(), Type::TEXT)])
                    .await?)
            })
            .await?;
        let Some(timeline) = server
            .try_get::<_, Option<i32>>("timeline")?
            .and_then(|t| u32::try_from(t).ok())
        else {
            return Err(StoreError::Connection(ConnectionError::InRecovery));
        };
        let cursor = server
            .try_get::<_, Option<i64>>("cursor")?
            .and_then(|c| u64::try_from(c).ok())
            .unwrap_or(0);
        let (from_timeline, entries) = {
            let shards = lock(&log.shards);
            match shards.get(shard) {
                Some(l) if l.timeline == Some(timeline) && !l.dirty => return Ok(()),
                Some(l) => (l.timeline, l.ring.iter().copied().collect::<Vec<_>>()),
                None => return Ok(()),
            }
        };
        let ids: Vec<Uuid> = entries.iter().map(|e| e.id).collect();
        let firsts: Vec<i64> = entries
            .iter()
            .map(|e| i64::try_from(e.first).unwrap_or(i64::MAX))
            .collect();
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        VERIFY,
                        &[
                            (&shard.as_str(), Type::TEXT),
                            (&ids, Type::UUID_ARRAY),
                            (&firsts, Type::INT8_ARRAY),
                        ],
                    )
                    .await?)
            })
            .await?;
        let mut lost = Vec::new();
        let mut pruned = Vec::new();
        for (entry, row) in entries.iter().zip(&rows) {
            let found: Option<i64> = row.try_get("found_sequence")?;
            let found_count: Option<i32> = row.try_get("found_count")?;
            let holder: Option<Uuid> = row.try_get("holder")?;
            // A range row must cover what was acknowledged; a row of count
            // 1 is a single reservation or the head of a batch made under
            // migration V4 (k rows).
            let count_ok = match found_count {
                Some(c) if c > 1 => u32::try_from(c).ok() == Some(entry.count),
                _ => true,
            };
            let evidence = match (found, holder) {
                (Some(found), _) if u64::try_from(found).ok() == Some(entry.first) && count_ok => {
                    None
                }
                (Some(found), _) => Some(LossEvidence::Moved {
                    sequence: u64::try_from(found).unwrap_or(0),
                }),
                (None, Some(other)) => Some(LossEvidence::Reissued {
                    reservation_id: other,
                }),
                (None, None) if entry.first >= cursor => Some(LossEvidence::Missing),
                (None, None) => {
                    // Below the cursor and nobody holds it: pruned.
                    pruned.push(entry.id);
                    None
                }
            };
            if let Some(evidence) = evidence {
                lost.push(LostReservation {
                    reservation_id: entry.id,
                    acknowledged_sequence: entry.first,
                    count: entry.count,
                    evidence,
                });
            }
        }
        lost.sort_by_key(|l| l.acknowledged_sequence);
        metrics::counter!(TIMELINE_CHANGES_TOTAL, "shard" => shard.to_string()).increment(1);
        let from = from_timeline.unwrap_or(timeline);
        let Some((report, halts)) =
            self.adopt_verified(shard, timeline, from, entries.len(), &pruned, lost)
        else {
            return Ok(());
        };
        if let Err(e) = self.record_found_loss(&report, halts).await {
            tracing::error!(
                shard = %shard, error = %e,
                "could not record the reservation loss yet; this store reserves nothing on the shard until it does"
            );
        }
        Err(StoreError::Durability(
            DurabilityError::ReservationsLostInFailover(Box::new((*report).clone())),
        ))
    }
}
