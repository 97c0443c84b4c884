//! After a known sequence of ticks, the exported metrics have exactly the
//! expected values (recorded by a recorder of this test's thread).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use statek_policy::TenantId;
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::NewRun;
use tokio_util::sync::CancellationToken;

/// Succeeds, reporting its payload's length as its cost (`huge`: u64::MAX).
struct Ok;

impl RunHandler for Ok {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        Result::Ok(Completed::with_cost(if run.payload == b"huge" {
            u64::MAX
        } else {
            run.payload.len() as u64
        }))
    }
}

pub(crate) type Values = BTreeMap<(String, Vec<(String, String)>), f64>;

pub(crate) fn snapshot(snapshotter: &metrics_util::debugging::Snapshotter) -> Values {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let value = match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(c)) => c as f64,
                (MetricKind::Gauge, DebugValue::Gauge(g)) => g.into_inner(),
                (MetricKind::Histogram, DebugValue::Histogram(h)) => h.len() as f64,
                _ => return None,
            };
            Some(((key.name().to_owned(), labels), value))
        })
        .collect()
}

pub(crate) fn get(values: &Values, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    *values
        .get(&(name.to_owned(), labels.clone()))
        .unwrap_or_else(|| panic!("no metric {name} {labels:?} in {values:#?}"))
}

#[tokio::test]
async fn eight_ticks_export_exact_counters() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let db = TestDatabase::create().await;
    let store = db.store();
    let a = TenantId::try_from("tenant-a").unwrap();
    let b = TenantId::try_from("tenant-b").unwrap();
    for _ in 0..10 {
        store
            .enqueue(&NewRun::new(a.clone(), b"ab".to_vec()))
            .await
            .unwrap();
    }
    store
        .enqueue(&NewRun::new(b.clone(), b"huge".to_vec()))
        .await
        .unwrap();
    let policy =
        statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let executor = PgRunQueueExecutor::new(store.clone(), Ok, ExecutorOptions::new());
    let scheduler =
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await
            .unwrap();
    let shutdown = CancellationToken::new();
    for _ in 0..8 {
        scheduler.tick(&shutdown).await.unwrap();
    }
    // Cycle [a, a, b, a] twice: a selected 6 times and runs 6; b runs its
    // one run, then finds its queue empty.
    let v = snapshot(&snapshotter);
    let shard = ("shard", "primary-v1");
    assert_eq!(get(&v, "statek_reservations_total", &[shard]), 8.0);
    assert_eq!(
        get(&v, "statek_reservation_duration_seconds", &[shard]),
        8.0
    );
    assert_eq!(
        get(
            &v,
            "statek_selections_total",
            &[shard, ("tenant", "tenant-a")]
        ),
        6.0
    );
    assert_eq!(
        get(
            &v,
            "statek_selections_total",
            &[shard, ("tenant", "tenant-b")]
        ),
        2.0
    );
    let outcome = |tenant, outcome| {
        get(
            &v,
            "statek_tick_outcomes_total",
            &[shard, ("tenant", tenant), ("outcome", outcome)],
        )
    };
    assert_eq!(outcome("tenant-a", "executed"), 6.0);
    assert_eq!(outcome("tenant-b", "executed"), 1.0);
    assert_eq!(outcome("tenant-b", "idle"), 1.0);
    let completed = |tenant| {
        get(
            &v,
            "statek_run_outcomes_total",
            &[("tenant", tenant), ("outcome", "completed")],
        )
    };
    assert_eq!(completed("tenant-a"), 6.0);
    assert_eq!(completed("tenant-b"), 1.0);
    // Costs: six attempts of 2 units; one of u64::MAX, recorded as 2^40.
    let cost = |name, tenant| get(&v, name, &[("tenant", tenant)]);
    assert_eq!(cost("statek_run_cost_reported_total", "tenant-a"), 12.0);
    assert_eq!(
        cost("statek_run_cost_reported_total", "tenant-b"),
        1_099_511_627_776.0
    );
    assert_eq!(cost("statek_run_cost_clamped_total", "tenant-a"), 0.0);
    assert_eq!(cost("statek_run_cost_clamped_total", "tenant-b"), 1.0);
    assert_eq!(
        get(
            &v,
            "statek_service_lag_seconds",
            &[shard, ("tenant", "tenant-a")]
        ),
        6.0
    );
    let bound = |tenant| {
        get(
            &v,
            "statek_starvation_bound_reservations",
            &[shard, ("tenant", tenant)],
        )
    };
    assert_eq!((bound("tenant-a"), bound("tenant-b")), (2.0, 4.0));
    // No retry and no failed tick: the series exist from `register` on,
    // at 0 (`metrics::zero_series`).
    assert_eq!(get(&v, "statek_reservation_retries_total", &[shard]), 0.0);
    for kind in ["policy_conflict", "corrupt_data", "store", "executor"] {
        assert_eq!(
            get(&v, "statek_tick_errors_total", &[shard, ("kind", kind)]),
            0.0,
            "{kind}"
        );
    }
    // Registration ran the store's durability check on the fast test
    // server: fsync and full_page_writes off, statek's session flushes.
    let risk = |label| {
        get(
            &v,
            statek_store_pg::metric_names::DURABILITY_RISK,
            &[("risk", label)],
        )
    };
    assert_eq!(
        [
            "fsync",
            "full_page_writes",
            "synchronous_commit",
            "asynchronous_standbys",
            "standbys_not_visible"
        ]
        .map(risk),
        [1.0, 1.0, 0.0, 0.0, 0.0]
    );
    // Every exported metric is in the catalogue, with exactly its labels.
    for (name, labels) in v.keys() {
        let metric = statek_scheduler::metrics::catalogue()
            .find(|metric| metric.name == name)
            .unwrap_or_else(|| panic!("{name} is not in statek_scheduler::metrics::catalogue()"));
        let mut expected: Vec<&str> = metric.labels.to_vec();
        expected.sort_unstable();
        let found: Vec<&str> = labels.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(found, expected, "labels of {name}");
    }

    // One batch of 4 slots (sequences 8..=11: a, a, b, a): the counters
    // count reservations and selections, the latency histogram one call.
    // (A snapshot drains what it read: these are the batch's own values.)
    let outcomes = scheduler.tick_batch(4, &shutdown).await.unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes.iter().all(Result::is_ok));
    let v = snapshot(&snapshotter);
    assert_eq!(get(&v, "statek_reservations_total", &[shard]), 4.0);
    assert_eq!(
        get(&v, "statek_reservation_duration_seconds", &[shard]),
        1.0
    );
    assert_eq!(
        get(
            &v,
            "statek_selections_total",
            &[shard, ("tenant", "tenant-a")]
        ),
        3.0
    );
    assert_eq!(
        get(
            &v,
            "statek_tick_outcomes_total",
            &[shard, ("tenant", "tenant-b"), ("outcome", "idle")],
        ),
        1.0
    );
}

/// A reported cost is counted only once its finish is recorded: a run
/// cancelled while its handler ran reports 100 and is counted nothing
/// (its lease was gone when it finished); a run that completes is counted
/// what it reported (the in-memory executor; the PostgreSQL one counts
/// the same way after its finish statement).
#[tokio::test]
async fn a_cost_is_counted_only_when_its_finish_is_recorded() {
    use statek_core::TenantTickOutcome;
    use statek_scheduler::TenantExecutor;
    use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions};
    use std::sync::Arc;
    use tokio::sync::Notify;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (started, release) = (Arc::clone(&started), Arc::clone(&release));
        move |run: Run, _cancel: CancellationToken| {
            let (started, release) = (Arc::clone(&started), Arc::clone(&release));
            async move {
                if run.payload == b"held" {
                    started.notify_one();
                    release.notified().await;
                }
                Result::Ok(Completed::with_cost(if run.payload == b"held" {
                    100
                } else {
                    7
                }))
            }
        }
    };
    let executor = InMemoryExecutor::new(handler, InMemoryExecutorOptions::new());
    let a = TenantId::try_from("tenant-a").unwrap();
    let held = executor.enqueue(&a, b"held".to_vec()).unwrap().run_id;
    let shutdown = CancellationToken::new();
    let (outcome, ()) = tokio::join!(executor.execute_one(&a, &shutdown), async {
        started.notified().await;
        assert!(executor.cancel_run(held));
        release.notify_one();
    });
    assert!(matches!(
        outcome,
        Result::Ok(TenantTickOutcome::ExecutionFailed { .. })
    ));
    let reported = |v: &Values| {
        v.get(&(
            "statek_run_cost_reported_total".to_owned(),
            vec![("tenant".to_owned(), "tenant-a".to_owned())],
        ))
        .copied()
    };
    assert_eq!(reported(&snapshot(&snapshotter)), None);
    executor.enqueue(&a, b"done".to_vec()).unwrap();
    assert!(matches!(
        executor.execute_one(&a, &shutdown).await,
        Result::Ok(TenantTickOutcome::Executed(_))
    ));
    assert_eq!(reported(&snapshot(&snapshotter)), Some(7.0));
}

/// Cost mode on the executor that keeps the ledger (statek-testing's
/// in-memory one): after seven ticks written out by hand, the charged
/// cost, the balances and the debt slots are exactly these.
#[tokio::test]
async fn cost_mode_exports_charges_balances_and_debt_slots() {
    use statek_policy::{CostFairness, FairnessUnit};
    use statek_testing::{InMemoryExecutor, InMemoryExecutorOptions, InMemoryReservations};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let executor = InMemoryExecutor::new(Ok, InMemoryExecutorOptions::new());
    let (a, b) = (
        TenantId::try_from("tenant-a").unwrap(),
        TenantId::try_from("tenant-b").unwrap(),
    );
    // Ok reports its payload's length: 7, then u64::MAX (charged C_max).
    executor.enqueue(&a, "abcdefg").unwrap();
    executor.enqueue(&a, "huge").unwrap();
    executor.enqueue(&b, "").unwrap();
    // q = 2, C_max = 10, default 6, b_cap = 4.
    let p = statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap()));
    let scheduler = DurableFairScheduler::register(
        InMemoryReservations::new(),
        p,
        executor,
        SchedulerOptions::new(),
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let mut labels = Vec::new();
    for _ in 0..7 {
        labels.push(
            scheduler
                .tick(&shutdown)
                .await
                .unwrap()
                .tenant_outcome()
                .label(),
        );
    }
    // a: 2, claims, −5; b: 2, claims 0; a −3 debt; b 4 idle; a −1 debt;
    // b 4 (clipped) idle; a 1, claims, charged 10: −9.
    assert_eq!(
        labels,
        ["executed", "executed", "debt", "idle", "debt", "idle", "executed"]
    );
    let values = snapshot(&snapshotter);
    assert_eq!(
        get(
            &values,
            "statek_cost_charged_total",
            &[("tenant", "tenant-a")]
        ),
        17.0
    );
    assert_eq!(
        get(
            &values,
            "statek_cost_charged_total",
            &[("tenant", "tenant-b")]
        ),
        0.0
    );
    // "huge" reported u64::MAX, above C_max = 10: one attempt over.
    assert_eq!(
        get(
            &values,
            "statek_cost_over_max_total",
            &[("tenant", "tenant-a")]
        ),
        1.0
    );
    assert_eq!(
        get(
            &values,
            "statek_cost_over_max_total",
            &[("tenant", "tenant-b")]
        ),
        0.0
    );
    assert_eq!(
        get(&values, "statek_cost_balance", &[("tenant", "tenant-a")]),
        -9.0
    );
    assert_eq!(
        get(&values, "statek_cost_balance", &[("tenant", "tenant-b")]),
        4.0
    );
    assert_eq!(
        get(
            &values,
            "statek_tick_outcomes_total",
            &[
                ("shard", "primary-v1"),
                ("tenant", "tenant-a"),
                ("outcome", "debt")
            ]
        ),
        2.0
    );
    assert_eq!(
        get(
            &values,
            "statek_tick_outcomes_total",
            &[
                ("shard", "primary-v1"),
                ("tenant", "tenant-b"),
                ("outcome", "debt")
            ]
        ),
        0.0
    );
}
