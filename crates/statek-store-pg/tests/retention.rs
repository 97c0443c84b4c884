//! Pruning reservation rows by database time, against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::SchedulerFairnessRetentionPolicy;
use uuid::Uuid;

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test]
async fn prunes_oldest_first_in_batches_and_keeps_the_cursor() {
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
    // Oldest first (sequence 6 is the oldest back-dated row), 3 per call.
    assert_eq!(
        deleted,
        vec![
            (3, vec![0, 1, 2, 3, 7, 8, 9]),
            (3, vec![0, 7, 8, 9]),
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
