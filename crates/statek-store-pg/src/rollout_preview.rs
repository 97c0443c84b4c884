//! A rollout's seam read from the database without writing anything: the
//! exact seam bounds a rollout would store if it sealed the live shard at
//! its cursor now, with the gaps carried into that shard from the seam
//! before it (`statek rollout --dry-run --at-cursor`).

use crate::RolloutError;
use statek_policy::{PolicySeam, ScheduleId, SchedulerShardId, SeamBound, WeightedFairnessPolicy};
use tokio_postgres::types::Type;

use crate::chain::live_shard_of_chain;
use crate::statement::Db;
use crate::succession::{open_gaps_into, SHARD_EXISTS};
use crate::{PgStore, StoreError};

/// What a rollout of `from` to `to` would seal now: read, not locked, so
/// the cursor may have moved by the time a rollout runs (it seals at the
/// cursor it locks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPreview {
    schedule: ScheduleId,
    cursor: u64,
    carried_from: Option<SchedulerShardId>,
    seam: Vec<SeamBound>,
}

impl RolloutPreview {
    /// The schedule of the live shard.
    pub fn schedule(&self) -> &ScheduleId {
        &self.schedule
    }

    /// `N`: the live shard's cursor when it was read (its sequences so far
    /// are `0..N`), where a rollout now would seal it.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The shard the live shard succeeded, whose seam's open gaps the
    /// bounds carry for tenants the live shard has not picked yet; `None`
    /// for the first shard of a schedule.
    pub fn carried_from(&self) -> Option<&SchedulerShardId> {
        self.carried_from.as_ref()
    }

    /// Each tenant of the successor, in its tenant order: its exact seam
    /// bound for a seal at [`cursor`](Self::cursor)
    /// ([`PolicySeam::at_carrying`]), as the rollout would store it.
    pub fn seam(&self) -> &[SeamBound] {
        &self.seam
    }
}

impl PgStore {
    /// The seam a rollout of `from` to `to` would seal now, read without
    /// locking or writing: the checks of [`PgStore::rollout`] that need no
    /// lock, then the exact bounds at the live shard's cursor, with the
    /// open gaps carried from the seam into it.
    ///
    /// # Errors
    /// As [`PgStore::rollout`] would fail before it writes:
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard) (no `from`), [`RolloutError::PolicyConflict`](crate::RolloutError::PolicyConflict)
    /// (`from`'s stored policy is another), [`RolloutError::ScheduleConflict`](crate::RolloutError::ScheduleConflict),
    /// [`RolloutError::NotLiveShard`](crate::RolloutError::NotLiveShard) (`from` is sealed),
    /// [`RolloutError::SuccessorExists`](crate::RolloutError::SuccessorExists) (`to` is registered);
    /// [`StoreError::CorruptData`]; [`MigrationError::Behind`](crate::MigrationError::Behind)
    /// for a cost-mode `to` before migration V19; connection and server
    /// errors.
    pub async fn preview_rollout(
        &self,
        from: &WeightedFairnessPolicy,
        to: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> Result<RolloutPreview, StoreError> {
        if to.fairness().cost().is_some() {
            self.require_cost_ledger().await?;
        }
        let stored = self.load_shard(from.shard_id()).await?;
        if stored.policy().canonical_bytes() != from.canonical_bytes() {
            return Err(StoreError::Rollout(RolloutError::PolicyConflict {
                shard: from.shard_id().clone(),
                stored: stored.policy().digest(),
                offered: from.digest(),
            }));
        }
        if let Some(offered) = schedule {
            if offered != stored.schedule() {
                return Err(StoreError::Rollout(RolloutError::ScheduleConflict {
                    shard: from.shard_id().clone(),
                    stored: stored.schedule().clone(),
                    offered: offered.clone(),
                }));
            }
        }
        let (live, exists, open) = self
            .with_response_timeout(async |db: &Db<'_>| {
                let live = match stored.seal() {
                    Some(_) => Some(live_shard_of_chain(db, from.shard_id()).await?),
                    None => None,
                };
                let exists = db
                    .query_opt(SHARD_EXISTS, &[(&to.shard_id().as_str(), Type::TEXT)])
                    .await?
                    .is_some();
                Ok((live, exists, open_gaps_into(db, &stored).await?))
            })
            .await?;
        if let (Some(seal), Some(live)) = (stored.seal(), live) {
            return Err(StoreError::Rollout(RolloutError::NotLiveShard {
                shard: from.shard_id().clone(),
                schedule: stored.schedule().clone(),
                sealed_at_sequence: seal.sealed_at_sequence(),
                live,
            }));
        }
        if exists {
            return Err(StoreError::Rollout(RolloutError::SuccessorExists {
                shard: to.shard_id().clone(),
            }));
        }
        let cursor = stored.next_sequence();
        let seam = PolicySeam::new(from, to).at_carrying(cursor, |t| open.get(t.as_str()).copied());
        Ok(RolloutPreview {
            schedule: stored.schedule().clone(),
            cursor,
            carried_from: stored.predecessor().cloned(),
            seam,
        })
    }
}
