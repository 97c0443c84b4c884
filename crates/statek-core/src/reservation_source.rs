//! [`ReservationSource`]: where statek-scheduler's `DurableFairScheduler`
//! reserves its slots, and the shapes it answers with. Two implementations
//! ship: statek-store-pg's `PgStore` (durable, shared by replicas) and
//! statek-testing's `InMemoryReservations` (one process, for tests).

use std::future::Future;
use std::time::SystemTime;

use statek_policy::{
    CycleDigest, PolicyDigest, ScheduleId, SchedulerShardId, SeamBound, WeightedFairnessPolicy,
};
use uuid::Uuid;

use crate::{Registration, Reservation, SlotOutcomeAnswer, SlotOutcomes, SourceError};

/// A shard as a [`ReservationSource`] holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceShard {
    /// The shard's stored policy (decoded fail-closed by the source).
    pub policy: WeightedFairnessPolicy,
    /// The digest of the cycle the shard was registered with (`None`: the
    /// source stores none, e.g. a PostgreSQL shard registered before
    /// migration V6); the scheduler checks it against its own compilation.
    pub cycle_digest: Option<CycleDigest>,
    /// Whether the shard is sealed (a rollout moved its schedule on).
    pub sealed: bool,
    /// The shard it succeeded, if any.
    pub predecessor: Option<SchedulerShardId>,
}

/// The seal of a shard and the shard that goes on from it
/// ([`ReservationSource::successor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Succession {
    /// `N`: the sealed shard's cursor at the seal (its sequences are
    /// `0..N`).
    pub sealed_at_sequence: u64,
    /// The successor (its sequences start at 0).
    pub successor: SourceShard,
    /// Each tenant's exact gap across the seam, checked by the source
    /// against [`statek_policy::PolicySeam::at`].
    pub seam: Vec<SeamBound>,
}

/// Where statek-scheduler's `DurableFairScheduler` reserves its slots:
/// register or verify a shard's policy, reserve the next sequence (one, or
/// a contiguous batch), and follow a seal to the successor.
///
/// The contract (kept by statek-store-pg's `PgStore` durably across
/// replicas, and by statek-testing's `InMemoryReservations` in one
/// process):
/// - per shard, reservations with unique ids form one contiguous sequence
///   0, 1, 2, … with no gaps or repeats; a batch of `k` is `k` contiguous
///   sequences;
/// - a call with an id already used returns the original reservation
///   (or range), marked [`Reservation::replayed`]; the same id with other
///   arguments is a [`SourceErrorKind::IdConflict`](crate::SourceErrorKind::IdConflict);
/// - a wrong digest is a [`SourceErrorKind::PolicyConflict`](crate::SourceErrorKind::PolicyConflict),
///   an unknown shard [`SourceErrorKind::UnknownShard`](crate::SourceErrorKind::UnknownShard),
///   a sealed one [`SourceErrorKind::ShardSealed`](crate::SourceErrorKind::ShardSealed)
///   (nothing reserved: the scheduler follows the seal with
///   [`successor`](Self::successor) and reserves there with a new id);
/// - registration never overwrites: other bytes for a registered shard
///   are a [`SourceErrorKind::PolicyConflict`](crate::SourceErrorKind::PolicyConflict).
///
/// Errors are [`SourceError`]s: the scheduler retries the
/// [`retryable`](SourceError::is_retryable) ones with the same id, and
/// acts on the others by their kind.
pub trait ReservationSource: Send + Sync {
    /// Registers `policy` for its shard (in `schedule`, `None`: the
    /// shard's own) or verifies that the shard holds byte-identical
    /// canonical bytes, and returns how, with the shard as stored.
    fn register(
        &self,
        policy: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> impl Future<Output = Result<(Registration, SourceShard), SourceError>> + Send;

    /// Reserves the shard's next sequence under `digest`, idempotent by
    /// `id` (a UUIDv7).
    fn reserve(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        id: Uuid,
    ) -> impl Future<Output = Result<Reservation, SourceError>> + Send;

    /// Reserves the shard's next `k` sequences (1 to the source's largest
    /// batch; statek-store-pg: `MAX_RESERVATION_BATCH`, 4,096) as one
    /// contiguous range, idempotent by `batch_id`; in sequence order.
    fn reserve_batch(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        batch_id: Uuid,
        k: u32,
    ) -> impl Future<Output = Result<Vec<Reservation>, SourceError>> + Send;

    /// The seal of `shard` and its successor, or `None` when `shard` is not
    /// sealed.
    fn successor(
        &self,
        shard: &SchedulerShardId,
    ) -> impl Future<Output = Result<Option<Succession>, SourceError>> + Send;

    /// Refuses, before statek-scheduler's `Worker` reserves anything, a
    /// source that can lose acknowledged reservations (default: accepts;
    /// PostgreSQL: `PgStore::ensure_durable`, a
    /// [`SourceErrorKind::DurabilityRefused`](crate::SourceErrorKind::DurabilityRefused)).
    fn ensure_durable(&self) -> impl Future<Output = Result<(), SourceError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Records the outcome class of every slot of reserved ranges of
    /// `shard`, each given by its first sequence and the classes of all
    /// its slots in sequence order, once: one answer per record, in order
    /// (the same record again is accepted and changes nothing; a refused
    /// one is not written, the others are). PostgreSQL:
    /// `PgStore::record_slot_outcome_ranges`, which
    /// refuses a record that does not cover exactly one retained range or
    /// hides a claimed slot. Default: keeps nothing and answers no record
    /// (an empty list).
    fn record_slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        records: &[(u64, SlotOutcomes)],
    ) -> impl Future<Output = Result<Vec<SlotOutcomeAnswer>, SourceError>> + Send {
        let _ = (shard, records);
        std::future::ready(Ok(Vec::new()))
    }

    /// When the oldest reservation still retained for `shard` was made,
    /// for the retention gauge (default: `None`, nothing retained).
    fn oldest_reservation(
        &self,
        shard: &SchedulerShardId,
    ) -> impl Future<Output = Result<Option<SystemTime>, SourceError>> + Send {
        let _ = shard;
        std::future::ready(Ok(None))
    }
}
