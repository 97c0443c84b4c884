//! A Worker whose shard is halted in the database (migration V10) stays up,
//! reserves and runs nothing, exports `statek_shard_halted{shard} 1`, and
//! goes on by itself once the owner resumes the shard. The metrics go to a
//! recorder of this test's thread (`metrics::set_default_local_recorder`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::NewRun;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Count(Arc<AtomicU64>);

impl RunHandler for Count {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Completed::new())
    }
}

fn halted_gauge(handle: &PrometheusHandle) -> Option<f64> {
    handle
        .render()
        .lines()
        .find(|l| l.starts_with("statek_shard_halted{shard=\"halted-v1\"}"))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_worker_waits_out_a_halt_and_goes_on_after_the_resume() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let db = TestDatabase::create().await;
    let store = db.store();
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("halted-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap();
    let executed = Arc::new(AtomicU64::new(0));
    let executor = PgRunQueueExecutor::new(
        store.clone(),
        Count(Arc::clone(&executed)),
        ExecutorOptions::new(),
    );
    let scheduler = Arc::new(
        DurableFairScheduler::register(
            store.clone(),
            policy.clone(),
            executor,
            SchedulerOptions::new(),
        )
        .await
        .unwrap(),
    );
    // One slot reserved before the halt.
    let shutdown = CancellationToken::new();
    scheduler.tick(&shutdown).await.unwrap();
    assert_eq!(halted_gauge(&handle), Some(0.0));

    // A loss recorded by another replica (the database's own function).
    let client = db.client().await;
    let timeline: i32 = client
        .query_one("SELECT statek.server_timeline()", &[])
        .await
        .unwrap()
        .get(0);
    client
        .query(
            "SELECT * FROM statek.record_reservation_loss('halted-v1', true, $1, 1,
                 jsonb_build_array(jsonb_build_object('reservation_id', $2::uuid,
                     'sequence', 1, 'count', 1, 'evidence', 'missing')),
                 'another replica', 'on')",
            &[&(timeline + 1), &Uuid::now_v7()],
        )
        .await
        .unwrap();
    store
        .enqueue(&NewRun::new(
            TenantId::try_from("tenant-a").unwrap(),
            Vec::new(),
        ))
        .await
        .unwrap();

    let worker = tokio::spawn(
        Worker::new(
            Arc::clone(&scheduler),
            WorkerOptions::new()
                .halted_recheck(Duration::from_millis(100))
                .unwrap(),
        )
        .run(shutdown.clone()),
    );
    until("the halt gauge at 1", || halted_gauge(&handle) == Some(1.0)).await;
    // Halted: the Worker is up, has run nothing, and the cursor stayed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!worker.is_finished(), "a halted shard ended the Worker");
    assert_eq!(executed.load(Ordering::SeqCst), 0);
    assert_eq!(store.next_sequence(policy.shard_id()).await.unwrap(), 1);

    // A separate store (the operator's) resumes the shard.
    let resumed = db
        .store()
        .resume_shard(policy.shard_id(), None)
        .await
        .unwrap();
    assert_eq!(resumed.len(), 1);
    until("the run executed after the resume", || {
        executed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(halted_gauge(&handle), Some(0.0));
    shutdown.cancel();
    let report = worker.await.unwrap().unwrap();
    assert_eq!(report.executed, 1);
}
