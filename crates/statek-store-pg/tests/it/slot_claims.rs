//! Claims for a batch of slots in one statement (`claim_runs_for_slots`)
//! and the claim history of migration V7, against a real PostgreSQL;
//! the idle probe counts only the policy's tenants.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{reserved_slots, TestDatabase};
use statek_store_pg::{ClaimedRun, FailOutcome, NewRun, PgStore, SlotClaim, StoreError};
use uuid::Uuid;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn policy(weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", weights)
}

fn claimed(claim: &SlotClaim) -> &ClaimedRun {
    match claim {
        SlotClaim::Claimed(run) => run,
        other => panic!("expected a claim, got {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(60);

/// One attempt of `statek.run_attempts`.
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
             FROM statek.run_attempts ORDER BY sequence NULLS LAST, claimed_at",
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

    let slots = reserved_slots(&store, &p, &[&a, &b, &a, &c]).await;
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
                Some(slots[0].0 as i64),
                first.lease.token(),
                None
            ),
            (
                a_runs[1],
                1,
                "tenant-a",
                Some("primary-v1"),
                Some(slots[2].0 as i64),
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
        .claim_runs_for_slots(&[slots[2].clone()], p.shard_id(), LEASE)
        .await
    {
        Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed { shard })) => {
            assert_eq!(&shard, p.shard_id())
        }
        other => panic!("expected SlotAlreadyClaimed, got {other:?}"),
    }
    // The next slots: a's third run, then its failed run (available again
    // since the failure, so after the third by available time) as attempt
    // 2 in a new history row; the first attempt's row is unchanged. c's
    // run is free now.
    let next = reserved_slots(&store, &p, &[&a, &c, &a, &a]).await;
    let claims = store
        .claim_runs_for_slots(&next, p.shard_id(), LEASE)
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
            (Some(next[0].0 as i64), a_runs[2], 1),
            (Some(next[1].0 as i64), c_run, 1),
            (Some(next[2].0 as i64), a_runs[1], 2)
        ]
    );

    // Since migration V13 a claim is kept on its run row until a later
    // claim of the run moves it into the history: a_runs[1]'s first
    // attempt (slot 2) is there now, its second on the row. Neither slot,
    // nor the completed run's (slot 0, on its row), claims again, though
    // a has a claimable run; nothing of those calls is kept.
    let spare = store
        .enqueue(&NewRun::new(a.clone(), b"a4".to_vec()))
        .await
        .unwrap()
        .run_id;
    let moved: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.run_claims WHERE sequence = $1",
            &[&(slots[2].0 as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(moved, 1);
    for slot in [&slots[2], &slots[0], &next[2]] {
        match store
            .claim_runs_for_slots(std::slice::from_ref(slot), p.shard_id(), LEASE)
            .await
        {
            Err(StoreError::RunQueue(RunQueueError::SlotAlreadyClaimed { shard })) => {
                assert_eq!(&shard, p.shard_id())
            }
            other => panic!(
                "slot {}: expected SlotAlreadyClaimed, got {other:?}",
                slot.0
            ),
        }
    }
    let spare_state: String = client
        .query_one("SELECT state FROM statek.runs WHERE run_id = $1", &[&spare])
        .await
        .unwrap()
        .get(0);
    assert_eq!(spare_state, "available");
    assert_eq!(history(&client).await, rows);

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
    let many: Vec<(u64, TenantId)> = (0..4097).map(|s| (s, a.clone())).collect();
    check(
        store.claim_runs_for_slots(&many, p.shard_id(), LEASE).await,
        "4097 slots, at most 4096 per claim",
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
    // Claims name reserved slots only (migration V11): reserve far more
    // than the 2,000 claims and the idle batches that end each task take.
    statek_store_pg::testing::reserve_next_slots(&store, &p, 8192).await;
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
             FROM statek.run_attempts AS h JOIN statek.runs AS r USING (run_id)",
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
    let slots = reserved_slots(&store, &p, &[&b, &a, &b, &a, &c, &b]).await;
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
            (Some(slots[1].0 as i64), "tenant-a".to_owned()),
            (Some(slots[3].0 as i64), "tenant-a".to_owned()),
            (Some(slots[4].0 as i64), "tenant-c".to_owned()),
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
        .claim_runs_for_slots_up_to(
            &reserved_slots(&store, &p, &[&a, &a]).await,
            p.shard_id(),
            LEASE,
            1,
        )
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
    for bad in [0, 4097] {
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
/// has limits: without, the claim's transaction counts no call of it
/// (`track_functions`); with a cap on that tenant, one call. (It ran for
/// every claim before: a filter the planner had moved into a join.)
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
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let slots = reserved_slots(&store, &p, &[&a, &b, &a, &b]).await;
    let mut client = db.client().await;
    let mut allowance_calls = async || -> i64 {
        let tx = client.transaction().await.unwrap();
        tx.batch_execute("SET LOCAL track_functions = 'pl'")
            .await
            .unwrap();
        let claims = tx
            .query(
                statek_store_pg::testing::CLAIM_FOR_SLOTS_SQL,
                &[
                    &slots.iter().map(|s| s.0 as i64).collect::<Vec<_>>(),
                    &slots.iter().map(|s| s.1.as_str()).collect::<Vec<_>>(),
                    &(0..4).map(|_| Uuid::now_v7()).collect::<Vec<_>>(),
                    &60.0f64,
                    &"primary-v1",
                    &4i64,
                ],
            )
            .await
            .unwrap();
        // Both of a's slots claimed a run, b's were idle.
        assert_eq!(
            claims
                .iter()
                .map(|row| row.get::<_, Option<Uuid>>("run_id").is_some())
                .collect::<Vec<_>>(),
            [true, false, true, false]
        );
        let calls: i64 = tx
            .query_one(
                "SELECT coalesce(pg_stat_get_xact_function_calls(
                     'statek.claim_allowance(text[], bigint[])'::regprocedure), 0) AS calls",
                &[],
            )
            .await
            .unwrap()
            .get("calls");
        tx.rollback().await.unwrap();
        calls
    };
    assert_eq!(allowance_calls().await, 0);
    store
        .set_tenant_limits(
            &tenant("tenant-a"),
            &statek_store_pg::TenantLimits::new(Some(2), None).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(allowance_calls().await, 1);
}

fn refused(result: Result<Vec<SlotClaim>, StoreError>) -> String {
    match result {
        Err(error @ StoreError::RunQueue(RunQueueError::ClaimRefused { .. })) => {
            assert_eq!(error.sqlstate(), Some("SK002"));
            assert!(!error.is_retryable());
            match error {
                StoreError::RunQueue(RunQueueError::ClaimRefused { message }) => message,
                _ => unreachable!(),
            }
        }
        other => panic!("expected ClaimRefused, got {other:?}"),
    }
}

/// Migration V11: the claim function (the only writer of slot claims)
/// refuses a slot in no reservation range of its shard and a slot named
/// with another tenant than the cycle's, writing nothing; the slot map it
/// checks against is attached at registration, hashes to the stored cycle
/// digest, and never changes.
#[tokio::test]
async fn the_claim_function_refuses_slots_not_reserved_or_not_the_cycle_tenants() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy(&[("tenant-a", 2), ("tenant-b", 1), ("tenant-c", 1)]);
    store.register(&p).await.unwrap();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    for t in [&a, &b] {
        store
            .enqueue(&NewRun::new(t.clone(), b"x".to_vec()))
            .await
            .unwrap();
    }
    // The stored map: the policy's cycle, tenants in index (id) order.
    let row = client
        .query_one(
            "SELECT tenant_ids, slot_map FROM statek.shard_slot_maps WHERE shard_id = 'primary-v1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, Vec<String>>("tenant_ids"),
        ["tenant-a", "tenant-b", "tenant-c"]
    );
    let indexes: Vec<i16> = p
        .cycle_tenant_indexes()
        .iter()
        .map(|&i| i16::try_from(i).unwrap())
        .collect();
    assert_eq!(row.get::<_, Vec<i16>>("slot_map"), indexes);

    let slots = reserved_slots(&store, &p, &[&a]).await;
    let sequence = slots[0].0;
    let cursor = store.next_sequence(p.shard_id()).await.unwrap();
    assert_eq!(cursor, sequence + 1);
    // Not reserved: the cursor's own slot, with its own cycle tenant.
    let unreserved = (cursor, p.tenant_for_slot(cursor % 4).unwrap().clone());
    assert_eq!(
        refused(
            store
                .claim_runs_for_slots(&[unreserved], p.shard_id(), LEASE)
                .await
        ),
        format!(
            "statek: sequence {cursor} is not a reserved slot of shard primary-v1 (no reservation range holds it)"
        )
    );
    // Reserved, but a's slot named as b's.
    assert_eq!(
        refused(
            store
                .claim_runs_for_slots(&[(sequence, b.clone())], p.shard_id(), LEASE)
                .await
        ),
        format!(
            "statek: slot {sequence} of shard primary-v1 belongs to tenant tenant-a, not tenant-b"
        )
    );
    // Nothing was written: no claim, both runs still available.
    assert_eq!(history(&client).await, []);
    let available: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'available'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(available, 2);
    // The slot as reserved claims a's run.
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    assert_eq!(claimed(&claims[0]).tenant, a);

    // A map that is not the cycle's is refused; the stored one never
    // changes, not even for the owner.
    let mut swapped = indexes.clone();
    swapped.reverse();
    assert_ne!(
        swapped, indexes,
        "the test needs a cycle that is not a palindrome"
    );
    let swapped_text = format!(
        "{{{}}}",
        swapped
            .iter()
            .map(i16::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    for map in [swapped_text, "{0,1,2}".to_owned()] {
        assert_eq!(
            sk002(
                &client,
                &format!("SELECT statek.attach_slot_map('primary-v1', '{map}'::smallint[])")
            )
            .await,
            "statek: shard primary-v1 has another slot map"
        );
    }
    for statement in [
        "UPDATE statek.shard_slot_maps SET slot_map = slot_map",
        "DELETE FROM statek.shard_slot_maps",
    ] {
        let error = client.execute(statement, &[]).await.unwrap_err();
        let db_error = error.as_db_error().unwrap();
        assert_eq!(
            (db_error.code().code(), db_error.message()),
            (
                "SK001",
                "statek: the slot map of shard primary-v1 is bound forever and cannot be changed or deleted"
            ),
            "{statement}"
        );
    }
}

/// A shard without a slot map (registered before migration V11) cannot
/// have its slots claimed until it is registered again, which attaches the
/// map (a Worker registers at start).
#[tokio::test]
async fn a_shard_registered_before_v11_gets_its_slot_map_when_registered_again() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy(&[("tenant-a", 1), ("tenant-b", 1)]);
    // The row as a V10 store inserted it: no slot map.
    client
        .execute(
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
             VALUES ('primary-v1', $1, $2, $3, $4)",
            &[
                &p.canonical_bytes(),
                &&p.digest().as_bytes()[..],
                &i32::try_from(p.cycle_length()).unwrap(),
                &&p.cycle_digest().as_bytes()[..],
            ],
        )
        .await
        .unwrap();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), b"x".to_vec()))
        .await
        .unwrap();
    let slots = reserved_slots(&store, &p, &[&a]).await;
    assert_eq!(
        refused(store.claim_runs_for_slots(&slots, p.shard_id(), LEASE).await),
        "statek: shard primary-v1 has no slot map (register it with this version of statek, or roll a shard registered before migration V6 out to a new one)"
    );
    assert!(matches!(
        store.register(&p).await.unwrap(),
        statek_core::Registration::Idempotent { .. }
    ));
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    assert_eq!(claimed(&claims[0]).tenant, a);
}

/// The SK002 message of `sql`, which must be refused with it.
async fn sk002(client: &tokio_postgres::Client, sql: &str) -> String {
    let error = client.batch_execute(sql).await.unwrap_err();
    let db = error
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: {error}"));
    assert_eq!(db.code().code(), "SK002", "{sql}: {}", db.message());
    db.message().to_owned()
}

/// A shard row whose cycle digest is that of `map` (not of its policy's
/// cycle), as a runtime role may insert one, and the SQL array of `map`.
async fn forge_shard(client: &tokio_postgres::Client, shard: &str, map: &[i16]) -> String {
    let p = policy(&[("tenant-a", 3), ("tenant-b", 1)]);
    let mut cycle = b"statek.cycle.v1\0swrr-v1\0".to_vec();
    cycle.extend_from_slice(&u32::try_from(map.len()).unwrap().to_be_bytes());
    for index in map {
        cycle.extend_from_slice(&index.to_be_bytes());
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&cycle).to_vec();
    client
        .execute(
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
             VALUES ($1, $2, $3, 4, $4)",
            &[
                &shard,
                &p.canonical_bytes(),
                &&p.digest().as_bytes()[..],
                &digest,
            ],
        )
        .await
        .unwrap();
    format!(
        "{{{}}}",
        map.iter().map(i16::to_string).collect::<Vec<_>>().join(",")
    )
}

/// A runtime role may register shards and so choose their cycle digest:
/// the slot map must still give each tenant its weight's slots, and for
/// swrr-v1 be the cycle the database compiles itself.
#[tokio::test]
async fn a_slot_map_of_a_forged_cycle_digest_is_refused() {
    let db = TestDatabase::create().await;
    let client = db.client().await;
    // {tenant-a: 3, tenant-b: 1}: swrr-v1's cycle is a, a, b, a.
    let all_b = forge_shard(&client, "forged-v1", &[1, 1, 1, 1]).await;
    assert_eq!(
        sk002(
            &client,
            &format!("SELECT statek.attach_slot_map('forged-v1', '{all_b}')")
        )
        .await,
        "statek: this slot map of shard forged-v1 does not give each tenant its weight's number of slots"
    );
    let b_first = forge_shard(&client, "forged-v2", &[1, 0, 0, 0]).await;
    assert_eq!(
        sk002(
            &client,
            &format!("SELECT statek.attach_slot_map('forged-v2', '{b_first}')")
        )
        .await,
        "statek: this slot map of shard forged-v2 is not the swrr-v1 cycle of its policy (slot 0)"
    );
    let right = forge_shard(&client, "honest-v1", &[0, 0, 1, 0]).await;
    assert_eq!(
        sk002(
            &client,
            "SELECT statek.attach_slot_map('honest-v1', '{0,1,0,0}')"
        )
        .await,
        "statek: this slot map of shard honest-v1 does not match its stored cycle digest"
    );
    assert_eq!(
        sk002(&client, "SELECT statek.attach_slot_map('honest-v1', '{0,0,1}')").await,
        "statek: a slot map of shard honest-v1 has one tenant index below 2 for each of its 4 slots"
    );
    client
        .batch_execute(&format!(
            "SELECT statek.attach_slot_map('honest-v1', '{right}')"
        ))
        .await
        .unwrap();
    let maps: i64 = client
        .query_one("SELECT count(*) FROM statek.shard_slot_maps", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(maps, 1);
}

/// Malformed calls of the claim and finish functions are refused with
/// SK002 and write nothing; a run whose lease token was set by hand (no
/// claim row of its attempt) is not finished through them.
#[tokio::test]
async fn malformed_claims_and_finishes_are_refused() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy(&[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    let a = tenant("tenant-a");
    let run = store
        .enqueue(&NewRun::new(a.clone(), b"x".to_vec()))
        .await
        .unwrap()
        .run_id;
    reserved_slots(&store, &p, &[&a, &a]).await;
    let token = "'00000000-0000-7000-8000-000000000001'::uuid";
    for (call, message) in [
        (
            format!("SELECT * FROM statek.claim_slots('{{0,1}}', '{{tenant-a,tenant-a}}', ARRAY[{token}, {token}], 30, 'primary-v1', 2)"),
            "statek: every slot of a claim has its own lease token",
        ),
        (
            format!("SELECT * FROM statek.claim_slots('{{0}}', '{{tenant-a}}', ARRAY[{token}], 'NaN', 'primary-v1', 1)"),
            "statek: a lease is 0.001..=86400 seconds, not NaN",
        ),
        (
            format!("SELECT * FROM statek.claim_slots('{{0}}', '{{tenant-a}}', ARRAY[{token}], -1e6, 'primary-v1', 1)"),
            "statek: a lease is 0.001..=86400 seconds, not -1000000",
        ),
        (
            format!("SELECT * FROM statek.claim_slots('{{0}}', '{{tenant-a}}', ARRAY[{token}], 30, 'primary-v1', 0)"),
            "statek: a claim claims at least one run, not 0",
        ),
        (
            "SELECT * FROM statek.claim_run('tenant-a', NULL, 30)".to_owned(),
            "statek: a claim has a lease token and a lease of 0.001..=86400 seconds",
        ),
        (
            format!("SELECT * FROM statek.finish_runs(ARRAY['{run}'::uuid, '{run}'::uuid], ARRAY[{token}], '{{complete}}', '{{0}}', ARRAY[NULL::text])"),
            "statek: a finish names one run id, token, kind, retry delay, error and cost per run",
        ),
        (
            format!("SELECT * FROM statek.finish_runs(ARRAY['{run}'::uuid], ARRAY[{token}], '{{complete}}', '{{0}}', ARRAY[NULL::text], '{{1,2}}')"),
            "statek: a finish names one run id, token, kind, retry delay, error and cost per run",
        ),
        (
            format!("SELECT * FROM statek.finish_runs(ARRAY['{run}'::uuid], ARRAY[{token}], '{{complete}}', '{{0}}', ARRAY[NULL::text], '{{-1}}')"),
            "statek: an attempt costs 0..=1099511627776 (2^40) units, or reports none (NULL)",
        ),
        (
            format!("SELECT * FROM statek.finish_runs(ARRAY['{run}'::uuid], ARRAY[{token}], '{{complete}}', '{{0}}', ARRAY[NULL::text], '{{1099511627777}}')"),
            "statek: an attempt costs 0..=1099511627776 (2^40) units, or reports none (NULL)",
        ),
        (
            format!("SELECT * FROM statek.finish_runs(ARRAY['{run}'::uuid], ARRAY[{token}], '{{fail}}', ARRAY[NULL::float8], ARRAY['x'])"),
            "statek: a finish names each run once, with a token and a retry delay of 0..=31622400 seconds",
        ),
    ] {
        assert_eq!(sk002(&client, &call).await, message, "{call}");
    }
    assert_eq!(history(&client).await, []);
    // A lease set by hand (no claim made it) is not finished.
    client
        .execute(
            &format!(
                "UPDATE statek.runs SET state = 'running', lease_token = {token},
                     lease_expires_at = now() + interval '1 minute' WHERE run_id = $1"
            ),
            &[&run],
        )
        .await
        .unwrap();
    let finished = client
        .query_one(
            &format!(
                "SELECT state, already_recorded FROM statek.finish_runs(ARRAY[$1::uuid],
                     ARRAY[{token}], '{{complete}}', '{{0}}', ARRAY[NULL::text])"
            ),
            &[&run],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            finished.get::<_, Option<String>>("state"),
            finished.get::<_, bool>("already_recorded")
        ),
        (None, false)
    );
    let state: String = client
        .query_one("SELECT state FROM statek.runs WHERE run_id = $1", &[&run])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "running");
}

/// Claims run at read committed (migration V13): the check that a slot
/// whose attempt moved into the history is not claimed again needs each
/// statement's fresh snapshot, so `statek.claim_slots` refuses another
/// isolation level before it claims anything.
#[tokio::test]
async fn a_claim_at_repeatable_read_is_refused() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy(&[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    let a = tenant("tenant-a");
    let run = store
        .enqueue(&NewRun::new(a.clone(), b"a1".to_vec()))
        .await
        .unwrap()
        .run_id;
    let slots = reserved_slots(&store, &p, &[&a]).await;
    let mut client = db.client().await;
    for isolation in ["REPEATABLE READ", "SERIALIZABLE"] {
        let tx = client
            .build_transaction()
            .isolation_level(if isolation == "SERIALIZABLE" {
                tokio_postgres::IsolationLevel::Serializable
            } else {
                tokio_postgres::IsolationLevel::RepeatableRead
            })
            .start()
            .await
            .unwrap();
        let err = tx
            .query(
                "SELECT * FROM statek.claim_slots(ARRAY[$1::bigint], ARRAY['tenant-a'],
                     ARRAY[gen_random_uuid()], 30, 'primary-v1', 1)",
                &[&(slots[0].0 as i64)],
            )
            .await
            .unwrap_err();
        let db_error = err.as_db_error().unwrap();
        assert_eq!(
            (db_error.code().code(), db_error.message()),
            (
                "0A000",
                format!(
                    "statek: claims must run at read committed, not {}",
                    isolation.to_lowercase()
                )
                .as_str()
            )
        );
        tx.rollback().await.unwrap();
    }
    let state: String = client
        .query_one("SELECT state FROM statek.runs WHERE run_id = $1", &[&run])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "available");
    // At read committed the same slot claims the run.
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    assert_eq!(claimed(&claims[0]).lease.run_id(), run);
}
