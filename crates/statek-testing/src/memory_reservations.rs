//! [`InMemoryReservations`]: a [`ReservationSource`] on an in-process
//! cursor per shard, for unit tests of code built on statek (a
//! statek-scheduler's `DurableFairScheduler` and `Worker` without
//! PostgreSQL).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use statek_core::{
    Registration, Reservation, ReservationSource, SlotOutcomeAnswer, SlotOutcomes,
    SlotOutcomesRecorded, SourceError, SourceErrorKind, SourceShard, Succession,
    MAX_RESERVATION_BATCH,
};
use statek_policy::{
    PolicyDigest, PolicySeam, ScheduleId, SchedulerShardId, WeightedFairnessPolicy,
};
use uuid::Uuid;

use crate::memory_error::MemoryError;

/// The largest sequence, as in PostgreSQL (`bigint`).
const SEQUENCE_LIMIT: u64 = i64::MAX as u64;

#[derive(Debug)]
struct Shard {
    policy: WeightedFairnessPolicy,
    registered_at: SystemTime,
    next_sequence: u64,
    /// The cursor at the seal and the successor.
    seal: Option<(u64, SchedulerShardId)>,
    predecessor: Option<SchedulerShardId>,
}

/// The seam bounds into `shard` (empty for a first shard), computed along
/// the chain from its first shard so that each seal carries the open gaps
/// of the one before ([`PolicySeam::at_carrying`]), as the store does.
fn seam_into(
    shards: &BTreeMap<SchedulerShardId, Shard>,
    shard: &SchedulerShardId,
) -> Vec<statek_policy::SeamBound> {
    let mut chain = vec![shard];
    while let Some(previous) = chain
        .last()
        .and_then(|s| shards.get(*s))
        .and_then(|s| s.predecessor.as_ref())
    {
        if chain.len() > shards.len() {
            break;
        }
        chain.push(previous);
    }
    let mut seam: Vec<statek_policy::SeamBound> = Vec::new();
    for pair in chain.iter().rev().collect::<Vec<_>>().windows(2) {
        let (Some(old), Some(new)) = (shards.get(*pair[0]), shards.get(*pair[1])) else {
            return Vec::new();
        };
        let Some((at, _)) = &old.seal else {
            return Vec::new();
        };
        let before = std::mem::take(&mut seam);
        seam = PolicySeam::new(&old.policy, &new.policy).at_carrying(*at, |t| {
            before
                .iter()
                .find(|b| b.tenant() == t)
                .map(statek_policy::SeamBound::open_gap_at_successor_start)
        });
    }
    seam
}

impl Shard {
    fn source_shard(&self) -> SourceShard {
        SourceShard {
            policy: self.policy.clone(),
            cycle_digest: Some(self.policy.cycle_digest()),
            sealed: self.seal.is_some(),
            predecessor: self.predecessor.clone(),
        }
    }
}

/// What an id reserved: `k` sequences from `first` (one for a single
/// reservation), on a shard under a digest.
#[derive(Debug, Clone)]
struct Issued {
    shard: SchedulerShardId,
    digest: PolicyDigest,
    first: u64,
    k: u32,
    batch: bool,
    cycle_length: u32,
    reserved_at: SystemTime,
}

impl Issued {
    fn reservations(&self, id: Uuid, replayed: bool) -> Vec<Reservation> {
        (self.first..self.first + u64::from(self.k))
            .map(|sequence| {
                Reservation::new(
                    id,
                    self.shard.clone(),
                    sequence,
                    self.cycle_length,
                    self.digest,
                    self.reserved_at,
                    replayed,
                )
            })
            .collect()
    }
}

#[derive(Debug, Default)]
struct State {
    shards: BTreeMap<SchedulerShardId, Shard>,
    issued: HashMap<Uuid, Issued>,
    /// Slot outcome records by shard and first sequence.
    outcomes: BTreeMap<(SchedulerShardId, u64), SlotOutcomes>,
}

/// A [`ReservationSource`] in memory: per shard one cursor from 0,
/// reservations contiguous and idempotent by id exactly as in PostgreSQL
/// (a replay returns the original sequence or range, marked
/// [`Reservation::replayed`]), a batch one contiguous range, and seals
/// ([`seal`](Self::seal)) so rollouts can be tested too. Errors are
/// [`MemoryError`]s inside [`SourceError`]s with the kind `PgStore` gives
/// the same failure ([`MemoryError::UnknownShard`], `PolicyConflict`,
/// `PolicyDigestMismatch`, `ShardSealed`, `ReservationConflict`,
/// `BatchConflict`, `InvalidArgument` for an id that is not a UUIDv7 or a
/// batch size out of range); it never fails transiently. It passes the
/// reservation-source conformance suite ([`crate::source_conformance`]),
/// as `PgStore` does.
///
/// For tests: one process only, nothing survives it, every reservation is
/// kept in memory, and `reserved_at` is the system clock. Cheap to clone
/// (clones share the cursors), `Send + Sync`; the lock is never held
/// across an await.
///
/// ```
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// use statek_core::ReservationSource;
/// use statek_testing::InMemoryReservations;
/// use uuid::Uuid;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     let policy = WeightedFairnessPolicy::new(
///         SchedulerShardId::try_from("primary-v1")?,
///         [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
///          TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
///     )?;
///     let source = InMemoryReservations::new();
///     source.register(&policy, None).await?;
///     let (shard, digest) = (policy.shard_id(), policy.digest());
///     let id = Uuid::now_v7();
///     assert_eq!(source.reserve(shard, &digest, id).await?.sequence(), 0);
///     // The same id again: the same reservation, replayed.
///     let again = source.reserve(shard, &digest, id).await?;
///     assert_eq!((again.sequence(), again.replayed()), (0, true));
///     let batch = source.reserve_batch(shard, &digest, Uuid::now_v7(), 3).await?;
///     assert_eq!(batch.iter().map(|r| r.slot()).collect::<Vec<_>>(), [1, 2, 3]);
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemoryReservations {
    state: Arc<Mutex<State>>,
}

impl InMemoryReservations {
    /// No shards yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot outcome records of `shard`, by first sequence, in
    /// sequence order.
    pub fn slot_outcomes(&self, shard: &SchedulerShardId) -> Vec<(u64, SlotOutcomes)> {
        self.state()
            .outcomes
            .iter()
            .filter(|((s, _), _)| s == shard)
            .map(|((_, first), outcomes)| (*first, outcomes.clone()))
            .collect()
    }

    /// The next sequence of `shard` (its cursor), `None` for an unknown
    /// shard.
    pub fn next_sequence(&self, shard: &SchedulerShardId) -> Option<u64> {
        self.state().shards.get(shard).map(|s| s.next_sequence)
    }

    /// Seals `shard` at its cursor `N` and registers `successor` (a new
    /// shard id) to go on from there, as `statek rollout` does in
    /// PostgreSQL: `shard` then answers [`MemoryError::ShardSealed`], and a
    /// scheduler ticking it follows to the successor. Returns `N`.
    ///
    /// # Errors
    /// [`MemoryError::UnknownShard`]; [`MemoryError::InvalidArgument`] when
    /// `shard` is already sealed or the successor's shard id is taken.
    pub fn seal(
        &self,
        shard: &SchedulerShardId,
        successor: WeightedFairnessPolicy,
    ) -> Result<u64, MemoryError> {
        let mut state = self.state();
        if state.shards.contains_key(successor.shard_id()) {
            return Err(MemoryError::InvalidArgument(format!(
                "shard {} exists already",
                successor.shard_id()
            )));
        }
        let sealed = state
            .shards
            .get_mut(shard)
            .ok_or_else(|| MemoryError::UnknownShard {
                shard: shard.clone(),
            })?;
        if sealed.seal.is_some() {
            return Err(MemoryError::InvalidArgument(format!(
                "shard {shard} is sealed already"
            )));
        }
        let at = sealed.next_sequence;
        sealed.seal = Some((at, successor.shard_id().clone()));
        state.shards.insert(
            successor.shard_id().clone(),
            Shard {
                policy: successor,
                registered_at: SystemTime::now(),
                next_sequence: 0,
                seal: None,
                predecessor: Some(shard.clone()),
            },
        );
        Ok(at)
    }

    /// Reserves `k` sequences (`batch`: by [`reserve_batch`](ReservationSource::reserve_batch)).
    fn reserve_range(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        id: Uuid,
        k: u32,
        batch: bool,
    ) -> Result<Vec<Reservation>, MemoryError> {
        if id.get_version_num() != 7 || id.get_variant() != uuid::Variant::RFC4122 {
            let what = if batch { "batch id" } else { "reservation id" };
            return Err(MemoryError::InvalidArgument(format!(
                "{what} {id} is not a UUIDv7"
            )));
        }
        let mut state = self.state();
        if let Some(issued) = state.issued.get(&id) {
            // The lost-acknowledgement path: the original, or a conflict.
            let same = &issued.shard == shard && &issued.digest == digest;
            return match (batch, issued.batch) {
                (false, false) if same => Ok(issued.reservations(id, true)),
                (true, true) if same && issued.k == k => Ok(issued.reservations(id, true)),
                (false, _) => Err(MemoryError::ReservationConflict { reservation_id: id }),
                (true, _) => Err(MemoryError::BatchConflict {
                    batch_id: id,
                    detail: "another shard, policy digest, size, or a single reservation".into(),
                }),
            };
        }
        let entry = state
            .shards
            .get_mut(shard)
            .ok_or_else(|| MemoryError::UnknownShard {
                shard: shard.clone(),
            })?;
        let stored = entry.policy.digest();
        if &stored != digest {
            return Err(MemoryError::PolicyDigestMismatch {
                shard: shard.clone(),
                stored,
                offered: *digest,
            });
        }
        if let Some((sealed_at_sequence, successor)) = &entry.seal {
            return Err(MemoryError::ShardSealed {
                shard: shard.clone(),
                sealed_at_sequence: *sealed_at_sequence,
                successor: successor.clone(),
            });
        }
        let first = entry.next_sequence;
        let next = first
            .checked_add(u64::from(k))
            .filter(|n| *n <= SEQUENCE_LIMIT)
            .ok_or_else(|| MemoryError::SequenceExhausted {
                shard: shard.clone(),
            })?;
        entry.next_sequence = next;
        let issued = Issued {
            shard: shard.clone(),
            digest: *digest,
            first,
            k,
            batch,
            cycle_length: entry.policy.cycle_length(),
            reserved_at: SystemTime::now(),
        };
        let reservations = issued.reservations(id, false);
        state.issued.insert(id, issued);
        Ok(reservations)
    }
}

/// In process: see [`InMemoryReservations`]. `schedule` is accepted and
/// not kept (a chain of shards comes from [`InMemoryReservations::seal`]).
impl ReservationSource for InMemoryReservations {
    async fn register(
        &self,
        policy: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> Result<(Registration, SourceShard), SourceError> {
        let _ = schedule;
        let mut state = self.state();
        if let Some(stored) = state.shards.get(policy.shard_id()) {
            if stored.policy.canonical_bytes() != policy.canonical_bytes() {
                return Err(MemoryError::PolicyConflict {
                    shard: policy.shard_id().clone(),
                    stored: stored.policy.digest(),
                    offered: policy.digest(),
                }
                .into());
            }
            let registered_at = stored.registered_at;
            return Ok((
                Registration::Idempotent { registered_at },
                stored.source_shard(),
            ));
        }
        let shard = Shard {
            policy: policy.clone(),
            registered_at: SystemTime::now(),
            next_sequence: 0,
            seal: None,
            predecessor: None,
        };
        let answer = (
            Registration::Registered {
                registered_at: shard.registered_at,
            },
            shard.source_shard(),
        );
        state.shards.insert(policy.shard_id().clone(), shard);
        Ok(answer)
    }

    async fn reserve(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        id: Uuid,
    ) -> Result<Reservation, SourceError> {
        self.reserve_range(shard, digest, id, 1, false)?
            .pop()
            .ok_or_else(|| {
                SourceError::new(
                    SourceErrorKind::Corrupt,
                    "an empty range of one reservation",
                )
            })
    }

    async fn reserve_batch(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        batch_id: Uuid,
        k: u32,
    ) -> Result<Vec<Reservation>, SourceError> {
        if !(1..=MAX_RESERVATION_BATCH).contains(&k) {
            return Err(MemoryError::InvalidArgument(format!(
                "a batch has 1..={MAX_RESERVATION_BATCH} reservations, not {k}"
            ))
            .into());
        }
        Ok(self.reserve_range(shard, digest, batch_id, k, true)?)
    }

    async fn successor(&self, shard: &SchedulerShardId) -> Result<Option<Succession>, SourceError> {
        let state = self.state();
        let sealed = state
            .shards
            .get(shard)
            .ok_or_else(|| MemoryError::UnknownShard {
                shard: shard.clone(),
            })?;
        let Some((sealed_at_sequence, successor)) = &sealed.seal else {
            return Ok(None);
        };
        let next = state
            .shards
            .get(successor)
            .ok_or_else(|| MemoryError::UnknownShard {
                shard: successor.clone(),
            })?;
        Ok(Some(Succession {
            sealed_at_sequence: *sealed_at_sequence,
            successor: next.source_shard(),
            seam: seam_into(&state.shards, successor),
        }))
    }

    async fn record_slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        records: &[(u64, SlotOutcomes)],
    ) -> Result<Vec<SlotOutcomeAnswer>, SourceError> {
        let mut state = self.state();
        let mut answers = Vec::with_capacity(records.len());
        for (first_sequence, outcomes) in records {
            let slots = state
                .issued
                .values()
                .find(|issued| &issued.shard == shard && issued.first == *first_sequence)
                .map(|issued| u64::from(issued.k));
            let answer = match slots {
                None => SlotOutcomeAnswer::Refused(format!(
                    "shard {shard} has no reservation range starting at sequence {first_sequence}"
                )),
                Some(slots) if slots != outcomes.slot_count() => SlotOutcomeAnswer::Refused(format!(
                    "the reservation range of shard {shard} at sequence {first_sequence} holds {slots} slots, the record names {}",
                    outcomes.slot_count()
                )),
                Some(_) => match state.outcomes.entry((shard.clone(), *first_sequence)) {
                    std::collections::btree_map::Entry::Vacant(place) => {
                        place.insert(outcomes.clone());
                        SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Recorded)
                    }
                    std::collections::btree_map::Entry::Occupied(held) if held.get() == outcomes => {
                        SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Replayed)
                    }
                    std::collections::btree_map::Entry::Occupied(_) => SlotOutcomeAnswer::Refused(format!(
                        "the reservation range of shard {shard} at sequence {first_sequence} already has another outcome record"
                    )),
                },
            };
            answers.push(answer);
        }
        Ok(answers)
    }

    async fn oldest_reservation(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Option<SystemTime>, SourceError> {
        Ok(self
            .state()
            .issued
            .values()
            .filter(|issued| &issued.shard == shard)
            .map(|issued| issued.reserved_at)
            .min())
    }
}

#[cfg(test)]
mod tests;
