//! The per-tenant run queue against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::time::Duration;

use statek_policy::TenantId;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{ClaimOutcome, ClaimedRun, FailOutcome, NewRun, RescueOutcome, StoreError};

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

    let lost = |r: Result<_, StoreError>| {
        matches!(
            r,
            Err(StoreError::RunQueue(RunQueueError::LeaseLost { .. }))
        )
    };
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
        .batch_execute("UPDATE statek.runs SET available_at = now() - interval '1 second' WHERE state <> 'completed'")
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
    let too_big = NewRun::new(a.clone(), vec![0u8; statek_core::MAX_PAYLOAD_BYTES + 1]);
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

#[tokio::test]
async fn idempotency_keys_deduplicate_per_tenant() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let b = tenant("tenant-b");
    let first = store
        .enqueue(&NewRun::new(a.clone(), b"x".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(!first.deduplicated);
    let again = store
        .enqueue(&NewRun::new(a.clone(), b"x".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert_eq!((again.run_id, again.deduplicated), (first.run_id, true));
    // Another payload under the same key is a conflict; nothing written.
    assert!(matches!(
        store
            .enqueue(&NewRun::new(a.clone(), b"y".to_vec()).idempotency_key("order-1"))
            .await,
        Err(StoreError::RunQueue(RunQueueError::IdempotencyConflict { run_id })) if run_id == first.run_id
    ));
    // The same key for another tenant is another run.
    let other = store
        .enqueue(&NewRun::new(b.clone(), b"x".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(!other.deduplicated);
    assert_ne!(other.run_id, first.run_id);
    assert!(matches!(
        store
            .enqueue(&NewRun::new(a.clone(), vec![]).idempotency_key(""))
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.count_live_runs().await.unwrap(), 2);
}

#[tokio::test]
async fn cancel_stops_a_queued_or_running_run() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let queued = store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    assert!(store.cancel_run(queued.run_id).await.unwrap());
    assert!(!store.cancel_run(queued.run_id).await.unwrap());
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );

    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let running = claimed(store.claim_run(&a, LEASE).await.unwrap());
    assert!(store.cancel_run(running.lease.run_id()).await.unwrap());
    // The worker finds out at its next heartbeat or completion.
    assert!(matches!(
        store.heartbeat_run(&running.lease, LEASE).await,
        Err(StoreError::RunQueue(RunQueueError::LeaseLost { .. }))
    ));
    assert!(matches!(
        store.complete_run(&running.lease).await,
        Err(StoreError::RunQueue(RunQueueError::LeaseLost { .. }))
    ));
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}

#[tokio::test]
async fn the_expiry_pass_changes_nothing_for_a_run_completed_after_it_was_read() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]).max_attempts(1))
        .await
        .unwrap();
    // Long leases, expired afterwards in the database: with short ones, a
    // slow second claim could find the first lease already expired and
    // take that run again instead of the second.
    let slow = claimed(store.claim_run(&a, Duration::from_secs(60)).await.unwrap());
    let last_try = claimed(store.claim_run(&a, Duration::from_secs(60)).await.unwrap());
    let client = db.client().await;
    for (lease, ago) in [(&slow.lease, 2.0f64), (&last_try.lease, 1.0)] {
        client
            .execute(
                "UPDATE statek.runs \
                 SET lease_expires_at = clock_timestamp() - make_interval(secs => $2) \
                 WHERE run_id = $1",
                &[&lease.run_id(), &ago],
            )
            .await
            .unwrap();
    }

    let expired = store.find_expired_runs(10).await.unwrap();
    assert_eq!(
        expired.iter().map(|e| e.lease).collect::<Vec<_>>(),
        vec![slow.lease, last_try.lease]
    );
    // The slow worker completes after the pass read it as expired.
    store.complete_run(&slow.lease).await.unwrap();
    assert_eq!(
        store.rescue_expired_run(&expired[0]).await.unwrap(),
        RescueOutcome::Unchanged
    );
    // The run that expired on its last attempt is failed.
    assert_eq!(
        store.rescue_expired_run(&expired[1]).await.unwrap(),
        RescueOutcome::Failed
    );
    assert_eq!(
        store.rescue_expired_run(&expired[1]).await.unwrap(),
        RescueOutcome::Unchanged
    );
    let states: Vec<(String, i32)> = client
        .query(
            "SELECT state, attempt FROM statek.runs ORDER BY queue_seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(states, vec![("completed".into(), 1), ("failed".into(), 1)]);
}

#[tokio::test]
async fn a_claimable_run_wakes_listeners() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let mut wakeups = store.listen_for_runs().await.unwrap();
    let a = tenant("tenant-a");
    // Delayed runs do not notify at insert; available ones do.
    store
        .enqueue(&NewRun::new(a.clone(), vec![]).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    store
        .enqueue(&NewRun::new(tenant("tenant-b"), vec![]))
        .await
        .unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(10), wakeups.recv())
        .await
        .expect("a wake-up")
        .expect("listening")
        .unwrap();
    assert_eq!(woke.as_str(), "tenant-b");
    // A failed run put back with no delay notifies again.
    let run = claimed(store.claim_run(&tenant("tenant-b"), LEASE).await.unwrap());
    store
        .fail_run(&run.lease, "retry", Duration::ZERO)
        .await
        .unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(10), wakeups.recv())
        .await
        .expect("a wake-up")
        .expect("listening")
        .unwrap();
    assert_eq!(woke.as_str(), "tenant-b");
}

#[tokio::test]
async fn error_text_with_nul_bytes_is_recorded() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let run = claimed(store.claim_run(&a, LEASE).await.unwrap());
    let long = "x".repeat(10_000);
    assert!(matches!(
        store
            .fail_run(
                &run.lease,
                &format!("bad\0message {long}"),
                Duration::from_secs(3600)
            )
            .await
            .unwrap(),
        FailOutcome::Retrying { .. }
    ));
    let client = db.client().await;
    let text: String = client
        .query_one("SELECT last_error FROM statek.runs", &[])
        .await
        .unwrap()
        .get(0);
    assert!(text.starts_with("bad\u{FFFD}message xxx"));
    assert_eq!(text.len(), 4096);
    assert_eq!(
        store
            .count_live_runs_of(std::slice::from_ref(&a))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .count_live_runs_of(&[tenant("tenant-b")])
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn the_worker_expiry_pass_fails_a_run_that_expired_on_its_last_attempt() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), vec![]).max_attempts(1))
        .await
        .unwrap();
    claimed(
        store
            .claim_run(&a, Duration::from_millis(10))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    // Without the pass the run stays running forever: claims skip it.
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 1);
    let expired = store.find_expired_runs(10).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(
        store.rescue_expired_run(&expired[0]).await.unwrap(),
        RescueOutcome::Failed
    );
    assert_eq!(store.count_live_runs().await.unwrap(), 0);
}
