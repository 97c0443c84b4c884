//! Tenant controls after the fair order (issue 14), against a real
//! PostgreSQL: concurrency caps and rate limits inside the claim, run
//! priority, enqueue in the caller's transaction and in bulk.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use statek_store_pg::RunQueueError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use statek_policy::{SchedulerShardId, TenantId, WeightedFairnessPolicy};
use statek_store_pg::input_limits::{MAX_CLAIM_SLOTS, MAX_RUNNING_LIMIT};
use statek_store_pg::testing::{reserve_next_slots, reserved_slots, TestDatabase};
use statek_store_pg::{
    ClaimOutcome, NewRun, PgStore, RateLimit, SlotClaim, SlotClaimRequest, StoreError, TenantLimits,
};

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// The policy of [`shard`] with these tenants and weights (register it
/// before reserving: a claim names only reserved slots of its cycle's
/// tenants).
fn policy(weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", weights)
}

const LEASE: Duration = Duration::from_secs(60);

fn cap(n: u32) -> TenantLimits {
    TenantLimits::new(Some(n), None).unwrap()
}

async fn enqueue_n(store: &PgStore, tenant: &TenantId, n: usize) {
    let runs: Vec<NewRun> = (0..n)
        .map(|i| NewRun::new(tenant.clone(), i.to_string().into_bytes()))
        .collect();
    store.enqueue_many(&runs).await.unwrap();
}

/// Distinct slots for claimers that share a shard: the next reserved
/// slots of `tenants` (in this order), reserved by one claimer at a time
/// (`one_at_a_time`), so that no two claimers get the same slot.
async fn next_slots(
    one_at_a_time: &tokio::sync::Mutex<()>,
    store: &PgStore,
    policy: &WeightedFairnessPolicy,
    tenants: &[&TenantId],
) -> Vec<(u64, TenantId)> {
    let _reserving = one_at_a_time.lock().await;
    reserved_slots(store, policy, tenants).await
}

/// Claims `slots` as a Worker does: a retryable error sends the same
/// request again (which answers from the claim history when the first send
/// committed). Eight claimers of one limited tenant queue on its limits
/// row, and on a loaded 2-core machine the last of them can wait past the
/// store's 5 s `lock_timeout` (55P03): a fresh-clone CI run at 4295201
/// failed so when this test unwrapped the first answer. Returns the claims
/// and whether any were recovered from a resend: a recovered slot without
/// a run is reported `Contended`, whatever it was.
async fn claim_as_a_worker(
    store: &PgStore,
    slots: &[(u64, TenantId)],
    shard: &SchedulerShardId,
) -> (Vec<SlotClaim>, bool) {
    let request = SlotClaimRequest::new(shard, slots, LEASE, slots.len()).unwrap();
    let mut resends = 0;
    loop {
        match store.claim_slots(&request).await {
            Ok(claims) => return (claims, resends > 0),
            Err(e) if e.is_retryable() && resends < 10 => {
                eprintln!("claim sent again after: {e:?}");
                resends += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("a claim failed after {resends} resends: {e:?}"),
        }
    }
}

/// The largest number of a tenant's claims whose [claimed_at, finished_at]
/// intervals overlap at one instant, from the claim history.
async fn max_overlap(client: &tokio_postgres::Client, tenant: &str) -> usize {
    let rows = client
        .query(
            "SELECT claimed_at, finished_at FROM statek.run_attempts WHERE tenant_id = $1",
            &[&tenant],
        )
        .await
        .unwrap();
    // +1 at a claim, -1 at a finish; at equal instants finishes first.
    let mut events: Vec<(SystemTime, i32)> = Vec::new();
    for row in &rows {
        events.push((row.get("claimed_at"), 1));
        let finished: Option<SystemTime> = row.get("finished_at");
        events.push((finished.expect("every claim finished"), -1));
    }
    events.sort();
    let (mut now, mut max) = (0_i32, 0_i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    usize::try_from(max).unwrap()
}

#[tokio::test]
async fn a_cap_of_two_holds_across_eight_concurrent_claimers_and_other_tenants_are_unaffected() {
    let db = TestDatabase::create().await;
    let owner = db.store();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let p = policy(&[("tenant-a", 2), ("tenant-b", 1)]);
    owner.register(&p).await.unwrap();
    owner.set_tenant_limits(&a, &cap(2)).await.unwrap();
    enqueue_n(&owner, &a, 50).await;
    enqueue_n(&owner, &b, 50).await;
    // 8 claimers over 4 stores (4 pools, as 4 replicas would have).
    let stores: Vec<PgStore> = (0..4).map(|_| db.store()).collect();
    let reserving = Arc::new(tokio::sync::Mutex::new(()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let client = db.client().await;
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut max = 0_i64;
            while !done.load(Ordering::SeqCst) {
                let leased: i64 = client
                    .query_one(
                        "SELECT count(*) FROM statek.runs WHERE tenant_id = 'tenant-a'
                         AND state = 'running' AND lease_expires_at > clock_timestamp()",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                max = max.max(leased);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            max
        })
    };
    let mut claimers = Vec::new();
    for i in 0..8 {
        let store = stores[i % 4].clone();
        let (a, b, p) = (a.clone(), b.clone(), p.clone());
        let reserving = Arc::clone(&reserving);
        claimers.push(tokio::spawn(async move {
            let (mut limited_a, mut limited_b, mut ran) = (0_u64, 0_u64, 0_u64);
            let mut empty_rounds = 0;
            while empty_rounds < 20 {
                // Two slots of a, one of b.
                let slots = next_slots(&reserving, &store, &p, &[&a, &a, &b]).await;
                let (claims, _) = claim_as_a_worker(&store, &slots, p.shard_id()).await;
                let mut any = false;
                for (claim, (_, t)) in claims.iter().zip(&slots) {
                    match claim {
                        SlotClaim::Claimed(run) => {
                            any = true;
                            tokio::time::sleep(Duration::from_millis(3)).await;
                            store.complete_run(&run.lease).await.unwrap();
                            ran += 1;
                        }
                        SlotClaim::Limited if *t == a => limited_a += 1,
                        SlotClaim::Limited => limited_b += 1,
                        _ => {}
                    }
                }
                empty_rounds = if any { 0 } else { empty_rounds + 1 };
            }
            (limited_a, limited_b, ran)
        }));
    }
    let (mut limited_a, mut limited_b, mut ran) = (0, 0, 0);
    for c in claimers {
        let (la, lb, r) = c.await.unwrap();
        limited_a += la;
        limited_b += lb;
        ran += r;
    }
    done.store(true, Ordering::SeqCst);
    let sampled_max = sampler.await.unwrap();
    let client = db.client().await;
    assert_eq!(ran, 100, "every run of both tenants ran once");
    assert!(
        sampled_max <= 2,
        "sampled {sampled_max} leased runs of tenant-a"
    );
    assert_eq!(max_overlap(&client, "tenant-a").await, 2);
    assert!(
        limited_a > 0,
        "slots of tenant-a beyond its cap are limited"
    );
    assert_eq!(limited_b, 0, "tenant-b has no limits");
    let completed: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE state = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(completed, 100);
}

#[tokio::test]
async fn a_rate_of_ten_per_second_holds_in_every_sliding_second_over_ten_seconds() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let p = policy(&[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    let rate: RateLimit = "10/s".parse().unwrap();
    store
        .set_tenant_limits(&a, &TenantLimits::new(None, Some(rate)).unwrap())
        .await
        .unwrap();
    enqueue_n(&store, &a, 400).await;
    let reserving = Arc::new(tokio::sync::Mutex::new(()));
    // Eight stores, each connected before the 10 s start.
    let mut stores = Vec::new();
    for _ in 0..8 {
        let store = db.store();
        store.count_live_runs().await.unwrap();
        stores.push(store);
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut claimers = Vec::new();
    for store in stores {
        let (a, p) = (a.clone(), p.clone());
        let reserving = Arc::clone(&reserving);
        claimers.push(tokio::spawn(async move {
            let mut limited = 0_u64;
            while tokio::time::Instant::now() < until {
                let slots = next_slots(&reserving, &store, &p, &[&a, &a]).await;
                let (claims, resent) = claim_as_a_worker(&store, &slots, p.shard_id()).await;
                for claim in claims {
                    match claim {
                        SlotClaim::Claimed(run) => store.complete_run(&run.lease).await.unwrap(),
                        SlotClaim::Limited => limited += 1,
                        SlotClaim::Contended if resent => {}
                        other => panic!("tenant-a has runs left: {other:?}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            limited
        }));
    }
    let mut limited = 0;
    for c in claimers {
        limited += c.await.unwrap();
    }
    let claimed: Vec<SystemTime> = db
        .client()
        .await
        .query(
            "SELECT claimed_at FROM statek.run_attempts WHERE tenant_id = 'tenant-a' ORDER BY claimed_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // No window [t, t + 1 s) holds 11 claims: the 11th claim after any
    // claim is at least 1 s later.
    for pair in claimed.windows(11) {
        let span = pair[10].duration_since(pair[0]).unwrap();
        assert!(span >= Duration::from_secs(1), "11 claims within {span:?}");
    }
    // 10 s of claiming at 10/s: at most 10 per second plus one window. At
    // least half of that: eight claimers each try every few milliseconds,
    // so only a machine stalled for seconds leaves the limit unused.
    assert!(
        (50..=110).contains(&claimed.len()),
        "{} claims",
        claimed.len()
    );
    assert!(limited > 0);
}

#[tokio::test]
async fn a_single_claim_is_limited_by_a_cap_and_limits_apply_from_the_next_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let p = policy(&[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    enqueue_n(&store, &a, 10).await;
    store.set_tenant_limits(&a, &cap(1)).await.unwrap();
    let first = match store.claim_run(&a, LEASE).await.unwrap() {
        ClaimOutcome::Claimed(run) => run,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Limited
    );
    assert!(!store
        .any_claimable_runs(std::slice::from_ref(&a))
        .await
        .unwrap());
    // Raised to 3: the next claim for 3 slots gets 2 runs, the third slot
    // is limited.
    store.set_tenant_limits(&a, &cap(3)).await.unwrap();
    assert!(store
        .any_claimable_runs(std::slice::from_ref(&a))
        .await
        .unwrap());
    let slots = reserved_slots(&store, &p, &[&a, &a, &a]).await;
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    let kinds: Vec<&str> = claims
        .iter()
        .map(|c| match c {
            SlotClaim::Claimed(_) => "claimed",
            SlotClaim::Limited => "limited",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["claimed", "claimed", "limited"]);
    // Completing the first frees one place.
    store.complete_run(&first.lease).await.unwrap();
    assert!(matches!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    // Cleared: no limit at all.
    assert!(store.clear_tenant_limits(&a).await.unwrap());
    assert!(!store.clear_tenant_limits(&a).await.unwrap());
    let slots = reserved_slots(&store, &p, &[&a; 6]).await;
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap();
    let claimed = claims
        .iter()
        .filter(|c| matches!(c, SlotClaim::Claimed(_)))
        .count();
    assert_eq!(claimed, 6);
    // A capped tenant without claimable runs is idle, not limited.
    let idle = tenant("tenant-idle");
    store.set_tenant_limits(&idle, &cap(1)).await.unwrap();
    assert_eq!(
        store.claim_run(&idle, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
}

#[tokio::test]
async fn limits_are_read_back_exactly_and_bad_values_are_typed_errors() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    assert_eq!(store.tenant_limits(&a).await.unwrap(), None);
    let limits = TenantLimits::new(Some(7), Some("100/m".parse().unwrap())).unwrap();
    let stored = store.set_tenant_limits(&a, &limits).await.unwrap();
    assert_eq!(stored.limits, limits);
    assert_eq!(
        store.tenant_limits(&a).await.unwrap().unwrap().limits,
        limits
    );
    // Set again: exactly the new limits (the rate is gone).
    let stored = store.set_tenant_limits(&a, &cap(3)).await.unwrap();
    assert_eq!(stored.limits.max_running(), Some(3));
    assert_eq!(stored.limits.rate(), None);
    assert_eq!(store.all_tenant_limits().await.unwrap().len(), 1);

    let invalid = |r: Result<TenantLimits, StoreError>| {
        assert!(
            matches!(
                r,
                Err(StoreError::RunQueue(RunQueueError::InvalidLimit { .. }))
            ),
            "{r:?}"
        )
    };
    invalid(TenantLimits::new(Some(0), None));
    invalid(TenantLimits::new(Some(MAX_RUNNING_LIMIT + 1), None));
    invalid(TenantLimits::new(Some(u32::MAX), None));
    invalid(TenantLimits::new(None, None));
    for bad in ["0/s", "-1/s", "10/0s", "1000001/s", "10/2h", "ten/s", "10"] {
        let parsed = bad.parse::<RateLimit>();
        assert!(
            matches!(
                parsed,
                Err(StoreError::RunQueue(RunQueueError::InvalidLimit { .. }))
            ),
            "{bad}: {parsed:?}"
        );
        assert_eq!(
            parsed.unwrap_err().to_string(),
            parsed_message(bad),
            "{bad}"
        );
    }
    // An invalid tenant id never becomes a TenantId.
    for bad in ["", "..", "tenant a", "tenant/a"] {
        assert!(TenantId::try_from(bad).is_err(), "{bad:?}");
    }
    // The database refuses out-of-range rows whoever writes them.
    let client = db.client().await;
    for sql in [
        "INSERT INTO statek.tenant_limits (tenant_id, max_running) VALUES ('t', 0)",
        "INSERT INTO statek.tenant_limits (tenant_id, rate_limit) VALUES ('t', 5)",
        "INSERT INTO statek.tenant_limits (tenant_id) VALUES ('t')",
        "INSERT INTO statek.tenant_limits (tenant_id, max_running) VALUES ('a b', 1)",
    ] {
        let e = client.execute(sql, &[]).await.unwrap_err();
        assert_eq!(e.code().unwrap().code(), "23514", "{sql}");
    }
}

fn parsed_message(bad: &str) -> String {
    match bad {
        "0/s" => "invalid tenant limit: a rate must allow 1..=1000000 claims, got 0".into(),
        "-1/s" => "invalid tenant limit: a rate must allow 1..=1000000 claims, got -1".into(),
        "1000001/s" => {
            "invalid tenant limit: a rate must allow 1..=1000000 claims, got 1000001".into()
        }
        "10/0s" => "invalid tenant limit: a rate window must be whole milliseconds, 1 ms..=1 h, got 0ns".into(),
        "10/2h" => "invalid tenant limit: a rate window must be whole milliseconds, 1 ms..=1 h, got 7200s".into(),
        other => format!(
            "invalid tenant limit: rate {other:?}: expected CLAIMS/WINDOW such as 10/s, 100/m, 5000/h, 5/10s or 1/250ms"
        ),
    }
}

#[tokio::test]
async fn five_priorities_are_claimed_highest_first_fifo_within_and_never_across_tenants() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let p = policy(&[("tenant-a", 1), ("tenant-b", 1)]);
    store.register(&p).await.unwrap();
    // (priority, label) in the order enqueued.
    let order = [
        (0, "p0-1"),
        (-50, "m50-1"),
        (100, "p100-1"),
        (7, "p7-1"),
        (0, "p0-2"),
        (-100, "m100-1"),
        (100, "p100-2"),
        (-50, "m50-2"),
        (7, "p7-2"),
        (-100, "m100-2"),
    ];
    for (priority, label) in order {
        store
            .enqueue(&NewRun::new(a.clone(), label).priority(priority))
            .await
            .unwrap();
    }
    // Another tenant's highest priority, enqueued last.
    store
        .enqueue(&NewRun::new(b.clone(), "b-high").priority(100))
        .await
        .unwrap();
    let mut claimed = Vec::new();
    // Four slots of tenant-a, then six single claims.
    let slots = reserved_slots(&store, &p, &[&a, &a, &a, &a]).await;
    for claim in store
        .claim_runs_for_slots(&slots, p.shard_id(), LEASE)
        .await
        .unwrap()
    {
        match claim {
            SlotClaim::Claimed(run) => claimed.push(String::from_utf8(run.payload).unwrap()),
            other => panic!("{other:?}"),
        }
    }
    for _ in 0..6 {
        match store.claim_run(&a, LEASE).await.unwrap() {
            ClaimOutcome::Claimed(run) => claimed.push(String::from_utf8(run.payload).unwrap()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        claimed,
        [
            "p100-1", "p100-2", "p7-1", "p7-2", "p0-1", "p0-2", "m50-1", "m50-2", "m100-1",
            "m100-2"
        ]
    );
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    // tenant-b's run is still there, for tenant-b's slot only.
    match store.claim_run(&b, LEASE).await.unwrap() {
        ClaimOutcome::Claimed(run) => assert_eq!(run.payload, b"b-high"),
        other => panic!("{other:?}"),
    }
    for bad in [101, -101, i32::MAX, i32::MIN] {
        let r = store
            .enqueue(&NewRun::new(a.clone(), "x").priority(bad))
            .await;
        assert!(
            matches!(r, Err(StoreError::RunQueue(RunQueueError::InvalidPriority { priority, .. })) if priority == bad),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn an_enqueue_in_the_callers_transaction_rolls_back_with_it_and_notifies_only_after_commit() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let mut notifications = store.listen_for_runs().await.unwrap();
    let mut client = db.client().await;

    // Rolled back: nothing stays, nothing is notified.
    let tx = client.transaction().await.unwrap();
    let rolled_back = PgStore::enqueue_in(&tx, &NewRun::new(a.clone(), "gone"))
        .await
        .unwrap();
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    tx.rollback().await.unwrap();
    assert_eq!(store.run(rolled_back.run_id).await.unwrap(), None);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), notifications.recv())
            .await
            .is_err(),
        "a rolled-back enqueue notifies nobody"
    );

    // Committed: invisible and silent until the commit, then both.
    let tx = client.transaction().await.unwrap();
    let kept = PgStore::enqueue_in(&tx, &NewRun::new(a.clone(), "kept"))
        .await
        .unwrap();
    assert!(!kept.deduplicated);
    assert_eq!(
        store.claim_run(&a, LEASE).await.unwrap(),
        ClaimOutcome::Idle
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), notifications.recv())
            .await
            .is_err(),
        "no notification before the commit"
    );
    tx.commit().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), notifications.recv())
        .await
        .expect("notified at commit")
        .unwrap()
        .unwrap();
    assert_eq!(woken, a);
    match store.claim_run(&a, LEASE).await.unwrap() {
        ClaimOutcome::Claimed(run) => assert_eq!(run.lease.run_id(), kept.run_id),
        other => panic!("{other:?}"),
    }

    // A bulk enqueue in a transaction: idempotency keys inside one call
    // and against an existing run.
    store
        .enqueue(&NewRun::new(a.clone(), "k1").idempotency_key("key-1"))
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let runs = [
        NewRun::new(a.clone(), "k1").idempotency_key("key-1"),
        NewRun::new(a.clone(), "k2").idempotency_key("key-2"),
        NewRun::new(a.clone(), "k2").idempotency_key("key-2"),
        NewRun::new(a.clone(), "plain"),
    ];
    let out = PgStore::enqueue_many_in(&tx, &runs).await.unwrap();
    tx.commit().await.unwrap();
    let dedup: Vec<bool> = out.iter().map(|r| r.deduplicated).collect();
    assert_eq!(dedup, [true, false, true, false]);
    assert_eq!(out[1].run_id, out[2].run_id);
    let conflict = store
        .enqueue_many(&[NewRun::new(a.clone(), "other").idempotency_key("key-1")])
        .await;
    assert!(
        matches!(
            conflict,
            Err(StoreError::RunQueue(
                RunQueueError::IdempotencyConflict { .. }
            ))
        ),
        "{conflict:?}"
    );
}

#[tokio::test]
async fn a_bulk_enqueue_of_100000_runs_is_one_notification_and_is_claimed_in_fifo_order() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = tenant("tenant-a");
    let p = policy(&[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    let mut notifications = store.listen_for_runs().await.unwrap();
    let runs: Vec<NewRun> = (0..100_000_u32)
        .map(|i| NewRun::new(a.clone(), i.to_be_bytes().to_vec()))
        .collect();
    let enqueued = store.enqueue_many(&runs).await.unwrap();
    assert_eq!(enqueued.len(), 100_000);
    let first = tokio::time::timeout(Duration::from_secs(5), notifications.recv())
        .await
        .expect("one notification")
        .unwrap()
        .unwrap();
    assert_eq!(first, a);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), notifications.recv())
            .await
            .is_err(),
        "only one notification for the whole statement"
    );
    // FIFO over the whole batch: the claim's order key (priority, then
    // availability, then queue position: `statek.claim_slots`' ORDER BY)
    // follows the enqueue order for all 100,000 runs...
    let client = db.client().await;
    let out_of_order: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT payload, lag(payload) OVER (
                     ORDER BY priority DESC, available_at, queue_seq) AS previous
                 FROM statek.runs WHERE tenant_id = 'tenant-a') AS ordered
             WHERE previous IS NULL OR previous >= payload",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(out_of_order, 1, "only the first run has no predecessor");
    // ...and the claims follow that key: the first CLAIMED runs, claimed
    // through the claim function, come out in enqueue order. (Claiming
    // all 100,000 took 53 s alone and over 100 s beside the other tests
    // on 2 cores, the long pole of this binary.)
    const CLAIMED: u32 = 3 * MAX_CLAIM_SLOTS as u32;
    let lease = Duration::from_secs(3600);
    let mut next = 0_u32;
    while next < CLAIMED {
        // The next MAX_CLAIM_SLOTS slots, all of tenant-a's (the policy's
        // only tenant).
        let slots = reserve_next_slots(&store, &p, MAX_CLAIM_SLOTS as u64).await;
        assert!(slots.iter().all(|(_, t)| *t == a));
        for claim in store
            .claim_runs_for_slots(&slots, p.shard_id(), lease)
            .await
            .unwrap()
        {
            match claim {
                SlotClaim::Claimed(run) => {
                    assert_eq!(run.payload, next.to_be_bytes(), "FIFO");
                    assert_eq!(run.lease.run_id(), enqueued[next as usize].run_id);
                    next += 1;
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(next, CLAIMED, "claimed in whole claim batches");
    let available: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.runs WHERE tenant_id = 'tenant-a' AND state = 'available'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(available, i64::from(100_000 - CLAIMED));
    let too_many: Vec<NewRun> = (0..100_001)
        .map(|_| NewRun::new(a.clone(), Vec::new()))
        .collect();
    assert!(matches!(
        store.enqueue_many(&too_many).await,
        Err(StoreError::RunQueue(RunQueueError::EnqueueBatchTooLarge {
            runs: 100_001,
            ..
        }))
    ));
}

/// `limits set` of the cap and of the rate at the same moment, for many
/// tenants: both limits hold for every tenant (merged in one statement,
/// not read in Rust and written back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_merges_of_different_limits_both_hold() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let rate: RateLimit = "10/s".parse().unwrap();
    for round in 0..20 {
        let t = tenant(&format!("race-{round}"));
        let (a, b) = tokio::join!(
            store.merge_tenant_limits(&t, Some(5), None),
            store.merge_tenant_limits(&t, None, Some(rate))
        );
        a.unwrap();
        b.unwrap();
        let stored = store.tenant_limits(&t).await.unwrap().unwrap().limits;
        assert_eq!(
            (stored.max_running(), stored.rate()),
            (Some(5), Some(rate)),
            "{t}"
        );
    }
    // A merge replaces only what it names.
    let t = tenant("race-0");
    let other: RateLimit = "3/m".parse().unwrap();
    let merged = store
        .merge_tenant_limits(&t, None, Some(other))
        .await
        .unwrap();
    assert_eq!(
        (merged.limits.max_running(), merged.limits.rate()),
        (Some(5), Some(other))
    );
    assert!(matches!(
        store.merge_tenant_limits(&t, None, None).await,
        Err(StoreError::RunQueue(RunQueueError::InvalidLimit { .. }))
    ));
}
