//! The scheduler's batch runner: a reserved batch mapped to its tenants
//! (fail-closed), handed to the executor's
//! [`execute_batch`](statek_core::TenantExecutor::execute_batch) as a
//! [`SlotBatch`], and one result per slot delivered as it arrives. Shared
//! by [`DurableFairScheduler::tick_batch_until`] and the `Worker`.

use std::sync::Mutex;

use statek_core::{BatchSlot, ReservationSource, SlotBatch, SlotResult, TenantExecutor};

use super::{lock, DurableFairScheduler, SlotAbandoned};
use crate::error::SchedulerError;
use crate::reserved_batch::{BatchHooks, ReservedBatch};
use crate::tick_outcome::tenant_of;

impl<E: TenantExecutor, R: ReservationSource> DurableFairScheduler<E, R> {
    /// Runs a [`ReservedBatch`] through [`TenantExecutor::execute_batch`]:
    /// maps every slot to its tenant (fail-closed), lets the executor
    /// claim and run with permits of its pool,
    /// and hands the hooks' `sink` one result per slot, by index in the
    /// batch, as it arrives (counted in the metrics); `on_decided` hears
    /// the number of slots decided each time it grows. Returns when every slot has a result,
    /// with the batch's first sequence and its slots' outcome classes for
    /// the caller to record: `None` (left unrecorded) for a batch that
    /// failed closed, and for one with a slot whose class is not known
    /// for sure (a claim whose answer was lost, an abandoned slot).
    pub(crate) async fn run_reserved_batch(
        &self,
        batch: ReservedBatch<'_>,
        hooks: BatchHooks<'_>,
    ) -> Option<(u64, statek_core::SlotOutcomes)> {
        let ReservedBatch {
            policy,
            reservations,
            retries,
            pool,
        } = batch;
        let BatchHooks {
            stop,
            cancel,
            sink,
            on_decided,
        } = hooks;
        let mut mapped = Vec::with_capacity(reservations.len());
        let mut corrupt = None;
        for (index, reservation) in reservations.iter().enumerate() {
            match tenant_of(policy, reservation, retries) {
                Ok(tenant) => mapped.push(tenant),
                Err(e) => {
                    corrupt = Some((index, e));
                    break;
                }
            }
        }
        if let Some((bad, error)) = corrupt {
            // Fail closed: no slot of a batch the local cycle disagrees
            // with is run.
            on_decided(reservations.len());
            for (index, reservation) in reservations.iter().enumerate() {
                let e = if index == bad {
                    continue;
                } else {
                    SchedulerError::corrupt(
                        "reservation batch",
                        format!(
                            "sequence {} is in a batch whose sequence {} disagrees with the local cycle",
                            reservation.sequence(),
                            reservations[bad].sequence()
                        ),
                        retries,
                    )
                };
                self.count_error(&e);
                sink(index, Err(e));
            }
            self.count_error(&error);
            sink(bad, Err(error));
            return None;
        }
        let slots: Vec<BatchSlot> = reservations
            .iter()
            .zip(&mapped)
            .map(|(r, (tenant, _))| BatchSlot {
                sequence: r.sequence(),
                tenant: tenant.clone(),
            })
            .collect();
        let reported = Mutex::new(vec![false; slots.len()]);
        let deliver = |index: usize, result: SlotResult<E::Error>| {
            let (Some(reservation), Some((tenant, bound))) =
                (reservations.get(index), mapped.get(index))
            else {
                tracing::error!(index, "executor reported a slot outside its batch");
                return;
            };
            if std::mem::replace(&mut lock(&reported)[index], true) {
                tracing::error!(
                    sequence = reservation.sequence(),
                    "executor reported a slot twice; ignored"
                );
                return;
            }
            let result = match result {
                SlotResult::Outcome(outcome) => self.slot_result(
                    policy,
                    reservation.clone(),
                    tenant.clone(),
                    bound.clone(),
                    retries,
                    outcome,
                ),
                SlotResult::Abandoned(reason) => Err(SchedulerError::Executor {
                    sequence: reservation.sequence(),
                    tenant: tenant.clone(),
                    retryable: true,
                    source: Box::new(SlotAbandoned(reason)),
                }),
            };
            if let Err(e) = &result {
                self.count_error(e);
            }
            sink(index, result);
        };
        let span = tracing::info_span!(
            "batch",
            shard = %policy.shard_id(),
            first_sequence = slots.first().map(|s| s.sequence),
            slots = slots.len(),
        );
        let slot_batch = SlotBatch::new(
            policy.shard_id(),
            &slots,
            pool,
            stop,
            cancel,
            &deliver,
            on_decided,
        );
        tracing::Instrument::instrument(self.executor.execute_batch(&slot_batch), span).await;
        let missing: Vec<usize> = lock(&reported)
            .iter()
            .enumerate()
            .filter(|(_, done)| !**done)
            .map(|(i, _)| i)
            .collect();
        for index in missing {
            deliver(
                index,
                SlotResult::Abandoned("the executor returned without reporting this slot".into()),
            );
        }
        on_decided(slots.len());
        let first = slots.first()?;
        let outcomes = slot_batch.outcomes();
        if outcomes.is_none() {
            tracing::debug!(shard = %policy.shard_id(), first_sequence = first.sequence,
                "a slot's class is not known for sure; the range is left unrecorded");
        }
        outcomes.map(|outcomes| (first.sequence, outcomes))
    }
}
