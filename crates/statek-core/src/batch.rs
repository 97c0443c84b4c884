//! A reserved batch of slots handed to an executor, and the bounded pool of
//! execution permits its runs take.
//!
//! The statek-scheduler's `Worker` reserves slots in batches (one range row per
//! batch) and hands each batch to [`crate::TenantExecutor::execute_batch`] as a
//! [`SlotBatch`] (the slots in sequence order, each mapped to its tenant,
//! and the Worker's [`RunPool`]) with its [`SlotTickets`](crate::SlotTickets). An executor
//! claims for the slots in sequence order, at most as many runs as it
//! holds permits, so a claimed run never waits for a permit; a slot whose
//! claim must wait for a permit waits *before* its claim.
//!
//! Every slot gets exactly one outcome, whatever happens, and the types
//! say so: each slot has one owned ticket ([`crate::SlotTicket`], or a
//! [`crate::SlotRange`] for consecutive slots decided alike without a
//! claim), reporting consumes it, and a ticket dropped unreported reports
//! its slots abandoned. A slot is consumed, never passed on.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use statek_policy::{CostFairness, FairnessUnit, SchedulerShardId, TenantId};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::outcome::{TenantTickOutcome, Unclaimed};
use crate::slot::{SlotClass, SlotOutcomes};

/// One reserved slot of a batch: its global sequence and the tenant the
/// policy's cycle maps it to (`slot = sequence mod L`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSlot {
    /// The slot's global sequence in its shard.
    pub sequence: u64,
    /// The tenant the slot belongs to; only its runs may use the slot.
    pub tenant: TenantId,
}

/// The bounded pool of executing runs of one replica: at most
/// [`capacity`](Self::capacity) runs execute at once. Waiters are served
/// first come, first served (a FIFO semaphore), so slots get their permits
/// in the order they asked.
#[derive(Debug, Clone)]
pub struct RunPool {
    semaphore: Arc<Semaphore>,
    capacity: usize,
}

impl RunPool {
    /// A pool of `capacity` permits (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// Permits in the pool.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Permits free right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for one permit (first come, first served).
    pub async fn acquire(&self) -> RunPermit {
        // The semaphore is never closed.
        match Arc::clone(&self.semaphore).acquire_owned().await {
            Ok(permit) => RunPermit(Some(permit)),
            Err(_) => RunPermit(None),
        }
    }

    /// Up to `wanted` more permits, without waiting.
    fn try_take(&self, wanted: usize, into: &mut Vec<RunPermit>) {
        while into.len() < wanted {
            match Arc::clone(&self.semaphore).try_acquire_owned() {
                Ok(permit) => into.push(RunPermit(Some(permit))),
                Err(_) => break,
            }
        }
    }
}

/// The right to execute one run; dropping it returns it to its pool.
#[derive(Debug)]
pub struct RunPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// What a scheduler hands [`SlotBatch::new`]: the batch's slots and
/// where its results go.
pub struct BatchParts<'a, E> {
    /// The shard the slots were reserved on.
    pub shard: &'a SchedulerShardId,
    /// What the shard's policy shares: slots, or cost (then the executor
    /// keeps the ledger: [`TenantExecutor::enforces_cost_fairness`](crate::TenantExecutor::enforces_cost_fairness)).
    pub fairness: &'a FairnessUnit,
    /// The slots, in sequence order.
    pub slots: &'a [BatchSlot],
    /// The pool whose permits the batch's runs take.
    pub pool: &'a RunPool,
    /// Ends claiming: the slots not decided by then are consumed unused.
    pub stop: &'a CancellationToken,
    /// The handlers' token (fires when the shutdown grace has run out).
    pub cancel: &'a CancellationToken,
    /// Hears every report: one per slot, or one per range of slots.
    pub sink: &'a (dyn Fn(SlotReport<E>) + Send + Sync),
    /// Hears the number of slots decided each time it grows.
    pub on_decided: &'a (dyn Fn(usize) + Send + Sync),
}

/// How the slots of a batch ended, as the batch's sink hears it: one
/// slot's outcome, or one outcome for a range of consecutive slots (by
/// index in the batch; one call however long the range).
#[derive(Debug)]
pub enum SlotReport<E> {
    /// One slot's outcome, or the executor's error for it.
    One {
        /// The slot's index in the batch.
        index: usize,
        /// What the executor reported.
        outcome: Result<TenantTickOutcome, E>,
    },
    /// Consecutive slots consumed without a claim, all alike.
    Unclaimed {
        /// The slots' indexes in the batch.
        indexes: Range<usize>,
        /// What they found.
        outcome: Unclaimed,
    },
    /// Consecutive slots whose claiming failed for good, or whose tickets
    /// were dropped unreported: consumed with an executor error each.
    Abandoned {
        /// The slots' indexes in the batch.
        indexes: Range<usize>,
        /// Why (the error's text).
        reason: String,
    },
}

/// The bookkeeping of one batch, owned by the scheduler that drives it:
/// how far it is decided, how many slots were reported, and each slot's
/// recorded class. [`SlotBatch::new`] borrows it mutably for the batch's
/// life, so one state issues one set of tickets.
#[derive(Debug, Default)]
pub struct BatchState {
    decided: AtomicUsize,
    reported: AtomicUsize,
    /// Each slot's recorded class, once known (`None`: not yet).
    pub(crate) classes: Mutex<Vec<Option<SlotClass>>>,
    /// Whether some slot's class cannot be known for sure (a claim whose
    /// answer was lost, a slot abandoned or reported with an error or as
    /// cancelled without a class): the range is then left unrecorded.
    uncertain: AtomicBool,
}

impl BatchState {
    /// An empty state; [`SlotBatch::new`] sizes it to its batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Slots reported so far (a whole range counts its slots). Short of
    /// the batch's length after the executor returned only when a ticket
    /// was leaked (`std::mem::forget`): nothing reported those slots.
    pub fn reported(&self) -> usize {
        self.reported.load(Ordering::Acquire)
    }

    /// The recorded class of every slot, in sequence order, or `None`
    /// when some slot's class is not known for sure (see `uncertain`):
    /// the range is left unrecorded.
    pub fn outcomes(&self) -> Option<SlotOutcomes> {
        if self.uncertain.load(Ordering::Acquire) {
            return None;
        }
        let classes = lock(&self.classes);
        if classes.iter().any(Option::is_none) {
            return None;
        }
        Some(classes.iter().flatten().copied().collect())
    }

    /// Marks the batch's classes unknowable: its range is left
    /// unrecorded rather than recorded wrong.
    pub fn mark_uncertain(&self) {
        self.uncertain.store(true, Ordering::Release);
    }
}

/// A reserved batch given to [`crate::TenantExecutor::execute_batch`],
/// with its [`SlotTickets`](crate::SlotTickets). A cheap copyable view: share it with every
/// run of the batch.
///
/// Protocol for an implementation:
/// 1. take permits with [`permits`](Self::permits) (waits for at least
///    one; `None` once the replica is stopping);
/// 2. claim for the next slots in sequence order, at most one run per
///    permit (each slot only from its own tenant), taking their tickets
///    in order, and call [`decided`](Self::decided) with the number of
///    slots decided so far;
/// 3. start each claimed run at once with its own permit and its slot's
///    [`crate::SlotTicket`] (inside the `execute_batch` future: tickets
///    borrow the batch, so they cannot move into `tokio::spawn`), return
///    unused permits (drop them), and go on with the undecided slots;
/// 4. report through each ticket (an idle or contended slot at once,
///    consecutive ones as one [`crate::SlotRange`]; a run when it
///    finished); when [`permits`](Self::permits) returns `None`,
///    [`SlotTickets::cancel_rest`](crate::SlotTickets::cancel_rest) consumes the rest unused.
///
/// Handlers see [`cancel`](Self::cancel), which fires only when the
/// replica's shutdown grace has run out.
pub struct SlotBatch<'a, E> {
    pub(crate) parts: BatchParts<'a, E>,
    pub(crate) state: &'a BatchState,
}

impl<E> Clone for BatchParts<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for BatchParts<'_, E> {}

impl<E> Clone for SlotBatch<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for SlotBatch<'_, E> {}

impl<'a, E> SlotBatch<'a, E> {
    /// The shard the slots were reserved on.
    pub fn shard(&self) -> &'a SchedulerShardId {
        self.parts.shard
    }

    /// The cost parameters of the shard's policy in cost mode (`None`:
    /// it shares slots). An executor that enforces cost fairness credits
    /// each slot's tenant and decides debt slots with them.
    pub fn cost_fairness(&self) -> Option<&'a CostFairness> {
        self.parts.fairness.cost()
    }

    /// The slots, in sequence order.
    pub fn slots(&self) -> &'a [BatchSlot] {
        self.parts.slots
    }

    /// Whether the replica is stopping: claim nothing more.
    pub fn is_stopping(&self) -> bool {
        self.parts.stop.is_cancelled()
    }

    /// The token running handlers must watch (fires after the shutdown
    /// grace, or on a lost lease of the executor's own making).
    pub fn cancel(&self) -> &'a CancellationToken {
        self.parts.cancel
    }

    /// Resolves when the replica starts stopping.
    pub(crate) async fn stopping(&self) {
        self.parts.stop.cancelled().await;
    }

    /// Waits for at least one free permit and takes up to `wanted` (at
    /// least 1); `None` when the replica stops first.
    pub async fn permits(&self, wanted: usize) -> Option<Vec<RunPermit>> {
        let wanted = wanted.max(1);
        if self.parts.stop.is_cancelled() {
            return None;
        }
        let mut held = Vec::with_capacity(wanted);
        let permit = tokio::select! {
            biased;
            _ = self.parts.stop.cancelled() => return None,
            permit = self.parts.pool.acquire() => permit,
        };
        held.push(permit);
        self.parts.pool.try_take(wanted, &mut held);
        Some(held)
    }

    /// Records that the first `count` slots are decided: their claims
    /// were made (or they were decided without one), so no claim is made
    /// for them again, whether or not their outcomes are reported yet
    /// (a claimed run is decided long before it finishes). The runner
    /// lets the next batch claim once every slot of this one is decided.
    pub fn decided(&self, count: usize) {
        let count = count.min(self.parts.slots.len());
        if self.state.decided.fetch_max(count, Ordering::AcqRel) < count {
            (self.parts.on_decided)(count);
        }
    }

    /// Marks the batch's classes unknowable (see [`BatchState::outcomes`]).
    pub(crate) fn mark_uncertain(&self) {
        self.state.mark_uncertain();
    }

    /// Sets slot `index`'s class unless one is set.
    pub(crate) fn classify(&self, index: usize, class: SlotClass) {
        if let Some(place) = lock(&self.state.classes).get_mut(index) {
            place.get_or_insert(class);
        }
    }

    /// Reports slot `index`'s outcome (through its ticket).
    pub(crate) fn report_one(&self, index: usize, outcome: Result<TenantTickOutcome, E>) {
        match &outcome {
            // A run may have been claimed for it before it was cancelled:
            // only a class set before says.
            Ok(TenantTickOutcome::Cancelled) => {
                if lock(&self.state.classes)
                    .get(index)
                    .is_some_and(Option::is_none)
                {
                    self.mark_uncertain();
                }
            }
            Ok(outcome) => self.classify(index, outcome.slot_class()),
            Err(_) => {}
        }
        self.state.reported.fetch_add(1, Ordering::AcqRel);
        (self.parts.sink)(SlotReport::One { index, outcome });
        self.decided(index + 1);
    }

    /// Reports the slots `indexes` as consumed without a claim, alike.
    pub(crate) fn report_unclaimed(&self, indexes: Range<usize>, outcome: Unclaimed) {
        if let Some(places) = lock(&self.state.classes).get_mut(indexes.clone()) {
            for place in places {
                place.get_or_insert(outcome.class());
            }
        }
        self.report_range(SlotReport::Unclaimed { indexes, outcome });
    }

    /// Reports the slots `indexes` abandoned (`reason`).
    pub(crate) fn abandon(&self, indexes: Range<usize>, reason: String) {
        if !indexes.is_empty() {
            self.mark_uncertain();
        }
        self.report_range(SlotReport::Abandoned { indexes, reason });
    }

    /// Counts a range report's slots, hands it on, and records them
    /// decided (nothing for an empty range).
    fn report_range(&self, report: SlotReport<E>) {
        let (SlotReport::Unclaimed { indexes, .. } | SlotReport::Abandoned { indexes, .. }) =
            &report
        else {
            return;
        };
        if indexes.is_empty() {
            return;
        }
        let end = indexes.end;
        self.state
            .reported
            .fetch_add(indexes.len(), Ordering::AcqRel);
        (self.parts.sink)(report);
        self.decided(end);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
