//! Tenant limits under running Workers, against a real PostgreSQL: a cap
//! holds across 4 Workers with 8 concurrent claims, its slots beyond the
//! cap are `Limited`, other tenants are unaffected; limits changed while
//! the Workers run apply from the next claim. Read back from the claim
//! history (`statek.run_attempts`) and sampled from the run table.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions, WorkerReport,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{NewRun, PgStore, TenantLimits};
use tokio_util::sync::CancellationToken;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)])
}

/// Sleeps 20 ms for tenant-a's runs, 100 ms for tenant-b's.
struct Sleep;

impl RunHandler for Sleep {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        let ms = if run.tenant.as_str() == "tenant-a" {
            20
        } else {
            100
        };
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(Completed::new())
    }
}

type Running = tokio::task::JoinHandle<Result<WorkerReport, statek_scheduler::SchedulerError>>;

/// `workers` Workers of 2 concurrent runs each.
async fn start_workers(
    db: &TestDatabase,
    workers: usize,
    stop: &CancellationToken,
) -> Vec<Running> {
    let mut running = Vec::new();
    for _ in 0..workers {
        let store = db.store();
        let scheduler = Arc::new(
            DurableFairScheduler::register(
                store.clone(),
                policy(),
                PgRunQueueExecutor::new(store.clone(), Sleep, ExecutorOptions::new()),
                SchedulerOptions::new(),
            )
            .await
            .unwrap(),
        );
        let worker = Worker::new(scheduler, WorkerOptions::new().concurrency(2).unwrap())
            .with_notifications(store.listen_for_runs().await.unwrap());
        running.push(tokio::spawn(worker.run(stop.clone())));
    }
    running
}

async fn enqueue(store: &PgStore, tenant: &TenantId, n: usize) {
    let runs: Vec<NewRun> = (0..n)
        .map(|i| NewRun::new(tenant.clone(), i.to_string().into_bytes()))
        .collect();
    store.enqueue_many(&runs).await.unwrap();
}

async fn completed(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Samples tenant-a's unexpired leases every 2 ms until `done`; the most.
fn sample_leased(
    client: tokio_postgres::Client,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let mut max = 0;
        while !done.load(Ordering::SeqCst) {
            let leased: i64 = client
                .query_one(
                    "SELECT count(*) FROM statek.runs WHERE tenant_id = 'tenant-a'
                     AND state = 'running' AND lease_expires_at > clock_timestamp()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            max = max.max(leased);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        max
    })
}

/// Per claim of `tenant` (by claim time): how many of its claims were open
/// (claimed, not yet finished) right after it, from the claim history.
async fn open_at_each_claim(
    client: &tokio_postgres::Client,
    tenant: &str,
) -> Vec<(SystemTime, usize)> {
    let rows = client
        .query(
            "SELECT claimed_at, finished_at FROM statek.run_attempts WHERE tenant_id = $1
             ORDER BY claimed_at",
            &[&tenant],
        )
        .await
        .unwrap();
    let intervals: Vec<(SystemTime, SystemTime)> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get::<_, Option<SystemTime>>(1).expect("finished"),
            )
        })
        .collect();
    intervals
        .iter()
        .map(|&(at, _)| {
            let open = intervals
                .iter()
                .filter(|&&(claimed, finished)| claimed <= at && finished > at)
                .count();
            (at, open)
        })
        .collect()
}

async fn wait_for(client: &tokio_postgres::Client, total: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while completed(client).await < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs not done in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_cap_of_two_holds_across_four_workers_and_its_extra_slots_are_limited() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    store
        .set_tenant_limits(&a, &TenantLimits::new(Some(2), None).unwrap())
        .await
        .unwrap();
    store.register(&policy()).await.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_leased(db.client().await, Arc::clone(&done));
    let stop = CancellationToken::new();
    let workers = start_workers(&db, 4, &stop).await;
    enqueue(&store, &a, 50).await;
    enqueue(&store, &b, 50).await;
    let client = db.client().await;
    wait_for(&client, 100).await;
    stop.cancel();
    done.store(true, Ordering::SeqCst);
    let mut limited = 0;
    for w in workers {
        limited += w.await.unwrap().unwrap().limited;
    }
    let sampled = sampler.await.unwrap();
    assert!(sampled <= 2, "sampled {sampled} leased runs of tenant-a");
    let a_open = open_at_each_claim(&client, "tenant-a").await;
    assert_eq!(a_open.len(), 50);
    assert_eq!(a_open.iter().map(|&(_, n)| n).max(), Some(2));
    assert!(limited > 0, "tenant-a's slots beyond its cap are limited");
    // tenant-b runs with all the permits tenant-a's cap leaves.
    let b_open = open_at_each_claim(&client, "tenant-b").await;
    assert_eq!(b_open.len(), 50);
    let b_max = b_open.iter().map(|&(_, n)| n).max().unwrap();
    assert!(b_max > 2, "tenant-b is not capped: at most {b_max} at once");
}

#[tokio::test]
async fn limits_changed_while_workers_run_apply_from_the_next_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .set_tenant_limits(&a, &TenantLimits::new(Some(1), None).unwrap())
        .await
        .unwrap();
    store.register(&policy()).await.unwrap();
    let stop = CancellationToken::new();
    let workers = start_workers(&db, 4, &stop).await;
    enqueue(&store, &a, 60).await;
    let client = db.client().await;
    // Under cap 1 for a while, then raised to 4 while the Workers run.
    while completed(&client).await < 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let raised = store
        .set_tenant_limits(&a, &TenantLimits::new(Some(4), None).unwrap())
        .await
        .unwrap();
    wait_for(&client, 60).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap().unwrap();
    }
    let open = open_at_each_claim(&client, "tenant-a").await;
    let before: Vec<usize> = open
        .iter()
        .filter(|&&(at, _)| at < raised.updated_at)
        .map(|&(_, n)| n)
        .collect();
    let after: Vec<usize> = open
        .iter()
        .filter(|&&(at, _)| at >= raised.updated_at)
        .map(|&(_, n)| n)
        .collect();
    assert!(before.len() >= 10, "{} claims under cap 1", before.len());
    assert_eq!(before.iter().max(), Some(&1));
    assert!(after.iter().all(|&n| n <= 4), "{after:?}");
    assert!(
        after.iter().any(|&n| n > 1),
        "the raised cap is used: {after:?}"
    );
}
