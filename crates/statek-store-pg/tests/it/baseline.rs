//! The plain FIFO baseline (feature `baseline`) and the run history,
//! against a real PostgreSQL: the baseline claims any tenant's oldest run
//! first, records no claim history, fences completions by its token; the
//! run history shows a slot's claim with its shard and sequence.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::server_work::{ServerReading, ServerWork};
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::baseline::PlainFifoQueue;
use statek_store_pg::testing::{reserved_slots, TestDatabase};
use statek_store_pg::{NewRun, SlotClaim, StoreError};
use uuid::Uuid;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

#[tokio::test]
async fn plain_fifo_claims_the_oldest_run_of_any_tenant_and_records_no_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let queue = PlainFifoQueue::new(store.clone());
    queue.create_index().await.unwrap();
    let mut ids = Vec::new();
    for t in ["noisy", "noisy", "small", "noisy"] {
        ids.push(
            store
                .enqueue(&NewRun::new(tenant(t), Vec::new()))
                .await
                .unwrap()
                .run_id,
        );
    }
    // FIFO: the oldest first, whoever's it is.
    let first = queue.claim_one().await.unwrap().unwrap();
    assert_eq!((first.run_id, first.tenant.as_str()), (ids[0], "noisy"));
    let next = queue.claim_up_to(2).await.unwrap();
    let got: Vec<(Uuid, &str)> = next.iter().map(|r| (r.run_id, r.tenant.as_str())).collect();
    assert_eq!(got, vec![(ids[1], "noisy"), (ids[2], "small")]);
    assert!(next.iter().all(|r| r.claimed_at >= r.available_at));

    assert!(queue.complete_one(&first).await.unwrap());
    // A second completion of the same lease changes nothing.
    assert!(!queue.complete_one(&first).await.unwrap());
    assert_eq!(queue.complete(&next).await.unwrap(), 2);
    assert_eq!(queue.complete(&next).await.unwrap(), 0);

    let history = store.run_history(&ids).await.unwrap();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(history.iter().map(|r| r.run_id).collect::<Vec<_>>(), sorted);
    for record in &history {
        let done = record.run_id != ids[3];
        assert_eq!(record.state, if done { "completed" } else { "available" });
        assert_eq!(record.attempt, u32::from(done));
        assert_eq!(record.finished_at.is_some(), done);
        assert!(record.claims.is_empty(), "the baseline records no claims");
    }
    queue.drop_index().await.unwrap();
    queue.drop_index().await.unwrap();
}

#[tokio::test]
async fn run_history_shows_each_claim_with_its_slot() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let shard = SchedulerShardId::try_from("primary-v1").unwrap();
    let a = tenant("a");
    let policy = WeightedFairnessPolicy::new(
        shard.clone(),
        [TenantFairnessWeight::new(a.clone(), 1).unwrap()],
    )
    .unwrap();
    store.register(&policy).await.unwrap();
    let run = store
        .enqueue(&NewRun::new(a.clone(), Vec::new()))
        .await
        .unwrap();
    // A slot of a, reserved before it is claimed.
    let slots = reserved_slots(&store, &policy, &[&a]).await;
    let sequence = slots[0].0;
    let claims = store
        .claim_runs_for_slots(&slots, &shard, Duration::from_secs(60))
        .await
        .unwrap();
    let SlotClaim::Claimed(claimed) = &claims[0] else {
        panic!("expected a claim, got {claims:?}");
    };
    store.complete_run(&claimed.lease).await.unwrap();
    let history = store
        .run_history(&[run.run_id, Uuid::now_v7()])
        .await
        .unwrap();
    assert_eq!(history.len(), 1, "an unknown id is left out");
    let record = &history[0];
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 1));
    assert_eq!(record.claims.len(), 1);
    let claim = &record.claims[0];
    assert_eq!(claim.attempt, 1);
    assert_eq!(claim.slot, Some((shard, sequence)));
    assert_eq!(claim.claimed_at, claimed.claimed_at);
    assert!(claim.finished_at.is_some());

    let too_many = vec![Uuid::now_v7(); statek_store_pg::input_limits::MAX_RUN_HISTORY_BATCH + 1];
    assert!(matches!(
        store.run_history(&too_many).await,
        Err(StoreError::InvalidArgument(_))
    ));
}

/// The demo's and the bench's readings (`server_work`): another session's
/// writes count once it went quiet, and the work per run is their
/// difference.
#[tokio::test]
async fn server_work_counts_another_sessions_writes_once_it_is_quiet() {
    let db = TestDatabase::create().await;
    let reader = db.store();
    let (before, quiet) = reader.server_reading_when_quiet().await.unwrap();
    assert!(quiet);
    // Another pool; its statistics are flushed when its sessions end.
    let writer = statek_store_pg::PgStore::new(db.store_config()).unwrap();
    let queue = PlainFifoQueue::new(writer.clone());
    queue.create_index().await.unwrap();
    for _ in 0..40 {
        writer
            .enqueue(&NewRun::new(tenant("noisy"), Vec::new()))
            .await
            .unwrap();
    }
    let claimed = queue.claim_up_to(40).await.unwrap();
    assert_eq!(queue.complete(&claimed).await.unwrap(), 40);
    drop((queue, writer));
    let (after, quiet) = reader.server_reading_when_quiet().await.unwrap();
    assert!(quiet, "the writer's sessions ended");
    let work = ServerWork::between(&before, &after, 40).unwrap();
    // One insert per run, one update to claim it and one to complete it.
    assert_eq!((work.inserted, work.updated, work.deleted), (1.0, 2.0, 0.0));
    assert_eq!(work.rows_written(), 3.0);
    assert!(work.wal_bytes > 0.0, "{work:?}");
    // The test server does not install pg_stat_statements.
    assert_eq!((work.statements, work.db_ms()), (None, None));
    assert_eq!(ServerReading::reset_between(&before, &after), None);

    // pg_stat_reset() of this database between two readings: the row
    // counters start again from 0; the pair is refused and the reset named.
    let admin = db.store_config().connect_client().await.unwrap();
    admin.batch_execute("SELECT pg_stat_reset()").await.unwrap();
    let (reset, _) = reader.server_reading_when_quiet().await.unwrap();
    assert_eq!(
        ServerReading::reset_between(&after, &reset),
        Some("this database's statistics were reset (pg_stat_reset()) between the readings")
    );
    assert_eq!(ServerWork::between(&after, &reset, 40), None);
}

/// Why a reading has no statement sums: not installed, then installed
/// but not loaded (the test servers do not preload it), each named.
#[tokio::test]
async fn statement_statistics_say_whether_the_extension_is_installed_and_loaded() {
    use statek_store_pg::server_work::StatementStatistics;
    let db = TestDatabase::create().await;
    let store = db.store();
    assert_eq!(
        store.statement_statistics().await.unwrap(),
        StatementStatistics::NotInstalled
    );
    db.client()
        .await
        .batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    assert_eq!(
        store.statement_statistics().await.unwrap(),
        StatementStatistics::NotLoaded
    );
    let (reading, _) = store.server_reading_when_quiet().await.unwrap();
    assert_eq!(reading.statements, None);
}
