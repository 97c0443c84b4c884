//! Unit tests of the in-memory reservation source: contiguous sequences,
//! replays by id, batch ranges, seals and their successors.

use super::*;
use crate::policy;

/// The in-memory source's own error inside a source error, after checking
/// that the source error's kind is the one the own error names.
fn memory_error<T>(result: Result<T, SourceError>) -> Option<MemoryError> {
    let error = result.err()?;
    let kind = error.kind();
    let inner = error.into_inner().downcast::<MemoryError>().ok()?;
    assert_eq!(inner.kind(), kind, "{inner}");
    Some(*inner)
}

fn sequences(reservations: &[Reservation]) -> Vec<u64> {
    reservations.iter().map(Reservation::sequence).collect()
}

async fn registered(p: &WeightedFairnessPolicy) -> InMemoryReservations {
    let source = InMemoryReservations::new();
    let (registration, shard) = source.register(p, None).await.unwrap();
    assert!(matches!(registration, Registration::Registered { .. }));
    assert_eq!(
        (&shard.policy, shard.sealed, shard.predecessor),
        (p, false, None)
    );
    assert_eq!(shard.cycle_digest, Some(p.cycle_digest()));
    source
}

#[tokio::test]
async fn unique_ids_reserve_one_contiguous_sequence() {
    let p = policy("primary-v1", &[("a", 3), ("b", 1)]);
    let source = registered(&p).await;
    let mut seen = Vec::new();
    for _ in 0..10 {
        let r = source
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        assert!(!r.replayed());
        assert_eq!(
            (r.shard(), r.cycle_length(), r.policy_digest()),
            (p.shard_id(), 4, &p.digest())
        );
        seen.push((r.sequence(), r.slot()));
    }
    let expected: Vec<(u64, u32)> = (0..10).map(|s| (s, (s % 4) as u32)).collect();
    assert_eq!(seen, expected);
    assert_eq!(source.next_sequence(p.shard_id()), Some(10));
}

#[tokio::test]
async fn a_replay_by_id_returns_the_original() {
    let p = policy("primary-v1", &[("a", 1), ("b", 1)]);
    let source = registered(&p).await;
    let (shard, digest) = (p.shard_id(), p.digest());
    let id = Uuid::now_v7();
    let first = source.reserve(shard, &digest, id).await.unwrap();
    source
        .reserve(shard, &digest, Uuid::now_v7())
        .await
        .unwrap();
    let again = source.reserve(shard, &digest, id).await.unwrap();
    assert_eq!(
        (again.id(), again.sequence(), again.replayed()),
        (id, 0, true)
    );
    assert_eq!(again.reserved_at(), first.reserved_at());
    // The replay advanced nothing.
    assert_eq!(source.next_sequence(shard), Some(2));
    // The id on a batch, or a batch id on one reservation: conflicts.
    assert!(matches!(
        memory_error(source.reserve_batch(shard, &digest, id, 1).await),
        Some(MemoryError::BatchConflict { batch_id, .. }) if batch_id == id
    ));
    let other = policy("other-v1", &[("a", 1)]);
    source.register(&other, None).await.unwrap();
    assert!(matches!(
        memory_error(source.reserve(other.shard_id(), &other.digest(), id).await),
        Some(MemoryError::ReservationConflict { reservation_id }) if reservation_id == id
    ));
}

#[tokio::test]
async fn a_batch_is_one_contiguous_range_replayed_whole() {
    let p = policy("primary-v1", &[("a", 2), ("b", 1)]);
    let source = registered(&p).await;
    let (shard, digest) = (p.shard_id(), p.digest());
    source
        .reserve(shard, &digest, Uuid::now_v7())
        .await
        .unwrap();
    let id = Uuid::now_v7();
    let batch = source.reserve_batch(shard, &digest, id, 4).await.unwrap();
    assert_eq!(sequences(&batch), [1, 2, 3, 4]);
    assert_eq!(
        batch.iter().map(Reservation::slot).collect::<Vec<_>>(),
        [1, 2, 0, 1]
    );
    assert!(batch.iter().all(|r| r.id() == id && !r.replayed()));
    let next = source
        .reserve_batch(shard, &digest, Uuid::now_v7(), 2)
        .await
        .unwrap();
    assert_eq!(sequences(&next), [5, 6]);
    let again = source.reserve_batch(shard, &digest, id, 4).await.unwrap();
    assert_eq!(sequences(&again), [1, 2, 3, 4]);
    assert!(again.iter().all(Reservation::replayed));
    // Another size under the same id.
    assert!(matches!(
        memory_error(source.reserve_batch(shard, &digest, id, 3).await),
        Some(MemoryError::BatchConflict { .. })
    ));
    for k in [0, MAX_RESERVATION_BATCH + 1] {
        assert!(matches!(
            memory_error(
                source
                    .reserve_batch(shard, &digest, Uuid::now_v7(), k)
                    .await
            ),
            Some(MemoryError::InvalidArgument(_))
        ));
    }
    assert_eq!(source.next_sequence(shard), Some(7));
}

#[tokio::test]
async fn the_store_errors_for_wrong_arguments() {
    let p = policy("primary-v1", &[("a", 1)]);
    let source = registered(&p).await;
    let other = policy("primary-v1", &[("a", 2)]);
    assert!(matches!(
        memory_error(source.register(&other, None).await),
        Some(MemoryError::PolicyConflict { .. })
    ));
    let (registration, _) = source.register(&p, None).await.unwrap();
    assert!(matches!(registration, Registration::Idempotent { .. }));
    assert!(matches!(
        memory_error(
            source
                .reserve(p.shard_id(), &other.digest(), Uuid::now_v7())
                .await
        ),
        Some(MemoryError::PolicyDigestMismatch { .. })
    ));
    let unknown = SchedulerShardId::try_from("nope").unwrap();
    assert!(matches!(
        memory_error(source.reserve(&unknown, &p.digest(), Uuid::now_v7()).await),
        Some(MemoryError::UnknownShard { .. })
    ));
    assert!(matches!(
        memory_error(
            source
                .reserve(p.shard_id(), &p.digest(), Uuid::from_u128(7))
                .await
        ),
        Some(MemoryError::InvalidArgument(_))
    ));
    assert_eq!(source.next_sequence(p.shard_id()), Some(0));
}

#[tokio::test]
async fn a_seal_ends_the_shard_and_names_its_successor() {
    let v1 = policy("primary-v1", &[("a", 3), ("b", 1)]);
    let v2 = policy("primary-v2", &[("a", 1), ("b", 1)]);
    let source = registered(&v1).await;
    source
        .reserve_batch(v1.shard_id(), &v1.digest(), Uuid::now_v7(), 3)
        .await
        .unwrap();
    assert_eq!(source.successor(v1.shard_id()).await.unwrap(), None);
    assert_eq!(source.seal(v1.shard_id(), v2.clone()).unwrap(), 3);
    assert!(matches!(
        source.seal(v1.shard_id(), policy("primary-v3", &[("a", 1)])),
        Err(MemoryError::InvalidArgument(_))
    ));
    match memory_error(
        source
            .reserve(v1.shard_id(), &v1.digest(), Uuid::now_v7())
            .await,
    ) {
        Some(MemoryError::ShardSealed {
            shard,
            sealed_at_sequence,
            successor,
        }) => {
            assert_eq!(
                (&shard, sealed_at_sequence, &successor),
                (v1.shard_id(), 3, v2.shard_id())
            );
        }
        other => panic!("expected ShardSealed, got {other:?}"),
    }
    let succession = source.successor(v1.shard_id()).await.unwrap().unwrap();
    assert_eq!(succession.sealed_at_sequence, 3);
    assert_eq!(succession.successor.policy, v2);
    assert_eq!(
        succession.successor.predecessor.as_ref(),
        Some(v1.shard_id())
    );
    assert_eq!(succession.seam, PolicySeam::new(&v1, &v2).at(3));
    // The successor starts at 0.
    let r = source
        .reserve(v2.shard_id(), &v2.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((r.sequence(), r.cycle_length()), (0, 2));
    // Registering the sealed shard again reports it sealed.
    let (_, stored) = source.register(&v1, None).await.unwrap();
    assert!(stored.sealed);
}

#[tokio::test]
async fn a_second_seal_carries_the_open_gap_of_a_tenant_the_middle_shard_never_picked() {
    let ten: Vec<(&str, u32)> = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "z"]
        .into_iter()
        .map(|t| (t, 1))
        .collect();
    let (s1, s2, s3) = (
        policy("s-v1", &ten),
        policy("s-v2", &[("z", 1)]),
        policy("s-v3", &ten),
    );
    let source = registered(&s1).await;
    for _ in 0..19 {
        source
            .reserve(s1.shard_id(), &s1.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    assert_eq!(source.seal(s1.shard_id(), s2.clone()).unwrap(), 19);
    assert_eq!(source.seal(s2.shard_id(), s3.clone()).unwrap(), 0);
    let into_s3 = source.successor(s2.shard_id()).await.unwrap().unwrap().seam;
    let z = into_s3.iter().find(|b| b.tenant().as_str() == "z").unwrap();
    // z last picked at s-v1's 9, first in s-v3 at 9: 19 + 0 + 9 - 9 = 19.
    assert_eq!(z.reservations_across_seam(), 19);
}
