//! Costs reported after the run (migration V18, issue 25): each attempt's
//! cost is recorded with its finish, in the same statement, kept with the
//! attempt when a later claim moves it into the history, never changed
//! by a replay, and refused out of range before anything is sent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_core::MAX_RUN_COST;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{reserved_slots, TestDatabase};
use statek_store_pg::{
    ClaimOutcome, FinishOutcome, FinishRun, NewRun, PgStore, RunLease, SlotClaim, StoreError,
};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn policy() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(tenant("tenant-a"), 1).unwrap()],
    )
    .unwrap()
}

/// Claims the next run of `tenant-a` through its next reserved slot.
async fn claim_by_slot(store: &PgStore, p: &WeightedFairnessPolicy) -> RunLease {
    let slots = reserved_slots(store, p, &[&tenant("tenant-a")]).await;
    match &store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap()[..]
    {
        [SlotClaim::Claimed(run)] => run.lease,
        other => panic!("expected one claim, got {other:?}"),
    }
}

/// Claims the next run of `tenant-a` without a slot.
async fn claim_without_slot(store: &PgStore) -> RunLease {
    match store.claim_run(&tenant("tenant-a"), LEASE).await.unwrap() {
        ClaimOutcome::Claimed(run) => run.lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Each attempt's recorded cost, oldest first, as the evidence reads.
async fn costs(store: &PgStore, run_id: Uuid) -> Vec<Option<u64>> {
    store.run_history(&[run_id]).await.unwrap()[0]
        .claims
        .iter()
        .map(|claim| claim.cost)
        .collect()
}

/// A failed attempt's cost and a completed one's are recorded with their
/// finishes; the failed one moves into the claim history with its claim
/// when the run is claimed again (through a slot, and without one); a
/// replay of a finish with another cost changes nothing; an attempt that
/// reports none keeps none.
#[tokio::test]
async fn costs_are_recorded_with_each_finish_and_move_into_the_history_with_their_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy();
    store.register(&p).await.unwrap();
    let by_slot = store
        .enqueue(&NewRun::new(tenant("tenant-a"), b"r".to_vec()).max_attempts(3))
        .await
        .unwrap()
        .run_id;
    let first = claim_by_slot(&store, &p).await;
    assert_eq!(first.run_id(), by_slot);
    let failed = FinishRun::fail(first, "try again", Duration::ZERO).with_cost(Some(3));
    assert!(matches!(
        store.finish_runs(&[failed]).await.unwrap()[..],
        [FinishOutcome::Retrying { .. }]
    ));
    assert_eq!(costs(&store, by_slot).await, [Some(3)]);
    let second = claim_by_slot(&store, &p).await;
    assert_eq!(costs(&store, by_slot).await, [Some(3), None]);
    let done = FinishRun::complete(second).with_cost(Some(11));
    assert_eq!(
        store.finish_runs(&[done]).await.unwrap(),
        [FinishOutcome::Completed]
    );
    // A replay (a lost acknowledgement) with another cost: the first
    // record stands.
    let replay = FinishRun::complete(second).with_cost(Some(99));
    assert_eq!(
        store.finish_runs(&[replay]).await.unwrap(),
        [FinishOutcome::AlreadyRecorded]
    );
    assert_eq!(costs(&store, by_slot).await, [Some(3), Some(11)]);
    let stored: Vec<(String, Option<i64>)> = client
        .query(
            "SELECT 'history', cost FROM statek.run_claims WHERE run_id = $1
             UNION ALL SELECT 'row', claim_cost FROM statek.runs WHERE run_id = $1",
            &[&by_slot],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        stored,
        [
            ("history".to_owned(), Some(3)),
            ("row".to_owned(), Some(11))
        ]
    );

    let without_slot = store
        .enqueue(&NewRun::new(tenant("tenant-a"), b"s".to_vec()).max_attempts(3))
        .await
        .unwrap()
        .run_id;
    let first = claim_without_slot(&store).await;
    assert_eq!(first.run_id(), without_slot);
    let silent = FinishRun::fail(first, "no cost reported", Duration::ZERO);
    assert!(matches!(
        store.finish_runs(&[silent]).await.unwrap()[..],
        [FinishOutcome::Retrying { .. }]
    ));
    let second = claim_without_slot(&store).await;
    let free = FinishRun::complete(second).with_cost(Some(0));
    assert_eq!(
        store.finish_runs(&[free]).await.unwrap(),
        [FinishOutcome::Completed]
    );
    assert_eq!(costs(&store, without_slot).await, [None, Some(0)]);
}

/// The largest cost recorded is 2^40 units; one above it is refused before
/// anything is sent and the run keeps running under its lease.
#[tokio::test]
async fn a_cost_above_the_largest_is_refused_and_the_largest_is_recorded() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    for _ in 0..2 {
        store
            .enqueue(&NewRun::new(tenant("tenant-a"), b"x".to_vec()))
            .await
            .unwrap();
    }
    let lease = claim_by_slot(&store, &p).await;
    let too_much = FinishRun::complete(lease).with_cost(Some(MAX_RUN_COST + 1));
    match store.finish_runs(&[too_much]).await {
        Err(StoreError::InvalidArgument(why)) => assert_eq!(
            why,
            format!(
                "finished run 0 ({}): cost 1099511627777 is above the largest recorded, \
                 1099511627776 (2^40)",
                lease.run_id()
            )
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let state: String = db
        .client()
        .await
        .query_one(
            "SELECT state FROM statek.runs WHERE run_id = $1",
            &[&lease.run_id()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "running");
    let largest = FinishRun::complete(lease).with_cost(Some(MAX_RUN_COST));
    assert_eq!(
        store.finish_runs(&[largest]).await.unwrap(),
        [FinishOutcome::Completed]
    );
    assert_eq!(costs(&store, lease.run_id()).await, [Some(1 << 40)]);
}

/// A recorded cost is evidence: not even the owner changes it, on a
/// completed run's row or on a finished attempt in the history (SK001).
#[tokio::test]
async fn a_recorded_cost_never_changes() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy();
    store.register(&p).await.unwrap();
    let run = store
        .enqueue(&NewRun::new(tenant("tenant-a"), b"x".to_vec()).max_attempts(2))
        .await
        .unwrap()
        .run_id;
    let first = claim_by_slot(&store, &p).await;
    let failed = FinishRun::fail(first, "again", Duration::ZERO).with_cost(Some(4));
    store.finish_runs(&[failed]).await.unwrap();
    let second = claim_by_slot(&store, &p).await;
    let done = FinishRun::complete(second).with_cost(Some(6));
    store.finish_runs(&[done]).await.unwrap();
    for change in [
        "UPDATE statek.runs SET claim_cost = 1 WHERE run_id = $1",
        "UPDATE statek.run_claims SET cost = 1 WHERE run_id = $1",
        "UPDATE statek.run_claims SET cost = NULL WHERE run_id = $1",
    ] {
        let err = client.execute(change, &[&run]).await.expect_err(change);
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("SK001"),
            "{change}: {err}"
        );
    }
    assert_eq!(costs(&store, run).await, [Some(4), Some(6)]);
}
