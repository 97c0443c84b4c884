//! Idle tenants cost no database probe (`ExecutorOptions::idle_recheck`),
//! against a real PostgreSQL: a tenant a claim found empty is skipped
//! without a claim statement while notifications listen, until its
//! notification arrives or the recheck interval has passed; nothing is
//! skipped while no notification connection listens. A skipped slot is
//! idle, never handed to another tenant. The runs enqueued here send
//! their notifications to nobody, so a run claimed proves that its slot
//! was asked about, and a run left `available` that it was not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, PgScheduler, Run,
    RunHandler, RunResult, SchedulerOptions, TenantExecutor,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{NewRun, PgStore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Long enough that the three laps after a tenant became known empty
/// finish inside it even on a loaded 2-core machine (300 ms did not: a
/// fresh-clone run on PostgreSQL 16 rechecked tenant-a one lap early).
const RECHECK: Duration = Duration::from_secs(5);

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// `tenant-a:3, tenant-b:1`: cycle `[a, a, b, a]`, L = 4.
fn v1() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [
            TenantFairnessWeight::new(tenant("tenant-a"), 3).unwrap(),
            TenantFairnessWeight::new(tenant("tenant-b"), 1).unwrap(),
        ],
    )
    .unwrap()
}

struct Done;

impl RunHandler for Done {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
    }
}

type Scheduler = PgScheduler<PgRunQueueExecutor<Done>>;

async fn scheduler(store: &PgStore, recheck: Option<Duration>) -> Scheduler {
    let options = ExecutorOptions::new().idle_recheck(recheck).unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Done, options);
    DurableFairScheduler::register(store.clone(), v1(), executor, SchedulerOptions::new())
        .await
        .unwrap()
}

/// One batch of 4 slots (one lap), as `sequence:tenant:outcome`.
async fn lap(scheduler: &Scheduler) -> Vec<String> {
    scheduler
        .tick_batch(4, &CancellationToken::new())
        .await
        .unwrap()
        .into_iter()
        .map(|o| {
            let o = o.unwrap();
            format!(
                "{}:{}:{}",
                o.reservation().sequence(),
                o.tenant(),
                o.tenant_outcome().label()
            )
        })
        .collect()
}

async fn enqueue(store: &PgStore, tenant_id: &str) -> Uuid {
    store
        .enqueue(&NewRun::new(tenant(tenant_id), b"x".to_vec()))
        .await
        .unwrap()
        .run_id
}

async fn state(db: &TestDatabase, run_id: Uuid) -> String {
    db.client()
        .await
        .query_one(
            "SELECT state FROM statek.runs WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_empty_tenant_is_skipped_until_notified_or_rechecked() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Some(RECHECK)).await;
    let executor = scheduler.executor();
    executor.notifications_listening(true);

    // Lap 1 asks about every slot: a's one run runs, the rest is idle,
    // and both tenants are known empty from here on.
    enqueue(&store, "tenant-a").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "0:tenant-a:executed",
            "1:tenant-a:idle",
            "2:tenant-b:idle",
            "3:tenant-a:idle"
        ]
    );
    // A run of b whose notification never reached the executor: lap 2
    // asks about nothing, b's slot is idle and its run waits.
    let b_run = enqueue(&store, "tenant-b").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "4:tenant-a:idle",
            "5:tenant-a:idle",
            "6:tenant-b:idle",
            "7:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, b_run).await, "available");
    // Its notification arrives: b's next slot is asked about and runs it;
    // a stays known empty.
    executor.run_notified(&tenant("tenant-b"));
    assert_eq!(
        lap(&scheduler).await,
        [
            "8:tenant-a:idle",
            "9:tenant-a:idle",
            "10:tenant-b:executed",
            "11:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, b_run).await, "completed");
    // A run of a that nobody notifies (a delayed run coming due looks the
    // same): found by the first claim after the recheck interval.
    let a_run = enqueue(&store, "tenant-a").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "12:tenant-a:idle",
            "13:tenant-a:idle",
            "14:tenant-b:idle",
            "15:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, a_run).await, "available");
    tokio::time::sleep(RECHECK + Duration::from_millis(50)).await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "16:tenant-a:executed",
            "17:tenant-a:idle",
            "18:tenant-b:idle",
            "19:tenant-a:idle"
        ]
    );
    // The notification connection is lost: nothing is known empty, every
    // slot is asked about again.
    executor.notifications_listening(false);
    let b_run = enqueue(&store, "tenant-b").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "20:tenant-a:idle",
            "21:tenant-a:idle",
            "22:tenant-b:executed",
            "23:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, b_run).await, "completed");

    // Each lap's range has its outcome record (V14), in runs of classes:
    // a slot decided without asking is `k`, one asked about and found
    // empty `i`, a claimed one `c`.
    let records: Vec<(u64, String)> = store
        .slot_outcomes(&SchedulerShardId::try_from("primary-v1").unwrap(), 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|record| (record.first_sequence, record.outcomes.to_string()))
        .collect();
    let expected: Vec<(u64, String)> = [
        (0, "c1 i3"),
        (4, "k4"),
        (8, "k2 c1 k1"),
        (12, "k2 i1 k1"),
        (16, "c1 i3"),
        (20, "i2 c1 i1"),
    ]
    .into_iter()
    .map(|(first, runs)| (first, runs.to_owned()))
    .collect();
    assert_eq!(records, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_idle_recheck_or_listening_every_slot_is_asked_about() {
    let db = TestDatabase::create().await;
    let store = db.store();
    // Listening, but the idle set is off: b's unnotified run is claimed.
    let off = scheduler(&store, None).await;
    off.executor().notifications_listening(true);
    assert_eq!(
        lap(&off).await,
        [
            "0:tenant-a:idle",
            "1:tenant-a:idle",
            "2:tenant-b:idle",
            "3:tenant-a:idle"
        ]
    );
    let b_run = enqueue(&store, "tenant-b").await;
    assert_eq!(lap(&off).await[2], "6:tenant-b:executed");
    assert_eq!(state(&db, b_run).await, "completed");
    // The idle set on, but no connection has ever listened.
    let never = scheduler(&store, Some(RECHECK)).await;
    assert_eq!(lap(&never).await[2], "10:tenant-b:idle");
    let b_run = enqueue(&store, "tenant-b").await;
    assert_eq!(lap(&never).await[2], "14:tenant-b:executed");
    assert_eq!(state(&db, b_run).await, "completed");
}

#[test]
fn the_recheck_interval_is_checked() {
    for bad in [Duration::from_millis(9), Duration::from_secs(61)] {
        let e = ExecutorOptions::new().idle_recheck(Some(bad)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid option: idle recheck must be 10 ms..=60 s, got {bad:?}")
        );
    }
    assert!(ExecutorOptions::new()
        .idle_recheck(Some(Duration::from_millis(10)))
        .is_ok());
    assert_eq!(
        statek_scheduler::DEFAULT_IDLE_RECHECK,
        Duration::from_secs(1)
    );
}

/// A notification that arrives while a claim is in flight (here: waiting
/// for tenant-a's limits row, locked by another session) is not lost: the
/// known-empty slot of the notified tenant after the claim's last claimed
/// run is left undecided and asked about by the next claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_during_a_claim_is_honoured_by_the_next_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = std::sync::Arc::new(scheduler(&store, Some(Duration::from_secs(30))).await);
    scheduler.executor().notifications_listening(true);
    store
        .set_tenant_limits(
            &tenant("tenant-a"),
            &statek_store_pg::TenantLimits::new(Some(100), None).unwrap(),
        )
        .await
        .unwrap();
    enqueue(&store, "tenant-a").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "0:tenant-a:executed",
            "1:tenant-a:idle",
            "2:tenant-b:idle",
            "3:tenant-a:idle"
        ]
    );
    enqueue(&store, "tenant-a").await;
    scheduler.executor().run_notified(&tenant("tenant-a"));
    let b_run = enqueue(&store, "tenant-b").await;
    // Hold tenant-a's limits row: the next claim (asking about a, not
    // about b, still known empty) waits for it.
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM statek.tenant_limits WHERE tenant_id = 'tenant-a' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let second = tokio::spawn({
        let scheduler = std::sync::Arc::clone(&scheduler);
        async move { lap(&scheduler).await }
    });
    let client = db.client().await;
    for _ in 0..100 {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // b's notification arrives while the claim waits.
    scheduler.executor().run_notified(&tenant("tenant-b"));
    tx.rollback().await.unwrap();
    assert_eq!(
        second.await.unwrap(),
        [
            "4:tenant-a:executed",
            "5:tenant-a:idle",
            "6:tenant-b:executed",
            "7:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, b_run).await, "completed");
}

/// The Worker's idle probe found claimable work (a run that came due
/// without a notification): the executor forgets which tenants are known
/// empty, so the next batch asks about every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimable_work_found_by_the_probe_ends_every_known_empty() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Some(Duration::from_secs(30))).await;
    let executor = scheduler.executor();
    executor.notifications_listening(true);
    assert_eq!(lap(&scheduler).await[2], "2:tenant-b:idle");
    let b_run = enqueue(&store, "tenant-b").await;
    assert_eq!(lap(&scheduler).await[2], "6:tenant-b:idle");
    let tenants = [tenant("tenant-a"), tenant("tenant-b")];
    assert_eq!(executor.has_claimable_work(&tenants).await, Some(true));
    assert_eq!(lap(&scheduler).await[2], "10:tenant-b:executed");
    assert_eq!(state(&db, b_run).await, "completed");
}

/// Wake-ups dropped unread (`RunNotifications::take_missed`, reported to
/// the executor as `notifications_missed`) end every known-empty tenant:
/// the next lap asks about each, while listening goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_notifications_end_every_known_empty() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let scheduler = scheduler(&store, Some(Duration::from_secs(60))).await;
    let executor = scheduler.executor();
    executor.notifications_listening(true);
    assert_eq!(
        lap(&scheduler).await,
        [
            "0:tenant-a:idle",
            "1:tenant-a:idle",
            "2:tenant-b:idle",
            "3:tenant-a:idle"
        ]
    );
    // Runs of both tenants whose notifications were among those dropped.
    let (a_run, b_run) = (
        enqueue(&store, "tenant-a").await,
        enqueue(&store, "tenant-b").await,
    );
    assert_eq!(
        lap(&scheduler).await,
        [
            "4:tenant-a:idle",
            "5:tenant-a:idle",
            "6:tenant-b:idle",
            "7:tenant-a:idle"
        ]
    );
    executor.notifications_missed();
    assert_eq!(
        lap(&scheduler).await,
        [
            "8:tenant-a:executed",
            "9:tenant-a:idle",
            "10:tenant-b:executed",
            "11:tenant-a:idle"
        ]
    );
    assert_eq!(
        (state(&db, a_run).await, state(&db, b_run).await),
        ("completed".to_owned(), "completed".to_owned())
    );
    // Still listening: what the lap found empty is known empty again.
    let a_run = enqueue(&store, "tenant-a").await;
    assert_eq!(
        lap(&scheduler).await,
        [
            "12:tenant-a:idle",
            "13:tenant-a:idle",
            "14:tenant-b:idle",
            "15:tenant-a:idle"
        ]
    );
    assert_eq!(state(&db, a_run).await, "available");
}
