//! One owned ticket per slot of a [`SlotBatch`]: [`SlotTickets`] issues
//! them in sequence order, one at a time ([`SlotTicket`]) or as a range
//! of consecutive slots decided alike without a claim ([`SlotRange`]:
//! one report, however many slots). Reporting consumes a ticket, so a
//! slot cannot be reported twice; a ticket dropped unreported reports its
//! slots abandoned, so no slot goes without an outcome.

use std::ops::Range;

use crate::batch::{BatchSlot, SlotBatch};
use crate::outcome::TenantTickOutcome;
use crate::slot::SlotClass;

/// What consecutive slots consumed without a claim found (each slot is
/// recorded with [`class`](Self::class); the scheduler sees
/// [`outcome`](Self::outcome)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unclaimed {
    /// The claim asked; the tenant had no claimable run.
    Idle,
    /// The executor knew the tenant had no claimable run and did not ask.
    IdleKnown,
    /// The tenant's claimable runs were all held by other claimers.
    Contended,
    /// The tenant's concurrency cap or rate limit let it start none.
    Limited,
    /// The replica stopped before the slots were decided.
    Unused,
}

impl Unclaimed {
    /// The class the slots are recorded with.
    pub const fn class(self) -> SlotClass {
        match self {
            Unclaimed::Idle => SlotClass::Idle,
            Unclaimed::IdleKnown => SlotClass::IdleKnown,
            Unclaimed::Contended => SlotClass::Contended,
            Unclaimed::Limited => SlotClass::Limited,
            Unclaimed::Unused => SlotClass::Unused,
        }
    }

    /// Each slot's outcome: [`TenantTickOutcome::Idle`] for both idle
    /// kinds, [`TenantTickOutcome::Cancelled`] for unused slots.
    pub fn outcome(self) -> TenantTickOutcome {
        match self {
            Unclaimed::Idle | Unclaimed::IdleKnown => TenantTickOutcome::Idle,
            Unclaimed::Contended => TenantTickOutcome::Contended,
            Unclaimed::Limited => TenantTickOutcome::Limited,
            Unclaimed::Unused => TenantTickOutcome::Cancelled,
        }
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
    pub(crate) fn new(batch: SlotBatch<'a, E>) -> Self {
        Self { batch, next: 0 }
    }

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
/// [`report`](Self::report) (consumes it). Dropped unreported, it
/// reports the slot abandoned.
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use statek_policy::{SchedulerShardId, TenantId};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::batch::{BatchParts, BatchState, RunPool, SlotReport};
    use crate::claim_run::{claim_and_run, SlotStart};
    use crate::outcome::ExecutedRun;

    /// What the sink heard, one entry per call: `one 0 executed`,
    /// `unclaimed 1..4 IdleKnown`, `abandoned 4..5`.
    type Heard = Mutex<Vec<String>>;

    /// An executor's work on one batch.
    type Executing<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

    fn slots(n: u64) -> Vec<BatchSlot> {
        (0..n)
            .map(|sequence| BatchSlot {
                sequence,
                tenant: TenantId::try_from("tenant-a").unwrap(),
            })
            .collect()
    }

    fn hear(heard: &Heard, report: SlotReport<String>) {
        let line = match report {
            SlotReport::One { index, outcome } => match outcome {
                Ok(outcome) => format!("one {index} {}", outcome.label()),
                Err(e) => format!("one {index} error {e}"),
            },
            SlotReport::Unclaimed { indexes, outcome } => {
                format!("unclaimed {indexes:?} {outcome:?}")
            }
            SlotReport::Abandoned { indexes, reason } => format!("abandoned {indexes:?} {reason}"),
        };
        heard.lock().unwrap().push(line);
    }

    fn executed() -> TenantTickOutcome {
        TenantTickOutcome::Executed(ExecutedRun {
            run_id: uuid::Uuid::nil(),
            attempt: 1,
            available_at: std::time::SystemTime::UNIX_EPOCH,
            claimed_at: std::time::SystemTime::UNIX_EPOCH,
        })
    }

    /// Runs `execute` on a batch of `n` slots; returns what the sink
    /// heard, the slots reported, the recorded classes and the last
    /// decided count.
    async fn drive<F>(n: u64, execute: F) -> (Vec<String>, usize, Option<String>, usize)
    where
        F: for<'a> FnOnce(SlotBatch<'a, String>, SlotTickets<'a, String>) -> Executing<'a>,
    {
        let shard = SchedulerShardId::try_from("primary-v1").unwrap();
        let slots = slots(n);
        let pool = RunPool::new(2);
        let (stop, cancel) = (CancellationToken::new(), CancellationToken::new());
        let heard = Heard::default();
        let decided = Mutex::new(0);
        let sink = |report: SlotReport<String>| hear(&heard, report);
        let on_decided = |count: usize| *decided.lock().unwrap() = count;
        let mut state = BatchState::new();
        let (batch, tickets) = SlotBatch::new(
            BatchParts {
                shard: &shard,
                slots: &slots,
                pool: &pool,
                stop: &stop,
                cancel: &cancel,
                sink: &sink,
                on_decided: &on_decided,
            },
            &mut state,
        );
        execute(batch, tickets).await;
        let decided = *decided.lock().unwrap();
        (
            heard.into_inner().unwrap(),
            state.reported(),
            state.outcomes().map(|o| o.to_string()),
            decided,
        )
    }

    /// A ticket each, a range in one call, and the classes recorded.
    #[tokio::test]
    async fn tickets_and_ranges_report_each_slot_once() {
        let (heard, reported, classes, decided) = drive(5, |_batch, mut tickets| {
            Box::pin(async move {
                let first = tickets.ticket().unwrap();
                first.classify(SlotClass::Claimed);
                let range = tickets.range(3).unwrap();
                assert_eq!((range.indexes(), range.slots().len()), (1..4, 3));
                range.report(Unclaimed::IdleKnown);
                first.report(Ok(executed()));
                let last = tickets.ticket().unwrap();
                assert_eq!((last.index(), last.slot().sequence), (4, 4));
                last.report(Ok(TenantTickOutcome::Limited));
                assert!(tickets.ticket().is_none() && tickets.range(1).is_none());
            })
        })
        .await;
        assert_eq!(
            heard,
            [
                "unclaimed 1..4 IdleKnown",
                "one 0 executed",
                "one 4 limited"
            ]
        );
        assert_eq!(
            (reported, classes.as_deref(), decided),
            (5, Some("c1 k3 l1"), 5)
        );
    }

    /// A dropped ticket, a dropped range and the tickets left unissued
    /// are reported abandoned (one call each), and the range is left
    /// unrecorded.
    #[tokio::test]
    async fn dropped_tickets_report_their_slots_abandoned() {
        let (heard, reported, classes, decided) = drive(6, |_batch, mut tickets| {
            Box::pin(async move {
                drop(tickets.ticket());
                drop(tickets.range(2));
                tickets.ticket().unwrap().report(Err("store down".into()));
            })
        })
        .await;
        assert_eq!(
            heard,
            [
                "abandoned 0..1 the executor dropped this slot's ticket without an outcome",
                "abandoned 1..3 the executor dropped these slots' ticket without an outcome",
                "one 3 error store down",
                "abandoned 4..6 the executor returned without deciding this slot",
            ]
        );
        assert_eq!((reported, classes, decided), (6, None, 6));
    }

    /// A stopping executor consumes the rest unused, in one call; a slot
    /// reported cancelled without a class leaves the range unrecorded.
    #[tokio::test]
    async fn cancel_rest_consumes_the_rest_unused() {
        let (heard, _, classes, _) = drive(4, |_batch, mut tickets| {
            Box::pin(async move {
                tickets
                    .ticket()
                    .unwrap()
                    .report(Ok(TenantTickOutcome::Idle));
                tickets.cancel_rest();
                assert!(tickets.is_empty());
            })
        })
        .await;
        assert_eq!(heard, ["one 0 idle", "unclaimed 1..4 Unused"]);
        assert_eq!(classes.as_deref(), Some("i1 x3"));
        let (_, _, classes, _) = drive(1, |_batch, mut tickets| {
            Box::pin(async move {
                tickets
                    .ticket()
                    .unwrap()
                    .report(Ok(TenantTickOutcome::Cancelled));
            })
        })
        .await;
        assert_eq!(classes, None);
    }

    #[test]
    fn unclaimed_starts_merge_alike_neighbours() {
        let mut starts: Vec<SlotStart<u8>> = Vec::new();
        SlotStart::unclaimed(Unclaimed::Idle).push_into(&mut starts);
        SlotStart::unclaimed(Unclaimed::Idle).push_into(&mut starts);
        SlotStart::Claimed(7).push_into(&mut starts);
        SlotStart::unclaimed(Unclaimed::Idle).push_into(&mut starts);
        SlotStart::unclaimed(Unclaimed::Contended).push_into(&mut starts);
        SlotStart::LeaseLost.push_into(&mut starts);
        assert_eq!(
            starts,
            [
                SlotStart::Unclaimed {
                    outcome: Unclaimed::Idle,
                    slots: 2
                },
                SlotStart::Claimed(7),
                SlotStart::unclaimed(Unclaimed::Idle),
                SlotStart::unclaimed(Unclaimed::Contended),
                SlotStart::LeaseLost,
            ]
        );
        assert_eq!(starts.iter().map(SlotStart::slots).sum::<usize>(), 6);
    }

    /// `claim_and_run`: a million idle slots answered as one start are
    /// one report; a run and a lost lease are recorded claimed.
    #[tokio::test]
    async fn claim_and_run_reports_a_range_once() {
        let (heard, reported, classes, decided) = drive(1_000_003, |batch, tickets| {
            Box::pin(async move {
                claim_and_run(
                    batch,
                    tickets,
                    |_: &String| false,
                    |slots: &[BatchSlot], _max_runs| {
                        let n = slots.len();
                        async move {
                            Ok(vec![
                                SlotStart::Claimed(()),
                                SlotStart::LeaseLost,
                                SlotStart::Unclaimed {
                                    outcome: Unclaimed::IdleKnown,
                                    slots: n - 2,
                                },
                            ])
                        }
                    },
                    |(), _permit| async { Ok(executed()) },
                )
                .await;
            })
        })
        .await;
        assert_eq!(
            heard,
            [
                "one 1 contended",
                "unclaimed 2..1000003 IdleKnown",
                "one 0 executed"
            ]
        );
        assert_eq!(
            (reported, classes.as_deref(), decided),
            (1_000_003, Some("c2 k1000001"), 1_000_003)
        );
    }

    /// A claim answering more slots than asked, or none, abandons the rest.
    #[tokio::test]
    async fn claim_and_run_abandons_on_a_wrong_answer() {
        for answered in [0, 4] {
            let (heard, reported, classes, _) = drive(3, |batch, tickets| {
                Box::pin(async move {
                    claim_and_run(
                        batch,
                        tickets,
                        |_: &String| false,
                        |_: &[BatchSlot], _max_runs| async move {
                            Ok::<_, String>(vec![SlotStart::<()>::Unclaimed {
                                outcome: Unclaimed::Idle,
                                slots: answered,
                            }])
                        },
                        |(), _permit| async { Ok(executed()) },
                    )
                    .await;
                })
            })
            .await;
            assert_eq!(
                heard,
                [format!(
                    "abandoned 0..3 the batch claim answered {answered} of 3 slots"
                )]
            );
            assert_eq!((reported, classes), (3, None));
        }
    }
}
