//! [`DurableFairScheduler`]: register, then tick.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use statek_core::{
    check_cycle_digest, CycleCheck, Registration, Reservation, ReservationSource, RunPool,
    SourceErrorKind, SourceShard, TenantExecutor, TenantTickOutcome,
};
use statek_policy::{
    FairnessUnit, ScheduleId, SchedulerShardId, TenantId, TenantStarvationBound,
    WeightedFairnessPolicy,
};
#[cfg(feature = "postgres")]
use statek_store_pg::{PgStore, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::SchedulerError;
use crate::options::SchedulerOptions;
use crate::outcome_recording::SchedulerOutcomeRecords;
use crate::reservation_retries::with_retries;
use crate::reserved_batch::{BatchHooks, ReservedBatch};
use crate::selection_metrics::SelectionMetrics;
use crate::tick_outcome::{tenant_of, TickOutcome};

mod batch_runner;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A slot whose claim failed for good (the error's text), or that its
/// executor never reported: consumed without a run.
#[derive(Debug, thiserror::Error)]
#[error("slot abandoned: {0}")]
struct SlotAbandoned(String);

/// A scheduler replica for one shard: every [`tick`](Self::tick) reserves
/// the shard's next global slot from its [`ReservationSource`]
/// (statek-store-pg's `PgStore`, durable and shared by every replica:
/// [`PgScheduler`] names that one; for unit tests statek-testing's
/// `InMemoryReservations`), maps it to exactly one tenant
/// through the policy's cycle, and lets the tenant-isolated executor claim
/// and run at most one of that tenant's runs.
///
/// Any number of replicas, in any number of processes, may tick the same
/// shard: the reservation sequence is global, so together they follow the
/// cycle, and each tenant is selected at least once in every window of
/// [`TenantStarvationBound::maximum_reservations_until_selection`]
/// consecutive reservations. The guarantee is a share of *slots*
/// (scheduling opportunities), not of CPU time or completed runs, and the
/// bound counts reservations, not seconds.
///
/// **Rollouts.** The scheduler ticks the *live* shard of its schedule. When
/// a reservation meets a seal (`statek rollout` sealed the shard and
/// registered its successor), the scheduler loads the successor's policy
/// from the database (decoded fail-closed, digest and compiled cycle
/// checked), checks the stored seam bounds, and goes on ticking the
/// successor with the same tick: no restart, no slot lost. A replica
/// started with a sealed shard's policy follows the chain to the live
/// shard at [`register`](Self::register). Outcomes, metrics and spans carry
/// the shard of the reservation they came from.
#[derive(Debug)]
pub struct DurableFairScheduler<E, R> {
    source: R,
    live: RwLock<Arc<WeightedFairnessPolicy>>,
    /// Serialises following the chain (one load per seal, not one per task).
    following: tokio::sync::Mutex<()>,
    executor: E,
    options: SchedulerOptions,
    registration: Registration,
    /// Slot outcome records of ticks and of a Worker's batches.
    outcome_records: SchedulerOutcomeRecords,
    /// The per-tenant selection metrics' handles.
    selection_metrics: SelectionMetrics,
}

/// Sealed shards followed in one go before giving up: far more than any
/// rollout rate can produce between two reservations.
const MAX_FOLLOWED_SEALS: usize = 64;

impl<E: TenantExecutor, R: ReservationSource> DurableFairScheduler<E, R> {
    /// Registers `policy` for its shard (or verifies that the shard already
    /// holds byte-identical canonical bytes), reads the stored policy back
    /// fail-closed, and returns a scheduler ready to tick. No run is claimed
    /// before this succeeds.
    ///
    /// # Errors
    /// [`SchedulerError::Source`] of kind `PolicyConflict` when the shard is
    /// bound to another policy (never overwritten), `Corrupt` when the
    /// stored row fails its checks, or `Transient` for connection errors;
    /// [`SchedulerError::PolicyMismatch`] if the stored policy read back
    /// differs; [`SchedulerError::CycleMismatch`] if the shard's stored
    /// cycle digest is not the digest of this replica's compiled cycle
    /// (shards registered before migration V6 store none and are not
    /// checked), for the shard or any successor it follows.
    ///
    /// When the shard is sealed, the scheduler follows the chain to the
    /// live shard (see the type's docs) before it returns.
    ///
    /// `source` is where slots are reserved: statek-store-pg's `PgStore` in
    /// production,
    /// statek-testing's `InMemoryReservations` in a unit test.
    pub async fn register(
        source: R,
        policy: WeightedFairnessPolicy,
        executor: E,
        options: SchedulerOptions,
    ) -> Result<Self, SchedulerError> {
        Self::register_in(source, policy, None, executor, options).await
    }

    /// [`register`](Self::register) into the schedule `schedule` (a policy
    /// file's `schedule` key; `None`: the shard's own, see
    /// `PgStore::register_in`).
    ///
    /// # Errors
    /// As [`register`](Self::register), and the store's
    /// `ScheduleConflict` / `ScheduleHasLiveShard`.
    pub async fn register_in(
        source: R,
        policy: WeightedFairnessPolicy,
        schedule: Option<ScheduleId>,
        executor: E,
        options: SchedulerOptions,
    ) -> Result<Self, SchedulerError> {
        supported(&policy, &executor)?;
        let (registration, stored) = source.register(&policy, schedule.as_ref()).await?;
        if stored.policy != policy {
            return Err(SchedulerError::PolicyMismatch {
                shard: policy.shard_id().to_string(),
            });
        }
        checked_policy(&stored, &executor)?;
        let scheduler = Self {
            source,
            live: RwLock::new(Arc::new(policy)),
            following: tokio::sync::Mutex::new(()),
            executor,
            options,
            registration,
            outcome_records: SchedulerOutcomeRecords::new(),
            selection_metrics: SelectionMetrics::default(),
        };
        if stored.sealed {
            scheduler.follow(stored.policy.shard_id()).await?;
        } else {
            crate::metrics::publish_bounds(&scheduler.policy());
            // A replica started on a successor marks its predecessor sealed
            // too, so alerts on reservation rates ignore it also when no
            // replica ever followed the seal.
            if let Some(predecessor) = &stored.predecessor {
                metrics::gauge!(
                    crate::metrics::SHARD_SEALED,
                    "shard" => predecessor.to_string()
                )
                .set(1.0);
            }
        }
        // Every series an alert reads exists from here on, at 0.
        crate::metrics::zero_series(&scheduler.policy());
        Ok(scheduler)
    }

    /// The policy of the shard the scheduler ticks now: the live shard of
    /// its schedule as far as this replica has seen (it changes when a
    /// reservation meets a seal).
    pub fn policy(&self) -> Arc<WeightedFairnessPolicy> {
        Arc::clone(
            &self
                .live
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Follows the chain from `sealed` (the shard a reservation found
    /// sealed) to the live shard, unless another task already moved this
    /// replica past it: loads each successor fail-closed (decoded, digest
    /// and cycle checked, its predecessor named, the stored seam bounds
    /// equal to the recomputed ones) and makes the last one live.
    async fn follow(&self, sealed: &SchedulerShardId) -> Result<(), SchedulerError> {
        let _one_at_a_time = self.following.lock().await;
        let mut from = self.policy();
        if from.shard_id() != sealed {
            // Another task followed this seal already.
            return Ok(());
        }
        for _ in 0..MAX_FOLLOWED_SEALS {
            let Some(seam) = self.source.successor(from.shard_id()).await? else {
                break;
            };
            let next = Arc::new(checked_policy(&seam.successor, &self.executor)?);
            for bound in &seam.seam {
                metrics::gauge!(
                    crate::metrics::SEAM_BOUND_RESERVATIONS,
                    "shard" => next.shard_id().to_string(),
                    "tenant" => bound.tenant().to_string()
                )
                .set(bound.reservations_across_seam() as f64);
            }
            tracing::info!(
                sealed = %from.shard_id(),
                successor = %next.shard_id(),
                sealed_at_sequence = seam.sealed_at_sequence,
                "the shard is sealed: following the rollout to its successor"
            );
            metrics::gauge!(
                crate::metrics::SHARD_SEALED,
                "shard" => from.shard_id().to_string()
            )
            .set(1.0);
            crate::metrics::publish_bounds(&next);
            crate::metrics::zero_series(&next);
            *self
                .live
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&next);
            from = next;
        }
        Ok(())
    }

    /// How registration went (`Registered` for the first replica,
    /// `Idempotent` for the others).
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The executor.
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// The reservation source (for a [`PgScheduler`] also its `store()`).
    pub fn source(&self) -> &R {
        &self.source
    }

    /// One tick: reserve the next slot with a new UUIDv7, retrying transient
    /// store errors with the same id (bounded exponential backoff), map the
    /// slot to its tenant, and run one executor tick for that tenant.
    ///
    /// The reservation is consumed whatever the executor finds: an idle or
    /// contended queue still uses its slot, and slots are never handed to a
    /// busy tenant or rolled back.
    ///
    /// # Errors
    /// [`SchedulerError::ShuttingDown`] if `shutdown` fired before a slot was
    /// reserved; [`SchedulerError::Source`] when reserving failed for good
    /// (with the retries made); [`SchedulerError::Executor`] when the
    /// executor failed for the reserved slot.
    pub async fn tick(&self, shutdown: &CancellationToken) -> Result<TickOutcome, SchedulerError> {
        if shutdown.is_cancelled() {
            return Err(SchedulerError::ShuttingDown);
        }
        let span = self.tick_span();
        let result = tracing::Instrument::instrument(self.tick_inner(shutdown), span.clone()).await;
        if let Ok(outcome) = &result {
            span.record("outcome", outcome.tenant_outcome().label());
        }
        if let Err(e) = &result {
            self.count_error(e);
        }
        result
    }

    /// The `tick` span of one slot: shard now, sequence, slot, tenant and
    /// outcome recorded as they become known.
    fn tick_span(&self) -> tracing::Span {
        tracing::info_span!(
            "tick",
            shard = tracing::field::Empty,
            sequence = tracing::field::Empty,
            slot = tracing::field::Empty,
            tenant = tracing::field::Empty,
            outcome = tracing::field::Empty,
        )
    }

    /// Counts a failed tick in `statek_tick_errors_total` by kind.
    fn count_error(&self, e: &SchedulerError) {
        let kind = match e {
            SchedulerError::ShuttingDown => None,
            SchedulerError::Source { source, .. }
                if source.kind() == SourceErrorKind::PolicyConflict =>
            {
                Some("policy_conflict")
            }
            SchedulerError::PolicyMismatch { .. } | SchedulerError::CycleMismatch(_) => {
                Some("policy_conflict")
            }
            SchedulerError::Source { source, .. } if source.is_corrupt() => Some("corrupt_data"),
            #[cfg(feature = "postgres")]
            SchedulerError::Store {
                source: StoreError::CorruptData { .. },
                ..
            } => Some("corrupt_data"),
            SchedulerError::SlotOutOfRange { .. } => Some("corrupt_data"),
            SchedulerError::Executor { .. } => Some("executor"),
            _ => Some("store"),
        };
        if let Some(kind) = kind {
            metrics::counter!(
                crate::metrics::TICK_ERRORS_TOTAL,
                "shard" => self.policy().shard_id().to_string(),
                "kind" => kind
            )
            .increment(1);
        }
    }

    async fn tick_inner(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<TickOutcome, SchedulerError> {
        let (reservation, retries, policy) = self.reserve().await?;
        if policy.fairness().cost().is_some() {
            // Cost mode (the shard the slot was reserved on, after any
            // seal it followed): the executor's ledger decides each slot
            // in its batch entry point, so a tick is a batch of one.
            let mut results = self
                .run_batch_of(vec![reservation], retries, &policy, shutdown, shutdown)
                .await;
            return results.pop().unwrap_or(Err(SchedulerError::ShuttingDown));
        }
        let sequence = reservation.sequence();
        let result = self.run_slot(&policy, reservation, retries, shutdown).await;
        // A cancelled tick may have claimed a run first: left unrecorded.
        if let Some(outcome) = result
            .as_ref()
            .ok()
            .filter(|o| o.tenant_outcome != TenantTickOutcome::Cancelled)
        {
            let outcomes = std::iter::once(outcome.tenant_outcome.slot_class()).collect();
            self.record_outcomes(policy.shard_id(), sequence, outcomes, false)
                .await;
        }
        result
    }

    /// Reserves `k` contiguous slots in one statement (one range row, one
    /// round trip and one cursor lock instead of `k`), then hands them to
    /// the executor's batch entry point
    /// ([`TenantExecutor::execute_batch`]) with `k` execution permits:
    /// claims are made in sequence order and the claimed runs' handlers
    /// execute concurrently, so no run waits for another run of its batch
    /// to finish. Bounds are counted in reservations, so they do not
    /// change. `k` is
    /// 1..=[`MAX_RESERVATION_BATCH`](statek_core::MAX_RESERVATION_BATCH).
    ///
    /// `shutdown` both stops the batch and cancels running handlers; see
    /// [`tick_batch_until`](Self::tick_batch_until) to separate the two.
    ///
    /// # Errors
    /// The outer error: the batch could not be reserved (as for
    /// [`tick`](Self::tick)); nothing was run. Otherwise one result per
    /// reserved slot, in sequence order: an executor error for one slot
    /// does not stop the slots after it.
    pub async fn tick_batch(
        &self,
        k: u32,
        shutdown: &CancellationToken,
    ) -> Result<Vec<Result<TickOutcome, SchedulerError>>, SchedulerError> {
        self.tick_batch_until(k, shutdown, shutdown).await
    }

    /// [`tick_batch`](Self::tick_batch) with two tokens: once `stop` fires,
    /// no further slot of the batch is claimed for (the remaining reserved
    /// slots are consumed unused and reported as
    /// [`TenantTickOutcome::Cancelled`], as slots are never handed back);
    /// `cancel` is what running handlers see.
    ///
    /// # Errors
    /// As [`tick_batch`](Self::tick_batch); [`SchedulerError::ShuttingDown`]
    /// if `stop` fired before the batch was reserved.
    pub async fn tick_batch_until(
        &self,
        k: u32,
        stop: &CancellationToken,
        cancel: &CancellationToken,
    ) -> Result<Vec<Result<TickOutcome, SchedulerError>>, SchedulerError> {
        if stop.is_cancelled() {
            return Err(SchedulerError::ShuttingDown);
        }
        let (batch, retries, policy) = match self.reserve_batch(k).await {
            Ok(reserved) => reserved,
            Err(e) => {
                self.count_error(&e);
                return Err(e);
            }
        };
        Ok(self
            .run_batch_of(batch, retries, &policy, stop, cancel)
            .await)
    }

    /// Runs reserved slots of `policy`'s shard through the executor's batch
    /// entry point and records their outcome classes: one result per slot.
    async fn run_batch_of(
        &self,
        batch: Vec<Reservation>,
        retries: u32,
        policy: &Arc<WeightedFairnessPolicy>,
        stop: &CancellationToken,
        cancel: &CancellationToken,
    ) -> Vec<Result<TickOutcome, SchedulerError>> {
        let pool = RunPool::new(batch.len());
        let results: Mutex<Vec<Option<Result<TickOutcome, SchedulerError>>>> =
            Mutex::new((0..batch.len()).map(|_| None).collect());
        let sink = |index: usize, result: Result<TickOutcome, SchedulerError>| {
            if let Some(place) = lock(&results).get_mut(index) {
                *place = Some(result);
            }
        };
        if let Some((first, outcomes)) = self
            .run_reserved_batch(
                ReservedBatch {
                    policy,
                    reservations: batch,
                    retries,
                    pool: &pool,
                },
                BatchHooks {
                    stop,
                    cancel,
                    sink: &sink,
                    unclaimed: None,
                    on_decided: &|_| {},
                },
            )
            .await
        {
            self.record_outcomes(policy.shard_id(), first, outcomes, false)
                .await;
        }
        results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Records the outcome classes of the reserved range of `shard` that
    /// starts at `first_sequence` ([`SchedulerOutcomeRecords::record`]).
    pub(crate) async fn record_outcomes(
        &self,
        shard: &SchedulerShardId,
        first_sequence: u64,
        outcomes: statek_core::SlotOutcomes,
        from_worker: bool,
    ) {
        self.outcome_records
            .record(
                &self.source,
                (shard.clone(), first_sequence, outcomes),
                from_worker,
            )
            .await;
    }

    /// Counts one slot in the per-tenant selection metrics.
    fn count_selection(
        &self,
        policy: &WeightedFairnessPolicy,
        tenant: &TenantId,
        tenant_outcome: &TenantTickOutcome,
    ) {
        self.selection_metrics.count(policy, tenant, tenant_outcome);
    }

    /// Maps a reserved slot to its tenant and runs one executor tick for it.
    async fn run_slot(
        &self,
        policy: &WeightedFairnessPolicy,
        reservation: Reservation,
        retries: u32,
        shutdown: &CancellationToken,
    ) -> Result<TickOutcome, SchedulerError> {
        let sequence = reservation.sequence();
        let slot = reservation.slot();
        let span = tracing::Span::current();
        span.record("shard", tracing::field::display(policy.shard_id()));
        span.record("sequence", sequence);
        span.record("slot", slot);
        let (tenant, starvation_bound) = tenant_of(policy, &reservation, retries)?;
        span.record("tenant", tracing::field::display(&tenant));
        let result = self.executor.execute_one(&tenant, shutdown).await;
        self.slot_result(
            policy,
            reservation,
            tenant,
            starvation_bound,
            retries,
            result,
        )
    }

    /// A slot's result from its executor's: the executor's error as
    /// [`SchedulerError::Executor`], or the outcome, counted in the
    /// metrics and logged.
    fn slot_result(
        &self,
        policy: &WeightedFairnessPolicy,
        reservation: Reservation,
        tenant: TenantId,
        starvation_bound: TenantStarvationBound,
        retries: u32,
        result: Result<TenantTickOutcome, E::Error>,
    ) -> Result<TickOutcome, SchedulerError> {
        let sequence = reservation.sequence();
        let tenant_outcome = result.map_err(|e| SchedulerError::Executor {
            sequence,
            tenant: tenant.clone(),
            retryable: E::is_retryable(&e),
            source: Box::new(e),
        })?;
        self.count_selection(policy, &tenant, &tenant_outcome);
        tracing::debug!(
            shard = %policy.shard_id(),
            sequence,
            slot = reservation.slot(),
            tenant = %tenant,
            outcome = tenant_outcome.label(),
            retries,
            "tick"
        );
        Ok(TickOutcome {
            reservation,
            tenant,
            starvation_bound,
            retries,
            tenant_outcome,
        })
    }

    /// Reserves one slot on the live shard, following the chain when the
    /// shard turns out sealed (a new id on the successor: nothing was
    /// written on the sealed shard). Returns the policy it was reserved on.
    async fn reserve(
        &self,
    ) -> Result<(Reservation, u32, Arc<WeightedFairnessPolicy>), SchedulerError> {
        self.on_live_shard(|policy| async move {
            let id = Uuid::now_v7();
            let digest = policy.digest();
            with_retries(&self.options, policy.shard_id(), id, 1, || {
                self.source.reserve(policy.shard_id(), &digest, id)
            })
            .await
        })
        .await
    }

    /// Runs `reserve` against the live shard; a `ShardSealed` answer makes
    /// the scheduler follow the chain and run it again on the successor.
    async fn on_live_shard<T, F, Fut>(
        &self,
        reserve: F,
    ) -> Result<(T, u32, Arc<WeightedFairnessPolicy>), SchedulerError>
    where
        F: Fn(Arc<WeightedFairnessPolicy>) -> Fut,
        Fut: std::future::Future<Output = Result<(T, u32), SchedulerError>>,
    {
        for _ in 0..MAX_FOLLOWED_SEALS {
            let policy = self.policy();
            match reserve(Arc::clone(&policy)).await {
                Ok((value, retries)) => return Ok((value, retries, policy)),
                Err(SchedulerError::Source { source, .. })
                    if source.kind() == SourceErrorKind::ShardSealed =>
                {
                    self.follow(policy.shard_id()).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(SchedulerError::corrupt(
            "shard chain",
            format!(
                "still meeting seals after following {MAX_FOLLOWED_SEALS} of them from shard {}",
                self.policy().shard_id()
            ),
            0,
        ))
    }

    /// Reserves a batch of `k` slots for the Worker under batch id `id`
    /// (retried like [`tick`](Self::tick)'s reservation; the Worker passes
    /// the same id again after a failed round), counting a failure in
    /// `statek_tick_errors_total`.
    pub(crate) async fn reserve_batch_counted(
        &self,
        id: Uuid,
        k: u32,
    ) -> Result<(Vec<Reservation>, u32, Arc<WeightedFairnessPolicy>), SchedulerError> {
        let reserved = self.reserve_batch_as(id, k).await;
        if let Err(e) = &reserved {
            self.count_error(e);
        }
        reserved
    }

    async fn reserve_batch(
        &self,
        k: u32,
    ) -> Result<(Vec<Reservation>, u32, Arc<WeightedFairnessPolicy>), SchedulerError> {
        self.reserve_batch_as(Uuid::now_v7(), k).await
    }

    /// A batch of `k` slots on the live shard under batch id `id`; after
    /// following a seal the successor gets a fresh id (nothing was written
    /// on the sealed shard).
    async fn reserve_batch_as(
        &self,
        id: Uuid,
        k: u32,
    ) -> Result<(Vec<Reservation>, u32, Arc<WeightedFairnessPolicy>), SchedulerError> {
        let first_shard = self.policy().shard_id().clone();
        self.on_live_shard(|policy| {
            let id = if *policy.shard_id() == first_shard {
                id
            } else {
                Uuid::now_v7()
            };
            async move {
                let digest = policy.digest();
                with_retries(&self.options, policy.shard_id(), id, u64::from(k), || {
                    self.source.reserve_batch(policy.shard_id(), &digest, id, k)
                })
                .await
            }
        })
        .await
    }
}

/// A [`DurableFairScheduler`] reserving in PostgreSQL (feature
/// `postgres`).
#[cfg(feature = "postgres")]
pub type PgScheduler<E> = DurableFairScheduler<E, PgStore>;

#[cfg(feature = "postgres")]
impl<E> DurableFairScheduler<E, PgStore> {
    /// The store (a scheduler reserving in PostgreSQL).
    pub fn store(&self) -> &PgStore {
        &self.source
    }
}

/// Refuses a policy this scheduler cannot enforce: one that shares cost,
/// with an executor that keeps no ledger
/// ([`TenantExecutor::enforces_cost_fairness`]).
fn supported<E: TenantExecutor>(
    policy: &WeightedFairnessPolicy,
    executor: &E,
) -> Result<(), SchedulerError> {
    match policy.fairness() {
        FairnessUnit::Slots => Ok(()),
        FairnessUnit::Cost(_) if executor.enforces_cost_fairness() => Ok(()),
        FairnessUnit::Cost(_) => Err(SchedulerError::UnsupportedFairness {
            shard: policy.shard_id().to_string(),
        }),
    }
}

/// A source's shard's policy, after checking that it shares slots and
/// that this replica compiles the cycle the shard was registered with
/// ([`check_cycle_digest`]).
fn checked_policy<E: TenantExecutor>(
    shard: &SourceShard,
    executor: &E,
) -> Result<WeightedFairnessPolicy, SchedulerError> {
    let policy = &shard.policy;
    supported(policy, executor)?;
    if check_cycle_digest(policy, shard.cycle_digest)? == CycleCheck::NotStored {
        tracing::warn!(
            shard = %policy.shard_id(),
            "shard registered before cycle digests were stored: this replica's cycle is not checked against it"
        );
    }
    Ok(policy.clone())
}
