//! The reservation-source conformance suite: the contract of
//! [`ReservationSource`] (statek-core) as cases that every source must
//! pass. statek runs it against statek-store-pg's `PgStore` (one fresh
//! database per case) and against [`crate::InMemoryReservations`]; run it
//! against a source of your own the same way.
//!
//! What the cases check:
//! - registration binds a policy once, answers a second registration of
//!   the same bytes as idempotent, and refuses other bytes for the shard
//!   (a policy conflict) without overwriting;
//! - a shard's reservations form one sequence 0, 1, 2, … with `slot =
//!   sequence mod L`, and a batch of `k` is the next `k` sequences, in
//!   order;
//! - the same id returns the original reservation or range, marked
//!   replayed, and consumes nothing; the same id with other arguments is
//!   an id conflict;
//! - an unknown shard, a wrong digest, a batch size outside
//!   1..=[`MAX_RESERVATION_BATCH`] and an id that is not a UUIDv7 are
//!   refused with their kinds and consume nothing;
//! - 16 concurrent callers get one gapless sequence between them;
//! - a sealed shard reserves nothing (its error names the seal) and its
//!   successor carries the seam the policies give at the seal;
//! - a range's slot outcomes are recorded once (the same record again is
//!   accepted as a replay; other classes, another start or another length
//!   are refused), or never kept by a source that keeps none;
//! - the oldest retained reservation is the first one made.
//!
//! A source that keeps no evidence (slot outcomes, reservation times)
//! says so with [`SourceHarness::keeps_evidence`].
//!
//! ```no_run
//! use statek_testing::source_conformance::{self, SourceHarness};
//! # async fn example<MyHarness: SourceHarness>() {
//! // In a #[tokio::test(flavor = "multi_thread")] of your crate:
//! source_conformance::exercise::<MyHarness>().await;
//! # }
//! ```

// A test suite: its assertions panic, as in any test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;

use futures_util::future::join_all;
use statek_core::{
    Registration, Reservation, ReservationSource, SlotClass, SlotOutcomeAnswer, SlotOutcomes,
    SlotOutcomesRecorded, SourceError, SourceErrorKind, MAX_RESERVATION_BATCH,
};
use statek_policy::{PolicySeam, SchedulerShardId, WeightedFairnessPolicy};
use uuid::Uuid;

use crate::policy;

/// How the suite reaches a source under test.
pub trait SourceHarness: Sized + Send + Sync {
    /// The source under test.
    type Source: ReservationSource;

    /// A harness around a source that holds none of the suite's shards
    /// (`primary-v1`, `primary-v2`, `other-v1`): a fresh database, or a
    /// fresh in-memory source. Called once per case.
    fn new() -> impl Future<Output = Self> + Send;

    /// The source under test.
    fn source(&self) -> &Self::Source;

    /// Seals the registered shard of `sealed` at its cursor `N` and
    /// registers `successor` (a new shard id) to go on from there, in the
    /// same schedule, as an operator's rollout does; returns `N`.
    /// (`PgStore::rollout`; `InMemoryReservations::seal`.)
    fn seal(
        &self,
        sealed: &WeightedFairnessPolicy,
        successor: &WeightedFairnessPolicy,
    ) -> impl Future<Output = u64> + Send;

    /// Whether the source keeps slot outcome records and the times of its
    /// reservations (default `true`). A source that keeps neither (the
    /// trait's default `record_slot_outcomes` and `oldest_reservation`)
    /// says `false`, and the suite checks that it answers no record and
    /// no oldest reservation instead.
    fn keeps_evidence() -> bool {
        true
    }
}

/// Runs every case, each against a fresh harness, in order.
pub async fn exercise<H: SourceHarness>() {
    registration_is_idempotent_and_never_overwrites(&H::new().await).await;
    reservations_are_one_sequence_from_zero(&H::new().await).await;
    a_replay_returns_the_original_and_consumes_nothing(&H::new().await).await;
    a_batch_is_the_next_range_and_replays_whole(&H::new().await).await;
    bad_arguments_are_refused_by_kind_and_consume_nothing(&H::new().await).await;
    concurrent_callers_share_one_gapless_sequence(&H::new().await).await;
    a_sealed_shard_reserves_nothing_and_names_its_successor(&H::new().await).await;
    slot_outcomes_are_recorded_once(&H::new().await).await;
    the_oldest_reservation_is_the_first(&H::new().await).await;
}

/// `primary-v1`: L = 4 (a: 3, b: 1).
fn primary() -> WeightedFairnessPolicy {
    policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

fn sequences(reservations: &[Reservation]) -> Vec<u64> {
    reservations.iter().map(Reservation::sequence).collect()
}

/// The kind of a failed call, with its error text in the panic otherwise.
fn kind_of<T: std::fmt::Debug>(result: Result<T, SourceError>, what: &str) -> SourceErrorKind {
    match result {
        Err(error) => error.kind(),
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
    }
}

async fn register<H: SourceHarness>(h: &H, p: &WeightedFairnessPolicy) {
    let (registration, _) = h.source().register(p, None).await.unwrap();
    assert!(
        matches!(registration, Registration::Registered { .. }),
        "{registration:?}"
    );
}

async fn reserve<H: SourceHarness>(h: &H, p: &WeightedFairnessPolicy) -> Reservation {
    h.source()
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap()
}

/// Checks one reservation's fields against its policy.
fn check(reservation: &Reservation, p: &WeightedFairnessPolicy, sequence: u64, replayed: bool) {
    assert_eq!(reservation.shard(), p.shard_id());
    assert_eq!(reservation.sequence(), sequence);
    let length = u64::from(p.cycle_length());
    assert_eq!(u64::from(reservation.slot()), sequence % length);
    assert_eq!(reservation.cycle_length(), p.cycle_length());
    assert_eq!(reservation.policy_digest(), &p.digest());
    assert_eq!(reservation.replayed(), replayed, "{reservation:?}");
}

/// Registration binds once; the same bytes again are idempotent; other
/// bytes for the shard are a policy conflict and change nothing.
pub async fn registration_is_idempotent_and_never_overwrites<H: SourceHarness>(h: &H) {
    let p = primary();
    let (first, shard) = h.source().register(&p, None).await.unwrap();
    let Registration::Registered { registered_at } = first else {
        panic!("a first registration answers Registered, got {first:?}");
    };
    assert_eq!(shard.policy, p);
    assert!(!shard.sealed);
    assert_eq!(shard.predecessor, None);
    if let Some(digest) = shard.cycle_digest {
        assert_eq!(digest, p.cycle_digest());
    }
    let (again, _) = h.source().register(&p, None).await.unwrap();
    assert_eq!(again, Registration::Idempotent { registered_at });

    let other = policy("primary-v1", &[("tenant-a", 1), ("tenant-b", 1)]);
    let refused = h.source().register(&other, None).await;
    match refused {
        Err(error) => {
            assert_eq!(error.kind(), SourceErrorKind::PolicyConflict, "{error}");
            assert!(error.is_conflict());
            assert!(!error.is_retryable());
        }
        Ok(answer) => panic!("other bytes for a bound shard must be refused, got {answer:?}"),
    }
    // Not overwritten: the shard still reserves under the first policy.
    check(&reserve(h, &p).await, &p, 0, false);
}

/// Reservations of a shard are 0, 1, 2, … with `slot = sequence mod L`.
pub async fn reservations_are_one_sequence_from_zero<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    for sequence in 0..9 {
        check(&reserve(h, &p).await, &p, sequence, false);
    }
}

/// The same id returns the original reservation, marked replayed, and
/// consumes no sequence; the id with another shard is an id conflict.
pub async fn a_replay_returns_the_original_and_consumes_nothing<H: SourceHarness>(h: &H) {
    let p = primary();
    let other = policy("other-v1", &[("tenant-c", 1)]);
    register(h, &p).await;
    register(h, &other).await;
    let id = Uuid::now_v7();
    let original = h
        .source()
        .reserve(p.shard_id(), &p.digest(), id)
        .await
        .unwrap();
    check(&original, &p, 0, false);
    check(&reserve(h, &p).await, &p, 1, false);
    let replay = h
        .source()
        .reserve(p.shard_id(), &p.digest(), id)
        .await
        .unwrap();
    check(&replay, &p, 0, true);
    assert_eq!(replay.id(), id);
    assert_eq!(replay.reserved_at(), original.reserved_at());
    check(&reserve(h, &p).await, &p, 2, false);
    assert_eq!(
        kind_of(
            h.source()
                .reserve(other.shard_id(), &other.digest(), id)
                .await,
            "an id used on another shard"
        ),
        SourceErrorKind::IdConflict
    );
    check(&reserve(h, &other).await, &other, 0, false);
}

/// A batch of `k` is the next `k` sequences in order; its id replays the
/// whole range; the id with another size, or as a single reservation, is
/// an id conflict.
pub async fn a_batch_is_the_next_range_and_replays_whole<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    check(&reserve(h, &p).await, &p, 0, false);
    let batch_id = Uuid::now_v7();
    let batch = h
        .source()
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 5)
        .await
        .unwrap();
    assert_eq!(sequences(&batch), vec![1, 2, 3, 4, 5]);
    for r in &batch {
        check(r, &p, r.sequence(), false);
    }
    let replay = h
        .source()
        .reserve_batch(p.shard_id(), &p.digest(), batch_id, 5)
        .await
        .unwrap();
    assert_eq!(sequences(&replay), vec![1, 2, 3, 4, 5]);
    assert!(replay.iter().all(Reservation::replayed), "{replay:?}");
    assert_eq!(
        kind_of(
            h.source()
                .reserve_batch(p.shard_id(), &p.digest(), batch_id, 4)
                .await,
            "a batch id with another size"
        ),
        SourceErrorKind::IdConflict
    );
    assert_eq!(
        kind_of(
            h.source()
                .reserve(p.shard_id(), &p.digest(), batch_id)
                .await,
            "a batch id as a single reservation"
        ),
        SourceErrorKind::IdConflict
    );
    let largest = h
        .source()
        .reserve_batch(
            p.shard_id(),
            &p.digest(),
            Uuid::now_v7(),
            MAX_RESERVATION_BATCH,
        )
        .await
        .unwrap();
    let first = 6;
    assert_eq!(
        sequences(&largest),
        (first..first + u64::from(MAX_RESERVATION_BATCH)).collect::<Vec<_>>()
    );
    check(
        &reserve(h, &p).await,
        &p,
        first + u64::from(MAX_RESERVATION_BATCH),
        false,
    );
}

/// Bad arguments are refused with their kinds, and none consumes a
/// sequence.
pub async fn bad_arguments_are_refused_by_kind_and_consume_nothing<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    let unknown = SchedulerShardId::try_from("primary-v2").unwrap();
    assert_eq!(
        kind_of(
            h.source()
                .reserve(&unknown, &p.digest(), Uuid::now_v7())
                .await,
            "an unknown shard"
        ),
        SourceErrorKind::UnknownShard
    );
    let wrong = policy("primary-v1", &[("tenant-a", 1)]).digest();
    let refused = h
        .source()
        .reserve(p.shard_id(), &wrong, Uuid::now_v7())
        .await;
    let error = refused.expect_err("a wrong digest");
    assert_eq!(error.kind(), SourceErrorKind::PolicyConflict, "{error}");
    assert!(error.is_conflict());
    for k in [0, MAX_RESERVATION_BATCH + 1] {
        assert_eq!(
            kind_of(
                h.source()
                    .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), k)
                    .await,
                "a batch size out of range"
            ),
            SourceErrorKind::InvalidArgument,
            "k = {k}"
        );
    }
    // A version-4 UUID: random, not time-ordered.
    let v4 = Uuid::from_u128(0x1234_5678_9abc_4def_8123_4567_89ab_cdef);
    assert_eq!(v4.get_version_num(), 4);
    assert_eq!(
        kind_of(
            h.source().reserve(p.shard_id(), &p.digest(), v4).await,
            "an id that is not a UUIDv7"
        ),
        SourceErrorKind::InvalidArgument
    );
    assert_eq!(
        kind_of(
            h.source()
                .reserve_batch(p.shard_id(), &p.digest(), v4, 2)
                .await,
            "a batch id that is not a UUIDv7"
        ),
        SourceErrorKind::InvalidArgument
    );
    check(&reserve(h, &p).await, &p, 0, false);
}

/// 16 concurrent callers (single reservations and batches of 3) get one
/// gapless sequence between them, each sequence once.
pub async fn concurrent_callers_share_one_gapless_sequence<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    let digest = p.digest();
    let callers = (0..16u32).map(|caller| {
        let (p, digest) = (&p, &digest);
        async move {
            let mut got = Vec::new();
            for _ in 0..6 {
                // A transient error (16 callers queue on one shard row; on
                // a loaded machine the last may pass its statement
                // timeout) is retried with the same id, as a caller does:
                // a retry answers the reservation once.
                let id = Uuid::now_v7();
                if caller % 2 == 0 {
                    let mut tries = 0;
                    let r = loop {
                        match h.source().reserve(p.shard_id(), digest, id).await {
                            Err(e) if e.is_retryable() && tries < 10 => tries += 1,
                            answered => break answered.unwrap(),
                        }
                    };
                    got.push(r.sequence());
                } else {
                    let mut tries = 0;
                    let batch = loop {
                        match h.source().reserve_batch(p.shard_id(), digest, id, 3).await {
                            Err(e) if e.is_retryable() && tries < 10 => tries += 1,
                            answered => break answered.unwrap(),
                        }
                    };
                    let seqs = sequences(&batch);
                    assert_eq!(seqs, (seqs[0]..seqs[0] + 3).collect::<Vec<_>>());
                    got.extend(seqs);
                }
            }
            got
        }
    });
    let mut all: Vec<u64> = join_all(callers).await.into_iter().flatten().collect();
    all.sort_unstable();
    // 8 callers × 6 singles + 8 callers × 6 batches of 3.
    assert_eq!(all, (0..8 * 6 + 8 * 6 * 3).collect::<Vec<u64>>());
    check(&reserve(h, &p).await, &p, 8 * 6 + 8 * 6 * 3, false);
}

/// A sealed shard reserves nothing (the error's kind is the seal's), its
/// successor carries the seam the two policies give at the seal, and
/// reserves from 0.
pub async fn a_sealed_shard_reserves_nothing_and_names_its_successor<H: SourceHarness>(h: &H) {
    let p = primary();
    let next = policy(
        "primary-v2",
        &[("tenant-a", 1), ("tenant-b", 1), ("tenant-c", 2)],
    );
    register(h, &p).await;
    assert_eq!(h.source().successor(p.shard_id()).await.unwrap(), None);
    for sequence in 0..3 {
        check(&reserve(h, &p).await, &p, sequence, false);
    }
    let at = h.seal(&p, &next).await;
    assert_eq!(at, 3);
    let error = h
        .source()
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .expect_err("a sealed shard reserves nothing");
    assert_eq!(error.kind(), SourceErrorKind::ShardSealed, "{error}");
    assert!(!error.is_retryable());
    let succession = h
        .source()
        .successor(p.shard_id())
        .await
        .unwrap()
        .expect("a sealed shard has a successor");
    assert_eq!(succession.sealed_at_sequence, 3);
    assert_eq!(succession.successor.policy, next);
    assert!(!succession.successor.sealed);
    assert_eq!(
        succession.successor.predecessor.as_ref(),
        Some(p.shard_id())
    );
    assert_eq!(succession.seam, PolicySeam::new(&p, &next).at(3));
    assert_eq!(h.source().successor(next.shard_id()).await.unwrap(), None);
    assert_eq!(
        kind_of(
            h.source()
                .successor(&SchedulerShardId::try_from("other-v1").unwrap())
                .await,
            "the successor of an unknown shard"
        ),
        SourceErrorKind::UnknownShard
    );
    check(&reserve(h, &next).await, &next, 0, false);
    // Registering the sealed shard's bytes again still answers idempotent.
    let (again, shard) = h.source().register(&p, None).await.unwrap();
    assert!(
        matches!(again, Registration::Idempotent { .. }),
        "{again:?}"
    );
    assert!(shard.sealed);
}

/// A range's slot outcomes are recorded once; a source that keeps none
/// ([`SourceHarness::keeps_evidence`]) answers no record.
pub async fn slot_outcomes_are_recorded_once<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    let batch = h
        .source()
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 4)
        .await
        .unwrap();
    assert_eq!(sequences(&batch), vec![0, 1, 2, 3]);
    let idle: SlotOutcomes = std::iter::repeat_n(SlotClass::Idle, 4).collect();
    let answers = h
        .source()
        .record_slot_outcomes(p.shard_id(), &[(0, idle.clone())])
        .await
        .unwrap();
    if !H::keeps_evidence() {
        assert_eq!(answers, Vec::new());
        return;
    }
    assert_eq!(
        answers,
        vec![SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Recorded)]
    );
    let contended: SlotOutcomes = std::iter::repeat_n(SlotClass::Contended, 4).collect();
    let three: SlotOutcomes = std::iter::repeat_n(SlotClass::Idle, 3).collect();
    let answers = h
        .source()
        .record_slot_outcomes(
            p.shard_id(),
            &[
                (0, idle.clone()),
                (0, contended),
                (1, three.clone()),
                (0, three),
            ],
        )
        .await
        .unwrap();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(
        answers[0],
        SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Replayed)
    );
    for (index, answer) in answers.iter().enumerate().skip(1) {
        assert!(
            matches!(answer, SlotOutcomeAnswer::Refused(_)),
            "record {index}: {answer:?}"
        );
    }
}

/// The oldest retained reservation of a shard is the first made (`None`
/// from a source that keeps none, [`SourceHarness::keeps_evidence`]).
pub async fn the_oldest_reservation_is_the_first<H: SourceHarness>(h: &H) {
    let p = primary();
    register(h, &p).await;
    assert_eq!(
        h.source().oldest_reservation(p.shard_id()).await.unwrap(),
        None
    );
    let first = reserve(h, &p).await;
    reserve(h, &p).await;
    let expected = H::keeps_evidence().then(|| first.reserved_at());
    assert_eq!(
        h.source().oldest_reservation(p.shard_id()).await.unwrap(),
        expected
    );
}
