//! The batch protocol of [`crate::SlotBatch`] for an executor that claims
//! for many slots in one statement ([`claim_and_run`]), and what such a
//! claim answers per slot ([`SlotStart`]).

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::batch::{BatchSlot, RunPermit, SlotBatch};
use crate::outcome::{TenantTickOutcome, Unclaimed};
use crate::slot::SlotClass;
use crate::tickets::SlotTickets;

/// What a batch claim found for the next slots: a run to start (with a
/// permit), or slots consumed without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotStart<C> {
    /// A run was claimed for the slot; start it at once (recorded
    /// [`SlotClass::Claimed`]).
    Claimed(C),
    /// `slots` consecutive slots (at least 1) consumed without a claim,
    /// alike: one report for all of them ([`crate::SlotRange`]).
    Unclaimed {
        /// What they found.
        outcome: Unclaimed,
        /// How many consecutive slots.
        slots: usize,
    },
    /// The slot claimed a run, recovered by a retried claim, whose lease
    /// another claimer holds now: consumed without a run (outcome
    /// [`TenantTickOutcome::Contended`]) but recorded
    /// [`SlotClass::Claimed`].
    LeaseLost,
}

impl<C> SlotStart<C> {
    /// One slot consumed without a claim.
    pub fn unclaimed(outcome: Unclaimed) -> Self {
        SlotStart::Unclaimed { outcome, slots: 1 }
    }

    /// How many slots this start decides.
    pub fn slots(&self) -> usize {
        match self {
            SlotStart::Claimed(_) | SlotStart::LeaseLost => 1,
            SlotStart::Unclaimed { slots, .. } => *slots,
        }
    }

    /// Appends this start to `starts`, merged into the last one when both
    /// are unclaimed alike (so a long run of idle slots is one start).
    pub fn push_into(self, starts: &mut Vec<Self>) {
        if let (
            SlotStart::Unclaimed { outcome, slots },
            Some(SlotStart::Unclaimed {
                outcome: last,
                slots: count,
            }),
        ) = (&self, starts.last_mut())
        {
            if outcome == last {
                *count = count.saturating_add(*slots);
                return;
            }
        }
        starts.push(self);
    }
}

/// Attempts of a batch claim that fails transiently, and the first pause.
const CLAIM_ATTEMPTS: u32 = 3;
const CLAIM_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The batch protocol of [`SlotBatch`] for an executor that can claim for
/// many slots at once: take the free permits, `claim` for the undecided
/// slots (borrowed for the batch's life, so its future may keep them; at
/// most one run per permit; it answers a decided prefix of at
/// least one slot, as [`SlotStart`]s), start every claimed run at once
/// through `run` with its permit (`run` drops it when the run's handler
/// has finished, before its outcome is recorded), give unused permits
/// back, and go on until every slot is decided; runs already started keep
/// executing while a later claim of the batch (or its retry pause) is
/// under way. A claim that fails transiently is retried (3 attempts,
/// 50 ms doubling) for the same slots with the same permits, so that an
/// executor can send the same claim again (the PostgreSQL executor then
/// recovers what a claim whose acknowledgement was lost had claimed, by
/// its tokens); one that fails for good, or answers no slot or more slots
/// than asked, abandons the rest of the batch
/// ([`SlotTickets::abandon_rest`]).
pub async fn claim_and_run<'a, E, C, CF, CFut, RF, RFut>(
    batch: SlotBatch<'a, E>,
    mut tickets: SlotTickets<'a, E>,
    is_retryable: fn(&E) -> bool,
    claim: CF,
    run: RF,
) where
    E: std::fmt::Display,
    CF: Fn(&'a [BatchSlot], usize) -> CFut,
    CFut: std::future::Future<Output = Result<Vec<SlotStart<C>>, E>>,
    RF: Fn(C, Option<RunPermit>) -> RFut,
    RFut: std::future::Future<Output = Result<TenantTickOutcome, E>>,
{
    let mut running = FuturesUnordered::new();
    let mut failures = 0;
    // The permits of a claim that failed transiently, kept for its retry:
    // the retry claims for the same slots with as many permits, so that
    // the runs an earlier attempt claimed (recovered by the retry) each
    // have one.
    let mut kept: Option<Vec<RunPermit>> = None;
    while !tickets.is_empty() {
        let permits = match kept.take() {
            Some(permits) if !batch.is_stopping() => Some(permits),
            Some(_) => None,
            None => tokio::select! {
                biased;
                Some(()) = running.next(), if !running.is_empty() => continue,
                permits = batch.permits(tickets.len()) => permits,
            },
        };
        let Some(mut permits) = permits else {
            break;
        };
        // The runs already started keep executing while the claim is under
        // way (a slow statement, a lock wait): none waits for a claim.
        let claimed = beside_running(&mut running, claim(tickets.remaining(), permits.len())).await;
        let decided = match claimed {
            Ok(decided) => decided,
            Err(e) if is_retryable(&e) && failures + 1 < CLAIM_ATTEMPTS => {
                // Its answer is lost; the attempt may still be running on
                // the server and claim after the retry answered.
                batch.mark_uncertain();
                tracing::warn!(error = %e, retry = failures + 1, "batch claim failed transiently; retrying");
                kept = Some(permits);
                let pause = CLAIM_PAUSE * 2u32.pow(failures);
                failures += 1;
                let pausing = async {
                    tokio::select! {
                        biased;
                        () = batch.stopping() => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                };
                beside_running(&mut running, pausing).await;
                continue;
            }
            Err(e) => {
                tickets.abandon_rest(&e.to_string());
                break;
            }
        };
        let answered: usize = decided.iter().map(SlotStart::slots).sum();
        if answered == 0 || answered > tickets.len() {
            tickets.abandon_rest(&format!(
                "the batch claim answered {answered} of {} slots",
                tickets.len()
            ));
            break;
        }
        failures = 0;
        for start in decided {
            match start {
                SlotStart::Unclaimed { outcome, slots } => {
                    if let Some(range) = tickets.range(slots) {
                        range.report(outcome);
                    }
                }
                SlotStart::LeaseLost => {
                    if let Some(ticket) = tickets.ticket() {
                        ticket.classify(SlotClass::Claimed);
                        ticket.report(Ok(TenantTickOutcome::Contended));
                    }
                }
                SlotStart::Claimed(claimed) => {
                    let Some(ticket) = tickets.ticket() else {
                        break;
                    };
                    ticket.classify(SlotClass::Claimed);
                    // At most one run per permit: a claim that answered
                    // more runs than it was given permits (an executor's
                    // bug) has its extra runs wait for a permit of the
                    // pool; they start without one only on a stopping
                    // replica, so a claimed run is never left unrun.
                    let permit = match permits.pop() {
                        Some(permit) => Some(permit),
                        None => {
                            tracing::warn!(
                                sequence = ticket.slot().sequence,
                                "the batch claim answered more runs than permits; waiting for one"
                            );
                            // The runs started meanwhile keep running
                            // (they hold the permits it waits for).
                            beside_running(&mut running, batch.permits(1))
                                .await
                                .and_then(|mut held| held.pop())
                        }
                    };
                    let started = run(claimed, permit);
                    running.push(async move {
                        ticket.report(started.await);
                    });
                }
            }
        }
        batch.decided(tickets.issued());
        drop(permits);
    }
    tickets.cancel_rest();
    while running.next().await.is_some() {}
}

/// Runs `future` to its end while the runs already started keep
/// executing beside it: no run waits for a claim, a retry pause or a
/// permit. `future` is polled first.
async fn beside_running<F, R>(running: &mut FuturesUnordered<R>, future: F) -> F::Output
where
    F: std::future::Future,
    R: std::future::Future<Output = ()>,
{
    tokio::pin!(future);
    loop {
        tokio::select! {
            biased;
            output = &mut future => return output,
            Some(()) = running.next(), if !running.is_empty() => {}
        }
    }
}
