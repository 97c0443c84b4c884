//! The per-store ring of recently acknowledged reservations, per shard:
//! what `failover.rs` re-reads on a new timeline, and the guard it keeps
//! (reserve on the known timeline, verify first, or record a loss found
//! but not yet recorded in the database). Held by every
//! [`PgStore`](crate::PgStore).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use statek_policy::SchedulerShardId;
use uuid::Uuid;

use crate::lost_reservations::LostReservations;
use crate::StoreError;

/// One acknowledged reservation as the ring keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acknowledged {
    pub(crate) id: Uuid,
    pub(crate) first: u64,
    pub(crate) count: u32,
    pub(crate) timeline: u32,
}

#[derive(Debug, Default)]
pub(crate) struct ShardLog {
    /// The timeline the ring was last verified on (or first filled on).
    pub(crate) timeline: Option<u32>,
    /// An acknowledgement arrived from another timeline than `timeline`:
    /// verify before the next reservation.
    pub(crate) dirty: bool,
    pub(crate) ring: VecDeque<Acknowledged>,
    /// A loss this store found whose record in the database did not
    /// commit yet (with whether it halts): nothing is reserved on the shard
    /// until it is recorded.
    pub(crate) unrecorded: Option<(Arc<LostReservations>, bool)>,
    /// The last halt state this store saw (for the gauge's changes).
    pub(crate) halted_seen: bool,
}

/// The per-store ring of recently acknowledged reservations, per shard.
#[derive(Debug)]
pub(crate) struct AcknowledgedLog {
    capacity: usize,
    pub(crate) shards: Mutex<HashMap<SchedulerShardId, ShardLog>>,
    /// One verification at a time per store.
    pub(crate) verifying: tokio::sync::Mutex<()>,
}

/// Where a reservation may go next.
pub(crate) enum Guard {
    /// Reserve, refusing any other timeline (`None`: no reservation
    /// acknowledged yet, any timeline).
    Reserve(Option<u32>),
    /// Verify the ring first.
    Verify,
    /// Record the loss found first (then reserve: the database refuses a
    /// halted shard).
    Record(Arc<LostReservations>, bool),
}

pub(crate) fn lock(
    shards: &Mutex<HashMap<SchedulerShardId, ShardLog>>,
) -> std::sync::MutexGuard<'_, HashMap<SchedulerShardId, ShardLog>> {
    // A poisoned lock only means another thread panicked while holding
    // it; the map itself is always consistent between statements.
    shards
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AcknowledgedLog {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            shards: Mutex::new(HashMap::new()),
            verifying: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn guard(&self, shard: &SchedulerShardId) -> Result<Guard, StoreError> {
        let shards = lock(&self.shards);
        let Some(log) = shards.get(shard) else {
            return Ok(Guard::Reserve(None));
        };
        if let Some((lost, halts)) = &log.unrecorded {
            return Ok(Guard::Record(Arc::clone(lost), *halts));
        }
        if log.dirty {
            return Ok(Guard::Verify);
        }
        Ok(Guard::Reserve(log.timeline))
    }

    /// Notes that a reservation saw the shard halted; true when this store
    /// had not seen it halted since its last accepted reservation.
    pub(crate) fn note_halted(&self, shard: &SchedulerShardId) -> bool {
        let mut shards = lock(&self.shards);
        let log = match shards.get_mut(shard) {
            Some(log) => log,
            None => shards.entry(shard.clone()).or_default(),
        };
        !std::mem::replace(&mut log.halted_seen, true)
    }

    /// Keeps an acknowledged reservation in the ring, under the one lock
    /// of the hot path; true when the store had seen the shard halted
    /// (an accepted reservation ends that: the gauge goes back to 0).
    pub(crate) fn acknowledge(&self, shard: &SchedulerShardId, entry: Acknowledged) -> bool {
        let mut shards = lock(&self.shards);
        // The hot path: the shard is known after its first reservation.
        let log = match shards.get_mut(shard) {
            Some(log) => log,
            None => shards.entry(shard.clone()).or_default(),
        };
        match log.timeline {
            None => log.timeline = Some(entry.timeline),
            Some(t) if t != entry.timeline => log.dirty = true,
            Some(_) => {}
        }
        if log.ring.len() == self.capacity {
            log.ring.pop_front();
        }
        log.ring.push_back(entry);
        std::mem::replace(&mut log.halted_seen, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lost_reservations::{LossEvidence, LostReservation};

    fn shard() -> SchedulerShardId {
        SchedulerShardId::try_from("s").unwrap()
    }

    fn entry(first: u64, timeline: u32) -> Acknowledged {
        Acknowledged {
            id: Uuid::now_v7(),
            first,
            count: 1,
            timeline,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_asks_for_verification_on_a_timeline_change() {
        let log = AcknowledgedLog::new(3);
        assert!(matches!(log.guard(&shard()).unwrap(), Guard::Reserve(None)));
        for first in 0..5 {
            log.acknowledge(&shard(), entry(first, 1));
        }
        let firsts: Vec<u64> = lock(&log.shards)[&shard()]
            .ring
            .iter()
            .map(|e| e.first)
            .collect();
        assert_eq!(firsts, [2, 3, 4]);
        assert!(matches!(
            log.guard(&shard()).unwrap(),
            Guard::Reserve(Some(1))
        ));
        log.acknowledge(&shard(), entry(5, 2));
        assert!(matches!(log.guard(&shard()).unwrap(), Guard::Verify));
    }

    #[test]
    fn an_unrecorded_loss_is_recorded_before_anything_else() {
        let log = AcknowledgedLog::new(3);
        let lost = LostReservations {
            shard: shard(),
            from_timeline: 1,
            to_timeline: 2,
            checked: 3,
            lost: vec![LostReservation {
                reservation_id: Uuid::nil(),
                acknowledged_sequence: 7,
                count: 1,
                evidence: LossEvidence::Missing,
            }],
        };
        lock(&log.shards).entry(shard()).or_default().unrecorded =
            Some((Arc::new(lost.clone()), true));
        match log.guard(&shard()).unwrap() {
            Guard::Record(found, halts) => {
                assert_eq!(*found, lost);
                assert!(halts);
            }
            _ => panic!("expected Guard::Record"),
        }
        assert_eq!(
            lost.to_string(),
            "1 of 3 recently acknowledged reservation(s) of shard s were lost when the server \
             moved from timeline 1 to 2 (a failover to a standby that did not have them): \
             00000000-0000-0000-0000-000000000000 at sequence 7 (missing);"
        );
    }

    #[test]
    fn the_halt_state_reports_only_its_changes() {
        let log = AcknowledgedLog::new(3);
        assert!(log.note_halted(&shard()));
        assert!(!log.note_halted(&shard()));
        // An accepted reservation ends the halt this store saw, once.
        assert!(log.acknowledge(&shard(), entry(0, 1)));
        assert!(!log.acknowledge(&shard(), entry(1, 1)));
        assert!(log.note_halted(&shard()));
    }
}
