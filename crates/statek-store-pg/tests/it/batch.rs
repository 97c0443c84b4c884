//! Batch reservations against a real PostgreSQL (16 and 17 via `cargo
//! xtask test`): ranges, idempotency, typed errors, lost acknowledgements
//! through the fault proxy, exhaustion, single and batch reservers
//! sharing one contiguous sequence, a batch stored as one range row
//! (migration V5), retention of ranges, and readers refusing ranges that
//! overlap or leave holes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::{ReservationError, RolloutError};
use std::collections::BTreeMap;

use statek_core::MAX_RESERVATION_BATCH;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{PgStore, StoreError};
use uuid::Uuid;

/// a:3 b:1 c:3, L = 7.
fn policy(shard: &str) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy(shard, &[("tenant-a", 3), ("tenant-b", 1), ("tenant-c", 3)])
}

/// `(sequence, slot)` of each reservation.
fn range(batch: &statek_store_pg::ReservationBatch) -> Vec<(u64, u32)> {
    batch
        .reservations()
        .iter()
        .map(|r| (r.sequence(), r.slot()))
        .collect()
}

async fn row_count(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM statek.scheduler_reservations", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_batch_reserves_a_contiguous_range_and_a_retry_returns_it() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    let single = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(single.sequence(), 0);

    let batch_id = Uuid::now_v7();
    let batch = store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 9)
        .await
        .unwrap();
    assert_eq!(batch.batch_id(), batch_id);
    assert_eq!(
        (batch.first_sequence(), batch.len(), batch.replayed()),
        (1, 9, false)
    );
    assert_eq!(
        range(&batch),
        [
            (1, 1),
            (2, 2),
            (3, 3),
            (4, 4),
            (5, 5),
            (6, 6),
            (7, 0),
            (8, 1),
            (9, 2)
        ]
    );
    // One range row holds the batch: every reservation carries its id.
    let ids: Vec<Uuid> = batch.reservations().iter().map(|r| r.id()).collect();
    assert_eq!(ids, vec![batch_id; 9]);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 10);
    let client = db.client().await;
    let rows: Vec<(Uuid, i64, i32, i32, Option<Uuid>)> = client
        .query(
            "SELECT reservation_id, sequence, slot, sequence_count, batch_id
             FROM statek.scheduler_reservations ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get("reservation_id"),
                r.get("sequence"),
                r.get("slot"),
                r.get("sequence_count"),
                r.get("batch_id"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (single.id(), 0, 0, 1, None),
            (batch_id, 1, 1, 9, Some(batch_id))
        ]
    );

    // The stored rows are the batch, in order.
    let stored = store.reservations(p.shard_id(), 1, 100).await.unwrap();
    let stored_plain: Vec<_> = stored
        .iter()
        .map(|r| (r.id(), r.sequence(), r.slot()))
        .collect();
    let batch_plain: Vec<_> = batch
        .reservations()
        .iter()
        .map(|r| (r.id(), r.sequence(), r.slot()))
        .collect();
    assert_eq!(stored_plain, batch_plain);

    // A retry returns the same range, ids and time, marked replayed.
    let again = store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 9)
        .await
        .unwrap();
    assert!(again.replayed());
    assert!(again.reservations().iter().all(|r| r.replayed()));
    let again_plain: Vec<_> = again
        .reservations()
        .iter()
        .map(|r| (r.id(), r.sequence(), r.slot(), r.reserved_at()))
        .collect();
    let first_plain: Vec<_> = batch
        .reservations()
        .iter()
        .map(|r| (r.id(), r.sequence(), r.slot(), r.reserved_at()))
        .collect();
    assert_eq!(again_plain, first_plain);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 10);

    // The next single reservation continues the sequence.
    let next = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((next.sequence(), next.slot()), (10, 3));
}

#[tokio::test]
async fn bad_batch_requests_are_typed_errors_and_write_nothing() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy("primary-v1");
    // Another policy (the digest covers tenants and weights, not the shard).
    let other = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("other-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 2).unwrap()],
    )
    .unwrap();
    store.register(&p).await.unwrap();
    store.register(&other).await.unwrap();

    for k in [0, MAX_RESERVATION_BATCH + 1] {
        match store
            .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), k)
            .await
        {
            Err(StoreError::InvalidArgument(message)) => {
                assert_eq!(message, format!("batch size {k} is outside 1..=4096"));
            }
            other => panic!("k = {k}: expected InvalidArgument, got {other:?}"),
        }
    }
    let v4 = uuid::Builder::from_random_bytes([7; 16]).into_uuid();
    match store.reserve_batch(p.shard_id(), &p.digest(), v4, 2).await {
        Err(StoreError::InvalidArgument(message)) => {
            assert_eq!(message, format!("batch id {v4} is not a UUIDv7"));
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match store
        .reserve_batch(other.shard_id(), &p.digest(), Uuid::now_v7(), 2)
        .await
    {
        Err(StoreError::Rollout(RolloutError::PolicyDigestMismatch { .. })) => {}
        other => panic!("expected PolicyDigestMismatch, got {other:?}"),
    }
    let unknown = SchedulerShardId::try_from("nobody-v1").unwrap();
    match store
        .reserve_batch(&unknown, &p.digest(), Uuid::now_v7(), 2)
        .await
    {
        Err(StoreError::Rollout(RolloutError::UnknownShard { shard })) => {
            assert_eq!(shard, unknown)
        }
        other => panic!("expected UnknownShard, got {other:?}"),
    }
    assert_eq!(row_count(&client).await, 0);

    // A batch id reused with another size or on another shard.
    let batch_id = Uuid::now_v7();
    store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 3)
        .await
        .unwrap();
    match store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 4)
        .await
    {
        Err(StoreError::Reservation(ReservationError::BatchConflict {
            batch_id: id,
            detail,
        })) => {
            assert_eq!(id, batch_id);
            assert_eq!(
                detail,
                "it holds 3 retained reservations, not 4 (another size, or partly pruned)"
            );
        }
        other => panic!("expected BatchConflict, got {other:?}"),
    }
    match store
        .reserve_batch(other.shard_id(), &other.digest(), batch_id, 3)
        .await
    {
        Err(StoreError::Reservation(ReservationError::BatchConflict { detail, .. })) => {
            assert_eq!(detail, "it was made on shard primary-v1");
        }
        other => panic!("expected BatchConflict, got {other:?}"),
    }
    // A single reservation's id reused as a batch id.
    let single = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    match store
        .reserve_batch(p.shard_id(), &p.digest(), single.id(), 2)
        .await
    {
        Err(StoreError::Reservation(ReservationError::BatchConflict {
            batch_id: id,
            detail,
        })) => {
            assert_eq!(id, single.id());
            assert_eq!(detail, "the id names a single reservation, not a batch");
        }
        other => panic!("expected BatchConflict, got {other:?}"),
    }
    // One range row of 3 and one single row.
    assert_eq!(row_count(&client).await, 2);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 4);
    assert_eq!(store.next_sequence(other.shard_id()).await.unwrap(), 0);
}

#[tokio::test]
async fn a_batch_that_does_not_fit_before_i64_max_is_refused_whole() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    client
        .batch_execute(&format!(
            "UPDATE statek.scheduler_shards SET next_sequence = {}",
            i64::MAX - 3
        ))
        .await
        .unwrap();
    match store
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 4)
        .await
    {
        Err(e @ StoreError::Reservation(ReservationError::SequenceExhausted { .. })) => {
            assert!(!e.is_retryable())
        }
        other => panic!("expected SequenceExhausted, got {other:?}"),
    }
    assert_eq!(row_count(&client).await, 0);
    let last = store
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 3)
        .await
        .unwrap();
    let max = u64::try_from(i64::MAX).unwrap();
    let sequences: Vec<u64> = last.reservations().iter().map(|r| r.sequence()).collect();
    assert_eq!(sequences, [max - 3, max - 2, max - 1]);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), max);
    match store
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 1)
        .await
    {
        Err(StoreError::Reservation(ReservationError::SequenceExhausted { .. })) => {}
        other => panic!("expected SequenceExhausted, got {other:?}"),
    }
    assert_eq!(row_count(&client).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_batch_acknowledgement_retries_to_the_same_range() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy = PgStore::new(
        statek_store_pg::testing::test_store_config(proxy.pg_config())
            .pool_size(1)
            .unwrap(),
    )
    .unwrap();
    let direct = db.store();
    let p = policy("primary-v1");
    direct.register(&p).await.unwrap();
    let mut next = 0_u64;
    for round in 0..20_u64 {
        let k = u32::try_from(round % 7 + 1).unwrap();
        // (a) committed, acknowledgement lost: the retry returns the range.
        let batch_id = Uuid::now_v7();
        proxy.arm(Fault::AfterCommit);
        let err = through_proxy
            .reserve_batch(p.shard_id(), &p.digest(), batch_id, k)
            .await
            .expect_err("cut at COMMIT");
        assert!(err.is_retryable(), "{err:?}");
        assert!(!proxy.is_armed());
        let retry = through_proxy
            .reserve_batch(p.shard_id(), &p.digest(), batch_id, k)
            .await
            .unwrap();
        let expected: Vec<(u64, u32)> = (next..next + u64::from(k))
            .map(|s| (s, u32::try_from(s % 7).unwrap()))
            .collect();
        assert_eq!(range(&retry), expected, "round {round} (a)");
        assert!(retry.replayed(), "round {round} (a)");
        next += u64::from(k);

        // (b) never committed: the retry reserves the range anew.
        let batch_id = Uuid::now_v7();
        proxy.arm(Fault::BeforeCommit);
        let err = through_proxy
            .reserve_batch(p.shard_id(), &p.digest(), batch_id, k)
            .await
            .expect_err("cut before COMMIT");
        assert!(err.is_retryable(), "{err:?}");
        assert_eq!(direct.next_sequence(p.shard_id()).await.unwrap(), next);
        let retry = direct
            .reserve_batch(p.shard_id(), &p.digest(), batch_id, k)
            .await
            .unwrap();
        let expected: Vec<(u64, u32)> = (next..next + u64::from(k))
            .map(|s| (s, u32::try_from(s % 7).unwrap()))
            .collect();
        assert_eq!(range(&retry), expected, "round {round} (b)");
        assert!(!retry.replayed(), "round {round} (b)");
        next += u64::from(k);
    }
    assert_eq!(proxy.fired(), 40);
    assert_eq!(direct.next_sequence(p.shard_id()).await.unwrap(), next);
    let client = db.client().await;
    // One range row per batch: 20 rounds of two batches.
    assert_eq!(row_count(&client).await, 40);
    let stored: Vec<(u64, u32)> = direct
        .reservations(p.shard_id(), 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.sequence(), r.slot()))
        .collect();
    let expected: Vec<(u64, u32)> = (0..next)
        .map(|s| (s, u32::try_from(s % 7).unwrap()))
        .collect();
    assert_eq!(stored, expected);
}

/// Who reserved a sequence: a single reserver, or batch `(task, n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Single,
    Batch(usize, usize),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_and_batch_reservers_share_one_contiguous_sequence() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.store_config().pool_size(8).unwrap()).unwrap();
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..8_usize {
        let store = store.clone();
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut owned: Vec<(u64, Owner)> = Vec::new();
            for n in 0..25_usize {
                if task % 2 == 0 {
                    let r = store
                        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
                        .await
                        .unwrap();
                    owned.push((r.sequence(), Owner::Single));
                } else {
                    // Sizes 1..=16, varying by task and round.
                    let k = u32::try_from((task * 7 + n * 5) % 16 + 1).unwrap();
                    let batch = store
                        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), k)
                        .await
                        .unwrap();
                    assert_eq!(batch.len(), usize::try_from(k).unwrap());
                    owned.extend(
                        batch
                            .reservations()
                            .iter()
                            .map(|r| (r.sequence(), Owner::Batch(task, n))),
                    );
                }
            }
            owned
        }));
    }
    let mut by_sequence: BTreeMap<u64, Owner> = BTreeMap::new();
    let mut total = 0_usize;
    for task in tasks {
        for (sequence, owner) in task.await.unwrap() {
            total += 1;
            assert!(
                by_sequence.insert(sequence, owner).is_none(),
                "sequence {sequence} handed out twice"
            );
        }
    }
    // 4 single tasks x 25, 4 batch tasks x 25 batches of the sizes above.
    let batch_total: usize = [1_usize, 3, 5, 7]
        .iter()
        .map(|task| (0..25).map(|n| (task * 7 + n * 5) % 16 + 1).sum::<usize>())
        .sum();
    assert_eq!(total, 100 + batch_total);
    let sequences: Vec<u64> = by_sequence.keys().copied().collect();
    let expected: Vec<u64> = (0..u64::try_from(total).unwrap()).collect();
    assert_eq!(sequences, expected, "one contiguous sequence from 0");
    // Each batch's sequences are contiguous.
    let mut batches: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
    for (sequence, owner) in &by_sequence {
        if let Owner::Batch(task, n) = owner {
            batches.entry((*task, *n)).or_default().push(*sequence);
        }
    }
    assert_eq!(batches.len(), 100);
    for (key, sequences) in batches {
        assert!(
            sequences.windows(2).all(|w| w[1] == w[0] + 1),
            "batch {key:?} not contiguous: {sequences:?}"
        );
    }
    assert_eq!(
        store.next_sequence(p.shard_id()).await.unwrap(),
        u64::try_from(total).unwrap()
    );
    // Read back from PostgreSQL: one row per single reservation and per
    // batch, expanding to exactly 0..total.
    let client = db.client().await;
    assert_eq!(row_count(&client).await, 200);
    let stored: Vec<u64> = store
        .reservations(p.shard_id(), 0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(stored, expected);
}

#[tokio::test]
async fn a_batch_id_is_not_a_single_reservation_id() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    let batch_id = Uuid::now_v7();
    store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 3)
        .await
        .unwrap();
    match store.reserve(p.shard_id(), &p.digest(), batch_id).await {
        Err(StoreError::Reservation(ReservationError::ReservationConflict { reservation_id })) => {
            assert_eq!(reservation_id, batch_id);
        }
        other => panic!("expected ReservationConflict, got {other:?}"),
    }
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 3);
}

/// Runs `sql` as the superuser with the triggers off
/// (`session_replication_role = replica`), as only a superuser can.
async fn plant(client: &tokio_postgres::Client, sql: &str) {
    client
        .batch_execute(&format!(
            "SET session_replication_role = replica; {sql}; RESET session_replication_role"
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_batch_of_pre_v7_rows_retried_after_its_head_was_pruned_is_not_reserved_again() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    // A batch of 4 as V4/V5 wrote it (one row per sequence, head id =
    // batch id), whose head retention has deleted.
    let batch_id = Uuid::now_v7();
    let digest = p.digest().as_bytes().to_vec();
    for sequence in 1..4_i64 {
        client
            .execute(
                "INSERT INTO statek.scheduler_reservations
                     (reservation_id, shard_id, sequence, slot, policy_digest, batch_id)
                 VALUES ($1, 'primary-v1', $2, $3, $4, $5)",
                &[
                    &Uuid::now_v7(),
                    &sequence,
                    &i32::try_from(sequence % 7).unwrap(),
                    &digest,
                    &batch_id,
                ],
            )
            .await
            .unwrap();
    }
    plant(
        &client,
        "UPDATE statek.scheduler_shards SET next_sequence = 4",
    )
    .await;
    match store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 4)
        .await
    {
        Err(StoreError::Reservation(ReservationError::BatchConflict { detail, .. })) => assert_eq!(
            detail,
            "it holds 3 retained reservations, not 4 (another size, or partly pruned)"
        ),
        other => panic!("expected BatchConflict, got {other:?}"),
    }
    // The same rows replay as a batch of 3.
    let replay = store
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 3)
        .await
        .unwrap();
    assert!(replay.replayed());
    assert_eq!(range(&replay), [(1, 1), (2, 2), (3, 3)]);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 4);
    assert_eq!(row_count(&client).await, 3);
}

#[tokio::test]
async fn readers_refuse_a_range_that_overlaps_or_leaves_a_hole() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    let first = store
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 4)
        .await
        .unwrap();
    let single = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((first.first_sequence(), single.sequence()), (0, 4));
    let expect_corrupt = |result: Result<Vec<statek_core::Reservation>, StoreError>,
                          detail: String| match result {
        Err(StoreError::CorruptData { what, detail: got }) => {
            assert_eq!((what, got), ("reservation range", detail));
        }
        other => panic!("expected CorruptData, got {other:?}"),
    };

    // The range grown to 5 sequences overlaps the single reservation at 4.
    plant(
        &client,
        &format!(
            "UPDATE statek.scheduler_reservations SET sequence_count = 5
             WHERE reservation_id = '{}'",
            first.batch_id()
        ),
    )
    .await;
    let overlap = format!(
        "row {} at sequence 4 on primary-v1 overlaps row {} ending at sequence 4 on primary-v1",
        single.id(),
        first.batch_id()
    );
    expect_corrupt(
        store.reservations(p.shard_id(), 0, 100).await,
        overlap.clone(),
    );
    // Read from inside the range too: the covering row is checked.
    expect_corrupt(store.reservations(p.shard_id(), 2, 100).await, overlap);

    // Shrunk to 3 sequences it leaves sequence 3 unaccounted for.
    plant(
        &client,
        &format!(
            "UPDATE statek.scheduler_reservations SET sequence_count = 3
             WHERE reservation_id = '{}'",
            first.batch_id()
        ),
    )
    .await;
    expect_corrupt(
        store.reservations(p.shard_id(), 0, 100).await,
        format!(
            "row {} at sequence 4 on primary-v1 leaves a hole after row {} ending at sequence 2 on primary-v1",
            single.id(),
            first.batch_id()
        ),
    );

    // Put right, the reader gives exactly 0..5 again.
    plant(
        &client,
        &format!(
            "UPDATE statek.scheduler_reservations SET sequence_count = 4
             WHERE reservation_id = '{}'",
            first.batch_id()
        ),
    )
    .await;
    let sequences: Vec<u64> = store
        .reservations(p.shard_id(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(sequences, [0, 1, 2, 3, 4]);
    // A page starting inside a range, and a limit cutting one.
    let sequences: Vec<u64> = store
        .reservations(p.shard_id(), 2, 2)
        .await
        .unwrap()
        .iter()
        .map(|r| r.sequence())
        .collect();
    assert_eq!(sequences, [2, 3]);
}

#[tokio::test]
async fn retention_prunes_ranges_by_age_oldest_first_in_batches() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let client = db.client().await;
    let p = policy("primary-v1");
    store.register(&p).await.unwrap();
    // Ranges of 3, 5 and 2, a single, a range of 4: sequences 0..15.
    let mut ids = Vec::new();
    for k in [3, 5, 2, 1, 4] {
        let id = Uuid::now_v7();
        if k == 1 {
            store.reserve(p.shard_id(), &p.digest(), id).await.unwrap();
        } else {
            store
                .reserve_batch(p.shard_id(), &p.digest(), id, k)
                .await
                .unwrap();
        }
        ids.push(id);
    }
    // The first three rows (sequences 0..10) aged past a day, oldest first.
    plant(
        &client,
        "UPDATE statek.scheduler_reservations
         SET reserved_at = now() - interval '3 days' + make_interval(secs => sequence)
         WHERE sequence < 10",
    )
    .await;
    let status = store
        .shard_status(p.shard_id(), std::time::Duration::from_secs(86_400))
        .await
        .unwrap();
    assert_eq!(
        (status.retained, status.retained_rows, status.past_retention),
        (15, 5, 3)
    );
    let retention = statek_store_pg::SchedulerFairnessRetentionPolicy::new(
        std::time::Duration::from_secs(86_400),
        2,
    )
    .unwrap();
    let mut deleted = Vec::new();
    loop {
        let report = store
            .prune_scheduler_fairness_reservations(retention)
            .await
            .unwrap();
        if report.deleted == 0 {
            break;
        }
        let left: Vec<u64> = store
            .reservations(p.shard_id(), 0, 100)
            .await
            .unwrap()
            .iter()
            .map(|r| r.sequence())
            .collect();
        deleted.push((report.deleted, left.first().copied()));
    }
    // Two rows (sequences 0..8), then one (8..10); never a row of today.
    assert_eq!(deleted, [(2, Some(8)), (1, Some(10))]);
    let left: Vec<(u64, Uuid)> = store
        .reservations(p.shard_id(), 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.sequence(), r.id()))
        .collect();
    let expected: Vec<(u64, Uuid)> = std::iter::once((10, ids[3]))
        .chain((11..15).map(|s| (s, ids[4])))
        .collect();
    assert_eq!(left, expected);
    assert_eq!(row_count(&client).await, 2);
    assert_eq!(store.next_sequence(p.shard_id()).await.unwrap(), 15);
}
