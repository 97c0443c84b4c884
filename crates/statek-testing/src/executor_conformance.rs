//! statek's conformance suite for
//! [`TenantExecutor`](statek_core::TenantExecutor) implementations: one
//! set of behaviours every executor statek ships passes
//! (`PgRunQueueExecutor` (statek-scheduler, feature `postgres`),
//! [`crate::InMemoryExecutor`]), exported so that your own executor can
//! run it too (as River's
//! `riverdrivertest.Exercise` for a driver).
//!
//! Implement [`Harness`] for your executor, then run [`exercise`] (every
//! case) or the cases one by one. Slots come from a
//! [`statek_scheduler::DurableFairScheduler`] over
//! the harness's reservation source ([`Harness::Source`]: an
//! [`crate::InMemoryReservations`] needs no database). What the cases
//! check: FIFO per tenant, priorities within a tenant and never across
//! tenants, tenant isolation, idle slots consumed, failures retried with
//! backoff then `failed`, in-flight runs not waited for, locked runs
//! skipped then contended, expired leases claimed again, batch claims per
//! slot in sequence order with their runs concurrent, 16 concurrent
//! tickers executing each run exactly once, and cost mode's debt slots
//! (or, for an executor that keeps no cost ledger, its refusal of a
//! cost-mode policy).
//!
//! ```no_run
//! use statek_testing::executor_conformance::{self, Harness};
//! # async fn example<MyHarness: Harness>() {
//! // In a #[tokio::test(flavor = "multi_thread")] of your crate:
//! executor_conformance::exercise::<MyHarness>().await;
//! # }
//! ```

// A test suite: its assertions panic, as in any test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use statek_policy::{TenantId, WeightedFairnessPolicy};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use statek_core::TenantTickOutcome;
use statek_scheduler::{DurableFairScheduler, FairnessMonitor, SchedulerOptions, TickOutcome};

use crate::harness::Probe;
pub use crate::harness::{Harness, Settings, Status, SuiteHandler};

fn tenant(name: &str) -> TenantId {
    TenantId::try_from(name).unwrap()
}

fn policy(weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    crate::policy("conformance-v1", weights)
}

/// One case's world: the harness, the suite's handler's probe, and a
/// scheduler reserving from the harness's source (the executor is under
/// test, not the reservation source).
struct Setup<H: Harness> {
    harness: H,
    probe: Arc<Probe>,
    scheduler: Arc<DurableFairScheduler<H::Executor, H::Source>>,
    shutdown: CancellationToken,
}

async fn setup<H: Harness>(weights: &[(&str, u32)], settings: Settings) -> Setup<H> {
    let probe = Probe::new();
    let (harness, executor) = H::new(SuiteHandler(probe.clone()), settings).await;
    let scheduler = DurableFairScheduler::register(
        harness.source(),
        policy(weights),
        executor,
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    Setup {
        harness,
        probe,
        scheduler: Arc::new(scheduler),
        shutdown: CancellationToken::new(),
    }
}

impl<H: Harness> Setup<H> {
    async fn tick(&self) -> TickOutcome {
        self.scheduler.tick(&self.shutdown).await.unwrap()
    }

    async fn next_sequence(&self) -> u64 {
        self.harness
            .next_sequence(self.scheduler.policy().shard_id())
            .await
    }
}

fn label(o: &TickOutcome) -> String {
    format!("{}:{}", o.tenant(), o.tenant_outcome().label())
}

fn executed_run(o: &TickOutcome) -> (Uuid, u32) {
    match o.tenant_outcome() {
        TenantTickOutcome::Executed(run) => (run.run_id, run.attempt),
        other => panic!("expected Executed, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The cases.

/// Each tenant's runs execute in enqueue order, whatever the other tenants
/// hold.
pub async fn fifo_per_tenant<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1), ("tenant-b", 1)], Settings::default()).await;
    for i in 0..3 {
        s.harness
            .enqueue(&tenant("tenant-a"), format!("a{i}").as_bytes(), 5)
            .await;
        s.harness
            .enqueue(&tenant("tenant-b"), format!("b{i}").as_bytes(), 5)
            .await;
    }
    let mut labels = Vec::new();
    for _ in 0..8 {
        labels.push(s.tick().await.tenant_outcome().label());
    }
    assert_eq!(
        labels,
        ["executed", "executed", "executed", "executed", "executed", "executed", "idle", "idle"]
    );
    assert_eq!(s.probe.payloads_of("tenant-a"), ["a0", "a1", "a2"]);
    assert_eq!(s.probe.payloads_of("tenant-b"), ["b0", "b1", "b2"]);
}

/// Within a tenant, the highest priority runs first, FIFO within one
/// priority; another tenant's higher priority never takes this tenant's
/// slot.
pub async fn priorities_order_a_tenant_and_never_cross_tenants<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1), ("tenant-b", 1)], Settings::default()).await;
    for (priority, label) in [
        (0, "a0-1"),
        (-5, "m5-1"),
        (9, "a9-1"),
        (0, "a0-2"),
        (100, "a100"),
        (-5, "m5-2"),
        (9, "a9-2"),
        (-100, "m100"),
    ] {
        s.harness
            .enqueue_at(&tenant("tenant-a"), label.as_bytes(), priority)
            .await;
    }
    for (priority, label) in [(-100, "b-low"), (100, "b-high")] {
        s.harness
            .enqueue_at(&tenant("tenant-b"), label.as_bytes(), priority)
            .await;
    }
    // Slots alternate a, b: 16 give tenant-a 8 and tenant-b 8 (2 runs).
    let mut labels = Vec::new();
    for _ in 0..16 {
        labels.push(s.tick().await.tenant_outcome().label());
    }
    assert_eq!(labels.iter().filter(|l| **l == "executed").count(), 10);
    assert_eq!(
        s.probe.payloads_of("tenant-a"),
        ["a100", "a9-1", "a9-2", "a0-1", "a0-2", "m5-1", "m5-2", "m100"]
    );
    assert_eq!(s.probe.payloads_of("tenant-b"), ["b-high", "b-low"]);
}

/// A tenant's slot only ever runs that tenant's runs, and a busy tenant
/// never gets an idle tenant's slot.
pub async fn tenant_isolation<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 3), ("tenant-b", 1)], Settings::default()).await;
    let mut owner = HashMap::new();
    for i in 0..10 {
        let id = s
            .harness
            .enqueue(&tenant("tenant-a"), format!("a{i}").as_bytes(), 5)
            .await;
        owner.insert(id, "tenant-a");
    }
    let only_b = s.harness.enqueue(&tenant("tenant-b"), b"b0", 5).await;
    owner.insert(only_b, "tenant-b");
    // A tenant outside the policy: never selected, never run.
    let outsiders = [
        s.harness.enqueue(&tenant("tenant-z"), b"z0", 5).await,
        s.harness.enqueue(&tenant("tenant-z"), b"z1", 5).await,
    ];
    let mut labels = Vec::new();
    for _ in 0..8 {
        let o = s.tick().await;
        if let TenantTickOutcome::Executed(run) = o.tenant_outcome() {
            assert_eq!(owner[&run.run_id], o.tenant().as_str(), "{o:?}");
        }
        labels.push(label(&o));
    }
    // b's second slot (sequence 6) finds b empty: consumed, not given to a.
    assert_eq!(
        labels,
        [
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:executed",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:idle",
            "tenant-a:executed",
        ]
    );
    let log = s.probe.log();
    assert_eq!(log.len(), 7);
    for e in &log {
        assert_eq!(owner[&e.run_id], e.tenant);
    }
    assert_eq!(s.harness.status(only_b).await.state, "completed");
    for id in outsiders {
        let status = s.harness.status(id).await;
        assert_eq!((status.state, status.attempt), ("available", 0));
    }
    assert_eq!(s.next_sequence().await, 8);
}

/// An empty queue reports Idle and its slot is consumed anyway.
pub async fn idle_tenant_consumes_its_slot<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1), ("tenant-b", 1)], Settings::default()).await;
    for i in 0..5 {
        s.harness
            .enqueue(&tenant("tenant-b"), format!("b{i}").as_bytes(), 5)
            .await;
    }
    let mut per_tenant: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for expected_sequence in 0..4 {
        let o = s.tick().await;
        assert_eq!(o.reservation().sequence(), expected_sequence);
        per_tenant
            .entry(o.tenant().to_string())
            .or_default()
            .push(o.tenant_outcome().label());
    }
    assert_eq!(per_tenant["tenant-a"], ["idle", "idle"]);
    assert_eq!(per_tenant["tenant-b"], ["executed", "executed"]);
    assert_eq!(s.probe.log().len(), 2);
    assert_eq!(s.next_sequence().await, 4);
    // Work for a is picked up at a's next slot.
    s.harness.enqueue(&tenant("tenant-a"), b"a0", 5).await;
    let labels = [label(&s.tick().await), label(&s.tick().await)];
    let mut sorted = labels.to_vec();
    sorted.sort();
    assert_eq!(sorted, ["tenant-a:executed", "tenant-b:executed"]);
}

/// Cost mode (docs/guarantees.md, "Cost mode: the bound"): an executor
/// that keeps the ledger ([`TenantExecutor::enforces_cost_fairness`](statek_core::TenantExecutor::enforces_cost_fairness))
/// makes every slot of a tenant in debt with a claimable run a debt slot
/// until its credits repay what its attempts cost; one that keeps none
/// is refused the policy before anything is reserved.
pub async fn cost_mode_debt_is_repaid_by_slots<H: Harness>() {
    use statek_core::TenantExecutor;
    use statek_policy::{CostFairness, FairnessUnit};
    let probe = Probe::new();
    let (harness, executor) = H::new(SuiteHandler(probe.clone()), Settings::default()).await;
    // q = 1, C_max = 3, default 3, b_cap = 1.
    let cost = CostFairness::new(1, 3, 3, 1).unwrap();
    let p = policy(&[("tenant-a", 1), ("tenant-b", 1)]).with_fairness(FairnessUnit::Cost(cost));
    let enforces = executor.enforces_cost_fairness();
    let registered = DurableFairScheduler::register(
        harness.source(),
        p.clone(),
        executor,
        SchedulerOptions::new(),
    )
    .await;
    if !enforces {
        assert!(
            matches!(
                &registered,
                Err(statek_scheduler::SchedulerError::UnsupportedFairness { shard })
                    if shard == "conformance-v1"
            ),
            "an executor without a ledger must be refused a cost-mode policy"
        );
        return;
    }
    let scheduler = registered.unwrap();
    let a = tenant("tenant-a");
    for _ in 0..3 {
        harness.enqueue(&a, b"cost=3", 1).await;
    }
    let shutdown = CancellationToken::new();
    let mut labels = Vec::new();
    for _ in 0..13 {
        labels.push(label(&scheduler.tick(&shutdown).await.unwrap()));
    }
    // a's balance after each of its slots (b never has a run: idle):
    // 0+1 claims, charged 3: −2; −1 debt; 0 claims: −3; −2, −1 debt;
    // 0 claims: −3; −2 with no run left: idle.
    assert_eq!(
        labels,
        [
            "tenant-a:executed",
            "tenant-b:idle",
            "tenant-a:debt",
            "tenant-b:idle",
            "tenant-a:executed",
            "tenant-b:idle",
            "tenant-a:debt",
            "tenant-b:idle",
            "tenant-a:debt",
            "tenant-b:idle",
            "tenant-a:executed",
            "tenant-b:idle",
            "tenant-a:idle",
        ]
    );
    assert_eq!(probe.log().len(), 3);
}

/// Ticks until the tenant's outcome is not Idle (the retry backoff running
/// out); how many Idle ticks that takes is timing, so it is not asserted.
async fn tick_until_busy<H: Harness>(s: &Setup<H>) -> TickOutcome {
    for _ in 0..200 {
        let o = s.tick().await;
        if o.tenant_outcome() != &TenantTickOutcome::Idle {
            return o;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the run never became claimable again");
}

/// A failing handler: ExecutionFailed, backoff (Idle meanwhile), retried
/// with the next attempt, `failed` after the last one.
pub async fn failing_handler_retries_then_fails<H: Harness>() {
    let settings = Settings {
        retry_initial: Duration::from_secs(1),
        retry_max: Duration::from_secs(2),
        ..Settings::default()
    };
    let backoff = settings.retry_initial;
    let s = setup::<H>(&[("tenant-a", 1)], settings).await;
    s.probe.fail.store(true, Ordering::SeqCst);
    let id = s.harness.enqueue(&tenant("tenant-a"), b"doomed", 3).await;
    let failed = |o: &TickOutcome| match o.tenant_outcome() {
        TenantTickOutcome::ExecutionFailed { run, error } => {
            (run.run_id, run.attempt, error.clone())
        }
        other => panic!("expected ExecutionFailed, got {other:?}"),
    };
    let no = "handler says no".to_owned();
    let first_started = std::time::Instant::now();
    assert_eq!(failed(&s.tick().await), (id, 1, no.clone()));
    assert_eq!(
        s.harness.status(id).await,
        Status {
            state: "available",
            attempt: 1,
            last_error: Some(no.clone()),
            attempt_costs: vec![None],
        }
    );
    // Backing off for 1 s from the failure: a slot ending within 1 s of
    // the failing tick's start finds the tenant idle. (A machine stalled
    // for a second may reach the retry instead; then only that is checked.)
    let next = s.tick().await;
    if first_started.elapsed() < backoff {
        assert_eq!(next.tenant_outcome(), &TenantTickOutcome::Idle);
        assert_eq!(failed(&tick_until_busy(&s).await), (id, 2, no.clone()));
    } else if next.tenant_outcome() == &TenantTickOutcome::Idle {
        assert_eq!(failed(&tick_until_busy(&s).await), (id, 2, no.clone()));
    } else {
        assert_eq!(failed(&next), (id, 2, no.clone()));
    }
    assert_eq!(failed(&tick_until_busy(&s).await), (id, 3, no.clone()));
    assert_eq!(
        s.harness.status(id).await,
        Status {
            state: "failed",
            attempt: 3,
            last_error: Some(no),
            attempt_costs: vec![None; 3],
        }
    );
    assert_eq!(s.tick().await.tenant_outcome(), &TenantTickOutcome::Idle);
    let attempts: Vec<u32> = s.probe.log().iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
}

/// Costs reported after the run (issue 25): the handler's cost is kept
/// with the attempt it belongs to, a failed attempt's as a completed
/// one's; an attempt that reports none keeps none; a report above
/// [`MAX_RUN_COST`](statek_core::MAX_RUN_COST) is kept as that. The suite's handler reports
/// the number after `cost=` in a payload.
pub async fn reported_costs_are_kept_with_their_attempts<H: Harness>() {
    let settings = Settings {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(20),
        ..Settings::default()
    };
    let s = setup::<H>(&[("tenant-a", 1)], settings).await;
    let a = tenant("tenant-a");
    s.probe.fail.store(true, Ordering::SeqCst);
    let retried = s.harness.enqueue(&a, b"cost=7", 2).await;
    assert!(matches!(
        s.tick().await.tenant_outcome(),
        TenantTickOutcome::ExecutionFailed { .. }
    ));
    let status = s.harness.status(retried).await;
    assert_eq!(
        (status.state, status.attempt_costs),
        ("available", vec![Some(7)])
    );
    s.probe.fail.store(false, Ordering::SeqCst);
    assert!(matches!(
        tick_until_busy(&s).await.tenant_outcome(),
        TenantTickOutcome::Executed(_)
    ));
    let status = s.harness.status(retried).await;
    assert_eq!(
        (status.state, status.attempt, status.attempt_costs),
        ("completed", 2, vec![Some(7), Some(7)])
    );
    let silent = s.harness.enqueue(&a, b"no cost", 1).await;
    let zero = s.harness.enqueue(&a, b"cost=0", 1).await;
    let huge = s.harness.enqueue(&a, b"cost=18446744073709551615", 1).await;
    for _ in 0..3 {
        assert!(matches!(
            s.tick().await.tenant_outcome(),
            TenantTickOutcome::Executed(_)
        ));
    }
    let costs = |status: Status| (status.state, status.attempt_costs);
    assert_eq!(
        costs(s.harness.status(silent).await),
        ("completed", vec![None])
    );
    assert_eq!(
        costs(s.harness.status(zero).await),
        ("completed", vec![Some(0)])
    );
    assert_eq!(
        costs(s.harness.status(huge).await),
        ("completed", vec![Some(1 << 40)])
    );
}

/// A run leased by a tick still in flight is not claimable: another tick
/// of the same tenant returns at once (Idle) instead of waiting for it.
pub async fn in_flight_run_is_not_waited_for<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1)], Settings::default()).await;
    s.probe.hold_first_attempts.store(true, Ordering::SeqCst);
    let id = s.harness.enqueue(&tenant("tenant-a"), b"slow", 5).await;
    let first = {
        let scheduler = s.scheduler.clone();
        let shutdown = s.shutdown.clone();
        tokio::spawn(async move { scheduler.tick(&shutdown).await.unwrap() })
    };
    s.probe.started.acquire().await.unwrap().forget();
    // The first tick is blocked in its handler until the gate opens, so
    // this tick returning proves it did not wait for the held run.
    let second = s.tick().await;
    assert_eq!(second.tenant_outcome(), &TenantTickOutcome::Idle);
    assert_eq!(second.reservation().sequence(), 1);
    assert_eq!(s.harness.status(id).await.state, "running");
    s.probe.gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first.reservation().sequence(), 0);
    assert_eq!(executed_run(&first), (id, 1));
    assert_eq!(s.tick().await.tenant_outcome(), &TenantTickOutcome::Idle);
    let status = s.harness.status(id).await;
    assert_eq!((status.state, status.attempt), ("completed", 1));
}

/// Runs locked by another session are skipped without waiting; when all
/// claimable runs are locked the slot reports Contended (and is consumed).
pub async fn locked_runs_are_skipped_then_contended<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1)], Settings::default()).await;
    let first = s.harness.enqueue(&tenant("tenant-a"), b"first", 5).await;
    let second = s.harness.enqueue(&tenant("tenant-a"), b"second", 5).await;
    let lock = s.harness.lock(first).await;
    let skipped = s.tick().await;
    assert_eq!(executed_run(&skipped), (second, 1));
    let contended = s.tick().await;
    assert_eq!(contended.tenant_outcome(), &TenantTickOutcome::Contended);
    assert_eq!(contended.reservation().sequence(), 1);
    s.harness.unlock(lock).await;
    assert_eq!(executed_run(&s.tick().await), (first, 1));
    assert_eq!(s.tick().await.tenant_outcome(), &TenantTickOutcome::Idle);
    assert_eq!(s.next_sequence().await, 4);
    assert_eq!(s.probe.payloads_of("tenant-a"), ["second", "first"]);
}

/// A lease that expires while its handler still runs (heartbeats off):
/// another tick claims the run with attempt 2 and completes it; the first
/// holder's completion is refused.
pub async fn an_expired_lease_is_claimed_again<H: Harness>() {
    let settings = Settings {
        lease: Duration::from_millis(300),
        heartbeat_every: None,
        ..Settings::default()
    };
    let s = setup::<H>(&[("tenant-a", 1)], settings).await;
    s.probe.hold_first_attempts.store(true, Ordering::SeqCst);
    let id = s.harness.enqueue(&tenant("tenant-a"), b"slow", 5).await;
    let first = {
        let scheduler = s.scheduler.clone();
        let shutdown = s.shutdown.clone();
        tokio::spawn(async move { scheduler.tick(&shutdown).await.unwrap() })
    };
    s.probe.started.acquire().await.unwrap().forget();
    // Wait out the lease (300 ms) with a wide margin.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = s.tick().await;
    assert_eq!(executed_run(&second), (id, 2));
    s.probe.gate.add_permits(1);
    let first = first.await.unwrap();
    match first.tenant_outcome() {
        TenantTickOutcome::ExecutionFailed { run, .. } => {
            assert_eq!((run.run_id, run.attempt), (id, 1))
        }
        other => panic!("expected ExecutionFailed, got {other:?}"),
    }
    let status = s.harness.status(id).await;
    assert_eq!((status.state, status.attempt), ("completed", 2));
}

/// 16 concurrent tickers over 1,000 runs of 4 tenants: every run executed
/// exactly once, with attempt 1, by its own tenant's slot; every
/// reservation consumed exactly once.
pub async fn sixteen_tickers_execute_each_run_once<H: Harness>() {
    const TENANTS: [&str; 4] = ["tenant-a", "tenant-b", "tenant-c", "tenant-d"];
    const RUNS_PER_TENANT: usize = 250;
    const TOTAL: usize = TENANTS.len() * RUNS_PER_TENANT;
    let weights: Vec<(&str, u32)> = TENANTS.iter().map(|t| (*t, 1)).collect();
    let s = setup::<H>(&weights, Settings::default()).await;
    let mut owner = HashMap::new();
    let tenants: Vec<TenantId> = TENANTS.iter().map(|t| tenant(t)).collect();
    for i in 0..RUNS_PER_TENANT {
        let payload = i.to_string().into_bytes();
        let ids = join_all(tenants.iter().map(|t| s.harness.enqueue(t, &payload, 5))).await;
        for (id, t) in ids.into_iter().zip(TENANTS) {
            owner.insert(id, t);
        }
    }
    assert_eq!(owner.len(), TOTAL);

    let executed = Arc::new(AtomicUsize::new(0));
    let tickers = (0..16).map(|_| {
        let scheduler = s.scheduler.clone();
        let shutdown = s.shutdown.clone();
        let executed = executed.clone();
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            while executed.load(Ordering::SeqCst) < TOTAL {
                let o = scheduler.tick(&shutdown).await.unwrap();
                if matches!(o.tenant_outcome(), TenantTickOutcome::Executed(_)) {
                    executed.fetch_add(1, Ordering::SeqCst);
                }
                outcomes.push(o);
            }
            outcomes
        })
    });
    let outcomes: Vec<TickOutcome> = join_all(tickers)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();

    // Every reservation consumed exactly once: sequences 0..n, contiguous.
    let n = outcomes.len() as u64;
    let mut sequences: Vec<u64> = outcomes
        .iter()
        .map(|o| o.reservation().sequence())
        .collect();
    sequences.sort_unstable();
    assert_eq!(sequences, (0..n).collect::<Vec<_>>());
    assert_eq!(s.next_sequence().await, n);

    let mut runs = HashSet::new();
    let mut others = BTreeMap::new();
    for o in &outcomes {
        match o.tenant_outcome() {
            TenantTickOutcome::Executed(run) => {
                assert_eq!(run.attempt, 1);
                assert_eq!(owner[&run.run_id], o.tenant().as_str());
                assert!(runs.insert(run.run_id), "run {} executed twice", run.run_id);
            }
            other => *others.entry(other.label()).or_insert(0) += 1,
        }
    }
    assert_eq!(runs.len(), TOTAL);
    assert!(
        others.keys().all(|k| *k == "idle" || *k == "contended"),
        "{others:?}"
    );
    let log = s.probe.log();
    assert_eq!(log.len(), TOTAL);
    assert_eq!(
        log.iter().map(|e| e.run_id).collect::<HashSet<_>>().len(),
        TOTAL
    );
    let ids: Vec<Uuid> = owner.keys().copied().collect();
    assert_eq!(
        s.harness.count_by_state(&ids).await,
        BTreeMap::from([(("completed", 1), TOTAL)])
    );

    // The monitor, fed in sequence order, sees the cycle a b c d. (Fed
    // ticker by ticker, the outcomes of one ticker could run thousands of
    // sequences ahead of another's on a loaded machine, past the monitor's
    // pending window; its own tests cover arrival out of order.)
    let mut in_order: Vec<_> = outcomes.iter().collect();
    in_order.sort_unstable_by_key(|o| o.reservation().sequence());
    let mut monitor = FairnessMonitor::new(&s.scheduler.policy());
    for o in in_order {
        monitor.observe(o);
    }
    let report = monitor.report();
    assert_eq!(
        (report.watermark, report.observed, report.pending),
        (n, n, 0)
    );
    assert!(report.is_fair());
    let policy = s.scheduler.policy();
    for row in &report.tenants {
        let selections = (0..n)
            .filter(|q| policy.tenant_for_slot(q % 4) == Some(&row.tenant))
            .count() as u64;
        assert_eq!(row.selections, selections);
        assert_eq!(row.executed, RUNS_PER_TENANT as u64);
        assert_eq!(row.gaps.histogram, vec![(4, selections - 1)]);
    }
}

/// The batch entry point: one call for 8 slots (policy a:3, b:1, cycle
/// a a b a): each slot claims at most one run of its own tenant, a
/// tenant's slots take its runs oldest first in sequence order, a locked
/// run is skipped (contended when nothing else is left) and slots beyond a
/// tenant's runs are idle; every slot has one outcome, in sequence order.
pub async fn a_batch_claims_per_slot_in_sequence_order<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 3), ("tenant-b", 1)], Settings::default()).await;
    let mut a_runs = Vec::new();
    for i in 0..5 {
        a_runs.push(
            s.harness
                .enqueue(&tenant("tenant-a"), format!("a{i}").as_bytes(), 5)
                .await,
        );
    }
    let b_locked = s.harness.enqueue(&tenant("tenant-b"), b"b0", 5).await;
    let lock = s.harness.lock(b_locked).await;
    let results = s.scheduler.tick_batch(8, &s.shutdown).await.unwrap();
    let outcomes: Vec<TickOutcome> = results.into_iter().map(Result::unwrap).collect();
    let sequences: Vec<u64> = outcomes
        .iter()
        .map(|o| o.reservation().sequence())
        .collect();
    assert_eq!(sequences, (0..8).collect::<Vec<_>>());
    let labels: Vec<String> = outcomes.iter().map(label).collect();
    assert_eq!(
        labels,
        [
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:contended",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-a:executed",
            "tenant-b:contended",
            "tenant-a:idle",
        ]
    );
    let claimed: Vec<(Uuid, u32)> = outcomes
        .iter()
        .filter(|o| o.tenant().as_str() == "tenant-a" && label(o).ends_with("executed"))
        .map(executed_run)
        .collect();
    assert_eq!(
        claimed,
        a_runs.iter().map(|id| (*id, 1)).collect::<Vec<_>>()
    );
    s.harness.unlock(lock).await;
    assert_eq!(s.harness.status(b_locked).await.state, "available");
    assert_eq!(s.next_sequence().await, 8);
}

/// The runs of one batch execute concurrently: all four handlers of a
/// 4-slot batch start while none has finished (their gate is closed).
pub async fn a_batch_runs_its_runs_concurrently<H: Harness>() {
    let s = setup::<H>(&[("tenant-a", 1), ("tenant-b", 1)], Settings::default()).await;
    s.probe.hold_first_attempts.store(true, Ordering::SeqCst);
    let mut ids = Vec::new();
    for t in ["tenant-a", "tenant-b", "tenant-a", "tenant-b"] {
        ids.push(s.harness.enqueue(&tenant(t), t.as_bytes(), 5).await);
    }
    let batch = {
        let scheduler = s.scheduler.clone();
        let shutdown = s.shutdown.clone();
        tokio::spawn(async move { scheduler.tick_batch(4, &shutdown).await.unwrap() })
    };
    // Four handlers running at once, none finished: the gate is closed.
    tokio::time::timeout(Duration::from_secs(30), s.probe.started.acquire_many(4))
        .await
        .expect("all four runs of the batch started")
        .unwrap()
        .forget();
    assert_eq!(s.probe.log().len(), 0);
    s.probe.gate.add_permits(4);
    let outcomes = batch.await.unwrap();
    let labels: Vec<String> = outcomes
        .iter()
        .map(|o| label(o.as_ref().unwrap()))
        .collect();
    assert_eq!(
        labels,
        [
            "tenant-a:executed",
            "tenant-b:executed",
            "tenant-a:executed",
            "tenant-b:executed",
        ]
    );
    for id in ids {
        assert_eq!(s.harness.status(id).await.state, "completed");
    }
}

/// The names of the cases, in the order [`exercise`] runs them.
pub const CASES: &[&str] = &[
    "fifo_per_tenant",
    "priorities_order_a_tenant_and_never_cross_tenants",
    "tenant_isolation",
    "idle_tenant_consumes_its_slot",
    "failing_handler_retries_then_fails",
    "reported_costs_are_kept_with_their_attempts",
    "in_flight_run_is_not_waited_for",
    "locked_runs_are_skipped_then_contended",
    "an_expired_lease_is_claimed_again",
    "sixteen_tickers_execute_each_run_once",
    "a_batch_claims_per_slot_in_sequence_order",
    "a_batch_runs_its_runs_concurrently",
    "cost_mode_debt_is_repaid_by_slots",
];

/// Runs every case against `H`'s executor, one after the other, each on a
/// fresh harness; a failing case panics with its assertion. Call it from
/// a `#[tokio::test(flavor = "multi_thread")]` (some cases tick
/// concurrently), or call the cases one by one to see them as separate
/// tests.
pub async fn exercise<H: Harness>() {
    fifo_per_tenant::<H>().await;
    priorities_order_a_tenant_and_never_cross_tenants::<H>().await;
    tenant_isolation::<H>().await;
    idle_tenant_consumes_its_slot::<H>().await;
    failing_handler_retries_then_fails::<H>().await;
    reported_costs_are_kept_with_their_attempts::<H>().await;
    in_flight_run_is_not_waited_for::<H>().await;
    locked_runs_are_skipped_then_contended::<H>().await;
    an_expired_lease_is_claimed_again::<H>().await;
    sixteen_tickers_execute_each_run_once::<H>().await;
    a_batch_claims_per_slot_in_sequence_order::<H>().await;
    a_batch_runs_its_runs_concurrently::<H>().await;
    cost_mode_debt_is_repaid_by_slots::<H>().await;
}
