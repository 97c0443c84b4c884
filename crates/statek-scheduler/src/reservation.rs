//! [`Reservation`]: one reserved sequence of a shard, as the scheduler
//! sees it, whichever [`crate::ReservationSource`] made it.

use std::time::SystemTime;

use statek_policy::{PolicyDigest, SchedulerShardId};
use uuid::Uuid;

/// One reserved sequence of a shard: the slot a tick consumed
/// ([`crate::TickOutcome::reservation`]).
///
/// Built from the store's `statek_store_pg::Reservation` (its stored slot
/// kept as read, so the scheduler's fail-closed check against the local
/// cycle can catch a disagreement) or by another
/// [`crate::ReservationSource`] through [`new`](Self::new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    id: Uuid,
    shard: SchedulerShardId,
    sequence: u64,
    slot: u32,
    cycle_length: u32,
    policy_digest: PolicyDigest,
    reserved_at: SystemTime,
    replayed: bool,
}

impl Reservation {
    /// The reservation of `sequence` on `shard`, whose policy (digest
    /// `policy_digest`) has a cycle of `cycle_length` slots; its slot is
    /// [`statek_policy::slot_of`]`(sequence, cycle_length)`. `id` is the
    /// id the reservation was made with (a batch's id for every
    /// reservation of the batch); `replayed` says that the call found it
    /// already made (a retry with the same id).
    pub fn new(
        id: Uuid,
        shard: SchedulerShardId,
        sequence: u64,
        cycle_length: u32,
        policy_digest: PolicyDigest,
        reserved_at: SystemTime,
        replayed: bool,
    ) -> Self {
        Self {
            id,
            shard,
            sequence,
            slot: statek_policy::slot_of(sequence, cycle_length),
            cycle_length,
            policy_digest,
            reserved_at,
            replayed,
        }
    }

    /// The client-made reservation id (UUIDv7); every reservation of a
    /// batch carries its batch id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The shard.
    pub fn shard(&self) -> &SchedulerShardId {
        &self.shard
    }

    /// Shard-global, gapless, 0-based sequence number.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Position in the policy's cycle: `sequence mod L`, as the source
    /// stored it.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The shard's cycle length `L` as the source holds it.
    pub fn cycle_length(&self) -> u32 {
        self.cycle_length
    }

    /// Digest of the policy the reservation was made under.
    pub fn policy_digest(&self) -> &PolicyDigest {
        &self.policy_digest
    }

    /// When it was reserved (PostgreSQL: the database time of the
    /// reserving transaction).
    pub fn reserved_at(&self) -> SystemTime {
        self.reserved_at
    }

    /// True when the call found the reservation already made (a retry
    /// after a lost acknowledgement) and returned it instead of reserving
    /// anew.
    pub fn replayed(&self) -> bool {
        self.replayed
    }
}

impl From<statek_store_pg::Reservation> for Reservation {
    fn from(stored: statek_store_pg::Reservation) -> Self {
        Self {
            id: stored.id(),
            shard: stored.shard().clone(),
            sequence: stored.sequence(),
            slot: stored.slot(),
            cycle_length: stored.cycle_length(),
            policy_digest: *stored.policy_digest(),
            reserved_at: stored.reserved_at(),
            replayed: stored.replayed(),
        }
    }
}
