//! A Worker claims no faster than the database records its finishes:
//! finished runs waiting for their record are bounded (twice the
//! completion batch), and a handler that finished beyond that keeps its
//! permit. Against a real PostgreSQL whose run rows are locked by another
//! session, so no finish can commit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError,
    RunHandler, RunResult, SchedulerOptions, TenantExecutor, Worker, WorkerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::NewRun;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Runs of the test.
const RUNS: usize = 40;
/// Executing runs of the Worker.
const CONCURRENCY: usize = 4;
/// Runs per completion flush: at most twice this many wait for a record.
const COMPLETION_BATCH: usize = 1;

/// Tells the test which run it executes and returns once the test says so.
struct Announce {
    started: mpsc::UnboundedSender<(Uuid, oneshot::Sender<()>)>,
    executions: Mutex<BTreeMap<Uuid, u32>>,
}

impl RunHandler for Announce {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        *self
            .executions
            .lock()
            .unwrap()
            .entry(run.run_id)
            .or_default() += 1;
        let (go, wait) = oneshot::channel();
        self.started.send((run.run_id, go)).unwrap();
        wait.await
            .map(|()| Completed::new())
            .map_err(|_| RunError::new("the test went away"))
    }
}

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("t-a", 1), ("t-b", 1)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_no_faster_than_its_finishes_are_recorded() {
    let db = TestDatabase::create().await;
    let store = db.store();
    for i in 0..RUNS {
        let tenant = TenantId::try_from(if i % 2 == 0 { "t-a" } else { "t-b" }).unwrap();
        store.enqueue(&NewRun::new(tenant, vec![])).await.unwrap();
    }
    let (started, mut announced) = mpsc::unbounded_channel();
    let handler = Announce {
        started,
        executions: Mutex::default(),
    };
    let options = ExecutorOptions::new()
        .completion_batching(COMPLETION_BATCH, Duration::ZERO)
        .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), handler, options);
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(
            Arc::clone(&scheduler),
            WorkerOptions::new().concurrency(CONCURRENCY).unwrap(),
        )
        .run(shutdown.clone()),
    );

    // Every run that starts is locked by this session before its handler
    // returns, so its finish cannot commit.
    let locker = db.client().await;
    locker.batch_execute("BEGIN").await.unwrap();
    let mut handled = 0;
    // Until no handler starts for 2 s (under the 5 s lock_timeout, after
    // which a blocked finish is retried, still blocked).
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(2), announced.recv()).await {
        let (run_id, go) = next.expect("the handler's channel is open");
        locker
            .execute(
                "SELECT 1 FROM statek.runs WHERE run_id = $1 FOR UPDATE",
                &[&run_id],
            )
            .await
            .unwrap();
        handled += 1;
        go.send(()).unwrap();
    }
    // Twice the completion batch wait for their record; the next
    // CONCURRENCY handlers finished and keep their permits; nothing more
    // is claimed.
    assert_eq!(handled, 2 * COMPLETION_BATCH + CONCURRENCY);
    // What a Worker publishes as statek_worker_runs_awaiting_record.
    assert_eq!(
        scheduler.executor().runs_awaiting_record(),
        Some(2 * COMPLETION_BATCH)
    );

    // Records commit once the rows are free, and every run executes once.
    locker.batch_execute("COMMIT").await.unwrap();
    let drain = tokio::spawn(async move {
        while let Some((_, go)) = announced.recv().await {
            go.send(()).unwrap();
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store.count_live_runs().await.unwrap() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs still live after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    let report = worker.await.unwrap().unwrap();
    assert_eq!(scheduler.executor().runs_awaiting_record(), Some(0));
    assert_eq!(report.executed, RUNS as u64, "{report:?}");
    let executions = scheduler
        .executor()
        .handler()
        .executions
        .lock()
        .unwrap()
        .clone();
    assert_eq!(executions.len(), RUNS);
    assert!(executions.values().all(|&n| n == 1), "{executions:?}");
    drain.abort();
}
