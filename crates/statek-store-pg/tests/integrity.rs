//! Database-enforced immutability, fail-closed reads and sequence
//! exhaustion, against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::StoreError;
use uuid::Uuid;

fn policy() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [
            TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 3).unwrap(),
            TenantFairnessWeight::new(TenantId::try_from("tenant-b").unwrap(), 1).unwrap(),
        ],
    )
    .unwrap()
}

/// The SQLSTATE of a failed statement.
fn sqlstate(result: Result<u64, tokio_postgres::Error>) -> String {
    result
        .expect_err("the statement must be refused")
        .as_db_error()
        .expect("a server error")
        .code()
        .code()
        .to_owned()
}

#[tokio::test]
async fn triggers_refuse_changes_to_policies_and_reservations() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    // The test role is a superuser: the database refuses even the owner.
    let client = db.client().await;
    for statement in [
        "UPDATE statek.scheduler_shards SET policy_bytes = 'x'",
        "UPDATE statek.scheduler_shards SET policy_digest = policy_digest",
        "UPDATE statek.scheduler_shards SET cycle_length = 5",
        "UPDATE statek.scheduler_shards SET registered_at = now() - interval '1 day'",
        "UPDATE statek.scheduler_shards SET next_sequence = 0",
        "DELETE FROM statek.scheduler_shards",
        "UPDATE statek.scheduler_reservations SET slot = 1",
        "UPDATE statek.scheduler_reservations SET reserved_at = now()",
    ] {
        assert_eq!(
            sqlstate(client.execute(statement, &[]).await),
            "SK001",
            "{statement}"
        );
    }
    // The cursor may only move forwards.
    assert_eq!(
        client
            .execute(
                "UPDATE statek.scheduler_shards SET next_sequence = next_sequence + 1",
                &[]
            )
            .await
            .unwrap(),
        1
    );
    let loaded = store.load_shard(p.shard_id()).await.unwrap();
    assert_eq!(loaded.policy(), &p);
    assert_eq!(loaded.next_sequence(), 2);
}

/// Runs `statement` with the immutability trigger switched off, as an
/// attacker or a broken tool with owner rights could.
async fn tamper(db: &TestDatabase, table: &str, trigger: &str, statement: &str) {
    let client = db.client().await;
    client
        .batch_execute(&format!(
            "ALTER TABLE statek.{table} DISABLE TRIGGER {trigger}; {statement}; \
             ALTER TABLE statek.{table} ENABLE TRIGGER {trigger};"
        ))
        .await
        .unwrap();
}

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(e @ StoreError::CorruptData { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected CorruptData, got {other:?}"),
    }
}

#[tokio::test]
async fn tampered_policy_bytes_or_digest_are_corrupt_data() {
    for statement in [
        // Bytes that no longer match the digest.
        "UPDATE statek.scheduler_shards SET policy_bytes = convert_to(replace(convert_from(policy_bytes, 'UTF8'), '\"weight\":3', '\"weight\":2'), 'UTF8')",
        // A digest that no longer matches the bytes.
        "UPDATE statek.scheduler_shards SET policy_digest = sha256('forged')",
        // Non-canonical bytes.
        "UPDATE statek.scheduler_shards SET policy_bytes = convert_to(' ' || convert_from(policy_bytes, 'UTF8'), 'UTF8')",
        // A cycle length that disagrees with the policy.
        "UPDATE statek.scheduler_shards SET cycle_length = 5",
    ] {
        let db = TestDatabase::create().await;
        let store = db.store();
        let p = policy();
        store.register(&p).await.unwrap();
        tamper(&db, "scheduler_shards", "scheduler_shards_immutable", statement).await;
        assert_corrupt(store.load_shard(p.shard_id()).await);
        if !statement.contains("cycle_length") {
            // Bytes and digest disagree: reserving refuses too, writing nothing.
            assert_corrupt(store.reserve(p.shard_id(), &p.digest(), Uuid::now_v7()).await);
            assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 0);
        }
        // Registering the same policy again must not accept the row either.
        assert!(
            matches!(
                store.register(&p).await,
                Err(StoreError::CorruptData { .. } | StoreError::PolicyConflict { .. })
            ),
            "{statement}"
        );
    }
}

#[tokio::test]
async fn a_tampered_slot_is_corrupt_data_on_replay() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    let id = Uuid::now_v7();
    store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
    tamper(
        &db,
        "scheduler_reservations",
        "scheduler_reservations_immutable",
        "UPDATE statek.scheduler_reservations SET slot = 3",
    )
    .await;
    assert_corrupt(store.reserve(p.shard_id(), &p.digest(), id).await);
    assert_corrupt(store.reservations(p.shard_id(), 0, 10).await);
}

#[tokio::test]
async fn the_last_sequence_is_reserved_then_exhausted() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    db.client()
        .await
        .batch_execute(&format!(
            "UPDATE statek.scheduler_shards SET next_sequence = {}",
            i64::MAX - 1
        ))
        .await
        .unwrap();
    let last = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(last.sequence(), (i64::MAX - 1) as u64);
    assert_eq!(u64::from(last.slot()), ((i64::MAX - 1) as u64) % 4);
    let id = Uuid::now_v7();
    match store.reserve(p.shard_id(), &p.digest(), id).await {
        Err(e @ StoreError::SequenceExhausted { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected SequenceExhausted, got {other:?}"),
    }
    // Nothing written: the cursor stays at i64::MAX, the id is unknown.
    assert_eq!(
        store.next_sequence(p.shard_id()).await.unwrap(),
        i64::MAX as u64
    );
    let client = db.client().await;
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM statek.scheduler_reservations WHERE reservation_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}
