//! A Worker ticking runs to completion through a real PgBouncer in
//! transaction pooling mode (`STATEK_TEST_PGBOUNCER_URL`, set by
//! `cargo xtask test`; without it this test fails, it never skips): once
//! with notifications over the direct connection, once polling.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{NewRun, PgStore};
use tokio_util::sync::CancellationToken;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

#[derive(Debug, Default)]
struct Counting {
    runs: AtomicU32,
}

impl RunHandler for Counting {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Completed::new())
    }
}

async fn worker_completes_runs(notify: bool, batch_size: u32) {
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config().pool_size(4).unwrap();
    db.set_session_settings(&config).await;
    let store = PgStore::new(config).unwrap();
    for i in 0..30 {
        let tenant = if i % 3 == 0 { "tenant-b" } else { "tenant-a" };
        store
            .enqueue(&NewRun::new(TenantId::try_from(tenant).unwrap(), vec![]))
            .await
            .unwrap();
    }
    let executor =
        PgRunQueueExecutor::new(store.clone(), Counting::default(), ExecutorOptions::new());
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    let options = WorkerOptions::new()
        .concurrency(3)
        .unwrap()
        .max_batch(batch_size)
        .unwrap();
    let mut worker = Worker::new(Arc::clone(&scheduler), options);
    if notify {
        worker = worker.with_notifications(store.listen_for_runs().await.unwrap());
    }
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(120), async {
        while store.count_live_runs().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the worker completes every run");
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.executed, 30, "{report:?}");
    assert_eq!(
        scheduler.executor().handler().runs.load(Ordering::SeqCst),
        30
    );
    // Every reservation is on the shard, gapless.
    let cursor = store.next_sequence(policy().shard_id()).await.unwrap();
    let sequences: Vec<u64> = store
        .reservations(policy().shard_id(), 0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(sequences, (0..cursor).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_notifications_through_pgbouncer() {
    worker_completes_runs(true, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_worker_with_batches_through_pgbouncer() {
    worker_completes_runs(false, 4).await;
}
