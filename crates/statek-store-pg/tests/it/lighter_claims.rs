//! Migration V17's lighter claims. One probe per tenant: a slot's class
//! (idle, limited) comes from the pick and the probe of the tenants left
//! short, as before. The rate limit's count without an index entry per
//! claim: a claim is marked (`rate_counted`) when its tenant has a rate
//! limit, and a rate limit set later, or a window that grows, marks the
//! tenant's claims inside the window, so the limit counts every claim of
//! its window as V13's count did. A completed row takes the mark and no
//! other change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::TenantId;
use statek_store_pg::testing::{reserved_slots, TestDatabase};
use statek_store_pg::{ClaimOutcome, NewRun, RateLimit, SlotClaim, TenantLimits};

fn cap(n: u32) -> TenantLimits {
    TenantLimits::new(Some(n), None).unwrap()
}

const LEASE: Duration = Duration::from_secs(60);

fn rate(text: &str) -> TenantLimits {
    let rate: RateLimit = text.parse().unwrap();
    TenantLimits::new(None, Some(rate)).unwrap()
}

/// Reserves the next slots of `tenants` (in this order) and claims for
/// them.
async fn claim_next(
    store: &statek_store_pg::PgStore,
    policy: &statek_policy::WeightedFairnessPolicy,
    tenants: &[&TenantId],
) -> Vec<SlotClaim> {
    let slots = reserved_slots(store, policy, tenants).await;
    store
        .claim_runs_for_slots(&slots, policy.shard_id(), LEASE)
        .await
        .unwrap()
}

/// `(rate_counted, state)` of every run of `tenant-a` that was claimed,
/// oldest claim first.
async fn marks(client: &tokio_postgres::Client) -> Vec<(bool, String)> {
    client
        .query(
            "SELECT rate_counted, state FROM statek.runs
             WHERE tenant_id = 'tenant-a' AND claim_token IS NOT NULL ORDER BY claimed_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// `tenant-a`'s claims in the last hour, as its rate limit counts them
/// (`statek.tenant_claims_since`).
pub(crate) async fn counted(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT statek.tenant_claims_since('tenant-a', now() - interval '1 hour')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_rate_limit_counts_the_claims_made_before_it_was_set() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let a = TenantId::try_from("tenant-a").unwrap();
    let p = statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    let runs: Vec<NewRun> = (0..10_u8)
        .map(|i| NewRun::new(a.clone(), vec![i]))
        .collect();
    store.enqueue_many(&runs).await.unwrap();

    // Three claims by slot, completed, and one outside the fair order,
    // still running: none marked while the tenant has no rate limit.
    for claim in claim_next(&store, &p, &[&a, &a, &a]).await {
        let SlotClaim::Claimed(run) = claim else {
            panic!("expected a claim, got {claim:?}")
        };
        store.complete_run(&run.lease).await.unwrap();
    }
    let ClaimOutcome::Claimed(_running) = store.claim_run(&a, LEASE).await.unwrap() else {
        panic!("expected a claim")
    };
    let completed = || (false, "completed".to_owned());
    assert_eq!(
        marks(&client).await,
        [
            completed(),
            completed(),
            completed(),
            (false, "running".to_owned())
        ]
    );
    assert_eq!(counted(&client).await, 0);

    // A limit of 4 per hour marks all four (the completed rows too) and
    // leaves the next claim nothing.
    store.set_tenant_limits(&a, &rate("4/h")).await.unwrap();
    assert!(marks(&client).await.iter().all(|(marked, _)| *marked));
    assert_eq!(counted(&client).await, 4);
    let claims = claim_next(&store, &p, &[&a, &a]).await;
    assert!(
        matches!(claims[..], [SlotClaim::Limited, SlotClaim::Limited]),
        "{claims:?}"
    );

    // Raised to 6: two more, each marked by its claim.
    store.set_tenant_limits(&a, &rate("6/h")).await.unwrap();
    let claims = claim_next(&store, &p, &[&a, &a, &a]).await;
    assert!(
        matches!(
            claims[..],
            [
                SlotClaim::Claimed(_),
                SlotClaim::Claimed(_),
                SlotClaim::Limited
            ]
        ),
        "{claims:?}"
    );
    assert_eq!(counted(&client).await, 6);
    assert_eq!(marks(&client).await.len(), 6);
    assert!(marks(&client).await.iter().all(|(marked, _)| *marked));
}

#[tokio::test]
async fn a_wider_window_counts_older_claims_and_a_completed_row_takes_no_other_change() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let a = TenantId::try_from("tenant-a").unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), b"x".to_vec()))
        .await
        .unwrap();
    let ClaimOutcome::Claimed(run) = store.claim_run(&a, LEASE).await.unwrap() else {
        panic!("expected a claim")
    };
    store.complete_run(&run.lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // A 50 ms window does not reach back to the claim; an hour does.
    store.set_tenant_limits(&a, &rate("5/50ms")).await.unwrap();
    assert_eq!(marks(&client).await, [(false, "completed".to_owned())]);
    store.set_tenant_limits(&a, &rate("5/h")).await.unwrap();
    assert_eq!(marks(&client).await, [(true, "completed".to_owned())]);
    assert_eq!(counted(&client).await, 1);

    // The completed row: no unmarking, and nothing else with the mark,
    // even for the owner (this client).
    for change in [
        "rate_counted = false",
        "rate_counted = true, payload = '\\x01'",
    ] {
        let err = client
            .execute(
                &format!("UPDATE statek.runs SET {change} WHERE tenant_id = 'tenant-a'"),
                &[],
            )
            .await
            .expect_err(change);
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("SK001"),
            "{change}: {err}"
        );
    }
    assert_eq!(counted(&client).await, 1);
}

/// A tenant at its cap: a slot is limited while it has a claimable run
/// and idle once it has none, whether or not its limits were consulted.
#[tokio::test]
async fn a_capped_tenant_is_limited_with_a_claimable_run_and_idle_without() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (a, b) = (
        TenantId::try_from("tenant-a").unwrap(),
        TenantId::try_from("tenant-b").unwrap(),
    );
    let p = statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)]);
    store.register(&p).await.unwrap();
    store.set_tenant_limits(&a, &cap(1)).await.unwrap();
    for tenant in [&a, &a, &b] {
        store
            .enqueue(&NewRun::new(tenant.clone(), b"x".to_vec()))
            .await
            .unwrap();
    }
    // a: one claimed (its cap), one left over: limited; b: claimed.
    let claims = claim_next(&store, &p, &[&a, &a, &b]).await;
    assert!(
        matches!(
            claims[..],
            [
                SlotClaim::Claimed(_),
                SlotClaim::Limited,
                SlotClaim::Claimed(_)
            ]
        ),
        "{claims:?}"
    );
    // a still at its cap, its other run cancelled: idle; b: idle.
    let client = db.client().await;
    client
        .execute(
            "SELECT statek.cancel_run(run_id) FROM statek.runs
             WHERE tenant_id = 'tenant-a' AND state = 'available'",
            &[],
        )
        .await
        .unwrap();
    let claims = claim_next(&store, &p, &[&a, &b]).await;
    assert_eq!(claims, [SlotClaim::Idle, SlotClaim::Idle]);
}

/// Part 3: a finish locks each run as it updates it, in run id order.
/// Eight flushes of the same 40 runs at once, each sent in its own order:
/// no deadlock (without the order, three runs of six met one), every run
/// is completed once, by exactly one flush, and every other flush answers
/// it "already recorded".
#[tokio::test]
async fn concurrent_finishes_of_the_same_runs_complete_each_run_once() {
    use statek_store_pg::{FinishOutcome, FinishRun};
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = TenantId::try_from("tenant-a").unwrap();
    let runs: Vec<NewRun> = (0..40_u8)
        .map(|i| NewRun::new(a.clone(), vec![i]))
        .collect();
    store.enqueue_many(&runs).await.unwrap();
    let mut leases = Vec::new();
    for _ in 0..40 {
        let ClaimOutcome::Claimed(run) = store.claim_run(&a, LEASE).await.unwrap() else {
            panic!("expected a claim")
        };
        leases.push(run.lease);
    }
    let mut flushes = tokio::task::JoinSet::new();
    for flush in 0..8_usize {
        // Rotated and, for odd flushes, reversed: no two share an order.
        let mut order: Vec<_> = leases.clone();
        order.rotate_left(flush * 5);
        if flush % 2 == 1 {
            order.reverse();
        }
        let store = db.store();
        flushes.spawn(async move {
            let finishes: Vec<FinishRun> = order.iter().map(|l| FinishRun::complete(*l)).collect();
            let outcomes = store.finish_runs(&finishes).await.unwrap();
            order
                .iter()
                .map(|l| l.run_id())
                .zip(outcomes)
                .collect::<Vec<_>>()
        });
    }
    let mut completed_by = std::collections::BTreeMap::new();
    while let Some(joined) = flushes.join_next().await {
        let answers = joined.unwrap();
        for (run, outcome) in answers {
            match outcome {
                FinishOutcome::Completed => *completed_by.entry(run).or_insert(0) += 1,
                FinishOutcome::AlreadyRecorded => {}
                other => panic!("run {run}: {other:?}"),
            }
        }
    }
    assert_eq!(completed_by.len(), 40);
    assert!(completed_by.values().all(|&n| n == 1), "{completed_by:?}");
    let client = db.client().await;
    let done: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'completed' AND claim_finished_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(done, 40);
}

/// Part 2 against part 3: a rate limit set while a flush finishes the
/// tenant's runs. The marking locks the runs in run id order, as the
/// finish does, so neither waits for the other in a circle: over ten
/// rounds of 60 claimed runs, every finish and every limit commits the
/// first time, and every claim inside the window is counted.
#[tokio::test]
async fn a_rate_limit_set_during_a_finish_of_the_same_runs_does_not_deadlock() {
    use statek_store_pg::{FinishOutcome, FinishRun};
    let db = TestDatabase::create().await;
    let (store, limits) = (db.store(), db.store());
    let client = db.client().await;
    let a = TenantId::try_from("tenant-a").unwrap();
    for round in 0..10_u32 {
        store.clear_tenant_limits(&a).await.unwrap();
        let runs: Vec<NewRun> = (0..60_u32)
            .map(|i| NewRun::new(a.clone(), (round * 100 + i).to_be_bytes().to_vec()))
            .collect();
        store.enqueue_many(&runs).await.unwrap();
        let mut leases = Vec::new();
        for _ in 0..60 {
            let ClaimOutcome::Claimed(run) = store.claim_run(&a, LEASE).await.unwrap() else {
                panic!("expected a claim")
            };
            leases.push(run.lease);
        }
        // The flush in the order the runs were claimed (not run id order).
        let finishes: Vec<FinishRun> = leases.iter().map(|l| FinishRun::complete(*l)).collect();
        let limit = rate("100000/h");
        let (finished, limited) = tokio::join!(
            store.finish_runs(&finishes),
            limits.set_tenant_limits(&a, &limit),
        );
        assert!(
            finished
                .unwrap()
                .iter()
                .all(|o| *o == FinishOutcome::Completed),
            "round {round}"
        );
        limited.unwrap();
        let expected = i64::from(round + 1) * 60;
        assert_eq!(counted(&client).await, expected, "round {round}");
    }
}
