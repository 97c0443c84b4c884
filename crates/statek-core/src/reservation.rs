//! [`Reservation`]: one reserved sequence of a shard, one type for every
//! reservation source (statek-store-pg's `PgStore` and the in-memory
//! source of statek-scheduler) and the scheduler that reads it.

use std::time::SystemTime;

use statek_policy::{PolicyDigest, SchedulerShardId};
use uuid::Uuid;

/// One reserved sequence of a shard: the slot a tick consumed.
///
/// A source builds it with [`new`](Self::new), which derives the slot from
/// the sequence and the cycle length the source holds; statek-store-pg
/// first checks the slot it stored against the same rule (a disagreement
/// is corrupt data), and the scheduler checks the cycle length and digest
/// against its own compiled policy before it maps the slot to a tenant.
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
    timeline: Option<u32>,
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
            timeline: None,
        }
    }

    /// The same reservation, acknowledged on the server's WAL timeline
    /// `timeline` (`None`: not known, as for a reservation read back
    /// later or made by a source without timelines).
    #[must_use]
    pub fn with_timeline(mut self, timeline: Option<u32>) -> Self {
        self.timeline = timeline;
        self
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

    /// The server's WAL timeline when the call acknowledged the
    /// reservation (`None` when not known: a reservation read back later,
    /// or a source without timelines). A promoted PostgreSQL standby runs
    /// on a new one.
    pub fn timeline(&self) -> Option<u32> {
        self.timeline
    }
}
