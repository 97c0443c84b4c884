//! A `DurableFairScheduler` and a `Worker` with no database: reservations
//! from `InMemoryReservations`, runs on `InMemoryExecutor`, one handler type.
//! Needs no `STATEK_TEST_DATABASE_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use statek_policy::TenantId;
use statek_scheduler::Registration;
use statek_scheduler::{
    DurableFairScheduler, Run, RunError, SchedulerOptions, TenantTickOutcome, TickOutcome, Worker,
    WorkerOptions,
};
use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations};

use statek_store_pg::testing::policy;
use tokio_util::sync::CancellationToken;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

async fn ok(_run: Run, _cancel: CancellationToken) -> Result<(), RunError> {
    Ok(())
}

fn summary(o: &TickOutcome) -> (String, u64, u32, String, &'static str) {
    (
        o.reservation().shard().to_string(),
        o.reservation().sequence(),
        o.reservation().slot(),
        o.tenant().to_string(),
        o.tenant_outcome().label(),
    )
}

#[tokio::test]
async fn ticks_follow_the_cycle_and_consume_idle_slots() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    for _ in 0..3 {
        executor
            .enqueue(&tenant("tenant-a"), b"a".to_vec())
            .unwrap();
    }
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        executor,
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    assert!(matches!(
        scheduler.registration(),
        Registration::Registered { .. }
    ));
    let shutdown = CancellationToken::new();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let o = scheduler.tick(&shutdown).await.unwrap();
        assert_eq!(
            o.starvation_bound(),
            &p.starvation_bound(o.tenant()).unwrap()
        );
        assert_eq!(o.retries(), 0);
        seen.push(summary(&o));
    }
    let row = |seq: u64, slot: u32, t: &str, label: &'static str| {
        ("primary-v1".to_owned(), seq, slot, t.to_owned(), label)
    };
    assert_eq!(
        seen,
        [
            row(0, 0, "tenant-a", "executed"),
            row(1, 1, "tenant-a", "executed"),
            // tenant-b has nothing: its slot is consumed, not passed on.
            row(2, 2, "tenant-b", "idle"),
            row(3, 3, "tenant-a", "executed"),
            row(4, 0, "tenant-a", "idle"),
        ]
    );
    // A batch: one contiguous range after the single ticks.
    let batch = scheduler.tick_batch(3, &shutdown).await.unwrap();
    let sequences: Vec<u64> = batch
        .iter()
        .map(|r| r.as_ref().unwrap().reservation().sequence())
        .collect();
    assert_eq!(sequences, [5, 6, 7]);
    assert_eq!(source.next_sequence(p.shard_id()), Some(8));
    // A second replica on the same source shares the one sequence.
    let replica = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        InMemoryExecutor::new(ok, InMemoryExecutorOptions::new()),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    assert!(matches!(
        replica.registration(),
        Registration::Idempotent { .. }
    ));
    assert_eq!(
        replica
            .tick(&shutdown)
            .await
            .unwrap()
            .reservation()
            .sequence(),
        8
    );
    // Every tick and batch recorded its range's slot classes: the single
    // ticks one slot each, the batch of 3 (b idle, a's two slots idle:
    // its three runs ran in the single ticks) as one run.
    let records: Vec<(u64, String)> = source
        .slot_outcomes(p.shard_id())
        .into_iter()
        .map(|(first, outcomes)| (first, outcomes.to_string()))
        .collect();
    let expected: Vec<(u64, String)> = [
        (0, "c1"),
        (1, "c1"),
        (2, "i1"),
        (3, "c1"),
        (4, "i1"),
        (5, "i3"),
        (8, "i1"),
    ]
    .into_iter()
    .map(|(first, runs)| (first, runs.to_owned()))
    .collect();
    assert_eq!(records, expected);
}

#[tokio::test]
async fn a_tick_that_meets_a_seal_follows_it_to_the_successor() {
    let source = InMemoryReservations::new();
    let v1 = policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)]);
    let v2 = policy("primary-v2", &[("tenant-a", 1), ("tenant-c", 2)]);
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        v1.clone(),
        InMemoryExecutor::new(ok, InMemoryExecutorOptions::new()),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(source.seal(v1.shard_id(), v2.clone()).unwrap(), 1);
    let o = scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(
        summary(&o),
        (
            "primary-v2".to_owned(),
            0,
            0,
            v2.pick(0).unwrap().tenant().to_string(),
            "idle"
        )
    );
    assert_eq!(scheduler.policy().shard_id(), v2.shard_id());
    // A replica started with the sealed shard's policy follows at register.
    let late = DurableFairScheduler::register(
        source.clone(),
        v1,
        InMemoryExecutor::new(ok, InMemoryExecutorOptions::new()),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(late.policy().shard_id(), v2.shard_id());
    assert_eq!(
        late.tick(&shutdown).await.unwrap().reservation().sequence(),
        1
    );
}

/// A scheduler of `p` on `source` with `executor`, shared with a Worker.
async fn registered<X: statek_scheduler::TenantExecutor + Clone>(
    source: &InMemoryReservations,
    p: &statek_policy::WeightedFairnessPolicy,
    executor: &X,
) -> Arc<DurableFairScheduler<X, InMemoryReservations>> {
    Arc::new(
        DurableFairScheduler::register(
            source.clone(),
            p.clone(),
            executor.clone(),
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_every_run_then_reserves_nothing_while_idle() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let mut ids = Vec::new();
    for (t, n) in [("tenant-a", 30), ("tenant-b", 10)] {
        for _ in 0..n {
            ids.push(executor.enqueue(&tenant(t), b"x".to_vec()).unwrap().run_id);
        }
    }
    let scheduler = registered(&source, &p, &executor).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = WorkerOptions::new().concurrency(4).unwrap();
    let worker = Worker::new(Arc::clone(&scheduler), options).with_outcome_sink(tx);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let mut executed = 0;
    while executed < ids.len() {
        let o = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the worker keeps delivering outcomes")
            .unwrap();
        if matches!(o.tenant_outcome(), TenantTickOutcome::Executed(_)) {
            executed += 1;
        }
    }
    assert_eq!(executor.count_live_runs(), 0);
    // Every queue is empty: after at most the idle threshold the worker
    // backs off and reserves nothing more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = source.next_sequence(p.shard_id()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(source.next_sequence(p.shard_id()), Some(settled));
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 40);
    assert_eq!(report.ticks, settled);
    assert!(report.backoffs > 0);
}

/// Without an outcome sink the Worker counts each range of slots decided
/// alike without a claim at once: the report still adds up to one tick
/// per reserved slot, every slot without a run counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_a_sink_counts_unclaimed_ranges_once_per_slot() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(ok, InMemoryExecutorOptions::new());
    let p = policy(
        "primary-v1",
        &[("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 4)],
    );
    for _ in 0..25 {
        executor
            .enqueue(&tenant("tenant-a"), b"x".to_vec())
            .unwrap();
    }
    let scheduler = registered(&source, &p, &executor).await;
    let options = WorkerOptions::new().concurrency(4).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(scheduler, options).run(shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(10), async {
        while executor.count_live_runs() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the worker runs every run");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = source.next_sequence(p.shard_id()).unwrap();
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 25);
    assert_eq!(report.ticks, settled);
    assert_eq!(
        report.executed + report.idle + report.contended + report.limited + report.cancelled,
        settled
    );
    // Only tenant-a has runs, so b's and c's slots are idle (5 of 8).
    assert!(report.idle >= 25 * 5 / 3, "{report:?}");
}

#[derive(Debug, thiserror::Error)]
#[error("the claim's answer was lost")]
struct LostAnswer;

/// Claims with `claim_and_run`; its first claim fails transiently (its
/// answer lost), every other one finds every slot idle.
#[derive(Default)]
struct FirstClaimLost {
    claims: std::sync::atomic::AtomicU32,
}

impl statek_scheduler::TenantExecutor for FirstClaimLost {
    type Error = LostAnswer;

    async fn execute_one(
        &self,
        _tenant: &TenantId,
        _shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, LostAnswer> {
        Ok(TenantTickOutcome::Idle)
    }

    async fn execute_batch<'a>(
        &'a self,
        batch: statek_scheduler::SlotBatch<'a, LostAnswer>,
        tickets: statek_scheduler::SlotTickets<'a, LostAnswer>,
    ) {
        statek_scheduler::claim_and_run(
            batch,
            tickets,
            |_| true,
            |slots: &[statek_scheduler::BatchSlot], _max_runs: usize| {
                let n = slots.len();
                async move {
                    if self
                        .claims
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                        == 0
                    {
                        return Err(LostAnswer);
                    }
                    Ok(vec![statek_scheduler::SlotStart::<()>::Unclaimed {
                        outcome: statek_scheduler::Unclaimed::Idle,
                        slots: n,
                    }])
                }
            },
            |(): (), _permit| async move { Ok(TenantTickOutcome::Idle) },
        )
        .await;
    }

    fn is_retryable(_: &LostAnswer) -> bool {
        true
    }
}

/// A batch whose claim lost an answer (the attempt may still claim on
/// the server) is left unrecorded; the next batch is recorded.
#[tokio::test]
async fn a_batch_whose_claim_lost_an_answer_is_left_unrecorded() {
    let source = InMemoryReservations::new();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        FirstClaimLost::default(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let labels = |batch: Vec<Result<TickOutcome, statek_scheduler::SchedulerError>>| {
        batch
            .into_iter()
            .map(|o| o.unwrap().tenant_outcome().label())
            .collect::<Vec<_>>()
    };
    // The retry answers every slot idle, as the Worker reports them.
    assert_eq!(
        labels(scheduler.tick_batch(4, &shutdown).await.unwrap()),
        ["idle", "idle", "idle", "idle"]
    );
    assert_eq!(
        labels(scheduler.tick_batch(4, &shutdown).await.unwrap()),
        ["idle", "idle", "idle", "idle"]
    );
    let records: Vec<(u64, String)> = source
        .slot_outcomes(p.shard_id())
        .into_iter()
        .map(|(first, outcomes)| (first, outcomes.to_string()))
        .collect();
    assert_eq!(records, [(4, "i4".to_owned())]);
}
