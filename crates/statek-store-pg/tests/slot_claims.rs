//! Claims for a batch of slots in one statement (`claim_runs_for_slots`)
//! and the claim history of migration V7, against a real PostgreSQL;
//! the idle probe counts only the policy's tenants.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{ClaimedRun, FailOutcome, NewRun, PgStore, SlotClaim, StoreError};
use uuid::Uuid;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn policy(weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        weights
            .iter()
            .map(|(t, w)| TenantFairnessWeight::new(tenant(t), *w).unwrap()),
    )
    .unwrap()
}

fn claimed(claim: &SlotClaim) -> &ClaimedRun {
    match claim {
        SlotClaim::Claimed(run) => run,
        other => panic!("expected a claim, got {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(60);

/// One row of `statek.run_claims`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct History {
    run_id: Uuid,
    attempt: i32,
    tenant: String,
    shard: Option<String>,
    sequence: Option<i64>,
    token: Uuid,
    claimed_at: SystemTime,
    finished_at: Option<SystemTime>,
}

async fn history(client: &tokio_postgres::Client) -> Vec<History> {
    client
        .query(
            "SELECT run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at,
                    finished_at
             FROM statek.run_claims ORDER BY sequence NULLS LAST, claimed_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| History {
            run_id: r.get("run_id"),
            attempt: r.get("attempt"),
            tenant: r.get("tenant_id"),
            shard: r.get("shard_id"),
            sequence: r.get("sequence"),
            token: r.get("lease_token"),
            claimed_at: r.get("claimed_at"),
            finished_at: r.get("finished_at"),
        })
        .collect()
}

#[tokio::test]
async fn a_mixed_batch_gets_exact_outcomes_per_slot_and_each_claim_is_recorded() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy(&[("tenant-a", 2), ("tenant-b", 1), ("tenant-c", 1)]);
    store.register(&p).await.unwrap();
    let (a, b, c) = (tenant("tenant-a"), tenant("tenant-b"), tenant("tenant-c"));
    let mut a_runs = Vec::new();
    for payload in [b"a1", b"a2", b"a3"] {
        a_runs.push(
            store
                .enqueue(&NewRun::new(a.clone(), payload.to_vec()))
                .await
                .unwrap()
                .run_id,
        );
    }
    let c_run = store
        .enqueue(&NewRun::new(c.clone(), b"c1".to_vec()))
        .await
        .unwrap()
        .run_id;
    // c's only run is locked by a concurrent transaction.
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM statek.runs WHERE tenant_id = 'tenant-c' FOR UPDATE")
        .await
        .unwrap();

    let slots = [
        (10, a.clone()),
        (11, b.clone()),
        (12, a.clone()),
        (13, c.clone()),
    ];
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    assert_eq!(claims.len(), 4);
    // Two slots of a: its two oldest runs, the earlier slot the older run.
    let first = claimed(&claims[0]);
    let second = claimed(&claims[2]);
    assert_eq!(
        (
            first.lease.run_id(),
            first.payload.as_slice(),
            first.attempt
        ),
        (a_runs[0], &b"a1"[..], 1)
    );
    assert_eq!(
        (
            second.lease.run_id(),
            second.payload.as_slice(),
            second.attempt
        ),
        (a_runs[1], &b"a2"[..], 1)
    );
    assert_eq!(
        (first.tenant.as_str(), second.tenant.as_str()),
        ("tenant-a", "tenant-a")
    );
    assert_ne!(first.lease.token(), second.lease.token());
    for run in [first, second] {
        assert!(run.lease_expires_at > run.claimed_at);
    }
    // b has no run: idle. c's run is locked: contended.
    assert_eq!(claims[1], SlotClaim::Idle);
    assert_eq!(claims[3], SlotClaim::Contended);
    tx.rollback().await.unwrap();

    let recorded = history(&client).await;
    let plain: Vec<_> = recorded
        .iter()
        .map(|h| {
            (
                h.run_id,
                h.attempt,
                h.tenant.as_str(),
                h.shard.as_deref(),
                h.sequence,
                h.token,
                h.finished_at,
            )
        })
        .collect();
    assert_eq!(
        plain,
        [
            (
                a_runs[0],
                1,
                "tenant-a",
                Some("primary-v1"),
                Some(10),
                first.lease.token(),
                None
            ),
            (
                a_runs[1],
                1,
                "tenant-a",
                Some("primary-v1"),
                Some(12),
                second.lease.token(),
                None
            ),
        ]
    );
    assert_eq!(recorded[0].claimed_at, first.claimed_at);

    // Complete one, fail the other (retry at once): finish times recorded.
    store.complete_run(&first.lease).await.unwrap();
    assert!(matches!(
        store
            .fail_run(&second.lease, "boom", Duration::ZERO)
            .await
            .unwrap(),
        FailOutcome::Retrying { .. }
    ));
    let after = history(&client).await;
    assert!(after.iter().all(|h| h.finished_at.is_some()), "{after:?}");

    // A slot never claims twice: nothing of the call is kept.
    match store
        .claim_runs_for_slots(&[(12, a.clone())], p.shard_id(), LEASE)
        .await
    {
        Err(StoreError::SlotAlreadyClaimed { shard }) => assert_eq!(&shard, p.shard_id()),
        other => panic!("expected SlotAlreadyClaimed, got {other:?}"),
    }
    // The next slots: a's third run, then its failed run (available again
    // since the failure, so after the third by available time) as attempt
    // 2 in a new history row; the first attempt's row is unchanged. c's
    // run is free now.
    let claims = store
        .claim_runs_for_slots(
            &[
                (14, a.clone()),
                (15, c.clone()),
                (16, a.clone()),
                (17, a.clone()),
            ],
            p.shard_id(),
            LEASE,
        )
        .await
        .unwrap();
    assert_eq!(claimed(&claims[0]).lease.run_id(), a_runs[2]);
    assert_eq!(claimed(&claims[1]).lease.run_id(), c_run);
    let retried = claimed(&claims[2]);
    assert_eq!((retried.lease.run_id(), retried.attempt), (a_runs[1], 2));
    // a's third slot: every claimable run of a was taken by this claim.
    assert_eq!(claims[3], SlotClaim::Idle);
    let rows = history(&client).await;
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[..2], after[..]);
    let seqs: Vec<(Option<i64>, Uuid, i32)> = rows[2..]
        .iter()
        .map(|h| (h.sequence, h.run_id, h.attempt))
        .collect();
    assert_eq!(
        seqs,
        [
            (Some(14), a_runs[2], 1),
            (Some(15), c_run, 1),
            (Some(16), a_runs[1], 2)
        ]
    );

    // A single-slot claim is recorded too, without a slot.
    store
        .enqueue(&NewRun::new(b.clone(), b"b1".to_vec()))
        .await
        .unwrap();
    let outcome = store.claim_run(&b, LEASE).await.unwrap();
    let statek_store_pg::ClaimOutcome::Claimed(run) = outcome else {
        panic!("expected a claim, got {outcome:?}");
    };
    let last = history(&client).await.pop().unwrap();
    assert_eq!(
        (last.run_id, last.shard, last.sequence, last.token),
        (run.lease.run_id(), None, None, run.lease.token())
    );
}

#[tokio::test]
async fn bad_slot_batches_are_rejected_before_the_database() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy(&[("tenant-a", 1)]);
    let a = tenant("tenant-a");
    let check = |result: Result<Vec<SlotClaim>, StoreError>, expected: &str| match result {
        Err(StoreError::InvalidArgument(message)) => assert_eq!(message, expected),
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    check(
        store
            .claim_runs_for_slots(&[(3, a.clone()), (3, a.clone())], p.shard_id(), LEASE)
            .await,
        "slots must be in increasing sequence order",
    );
    let many: Vec<(u64, TenantId)> = (0..1025).map(|s| (s, a.clone())).collect();
    check(
        store.claim_runs_for_slots(&many, p.shard_id(), LEASE).await,
        "1025 slots, at most 1024 per claim",
    );
    check(
        store
            .claim_runs_for_slots(&[(0, a.clone())], p.shard_id(), Duration::ZERO)
            .await,
        "lease must be 1 ms..=24 h, got 0ns",
    );
    assert_eq!(
        store
            .claim_runs_for_slots(&[], p.shard_id(), LEASE)
            .await
            .unwrap(),
        []
    );
}

#[tokio::test]
async fn the_idle_probe_counts_only_the_given_tenants() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let policy_tenants = [tenant("tenant-a"), tenant("tenant-b")];
    // A tenant outside the policy has work: it does not count.
    store
        .enqueue(&NewRun::new(tenant("outsider"), b"x".to_vec()))
        .await
        .unwrap();
    assert!(!store.any_claimable_runs(&policy_tenants).await.unwrap());
    assert!(store
        .any_claimable_runs(&[tenant("outsider")])
        .await
        .unwrap());
    assert!(!store.any_claimable_runs(&[]).await.unwrap());
    store
        .enqueue(&NewRun::new(tenant("tenant-b"), b"y".to_vec()))
        .await
        .unwrap();
    assert!(store.any_claimable_runs(&policy_tenants).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_claimers_of_disjoint_slot_batches_claim_every_run_exactly_once() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.store_config().pool_size(4).unwrap()).unwrap();
    let client = db.client().await;
    // L = 8; 2,000 runs in the proportion of the weights.
    let p = policy(&[
        ("tenant-a", 3),
        ("tenant-b", 1),
        ("tenant-c", 2),
        ("tenant-d", 2),
    ]);
    store.register(&p).await.unwrap();
    for (t, n) in [
        ("tenant-a", 750),
        ("tenant-b", 250),
        ("tenant-c", 500),
        ("tenant-d", 500),
    ] {
        client
            .execute(
                "INSERT INTO statek.runs (run_id, tenant_id, payload)
                 SELECT gen_random_uuid(), $1, '\\x00'::bytea FROM generate_series(1, $2)",
                &[&t, &n],
            )
            .await
            .unwrap();
    }
    const BATCH: u64 = 16;
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..4_u64 {
        let (store, p) = (store.clone(), p.clone());
        tasks.spawn(async move {
            // Batches task, task + 4, task + 8, ...: disjoint sequences.
            let mut got: Vec<(u64, TenantId, Uuid)> = Vec::new();
            let mut batch = task;
            loop {
                let slots: Vec<(u64, TenantId)> = (batch * BATCH..(batch + 1) * BATCH)
                    .map(|s| (s, p.tenant_for_slot(s % 8).unwrap().clone()))
                    .collect();
                let claims = store
                    .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
                    .await
                    .unwrap();
                let mut all_idle = true;
                for ((sequence, slot_tenant), claim) in slots.into_iter().zip(claims) {
                    match claim {
                        SlotClaim::Claimed(run) => {
                            assert_eq!(run.tenant, slot_tenant);
                            got.push((sequence, slot_tenant, run.lease.run_id()));
                            all_idle = false;
                        }
                        SlotClaim::Contended => all_idle = false,
                        SlotClaim::Idle => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
                if all_idle {
                    return got;
                }
                batch += 4;
            }
        });
    }
    let mut by_run: BTreeMap<Uuid, (u64, TenantId)> = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        for (sequence, t, run) in done.unwrap() {
            assert!(
                by_run.insert(run, (sequence, t)).is_none(),
                "run {run} claimed twice"
            );
        }
    }
    assert_eq!(by_run.len(), 2000);

    // Read back from the claim history: every run once, each sequence at
    // most one run, that run's tenant the slot's tenant.
    let rows = client
        .query(
            "SELECT h.run_id, h.sequence, h.tenant_id AS claim_tenant, r.tenant_id AS run_tenant,
                    h.attempt, h.shard_id
             FROM statek.run_claims AS h JOIN statek.runs AS r USING (run_id)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2000);
    let mut runs = BTreeSet::new();
    let mut sequences = BTreeSet::new();
    for row in &rows {
        let run: Uuid = row.get("run_id");
        let sequence = u64::try_from(row.get::<_, i64>("sequence")).unwrap();
        let run_tenant: String = row.get("run_tenant");
        let claim_tenant: String = row.get("claim_tenant");
        let shard: String = row.get("shard_id");
        assert!(runs.insert(run));
        assert!(
            sequences.insert(sequence),
            "sequence {sequence} claimed twice"
        );
        let slot_tenant = p.tenant_for_slot(sequence % 8).unwrap().as_str();
        assert_eq!(
            (
                run_tenant.as_str(),
                claim_tenant.as_str(),
                shard.as_str(),
                row.get::<_, i32>("attempt")
            ),
            (slot_tenant, slot_tenant, "primary-v1", 1)
        );
        assert_eq!(by_run[&run].0, sequence);
    }
    let live: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'running'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 2000);
}

/// A label per answered slot: `run payload`, `idle` or `contended`.
fn labels(claims: &[SlotClaim]) -> Vec<String> {
    claims
        .iter()
        .map(|c| match c {
            SlotClaim::Claimed(run) => String::from_utf8(run.payload.clone()).unwrap(),
            SlotClaim::Idle => "idle".into(),
            SlotClaim::Contended => "contended".into(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// With `max_runs` permits the claim answers the decided prefix: up to the
/// slot of the last run it may take; later slots are left for a later call
/// and nothing of them is written.
#[tokio::test]
async fn a_claim_limited_to_free_permits_answers_its_decided_prefix() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy(&[("tenant-a", 2), ("tenant-b", 1), ("tenant-c", 1)]);
    store.register(&p).await.unwrap();
    let (a, b, c) = (tenant("tenant-a"), tenant("tenant-b"), tenant("tenant-c"));
    for (t, payload) in [(&a, "a1"), (&a, "a2"), (&c, "c1")] {
        store
            .enqueue(&NewRun::new(t.clone(), payload.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    let slots = [
        (20, b.clone()),
        (21, a.clone()),
        (22, b.clone()),
        (23, a.clone()),
        (24, c.clone()),
        (25, b.clone()),
    ];
    // One permit: b idle, a's first run, then stop.
    let first = store
        .claim_runs_for_slots_up_to(&slots, p.shard_id(), LEASE, 1)
        .await
        .unwrap();
    assert_eq!(labels(&first), ["idle", "a1"]);
    // Two permits for the rest: b idle, a2, c1, and the last slot (b, idle)
    // is decided too because no claimable pair was left over.
    let rest = store
        .claim_runs_for_slots_up_to(&slots[2..], p.shard_id(), LEASE, 2)
        .await
        .unwrap();
    assert_eq!(labels(&rest), ["idle", "a2", "c1", "idle"]);
    // Exactly three claims recorded, each at its own slot.
    let recorded: Vec<(Option<i64>, String)> = history(&client)
        .await
        .into_iter()
        .map(|h| (h.sequence, h.tenant))
        .collect();
    assert_eq!(
        recorded,
        [
            (Some(21), "tenant-a".to_owned()),
            (Some(23), "tenant-a".to_owned()),
            (Some(24), "tenant-c".to_owned()),
        ]
    );
    // A run left over by the limit is not claimed and stays available.
    store
        .enqueue(&NewRun::new(a.clone(), b"a3".to_vec()))
        .await
        .unwrap();
    store
        .enqueue(&NewRun::new(a.clone(), b"a4".to_vec()))
        .await
        .unwrap();
    let limited = store
        .claim_runs_for_slots_up_to(&[(30, a.clone()), (31, a.clone())], p.shard_id(), LEASE, 1)
        .await
        .unwrap();
    assert_eq!(labels(&limited), ["a3"]);
    let available: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'available' AND tenant_id = 'tenant-a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(available, 1);
    for bad in [0, 1025] {
        assert!(matches!(
            store
                .claim_runs_for_slots_up_to(&slots, p.shard_id(), LEASE, bad)
                .await,
            Err(StoreError::InvalidArgument(_))
        ));
    }
}

/// The limits function (`statek.claim_allowance`, which locks limits rows)
/// runs in a claim only when a tenant of the batch with claimable runs
/// has limits: without, the plan shows it never executed; with a cap on
/// that tenant, executed once. (It ran for every claim before: a filter
/// the planner had moved into a join.)
#[tokio::test]
async fn the_limits_function_runs_only_for_a_batch_with_a_limited_tenant() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy(&[("tenant-a", 1), ("tenant-b", 1)]);
    store.register(&p).await.unwrap();
    for _ in 0..3 {
        store
            .enqueue(&NewRun::new(tenant("tenant-a"), vec![]))
            .await
            .unwrap();
    }
    let mut client = db.client().await;
    let mut allowance_line = async || -> String {
        let tx = client.transaction().await.unwrap();
        let plan: Vec<String> = tx
            .query(
                &format!(
                    "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {}",
                    statek_store_pg::testing::CLAIM_FOR_SLOTS_SQL
                ),
                &[
                    &vec![0i64, 1, 2, 3],
                    &vec!["tenant-a", "tenant-b", "tenant-a", "tenant-b"],
                    &(0..4).map(|_| Uuid::now_v7()).collect::<Vec<_>>(),
                    &60.0f64,
                    &"primary-v1",
                    &4i64,
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.rollback().await.unwrap();
        plan.iter()
            .find(|line| line.contains("Function Scan on claim_allowance"))
            .map(|line| line.trim().trim_start_matches("->").trim().to_owned())
            .unwrap_or_else(|| {
                panic!(
                    "no call of claim_allowance in the plan:\n{}",
                    plan.join("\n")
                )
            })
    };
    assert_eq!(
        allowance_line().await,
        "Function Scan on claim_allowance f (never executed)"
    );
    store
        .set_tenant_limits(
            &tenant("tenant-a"),
            &statek_store_pg::TenantLimits::new(Some(2), None).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        allowance_line().await,
        "Function Scan on claim_allowance f (actual rows=1 loops=1)"
    );
}
