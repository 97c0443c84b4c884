//! [`ReservationSource`] on PostgreSQL: [`PgStore`]'s reservation
//! transactions, shard rows and seals, and what each [`StoreError`] means
//! to the scheduler ([`SourceErrorKind`]).

use crate::{DurabilityError, ReservationError, RolloutError};
use std::time::SystemTime;

use statek_core::{
    Registration, Reservation, ReservationSource, SlotOutcomeAnswer, SlotOutcomes, SourceError,
    SourceErrorKind, SourceShard, Succession,
};
use statek_policy::{PolicyDigest, ScheduleId, SchedulerShardId, WeightedFairnessPolicy};
use uuid::Uuid;

use crate::{PgStore, StoreError, StoredShard};

/// What a store error means to the scheduler; the error itself stays
/// inside ([`SourceError::downcast_ref`]).
impl From<StoreError> for SourceError {
    fn from(error: StoreError) -> Self {
        let kind = match &error {
            e if e.is_retryable() => SourceErrorKind::Transient,
            StoreError::Rollout(RolloutError::UnknownShard { .. }) => SourceErrorKind::UnknownShard,
            StoreError::Rollout(RolloutError::ShardSealed { .. }) => SourceErrorKind::ShardSealed,
            StoreError::Durability(DurabilityError::ShardHalted(_)) => SourceErrorKind::ShardHalted,
            StoreError::Durability(DurabilityError::ReservationsLostInFailover(_)) => {
                SourceErrorKind::ReservationsLost
            }
            StoreError::Rollout(RolloutError::PolicyConflict { .. })
            | StoreError::Rollout(RolloutError::PolicyDigestMismatch { .. }) => {
                SourceErrorKind::PolicyConflict
            }
            StoreError::Reservation(ReservationError::ReservationConflict { .. })
            | StoreError::Reservation(ReservationError::BatchConflict { .. }) => {
                SourceErrorKind::IdConflict
            }
            StoreError::Reservation(ReservationError::SequenceExhausted { .. }) => {
                SourceErrorKind::SequenceExhausted
            }
            StoreError::Durability(DurabilityError::Refused { .. }) => {
                SourceErrorKind::DurabilityRefused
            }
            StoreError::InvalidArgument(_) => SourceErrorKind::InvalidArgument,
            StoreError::CorruptData { .. } => SourceErrorKind::Corrupt,
            _ => SourceErrorKind::Other,
        };
        SourceError::new(kind, error)
    }
}

fn source_shard(stored: &StoredShard) -> SourceShard {
    SourceShard {
        policy: stored.policy().clone(),
        cycle_digest: stored.cycle_digest(),
        sealed: stored.seal().is_some(),
        predecessor: stored.predecessor().cloned(),
    }
}

/// Durable, shared by every replica: [`PgStore::register_in`] then
/// [`PgStore::load_shard`], [`PgStore::reserve`],
/// [`PgStore::reserve_batch`], [`PgStore::load_seam`] (seam bounds
/// checked), [`PgStore::ensure_durable`],
/// [`PgStore::record_slot_outcome_ranges`] and [`PgStore::oldest_reservation`].
impl ReservationSource for PgStore {
    async fn register(
        &self,
        policy: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> Result<(Registration, SourceShard), SourceError> {
        let registration = self.register_in(policy, schedule).await?;
        let stored = self.load_shard(policy.shard_id()).await?;
        Ok((registration, source_shard(&stored)))
    }

    async fn reserve(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        id: Uuid,
    ) -> Result<Reservation, SourceError> {
        Ok(PgStore::reserve(self, shard, digest, id).await?)
    }

    async fn reserve_batch(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        batch_id: Uuid,
        k: u32,
    ) -> Result<Vec<Reservation>, SourceError> {
        let batch = PgStore::reserve_batch(self, shard, digest, batch_id, k).await?;
        Ok(batch.into_reservations())
    }

    async fn record_slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        records: &[(u64, SlotOutcomes)],
    ) -> Result<Vec<SlotOutcomeAnswer>, SourceError> {
        Ok(PgStore::record_slot_outcome_ranges(self, shard, records).await?)
    }

    async fn successor(&self, shard: &SchedulerShardId) -> Result<Option<Succession>, SourceError> {
        if self.load_shard(shard).await?.seal().is_none() {
            return Ok(None);
        }
        let seam = self.load_seam(shard).await?;
        Ok(Some(Succession {
            sealed_at_sequence: seam.sealed_at_sequence(),
            successor: source_shard(seam.successor()),
            seam: seam.seam().to_vec(),
        }))
    }

    async fn ensure_durable(&self) -> Result<(), SourceError> {
        PgStore::ensure_durable(self).await?;
        Ok(())
    }

    async fn oldest_reservation(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Option<SystemTime>, SourceError> {
        Ok(PgStore::oldest_reservation(self, shard).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnectionError, LostReservations, RunQueueError};

    fn kind_of(error: StoreError) -> SourceErrorKind {
        SourceError::from(error).kind()
    }

    #[test]
    fn each_store_error_says_what_it_means_to_the_scheduler() {
        let shard = SchedulerShardId::try_from("primary-v1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            kind_of(StoreError::Connection(ConnectionError::PoolTimeout("wait"))),
            SourceErrorKind::Transient
        );
        assert_eq!(
            kind_of(StoreError::Rollout(RolloutError::UnknownShard {
                shard: shard.clone()
            })),
            SourceErrorKind::UnknownShard
        );
        assert_eq!(
            kind_of(StoreError::Durability(
                DurabilityError::ReservationsLostInFailover(Box::new(LostReservations {
                    shard: shard.clone(),
                    from_timeline: 1,
                    to_timeline: 2,
                    checked: 1,
                    lost: Vec::new(),
                }))
            )),
            SourceErrorKind::ReservationsLost
        );
        assert_eq!(
            kind_of(StoreError::InvalidArgument("k = 0".into())),
            SourceErrorKind::InvalidArgument
        );
        assert_eq!(
            kind_of(StoreError::corrupt("reservation", "bad slot")),
            SourceErrorKind::Corrupt
        );
        assert_eq!(
            kind_of(StoreError::RunQueue(RunQueueError::RunNotFound {
                run_id: Uuid::nil()
            })),
            SourceErrorKind::Other
        );
        // The store's error stays inside, as the cause.
        let error = SourceError::from(StoreError::Rollout(RolloutError::UnknownShard { shard }));
        assert!(matches!(
            error.downcast_ref::<StoreError>(),
            Some(StoreError::Rollout(RolloutError::UnknownShard { .. }))
        ));
    }
}
