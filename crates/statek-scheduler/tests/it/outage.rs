//! A Worker whose database goes away mid-batch (every connection cut,
//! new ones refused, as when the server crashed or was stopped) and comes
//! back: the store's errors are retryable, the Worker rides out an outage
//! shorter than its outage budget (`WorkerOptions::outage_budget`) and
//! finishes every run exactly once, and an outage that outlasts the
//! budget ends it with a retryable error, not a hang.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_policy::WeightedFairnessPolicy;
use statek_scheduler::{
    Completed, DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunHandler,
    RunResult, SchedulerError, SchedulerOptions, Worker, WorkerOptions, WorkerReport,
};
use statek_store_pg::testing::{test_store_config, TestDatabase};
use statek_store_pg::PgStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("t-a", 3), ("t-b", 2), ("t-c", 1)])
}

/// A relay to the server that can go down: every open connection is cut
/// and new ones are closed at once until it is up again.
struct Switch {
    down: AtomicBool,
    generation: Mutex<CancellationToken>,
}

impl Switch {
    fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.generation.lock().unwrap().cancel();
    }
    fn up(&self) {
        *self.generation.lock().unwrap() = CancellationToken::new();
        self.down.store(false, Ordering::SeqCst);
    }
}

async fn relay(upstream: String) -> (u16, Arc<Switch>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let switch = Arc::new(Switch {
        down: AtomicBool::new(false),
        generation: Mutex::new(CancellationToken::new()),
    });
    let s = Arc::clone(&switch);
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            if s.down.load(Ordering::SeqCst) {
                drop(client);
                continue;
            }
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let cut = s.generation.lock().unwrap().clone();
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, cut.clone()));
            tokio::spawn(pump(sr, cw, cut));
        }
    });
    (port, switch)
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: CancellationToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            () = cut.cancelled() => return,
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[derive(Default)]
struct Counting {
    executions: AtomicU32,
}

impl RunHandler for Counting {
    async fn handle(&self, _run: &Run, _cancel: CancellationToken) -> RunResult {
        self.executions.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(Completed::new())
    }
}

async fn relayed_store(db: &TestDatabase) -> (PgStore, Arc<Switch>) {
    let config = db.pg_config().clone();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = *config.get_ports().first().unwrap();
    let (relay_port, switch) = relay(format!("{host}:{port}")).await;
    // A fresh config: `host`/`port` on a parsed one would add a second
    // address after the direct one, not replace it.
    let mut relayed = tokio_postgres::Config::new();
    relayed.host("127.0.0.1").port(relay_port);
    if let Some(user) = config.get_user() {
        relayed.user(user);
    }
    if let Some(password) = config.get_password() {
        relayed.password(password);
    }
    relayed.dbname(db.name());
    (PgStore::new(test_store_config(relayed)).unwrap(), switch)
}

async fn enqueue(client: &tokio_postgres::Client, total: i64) {
    for t in ["t-a", "t-b", "t-c"] {
        client
            .execute(
                "INSERT INTO statek.runs (run_id, tenant_id, payload)
                 SELECT gen_random_uuid(), $1, ''::bytea FROM generate_series(1, $2::bigint)",
                &[&t, &total],
            )
            .await
            .unwrap();
    }
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Runs of 200 per tenant (600) under a Worker of 8 permits on a relayed
/// store; returns what the test needs.
async fn started(
    db: &TestDatabase,
    budget: Duration,
) -> (
    Arc<DurableFairScheduler<PgRunQueueExecutor<Counting>, PgStore>>,
    Arc<Switch>,
    CancellationToken,
    tokio::task::JoinHandle<Result<WorkerReport, SchedulerError>>,
) {
    let client = db.client().await;
    let (store, switch) = relayed_store(db).await;
    enqueue(&client, 200).await;
    // A 10 s lease: a completion whose write fails during the outage is
    // retried for a lease, so it commits once the server is back; a claim
    // whose acknowledgement the cut lost is rescued after it.
    let executor = PgRunQueueExecutor::new(
        store.clone(),
        Counting::default(),
        ExecutorOptions::new()
            .lease(Duration::from_secs(10))
            .unwrap(),
    );
    let scheduler = Arc::new(
        DurableFairScheduler::register(store.clone(), policy(), executor, SchedulerOptions::new())
            .await
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let worker = Worker::new(
        Arc::clone(&scheduler),
        WorkerOptions::new()
            .concurrency(8)
            .unwrap()
            .maintenance_every(Duration::from_secs(1))
            .unwrap()
            .shutdown_grace(Duration::from_secs(2))
            .unwrap()
            .outage_budget(budget)
            .unwrap(),
    );
    let running = tokio::spawn(worker.run(shutdown.clone()));
    // Mid-backlog.
    while count(
        &client,
        "SELECT count(*) FROM statek.runs WHERE state = 'completed'",
    )
    .await
        < 100
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (scheduler, switch, shutdown, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rides_out_a_6_s_outage_within_a_10_s_budget_and_runs_every_run_once() {
    let db = TestDatabase::create().await;
    let client = db.client().await;
    let (scheduler, switch, shutdown, running) = started(&db, Duration::from_secs(10)).await;
    // The server is gone for 6 s, within the budget of 10 s (and longer
    // than the 10 failing rounds, about 4.3 s, that ended a Worker before
    // it had a budget).
    switch.down();
    tokio::time::sleep(Duration::from_secs(6)).await;
    switch.up();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done = count(
            &client,
            "SELECT count(*) FROM statek.runs WHERE state = 'completed'",
        )
        .await;
        if done == 600 || running.is_finished() || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !running.is_finished(),
        "the worker ended: {:?}",
        running.await
    );
    shutdown.cancel();
    let report = tokio::time::timeout(Duration::from_secs(120), running)
        .await
        .expect("the worker stops")
        .unwrap()
        .expect("the worker rides out a 6 s outage");
    eprintln!("{report:?}");
    let executions = scheduler
        .executor()
        .handler()
        .executions
        .load(Ordering::SeqCst);
    let states: Vec<(String, i64)> = client
        .query("SELECT state, count(*) FROM statek.runs GROUP BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // One outage, ridden out; every run completed, and executed once: no
    // lease expired during 6 s of a 10 s lease.
    assert_eq!(
        (
            states,
            executions,
            report.outages,
            report.transient_errors > 0
        ),
        (vec![("completed".to_owned(), 600)], 600, 1, true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_outlasting_a_1_s_budget_ends_the_worker_with_a_retryable_error() {
    let db = TestDatabase::create().await;
    let (_scheduler, switch, _shutdown, running) = started(&db, Duration::from_secs(1)).await;
    switch.down();
    let cut = std::time::Instant::now();
    // The server stays away until the Worker ends (it gives up about
    // 1.4 s after its first failed reservation).
    let ended = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the worker ends instead of hanging")
        .unwrap();
    let after = cut.elapsed();
    switch.up();
    eprintln!("ended after {after:?}: {ended:?}");
    let error = ended.expect_err("an outage past the budget ends the worker");
    let retryable_store_error = matches!(
        &error,
        SchedulerError::Source { source, .. } if source.is_retryable()
    );
    // It gave up only once reservations had failed for the whole budget.
    assert_eq!(
        (
            retryable_store_error,
            error.is_retryable(),
            after >= Duration::from_secs(1)
        ),
        (true, true, true),
        "{error}"
    );
}
