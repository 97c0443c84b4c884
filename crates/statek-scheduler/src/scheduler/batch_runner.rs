//! The scheduler's batch runner: a reserved batch mapped to its tenants
//! (fail-closed), handed to the executor's
//! [`execute_batch`](statek_core::TenantExecutor::execute_batch) as a
//! [`SlotBatch`], and one result per slot delivered as it arrives. Shared
//! by [`DurableFairScheduler::tick_batch_until`] and the `Worker`.

use statek_core::{
    BatchParts, BatchSlot, BatchState, ReservationSource, SlotBatch, SlotReport, TenantExecutor,
    TenantTickOutcome,
};

use super::{DurableFairScheduler, SlotAbandoned};
use crate::error::SchedulerError;
use crate::reserved_batch::{BatchHooks, ReservedBatch};
use crate::tick_outcome::{tenant_of, TickOutcome};

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
            unclaimed,
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
        // One result per slot: a range report (slots decided alike
        // without a claim, or abandoned) is one call here, handed on per
        // slot.
        let result_of = |index: usize, outcome: Result<TenantTickOutcome, E::Error>| {
            let (Some(reservation), Some((tenant, bound))) =
                (reservations.get(index), mapped.get(index))
            else {
                return None;
            };
            Some(self.slot_result(
                policy,
                reservation.clone(),
                tenant.clone(),
                bound.clone(),
                retries,
                outcome,
            ))
        };
        let hand_on = |index: usize, result: Result<TickOutcome, SchedulerError>| {
            if let Err(e) = &result {
                self.count_error(e);
            }
            sink(index, result);
        };
        let deliver = |report: SlotReport<E::Error>| match report {
            SlotReport::One { index, outcome } => {
                if let Some(result) = result_of(index, outcome) {
                    hand_on(index, result);
                }
            }
            SlotReport::Unclaimed { indexes, outcome } => match unclaimed {
                Some(unclaimed) => {
                    let outcome = outcome.outcome();
                    let mapped = mapped.get(indexes.clone()).unwrap_or_default();
                    for (tenant, _) in mapped {
                        self.count_selection(policy, tenant, &outcome);
                    }
                    tracing::debug!(shard = %policy.shard_id(),
                        first_sequence = reservations.get(indexes.start).map(|r| r.sequence()),
                        slots = mapped.len(), outcome = outcome.label(), "ticks without a claim");
                    unclaimed(mapped.len(), &outcome);
                }
                None => {
                    for index in indexes {
                        if let Some(result) = result_of(index, Ok(outcome.outcome())) {
                            hand_on(index, result);
                        }
                    }
                }
            },
            SlotReport::Abandoned { indexes, reason } => {
                for index in indexes {
                    if let (Some(reservation), Some((tenant, _))) =
                        (reservations.get(index), mapped.get(index))
                    {
                        hand_on(
                            index,
                            Err(SchedulerError::Executor {
                                sequence: reservation.sequence(),
                                tenant: tenant.clone(),
                                retryable: true,
                                source: Box::new(SlotAbandoned(reason.clone())),
                            }),
                        );
                    }
                }
            }
        };
        let span = tracing::info_span!(
            "batch",
            shard = %policy.shard_id(),
            first_sequence = slots.first().map(|s| s.sequence),
            slots = slots.len(),
        );
        let fairness = policy.fairness();
        let mut state = BatchState::new();
        let (slot_batch, tickets) = SlotBatch::new(
            BatchParts {
                shard: policy.shard_id(),
                fairness: &fairness,
                slots: &slots,
                pool,
                stop,
                cancel,
                sink: &deliver,
                on_decided,
            },
            &mut state,
        );
        tracing::Instrument::instrument(self.executor.execute_batch(slot_batch, tickets), span)
            .await;
        if state.reported() < slots.len() {
            // Only a leaked ticket (`std::mem::forget`) reports nothing.
            tracing::error!(
                shard = %policy.shard_id(),
                first_sequence = slots.first().map(|s| s.sequence),
                unreported = slots.len() - state.reported(),
                "the executor leaked slot tickets: those slots have no outcome; the range is left unrecorded"
            );
            state.mark_uncertain();
        }
        on_decided(slots.len());
        let first = slots.first()?;
        let outcomes = state.outcomes();
        if outcomes.is_none() {
            tracing::debug!(shard = %policy.shard_id(), first_sequence = first.sequence,
                "a slot's class is not known for sure; the range is left unrecorded");
        }
        outcomes.map(|outcomes| (first.sequence, outcomes))
    }
}
