//! Cost mode (docs/guarantees.md, "Cost mode: the bound") on the executor
//! that keeps the ledger, statek-testing's `InMemoryExecutor`: every slot's
//! outcome and the balances written out by hand; the refusal by an
//! executor that keeps none. Needs no `STATEK_TEST_DATABASE_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;

use statek_policy::{CostFairness, FairnessUnit, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, Run, RunError, RunResult, SchedulerError, SchedulerOptions,
    TenantExecutor, TenantTickOutcome, Worker, WorkerOptions,
};
use statek_store_pg::testing::policy;
use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations};
use tokio_util::sync::CancellationToken;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// Reports the cost its payload names (`cost=N`), or none.
async fn costed(run: Run, _cancel: CancellationToken) -> RunResult {
    let payload = String::from_utf8(run.payload.clone()).unwrap();
    Ok(match payload.strip_prefix("cost=") {
        Some(n) => Completed::with_cost(n.parse().unwrap()),
        None => Completed::new(),
    })
}

/// `a` and `b`, weight 1 each: the cycle is a, b, a, b, …; q = 2,
/// C_max = 10, default 6, b_cap = 4.
fn cost_policy() -> WeightedFairnessPolicy {
    policy("primary-v1", &[("a", 1), ("b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap()))
}

/// One tick at a time (a batch of one each; every run finishes, and is
/// charged, before the next slot): each slot's outcome and both balances
/// as computed by hand below.
#[tokio::test]
async fn each_slot_follows_the_ledger_written_out_by_hand() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(costed, InMemoryExecutorOptions::new());
    let (a, b) = (tenant("a"), tenant("b"));
    for payload in ["cost=7", "cost=1", "cost=1", "cost=1"] {
        executor.enqueue(&a, payload).unwrap();
    }
    for payload in ["none", "cost=20"] {
        executor.enqueue(&b, payload).unwrap();
    }
    let p = cost_policy();
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(executor.cost_balance(&a), None);
    let shutdown = CancellationToken::new();
    let mut seen = Vec::new();
    for _ in 0..16 {
        let outcome = scheduler.tick(&shutdown).await.unwrap();
        seen.push((
            outcome.reservation().sequence(),
            outcome.tenant().to_string(),
            outcome.tenant_outcome().label(),
            executor.cost_balance(&a).unwrap(),
            executor.cost_balance(&b).unwrap(),
        ));
    }
    // (sequence, tenant, outcome, balance of a, balance of b) after the
    // slot and the finish of what it claimed:
    let expected: Vec<(u64, String, &str, i128, i128)> = [
        (0, "a", "executed", -5, 0),   // 0 + 2 = 2, claims; charged 7
        (1, "b", "executed", -5, -4),  // 0 + 2 = 2, claims; none reported: 6
        (2, "a", "debt", -3, -4),      // −5 + 2 = −3 < 0, a has runs
        (3, "b", "debt", -3, -2),      // −4 + 2
        (4, "a", "debt", -1, -2),      // −3 + 2
        (5, "b", "executed", -1, -10), // −2 + 2 = 0, claims; 20 → C_max 10
        (6, "a", "executed", 0, -10),  // −1 + 2 = 1, claims; charged 1
        (7, "b", "idle", 0, -8),       // −8 < 0 but b has no run: idle
        (8, "a", "executed", 1, -8),   // 0 + 2 = 2; charged 1
        (9, "b", "idle", 1, -6),
        (10, "a", "executed", 2, -6), // 1 + 2 = 3; charged 1
        (11, "b", "idle", 2, -4),
        (12, "a", "idle", 4, -4), // 2 + 2 = 4; no run left
        (13, "b", "idle", 4, -2),
        (14, "a", "idle", 4, -2), // 4 + 2 = 6, cut to b_cap = 4
        (15, "b", "idle", 4, 0),
    ]
    .into_iter()
    .map(|(s, t, o, x, y)| (s, t.to_owned(), o, x, y))
    .collect();
    assert_eq!(seen, expected);
    // Debt slots are recorded as such (`d`), one range per tick.
    let letters: String = source
        .slot_outcomes(p.shard_id())
        .into_iter()
        .map(|(_, outcomes)| outcomes.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(letters, "c1 c1 d1 d1 d1 c1 c1 i1 c1 i1 c1 i1 i1 i1 i1 i1");
}

/// A batch claims for all its slots first, then runs them: the charges of
/// a batch's runs reach the ledger only after its slots were decided, so
/// a tenant can claim on every slot of one batch and owe afterwards.
#[tokio::test]
async fn a_batch_decides_its_slots_before_its_runs_are_charged() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(costed, InMemoryExecutorOptions::new());
    let (a, b) = (tenant("a"), tenant("b"));
    for _ in 0..4 {
        executor.enqueue(&a, "cost=9").unwrap();
    }
    let p = cost_policy();
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let labels = |results: Vec<Result<statek_scheduler::TickOutcome, SchedulerError>>| {
        results
            .into_iter()
            .map(|r| r.unwrap().tenant_outcome().label())
            .collect::<Vec<_>>()
    };
    // a: 2, then 4 (both claim); b: 2, 4, idle. Two attempts of 9: 4 − 18.
    assert_eq!(
        labels(scheduler.tick_batch(4, &shutdown).await.unwrap()),
        ["executed", "idle", "executed", "idle"]
    );
    assert_eq!(
        (executor.cost_balance(&a), executor.cost_balance(&b)),
        (Some(-14), Some(4))
    );
    // −12, −10, −8, −6: a has runs left, so its slots are debt slots.
    assert_eq!(
        labels(scheduler.tick_batch(8, &shutdown).await.unwrap()),
        ["debt", "idle", "debt", "idle", "debt", "idle", "debt", "idle"]
    );
    assert_eq!(executor.cost_balance(&a), Some(-6));
}

/// A running attempt that is cancelled reports nothing: it is charged the
/// policy's default once (its handler's failure after the cancel is not
/// recorded, so not charged).
#[tokio::test]
async fn a_cancelled_attempt_is_charged_the_default_once() {
    let handler = |_run: Run, cancel: CancellationToken| async move {
        cancel.cancelled().await;
        Err::<(), _>(RunError::new("stopped").with_cost(3))
    };
    let options = InMemoryExecutorOptions::new()
        .lease(std::time::Duration::from_millis(300))
        .unwrap();
    let executor = InMemoryExecutor::new(handler, options);
    let source = InMemoryReservations::new();
    let a = tenant("a");
    let run = executor.enqueue(&a, "x").unwrap();
    let scheduler = DurableFairScheduler::register(
        source,
        cost_policy(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let ticking = tokio::spawn(async move {
        let shutdown = CancellationToken::new();
        scheduler
            .tick(&shutdown)
            .await
            .unwrap()
            .tenant_outcome()
            .label()
    });
    while executor.run(run.run_id).unwrap().attempt == 0 {
        tokio::task::yield_now().await;
    }
    assert!(executor.cancel_run(run.run_id));
    assert_eq!(ticking.await.unwrap(), "execution_failed");
    // 0 + 2 − 6.
    assert_eq!(executor.cost_balance(&a), Some(-4));
    assert_eq!(executor.run(run.run_id).unwrap().attempt_costs, [None]);
}

/// A Worker in cost mode runs every run; the ledger's balances come to
/// what the slots credited minus what the attempts were charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_cost_mode_runs_everything_and_counts_debt_slots() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(costed, InMemoryExecutorOptions::new());
    let (a, b) = (tenant("a"), tenant("b"));
    let mut runs = Vec::new();
    for _ in 0..10 {
        runs.push(executor.enqueue(&a, "cost=10").unwrap().run_id);
        runs.push(executor.enqueue(&b, "cost=1").unwrap().run_id);
    }
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        cost_policy(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let worker = Worker::new(
        std::sync::Arc::new(scheduler),
        WorkerOptions::new().concurrency(4).unwrap(),
    );
    let shutdown = CancellationToken::new();
    let running = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { worker.run(shutdown).await })
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while executor.count_live_runs() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs left: {}",
            executor.count_live_runs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 20);
    // Every debt slot the Worker counted is recorded as one (`d`), and
    // each is a's (even sequences): b's attempts cost 1 and each of its
    // slots credits 2, so it never owes.
    let mut debt_by_tenant = [0_u64; 2];
    for (first, outcomes) in
        source.slot_outcomes(&statek_policy::SchedulerShardId::try_from("primary-v1").unwrap())
    {
        for offset in 0..outcomes.slot_count() {
            if outcomes.class_at(offset) == Some(statek_scheduler::SlotClass::Debt) {
                debt_by_tenant[usize::from((first + offset) % 2 == 1)] += 1;
            }
        }
    }
    assert_eq!(debt_by_tenant, [report.debt, 0], "{report:?}");
    // a's ten attempts are charged 100 and each of its slots credits 2; at
    // its tenth claim at most 4 attempts (the concurrency) are not charged
    // yet, so it needed at least (100 − 40) / 2 = 30 slots for 10 claims:
    // at least 20 debt slots.
    assert!(report.debt >= 20, "{report:?}");
}

/// An executor that keeps no ledger: a cost-mode policy is refused before
/// anything is registered or reserved.
#[derive(Debug)]
struct SlotsOnly;

impl TenantExecutor for SlotsOnly {
    type Error = Infallible;

    async fn execute_one(
        &self,
        _tenant: &TenantId,
        _shutdown: &CancellationToken,
    ) -> Result<TenantTickOutcome, Infallible> {
        Ok(TenantTickOutcome::Idle)
    }

    fn is_retryable(error: &Infallible) -> bool {
        match *error {}
    }
}

#[tokio::test]
async fn an_executor_without_a_ledger_is_refused_a_cost_mode_policy() {
    let source = InMemoryReservations::new();
    let p = cost_policy();
    let err = DurableFairScheduler::register(
        source.clone(),
        p.clone(),
        SlotsOnly,
        SchedulerOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, SchedulerError::UnsupportedFairness { shard } if shard == "primary-v1"),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(source.next_sequence(p.shard_id()), None);
    // The same executor runs the policy in slot mode.
    let slots = policy("primary-v1", &[("a", 1), ("b", 1)]);
    assert!(
        DurableFairScheduler::register(source, slots, SlotsOnly, SchedulerOptions::new())
            .await
            .is_ok()
    );
}

/// A rollout changes the cost parameters and the tenants: the executor's
/// one ledger takes the new parameters at the successor's first slot
/// (positive balances cut to the new cap, debts kept), a tenant that
/// left keeps its debt, and it comes back with it.
#[tokio::test]
async fn balances_carry_across_rollouts_cut_to_the_new_cap() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(costed, InMemoryExecutorOptions::new());
    let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
    for _ in 0..2 {
        executor.enqueue(&a, "cost=10").unwrap();
    }
    let wide = CostFairness::new(2, 10, 6, 4).unwrap();
    let narrow = CostFairness::new(1, 10, 6, 1).unwrap();
    let v1 = policy("primary-v1", &[("a", 1), ("b", 1)]).with_fairness(FairnessUnit::Cost(wide));
    let v2 = policy("primary-v2", &[("b", 1), ("c", 1)]).with_fairness(FairnessUnit::Cost(narrow));
    let v3 = policy("primary-v3", &[("a", 1), ("b", 1)]).with_fairness(FairnessUnit::Cost(wide));
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        v1.clone(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let tick = async || {
        let o = scheduler.tick(&shutdown).await.unwrap();
        format!(
            "{}/{}:{}",
            o.reservation().shard(),
            o.tenant(),
            o.tenant_outcome().label()
        )
    };
    let balances = || [&a, &b, &c].map(|t| executor.cost_balance(t).unwrap());
    // v1 (q = 2, b_cap = 4): a claims at 2 and is charged 10 (−8); b
    // idles to 2; a owes at −6 with a run left; b reaches the cap, 4.
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(tick().await);
    }
    assert_eq!(
        seen,
        [
            "primary-v1/a:executed",
            "primary-v1/b:idle",
            "primary-v1/a:debt",
            "primary-v1/b:idle"
        ]
    );
    assert_eq!(balances(), [-6, 4, 0]);
    // v2 (q = 1, b_cap = 1) without a: b's 4 is cut to 1 (its credit is
    // clipped there too), c starts at 0 + 1; a keeps its debt.
    source.seal(v1.shard_id(), v2.clone()).unwrap();
    assert_eq!(
        [tick().await, tick().await],
        ["primary-v2/b:idle", "primary-v2/c:idle"]
    );
    assert_eq!(balances(), [-6, 1, 1]);
    // v3 (q = 2, b_cap = 4) with a back: −4 and −2 are debt slots, at 0
    // it claims its second run (−10); b 3, then 4 (clipped).
    source.seal(v2.shard_id(), v3.clone()).unwrap();
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(tick().await);
    }
    assert_eq!(
        seen,
        [
            "primary-v3/a:debt",
            "primary-v3/b:idle",
            "primary-v3/a:debt",
            "primary-v3/b:idle",
            "primary-v3/a:executed"
        ]
    );
    assert_eq!(balances(), [-10, 4, 1]);
}

/// A tick that meets a seal onto a cost-mode successor runs its slot
/// through the ledger (the successor's policy decides, not the one the
/// scheduler held before reserving).
#[tokio::test]
async fn a_tick_that_follows_a_seal_into_cost_mode_uses_the_ledger() {
    let source = InMemoryReservations::new();
    let executor = InMemoryExecutor::new(costed, InMemoryExecutorOptions::new());
    let (a, b) = (tenant("a"), tenant("b"));
    for _ in 0..3 {
        executor.enqueue(&a, "cost=9").unwrap();
    }
    let v1 = policy("primary-v1", &[("a", 1), ("b", 1)]);
    let v2 = policy("primary-v2", &[("a", 1), ("b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap()));
    let scheduler = DurableFairScheduler::register(
        source.clone(),
        v1.clone(),
        executor.clone(),
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    // Slot mode: no ledger yet.
    assert_eq!(
        scheduler
            .tick(&shutdown)
            .await
            .unwrap()
            .tenant_outcome()
            .label(),
        "executed"
    );
    assert_eq!(executor.cost_balance(&a), None);
    source.seal(v1.shard_id(), v2).unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let o = scheduler.tick(&shutdown).await.unwrap();
        seen.push((
            o.reservation().shard().to_string(),
            o.tenant_outcome().label(),
            executor.cost_balance(&a).unwrap(),
            executor.cost_balance(&b).unwrap(),
        ));
    }
    // a: 0 + 2, claims, charged 9: −7; b: 2, idle; a: −5, debt.
    assert_eq!(
        seen,
        [
            ("primary-v2".to_owned(), "executed", -7, 0),
            ("primary-v2".to_owned(), "idle", -7, 2),
            ("primary-v2".to_owned(), "debt", -5, 2),
        ]
    );
}

// ---------------------------------------------------------------------------
// The same ledger kept by PostgreSQL (migration V19).

pub(crate) mod postgres {
    use super::*;
    use statek_scheduler::{ExecutorOptions, PgRunQueueExecutor};
    use statek_store_pg::testing::TestDatabase;
    use statek_store_pg::{NewRun, PgStore};

    /// Each tenant's balance, by id.
    async fn balances(store: &PgStore, shard: &str) -> Vec<(String, i128)> {
        store
            .cost_balances(&statek_policy::SchedulerShardId::try_from(shard).unwrap())
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.tenant.to_string(), b.balance))
            .collect()
    }

    /// The ledger checked against the evidence: every tenant's charges
    /// are the sum, over its ended cost-mode attempts, of the reported
    /// cost cut to C_max, or the default where it reported none.
    pub(crate) async fn charges_match_the_evidence(
        db: &TestDatabase,
        store: &PgStore,
        shard: &str,
    ) {
        let client = db.client().await;
        let rows = client
            .query(
                "SELECT a.tenant_id,
                        sum(CASE WHEN a.cost IS NULL THEN c.default_cost
                                 ELSE least(a.cost, c.max_cost) END)::text AS charged
                 FROM statek.run_attempts AS a
                 JOIN statek.shard_costs AS c ON c.shard_id = a.shard_id
                 JOIN statek.runs AS r ON r.run_id = a.run_id
                 WHERE a.finished_at IS NOT NULL
                    OR a.attempt < r.attempt
                    OR r.state IN ('cancelled', 'failed', 'available')
                 GROUP BY a.tenant_id ORDER BY a.tenant_id",
                &[],
            )
            .await
            .unwrap();
        let evidence: Vec<(String, i128)> = rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    r.get::<_, String>(1).parse().unwrap(),
                )
            })
            .collect();
        let ledger: Vec<(String, i128)> = store
            .cost_balances(&statek_policy::SchedulerShardId::try_from(shard).unwrap())
            .await
            .unwrap()
            .into_iter()
            .filter(|b| b.charged > 0)
            .map(|b| (b.tenant.to_string(), b.charged))
            .collect();
        assert_eq!(ledger, evidence);
    }

    /// The hand-computed run of `each_slot_follows_the_ledger_written_out_by_hand`
    /// on PostgreSQL: the same outcome at every slot, the same balances
    /// read back from the database, and the charges equal to the
    /// evidence.
    /// It also checks the metrics the PostgreSQL executor exports: the
    /// charges of the finishes it recorded, the attempt over `C_max`, and
    /// the shared ledger's balances read by its housekeeping pass.
    #[tokio::test]
    async fn each_slot_follows_the_ledger_kept_by_the_database() {
        use crate::metric_values::{get, snapshot};
        use statek_scheduler::TenantExecutor;

        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);
        let db = TestDatabase::create().await;
        let store = db.store();
        for (t, payload) in [
            ("a", "cost=7"),
            ("a", "cost=1"),
            ("a", "cost=1"),
            ("a", "cost=1"),
            ("b", "none"),
            ("b", "cost=20"),
        ] {
            store
                .enqueue(&NewRun::new(tenant(t), payload.as_bytes().to_vec()))
                .await
                .unwrap();
        }
        let executor = PgRunQueueExecutor::new(store.clone(), costed, ExecutorOptions::new());
        let scheduler = DurableFairScheduler::register(
            store.clone(),
            cost_policy(),
            executor,
            SchedulerOptions::new(),
        )
        .await
        .unwrap();
        let shutdown = CancellationToken::new();
        let mut seen = Vec::new();
        for _ in 0..16 {
            let o = scheduler.tick(&shutdown).await.unwrap();
            let b = balances(&store, "primary-v1").await;
            let of = |t: &str| b.iter().find(|(x, _)| x == t).map_or(0, |(_, v)| *v);
            seen.push((
                o.reservation().sequence(),
                o.tenant().to_string(),
                o.tenant_outcome().label(),
                of("a"),
                of("b"),
            ));
        }
        let expected: Vec<(u64, String, &str, i128, i128)> = [
            (0, "a", "executed", -5, 0),
            (1, "b", "executed", -5, -4),
            (2, "a", "debt", -3, -4),
            (3, "b", "debt", -3, -2),
            (4, "a", "debt", -1, -2),
            (5, "b", "executed", -1, -10),
            (6, "a", "executed", 0, -10),
            (7, "b", "idle", 0, -8),
            (8, "a", "executed", 1, -8),
            (9, "b", "idle", 1, -6),
            (10, "a", "executed", 2, -6),
            (11, "b", "idle", 2, -4),
            (12, "a", "idle", 4, -4),
            (13, "b", "idle", 4, -2),
            (14, "a", "idle", 4, -2),
            (15, "b", "idle", 4, 0),
        ]
        .into_iter()
        .map(|(s, t, o, x, y)| (s, t.to_owned(), o, x, y))
        .collect();
        assert_eq!(seen, expected);
        charges_match_the_evidence(&db, &store, "primary-v1").await;
        // The debt slots are recorded as such.
        let client = db.client().await;
        let debt: i64 = client
            .query_one(
                "SELECT coalesce(sum(c.n), 0)::bigint FROM statek.slot_outcomes AS o,
                        unnest(string_to_array(o.classes, NULL), o.counts) AS c(class, n)
                 WHERE o.shard_id = 'primary-v1' AND c.class = 'd'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(debt, 3);
        // a: 7 + 1 + 1 + 1; b: the default 6 (no report) and 20 cut to 10.
        scheduler.executor().maintain().await;
        let values = snapshot(&snapshotter);
        let metric = |name: &str, t: &str| get(&values, name, &[("tenant", t)]);
        assert_eq!(metric("statek_cost_charged_total", "a"), 10.0);
        assert_eq!(metric("statek_cost_charged_total", "b"), 16.0);
        assert_eq!(metric("statek_cost_over_max_total", "a"), 0.0);
        assert_eq!(metric("statek_cost_over_max_total", "b"), 1.0);
        assert_eq!(metric("statek_cost_balance", "a"), 4.0);
        assert_eq!(metric("statek_cost_balance", "b"), 0.0);
        // The audit reads the same charges back from the evidence: a's
        // attempts at 0, 6, 8, 10 (7 + 1 + 1 + 1), b's at 1 (no report:
        // the default 6) and 5 (20 cut to 10). Without a D nothing is
        // judged (a's cap of 1 is reported, not taken for D: expired
        // leases escape a cap); with D = 3 given, both sides for both:
        // upper 2·7 + 3·10 + 4 = 48, lower 16 − 34 = −18.
        store
            .set_tenant_limits(
                &tenant("a"),
                &statek_store_pg::TenantLimits::new(Some(1), None).unwrap(),
            )
            .await
            .unwrap();
        let shard = statek_policy::SchedulerShardId::try_from("primary-v1").unwrap();
        let with_d = statek_store_pg::AuditOptions::new().concurrency(3);
        let report = store.audit_shard(&shard, 0..16).await.unwrap();
        let cost = |r: &statek_store_pg::AuditReport, t: &str| {
            let c = r
                .tenants
                .iter()
                .find(|x| x.tenant.as_str() == t)
                .unwrap()
                .cost
                .clone()
                .unwrap();
            (
                c.charged,
                c.uncharged,
                c.entitled,
                c.cap,
                c.concurrency,
                c.upper,
                c.lower,
            )
        };
        assert_eq!(cost(&report, "a"), (10, 0, 16.0, Some(1), None, None, None));
        assert_eq!(cost(&report, "b"), (16, 0, 16.0, None, None, None, None));
        let report = store.audit_shard_with(&shard, 0..16, with_d).await.unwrap();
        assert_eq!(
            cost(&report, "a"),
            (10, 0, 16.0, Some(1), Some(3), Some(48), Some(-18))
        );
        assert_eq!(
            cost(&report, "b"),
            (16, 0, 16.0, None, Some(3), Some(48), Some(-18))
        );
        assert!(report.passed(), "{:?}", report.findings);
        // a's credit at 14 was cut (4 + 2 above b_cap 4): V20 records it,
        // so a's lower side is not judged over 0..16; b's credits were
        // never cut and reach its last slot, 15: judged.
        let lower = |r: &statek_store_pg::AuditReport, t: &str| {
            let c = r.tenants.iter().find(|x| x.tenant.as_str() == t).unwrap();
            let c = c.cost.as_ref().unwrap();
            (
                c.slots_in_span,
                c.clipped_through,
                c.credited_through,
                c.lower_judged,
            )
        };
        assert_eq!(lower(&report, "a"), (8, Some(14), Some(14), false));
        assert_eq!(lower(&report, "b"), (8, None, Some(15), true));
        // 14..16 starts at the cut: a not judged there; b judged.
        let late = store
            .audit_shard_with(&shard, 14..16, with_d)
            .await
            .unwrap();
        assert_eq!(lower(&late, "a"), (1, Some(14), Some(14), false));
        assert_eq!(lower(&late, "b"), (1, None, Some(15), true));
        assert!(late.passed(), "{:?}", late.findings);
        // Four slots more (a and b idle): with D = 1, a's upper side is
        // 2·(2 − 1) + 1·10 + 4 = 16 and its lower 2·2 − 10 − 4 = −10.
        for _ in 0..4 {
            scheduler.tick(&shutdown).await.unwrap();
        }
        let one = statek_store_pg::AuditOptions::new().concurrency(1);
        let held = store.audit_shard_with(&shard, 16..20, one).await.unwrap();
        assert_eq!(
            cost(&held, "a"),
            (0, 0, 4.0, Some(1), Some(1), Some(16), Some(-10))
        );
        assert!(held.passed(), "{:?}", held.findings);
    }

    /// A running attempt that is cancelled, and one whose lease expired and
    /// that the expiry pass puts back, are charged the default once each;
    /// a slot-mode claim of a cost shard's slots is refused.
    #[tokio::test]
    async fn attempts_ended_without_a_finish_are_charged_the_default() {
        let db = TestDatabase::create().await;
        let store = db.store();
        let a = tenant("a");
        let first = store
            .enqueue(&NewRun::new(a.clone(), b"x".to_vec()))
            .await
            .unwrap();
        let second = store
            .enqueue(&NewRun::new(a.clone(), b"y".to_vec()))
            .await
            .unwrap();
        let p = cost_policy();
        store.register(&p).await.unwrap();
        let slots = store
            .reserve_batch(p.shard_id(), &p.digest(), uuid::Uuid::now_v7(), 4)
            .await
            .unwrap();
        let pairs: Vec<(u64, TenantId)> = slots
            .reservations()
            .iter()
            .filter(|r| p.tenant_for_slot(u64::from(r.slot())).unwrap() == &a)
            .map(|r| (r.sequence(), a.clone()))
            .collect();
        assert_eq!(pairs.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [0, 2]);
        // The plain claim function refuses a cost shard's slots.
        let plain = statek_store_pg::SlotClaimRequest::new(
            p.shard_id(),
            &pairs,
            std::time::Duration::from_millis(300),
            2,
        )
        .unwrap();
        let refused = store.claim_slots(&plain).await.unwrap_err();
        assert!(
            refused.to_string().contains("claim_cost_slots"),
            "{refused}"
        );
        let request = statek_store_pg::SlotClaimRequest::new(
            p.shard_id(),
            &pairs,
            std::time::Duration::from_millis(300),
            2,
        )
        .unwrap()
        .in_cost_mode();
        let claims = store.claim_slots(&request).await.unwrap();
        assert!(claims
            .iter()
            .all(|c| matches!(c, statek_store_pg::SlotClaim::Claimed(_))));
        // a: 0 + 2 and 2 + 2, b_cap 4: credit 4, nothing charged yet.
        assert_eq!(balances(&store, "primary-v1").await, [("a".to_owned(), 4)]);
        assert!(store.cancel_run(first.run_id).await.unwrap());
        assert_eq!(balances(&store, "primary-v1").await, [("a".to_owned(), -2)]);
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let expired = store.find_expired_runs(10).await.unwrap();
        assert_eq!(expired.len(), 1);
        for run in expired {
            store.rescue_expired_run(&run).await.unwrap();
        }
        // 4 − 6 − 6.
        assert_eq!(balances(&store, "primary-v1").await, [("a".to_owned(), -8)]);
        let _ = second;
        charges_match_the_evidence(&db, &store, "primary-v1").await;
    }

    /// A batch reserved on a shard before its seal and claimed after the
    /// successor's first claim credits that shard's slots from where that
    /// shard stopped (each shard keeps its own progress), so no debt is
    /// forgiven: written out by hand.
    #[tokio::test]
    async fn a_late_claim_on_a_sealed_shard_forgives_no_debt() {
        let db = TestDatabase::create().await;
        let store = db.store();
        let fa = tenant("fa");
        for _ in 0..6 {
            store
                .enqueue(&NewRun::new(fa.clone(), b"x".to_vec()))
                .await
                .unwrap();
        }
        let params = FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap());
        let x = policy("x-v1", &[("fa", 1), ("fb", 1)]).with_fairness(params);
        let y = policy("x-v2", &[("fa", 1), ("fb", 1)]).with_fairness(params);
        store.register(&x).await.unwrap();
        let lease = std::time::Duration::from_secs(60);
        let reserve = async |p: &WeightedFairnessPolicy| {
            store
                .reserve_batch(p.shard_id(), &p.digest(), uuid::Uuid::now_v7(), 4)
                .await
                .unwrap()
                .reservations()
                .iter()
                .filter(|r| r.slot() == 0)
                .map(|r| (r.sequence(), fa.clone()))
                .collect::<Vec<_>>()
        };
        let claim = async |p: &WeightedFairnessPolicy, slots: &[(u64, TenantId)]| {
            let request = statek_store_pg::SlotClaimRequest::new(p.shard_id(), slots, lease, 4)
                .unwrap()
                .in_cost_mode();
            store.claim_slots(&request).await.unwrap()
        };
        let balance = async || balances(&store, "x-v1").await;
        let first = reserve(&x).await;
        let late = reserve(&x).await;
        assert_eq!(
            (
                first.iter().map(|s| s.0).collect::<Vec<_>>(),
                late.iter().map(|s| s.0).collect::<Vec<_>>()
            ),
            (vec![0, 2], vec![4, 6])
        );
        // x, slots 0 and 2: 2 and 4, both claim; both finish at cost 10:
        // credit 4, charged 20.
        for answer in claim(&x, &first).await {
            let statek_store_pg::SlotClaim::Claimed(run) = answer else {
                panic!("expected a claim: {answer:?}");
            };
            store
                .finish_runs(&[statek_store_pg::FinishRun::complete(run.lease).with_cost(Some(10))])
                .await
                .unwrap();
        }
        assert_eq!(balance().await, [("fa".to_owned(), -16)]);
        // The rollout; y's slots 0 and 2: −14, −12, debt slots.
        store.rollout(&x, &y, None).await.unwrap();
        let on_y = reserve(&y).await;
        assert_eq!(
            claim(&y, &on_y).await,
            [
                statek_store_pg::SlotClaim::Debt,
                statek_store_pg::SlotClaim::Debt
            ]
        );
        assert_eq!(balance().await, [("fa".to_owned(), -12)]);
        // x's late batch, slots 4 and 6: x credited fa through slot 2, so
        // two more credits: −10, −8, debt slots (counting x's slots from
        // its first would credit 0, 2, 4 and 6 again).
        assert_eq!(
            claim(&x, &late).await,
            [
                statek_store_pg::SlotClaim::Debt,
                statek_store_pg::SlotClaim::Debt
            ]
        );
        assert_eq!(balance().await, [("fa".to_owned(), -8)]);
        charges_match_the_evidence(&db, &store, "x-v1").await;
    }

    /// Works a few milliseconds (varying per run, so finishes come out of
    /// claim order) and reports the cost its payload names.
    async fn uneven(run: Run, _cancel: CancellationToken) -> RunResult {
        let payload = String::from_utf8(run.payload.clone()).unwrap();
        let (cost, pause) = payload.split_once('/').unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(pause.parse().unwrap())).await;
        Ok(Completed::with_cost(cost.parse().unwrap()))
    }

    /// Four Workers, each on its own pool, claim one cost shard's slots
    /// while every connection of theirs is terminated every 300 ms (lost
    /// claim and completion acknowledgements, retried): every run
    /// completes; the ledger's charges equal the evidence exactly (no
    /// attempt charged twice or missed); the finishes of many replicas
    /// spread over partial sums (more than one row per tenant); and each
    /// tenant's cost served stays under `E + B`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn four_workers_keep_one_ledger_exact_under_terminated_connections() {
        let db = TestDatabase::create().await;
        let observer = crate::faults::observer(&db).await;
        // q = 1, C_max = 20, default 20, b_cap = 20.
        let cost = CostFairness::new(1, 20, 20, 20).unwrap();
        let p = policy("cost-v1", &[("cheap", 1), ("costly", 1)])
            .with_fairness(FairnessUnit::Cost(cost));
        let setup = db.store();
        let mut runs = 0;
        for i in 0..240 {
            setup
                .enqueue(&NewRun::new(
                    tenant("cheap"),
                    format!("1/{}", i % 4).into_bytes(),
                ))
                .await
                .unwrap();
            runs += 1;
            if i % 4 == 0 {
                setup
                    .enqueue(&NewRun::new(
                        tenant("costly"),
                        format!("15/{}", i % 7).into_bytes(),
                    ))
                    .await
                    .unwrap();
                runs += 1;
            }
        }
        let shutdown = CancellationToken::new();
        let options = ExecutorOptions::new()
            .completion_batching(4, std::time::Duration::from_millis(5))
            .unwrap();
        let mut running = Vec::new();
        for _ in 0..4 {
            let store = db.store();
            let scheduler = std::sync::Arc::new(
                DurableFairScheduler::register(
                    store.clone(),
                    p.clone(),
                    PgRunQueueExecutor::new(store.clone(), uneven, options),
                    SchedulerOptions::new(),
                )
                .await
                .unwrap(),
            );
            let worker = Worker::new(scheduler, WorkerOptions::new().concurrency(4).unwrap());
            running.push(tokio::spawn(worker.run(shutdown.clone())));
        }
        let killer = crate::faults::terminate_every(
            &db,
            std::time::Duration::from_millis(300),
            shutdown.clone(),
        )
        .await;
        crate::faults::wait_until_completed(&observer, runs, std::time::Duration::from_secs(120))
            .await;
        shutdown.cancel();
        killer.await.unwrap();
        for worker in running {
            worker
                .await
                .unwrap()
                .expect("workers survive terminated connections");
        }
        let store = db.store();
        charges_match_the_evidence(&db, &store, "cost-v1").await;
        let writers: i64 = observer
            .query_one(
                "SELECT count(*) FROM statek.cost_charges WHERE tenant_id = 'costly'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            writers >= 2,
            "the costly tenant's charges are in {writers} row(s)"
        );
        // Upper side of the bound over the whole run: S ≤ q·|W|·w/L + B,
        // B = q·Δ + D·C_max + b_cap, D the most attempts claimed and not
        // charged at once: four Workers × (4 executing + 2 × 4 awaiting
        // their record).
        let slots = store.next_sequence(p.shard_id()).await.unwrap();
        let d = 4 * (4 + 2 * 4);
        for (bound, balance) in p
            .cost_bounds()
            .unwrap()
            .zip(store.cost_balances(p.shard_id()).await.unwrap())
        {
            assert_eq!(bound.tenant(), &balance.tenant);
            let entitled = slots as f64 / 2.0;
            assert!(
                (balance.charged as f64) <= entitled + bound.slack(d),
                "{} served {} of {entitled} entitled, slack {}",
                balance.tenant,
                balance.charged,
                bound.slack(d)
            );
        }
        // The audit judges the same from the evidence, per tenant and by
        // claim, with that D: nothing above the upper side, every attempt
        // ended and charged, and S equal to the ledger's charges.
        let report = store
            .audit_shard_with(
                p.shard_id(),
                0..slots,
                statek_store_pg::AuditOptions::new().concurrency(d),
            )
            .await
            .unwrap();
        assert!(report.passed(), "{:?}", report.findings);
        let ledger = store.cost_balances(p.shard_id()).await.unwrap();
        for t in &report.tenants {
            let cost = t.cost.as_ref().unwrap();
            assert_eq!((cost.uncharged, cost.concurrency), (0, Some(u64::from(d))));
            let charged = ledger
                .iter()
                .find(|b| b.tenant == t.tenant)
                .unwrap()
                .charged;
            assert_eq!(i128::from(cost.charged), charged, "{}", t.tenant);
        }
    }
}
