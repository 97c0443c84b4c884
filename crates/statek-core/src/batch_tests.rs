//! Tests of the batch protocol: the tickets of a [`crate::SlotBatch`]
//! (each slot reported once, ranges in one call, dropped tickets
//! abandoned) and [`crate::claim_and_run`] over them.

use std::sync::Mutex;

use statek_policy::{FairnessUnit, SchedulerShardId, TenantId};
use tokio_util::sync::CancellationToken;

use crate::batch::{BatchParts, BatchSlot, BatchState, RunPool, SlotBatch, SlotReport};
use crate::claim_run::{claim_and_run, SlotStart};
use crate::outcome::{ExecutedRun, TenantTickOutcome, Unclaimed};
use crate::slot::SlotClass;
use crate::tickets::SlotTickets;

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
            fairness: &FairnessUnit::Slots,
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

/// A claim that answers more runs than it was given permits (an
/// executor's bug) still runs at most one run per permit: the extra run
/// waits for a permit of the pool (2 here), and every run is reported.
#[tokio::test]
async fn claim_and_run_never_runs_more_than_its_permits() {
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen, counting) = (std::sync::Arc::clone(&most), running);
    let (heard, reported, classes, _) = drive(3, move |batch, tickets| {
        let (most, running) = (seen, counting);
        Box::pin(async move {
            let (most, running) = (&*most, &*running);
            claim_and_run(
                batch,
                tickets,
                |_: &String| false,
                |slots: &[BatchSlot], _max_runs| {
                    let n = slots.len();
                    async move { Ok((0..n).map(|_| SlotStart::Claimed(())).collect()) }
                },
                |(), permit| async move {
                    use std::sync::atomic::Ordering::SeqCst;
                    let now = running.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    running.fetch_sub(1, SeqCst);
                    drop(permit);
                    Ok(executed())
                },
            )
            .await;
        })
    })
    .await;
    assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 2);
    let mut heard = heard;
    heard.sort();
    assert_eq!(
        heard,
        ["one 0 executed", "one 1 executed", "one 2 executed"]
    );
    assert_eq!((reported, classes.as_deref()), (3, Some("c3")));
}

/// A single ticket reported unclaimed is recorded as a one-slot range:
/// known idle stays `IdleKnown` (a reported `Idle` outcome is `Idle`).
#[tokio::test]
async fn a_ticket_reported_unclaimed_keeps_its_class() {
    let (heard, _, classes, _) = drive(2, |_batch, mut tickets| {
        Box::pin(async move {
            tickets
                .ticket()
                .unwrap()
                .report_unclaimed(Unclaimed::IdleKnown);
            tickets
                .ticket()
                .unwrap()
                .report(Ok(TenantTickOutcome::Idle));
        })
    })
    .await;
    assert_eq!(heard, ["unclaimed 0..1 IdleKnown", "one 1 idle"]);
    assert_eq!(classes.as_deref(), Some("k1 i1"));
}
