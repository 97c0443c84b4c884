//! The worker loop against a real PostgreSQL: idle backoff and wake-up,
//! graceful shutdown, leases with and without heartbeats.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, PgScheduler, Run,
    RunError, RunHandler, RunResult, SchedulerError, SchedulerOptions, SlotBatch, SlotTickets,
    TenantExecutor, TenantTickOutcome, Worker, WorkerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{ClaimOutcome, NewRun, PgStore};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// Sleeps `work` unless cancelled; records whether it was cancelled.
#[derive(Debug, Default)]
struct Sleepy {
    work: Duration,
    runs: AtomicU32,
    cancelled_at: Mutex<Option<Instant>>,
}

impl RunHandler for Sleepy {
    async fn handle(&self, _run: &Run, cancel: CancellationToken) -> RunResult {
        self.runs.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            _ = tokio::time::sleep(self.work) => Ok(Completed::new()),
            _ = cancel.cancelled() => {
                *self.cancelled_at.lock().unwrap() = Some(Instant::now());
                Err(RunError::new("cancelled"))
            }
        }
    }
}

async fn scheduler(
    store: &PgStore,
    handler: Sleepy,
    executor: ExecutorOptions,
) -> Arc<PgScheduler<PgRunQueueExecutor<Sleepy>>> {
    let executor = PgRunQueueExecutor::new(store.clone(), handler, executor);
    Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn an_idle_fleet_backs_off_and_wakes_on_notify() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Sleepy::default(), ExecutorOptions::new()).await;
    let options = WorkerOptions::new().concurrency(4).unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options)
        .with_notifications(store.listen_for_runs().await.unwrap())
        .with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));

    // One lap (L = 4, one batch of 4 slots: 4 free permits) finds everyone
    // idle; from then on the worker reserves nothing while the probe says
    // no tenant of the policy has claimable work, even with runs of a
    // tenant outside the policy in the queue.
    store
        .enqueue(&NewRun::new(tenant("not-in-policy"), vec![]))
        .await
        .unwrap();
    let mut first_lap = Vec::new();
    while first_lap.len() < 4 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        first_lap.push(outcome.tenant_outcome().label());
    }
    assert_eq!(first_lap, ["idle"; 4]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_reservations = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    eprintln!("idle: {idle_reservations} reservations after the first lap and 10 s");
    assert_eq!(idle_reservations, 4);
    assert!(outcomes.try_recv().is_err());

    // A run for the light tenant: the notification wakes the loops.
    let enqueued_at = Instant::now();
    let run = store
        .enqueue(&NewRun::new(tenant("tenant-b"), vec![]))
        .await
        .unwrap();
    // Read after the insert, so at least the cursor at the notification.
    let cursor = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    let (latency, sequence) = loop {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        if let TenantTickOutcome::Executed(executed) = outcome.tenant_outcome() {
            assert_eq!(executed.run_id, run.run_id);
            break (enqueued_at.elapsed(), outcome.reservation().sequence());
        }
    };
    eprintln!("wake-up: executed after {latency:?}, at sequence {sequence} (cursor {cursor})");
    // The woken loops reserve on without backing off, so tenant-b's next
    // slot (bound 4) runs it: within 4 reservations of the cursor.
    assert!(
        sequence < cursor + 4,
        "sequence {sequence}, cursor {cursor}"
    );
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert!(report.wakeups >= 1, "{report:?}");
    // 10 ms doubling to 1 s: at least 12 sleeps in the 10 idle seconds.
    assert!(report.backoffs >= 12, "{report:?}");
    assert_eq!(report.executed, 1);
}

#[tokio::test]
async fn shutdown_lets_running_handlers_finish_within_the_grace() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let handler = Sleepy {
        work: Duration::from_millis(500),
        ..Sleepy::default()
    };
    let scheduler = scheduler(&store, handler, ExecutorOptions::new()).await;
    store
        .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
        .await
        .unwrap();
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .shutdown_grace(Duration::from_secs(20))
        .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(Arc::clone(&scheduler), options).run(shutdown.clone()));
    while scheduler.executor().handler().runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 1, "{report:?}");
    assert_eq!(
        *scheduler.executor().handler().cancelled_at.lock().unwrap(),
        None
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}

#[tokio::test]
async fn after_the_grace_running_handlers_are_cancelled_and_released() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let handler = Sleepy {
        work: Duration::from_secs(600),
        ..Sleepy::default()
    };
    let scheduler = scheduler(&store, handler, ExecutorOptions::new()).await;
    store
        .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
        .await
        .unwrap();
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .shutdown_grace(Duration::from_millis(100))
        .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(Arc::clone(&scheduler), options).run(shutdown.clone()));
    while scheduler.executor().handler().runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!((report.executed, report.cancelled), (0, 1), "{report:?}");
    assert!(scheduler
        .executor()
        .handler()
        .cancelled_at
        .lock()
        .unwrap()
        .is_some());
    // Released at once (no backoff), attempt counted.
    match store
        .claim_run(&tenant("tenant-a"), Duration::from_secs(30))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(run) => assert_eq!(run.attempt, 2),
        other => panic!("expected the released run, got {other:?}"),
    }
}

#[tokio::test]
async fn heartbeats_keep_a_long_run_from_being_claimed_twice() {
    let db = TestDatabase::create().await;
    let store = db.store();
    // Work for two leases, heartbeats every 1/15 of a lease: only a stall
    // of most of a lease (over 2 s) could let the lease lapse on a loaded
    // machine, and the test is about the heartbeat, not the margin.
    let handler = Sleepy {
        work: Duration::from_secs(6),
        ..Sleepy::default()
    };
    let lease = ExecutorOptions::new()
        .lease(Duration::from_secs(3))
        .unwrap()
        .heartbeat_every(Some(Duration::from_millis(200)))
        .unwrap();
    let first = scheduler(&store, handler, lease).await;
    let second = scheduler(&db.store(), Sleepy::default(), lease).await;
    store
        .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let long = tokio::spawn({
        let first = Arc::clone(&first);
        let shutdown = shutdown.clone();
        async move { first.tick(&shutdown).await }
    });
    while first.executor().handler().runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Meanwhile another replica keeps ticking the same shard.
    let mut others = Vec::new();
    while !long.is_finished() {
        let outcome = second.tick(&shutdown).await.unwrap();
        others.push(outcome.tenant_outcome().label());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outcome = long.await.unwrap().unwrap();
    assert!(
        matches!(outcome.tenant_outcome(), TenantTickOutcome::Executed(run) if run.attempt == 1)
    );
    assert!(!others.is_empty());
    assert!(others.iter().all(|l| *l == "idle"), "{others:?}");
    assert_eq!(second.executor().handler().runs.load(Ordering::SeqCst), 0);
    assert_eq!(first.executor().handler().runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_heartbeats_the_handler_is_cancelled_before_anyone_can_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let handler = Sleepy {
        work: Duration::from_secs(600),
        ..Sleepy::default()
    };
    let no_heartbeats = ExecutorOptions::new()
        .lease(Duration::from_millis(500))
        .unwrap()
        .heartbeat_every(None)
        .unwrap();
    let first = scheduler(&store, handler, no_heartbeats).await;
    store
        .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let long = tokio::spawn({
        let first = Arc::clone(&first);
        let shutdown = shutdown.clone();
        async move { first.tick(&shutdown).await }
    });
    while first.executor().handler().runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Another claimer tries until it gets the run (after the lease expires).
    let other = db.store();
    let claimed_at = loop {
        if let ClaimOutcome::Claimed(run) = other
            .claim_run(&tenant("tenant-a"), Duration::from_secs(30))
            .await
            .unwrap()
        {
            assert_eq!(run.attempt, 2);
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let cancelled_at = first
        .executor()
        .handler()
        .cancelled_at
        .lock()
        .unwrap()
        .expect("the handler was cancelled");
    assert!(cancelled_at < claimed_at);
    // The first executor's failure is fenced: the run now belongs to the other.
    let outcome = long.await.unwrap().unwrap();
    assert!(
        matches!(
            outcome.tenant_outcome(),
            TenantTickOutcome::ExecutionFailed { .. }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn the_worker_fails_runs_abandoned_on_their_last_attempt() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Sleepy::default(), ExecutorOptions::new()).await;
    let abandoned = store
        .enqueue(&NewRun::new(tenant("tenant-b"), vec![]).max_attempts(1))
        .await
        .unwrap();
    // A worker elsewhere claimed it and died.
    let claimed = store
        .claim_run(&tenant("tenant-b"), Duration::from_millis(50))
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimOutcome::Claimed(_)));
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .maintenance_every(Duration::from_millis(200))
        .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(Arc::clone(&scheduler), options).run(shutdown.clone()));
    while store.count_live_runs().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT state, last_error FROM statek.runs WHERE run_id = $1",
            &[&abandoned.run_id],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("failed".into(), "lease expired".into())
    );
}

/// With batches of at most 8 slots and 2 permits, the worker drains both
/// tenants' queues; every run is executed exactly once and the
/// reservations form one contiguous range, every slot with one outcome.
#[tokio::test]
async fn a_batching_worker_executes_every_run_once() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Sleepy::default(), ExecutorOptions::new()).await;
    for i in 0..30 {
        let tenant = if i % 3 == 0 { "tenant-b" } else { "tenant-a" };
        store
            .enqueue(&NewRun::new(self::tenant(tenant), vec![]))
            .await
            .unwrap();
    }
    let options = WorkerOptions::new()
        .concurrency(2)
        .unwrap()
        .max_batch(8)
        .unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options).with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let mut executed = std::collections::BTreeSet::new();
    while executed.len() < 30 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        if let TenantTickOutcome::Executed(run) = outcome.tenant_outcome() {
            assert!(executed.insert(run.run_id), "run executed twice");
        }
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 30);
    assert_eq!(
        scheduler.executor().handler().runs.load(Ordering::SeqCst),
        30
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
    let reserved = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    assert_eq!(report.ticks, reserved, "{report:?}");
    assert!(report.batches >= reserved.div_ceil(8), "{report:?}");
    let rows = store
        .reservations(scheduler.policy().shard_id(), 0, 10_000)
        .await
        .unwrap();
    let sequences: Vec<u64> = rows.iter().map(|r| r.sequence()).collect();
    assert_eq!(sequences, (0..reserved).collect::<Vec<_>>());
}

/// Counts the handlers running at once; each takes 300 ms.
#[derive(Debug, Default)]
struct Overlap {
    running: AtomicU32,
    most: AtomicU32,
}

impl RunHandler for Overlap {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(Completed::new())
    }
}

/// The runs a batch claims execute concurrently, up to the worker's
/// concurrency and never beyond: 24 runs of 300 ms with 8 permits run 8
/// at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_runs_execute_concurrently_up_to_the_concurrency() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let executor =
        PgRunQueueExecutor::new(store.clone(), Overlap::default(), ExecutorOptions::new());
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    for i in 0..24 {
        let t = if i % 4 == 0 { "tenant-b" } else { "tenant-a" };
        store
            .enqueue(&NewRun::new(tenant(t), vec![]))
            .await
            .unwrap();
    }
    let options = WorkerOptions::new().concurrency(8).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(Arc::clone(&scheduler), options).run(shutdown.clone()));
    while store.count_live_runs().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 24, "{report:?}");
    assert_eq!(
        scheduler.executor().handler().most.load(Ordering::SeqCst),
        8
    );
}

/// Reports `Contended` for every slot; in the first batch of at least 4
/// slots, its first slot holds its permit until released (shutdown comes
/// meanwhile), then the rest of the batch goes through the protocol.
struct BlocksInABatch {
    calls_after_shutdown: AtomicU32,
    blocked_batch: Mutex<Option<(u64, usize)>>,
    blocked: tokio::sync::Notify,
    release: tokio::sync::Notify,
    shutdown: CancellationToken,
}

impl TenantExecutor for BlocksInABatch {
    type Error = Transient;

    async fn execute_one(
        &self,
        _tenant: &TenantId,
        _shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, Transient> {
        if self.shutdown.is_cancelled() {
            self.calls_after_shutdown.fetch_add(1, Ordering::SeqCst);
        }
        Ok(TenantTickOutcome::Contended)
    }

    async fn execute_batch<'a>(
        &'a self,
        batch: SlotBatch<'a, Transient>,
        mut tickets: SlotTickets<'a, Transient>,
    ) {
        let slots = batch.slots();
        let first_big = slots.len() >= 4 && {
            let mut blocked = self.blocked_batch.lock().unwrap();
            blocked.is_none() && {
                *blocked = Some((slots[0].sequence, slots.len()));
                true
            }
        };
        if !first_big {
            return statek_scheduler::execute_each(self, batch, tickets).await;
        }
        let Some(permits) = batch.permits(1).await else {
            return tickets.cancel_rest();
        };
        let first = tickets.ticket().expect("a batch of 4 slots has a first");
        batch.decided(1);
        self.blocked.notify_one();
        self.release.notified().await;
        first.report(Ok(TenantTickOutcome::Contended));
        drop(permits);
        // The rest: the replica is stopping, so no permit is given.
        assert!(batch.permits(1).await.is_none());
        tickets.cancel_rest();
    }

    fn is_retryable(_: &Transient) -> bool {
        true
    }
}

/// Shutdown in the middle of a batch: the first slot of a batch holds the
/// only permit when shutdown comes, so the slots after it, reserved but not
/// claimed for, are consumed unused and reported `cancelled`, as is any
/// batch reserved behind it; no claim starts after shutdown, and every
/// reserved slot has exactly one outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_in_the_middle_of_a_batch_consumes_its_unclaimed_slots() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let shutdown = CancellationToken::new();
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy(),
            BlocksInABatch {
                calls_after_shutdown: AtomicU32::new(0),
                blocked_batch: Mutex::new(None),
                blocked: tokio::sync::Notify::new(),
                release: tokio::sync::Notify::new(),
                shutdown: shutdown.clone(),
            },
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .idle_threshold(1000)
        .unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options).with_outcome_sink(sink);
    let running = tokio::spawn(worker.run(shutdown.clone()));
    scheduler.executor().blocked.notified().await;
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    scheduler.executor().release.notify_one();
    let report = running.await.unwrap().unwrap();
    let (first, len) = scheduler.executor().blocked_batch.lock().unwrap().unwrap();
    let reserved = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    let mut labels = BTreeMap::new();
    while let Ok(outcome) = outcomes.try_recv() {
        labels.insert(
            outcome.reservation().sequence(),
            outcome.tenant_outcome().label(),
        );
    }
    // One outcome per reserved slot, in the sink and in the report.
    assert_eq!(
        labels.keys().copied().collect::<Vec<_>>(),
        (0..reserved).collect::<Vec<_>>()
    );
    assert_eq!(report.ticks, reserved, "{report:?}");
    // Before the blocked batch: contended; its first slot contended; every
    // later slot (the rest of it, and any batch reserved behind it)
    // cancelled.
    let expected: BTreeMap<u64, &str> = (0..reserved)
        .map(|s| (s, if s <= first { "contended" } else { "cancelled" }))
        .collect();
    assert_eq!(labels, expected);
    assert!(reserved >= first + u64::try_from(len).unwrap());
    assert_eq!(report.cancelled, reserved - first - 1);
    assert_eq!(
        scheduler
            .executor()
            .calls_after_shutdown
            .load(Ordering::SeqCst),
        0
    );
}

/// Fails every third run it is given (by payload), succeeds otherwise.
#[derive(Debug, Default)]
struct EveryThirdFails {
    calls: AtomicU32,
}

impl RunHandler for EveryThirdFails {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if run.payload.first().is_some_and(|b| b % 3 == 0) {
            Err(RunError::new(format!("run {} failed", run.payload[0])))
        } else {
            Ok(Completed::new())
        }
    }
}

/// A handler error in the middle of a batch fails that run alone: it is
/// recorded `failed` (one attempt) with its error, every other run of the
/// batch completes, and each slot has exactly one outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_error_in_a_batch_fails_only_its_run() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let executor = PgRunQueueExecutor::new(
        store.clone(),
        EveryThirdFails::default(),
        ExecutorOptions::new(),
    );
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    for i in 0..30u8 {
        let t = if i % 2 == 0 { "tenant-a" } else { "tenant-b" };
        store
            .enqueue(&NewRun::new(tenant(t), vec![i]).max_attempts(1))
            .await
            .unwrap();
    }
    let options = WorkerOptions::new().concurrency(8).unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options).with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let (mut executed, mut failed) = (0, 0);
    while executed + failed < 30 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        match outcome.tenant_outcome() {
            TenantTickOutcome::Executed(_) => executed += 1,
            TenantTickOutcome::ExecutionFailed { error, .. } => {
                assert!(error.ends_with("failed"), "{error}");
                failed += 1;
            }
            _ => {}
        }
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!((executed, failed), (20, 10));
    assert_eq!((report.executed, report.execution_failed), (20, 10));
    let client = db.client().await;
    let states: Vec<(String, i64)> = client
        .query(
            "SELECT state, count(*) FROM statek.runs GROUP BY state ORDER BY state",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(states, [("completed".into(), 20), ("failed".into(), 10)]);
    let errors: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs
             WHERE state = 'failed' AND last_error = 'run ' || get_byte(payload, 0) || ' failed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(errors, 10);
    let reserved = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    assert_eq!(report.ticks, reserved, "{report:?}");
}

/// An executor that fails transiently on its 5th call and reports
/// `Contended` otherwise.
struct FifthCallFails {
    calls: AtomicU32,
}

#[derive(Debug, thiserror::Error)]
#[error("transient executor failure")]
struct Transient;

impl TenantExecutor for FifthCallFails {
    type Error = Transient;

    async fn execute_one(
        &self,
        _tenant: &TenantId,
        _shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, Transient> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 4 {
            Err(Transient)
        } else {
            Ok(TenantTickOutcome::Contended)
        }
    }

    fn is_retryable(_: &Transient) -> bool {
        true
    }
}

/// An executor error for one slot of a batch costs that slot only: every
/// other slot's outcome reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_error_in_a_batch_costs_only_its_slot() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy(),
            FifthCallFails {
                calls: AtomicU32::new(0),
            },
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let results = scheduler.tick_batch(16, &shutdown).await.unwrap();
    let summary: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(o) => format!(
                "{}:{}",
                o.reservation().sequence(),
                o.tenant_outcome().label()
            ),
            Err(SchedulerError::Executor {
                sequence,
                retryable,
                ..
            }) => format!("{sequence}:error retryable={retryable}"),
            Err(other) => format!("unexpected {other:?}"),
        })
        .collect();
    let expected: Vec<String> = (0..16)
        .map(|s| {
            if s == 4 {
                "4:error retryable=true".to_owned()
            } else {
                format!("{s}:contended")
            }
        })
        .collect();
    assert_eq!(summary, expected);

    // Through a Worker (a second replica, its executor fresh, so its 5th
    // slot fails: sequence 16 + 4): every other slot reaches the sink, the
    // failure counts as one transient error.
    let replica = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy(),
            FifthCallFails {
                calls: AtomicU32::new(0),
            },
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .max_batch(16)
        .unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&replica), options).with_outcome_sink(sink);
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let mut sequences = Vec::new();
    while sequences.len() < 63 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        sequences.push(outcome.reservation().sequence());
    }
    stop.cancel();
    let report = running.await.unwrap().unwrap();
    while let Ok(outcome) = outcomes.try_recv() {
        sequences.push(outcome.reservation().sequence());
    }
    assert_eq!(report.transient_errors, 1, "{report:?}");
    let reserved = store
        .next_sequence(replica.policy().shard_id())
        .await
        .unwrap();
    let expected: Vec<u64> = (16..reserved).filter(|s| *s != 20).collect();
    assert_eq!(sequences, expected);
    // Every consumed slot is a tick, the failed one too.
    assert_eq!(report.ticks, reserved - 16, "{report:?}");
}

#[tokio::test]
async fn notifications_for_tenants_outside_the_policy_do_not_wake_an_idle_worker() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Sleepy::default(), ExecutorOptions::new()).await;
    let options = WorkerOptions::new().concurrency(4).unwrap();
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options)
        .with_notifications(store.listen_for_runs().await.unwrap())
        .with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // The first lap (L = 4) comes back idle; then the worker backs off.
    for _ in 0..4 {
        let outcome = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome")
            .expect("worker running");
        assert_eq!(outcome.tenant_outcome().label(), "idle");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    assert_eq!(before, 4);
    // Runs of a tenant of another shard's policy: each notifies
    // `statek_runs`, but no slot of this policy could run them.
    for _ in 0..5 {
        store
            .enqueue(&NewRun::new(tenant("other-shard-tenant"), vec![]))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = store
        .next_sequence(scheduler.policy().shard_id())
        .await
        .unwrap();
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!((after, report.wakeups), (4, 0), "{report:?}");
}

/// Claims the first slot of its first batch (a run that sleeps 10 ms),
/// then, for the rest of that batch, makes a slow claim (a claim
/// statement waiting on a lock, a slow server) that waits up to 3 s for
/// the run claimed before it to finish.
#[derive(Default)]
struct SlowSecondClaim {
    claims: AtomicU32,
    run_finished: tokio::sync::Notify,
    /// Whether the run finished while the slow claim was under way.
    finished_during_claim: Mutex<Option<bool>>,
}

impl TenantExecutor for SlowSecondClaim {
    type Error = Transient;

    async fn execute_one(
        &self,
        _tenant: &TenantId,
        _shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, Transient> {
        Ok(TenantTickOutcome::Idle)
    }

    async fn execute_batch<'a>(
        &'a self,
        batch: SlotBatch<'a, Transient>,
        tickets: SlotTickets<'a, Transient>,
    ) {
        statek_scheduler::claim_and_run(
            batch,
            tickets,
            |_| true,
            |slots: &[statek_scheduler::BatchSlot], _max_runs: usize| {
                let n = slots.len();
                async move {
                    let call = self.claims.fetch_add(1, Ordering::SeqCst);
                    if call == 0 {
                        return Ok(vec![statek_scheduler::SlotStart::Claimed(())]);
                    }
                    if call == 1 {
                        // Generous: a correct Worker finishes the 10 ms
                        // run at once; only a broken one waits it out.
                        let finished = tokio::time::timeout(
                            Duration::from_secs(30),
                            self.run_finished.notified(),
                        )
                        .await
                        .is_ok();
                        *self.finished_during_claim.lock().unwrap() = Some(finished);
                    }
                    Ok(vec![statek_scheduler::SlotStart::Unclaimed {
                        outcome: statek_scheduler::Unclaimed::Idle,
                        slots: n,
                    }])
                }
            },
            |(): (), permit| async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(permit);
                self.run_finished.notify_one();
                Ok(TenantTickOutcome::Contended)
            },
        )
        .await;
    }

    fn is_retryable(_: &Transient) -> bool {
        true
    }
}

/// A run claimed for a batch keeps executing while the batch claims for
/// its later slots: it never waits for another claim of its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_run_executes_while_its_batch_claims_for_later_slots() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy(),
            SlowSecondClaim::default(),
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    let options = WorkerOptions::new().concurrency(4).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(Worker::new(Arc::clone(&scheduler), options).run(shutdown.clone()));
    let finished = loop {
        if let Some(finished) = *scheduler.executor().finished_during_claim.lock().unwrap() {
            break finished;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert!(
        finished,
        "the run claimed for slot 0 did not execute while the batch claimed for its later slots"
    );
}

/// A Worker meets a rollout mid-run: it follows the chain without a
/// restart, its outcomes carry the successor's shard from the seam on, and
/// a tenant that only the successor schedules gets its slots (its
/// notification wakes the Worker once it is in the live policy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_follows_a_rollout_without_a_restart() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(
        &store,
        Sleepy {
            work: Duration::from_millis(1),
            ..Sleepy::default()
        },
        ExecutorOptions::new(),
    )
    .await;
    let v2 = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v2").unwrap(),
        [
            TenantFairnessWeight::new(tenant("tenant-a"), 1).unwrap(),
            TenantFairnessWeight::new(tenant("tenant-c"), 1).unwrap(),
        ],
    )
    .unwrap();
    for _ in 0..200 {
        store
            .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
            .await
            .unwrap();
    }
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(
        Arc::clone(&scheduler),
        WorkerOptions::new().concurrency(4).unwrap(),
    )
    .with_notifications(store.listen_for_runs().await.unwrap())
    .with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let mut seen: Vec<(String, u64, String)> = Vec::new();
    async fn next(
        outcomes: &mut mpsc::UnboundedReceiver<statek_scheduler::TickOutcome>,
    ) -> (String, u64, String) {
        let o = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome within 30 s")
            .expect("the worker runs");
        (
            o.reservation().shard().to_string(),
            o.reservation().sequence(),
            o.tenant().to_string(),
        )
    }
    while seen.iter().filter(|(s, _, _)| s == "primary-v1").count() < 20 {
        seen.push(next(&mut outcomes).await);
    }
    let rollout = store.rollout(&policy(), &v2, None).await.unwrap();
    // tenant-c exists only in v2.
    for _ in 0..20 {
        store
            .enqueue(&NewRun::new(tenant("tenant-c"), vec![]))
            .await
            .unwrap();
    }
    while seen
        .iter()
        .filter(|(s, _, t)| s == "primary-v2" && t == "tenant-c")
        .count()
        < 10
    {
        seen.push(next(&mut outcomes).await);
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    while let Ok(o) = outcomes.try_recv() {
        seen.push((
            o.reservation().shard().to_string(),
            o.reservation().sequence(),
            o.tenant().to_string(),
        ));
    }
    assert_eq!(scheduler.policy().shard_id(), v2.shard_id());
    // Every slot of v1 is below the seal, every slot of v2 from 0 on.
    let n = rollout.sealed_at_sequence();
    let mut v1_slots: Vec<u64> = seen
        .iter()
        .filter(|(s, _, _)| s == "primary-v1")
        .map(|(_, q, _)| *q)
        .collect();
    v1_slots.sort_unstable();
    assert_eq!(v1_slots, (0..n).collect::<Vec<_>>());
    let mut v2_slots: Vec<u64> = seen
        .iter()
        .filter(|(s, _, _)| s == "primary-v2")
        .map(|(_, q, _)| *q)
        .collect();
    v2_slots.sort_unstable();
    assert_eq!(v2_slots, (0..v2_slots.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        store.next_sequence(v2.shard_id()).await.unwrap(),
        v2_slots.len() as u64
    );
    assert_eq!(report.transient_errors, 0, "{report:?}");
    assert_eq!(report.ticks, seen.len() as u64, "{report:?}");
}
