//! A worker whose notification connection goes silent (a NAT that dropped
//! the flow: the socket stays open, nothing comes back) notices it through
//! the connection's probe, listens again on a new connection, and is woken
//! by the next notification.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerOptions, Worker, WorkerOptions,
};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{NewRun, PgStore};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
struct Done;

impl RunHandler for Done {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        Ok(Completed::new())
    }
}

/// The application name of the LISTEN connections, to count them.
const LISTENER: &str = "statek-listen-test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_listens_again_after_its_notification_link_goes_silent() {
    let db = TestDatabase::create().await;
    let (host, port) = match (db.pg_config().get_hosts(), db.pg_config().get_ports()) {
        ([tokio_postgres::config::Host::Tcp(host), ..], [port, ..]) => (host.clone(), *port),
        other => panic!("a TCP test server is needed, got {other:?}"),
    };
    let (relay_port, freeze) =
        statek_store_pg::testing::freezing_relay(format!("{host}:{port}")).await;
    let mut through_relay = tokio_postgres::Config::new();
    through_relay
        .host("127.0.0.1")
        .port(relay_port)
        .user(db.pg_config().get_user().unwrap())
        .dbname(db.name())
        .application_name(LISTENER);
    if let Some(password) = db.pg_config().get_password() {
        through_relay.password(password);
    }
    // The pool connects directly; only LISTEN goes through the relay.
    let store = PgStore::new(
        statek_store_pg::testing::test_store_config(db.pg_config().clone())
            .direct_pg_config(through_relay)
            // Long enough that a loaded machine's slow answer on the new
            // link is not taken for a second dead link.
            .response_timeout(Duration::from_secs(5))
            .unwrap()
            .listen_probe_interval(Duration::from_millis(200))
            .unwrap(),
    )
    .unwrap();
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap();
    let executor = PgRunQueueExecutor::new(store.clone(), Done, ExecutorOptions::new());
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy, executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    // A long backoff cap: the run below is found by its notification, not
    // by the probe.
    let options = WorkerOptions::new()
        .concurrency(1)
        .unwrap()
        .idle_backoff(Duration::from_millis(10), Duration::from_secs(60))
        .unwrap();
    let worker = Worker::new(Arc::clone(&scheduler), options)
        .with_notifications(store.listen_for_runs().await.unwrap());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));

    let client = db.client().await;
    let listeners = async || -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
                &[&db.name(), &LISTENER],
            )
            .await
            .unwrap()
            .get(0)
    };
    assert_eq!(listeners().await, 1);
    freeze.store(true, Ordering::SeqCst);
    // The frozen backend stays; the worker's new LISTEN connection joins it.
    tokio::time::timeout(Duration::from_secs(60), async {
        while listeners().await < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the worker listens again");
    // Connected is not listening yet: wait until a listener backend other
    // than the frozen one has run its LISTEN (its first statement; later
    // only the empty link probe runs, and a backend that ran nothing has no
    // query_start). Enqueued before that, the notification would be lost
    // and the probe, not the notification, would find the run.
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let listening: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = $1 AND application_name = $2
                       AND query_start IS NOT NULL
                       AND (query LIKE 'LISTEN%' OR query = '')",
                    &[&db.name(), &LISTENER],
                )
                .await
                .unwrap()
                .get(0);
            if listening >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the new connection runs LISTEN");

    store
        .enqueue(&NewRun::new(
            TenantId::try_from("tenant-a").unwrap(),
            vec![],
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while store.count_live_runs().await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the notification wakes the worker");
    shutdown.cancel();
    let report = running.await.unwrap().unwrap();
    assert_eq!(
        (report.executed, report.listen_reconnects, report.wakeups),
        (1, 1, 1),
        "{report:?}"
    );
}
