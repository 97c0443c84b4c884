//! A batch claim sent again after a lost commit acknowledgement, against a
//! real PostgreSQL, through a relay that cuts the connection at the
//! claim's commit: the resend answers from the claim history by the
//! request's tokens, the same runs, claimed once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::{reserved_slots, test_store_config, TestDatabase};
use statek_store_pg::{NewRun, PgStore, SlotClaim, SlotClaimRequest, StoreError};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn shard() -> SchedulerShardId {
    SchedulerShardId::try_from("primary-v1").unwrap()
}

/// The shard's policy: tenants a (weight 2), b and c. A claim names only
/// reserved slots with their cycle tenants (migration V11).
fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy(
        "primary-v1",
        &[("tenant-a", 2), ("tenant-b", 1), ("tenant-c", 1)],
    )
}

/// Registers [`policy`] on `store` and reserves the next slots of
/// `tenants`, in this order: `(sequence, tenant)`.
async fn slots_of(store: &PgStore, tenants: &[&str]) -> Vec<(u64, TenantId)> {
    let p = policy();
    store.register(&p).await.unwrap();
    let tenants: Vec<TenantId> = tenants.iter().map(|t| tenant(t)).collect();
    let tenants: Vec<&TenantId> = tenants.iter().collect();
    reserved_slots(store, &p, &tenants).await
}

/// A slot's sequence as the claim history stores it.
fn seq(slot: &(u64, TenantId)) -> i64 {
    i64::try_from(slot.0).unwrap()
}

/// `(run, token)` of a claimed slot, `None` for any other answer.
fn held(claim: &SlotClaim) -> Option<(Uuid, Uuid)> {
    match claim {
        SlotClaim::Claimed(run) => Some((run.lease.run_id(), run.lease.token())),
        _ => None,
    }
}

/// Every claim in the history: `(sequence, run, token, attempt)` by sequence.
async fn history(client: &tokio_postgres::Client) -> Vec<(i64, Uuid, Uuid, i32)> {
    client
        .query(
            "SELECT sequence, run_id, lease_token, attempt FROM statek.run_attempts ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get("sequence"),
                r.get("run_id"),
                r.get("lease_token"),
                r.get("attempt"),
            )
        })
        .collect()
}

/// `(state, attempt, lease_token)` of every run, by run id.
async fn runs(client: &tokio_postgres::Client) -> Vec<(Uuid, String, i32, Option<Uuid>)> {
    client
        .query(
            "SELECT run_id, state, attempt, lease_token FROM statek.runs ORDER BY run_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get("run_id"),
                r.get("state"),
                r.get("attempt"),
                r.get("lease_token"),
            )
        })
        .collect()
}

async fn enqueue(store: &PgStore, tenant_id: &str) -> Uuid {
    store
        .enqueue(&NewRun::new(tenant(tenant_id), b"x".to_vec()))
        .await
        .unwrap()
        .run_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_whose_acknowledgement_is_lost_is_recovered_with_its_runs_and_tokens() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy =
        PgStore::new(test_store_config(proxy.pg_config()).pool_size(1).unwrap()).unwrap();
    let a1 = enqueue(&store, "tenant-a").await;
    let a2 = enqueue(&store, "tenant-a").await;
    let c1 = enqueue(&store, "tenant-c").await;
    // Four slots: a, b (no runs: idle), a, c.
    let slots = slots_of(&store, &["tenant-a", "tenant-b", "tenant-a", "tenant-c"]).await;
    let request = SlotClaimRequest::new(&shard(), &slots, LEASE, 4).unwrap();
    let tokens = request.tokens().to_vec();
    assert!(!request.was_sent());

    // Committed, the acknowledgement lost.
    proxy.arm(Fault::AfterCommit);
    let err = through_proxy.claim_slots(&request).await.unwrap_err();
    assert_eq!(proxy.fired(), 1);
    assert!(err.is_retryable(), "{err:?}");
    assert!(request.was_sent());
    let committed = history(&client).await;
    assert_eq!(
        committed,
        [
            (seq(&slots[0]), a1, tokens[0], 1),
            (seq(&slots[2]), a2, tokens[2], 1),
            (seq(&slots[3]), c1, tokens[3], 1),
        ]
    );

    // Sent again: the same runs with the same tokens, nothing claimed anew.
    let recovered = through_proxy.claim_slots(&request).await.unwrap();
    assert_eq!(
        recovered.iter().map(held).collect::<Vec<_>>(),
        [
            Some((a1, tokens[0])),
            None,
            Some((a2, tokens[2])),
            Some((c1, tokens[3])),
        ]
    );
    // The slot that claimed nothing: its outcome was in the lost answer.
    assert_eq!(recovered[1], SlotClaim::Contended);
    for claim in &recovered {
        if let SlotClaim::Claimed(run) = claim {
            assert_eq!(run.attempt, 1);
            assert!(run.lease_expires_at > run.claimed_at);
        }
    }
    assert_eq!(history(&client).await, committed);
    assert_eq!(runs(&client).await, {
        let mut expected = vec![
            (a1, "running".to_owned(), 1, Some(tokens[0])),
            (a2, "running".to_owned(), 1, Some(tokens[2])),
            (c1, "running".to_owned(), 1, Some(tokens[3])),
        ];
        expected.sort();
        expected
    });
    // And again: the same answer.
    assert_eq!(
        through_proxy.claim_slots(&request).await.unwrap(),
        recovered
    );

    // Another request for a slot already claimed (with a run it would
    // take): refused.
    enqueue(&store, "tenant-a").await;
    let other = SlotClaimRequest::new(&shard(), &slots[..1], LEASE, 1).unwrap();
    match store.claim_slots(&other).await {
        Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed { shard: refused })) => {
            assert_eq!(refused, shard())
        }
        answer => panic!("expected SlotAlreadyClaimed, got {answer:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_cut_before_its_commit_claims_anew_with_the_same_tokens() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy =
        PgStore::new(test_store_config(proxy.pg_config()).pool_size(1).unwrap()).unwrap();
    let a1 = enqueue(&store, "tenant-a").await;
    let slots = slots_of(&store, &["tenant-a", "tenant-b"]).await;
    let request = SlotClaimRequest::new(&shard(), &slots, LEASE, 2).unwrap();
    let tokens = request.tokens().to_vec();
    proxy.arm(Fault::BeforeCommit);
    let err = through_proxy.claim_slots(&request).await.unwrap_err();
    assert_eq!(proxy.fired(), 1);
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(history(&client).await, []);
    // The cut transaction's backend holds its row locks until the server
    // notices the closed socket and rolls it back: a claim before then
    // skips the locked run (SKIP LOCKED), as it should. Wait for it.
    rolled_back(&client).await;
    let claimed = through_proxy.claim_slots(&request).await.unwrap();
    assert_eq!(
        claimed.iter().map(held).collect::<Vec<_>>(),
        [Some((a1, tokens[0])), None]
    );
    assert_eq!(claimed[1], SlotClaim::Idle);
    assert_eq!(history(&client).await, [(seq(&slots[0]), a1, tokens[0], 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_claim_of_at_most_max_runs_answers_the_prefix_it_decided() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy =
        PgStore::new(test_store_config(proxy.pg_config()).pool_size(1).unwrap()).unwrap();
    let a1 = enqueue(&store, "tenant-a").await;
    let a2 = enqueue(&store, "tenant-a").await;
    let _a3 = enqueue(&store, "tenant-a").await;
    let slots = slots_of(&store, &["tenant-b", "tenant-a", "tenant-a", "tenant-a"]).await;
    // Two permits: the first three slots decided, the fourth not.
    let request = SlotClaimRequest::new(&shard(), &slots, LEASE, 2).unwrap();
    let tokens = request.tokens().to_vec();
    proxy.arm(Fault::AfterCommit);
    through_proxy.claim_slots(&request).await.unwrap_err();
    let recovered = through_proxy.claim_slots(&request).await.unwrap();
    assert_eq!(
        recovered.iter().map(held).collect::<Vec<_>>(),
        [None, Some((a1, tokens[1])), Some((a2, tokens[2]))]
    );
    assert_eq!(
        history(&client).await,
        [
            (seq(&slots[1]), a1, tokens[1], 1),
            (seq(&slots[2]), a2, tokens[2], 1)
        ]
    );

    // The lease of a recovered claim lost meanwhile (cancelled): the slot
    // answers LeaseLost, the run is not handed out.
    assert!(store.cancel_run(a1).await.unwrap());
    let again = through_proxy.claim_slots(&request).await.unwrap();
    assert_eq!(again[1], SlotClaim::LeaseLost { run_id: a1 });
    assert_eq!(held(&again[2]), Some((a2, tokens[2])));
}

/// Waits (at most 30 s) until no other session of this database is inside
/// a transaction.
async fn rolled_back(client: &tokio_postgres::Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let open: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND xact_start IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cut transaction was not rolled back in 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
