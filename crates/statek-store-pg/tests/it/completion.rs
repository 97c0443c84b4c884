//! Completion batching (`finish_runs`) against a real PostgreSQL: exact
//! outcomes per run in one statement, fencing by lease token, the claim
//! history's finish time set once, replays answered `AlreadyRecorded`,
//! and flushes retried across a terminated backend and a lost commit
//! acknowledgement.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use statek_core::MAX_FINISH_BATCH;
use statek_policy::{SchedulerShardId, TenantId};
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::{test_store_config, TestDatabase};
use statek_store_pg::{
    ClaimOutcome, ClaimedRun, FinishOutcome, FinishRun, NewRun, PgStore, RunLease, SlotClaim,
    StoreError,
};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn claimed(outcome: ClaimOutcome) -> ClaimedRun {
    match outcome {
        ClaimOutcome::Claimed(run) => *run,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Enqueues one run for `tenant` and claims it.
async fn claim_one(store: &PgStore, tenant_id: &str, max_attempts: u32) -> ClaimedRun {
    let t = tenant(tenant_id);
    store
        .enqueue(&NewRun::new(t.clone(), tenant_id.as_bytes().to_vec()).max_attempts(max_attempts))
        .await
        .unwrap();
    claimed(store.claim_run(&t, LEASE).await.unwrap())
}

/// `(state, attempt, lease_token, last_error)` of a run.
async fn run_row(
    client: &tokio_postgres::Client,
    run_id: Uuid,
) -> (String, i32, Option<Uuid>, Option<String>) {
    let row = client
        .query_one(
            "SELECT state, attempt, lease_token, last_error FROM statek.runs WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// Every claim's finish time, by (run, token).
async fn claim_finishes(
    client: &tokio_postgres::Client,
) -> BTreeMap<(Uuid, Uuid), Option<SystemTime>> {
    client
        .query(
            "SELECT run_id, lease_token, finished_at FROM statek.run_attempts",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect()
}

async fn db_now(client: &tokio_postgres::Client) -> SystemTime {
    client
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

fn key(lease: &RunLease) -> (Uuid, Uuid) {
    (lease.run_id(), lease.token())
}

#[tokio::test]
async fn a_mixed_batch_records_each_run_and_a_lost_lease_fails_it_alone() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;

    let done = claim_one(&store, "tenant-a", 5).await;
    let last_try = claim_one(&store, "tenant-b", 1).await;
    let retried = claim_one(&store, "tenant-c", 3).await;
    // tenant-d's lease expires; another claimer takes the run (attempt 2).
    let d = tenant("tenant-d");
    store
        .enqueue(&NewRun::new(d.clone(), b"d".to_vec()))
        .await
        .unwrap();
    let stale = claimed(
        store
            .claim_run(&d, Duration::from_millis(50))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    let current = claimed(store.claim_run(&d, LEASE).await.unwrap());
    assert_eq!(
        (current.lease.run_id(), current.attempt),
        (stale.lease.run_id(), 2)
    );
    let also_done = claim_one(&store, "tenant-e", 5).await;

    let long = "x".repeat(10_000);
    let batch = [
        FinishRun::complete(done.lease),
        FinishRun::fail(last_try.lease, "out of luck", Duration::ZERO),
        FinishRun::fail(retried.lease, format!("bad\0boom {long}"), HOUR),
        FinishRun::complete(stale.lease),
        FinishRun::complete(also_done.lease),
    ];
    let before = db_now(&client).await;
    let outcomes = store.finish_runs(&batch).await.unwrap();
    let after = db_now(&client).await;
    assert_eq!(outcomes.len(), 5);
    let FinishOutcome::Retrying { available_at } = outcomes[2] else {
        panic!("expected Retrying, got {:?}", outcomes[2]);
    };
    assert!(
        before + HOUR <= available_at && available_at <= after + HOUR,
        "{before:?} + 1 h <= {available_at:?} <= {after:?} + 1 h"
    );
    assert_eq!(
        outcomes,
        [
            FinishOutcome::Completed,
            FinishOutcome::Failed,
            FinishOutcome::Retrying { available_at },
            FinishOutcome::LeaseLost,
            FinishOutcome::Completed,
        ]
    );

    // The runs, exactly.
    assert_eq!(
        run_row(&client, done.lease.run_id()).await,
        ("completed".into(), 1, None, None)
    );
    assert_eq!(
        run_row(&client, last_try.lease.run_id()).await,
        ("failed".into(), 1, None, Some("out of luck".into()))
    );
    let (state, attempt, token, error) = run_row(&client, retried.lease.run_id()).await;
    assert_eq!((state.as_str(), attempt, token), ("available", 1, None));
    let error = error.unwrap();
    assert!(error.starts_with("bad\u{FFFD}boom xxx"), "{error:.20}");
    assert_eq!(error.len(), 4096);
    // The lost lease changed nothing: still running under the new token.
    assert_eq!(
        run_row(&client, stale.lease.run_id()).await,
        ("running".into(), 2, Some(current.lease.token()), None)
    );
    assert_eq!(
        run_row(&client, also_done.lease.run_id()).await,
        ("completed".into(), 1, None, None)
    );
    let retried_at: SystemTime = client
        .query_one(
            "SELECT available_at FROM statek.runs WHERE run_id = $1",
            &[&retried.lease.run_id()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(retried_at, available_at);

    // Claim history: the four finished claims have a finish time, within
    // the call; the stale and the current claim of d have none.
    let finishes = claim_finishes(&client).await;
    assert_eq!(finishes.len(), 6);
    for run in [&done, &last_try, &retried, &also_done] {
        let at = finishes[&key(&run.lease)].unwrap();
        assert!(
            before <= at && at <= after,
            "{before:?} <= {at:?} <= {after:?}"
        );
    }
    assert_eq!(finishes[&key(&stale.lease)], None);
    assert_eq!(finishes[&key(&current.lease)], None);
    // A completed run's claim finished when the run did.
    let completed_at: SystemTime = client
        .query_one(
            "SELECT finished_at FROM statek.runs WHERE run_id = $1",
            &[&done.lease.run_id()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(finishes[&key(&done.lease)], Some(completed_at));

    // The same batch again (a replayed flush): nothing changes, every
    // finish time stays as it was.
    let replay = store.finish_runs(&batch).await.unwrap();
    assert_eq!(
        replay,
        [
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::LeaseLost,
            FinishOutcome::AlreadyRecorded,
        ]
    );
    assert_eq!(claim_finishes(&client).await, finishes);
    assert_eq!(
        run_row(&client, retried.lease.run_id()).await.0,
        "available"
    );

    // The current holder finishes d; the stale token still has lost it.
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(current.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(stale.lease)])
            .await
            .unwrap(),
        [FinishOutcome::LeaseLost]
    );
    let finishes = claim_finishes(&client).await;
    assert_eq!(finishes[&key(&stale.lease)], None);
    assert!(finishes[&key(&current.lease)].is_some());

    // A retrying run's next claim is a new claim with its own token: the
    // old token's replay is still AlreadyRecorded, not LeaseLost.
    client
        .batch_execute("UPDATE statek.runs SET available_at = now() - interval '1 second' WHERE state <> 'completed'")
        .await
        .unwrap();
    let again = claimed(store.claim_run(&tenant("tenant-c"), LEASE).await.unwrap());
    assert_eq!(
        (again.lease.run_id(), again.attempt),
        (retried.lease.run_id(), 2)
    );
    assert_eq!(
        store
            .finish_runs(&[FinishRun::fail(retried.lease, "old", HOUR)])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded]
    );
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(again.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
}

#[tokio::test]
async fn the_single_run_calls_and_the_expiry_pass_agree_with_the_batch() {
    let db = TestDatabase::create().await;
    let store = db.store();
    // Finished one at a time: a later batch sees it as recorded.
    let single = claim_one(&store, "tenant-a", 5).await;
    store.complete_run(&single.lease).await.unwrap();
    let failed = claim_one(&store, "tenant-b", 5).await;
    store.fail_run(&failed.lease, "boom", HOUR).await.unwrap();
    // Rescued by the expiry pass: its claim is not finished, so its token
    // has lost the run.
    let b = tenant("tenant-c");
    store
        .enqueue(&NewRun::new(b.clone(), vec![]).max_attempts(1))
        .await
        .unwrap();
    let expired = claimed(
        store
            .claim_run(&b, Duration::from_millis(10))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    let found = store.find_expired_runs(10).await.unwrap();
    assert_eq!(found.len(), 1);
    store.rescue_expired_run(&found[0]).await.unwrap();
    // Cancelled while running: lost too.
    let cancelled = claim_one(&store, "tenant-d", 5).await;
    assert!(store.cancel_run(cancelled.lease.run_id()).await.unwrap());

    assert_eq!(
        store
            .finish_runs(&[
                FinishRun::complete(single.lease),
                FinishRun::complete(failed.lease),
                FinishRun::complete(expired.lease),
                FinishRun::fail(cancelled.lease, "late", Duration::ZERO),
            ])
            .await
            .unwrap(),
        [
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::LeaseLost,
            FinishOutcome::LeaseLost,
        ]
    );
    // And the single-run calls report a batch-finished run as lost.
    let batched = claim_one(&store, "tenant-e", 5).await;
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(batched.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    assert!(matches!(
        store.complete_run(&batched.lease).await,
        Err(StoreError::RunQueue(RunQueueError::LeaseLost { run_id })) if run_id == batched.lease.run_id()
    ));
}

#[tokio::test]
async fn bad_batches_are_refused_before_the_database() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let a = claim_one(&store, "tenant-a", 5).await;
    let b = claim_one(&store, "tenant-b", 5).await;
    let invalid = |r: Result<Vec<FinishOutcome>, StoreError>| {
        assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
    };
    // The same run twice, with the same or another outcome.
    invalid(
        store
            .finish_runs(&[FinishRun::complete(a.lease), FinishRun::complete(a.lease)])
            .await,
    );
    invalid(
        store
            .finish_runs(&[
                FinishRun::complete(a.lease),
                FinishRun::complete(b.lease),
                FinishRun::fail(a.lease, "x", Duration::ZERO),
            ])
            .await,
    );
    // A retry delay over 366 days; 366 days exactly is accepted below.
    invalid(
        store
            .finish_runs(&[
                FinishRun::complete(b.lease),
                FinishRun::fail(a.lease, "x", Duration::from_secs(366 * 86_400 + 1)),
            ])
            .await,
    );
    // Nothing of any refused batch was kept.
    for run in [&a, &b] {
        assert_eq!(
            run_row(&client, run.lease.run_id()).await,
            ("running".into(), 1, Some(run.lease.token()), None)
        );
    }
    assert_eq!(
        store
            .finish_runs(&[FinishRun::fail(
                a.lease,
                "x",
                Duration::from_secs(366 * 86_400)
            )])
            .await
            .unwrap()
            .len(),
        1
    );

    // Empty input: no round trip (this store's server does not exist).
    let nowhere = PgStore::new(test_store_config(
        "host=127.0.0.1 port=1 user=nobody dbname=none"
            .parse()
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(nowhere.finish_runs(&[]).await.unwrap(), []);
    assert!(nowhere.count_live_runs().await.is_err());
}

#[tokio::test]
async fn a_full_batch_of_1024_runs_completes_in_one_call_and_1025_is_refused() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let a = tenant("tenant-a");
    client
        .execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload)
             SELECT gen_random_uuid(), $1::text, '\\x'::bytea FROM generate_series(1, $2::int)",
            &[&a.as_str(), &(i32::try_from(MAX_FINISH_BATCH).unwrap() + 1)],
        )
        .await
        .unwrap();
    let shard = SchedulerShardId::try_from("primary-v1").unwrap();
    // Claims name reserved slots of a registered shard (migration V11).
    let policy = statek_policy::WeightedFairnessPolicy::new(
        shard.clone(),
        [statek_policy::TenantFairnessWeight::new(a.clone(), 1).unwrap()],
    )
    .unwrap();
    store.register(&policy).await.unwrap();
    let slots = statek_store_pg::testing::reserve_next_slots(
        &store,
        &policy,
        u64::try_from(MAX_FINISH_BATCH).unwrap(),
    )
    .await;
    let mut leases: Vec<RunLease> = store
        .claim_runs_for_slots(&slots, &shard, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|claim| match claim {
            SlotClaim::Claimed(run) => run.lease,
            other => panic!("expected a claim, got {other:?}"),
        })
        .collect();
    leases.push(claimed(store.claim_run(&a, LEASE).await.unwrap()).lease);
    assert_eq!(leases.len(), MAX_FINISH_BATCH + 1);

    let all: Vec<FinishRun> = leases.iter().copied().map(FinishRun::complete).collect();
    assert!(matches!(
        store.finish_runs(&all).await,
        Err(StoreError::InvalidArgument(_))
    ));
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM statek.runs WHERE state = 'running'").await,
        1025
    );

    let outcomes = store.finish_runs(&all[..MAX_FINISH_BATCH]).await.unwrap();
    assert_eq!(outcomes, vec![FinishOutcome::Completed; MAX_FINISH_BATCH]);
    assert_eq!(
        count("SELECT count(*) FROM statek.runs WHERE state = 'completed'").await,
        1024
    );
    assert_eq!(
        count("SELECT count(*) FROM statek.run_attempts WHERE finished_at IS NOT NULL").await,
        1024
    );
    // The one left over is the only run still running, its claim open.
    let open: (Uuid, Uuid) = {
        let row = client
            .query_one(
                "SELECT r.run_id, c.lease_token FROM statek.runs AS r
                 JOIN statek.run_attempts AS c ON c.run_id = r.run_id
                 WHERE r.state = 'running' AND c.finished_at IS NULL",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(open, key(&leases[MAX_FINISH_BATCH]));
}

/// Retries `runs` until it succeeds (at most `attempts` times); every
/// error on the way must be retryable. Returns the outcomes and how many
/// errors were met.
async fn flush(store: &PgStore, runs: &[FinishRun], attempts: u32) -> (Vec<FinishOutcome>, u32) {
    let mut errors = 0;
    loop {
        match store.finish_runs(runs).await {
            Ok(outcomes) => return (outcomes, errors),
            Err(e) => {
                assert!(e.is_retryable(), "not retryable: {e:?}");
                errors += 1;
                assert!(errors < attempts, "still failing after {errors}: {e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_flush_across_a_terminated_backend_is_retried_and_loses_nothing() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.store_config().pool_size(1).unwrap()).unwrap();
    let client = db.client().await;
    let first = claim_one(&store, "tenant-a", 5).await;
    let second = claim_one(&store, "tenant-b", 5).await;
    let third = claim_one(&store, "tenant-c", 1).await;
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(first.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );

    // The store's connection dies between two calls.
    let terminated: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid()) AS t",
            &[&db.name()],
        )
        .await
        .unwrap()
        .get(0);
    // The store's one connection (and perhaps a closing one of the
    // fixture's migration).
    assert!(terminated >= 1, "{terminated}");

    let batch = [
        FinishRun::complete(first.lease),
        FinishRun::complete(second.lease),
        FinishRun::fail(third.lease, "boom", Duration::ZERO),
    ];
    let (outcomes, _errors) = flush(&store, &batch, 5).await;
    // Whether the first attempt met the dead connection or a new one, no
    // completion is lost and none is recorded twice.
    assert_eq!(
        outcomes,
        [
            FinishOutcome::AlreadyRecorded,
            FinishOutcome::Completed,
            FinishOutcome::Failed,
        ]
    );
    assert_eq!(
        flush(&store, &batch, 5).await.0,
        [FinishOutcome::AlreadyRecorded; 3]
    );
    let states: Vec<String> = client
        .query("SELECT state FROM statek.runs ORDER BY tenant_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(states, ["completed", "completed", "failed"]);
    assert!(claim_finishes(&client).await.values().all(Option::is_some));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_acknowledgement_replays_as_already_recorded() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy =
        PgStore::new(test_store_config(proxy.pg_config()).pool_size(1).unwrap()).unwrap();
    let client = db.client().await;
    let done = claim_one(&through_proxy, "tenant-a", 5).await;
    let retried = claim_one(&through_proxy, "tenant-b", 5).await;
    let batch = [
        FinishRun::complete(done.lease),
        FinishRun::fail(retried.lease, "boom", HOUR),
    ];

    // Committed, the acknowledgement lost: the caller sees a retryable
    // error, the database has both finishes.
    proxy.arm(Fault::AfterCommit);
    let err = through_proxy.finish_runs(&batch).await.unwrap_err();
    assert_eq!(proxy.fired(), 1);
    assert!(!proxy.is_armed());
    assert!(err.is_retryable(), "{err:?}");
    let finishes = claim_finishes(&client).await;
    assert!(finishes.values().all(Option::is_some), "{finishes:?}");
    assert_eq!(
        through_proxy.finish_runs(&batch).await.unwrap(),
        [FinishOutcome::AlreadyRecorded; 2]
    );
    assert_eq!(claim_finishes(&client).await, finishes);

    // Never committed: the retry records both.
    let done = claim_one(&through_proxy, "tenant-c", 5).await;
    let last = claim_one(&through_proxy, "tenant-d", 1).await;
    let batch = [
        FinishRun::complete(done.lease),
        FinishRun::fail(last.lease, "boom", HOUR),
    ];
    proxy.arm(Fault::BeforeCommit);
    let err = through_proxy.finish_runs(&batch).await.unwrap_err();
    assert_eq!(proxy.fired(), 2);
    assert!(!proxy.is_armed());
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(claim_finishes(&client).await[&key(&done.lease)], None);
    assert_eq!(
        through_proxy.finish_runs(&batch).await.unwrap(),
        [FinishOutcome::Completed, FinishOutcome::Failed]
    );
}

/// Waits until `n` backends of the test database wait for a lock.
async fn until_waiting(client: &tokio_postgres::Client, db: &TestDatabase, n: i64) {
    for _ in 0..6_000 {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND wait_event_type = 'Lock'",
                &[&db.name()],
            )
            .await
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} backends never waited for a lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_racing_its_first_attempt_waits_and_answers_already_recorded() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let first = claim_one(&store, "tenant-a", 5).await;
    let second = claim_one(&store, "tenant-b", 5).await;
    // Run ids are UUIDv7: `first` sorts before `second`, so a flush locks
    // `first`, then waits for `second`, held here.
    assert!(first.lease.run_id() < second.lease.run_id());
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM statek.runs WHERE run_id = $1 FOR UPDATE",
        &[&second.lease.run_id()],
    )
    .await
    .unwrap();

    let batch = vec![
        FinishRun::complete(first.lease),
        FinishRun::fail(second.lease, "boom", HOUR),
    ];
    let original = tokio::spawn({
        let (store, batch) = (db.store(), batch.clone());
        async move { store.finish_runs(&batch).await }
    });
    until_waiting(&client, &db, 1).await;
    // The replay starts (and takes its snapshot) while the first attempt
    // is in flight, holding `first`.
    let replay = tokio::spawn({
        let (store, batch) = (db.store(), batch.clone());
        async move { store.finish_runs(&batch).await }
    });
    until_waiting(&client, &db, 2).await;
    tx.rollback().await.unwrap();

    let original = original.await.unwrap().unwrap();
    assert_eq!(original[0], FinishOutcome::Completed);
    assert!(
        matches!(original[1], FinishOutcome::Retrying { .. }),
        "{original:?}"
    );
    assert_eq!(
        replay.await.unwrap().unwrap(),
        [FinishOutcome::AlreadyRecorded; 2]
    );
    assert!(claim_finishes(&client).await.values().all(Option::is_some));
}

/// Migrations V12 and V13: a claim and its finish write the run row only,
/// complete or fail. The claim history (`statek.run_claims`) gets an
/// attempt only when a later claim of its run replaces it, with the
/// token, slot and finish time it had; `statek.run_attempts` and
/// `run_history` show every attempt with its finish time throughout, and
/// replays of either finish answer `AlreadyRecorded`.
#[tokio::test]
async fn a_claim_and_its_finish_write_the_run_row_only() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let history_rows = async || -> i64 {
        client
            .query_one("SELECT count(*) FROM statek.run_claims", &[])
            .await
            .unwrap()
            .get(0)
    };
    let done = claim_one(&store, "tenant-a", 5).await;
    let retried = claim_one(&store, "tenant-b", 5).await;
    assert_eq!(history_rows().await, 0);
    assert_eq!(
        claim_finishes(&client).await,
        BTreeMap::from([(key(&done.lease), None), (key(&retried.lease), None)])
    );

    let outcomes = store
        .finish_runs(&[
            FinishRun::complete(done.lease),
            FinishRun::fail(retried.lease, "boom", Duration::ZERO),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes[0], FinishOutcome::Completed);
    assert!(matches!(outcomes[1], FinishOutcome::Retrying { .. }));
    assert_eq!(history_rows().await, 0);
    // The completed attempt's finish time is the run's; the failed one's is
    // kept on its row (the run's own `finished_at` is cleared for the retry).
    let times = |run_id: Uuid| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT a.finished_at AS attempt, r.finished_at AS run,
                            r.claim_finished_at AS kept
                     FROM statek.run_attempts AS a JOIN statek.runs AS r USING (run_id)
                     WHERE a.run_id = $1",
                    &[&run_id],
                )
                .await
                .unwrap();
            let f = |name: &str| row.get::<_, Option<SystemTime>>(name);
            (f("attempt"), f("run"), f("kept"))
        }
    };
    let (attempt, run, kept) = times(done.lease.run_id()).await;
    assert!(attempt.is_some());
    assert_eq!((attempt, kept), (run, run));
    let (attempt, run, kept) = times(retried.lease.run_id()).await;
    assert!(attempt.is_some());
    assert_eq!((attempt, run), (kept, None));
    let first_failure = attempt;

    // Replays of both finishes record nothing twice.
    assert_eq!(
        store
            .finish_runs(&[
                FinishRun::complete(done.lease),
                FinishRun::fail(retried.lease, "boom", Duration::ZERO),
            ])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded; 2]
    );

    // The retried run is claimed again: its first attempt moves into the
    // history as it was, the row holds the second.
    let again = claimed(store.claim_run(&tenant("tenant-b"), LEASE).await.unwrap());
    assert_eq!(again.lease.run_id(), retried.lease.run_id());
    assert_eq!(history_rows().await, 1);
    let moved = client
        .query_one(
            "SELECT attempt, lease_token, finished_at FROM statek.run_claims",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            moved.get::<_, i32>(0),
            moved.get::<_, Uuid>(1),
            moved.get::<_, Option<SystemTime>>(2)
        ),
        (1, retried.lease.token(), first_failure)
    );
    assert_eq!(
        claim_finishes(&client).await,
        BTreeMap::from([
            (key(&done.lease), run_of(&client, done.lease.run_id()).await),
            (key(&retried.lease), first_failure),
            (key(&again.lease), None),
        ])
    );
    let history = store
        .run_history(&[done.lease.run_id(), retried.lease.run_id()])
        .await
        .unwrap();
    let attempts: Vec<Vec<(u32, bool)>> = history
        .iter()
        .map(|r| {
            r.claims
                .iter()
                .map(|c| (c.attempt, c.finished_at.is_some()))
                .collect()
        })
        .collect();
    let expected = if history[0].run_id == done.lease.run_id() {
        vec![vec![(1, true)], vec![(1, true), (2, false)]]
    } else {
        vec![vec![(1, true), (2, false)], vec![(1, true)]]
    };
    assert_eq!(attempts, expected);
    // The first attempt's failure, replayed now, is found in the history.
    assert_eq!(
        store
            .finish_runs(&[FinishRun::fail(retried.lease, "boom", Duration::ZERO)])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded]
    );
}

/// A run's `finished_at`.
async fn run_of(client: &tokio_postgres::Client, run_id: Uuid) -> Option<SystemTime> {
    client
        .query_one(
            "SELECT finished_at FROM statek.runs WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap()
        .get(0)
}

/// An attempt is finished once (migration V13). A role that could put a
/// failed run back to `running` under the failed attempt's own token (the
/// runtime role no longer can; here a superuser does) cannot have that
/// attempt completed: the finish answers `AlreadyRecorded` and its finish
/// time stays the failure's.
#[tokio::test]
async fn a_finished_attempt_is_not_finished_again_under_a_forged_lease() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let run = claim_one(&store, "tenant-a", 5).await;
    assert!(matches!(
        store
            .finish_runs(&[FinishRun::fail(run.lease, "boom", HOUR)])
            .await
            .unwrap()[..],
        [FinishOutcome::Retrying { .. }]
    ));
    let failed_at = claim_finishes(&client).await[&key(&run.lease)];
    assert!(failed_at.is_some());
    client
        .execute(
            "UPDATE statek.runs SET state = 'running', lease_token = $2,
                 lease_expires_at = now() + interval '1 hour'
             WHERE run_id = $1",
            &[&run.lease.run_id(), &run.lease.token()],
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(run.lease)])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded]
    );
    assert_eq!(claim_finishes(&client).await[&key(&run.lease)], failed_at);
    assert_eq!(run_row(&client, run.lease.run_id()).await.0, "running");
}
