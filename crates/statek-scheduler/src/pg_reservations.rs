//! [`ReservationSource`] on PostgreSQL: [`PgStore`]'s reservation
//! transactions, shard rows and seals.

use std::time::SystemTime;

use statek_core::{Registration, Reservation, SlotOutcomeAnswer, SlotOutcomes};
use statek_policy::{PolicyDigest, ScheduleId, SchedulerShardId, WeightedFairnessPolicy};
use statek_store_pg::{PgStore, StoreError, StoredShard};
use uuid::Uuid;

use crate::reservation_source::{ReservationSource, SourceShard, Succession};

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
    ) -> Result<(Registration, SourceShard), StoreError> {
        let registration = self.register_in(policy, schedule).await?;
        let stored = self.load_shard(policy.shard_id()).await?;
        Ok((registration, source_shard(&stored)))
    }

    async fn reserve(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        id: Uuid,
    ) -> Result<Reservation, StoreError> {
        PgStore::reserve(self, shard, digest, id).await
    }

    async fn reserve_batch(
        &self,
        shard: &SchedulerShardId,
        digest: &PolicyDigest,
        batch_id: Uuid,
        k: u32,
    ) -> Result<Vec<Reservation>, StoreError> {
        let batch = PgStore::reserve_batch(self, shard, digest, batch_id, k).await?;
        Ok(batch.into_reservations())
    }

    async fn record_slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        records: &[(u64, SlotOutcomes)],
    ) -> Result<Vec<SlotOutcomeAnswer>, StoreError> {
        PgStore::record_slot_outcome_ranges(self, shard, records).await
    }

    async fn successor(&self, shard: &SchedulerShardId) -> Result<Option<Succession>, StoreError> {
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

    async fn ensure_durable(&self) -> Result<(), StoreError> {
        PgStore::ensure_durable(self).await.map(|_| ())
    }

    async fn oldest_reservation(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Option<SystemTime>, StoreError> {
        PgStore::oldest_reservation(self, shard).await
    }
}
