//! Pruning reservation rows by database time, against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::SchedulerFairnessRetentionPolicy;
use uuid::Uuid;

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test]
async fn prunes_in_sequence_order_in_batches_and_keeps_the_cursor() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 2).unwrap()],
    )
    .unwrap();
    store.register(&p).await.unwrap();
    for _ in 0..10 {
        store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    // Back-date sequences 0..7 past a 1-day window, oldest = sequence 0.
    let client = db.client().await;
    client
        .batch_execute(
            "ALTER TABLE statek.scheduler_reservations DISABLE TRIGGER scheduler_reservations_immutable;
             UPDATE statek.scheduler_reservations
                SET reserved_at = now() - interval '2 days' - sequence * interval '1 minute'
              WHERE sequence < 7;
             ALTER TABLE statek.scheduler_reservations ENABLE TRIGGER scheduler_reservations_immutable;",
        )
        .await
        .unwrap();
    let retention = SchedulerFairnessRetentionPolicy::new(DAY, 3).unwrap();
    let mut deleted = Vec::new();
    loop {
        let report = store
            .prune_scheduler_fairness_reservations(&retention)
            .await
            .unwrap();
        assert!(report.cutoff < report.observed_at);
        assert_eq!(
            report.observed_at.duration_since(report.cutoff).unwrap(),
            DAY
        );
        let left: Vec<i64> = client
            .query(
                "SELECT sequence FROM statek.scheduler_reservations ORDER BY sequence",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        deleted.push((report.deleted, left));
        if report.deleted == 0 {
            break;
        }
    }
    // In sequence order, 3 per call, though sequence 6 is the oldest
    // back-dated row: a shard's retained rows never have a hole.
    assert_eq!(
        deleted,
        vec![
            (3, vec![3, 4, 5, 6, 7, 8, 9]),
            (3, vec![6, 7, 8, 9]),
            (1, vec![7, 8, 9]),
            (0, vec![7, 8, 9]),
        ]
    );
    let next = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((next.sequence(), next.slot()), (10, 0));
}

/// Inserts `count` reservations back-dated two days (sequence 0 newest),
/// advances the cursor past them, then reserves `fresh` new ones.
async fn seed(db: &TestDatabase, p: &WeightedFairnessPolicy, count: i64, fresh: usize) {
    let client = db.client().await;
    client
        .execute(
            "INSERT INTO statek.scheduler_reservations
                 (reservation_id, shard_id, sequence, slot, policy_digest, reserved_at)
             SELECT gen_random_uuid(), $1, s, (s % $3::bigint)::integer, $2,
                    now() - interval '2 days' - s * interval '1 millisecond'
             FROM generate_series(0::bigint, $4::bigint - 1) AS s",
            &[
                &p.shard_id().as_str(),
                &&p.digest().as_bytes()[..],
                &i64::from(p.cycle_length()),
                &count,
            ],
        )
        .await
        .unwrap();
    client
        .execute(
            "UPDATE statek.scheduler_shards SET next_sequence = $1",
            &[&count],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE statek.scheduler_reservations")
        .await
        .unwrap();
    let store = db.store();
    for _ in 0..fresh {
        store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
}

fn one_tenant_policy() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 3).unwrap(),
            TenantFairnessWeight::new(TenantId::try_from("tenant-b").unwrap(), 4).unwrap(),
        ],
    )
    .unwrap()
}

#[tokio::test]
async fn two_concurrent_pruners_delete_each_row_exactly_once() {
    let db = TestDatabase::create().await;
    let p = one_tenant_policy();
    db.store().register(&p).await.unwrap();
    seed(&db, &p, 10_000, 5).await;
    let retention = SchedulerFairnessRetentionPolicy::new(DAY, 500).unwrap();
    let pruner = |store: statek_store_pg::PgStore| async move {
        let (mut deleted, mut batches) = (0u64, 0u32);
        loop {
            let report = store
                .prune_scheduler_fairness_reservations(&retention)
                .await
                .unwrap();
            assert!(report.deleted <= 500);
            assert!(report.deleted + report.held_elsewhere <= 500, "{report:?}");
            deleted += report.deleted;
            batches += 1;
            if report.drained() {
                return (deleted, batches);
            }
            if report.blocked() {
                tokio::time::sleep(statek_store_pg::PruneReport::RETRY_PAUSE).await;
            }
        }
    };
    let (a, b) = tokio::join!(pruner(db.store()), pruner(db.store()));
    assert_eq!(a.0 + b.0, 10_000, "pruner a {a:?}, pruner b {b:?}");
    // Each pruner's last batch is drained (fewer than 500 deleted), so the
    // other batches delete more than 9,000 rows, 500 at most each: 19 or
    // more, and 21 in all at least. A pruner whose candidates were locked
    // or deleted by the other one in the same moment deletes a short batch,
    // so the count of batches is not fixed under concurrency.
    assert!(a.1 + b.1 >= 21, "pruner a {a:?}, pruner b {b:?}");
    let client = db.client().await;
    let left: Vec<i64> = client
        .query(
            "SELECT sequence FROM statek.scheduler_reservations ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, (10_000..10_005).collect::<Vec<i64>>());
    assert_eq!(
        db.store().next_sequence(p.shard_id()).await.unwrap(),
        10_005
    );
}

/// A batch that meets the oldest due row held by another transaction
/// deletes nothing of that shard and says so: it is `blocked`, not
/// `drained`, so a loop pauses and calls again instead of stopping with
/// rows due (two concurrent pruners splitting the locks of one batch once
/// both stopped this way, 9,972 rows left).
#[tokio::test]
async fn a_batch_behind_a_held_row_is_blocked_not_drained() {
    let db = TestDatabase::create().await;
    let p = one_tenant_policy();
    db.store().register(&p).await.unwrap();
    seed(&db, &p, 100, 0).await;
    let retention = SchedulerFairnessRetentionPolicy::new(DAY, 40).unwrap();
    let mut holder = db.client().await;
    let held = holder.transaction().await.unwrap();
    held.execute(
        "SELECT 1 FROM statek.scheduler_reservations WHERE sequence = 0 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let report = db
        .store()
        .prune_scheduler_fairness_reservations(&retention)
        .await
        .unwrap();
    assert_eq!(
        (report.deleted, report.held_elsewhere, report.batch_size),
        (0, 1, 40)
    );
    assert!(report.blocked() && !report.drained(), "{report:?}");
    held.rollback().await.unwrap();
    let mut deleted = Vec::new();
    loop {
        let report = db
            .store()
            .prune_scheduler_fairness_reservations(&retention)
            .await
            .unwrap();
        assert_eq!(report.held_elsewhere, 0);
        assert!(!report.blocked());
        deleted.push(report.deleted);
        if report.drained() {
            break;
        }
    }
    assert_eq!(deleted, vec![40, 40, 20]);
}

#[tokio::test]
async fn the_prune_candidates_come_from_the_shard_sequence_key() {
    let db = TestDatabase::create().await;
    let p = one_tenant_policy();
    db.store().register(&p).await.unwrap();
    seed(&db, &p, 10_000, 0).await;
    let client = db.client().await;
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN {}", statek_store_pg::testing::PRUNE_BATCH_SQL),
            &[&DAY.as_secs_f64(), &500i64],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using scheduler_reservations_shard_sequence_key"),
        "{plan}"
    );
    assert!(
        !plan.contains("Seq Scan on scheduler_reservations"),
        "{plan}"
    );
}

/// One reservation inside the caller's open transaction, as the store
/// sends it: the sequence and `reserved_at` (the transaction's start).
async fn reserve_in_open_transaction(
    client: &tokio_postgres::Client,
    p: &WeightedFairnessPolicy,
) -> (i64, std::time::SystemTime) {
    let row = client
        .query_one(
            "SELECT sequence, reserved_at
             FROM statek.reserve($1, $2, $3, statek.server_timeline(), NULL)",
            &[
                &Uuid::now_v7(),
                &p.shard_id().as_str(),
                &&p.digest().as_bytes()[..],
            ],
        )
        .await
        .unwrap();
    (row.get("sequence"), row.get("reserved_at"))
}

#[tokio::test]
async fn a_prune_between_swapped_reservation_times_leaves_no_hole() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = one_tenant_policy();
    store.register(&p).await.unwrap();
    for _ in 0..2 {
        store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    // Two concurrent reservation transactions: A starts first, B two
    // seconds later; B reserves and commits first (sequence 2, the later
    // start), then A (sequence 3, the earlier start).
    let a = db.client().await;
    let b = db.client().await;
    a.batch_execute("BEGIN").await.unwrap();
    a.query_one("SELECT now()", &[]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.batch_execute("BEGIN").await.unwrap();
    let (b_sequence, b_at) = reserve_in_open_transaction(&b, &p).await;
    b.batch_execute("COMMIT").await.unwrap();
    let (a_sequence, a_at) = reserve_in_open_transaction(&a, &p).await;
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!((b_sequence, a_sequence), (2, 3));
    assert!(a_at < b_at, "A {a_at:?}, B {b_at:?}");
    store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    // Every row moved back by the same amount, so that a one-day cutoff
    // taken within a second from now falls between A's and B's times.
    let client = db.client().await;
    let immutable = "TRIGGER scheduler_reservations_immutable";
    client
        .batch_execute(&format!(
            "ALTER TABLE statek.scheduler_reservations DISABLE {immutable}"
        ))
        .await
        .unwrap();
    let moved: Vec<(i64, std::time::SystemTime)> = client
        .query(
            "UPDATE statek.scheduler_reservations
                SET reserved_at = reserved_at - interval '1 day' + interval '1 second'
                    - ((SELECT reserved_at FROM statek.scheduler_reservations
                        WHERE sequence = 2) - now())
              RETURNING sequence, reserved_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("sequence"), r.get("reserved_at")))
        .collect();
    client
        .batch_execute(&format!(
            "ALTER TABLE statek.scheduler_reservations ENABLE {immutable}"
        ))
        .await
        .unwrap();
    let at = |sequence: i64| moved.iter().find(|(s, _)| *s == sequence).unwrap().1;
    let report = store
        .prune_scheduler_fairness_reservations(
            SchedulerFairnessRetentionPolicy::new(DAY, 100).unwrap(),
        )
        .await
        .unwrap();
    // The arrangement held: A's row (3) was due, B's (2) was not.
    assert!(
        at(3) < report.cutoff && report.cutoff <= at(2),
        "cutoff {:?}, rows {moved:?}",
        report.cutoff
    );
    // Only the unbroken prefix 0, 1 went; A's row waits behind B's.
    let left: Vec<i64> = client
        .query(
            "SELECT sequence FROM statek.scheduler_reservations ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("sequence"))
        .collect();
    assert_eq!((report.deleted, left), (2, vec![2, 3, 4]));
    let read: Vec<u64> = store
        .reservations(p.shard_id(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(read, vec![2, 3, 4]);
}

#[tokio::test]
async fn a_prune_stops_at_a_due_row_it_cannot_lock() {
    let db = TestDatabase::create().await;
    let p = one_tenant_policy();
    db.store().register(&p).await.unwrap();
    seed(&db, &p, 6, 0).await;
    let retention = SchedulerFairnessRetentionPolicy::new(DAY, 100).unwrap();
    // Another session (a pruner whose batch has not committed) holds
    // sequence 2: this prune deletes 0 and 1 and nothing past 2.
    let holder = db.client().await;
    holder
        .batch_execute(
            "BEGIN;
             SELECT 1 FROM statek.scheduler_reservations WHERE sequence = 2 FOR UPDATE;",
        )
        .await
        .unwrap();
    let store = db.store();
    let report = store
        .prune_scheduler_fairness_reservations(retention)
        .await
        .unwrap();
    let client = db.client().await;
    assert_eq!(
        (report.deleted, sequences(&client).await),
        (2, vec![2, 3, 4, 5])
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    let report = store
        .prune_scheduler_fairness_reservations(retention)
        .await
        .unwrap();
    assert_eq!((report.deleted, sequences(&client).await), (4, vec![]));
}

async fn sequences(client: &tokio_postgres::Client) -> Vec<i64> {
    client
        .query(
            "SELECT sequence FROM statek.scheduler_reservations ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("sequence"))
        .collect()
}
