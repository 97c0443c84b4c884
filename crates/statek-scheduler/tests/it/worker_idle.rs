//! When a Worker stops reserving, against a real PostgreSQL: the idle
//! threshold (one cycle of the live shard, also after a rollout), slots of
//! a capped or rate-limited tenant counted like idle ones, and the idle
//! probe's cap and rate-limit branches.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, PgScheduler, Run,
    RunError, RunHandler, RunResult, SchedulerOptions, TenantTickOutcome, TickOutcome, Worker,
    WorkerOptions,
};
use statek_store_pg::testing::{policy, TestDatabase};
use statek_store_pg::{NewRun, PgStore, TenantLimits};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// `tenant-a:3, tenant-b:1`: cycle `[a, a, b, a]`, L = 4.
fn v1() -> WeightedFairnessPolicy {
    policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

/// Holds its run until cancelled, or returns at once.
struct Handler {
    hold: bool,
}

impl RunHandler for Handler {
    async fn handle(&self, _run: &Run, cancel: CancellationToken) -> RunResult {
        if self.hold {
            cancel.cancelled().await;
            return Err(RunError::new("cancelled"));
        }
        Ok(Completed::new())
    }
}

type Scheduler = Arc<PgScheduler<PgRunQueueExecutor<Handler>>>;

async fn scheduler(store: &PgStore, hold: bool) -> Scheduler {
    let executor = PgRunQueueExecutor::new(store.clone(), Handler { hold }, ExecutorOptions::new());
    Arc::new(
        DurableFairScheduler::register(store.clone(), v1(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    )
}

/// One slot per batch, no notifications: a slot is reserved only once the
/// one before it started claiming, so the worker overshoots its idle
/// threshold by at most that one slot in flight.
fn options() -> WorkerOptions {
    WorkerOptions::new()
        .concurrency(4)
        .unwrap()
        .max_batch(1)
        .unwrap()
        .shutdown_grace(Duration::from_millis(100))
        .unwrap()
}

/// Waits until the shard's cursor has not moved for 2.5 s (longer than the
/// 1 s backoff cap: a worker that still reserved would move it) and
/// returns it.
async fn settled_cursor(store: &PgStore, shard: &SchedulerShardId) -> u64 {
    let mut last = store.next_sequence(shard).await.unwrap();
    for _ in 0..24 {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let now = store.next_sequence(shard).await.unwrap();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the cursor of {shard} still moves after 60 s: {last}");
}

/// Every outcome sent so far: (shard, sequence, outcome label).
fn drain(outcomes: &mut mpsc::UnboundedReceiver<TickOutcome>) -> Vec<(String, u64, &'static str)> {
    let mut seen = Vec::new();
    while let Ok(o) = outcomes.try_recv() {
        seen.push((
            o.reservation().shard().to_string(),
            o.reservation().sequence(),
            o.tenant_outcome().label(),
        ));
    }
    seen.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_threshold_follows_a_rollout_to_a_longer_cycle() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, false).await;
    // L = 40: tenant-a's one slot among tenant-c's 39.
    let v2 = policy("primary-v2", &[("tenant-a", 1), ("tenant-c", 39)]);
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options()).with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // Nothing to run: one cycle of v1 (4 slots, at most one more in
    // flight), then the worker backs off.
    let v1_cursor = settled_cursor(&store, v1().shard_id()).await;
    assert!((4..=5).contains(&v1_cursor), "v1 cursor {v1_cursor}");
    store.rollout(&v1(), &v2, None).await.unwrap();
    // The probe finds tenant-a's run (a tenant of v1 and v2): the worker
    // reserves on v1, meets the seal, follows to v2 and runs it there.
    let run = store
        .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
        .await
        .unwrap();
    let v2_cursor = settled_cursor(&store, v2.shard_id()).await;
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    let seen = drain(&mut outcomes);
    let on_v2: Vec<&str> = seen
        .iter()
        .filter(|(s, _, _)| s == "primary-v2")
        .map(|(_, _, label)| *label)
        .collect();
    assert_eq!(on_v2.len() as u64, v2_cursor, "{seen:?}");
    let executed = on_v2.iter().position(|l| *l == "executed").unwrap();
    assert_eq!(
        on_v2.iter().filter(|l| **l == "executed").count(),
        1,
        "{on_v2:?}"
    );
    // After the run: one full cycle of v2 came back idle (40 slots), not
    // v1's 4, before the worker backed off. A few more can come: the run's
    // outcome resets the streak when the run has finished, so the slots
    // decided in the meantime count from the reset on, and one slot more
    // can be in flight; fewer than a second cycle.
    let idle_after = &on_v2[executed + 1..];
    assert!(idle_after.iter().all(|l| *l == "idle"), "{on_v2:?}");
    assert!(
        (40..80).contains(&idle_after.len()),
        "{} idle slots after the run on v2: {on_v2:?}",
        idle_after.len()
    );
    assert_eq!(report.executed, 1, "{report:?}");
    let client = db.client().await;
    let claimed_on: Vec<String> = client
        .query(
            "SELECT shard_id FROM statek.run_attempts WHERE run_id = $1",
            &[&run.run_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("shard_id"))
        .collect();
    assert_eq!(claimed_on, ["primary-v2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_only_busy_tenant_is_capped_backs_off() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .set_tenant_limits(&a, &TenantLimits::new(Some(1), None).unwrap())
        .await
        .unwrap();
    for _ in 0..5 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![]))
            .await
            .unwrap();
    }
    // The handler holds its run: tenant-a stays at its cap of 1.
    let scheduler = scheduler(&store, true).await;
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options()).with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // Slot 0 (a) claims the run that then runs on; slots 1, 3, 4 (a) are
    // limited, slot 2 (b) idle: four slots without a run in a row, a cycle,
    // and the probe says no (a's cap is full, b has nothing): the worker
    // reserves nothing more although a has 4 runs waiting.
    let cursor = settled_cursor(&store, v1().shard_id()).await;
    assert!((5..=6).contains(&cursor), "cursor {cursor}");
    assert!(!store
        .any_claimable_runs(std::slice::from_ref(&a))
        .await
        .unwrap());
    let before_shutdown = drain(&mut outcomes);
    let labels: Vec<(u64, &str)> = before_shutdown.iter().map(|(_, q, l)| (*q, *l)).collect();
    assert_eq!(
        &labels[..4],
        [(1, "limited"), (2, "idle"), (3, "limited"), (4, "limited")],
        "{labels:?}"
    );
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert!(report.backoffs >= 2, "{report:?}");
    assert_eq!(
        report.limited,
        labels.iter().filter(|(_, l)| *l == "limited").count() as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_tenant_is_reserved_for_again_only_when_its_window_frees() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .set_tenant_limits(
            &a,
            &TenantLimits::new(None, Some("1/3s".parse().unwrap())).unwrap(),
        )
        .await
        .unwrap();
    let first = store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let second = store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let scheduler = scheduler(&store, false).await;
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let worker = Worker::new(Arc::clone(&scheduler), options()).with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // Both runs execute, the second once the 3 s window after the first
    // claim frees; in between the probe's rate branch says no, so the
    // worker reserves nothing for the waiting run.
    let mut executed = Vec::new();
    while executed.len() < 2 {
        let o = tokio::time::timeout(Duration::from_secs(30), outcomes.recv())
            .await
            .expect("an outcome within 30 s")
            .expect("the worker runs");
        if let TenantTickOutcome::Executed(run) = o.tenant_outcome() {
            executed.push((run.run_id, o.reservation().sequence()));
        }
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(
        executed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [first.run_id, second.run_id]
    );
    // Slot 0 runs the first; a cycle of slots without a run follows
    // (limited, idle, limited, limited; counted from when the first run's
    // outcome reset the streak, with one slot more in flight), then the
    // worker backs off for the rest of the window and reserves again when
    // the probe sees room: tenant-a's next slot is at most 2 further (its
    // bound). Within three cycles, where a worker reserving through the
    // window would be far beyond.
    let (s1, s2) = (executed[0].1, executed[1].1);
    assert_eq!(s1, 0);
    assert!((5..12).contains(&s2), "second run at sequence {s2}");
    // Database evidence: the two claims 3 s apart at least, and no
    // reservation between them was made in the middle of the window.
    let client = db.client().await;
    let claimed: Vec<std::time::SystemTime> = client
        .query(
            "SELECT claimed_at FROM statek.run_attempts ORDER BY claimed_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("claimed_at"))
        .collect();
    assert_eq!(claimed.len(), 2);
    let gap = claimed[1].duration_since(claimed[0]).unwrap();
    assert!(gap >= Duration::from_secs(3), "{gap:?}");
    let reserved_mid_window: i64 = client
        .query_one(
            "SELECT count(*) AS n FROM statek.scheduler_reservations
             WHERE reserved_at > $1::timestamptz + interval '1 second'
               AND reserved_at < $1::timestamptz + interval '3 seconds'",
            &[&claimed[0]],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(reserved_mid_window, 0);
    assert!(report.backoffs >= 2, "{report:?}");
}

/// Sleeps `0` before it completes its run.
struct Sleeps(Duration);

impl RunHandler for Sleeps {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        tokio::time::sleep(self.0).await;
        Ok(Completed::new())
    }
}

/// A run's outcome comes when it finishes, after the idle slots decided
/// behind its slot: its claim ends the idle streak, not its outcome. One
/// busy tenant holds 1 slot of L = 32, runs take 200 ms, and the worker
/// (16 executing runs, batches of one cycle) claims one run per batch
/// while the runs before it still execute: 31 idle slots per batch, never
/// a cycle of them in a row, so it never backs off while the busy tenant
/// has runs waiting (before this was fixed, two batches made a "cycle"
/// and it backed off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_ends_the_idle_streak_before_its_run_finishes() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let busy = tenant("busy");
    for _ in 0..40 {
        store
            .enqueue(&NewRun::new(busy.clone(), vec![]))
            .await
            .unwrap();
    }
    let policy = policy("sparse-v1", &[("busy", 1), ("quiet", 31)]);
    let executor = PgRunQueueExecutor::new(
        store.clone(),
        Sleeps(Duration::from_millis(200)),
        ExecutorOptions::new(),
    );
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    let options = WorkerOptions::new()
        .concurrency(16)
        .unwrap()
        .max_batch(32)
        .unwrap()
        .shutdown_grace(Duration::from_secs(5))
        .unwrap();
    let worker = Worker::new(Arc::clone(&scheduler), options);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // 16 runs start within the first batches and hold every permit for
    // 200 ms; stop while the busy tenant still has runs waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.backoffs, 0, "{report:?}");
    assert!(report.executed >= 16, "{report:?}");
    assert!(report.batches >= 16, "{report:?}");
}

/// The same with an outcome sink (which hears every slot one by one) and
/// a longer cycle (1 busy slot in L = 301), runs that return at once and a
/// backlog that outlasts the test: the Worker never backs off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_an_outcome_sink_does_not_back_off_while_work_waits() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let busy = tenant("busy");
    let runs: Vec<NewRun> = (0..3000)
        .map(|_| NewRun::new(busy.clone(), vec![]))
        .collect();
    store.enqueue_many(&runs).await.unwrap();
    let policy = policy("sparse-v1", &[("busy", 1), ("quiet", 300)]);
    let executor = PgRunQueueExecutor::new(
        store.clone(),
        Sleeps(Duration::ZERO),
        ExecutorOptions::new(),
    );
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    let (sink, mut outcomes) = mpsc::unbounded_channel();
    let heard = tokio::spawn(async move {
        let mut n = 0_u64;
        while outcomes.recv().await.is_some() {
            n += 1;
        }
        n
    });
    let worker = Worker::new(Arc::clone(&scheduler), WorkerOptions::new())
        .with_notifications(store.listen_for_runs().await.unwrap())
        .with_outcome_sink(sink);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.backoffs, 0, "{report:?}");
    assert!(report.executed > 0 && report.executed < 3000, "{report:?}");
    assert_eq!(heard.await.unwrap(), report.ticks);
}
