//! Database-enforced immutability, fail-closed reads and sequence
//! exhaustion, against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::StoreError;
use statek_store_pg::{ReservationError, RolloutError};
use uuid::Uuid;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
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
                Err(StoreError::CorruptData { .. } | StoreError::Rollout(RolloutError::PolicyConflict { .. }))
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
        Err(e @ StoreError::Reservation(ReservationError::SequenceExhausted { .. })) => {
            assert!(!e.is_retryable())
        }
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

#[tokio::test]
async fn the_cycle_digest_is_stored_at_registration_and_never_changes() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    let loaded = store.load_shard(p.shard_id()).await.unwrap();
    assert_eq!(loaded.cycle_digest(), Some(p.cycle_digest()));
    let client = db.client().await;
    let stored: Vec<u8> = client
        .query_one(
            "SELECT cycle_digest FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            &[],
        )
        .await
        .unwrap()
        .get("cycle_digest");
    assert_eq!(stored, p.cycle_digest().as_bytes());
    // Even with V1's policy trigger off, V6's own trigger refuses a change
    // of a set cycle digest, and so does the cursor-moving update.
    for statement in [
        "UPDATE statek.scheduler_shards SET cycle_digest = sha256('forged')",
        "UPDATE statek.scheduler_shards SET cycle_digest = NULL",
        "UPDATE statek.scheduler_shards SET cycle_digest = sha256('forged'), next_sequence = next_sequence + 1",
    ] {
        let result = client
            .batch_execute(&format!(
                "ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable; \
                 {statement}"
            ))
            .await;
        client
            .batch_execute(
                "ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable",
            )
            .await
            .unwrap();
        let error = result.expect_err(statement);
        assert_eq!(
            error.as_db_error().unwrap().code().code(),
            "SK001",
            "{statement}"
        );
    }
    // A digest of the wrong length is refused by the column's CHECK.
    tamper_refused(
        &db,
        "UPDATE statek.scheduler_shards SET cycle_digest = '\\x00'::bytea",
        "23514",
    )
    .await;
    assert_eq!(
        store.load_shard(p.shard_id()).await.unwrap().cycle_digest(),
        Some(p.cycle_digest())
    );
}

/// Runs `statement` with every trigger of the shard table off and expects
/// `sqlstate`.
async fn tamper_refused(db: &TestDatabase, statement: &str, sqlstate: &str) {
    let client = db.client().await;
    let result = client
        .batch_execute(&format!(
            "SET session_replication_role = replica; {statement}"
        ))
        .await;
    let error = result.expect_err(statement);
    assert_eq!(
        error.as_db_error().unwrap().code().code(),
        sqlstate,
        "{statement}"
    );
}

#[tokio::test]
async fn a_tampered_cycle_digest_is_read_back_as_stored() {
    // The store reads the digest fail-closed and hands it over as stored;
    // comparing it with the local compilation is the scheduler's check.
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute(
            "SET session_replication_role = replica; \
             UPDATE statek.scheduler_shards SET cycle_digest = sha256('forged')",
        )
        .await
        .unwrap();
    let loaded = store.load_shard(p.shard_id()).await.unwrap();
    assert_ne!(loaded.cycle_digest(), Some(p.cycle_digest()));
    assert_eq!(loaded.cycle_digest().map(|d| d.as_bytes()[0]), Some(0xcc));
}
