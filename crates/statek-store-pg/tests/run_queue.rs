//! The per-tenant run queue against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::TenantId;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{ClaimOutcome, ClaimedRun, FailOutcome, NewRun, StoreError};

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn claimed(outcome: ClaimOutcome) -> ClaimedRun {
    match outcome {
        ClaimOutcome::Claimed(run) => *run,
        other => panic!("expected a claim, got {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn claims_are_fifo_and_tenant_isolated() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let b = tenant("tenant-b");
    let first = store
        .enqueue(&NewRun::new(a.clone(), b"a1".to_vec()))
        .await
        .unwrap();
    let second = store
        .enqueue(&NewRun::new(a.clone(), b"a2".to_vec()))
        .await
        .unwrap();
    store
        .enqueue(&NewRun::new(b.clone(), b"b1".to_vec()))
        .await
        .unwrap();

    let run = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert_eq!(run.lease.run_id(), first.run_id);
    assert_eq!(
        (run.payload.as_slice(), run.attempt, run.tenant.as_str()),
        (&b"a1"[..], 1, "tenant-a")
    );
    let run2 = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert_eq!(run2.lease.run_id(), second.run_id);
    // Both of a's runs are leased: a is idle now although b has work.
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    assert_eq!(
        claimed(store.claim_run(&b, LEASE).await.unwrap()).payload,
        b"b1"
    );
    store.complete_run(&run.lease).await.unwrap();
    store.complete_run(&run2.lease).await.unwrap();
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
}

#[tokio::test]
async fn a_stale_lease_token_changes_nothing() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let first = claimed(
        store
            .claim_run(&a, Duration::from_millis(50))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    // Expired: another worker claims it again, attempt 2.
    let second = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert_eq!(second.lease.run_id(), first.lease.run_id());
    assert_eq!(second.attempt, 2);
    assert_ne!(second.lease.token(), first.lease.token());

    let lost = |r: Result<_, StoreError>| matches!(r, Err(StoreError::LeaseLost { .. }));
    assert!(lost(
        store.heartbeat_run(&first.lease, LEASE).await.map(|_| ())
    ));
    assert!(lost(store.complete_run(&first.lease).await));
    assert!(lost(
        store
            .fail_run(&first.lease, "x", Duration::ZERO)
            .await
            .map(|_| ())
    ));
    store.complete_run(&second.lease).await.unwrap();
    assert!(lost(store.complete_run(&second.lease).await));

    let client = db.client().await;
    let row = client
        .query_one("SELECT state, attempt FROM statek.runs", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i32>(1)),
        ("completed".into(), 2)
    );
}

#[tokio::test]
async fn failures_retry_until_max_attempts_then_fail() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]).max_attempts(2))
        .await
        .unwrap();
    let run = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert!(matches!(
        store
            .fail_run(&run.lease, "boom", Duration::from_secs(3600))
            .await
            .unwrap(),
        FailOutcome::Retrying { .. }
    ));
    // Backing off: not claimable for an hour.
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    db.client()
        .await
        .batch_execute("UPDATE statek.runs SET available_at = now() - interval '1 second'")
        .await
        .unwrap();
    let run = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert_eq!(run.attempt, 2);
    assert_eq!(
        store
            .fail_run(&run.lease, "boom again", Duration::ZERO)
            .await
            .unwrap(),
        FailOutcome::Failed
    );
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}

#[tokio::test]
async fn a_row_locked_elsewhere_is_contended_not_waited_for() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("SELECT * FROM statek.runs FOR UPDATE")
        .await
        .unwrap();
    // SKIP LOCKED: a claim that waited for the lock would end in a
    // lock_timeout error (55P03), not in Contended.
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Contended
    );
    tx.rollback().await.unwrap();
    claimed(store.claim_run(&a, LEASE).await.unwrap());
}

#[tokio::test]
async fn bad_run_input_is_rejected_before_the_database() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let too_big = NewRun::new(a.clone(), vec![0u8; statek_store_pg::MAX_PAYLOAD_BYTES + 1]);
    assert!(matches!(
        store.enqueue(&too_big).await,
        Err(StoreError::InvalidArgument(_))
    ));
    for attempts in [0, 1001] {
        let run = NewRun::new(a.clone(), vec![]).max_attempts(attempts);
        assert!(matches!(
            store.enqueue(&run).await,
            Err(StoreError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        store.claim_run(&a, Duration::ZERO).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}
