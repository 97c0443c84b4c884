//! Registration and reservation against a real PostgreSQL (16 and 17 via
//! `cargo xtask test`). Each test gets its own database.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::{ReservationError, RolloutError};
use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;
use statek_core::Registration;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{policy, TestDatabase};
use statek_store_pg::{PgStore, StoreError};
use uuid::Uuid;

async fn stored_row(db: &TestDatabase, shard: &str) -> (Vec<u8>, Vec<u8>, i32, i64) {
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT policy_bytes, policy_digest, cycle_length, next_sequence
             FROM statek.scheduler_shards WHERE shard_id = $1",
            &[&shard],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[tokio::test]
async fn register_is_idempotent_and_never_overwrites() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);

    let first = store.register(&p).await.unwrap();
    assert!(
        matches!(first, Registration::Registered { .. }),
        "{first:?}"
    );
    let second = store.register(&p).await.unwrap();
    assert_eq!(
        second,
        Registration::Idempotent {
            registered_at: first.registered_at()
        }
    );
    // Input order does not matter: same canonical bytes.
    let reordered = policy("primary-v1", &[("tenant-b", 1), ("tenant-a", 3)]);
    assert!(matches!(
        store.register(&reordered).await.unwrap(),
        Registration::Idempotent { .. }
    ));

    let before = stored_row(&db, "primary-v1").await;
    let changed = policy("primary-v1", &[("tenant-a", 2), ("tenant-b", 1)]);
    match store.register(&changed).await {
        Err(StoreError::Rollout(RolloutError::PolicyConflict {
            shard,
            stored,
            offered,
        })) => {
            assert_eq!(shard.as_str(), "primary-v1");
            assert_eq!(stored, p.digest());
            assert_eq!(offered, changed.digest());
        }
        other => panic!("expected PolicyConflict, got {other:?}"),
    }
    assert_eq!(stored_row(&db, "primary-v1").await, before);
    assert_eq!(before.0, p.canonical_bytes());
    assert_eq!(before.1, p.digest().as_bytes().to_vec());
    assert_eq!(before.2, 4);
    assert_eq!(before.3, 0);

    let loaded = store
        .load_shard(&SchedulerShardId::try_from("primary-v1").unwrap())
        .await
        .unwrap();
    assert_eq!(loaded.policy(), &p);
    assert_eq!(loaded.next_sequence(), 0);
}

#[tokio::test]
async fn reserve_replays_the_original_reservation() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let other = policy("other-v1", &[("tenant-a", 1)]);
    store.register(&p).await.unwrap();
    store.register(&other).await.unwrap();

    let x = Uuid::now_v7();
    let first = store.reserve(p.shard_id(), &p.digest(), x).await.unwrap();
    assert_eq!(
        (first.sequence(), first.slot(), first.replayed()),
        (0, 0, false)
    );
    let again = store.reserve(p.shard_id(), &p.digest(), x).await.unwrap();
    assert_eq!(again.sequence(), 0);
    assert_eq!(again.slot(), 0);
    assert_eq!(again.reserved_at(), first.reserved_at());
    assert!(again.replayed());

    // The same id on another shard is a conflict, and writes nothing.
    match store.reserve(other.shard_id(), &other.digest(), x).await {
        Err(StoreError::Reservation(ReservationError::ReservationConflict { reservation_id })) => {
            assert_eq!(reservation_id, x)
        }
        r => panic!("expected ReservationConflict, got {r:?}"),
    }
    assert_eq!(stored_row(&db, "other-v1").await.3, 0);
    assert_eq!(stored_row(&db, "primary-v1").await.3, 1);

    // Wrong digest for the shard.
    assert!(matches!(
        store
            .reserve(p.shard_id(), &other.digest(), Uuid::now_v7())
            .await,
        Err(StoreError::Rollout(
            RolloutError::PolicyDigestMismatch { .. }
        ))
    ));
    // Unknown shard, and a non-v7 id.
    let missing = SchedulerShardId::try_from("missing-v1").unwrap();
    assert!(matches!(
        store.reserve(&missing, &p.digest(), Uuid::now_v7()).await,
        Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
    ));
    assert!(matches!(
        store
            .reserve(p.shard_id(), &p.digest(), Uuid::from_u128(42))
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(stored_row(&db, "primary-v1").await.3, 1);
}

#[tokio::test]
async fn concurrent_reservations_form_one_contiguous_sequence() {
    let db = TestDatabase::create().await;
    // 200 calls queue for 16 connections and one shard row: the last ones
    // wait for all before them, far longer than the default 5 s pool wait
    // and lock wait on a loaded machine.
    let store = PgStore::new(
        db.store_config()
            .pool_size(16)
            .unwrap()
            .wait_timeout(Duration::from_secs(60))
            .unwrap()
            .lock_timeout(Duration::from_secs(60))
            .unwrap()
            .statement_timeout(Duration::from_secs(60))
            .unwrap(),
    )
    .unwrap();
    let p = policy(
        "primary-v1",
        &[("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 3)],
    );
    store.register(&p).await.unwrap();
    let digest = p.digest();

    // 32 concurrent calls with one new id: one sequence for all.
    let x = Uuid::now_v7();
    let same = join_all((0..32).map(|_| store.reserve(p.shard_id(), &digest, x))).await;
    let same: Vec<_> = same.into_iter().map(|r| r.unwrap()).collect();
    assert!(same.iter().all(|r| r.sequence() == 0 && r.slot() == 0));
    assert_eq!(same.iter().filter(|r| !r.replayed()).count(), 1);

    // 200 concurrent unique ids: exactly 1..=200.
    let unique =
        join_all((0..200).map(|_| store.reserve(p.shard_id(), &digest, Uuid::now_v7()))).await;
    let unique: Vec<_> = unique.into_iter().map(|r| r.unwrap()).collect();
    let sequences: BTreeSet<u64> = unique.iter().map(|r| r.sequence()).collect();
    assert_eq!(sequences, (1..=200).collect::<BTreeSet<u64>>());
    for r in &unique {
        assert_eq!(u64::from(r.slot()), r.sequence() % 7, "{r:?}");
    }
    let stored = store.reservations(p.shard_id(), 0, 1000).await.unwrap();
    assert_eq!(stored.len(), 201);
    assert_eq!(
        stored.iter().map(|r| r.sequence()).collect::<Vec<_>>(),
        (0..=200).collect::<Vec<u64>>()
    );
    assert_eq!(stored_row(&db, "primary-v1").await.3, 201);
}

#[tokio::test]
async fn concurrent_migrations_on_an_empty_database_all_succeed() {
    let db = TestDatabase::create_empty().await;
    let stores: Vec<PgStore> = (0..4).map(|_| db.store()).collect();
    let results = join_all(stores.iter().map(|s| s.migrate())).await;
    let mut applied = 0;
    for r in results {
        applied += r.unwrap().applied().len();
    }
    // Each migration was applied exactly once, by one of the four.
    assert_eq!(applied, statek_store_pg::embedded_migrations().len());
    assert_eq!(db.store().migrate().await.unwrap().applied().len(), 0);
}

#[tokio::test]
async fn a_shard_registered_under_one_algorithm_refuses_the_other() {
    use statek_policy::PolicyAlgorithm;
    let db = TestDatabase::create().await;
    let store = db.store();
    let weights = || {
        [("tenant-a", 3), ("tenant-b", 2), ("tenant-c", 1)]
            .map(|(t, w)| TenantFairnessWeight::new(TenantId::try_from(t).unwrap(), w).unwrap())
    };
    let shard = SchedulerShardId::try_from("primary-v1").unwrap();
    let swrr = WeightedFairnessPolicy::new(shard.clone(), weights()).unwrap();
    let min_gap =
        WeightedFairnessPolicy::with_algorithm(shard, PolicyAlgorithm::MinGapV1, weights())
            .unwrap();
    store.register(&swrr).await.unwrap();
    assert!(matches!(
        store.register(&min_gap).await,
        Err(StoreError::Rollout(RolloutError::PolicyConflict { .. }))
    ));
    assert!(matches!(
        store
            .reserve(min_gap.shard_id(), &min_gap.digest(), Uuid::now_v7())
            .await,
        Err(StoreError::Rollout(
            RolloutError::PolicyDigestMismatch { .. }
        ))
    ));
    // A new shard takes the other algorithm, and reads back exactly.
    let next = WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from("primary-v2").unwrap(),
        PolicyAlgorithm::MinGapV1,
        weights(),
    )
    .unwrap();
    store.register(&next).await.unwrap();
    assert_eq!(
        store.load_shard(next.shard_id()).await.unwrap().policy(),
        &next
    );
}

/// A cost-mode policy registers (migration V19) with its parameters
/// recorded, rolls out to a cost-mode successor, and the database checks
/// the cost bytes of every new shard row, whoever inserts it: parameters
/// out of range or not in canonical form are refused.
#[tokio::test]
async fn a_cost_mode_policy_registers_and_the_database_checks_its_bytes() {
    use statek_policy::{CostFairness, FairnessUnit};
    let db = TestDatabase::create().await;
    let store = db.store();
    let cost = FairnessUnit::Cost(CostFairness::new(1, 40, 40, 80).unwrap());
    let p = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]).with_fairness(cost);
    store.register(&p).await.unwrap();
    let successor = policy("primary-v2", &[("tenant-a", 3), ("tenant-b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 40, 0, 10).unwrap()));
    store.preview_rollout(&p, &successor, None).await.unwrap();
    store.rollout(&p, &successor, None).await.unwrap();
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT shard_id, schedule_id, quantum, max_cost, default_cost, balance_cap
             FROM statek.shard_costs ORDER BY shard_id",
            &[],
        )
        .await
        .unwrap();
    let costs: Vec<(String, String, i64, i64, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    assert_eq!(
        costs,
        [
            (
                "primary-v1".to_owned(),
                "primary-v1".to_owned(),
                1,
                40,
                40,
                80
            ),
            (
                "primary-v2".to_owned(),
                "primary-v1".to_owned(),
                2,
                40,
                0,
                10
            ),
        ]
    );
    // The database's own check, past the store (the test role owns the
    // schema): the digest is right, the cost parameters are not.
    let bytes = String::from_utf8(p.canonical_bytes().to_vec()).unwrap();
    for (wrong, why) in [
        (
            bytes.replace("\"quantum\":1", "\"quantum\":0"),
            "out of range",
        ),
        (
            bytes.replace("\"default_cost\":40", "\"default_cost\":41"),
            "out of range",
        ),
        (
            bytes.replace("\"balance_cap\":80", "\"balance_cap\":1099511627777"),
            "out of range",
        ),
        (
            bytes.replace("\"quantum\":1", "\"quantum\":1.0"),
            "four integers",
        ),
        (
            bytes.replace(",\"balance_cap\":80", ",\"balance_cap\":80,\"x\":1"),
            "four integers",
        ),
        (
            bytes.replace(
                "\"quantum\":1,\"max_cost\":40",
                "\"max_cost\":40,\"quantum\":1",
            ),
            "not a canonical policy",
        ),
    ] {
        let inserted = client
            .execute(
                "INSERT INTO statek.scheduler_shards
                     (shard_id, schedule_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
                 VALUES ('primary-x', 'other', convert_to($1, 'UTF8'),
                         sha256('\\x73746174656b2e706f6c6963792e763100'::bytea || convert_to($1, 'UTF8')),
                         4, $2)",
                &[&wrong, &&p.cycle_digest().as_bytes()[..]],
            )
            .await
            .unwrap_err();
        assert_eq!(
            inserted.code().map(|c| c.code()),
            Some("SK001"),
            "{wrong}: {inserted}"
        );
        let message = inserted.as_db_error().unwrap().message().to_owned();
        assert!(message.contains(why), "{wrong}: {message}");
    }
}
