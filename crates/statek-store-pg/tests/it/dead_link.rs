//! A pooled connection whose peer silently stops answering (a NAT that
//! dropped the flow, a failover without a reset): the socket stays open and
//! nothing comes back. `reserve` must give up after the response timeout
//! with a retryable error, discard that connection, and serve the retry on
//! a new one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::ConnectionError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{PgStore, StoreConfig, StoreError};
use uuid::Uuid;

/// The response timeout of the tests: long enough for a healthy statement
/// on a loaded CI machine, short enough to keep the tests quick.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// A store (pool of 1, response timeout [`RESPONSE_TIMEOUT`]) that reaches
/// `db` through a relay, and the relay's freeze switch.
async fn store_behind_relay(db: &TestDatabase) -> (PgStore, Arc<AtomicBool>) {
    store_behind_relay_with(db, Ok).await
}

/// As [`store_behind_relay`], with more settings applied by `more`.
async fn store_behind_relay_with(
    db: &TestDatabase,
    more: impl FnOnce(StoreConfig) -> Result<StoreConfig, StoreError>,
) -> (PgStore, Arc<AtomicBool>) {
    let (host, port) = match (db.pg_config().get_hosts(), db.pg_config().get_ports()) {
        ([tokio_postgres::config::Host::Tcp(host), ..], [port, ..]) => (host.clone(), *port),
        other => panic!("a TCP test server is needed, got {other:?}"),
    };
    let (relay_port, freeze) =
        statek_store_pg::testing::freezing_relay(format!("{host}:{port}")).await;
    // A fresh config: `host`/`port` on a clone would add a second host.
    let mut pg = tokio_postgres::Config::new();
    pg.host("127.0.0.1")
        .port(relay_port)
        .user(db.pg_config().get_user().unwrap())
        .dbname(db.name());
    if let Some(password) = db.pg_config().get_password() {
        pg.password(password);
    }
    let config = statek_store_pg::testing::test_store_config(pg)
        .pool_size(1)
        .unwrap()
        .response_timeout(RESPONSE_TIMEOUT)
        .unwrap();
    let store = PgStore::new(more(config).unwrap()).unwrap();
    (store, freeze)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_times_out_and_is_discarded() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay(&db).await;
    let p = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap();
    store.register(&p).await.unwrap();
    let first = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(first.sequence(), 0);

    freeze.store(true, Ordering::SeqCst);
    let id = Uuid::now_v7();
    let started = Instant::now();
    // The outer timeout only keeps a regression from hanging the suite.
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        store.reserve(p.shard_id(), &p.digest(), id),
    )
    .await
    .expect("reserve must not hang on a silent connection")
    .expect_err("the connection is silent");
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(started.elapsed() >= RESPONSE_TIMEOUT);

    // The pool (size 1) discarded the silent connection: the retry opens a
    // new one. The swallowed statement never reached the server, so the
    // retry reserves sequence 1 afresh.
    let retry = tokio::time::timeout(
        Duration::from_secs(60),
        store.reserve(p.shard_id(), &p.digest(), id),
    )
    .await
    .expect("the retry must not hang")
    .unwrap();
    assert_eq!((retry.sequence(), retry.replayed()), (1, false));
}

/// The run queue's hot path has the same deadline: a claim on a silent
/// connection fails with `ResponseTimeout` and the next claim, on a new
/// connection, gets the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_silent_connection_times_out() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay(&db).await;
    let tenant = TenantId::try_from("tenant-a").unwrap();
    let run = store
        .enqueue(&statek_store_pg::NewRun::new(tenant.clone(), b"x".to_vec()))
        .await
        .unwrap();
    freeze.store(true, Ordering::SeqCst);
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        store.claim_run(&tenant, Duration::from_secs(30)),
    )
    .await
    .expect("claim must not hang on a silent connection")
    .expect_err("the connection is silent");
    assert!(
        matches!(
            err,
            StoreError::Connection(ConnectionError::ResponseTimeout { .. })
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    // The frozen claim never reached the server: the run is still there.
    match store
        .claim_run(&tenant, Duration::from_secs(30))
        .await
        .unwrap()
    {
        statek_store_pg::ClaimOutcome::Claimed(claimed) => {
            assert_eq!((claimed.lease.run_id(), claimed.attempt), (run.run_id, 1));
        }
        other => panic!("expected the run, got {other:?}"),
    }
}

/// Runs `call` with a generous outer limit (it only keeps a regression
/// from hanging the suite) and returns its error.
async fn silent_error<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> StoreError {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call must not hang on a silent connection")
        .expect_err("the connection is silent")
}

fn one_tenant_policy() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap()
}

/// The Worker's idle probe: `any_claimable_runs` on a silent connection
/// gives up after the response timeout, and the next probe, on a new
/// connection, sees the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_probe_on_a_silent_connection_times_out() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay(&db).await;
    let tenants = [TenantId::try_from("tenant-a").unwrap()];
    assert!(!store.any_claimable_runs(&tenants).await.unwrap());
    store
        .enqueue(&statek_store_pg::NewRun::new(
            TenantId::try_from("tenant-a").unwrap(),
            b"x".to_vec(),
        ))
        .await
        .unwrap();
    freeze.store(true, Ordering::SeqCst);
    let err = silent_error(store.any_claimable_runs(&tenants)).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(store.any_claimable_runs(&tenants).await.unwrap());
}

/// Lease expiry: both phases of the expiry pass have the deadline. The
/// frozen rescue never reached the server, so the retry requeues the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expiry_pass_on_a_silent_connection_times_out() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay(&db).await;
    let tenant = TenantId::try_from("tenant-a").unwrap();
    let run = store
        .enqueue(&statek_store_pg::NewRun::new(tenant.clone(), b"x".to_vec()))
        .await
        .unwrap();
    let claimed = match store
        .claim_run(&tenant, Duration::from_millis(1))
        .await
        .unwrap()
    {
        statek_store_pg::ClaimOutcome::Claimed(claimed) => claimed,
        other => panic!("expected the run, got {other:?}"),
    };
    // Wait (database clock) until the 1 ms lease has expired.
    let expired = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let expired = store.find_expired_runs(10).await.unwrap();
            if !expired.is_empty() {
                return expired;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a 1 ms lease expires");
    assert_eq!(
        expired.iter().map(|e| e.lease).collect::<Vec<_>>(),
        vec![claimed.lease]
    );

    freeze.store(true, Ordering::SeqCst);
    let err = silent_error(store.rescue_expired_run(&expired[0])).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
    assert_eq!(
        store.rescue_expired_run(&expired[0]).await.unwrap(),
        statek_store_pg::RescueOutcome::Requeued
    );

    // Phase one too, on the next silent connection.
    let (store, freeze) = store_behind_relay(&db).await;
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
    freeze.store(true, Ordering::SeqCst);
    let err = silent_error(store.find_expired_runs(10)).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
    assert_eq!(store.find_expired_runs(10).await.unwrap(), vec![]);
    match store
        .claim_run(&tenant, Duration::from_secs(30))
        .await
        .unwrap()
    {
        statek_store_pg::ClaimOutcome::Claimed(again) => {
            assert_eq!((again.lease.run_id(), again.attempt), (run.run_id, 2));
        }
        other => panic!("expected the requeued run, got {other:?}"),
    }
}

/// A status read (`shard_status`, as `statek status` runs it) on a silent
/// connection gives up after the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_read_on_a_silent_connection_times_out() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay(&db).await;
    let p = one_tenant_policy();
    store.register(&p).await.unwrap();
    store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    freeze.store(true, Ordering::SeqCst);
    let err = silent_error(store.shard_status(p.shard_id(), Duration::from_secs(3600))).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
    let status = store
        .shard_status(p.shard_id(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        (
            status.stored.next_sequence(),
            status.retained,
            status.past_retention
        ),
        (1, 1, 0)
    );

    // The cursor read has the deadline too.
    let (store, freeze) = store_behind_relay(&db).await;
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 1);
    freeze.store(true, Ordering::SeqCst);
    let err = silent_error(store.next_sequence(p.shard_id())).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == RESPONSE_TIMEOUT),
        "{err:?}"
    );
}

/// Pruning runs under the maintenance timeout, not the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_on_a_silent_connection_times_out_after_the_maintenance_timeout() {
    const MAINTENANCE: Duration = Duration::from_secs(4);
    let db = TestDatabase::create().await;
    let (store, freeze) =
        store_behind_relay_with(&db, |config| config.maintenance_timeout(MAINTENANCE)).await;
    let retention =
        statek_store_pg::SchedulerFairnessRetentionPolicy::new(Duration::from_secs(3600), 100)
            .unwrap();
    assert_eq!(
        store
            .prune_scheduler_fairness_reservations(&retention)
            .await
            .unwrap()
            .deleted,
        0
    );
    freeze.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let err = silent_error(store.prune_scheduler_fairness_reservations(&retention)).await;
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::ResponseTimeout { after }) if after == MAINTENANCE),
        "{err:?}"
    );
    assert!(started.elapsed() >= MAINTENANCE);
}

/// The LISTEN connection probes its link: once the relay goes silent, the
/// probe gets no answer within the response timeout and the stream reports
/// it once, then ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listen_connection_is_reported() {
    let db = TestDatabase::create().await;
    let (store, freeze) = store_behind_relay_with(&db, |config| {
        config.listen_probe_interval(Duration::from_millis(200))
    })
    .await;
    let mut notifications = store.listen_for_runs().await.unwrap();
    // The link works: an enqueue (on the pooled connection) wakes it.
    store
        .enqueue(&statek_store_pg::NewRun::new(
            TenantId::try_from("tenant-a").unwrap(),
            b"x".to_vec(),
        ))
        .await
        .unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(60), notifications.recv())
        .await
        .expect("a wake-up");
    assert_eq!(
        woken.map(|r| r.map(|t| t.as_str().to_owned()).unwrap()),
        Some("tenant-a".to_owned())
    );

    freeze.store(true, Ordering::SeqCst);
    let reported = tokio::time::timeout(Duration::from_secs(60), notifications.recv())
        .await
        .expect("the silent link must be reported, not waited on forever");
    match reported {
        Some(Err(error)) => match error.downcast_ref::<StoreError>() {
            Some(StoreError::Connection(ConnectionError::ResponseTimeout { after })) => {
                assert_eq!(error.kind(), statek_core::SourceErrorKind::Transient);
                assert_eq!(*after, RESPONSE_TIMEOUT);
            }
            other => panic!("expected a response timeout, got {other:?}"),
        },
        other => panic!("expected a response timeout, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(60), notifications.recv())
        .await
        .expect("the stream ends after the report");
    assert!(end.is_none(), "{end:?}");
}
