//! Through a real PgBouncer in transaction pooling mode (Debian's 1.18:
//! no `max_prepared_statements`, no `options` startup parameter): the
//! store in transaction pooling mode registers, reserves (with replay of a
//! lost acknowledgement), runs the run queue (completion batching too) and
//! listens over its direct connection; it refuses, with typed errors, what
//! cannot work there.
//!
//! Needs `STATEK_TEST_PGBOUNCER_URL` (set by `cargo xtask test`); without
//! it these tests fail, they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::{ConnectionError, RolloutError, RunQueueError};
use std::time::Duration;

use statek_core::Registration;
use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{
    ClaimOutcome, FailOutcome, FinishOutcome, FinishRun, NewRun, PgStore, StoreConfig, StoreError,
};
use uuid::Uuid;

fn policy(weight_b: u32) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", weight_b)])
}

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// A migrated database whose session settings are set for the database, and
/// a store that reaches it through PgBouncer. A small pool: consecutive
/// calls share client connections, whose statements PgBouncer spreads over
/// its server connections.
async fn bounced() -> (TestDatabase, PgStore) {
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config().pool_size(2).unwrap();
    db.set_session_settings(&config).await;
    let store = PgStore::new(config).unwrap();
    (db, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_through_pgbouncer() {
    let (_db, store) = bounced().await;
    let p = policy(1);
    let first = store.register(&p).await.unwrap();
    assert!(
        matches!(first, Registration::Registered { .. }),
        "{first:?}"
    );
    let again = store.register(&p).await.unwrap();
    assert_eq!(
        again,
        Registration::Idempotent {
            registered_at: first.registered_at()
        }
    );
    let err = store.register(&policy(2)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Rollout(RolloutError::PolicyConflict { stored, offered, .. })
            if *stored == p.digest() && *offered == policy(2).digest()),
        "{err:?}"
    );
    let stored = store.load_shard(p.shard_id()).await.unwrap();
    assert_eq!((stored.policy(), stored.next_sequence()), (&p, 0));
}

/// The same statements many times over few client connections: with named
/// prepared statements PgBouncer 1.18 would hand them to server connections
/// that never saw them (or already hold one of that name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_and_their_replay_through_pgbouncer() {
    let (_db, store) = bounced().await;
    let p = policy(1);
    store.register(&p).await.unwrap();
    let mut ids = Vec::new();
    for expected in 0..20_u64 {
        let id = Uuid::now_v7();
        let r = store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
        assert_eq!(
            (r.sequence(), r.slot(), r.replayed()),
            (expected, u32::try_from(expected % 4).unwrap(), false)
        );
        ids.push(id);
    }
    // A retry after a lost acknowledgement: the same id, the same sequence.
    for (expected, id) in (0..20_u64).zip(&ids) {
        let r = store.reserve(p.shard_id(), &p.digest(), *id).await.unwrap();
        assert_eq!((r.sequence(), r.replayed()), (expected, true));
    }
    let batch_id = Uuid::now_v7();
    let batch = store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 3)
        .await
        .unwrap();
    let sequences = |b: &statek_store_pg::ReservationBatch| -> Vec<u64> {
        b.reservations().iter().map(|r| r.sequence()).collect()
    };
    assert_eq!(
        (sequences(&batch), batch.replayed()),
        (vec![20, 21, 22], false)
    );
    let replay = store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 3)
        .await
        .unwrap();
    assert_eq!(
        (sequences(&replay), replay.replayed()),
        (vec![20, 21, 22], true)
    );
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 23);
    let read: Vec<u64> = store
        .reservations(p.shard_id(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(read, (0..23).collect::<Vec<_>>());
    let status = store
        .shard_status(p.shard_id(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!((status.retained, status.past_retention), (23, 0));
}

/// Many client connections at once over fewer server connections: each
/// statement may land on a server connection another client prepared on.
/// Every id gets exactly one sequence, and the sequences are `0..N`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservations_through_pgbouncer() {
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config().pool_size(8).unwrap();
    db.set_session_settings(&config).await;
    let store = PgStore::new(config).unwrap();
    let p = policy(1);
    store.register(&p).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (store, p) = (store.clone(), p.clone());
        tasks.spawn(async move {
            let mut sequences = Vec::new();
            for _ in 0..25 {
                let id = Uuid::now_v7();
                let r = store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
                let again = store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
                assert_eq!((again.sequence(), again.replayed()), (r.sequence(), true));
                assert!(store
                    .any_claimable_runs(&[TenantId::try_from("tenant-a").unwrap()])
                    .await
                    .is_ok());
                sequences.push(r.sequence());
            }
            sequences
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_queue_through_pgbouncer() {
    let (_db, store) = bounced().await;
    let a = tenant("tenant-a");
    assert!(!store
        .any_claimable_runs(std::slice::from_ref(&a))
        .await
        .unwrap());
    let first = store
        .enqueue(&NewRun::new(a.clone(), b"one".to_vec()).idempotency_key("k1"))
        .await
        .unwrap();
    let dup = store
        .enqueue(&NewRun::new(a.clone(), b"one".to_vec()).idempotency_key("k1"))
        .await
        .unwrap();
    assert_eq!((dup.run_id, dup.deduplicated), (first.run_id, true));
    let second = store
        .enqueue(&NewRun::new(a.clone(), b"two".to_vec()))
        .await
        .unwrap();
    assert!(store
        .any_claimable_runs(std::slice::from_ref(&a))
        .await
        .unwrap());
    assert_eq!(
        store
            .count_live_runs_of(std::slice::from_ref(&a))
            .await
            .unwrap(),
        2
    );

    let claimed = match store.claim_run(&a, Duration::from_secs(30)).await.unwrap() {
        ClaimOutcome::Claimed(run) => run,
        other => panic!("expected the first run, got {other:?}"),
    };
    assert_eq!(
        (
            claimed.lease.run_id(),
            claimed.payload.as_slice(),
            claimed.attempt
        ),
        (first.run_id, &b"one"[..], 1)
    );
    store
        .heartbeat_run(&claimed.lease, Duration::from_secs(30))
        .await
        .unwrap();
    store.complete_run(&claimed.lease).await.unwrap();
    let err = store.complete_run(&claimed.lease).await.unwrap_err();
    assert!(
        matches!(err, StoreError::RunQueue(RunQueueError::LeaseLost { run_id }) if run_id == first.run_id),
        "{err:?}"
    );

    let claimed = match store.claim_run(&a, Duration::from_secs(30)).await.unwrap() {
        ClaimOutcome::Claimed(run) => run,
        other => panic!("expected the second run, got {other:?}"),
    };
    assert_eq!(claimed.lease.run_id(), second.run_id);
    assert!(matches!(
        store
            .fail_run(&claimed.lease, "boom", Duration::from_secs(3600))
            .await
            .unwrap(),
        FailOutcome::Retrying { .. }
    ));
    assert_eq!(
        store.claim_run(&a, Duration::from_secs(30)).await.unwrap(),
        ClaimOutcome::Idle
    );
    assert!(store.cancel_run(second.run_id).await.unwrap());
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
    assert_eq!(store.find_expired_runs(10).await.unwrap(), vec![]);
}

/// Completion batching is one unnamed statement through PgBouncer; its
/// replay answers from the claim history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_batching_through_pgbouncer() {
    let (_db, store) = bounced().await;
    let a = tenant("tenant-a");
    let mut leases = Vec::new();
    for payload in [b"one", b"two"] {
        store
            .enqueue(&NewRun::new(a.clone(), payload.to_vec()).max_attempts(1))
            .await
            .unwrap();
        match store.claim_run(&a, Duration::from_secs(30)).await.unwrap() {
            ClaimOutcome::Claimed(run) => leases.push(run.lease),
            other => panic!("expected a claim, got {other:?}"),
        }
    }
    let batch = [
        FinishRun::complete(leases[0]),
        FinishRun::fail(leases[1], "boom", Duration::ZERO),
    ];
    assert_eq!(
        store.finish_runs(&batch).await.unwrap(),
        [FinishOutcome::Completed, FinishOutcome::Failed]
    );
    assert_eq!(
        store.finish_runs(&batch).await.unwrap(),
        [FinishOutcome::AlreadyRecorded; 2]
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}

/// LISTEN goes over the direct connection; a wake-up arrives for a run
/// enqueued through PgBouncer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_use_the_direct_connection() {
    let (_db, store) = bounced().await;
    let mut notifications = store.listen_for_runs().await.unwrap();
    store
        .enqueue(&NewRun::new(tenant("tenant-b"), b"x".to_vec()))
        .await
        .unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(60), notifications.recv())
        .await
        .expect("a wake-up")
        .expect("the stream is open")
        .unwrap();
    assert_eq!(woken, tenant("tenant-b"));
}

/// Without a direct connection, LISTEN and migrations refuse with a typed,
/// non-retryable error instead of misbehaving behind the pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_migrations_need_a_direct_connection() {
    let db = TestDatabase::create().await;
    let mut pg = db.pgbouncer_store_config().pg_config().clone();
    pg.dbname(db.name());
    let store = PgStore::new(StoreConfig::from_pg_config(pg).transaction_pooling(true)).unwrap();
    let err = store.listen_for_runs().await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Connection(ConnectionError::DirectConnectionRequired { what: "LISTEN" })
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let err = store.migrate().await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Connection(ConnectionError::DirectConnectionRequired {
                what: "migrations"
            })
        ),
        "{err:?}"
    );
    // With the direct connection, migrating again is a no-op.
    let report = PgStore::new(db.pgbouncer_store_config())
        .unwrap()
        .migrate()
        .await
        .unwrap();
    assert_eq!(report.applied(), &[]);
}

/// Under transaction pooling statek cannot send `lock_timeout`; a role or
/// database without it is refused at registration, naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refuses_missing_session_settings() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.pgbouncer_store_config()).unwrap();
    let err = store.register(&policy(1)).await.unwrap_err();
    match &err {
        StoreError::Connection(ConnectionError::SessionSettingMismatch {
            setting,
            expected,
            found,
            role,
        }) => assert_eq!(
            (*setting, expected.as_str(), found.as_str(), role.as_str()),
            ("lock_timeout", "5000ms", "0ms", "postgres")
        ),
        other => panic!("expected a settings mismatch, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(
        err.to_string()
            .contains("ALTER ROLE \"postgres\" SET lock_timeout = '5000ms'"),
        "{err}"
    );
    // Nothing was registered.
    let err = store.load_shard(policy(1).shard_id()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Rollout(RolloutError::UnknownShard { .. })),
        "{err:?}"
    );
}

/// Why the mode exists: PgBouncer 1.18 refuses the `options` startup
/// parameter that statek sends outside transaction pooling mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pooling_mode_pgbouncer_refuses_the_startup_options() {
    let db = TestDatabase::create().await;
    let pg = db.pgbouncer_store_config().pg_config().clone();
    let store = PgStore::new(StoreConfig::from_pg_config(pg)).unwrap();
    let err = store
        .any_claimable_runs(&[TenantId::try_from("tenant-a").unwrap()])
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate(), Some("08P01"), "{err:?}");
}
