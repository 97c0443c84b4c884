//! Retention of finished runs and the operator's view of runs, against a
//! real PostgreSQL: pruning never touches live runs nor claim history
//! inside the reservation retention window; list pages, retry, counts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{ClaimOutcome, NewRun, RunRetentionPolicy, RunState, StoreError};
use uuid::Uuid;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

const DAY: Duration = Duration::from_secs(86_400);

/// A run in `state`, finished `finished_days_ago` (if finished), with one
/// claim `claimed_days_ago` for slot (`shard`, `sequence`) when given.
async fn seeded_run(
    client: &tokio_postgres::Client,
    state: &str,
    finished_days_ago: f64,
    claim: Option<(f64, Option<(&str, i64)>)>,
) -> Uuid {
    let run_id = Uuid::now_v7();
    let running = state == "running";
    client
        .execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload, state, attempt, lease_token,
                                      lease_expires_at, finished_at)
             VALUES ($1, 'tenant-a', '\\x00', $2, $3,
                     CASE WHEN $4 THEN gen_random_uuid() END,
                     CASE WHEN $4 THEN now() + interval '1 hour' END,
                     CASE WHEN $2 IN ('completed', 'failed', 'cancelled')
                          THEN now() - make_interval(secs => $5::float8 * 86400) END)",
            &[
                &run_id,
                &state,
                &i32::from(claim.is_some()),
                &running,
                &finished_days_ago,
            ],
        )
        .await
        .unwrap();
    if let Some((claimed_days_ago, slot)) = claim {
        let (shard, sequence) = slot.map_or((None, None), |(s, q)| (Some(s), Some(q)));
        client
            .execute(
                "INSERT INTO statek.run_claims (run_id, attempt, tenant_id, shard_id, sequence,
                                                lease_token, claimed_at, finished_at)
                 VALUES ($1, 1, 'tenant-a', $2, $3, gen_random_uuid(),
                         now() - make_interval(secs => $4::float8 * 86400),
                         now() - make_interval(secs => $4::float8 * 86400))",
                &[&run_id, &shard, &sequence, &claimed_days_ago],
            )
            .await
            .unwrap();
    }
    run_id
}

async fn exists(client: &tokio_postgres::Client, run_id: Uuid) -> bool {
    client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 1
}

#[tokio::test]
async fn pruning_deletes_only_old_finished_runs_whose_claim_history_may_go() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    // Reservation evidence for sequences 0..10 of primary-v1, kept.
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(tenant("tenant-a"), 1).unwrap()],
    )
    .unwrap();
    store.register(&policy).await.unwrap();
    store
        .reserve_batch(policy.shard_id(), &policy.digest(), Uuid::now_v7(), 10)
        .await
        .unwrap();

    let old_plain = seeded_run(&client, "completed", 3.0, Some((3.0, None))).await;
    let old_failed = seeded_run(
        &client,
        "failed",
        3.0,
        Some((3.0, Some(("primary-v1", 50)))),
    )
    .await;
    let old_cancelled_unclaimed = seeded_run(&client, "cancelled", 3.0, None).await;
    // Kept: its slot's reservation (sequence 5) is still retained.
    let slot_retained = seeded_run(
        &client,
        "completed",
        3.0,
        Some((3.0, Some(("primary-v1", 5)))),
    )
    .await;
    // Kept: finished within the retention.
    let young = seeded_run(&client, "completed", 0.5, Some((0.5, None))).await;
    // Kept: finished long ago but claimed within the hour (a clock quirk
    // the database still refuses).
    let claim_young = seeded_run(&client, "completed", 3.0, Some((0.0, None))).await;
    // Kept: live runs, however old.
    let running = seeded_run(&client, "running", 0.0, Some((3.0, None))).await;
    let available = seeded_run(&client, "available", 0.0, None).await;

    assert_eq!(store.count_finished_runs_older_than(DAY).await.unwrap(), 5);
    let policy = RunRetentionPolicy::new(DAY, 2).unwrap();
    let first = store.prune_finished_runs(policy).await.unwrap();
    assert_eq!((first.deleted_runs, first.deleted_claims), (2, 2));
    let second = store.prune_finished_runs(policy).await.unwrap();
    assert_eq!((second.deleted_runs, second.deleted_claims), (1, 0));
    let third = store.prune_finished_runs(policy).await.unwrap();
    assert_eq!((third.deleted_runs, third.deleted_claims), (0, 0));
    for gone in [old_plain, old_failed, old_cancelled_unclaimed] {
        assert!(!exists(&client, gone).await, "{gone} pruned");
    }
    for kept in [slot_retained, young, claim_young, running, available] {
        assert!(exists(&client, kept).await, "{kept} kept");
    }

    // The database itself refuses to delete kept claim history, whoever asks.
    for kept in [slot_retained, claim_young, running] {
        let e = client
            .execute("DELETE FROM statek.run_claims WHERE run_id = $1", &[&kept])
            .await
            .unwrap_err();
        assert_eq!(e.code().unwrap().code(), "SK001", "{kept}");
    }
    // Updates stay refused as before (finished_at only, once).
    let e = client
        .execute(
            "UPDATE statek.run_claims SET claimed_at = now() WHERE run_id = $1",
            &[&slot_retained],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "SK001");
    assert!(matches!(
        RunRetentionPolicy::new(Duration::from_secs(60), 10),
        Err(StoreError::InvalidArgument(_))
    ));
    // The backlog: the kept run that finished first.
    let slot_retained_finished: std::time::SystemTime = client
        .query_one(
            "SELECT finished_at FROM statek.runs WHERE run_id = $1",
            &[&slot_retained],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        store.oldest_finished_run().await.unwrap(),
        Some(slot_retained_finished)
    );
}

/// A finished run whose one attempt's claim is kept on its row (migration
/// V13): finished `finished_days_ago`, claimed `claimed_days_ago` for slot
/// (`shard`, `sequence`) when given.
async fn run_holding_its_claim(
    client: &tokio_postgres::Client,
    finished_days_ago: f64,
    claimed_days_ago: f64,
    slot: Option<(&str, i64)>,
) -> Uuid {
    let run_id = Uuid::now_v7();
    let (shard, sequence) = slot.map_or((None, None), |(s, q)| (Some(s), Some(q)));
    client
        .execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload, state, attempt, claimed_at,
                                      finished_at, claim_shard_id, claim_sequence, claim_token,
                                      claim_finished_at)
             VALUES ($1, 'tenant-a', '\\x00', 'completed', 1,
                     now() - make_interval(secs => $2::float8 * 86400),
                     now() - make_interval(secs => $3::float8 * 86400),
                     $4, $5, gen_random_uuid(),
                     now() - make_interval(secs => $3::float8 * 86400))",
            &[
                &run_id,
                &claimed_days_ago,
                &finished_days_ago,
                &shard,
                &sequence,
            ],
        )
        .await
        .unwrap();
    run_id
}

/// Since migration V13 a run row holds its current attempt's claim: run
/// pruning and the database keep such a run exactly as V9's rule keeps a
/// claim row (its slot's reservation retained, or claimed within the
/// hour), and delete it otherwise, with no claim row to delete.
#[tokio::test]
async fn pruning_keeps_a_run_whose_row_holds_a_claim_the_rule_keeps() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(tenant("tenant-a"), 1).unwrap()],
    )
    .unwrap();
    store.register(&policy).await.unwrap();
    store
        .reserve_batch(policy.shard_id(), &policy.digest(), Uuid::now_v7(), 10)
        .await
        .unwrap();
    let old_plain = run_holding_its_claim(&client, 3.0, 3.0, None).await;
    let old_slot_pruned = run_holding_its_claim(&client, 3.0, 3.0, Some(("primary-v1", 50))).await;
    let slot_retained = run_holding_its_claim(&client, 3.0, 3.0, Some(("primary-v1", 5))).await;
    let claim_young = run_holding_its_claim(&client, 3.0, 0.0, None).await;

    let policy = RunRetentionPolicy::new(DAY, 10).unwrap();
    let pruned = store.prune_finished_runs(policy).await.unwrap();
    assert_eq!((pruned.deleted_runs, pruned.deleted_claims), (2, 0));
    for gone in [old_plain, old_slot_pruned] {
        assert!(!exists(&client, gone).await, "{gone} pruned");
    }
    for kept in [slot_retained, claim_young] {
        assert!(exists(&client, kept).await, "{kept} kept");
        let e = client
            .execute("DELETE FROM statek.runs WHERE run_id = $1", &[&kept])
            .await
            .unwrap_err();
        assert_eq!(e.code().unwrap().code(), "SK001", "{kept}");
    }
    let again = store.prune_finished_runs(policy).await.unwrap();
    assert_eq!((again.deleted_runs, again.deleted_claims), (0, 0));
    // A live run is never deleted, claimed or not: it is cancelled.
    let queued = seeded_run(&client, "available", 0.0, None).await;
    let e = client
        .execute("DELETE FROM statek.runs WHERE run_id = $1", &[&queued])
        .await
        .unwrap_err();
    let db_error = e.as_db_error().unwrap();
    assert_eq!(
        (db_error.code().code(), db_error.message()),
        (
            "SK001",
            format!(
                "statek: run {queued} is live (available); cancel it, a live run is never deleted"
            )
            .as_str()
        )
    );
    assert!(exists(&client, queued).await);
}

#[tokio::test]
async fn runs_are_listed_newest_first_in_pages_retried_and_counted() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            store
                .enqueue(&NewRun::new(a.clone(), format!("a{i}")).max_attempts(1))
                .await
                .unwrap()
                .run_id,
        );
    }
    let b_run = store
        .enqueue(&NewRun::new(b.clone(), "b0"))
        .await
        .unwrap()
        .run_id;

    // Pages of 2 of tenant-a, newest first.
    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store.list_runs(Some(&a), None, 2, after).await.unwrap();
        pages += 1;
        seen.extend(page.runs.iter().map(|r| r.run_id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!((seen, pages), (newest_first, 3));
    let all = store.list_runs(None, None, 100, None).await.unwrap();
    assert_eq!(all.runs.len(), 6);
    assert_eq!(all.runs[0].run_id, b_run);
    assert_eq!(all.next, None);

    // Fail one (its only attempt), cancel another.
    let run = match store.claim_run(&a, Duration::from_secs(60)).await.unwrap() {
        ClaimOutcome::Claimed(run) => run,
        other => panic!("{other:?}"),
    };
    assert_eq!(run.lease.run_id(), ids[0]);
    store
        .fail_run(&run.lease, "boom", Duration::ZERO)
        .await
        .unwrap();
    assert!(store.cancel_run(ids[1]).await.unwrap());
    let failed = store
        .list_runs(Some(&a), Some(RunState::Failed), 10, None)
        .await
        .unwrap();
    assert_eq!(failed.runs.len(), 1);
    assert_eq!(failed.runs[0].last_error.as_deref(), Some("boom"));

    let counts: Vec<(String, RunState, u64)> = store
        .count_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.tenant.to_string(), c.state, c.runs))
        .collect();
    assert_eq!(
        counts,
        [
            ("tenant-a".to_owned(), RunState::Available, 3),
            ("tenant-a".to_owned(), RunState::Cancelled, 1),
            ("tenant-a".to_owned(), RunState::Failed, 1),
            ("tenant-b".to_owned(), RunState::Available, 1),
        ]
    );

    // Retry: the failed run gets as many attempts again, and runs.
    let retried = store.retry_run(ids[0]).await.unwrap();
    assert_eq!(
        (retried.state, retried.attempt, retried.max_attempts),
        (RunState::Available, 1, 2)
    );
    let retried = store.retry_run(ids[1]).await.unwrap();
    assert_eq!(retried.state, RunState::Available);
    match store.retry_run(ids[2]).await {
        Err(StoreError::RunQueue(RunQueueError::RunStateConflict { state, .. })) => {
            assert_eq!(state, "available")
        }
        other => panic!("{other:?}"),
    }
    let unknown = Uuid::now_v7();
    assert!(matches!(
        store.retry_run(unknown).await,
        Err(StoreError::RunQueue(RunQueueError::RunNotFound { run_id })) if run_id == unknown
    ));
    assert!(!store.cancel_run(unknown).await.unwrap());
    assert!(matches!(
        store.list_runs(None, None, 0, None).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        "done".parse::<RunState>(),
        Err(StoreError::InvalidArgument(_))
    ));
}
