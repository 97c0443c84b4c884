//! [`DurableFairScheduler`]: register, then tick.

use std::sync::Arc;

use statek_policy::{PolicyDigest, TenantId, TenantStarvationBound, WeightedFairnessPolicy};
use statek_store_pg::{PgStore, Registration, Reservation, ReservationBatch, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::executor::{TenantExecutor, TenantTickOutcome};
use crate::{SchedulerError, SchedulerOptions};

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickOutcome {
    reservation: Reservation,
    tenant: TenantId,
    starvation_bound: TenantStarvationBound,
    retries: u32,
    tenant_outcome: TenantTickOutcome,
}

impl TickOutcome {
    /// The reservation (id, sequence, slot, reserved_at) this tick consumed.
    pub fn reservation(&self) -> &Reservation {
        &self.reservation
    }

    /// The tenant the slot belongs to.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The tenant's starvation bound under the shard's policy (reservations).
    pub fn starvation_bound(&self) -> &TenantStarvationBound {
        &self.starvation_bound
    }

    /// Reservation retries after transient store errors (0 when the first
    /// attempt succeeded).
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// What the tenant's executor did with the slot.
    pub fn tenant_outcome(&self) -> &TenantTickOutcome {
        &self.tenant_outcome
    }
}

/// A scheduler replica for one shard: every [`tick`](Self::tick) reserves
/// the shard's next global slot in PostgreSQL, maps it to exactly one tenant
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
#[derive(Debug)]
pub struct DurableFairScheduler<E> {
    store: PgStore,
    policy: Arc<WeightedFairnessPolicy>,
    digest: PolicyDigest,
    executor: E,
    options: SchedulerOptions,
    registration: Registration,
}

impl<E: TenantExecutor> DurableFairScheduler<E> {
    /// Registers `policy` for its shard (or verifies that the shard already
    /// holds byte-identical canonical bytes), reads the stored policy back
    /// fail-closed, and returns a scheduler ready to tick. No run is claimed
    /// before this succeeds.
    ///
    /// # Errors
    /// [`SchedulerError::Store`] with `PolicyConflict` when the shard is bound
    /// to another policy (never overwritten), `CorruptData` when the stored
    /// row fails its checks, or connection errors;
    /// [`SchedulerError::PolicyMismatch`] if the stored policy read back
    /// differs; [`SchedulerError::CycleMismatch`] if the shard's stored
    /// cycle digest is not the digest of this replica's compiled cycle
    /// (shards registered before migration V6 store none and are not
    /// checked).
    pub async fn register(
        store: PgStore,
        policy: WeightedFairnessPolicy,
        executor: E,
        options: SchedulerOptions,
    ) -> Result<Self, SchedulerError> {
        let registration = store.register(&policy).await?;
        let stored = store.load_shard(policy.shard_id()).await?;
        if stored.policy() != &policy {
            return Err(SchedulerError::PolicyMismatch {
                shard: policy.shard_id().to_string(),
            });
        }
        match stored.cycle_digest() {
            Some(stored_digest) if stored_digest != policy.cycle_digest() => {
                return Err(SchedulerError::CycleMismatch {
                    shard: policy.shard_id().to_string(),
                    stored: stored_digest,
                    local: policy.cycle_digest(),
                });
            }
            Some(_) => {}
            None => tracing::warn!(
                shard = %policy.shard_id(),
                "shard registered before cycle digests were stored: this replica's cycle is not checked against it"
            ),
        }
        let digest = policy.digest();
        for bound in policy.starvation_bounds() {
            metrics::gauge!(
                crate::metrics::STARVATION_BOUND_RESERVATIONS,
                "shard" => policy.shard_id().to_string(),
                "tenant" => bound.tenant().to_string()
            )
            .set(f64::from(bound.maximum_reservations_until_selection()));
        }
        Ok(Self {
            store,
            policy: Arc::new(policy),
            digest,
            executor,
            options,
            registration,
        })
    }

    /// The shard's policy.
    pub fn policy(&self) -> &WeightedFairnessPolicy {
        &self.policy
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

    /// The store.
    pub fn store(&self) -> &PgStore {
        &self.store
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
    /// reserved; [`SchedulerError::Store`] when reserving failed for good
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
            shard = %self.policy.shard_id(),
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
            SchedulerError::Store {
                source: StoreError::PolicyConflict { .. } | StoreError::PolicyDigestMismatch { .. },
                ..
            }
            | SchedulerError::PolicyMismatch { .. }
            | SchedulerError::CycleMismatch { .. } => Some("policy_conflict"),
            SchedulerError::Store {
                source: StoreError::CorruptData { .. },
                ..
            }
            | SchedulerError::SlotOutOfRange { .. } => Some("corrupt_data"),
            SchedulerError::Executor { .. } => Some("executor"),
            _ => Some("store"),
        };
        if let Some(kind) = kind {
            metrics::counter!(
                crate::metrics::TICK_ERRORS_TOTAL,
                "shard" => self.policy.shard_id().to_string(),
                "kind" => kind
            )
            .increment(1);
        }
    }

    async fn tick_inner(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<TickOutcome, SchedulerError> {
        let (reservation, retries) = self.reserve().await?;
        self.run_slot(reservation, retries, shutdown).await
    }

    /// Reserves `k` contiguous slots in one statement (one round trip and
    /// one cursor lock instead of `k`), then runs their tenant ticks one
    /// after the other in sequence order, exactly as `k` calls of
    /// [`tick`](Self::tick) would. Bounds are counted in reservations, so
    /// they do not change; the tenant of a later slot in the batch just
    /// waits for the earlier slots' ticks. `k` is
    /// 1..=[`MAX_RESERVATION_BATCH`](statek_store_pg::MAX_RESERVATION_BATCH).
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
    /// no further slot of the batch is run (the remaining reserved slots are
    /// consumed unused and reported as [`TenantTickOutcome::Cancelled`], as
    /// slots are never handed back); `cancel` is what running handlers see
    /// (the `Worker` passes its graceful stop and its hard deadline).
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
        let (batch, retries) = match self.reserve_batch(k).await {
            Ok(reserved) => reserved,
            Err(e) => {
                self.count_error(&e);
                return Err(e);
            }
        };
        let mut results = Vec::with_capacity(batch.len());
        for reservation in batch.into_reservations() {
            let span = self.tick_span();
            let result = if stop.is_cancelled() {
                self.consume_unused(reservation, retries)
            } else {
                tracing::Instrument::instrument(
                    self.run_slot(reservation, retries, cancel),
                    span.clone(),
                )
                .await
            };
            match &result {
                Ok(outcome) => {
                    span.record("outcome", outcome.tenant_outcome().label());
                }
                Err(e) => self.count_error(e),
            }
            results.push(result);
        }
        Ok(results)
    }

    /// A reserved slot given up at shutdown: its tenant is not run.
    fn consume_unused(
        &self,
        reservation: Reservation,
        retries: u32,
    ) -> Result<TickOutcome, SchedulerError> {
        let (tenant, starvation_bound) = self.tenant_of(&reservation, retries)?;
        let tenant_outcome = TenantTickOutcome::Cancelled;
        self.count_selection(&tenant, &tenant_outcome);
        Ok(TickOutcome {
            reservation,
            tenant,
            starvation_bound,
            retries,
            tenant_outcome,
        })
    }

    /// Counts a slot mapped to `tenant` and its outcome (and the service
    /// lag of a claimed run).
    fn count_selection(&self, tenant: &TenantId, tenant_outcome: &TenantTickOutcome) {
        let shard_label = self.policy.shard_id().to_string();
        metrics::counter!(
            crate::metrics::SELECTIONS_TOTAL,
            "shard" => shard_label.clone(),
            "tenant" => tenant.to_string()
        )
        .increment(1);
        metrics::counter!(
            crate::metrics::TICK_OUTCOMES_TOTAL,
            "shard" => shard_label.clone(),
            "tenant" => tenant.to_string(),
            "outcome" => tenant_outcome.label()
        )
        .increment(1);
        if let TenantTickOutcome::Executed(run) | TenantTickOutcome::ExecutionFailed { run, .. } =
            &tenant_outcome
        {
            let lag = run
                .claimed_at
                .duration_since(run.available_at)
                .unwrap_or_default();
            metrics::histogram!(
                crate::metrics::SERVICE_LAG_SECONDS,
                "shard" => shard_label,
                "tenant" => tenant.to_string()
            )
            .record(lag.as_secs_f64());
        }
    }

    /// The tenant and bound of a reserved slot, after checking, fail-closed,
    /// that the stored cycle agrees with the local one.
    fn tenant_of(
        &self,
        reservation: &Reservation,
        retries: u32,
    ) -> Result<(TenantId, TenantStarvationBound), SchedulerError> {
        let sequence = reservation.sequence();
        let slot = reservation.slot();
        let local_length = self.policy.cycle_length();
        if reservation.cycle_length() != local_length
            || u64::from(slot) != sequence % u64::from(local_length)
        {
            // Fail closed: never run a tenant for a slot the local cycle
            // does not agree with.
            return Err(SchedulerError::Store {
                source: StoreError::CorruptData {
                    what: "reservation",
                    detail: format!(
                        "sequence {sequence} slot {slot} under stored L = {} disagrees with the local cycle L = {local_length}",
                        reservation.cycle_length()
                    ),
                },
                retries,
            });
        }
        self.policy
            .tenant_for_slot(u64::from(slot))
            .and_then(|t| Some((t.clone(), self.policy.starvation_bound(t)?)))
            .ok_or(SchedulerError::SlotOutOfRange { sequence, slot })
    }

    /// Maps a reserved slot to its tenant and runs one executor tick for it.
    async fn run_slot(
        &self,
        reservation: Reservation,
        retries: u32,
        shutdown: &CancellationToken,
    ) -> Result<TickOutcome, SchedulerError> {
        let sequence = reservation.sequence();
        let slot = reservation.slot();
        let span = tracing::Span::current();
        span.record("sequence", sequence);
        span.record("slot", slot);
        let (tenant, starvation_bound) = self.tenant_of(&reservation, retries)?;
        span.record("tenant", tracing::field::display(&tenant));
        let tenant_outcome = self
            .executor
            .execute_one(&tenant, shutdown)
            .await
            .map_err(|e| SchedulerError::Executor {
                sequence,
                tenant: tenant.clone(),
                retryable: E::is_retryable(&e),
                source: Box::new(e),
            })?;
        self.count_selection(&tenant, &tenant_outcome);
        tracing::debug!(
            shard = %self.policy.shard_id(),
            sequence,
            slot,
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

    async fn reserve(&self) -> Result<(Reservation, u32), SchedulerError> {
        let id = Uuid::now_v7();
        let shard = self.policy.shard_id();
        self.with_retries(id, 1, || self.store.reserve(shard, &self.digest, id))
            .await
    }

    async fn reserve_batch(&self, k: u32) -> Result<(ReservationBatch, u32), SchedulerError> {
        let id = Uuid::now_v7();
        let shard = self.policy.shard_id();
        self.with_retries(id, u64::from(k), || {
            self.store.reserve_batch(shard, &self.digest, id, k)
        })
        .await
    }

    /// Runs one reservation call (single or batch, keyed by `id`), retrying
    /// transient errors with the same id and bounded backoff; counts
    /// `reservations` reservations and the call's latency on success.
    async fn with_retries<T, F, Fut>(
        &self,
        id: Uuid,
        reservations: u64,
        call: F,
    ) -> Result<(T, u32), SchedulerError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let shard = self.policy.shard_id();
        let started = std::time::Instant::now();
        let mut retries = 0;
        loop {
            match call().await {
                Ok(reserved) => {
                    let shard_label = shard.to_string();
                    metrics::counter!(crate::metrics::RESERVATIONS_TOTAL, "shard" => shard_label.clone())
                        .increment(reservations);
                    metrics::histogram!(crate::metrics::RESERVATION_DURATION_SECONDS, "shard" => shard_label)
                        .record(started.elapsed().as_secs_f64());
                    return Ok((reserved, retries));
                }
                Err(e) if e.is_retryable() && retries + 1 < self.options.attempts() => {
                    let backoff = self.options.backoff(retries);
                    tracing::warn!(
                        shard = %shard, reservation_id = %id, retry = retries + 1,
                        backoff_ms = backoff.as_millis() as u64, error = %crate::error::chain(&e),
                        "reservation failed transiently; retrying with the same id"
                    );
                    metrics::counter!(
                        crate::metrics::RESERVATION_RETRIES_TOTAL,
                        "shard" => shard.to_string()
                    )
                    .increment(1);
                    tokio::time::sleep(backoff).await;
                    retries += 1;
                }
                Err(source) => return Err(SchedulerError::Store { source, retries }),
            }
        }
    }
}
