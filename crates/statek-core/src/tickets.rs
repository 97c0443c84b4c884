//! One owned ticket per slot of a [`SlotBatch`]: [`SlotTickets`] issues
//! them in sequence order, one at a time ([`SlotTicket`]) or as a range
//! of consecutive slots decided alike without a claim ([`SlotRange`]:
//! one report, however many slots). Reporting consumes a ticket, so a
//! slot cannot be reported twice; a ticket dropped unreported reports its
//! slots abandoned, so no slot goes without an outcome.

use std::ops::Range;

use crate::batch::{lock, BatchParts, BatchSlot, BatchState, SlotBatch};
use crate::outcome::{TenantTickOutcome, Unclaimed};
use crate::slot::SlotClass;

impl<'a, E> SlotBatch<'a, E> {
    /// The batch of `parts`, and one ticket per slot: what a scheduler
    /// hands [`crate::TenantExecutor::execute_batch`]. `state` (reset
    /// here) keeps its bookkeeping; read it once the executor returned.
    /// Borrowing `state` mutably for the batch's life makes one state
    /// issue one set of tickets.
    ///
    /// For a scheduler that drives executors (statek-scheduler's runner);
    /// an executor only receives batches.
    pub fn new(parts: BatchParts<'a, E>, state: &'a mut BatchState) -> (Self, SlotTickets<'a, E>) {
        *state = BatchState::new();
        *lock(&state.classes) = vec![None; parts.slots.len()];
        let state: &'a BatchState = state;
        let batch = SlotBatch { parts, state };
        (batch, SlotTickets { batch, next: 0 })
    }
}

/// The tickets of a batch's slots not yet issued, in sequence order.
/// Dropping it reports the slots left abandoned; a stopping executor
/// calls [`cancel_rest`](Self::cancel_rest) instead.
pub struct SlotTickets<'a, E> {
    batch: SlotBatch<'a, E>,
    next: usize,
}

impl<'a, E> SlotTickets<'a, E> {
    /// The slots whose tickets are not issued yet, in sequence order.
    pub fn remaining(&self) -> &'a [BatchSlot] {
        self.batch.slots().get(self.next..).unwrap_or_default()
    }

    /// How many tickets are left.
    pub fn len(&self) -> usize {
        self.remaining().len()
    }

    /// Whether every ticket was issued.
    pub fn is_empty(&self) -> bool {
        self.remaining().is_empty()
    }

    /// The index (in the batch) of the next ticket: the number issued.
    pub fn issued(&self) -> usize {
        self.next
    }

    /// The next slot's ticket, `None` when every ticket was issued.
    pub fn ticket(&mut self) -> Option<SlotTicket<'a, E>> {
        let index = self.next;
        (index < self.batch.slots().len()).then(|| {
            self.next += 1;
            SlotTicket {
                batch: self.batch,
                index,
                open: true,
            }
        })
    }

    /// One ticket for the next `count` slots (fewer when fewer are left),
    /// `None` for none.
    pub fn range(&mut self, count: usize) -> Option<SlotRange<'a, E>> {
        let start = self.next;
        let end = start.saturating_add(count).min(self.batch.slots().len());
        (start < end).then(|| {
            self.next = end;
            SlotRange {
                batch: self.batch,
                indexes: start..end,
                open: true,
            }
        })
    }

    /// Consumes every slot left unused ([`Unclaimed::Unused`]): what a
    /// stopping executor does with the slots it will not claim for.
    pub fn cancel_rest(&mut self) {
        if let Some(rest) = self.range(usize::MAX) {
            rest.report(Unclaimed::Unused);
        }
    }

    /// Reports every slot left abandoned: claiming for them failed for
    /// good (`reason`: the error, e.g. the store's).
    pub fn abandon_rest(&mut self, reason: &str) {
        if let Some(rest) = self.range(usize::MAX) {
            rest.abandon(reason);
        }
    }
}

impl<'a, E> Iterator for SlotTickets<'a, E> {
    type Item = SlotTicket<'a, E>;

    fn next(&mut self) -> Option<Self::Item> {
        self.ticket()
    }
}

impl<E> Drop for SlotTickets<'_, E> {
    fn drop(&mut self) {
        self.abandon_rest("the executor returned without deciding this slot");
    }
}

/// The ticket of one slot: report its outcome with
/// [`report`](Self::report), or [`report_unclaimed`](Self::report_unclaimed)
/// for a slot decided without a claim (each consumes it). Dropped
/// unreported, it reports the slot abandoned.
///
/// A ticket borrows its batch, so it cannot move into `tokio::spawn`:
/// run a slot's work inside the `execute_batch` future (for example in a
/// `FuturesUnordered`, as [`crate::claim_and_run`] does) and report from
/// there.
///
/// Reporting slot *i* also records the batch decided up to *i* (the
/// runner lets the next batch claim once a batch is decided): report a
/// slot only after every earlier slot's claim was made, which holds when
/// tickets are taken in order and each is reported after its own claim.
#[must_use = "a slot's ticket reports its outcome; dropped, it reports the slot abandoned"]
pub struct SlotTicket<'a, E> {
    batch: SlotBatch<'a, E>,
    index: usize,
    open: bool,
}

impl<'a, E> SlotTicket<'a, E> {
    /// The slot's index in the batch.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The slot (its sequence and tenant).
    pub fn slot(&self) -> &'a BatchSlot {
        &self.batch.slots()[self.index]
    }

    /// Sets the class the slot is recorded with
    /// ([`crate::ReservationSource::record_slot_outcomes`]) where its
    /// outcome alone does not tell it: [`SlotClass::Claimed`] as soon as
    /// a run is claimed for it, whatever the run's outcome. The first
    /// class set stays; [`report`](Self::report) sets the outcome's own
    /// class for a slot that has none yet.
    pub fn classify(&self, class: SlotClass) {
        self.batch.classify(self.index, class);
    }

    /// Reports the slot's outcome, or the executor's error for it.
    pub fn report(mut self, outcome: Result<TenantTickOutcome, E>) {
        self.open = false;
        self.batch.report_one(self.index, outcome);
    }

    /// Reports the slot consumed without a claim: as a one-slot
    /// [`SlotRange`] would, so a slot known idle without asking is
    /// recorded [`SlotClass::IdleKnown`] (a `report(Ok(Idle))` records
    /// [`SlotClass::Idle`]: the claim asked).
    pub fn report_unclaimed(mut self, outcome: Unclaimed) {
        self.open = false;
        self.batch
            .report_unclaimed(self.index..self.index + 1, outcome);
    }

    /// Reports the slot abandoned: claiming for it failed for good.
    pub fn abandon(mut self, reason: &str) {
        self.open = false;
        self.batch
            .abandon(self.index..self.index + 1, reason.to_owned());
    }
}

impl<E> Drop for SlotTicket<'_, E> {
    fn drop(&mut self) {
        if self.open {
            self.batch.abandon(
                self.index..self.index + 1,
                "the executor dropped this slot's ticket without an outcome".to_owned(),
            );
        }
    }
}

/// The ticket of consecutive slots decided alike without a claim: one
/// report for all of them ([`report`](Self::report), consumes it).
/// Dropped unreported, it reports them abandoned.
#[must_use = "a range's ticket reports its outcome; dropped, it reports the slots abandoned"]
pub struct SlotRange<'a, E> {
    batch: SlotBatch<'a, E>,
    indexes: Range<usize>,
    open: bool,
}

impl<'a, E> SlotRange<'a, E> {
    /// The slots' indexes in the batch.
    pub fn indexes(&self) -> Range<usize> {
        self.indexes.clone()
    }

    /// The slots, in sequence order.
    pub fn slots(&self) -> &'a [BatchSlot] {
        &self.batch.slots()[self.indexes.clone()]
    }

    /// Reports every slot of the range consumed without a claim, alike.
    pub fn report(mut self, outcome: Unclaimed) {
        self.open = false;
        self.batch.report_unclaimed(self.indexes.clone(), outcome);
    }

    /// Reports every slot of the range abandoned: claiming for them
    /// failed for good.
    pub fn abandon(mut self, reason: &str) {
        self.open = false;
        self.batch.abandon(self.indexes.clone(), reason.to_owned());
    }
}

impl<E> Drop for SlotRange<'_, E> {
    fn drop(&mut self) {
        if self.open {
            self.batch.abandon(
                self.indexes.clone(),
                "the executor dropped these slots' ticket without an outcome".to_owned(),
            );
        }
    }
}
