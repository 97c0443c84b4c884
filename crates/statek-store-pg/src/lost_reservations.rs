//! Acknowledged reservations a failover lost, as values: each
//! [`LostReservation`], the [`LostReservations`] of a shard that
//! [`DurabilityError::ReservationsLostInFailover`](crate::DurabilityError::ReservationsLostInFailover) reports, and the
//! [`LostReservationAction`] a store takes. Below `error.rs`, which
//! carries them, and `failover.rs`, which finds them.

use std::fmt;

use statek_policy::SchedulerShardId;
use uuid::Uuid;

/// What a store does after it found acknowledged reservations lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LostReservationAction {
    /// Stop reserving on the shard (the default): this and every later
    /// reservation of the shard in this store fails with
    /// [`DurabilityError::ReservationsLostInFailover`](crate::DurabilityError::ReservationsLostInFailover), so replicas stop
    /// ticking it until an operator looks.
    #[default]
    Halt,
    /// Report the loss once (the error, the metric, a log line) and go on
    /// reserving on the new timeline.
    Continue,
}

/// How a lost reservation shows on the new primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossEvidence {
    /// The id is missing and the shard's cursor is at or below its
    /// sequence: the sequence will be handed out again.
    Missing,
    /// The id is missing and another reservation holds its sequence.
    Reissued {
        /// The id that now holds the sequence.
        reservation_id: Uuid,
    },
    /// The id exists at another sequence.
    Moved {
        /// Its sequence on the new primary.
        sequence: u64,
    },
}

/// One acknowledged reservation (or batch) that a failover lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostReservation {
    /// The reservation id (the batch id for a batch).
    pub reservation_id: Uuid,
    /// The (first) sequence that was acknowledged.
    pub acknowledged_sequence: u64,
    /// How many sequences it covered (1, or `k` for a batch).
    pub count: u32,
    /// What the new primary holds instead.
    pub evidence: LossEvidence,
}

/// What [`DurabilityError::ReservationsLostInFailover`](crate::DurabilityError::ReservationsLostInFailover) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostReservations {
    /// The shard.
    pub shard: SchedulerShardId,
    /// The timeline the reservations were acknowledged on.
    pub from_timeline: u32,
    /// The new primary's timeline.
    pub to_timeline: u32,
    /// How many acknowledged reservations were checked.
    pub checked: usize,
    /// The lost ones, in sequence order.
    pub lost: Vec<LostReservation>,
}

impl fmt::Display for LostReservations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} recently acknowledged reservation(s) of shard {} were lost when the server \
             moved from timeline {} to {} (a failover to a standby that did not have them):",
            self.lost.len(),
            self.checked,
            self.shard,
            self.from_timeline,
            self.to_timeline
        )?;
        const SHOWN: usize = 10;
        for lost in self.lost.iter().take(SHOWN) {
            write!(
                f,
                " {} at sequence {}",
                lost.reservation_id, lost.acknowledged_sequence
            )?;
            if lost.count > 1 {
                write!(f, " (+{} more)", lost.count - 1)?;
            }
            match lost.evidence {
                LossEvidence::Missing => f.write_str(" (missing)")?,
                LossEvidence::Reissued { reservation_id } => {
                    write!(f, " (now held by {reservation_id})")?;
                }
                LossEvidence::Moved { sequence } => write!(f, " (now at sequence {sequence})")?,
            }
            f.write_str(";")?;
        }
        if self.lost.len() > SHOWN {
            write!(f, " and {} more", self.lost.len() - SHOWN)?;
        }
        Ok(())
    }
}
