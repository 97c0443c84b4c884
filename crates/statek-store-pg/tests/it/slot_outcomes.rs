//! Slot outcome records (migration V14): one record per reserved range,
//! written once through `statek.record_slot_outcomes`, refused when it
//! does not cover exactly a retained range or hides a claimed slot, never
//! changed, and gone only with its range.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::RunQueueError;
use std::time::Duration;

use statek_core::{SlotClass, SlotOutcomeAnswer, SlotOutcomes, SlotOutcomesRecorded};
use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{reserve_next_slots, TestDatabase};
use statek_store_pg::{NewRun, SchedulerFairnessRetentionPolicy, SlotClaim, StoreError};

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 2), ("tenant-b", 1)])
}

fn outcomes(runs: &[(SlotClass, u32)]) -> SlotOutcomes {
    let mut outcomes = SlotOutcomes::new();
    for (class, count) in runs {
        outcomes.push(*class, *count);
    }
    outcomes
}

fn refusal(result: Result<SlotOutcomesRecorded, StoreError>) -> String {
    match result {
        Err(StoreError::RunQueue(RunQueueError::ClaimRefused { message })) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_range_is_recorded_once_and_a_claimed_slot_cannot_be_hidden() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), b"a1".to_vec()))
        .await
        .unwrap();
    // One range of 6 slots (0..6); a claim for the first slot takes a's run.
    let slots = reserve_next_slots(&store, &p, 6).await;
    let first_a = slots.iter().find(|(_, t)| *t == a).unwrap().0;
    let claims = store
        .claim_runs_for_slots(&[(first_a, a.clone())], shard, LEASE)
        .await
        .unwrap();
    assert!(matches!(claims.as_slice(), [SlotClaim::Claimed(_)]));
    let before = (0..first_a).count() as u32;
    let after = 5 - before;
    let honest = outcomes(&[
        (SlotClass::IdleKnown, before),
        (SlotClass::Claimed, 1),
        (SlotClass::Idle, after),
    ]);

    // The claimed slot called idle is refused, whatever else is right.
    let hidden = outcomes(&[(SlotClass::IdleKnown, before), (SlotClass::Idle, 1 + after)]);
    assert_eq!(
        refusal(store.record_slot_outcomes(shard, 0, &hidden).await),
        format!(
            "statek: slot {first_a} of shard primary-v1 claimed a run but the record calls it i"
        )
    );
    // A record must cover exactly one retained range.
    assert_eq!(
        refusal(
            store
                .record_slot_outcomes(shard, 0, &outcomes(&[(SlotClass::Claimed, 5)]))
                .await
        ),
        "statek: the reservation range of shard primary-v1 at sequence 0 holds 6 slots, the record names 5"
    );
    assert_eq!(
        refusal(
            store
                .record_slot_outcomes(shard, 1, &outcomes(&[(SlotClass::Claimed, 5)]))
                .await
        ),
        "statek: shard primary-v1 has no retained reservation range starting at sequence 1"
    );
    assert!(matches!(
        store
            .record_slot_outcomes(shard, 0, &SlotOutcomes::new())
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(
        store.slot_outcomes(shard, 0, 10).await.unwrap(),
        Vec::new(),
        "nothing of the refused records is kept"
    );

    assert_eq!(
        store.record_slot_outcomes(shard, 0, &honest).await.unwrap(),
        SlotOutcomesRecorded::Recorded
    );
    assert_eq!(
        store.record_slot_outcomes(shard, 0, &honest).await.unwrap(),
        SlotOutcomesRecorded::Replayed
    );
    let other = outcomes(&[
        (SlotClass::IdleKnown, before),
        (SlotClass::Claimed, 1),
        (SlotClass::Unused, after),
    ]);
    assert_eq!(
        refusal(store.record_slot_outcomes(shard, 0, &other).await),
        "statek: the reservation range of shard primary-v1 at sequence 0 already has another outcome record"
    );
    let read = store.slot_outcomes(shard, 0, 10).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].first_sequence, 0);
    assert_eq!(read[0].outcomes, honest);
    assert_eq!(store.slot_outcomes(shard, 1, 10).await.unwrap(), Vec::new());
    assert!(matches!(
        store.slot_outcomes(shard, 0, 0).await,
        Err(StoreError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_record_never_changes_and_goes_only_with_its_range() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    // Ranges 0..4 and 4..7.
    reserve_next_slots(&store, &p, 4).await;
    reserve_next_slots(&store, &p, 3).await;
    store
        .record_slot_outcomes(shard, 0, &outcomes(&[(SlotClass::IdleKnown, 4)]))
        .await
        .unwrap();
    store
        .record_slot_outcomes(
            shard,
            4,
            &outcomes(&[(SlotClass::Contended, 1), (SlotClass::Limited, 2)]),
        )
        .await
        .unwrap();
    let client = db.client().await;
    // The owner itself cannot change or delete a record of a retained range.
    let update = client
        .execute(
            "UPDATE statek.slot_outcomes SET classes = 'c' WHERE first_sequence = 0",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        update.as_db_error().unwrap().message(),
        "statek: a slot outcome record never changes (shard primary-v1, first sequence 0)"
    );
    let delete = client
        .execute(
            "DELETE FROM statek.slot_outcomes WHERE first_sequence = 4",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        delete.as_db_error().unwrap().message(),
        "statek: the slot outcome record of shard primary-v1 at sequence 4 goes only with its reservation range"
    );
    // Malformed rows are refused by the table itself.
    let malformed = client
        .execute(
            "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts)
             VALUES ('primary-v1', 4, 3, 'cc', '{1,2}')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        malformed.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );

    // Pruning the first range (back-dated past the window) takes its
    // record with it; the second stays.
    client
        .batch_execute(
            "ALTER TABLE statek.scheduler_reservations DISABLE TRIGGER scheduler_reservations_immutable;
             UPDATE statek.scheduler_reservations SET reserved_at = now() - interval '2 days'
              WHERE sequence = 0;
             ALTER TABLE statek.scheduler_reservations ENABLE TRIGGER scheduler_reservations_immutable;",
        )
        .await
        .unwrap();
    let retention =
        SchedulerFairnessRetentionPolicy::new(Duration::from_secs(86_400), 100).unwrap();
    let report = store
        .prune_scheduler_fairness_reservations(&retention)
        .await
        .unwrap();
    assert_eq!(report.deleted, 1);
    let left: Vec<(i64, String)> = client
        .query(
            "SELECT first_sequence, classes FROM statek.slot_outcomes ORDER BY first_sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(left, vec![(4, "nl".to_owned())]);
}

#[tokio::test]
async fn one_call_records_many_ranges_and_answers_each() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    // Ranges 0..3, 3..5 and 5..9.
    reserve_next_slots(&store, &p, 3).await;
    reserve_next_slots(&store, &p, 2).await;
    reserve_next_slots(&store, &p, 4).await;
    let first = outcomes(&[(SlotClass::Idle, 3)]);
    store.record_slot_outcomes(shard, 0, &first).await.unwrap();
    let answers = store
        .record_slot_outcome_ranges(
            shard,
            &[
                (0, first.clone()),
                (
                    3,
                    outcomes(&[(SlotClass::Limited, 1), (SlotClass::IdleKnown, 1)]),
                ),
                (5, outcomes(&[(SlotClass::Unused, 3)])),
                (9, outcomes(&[(SlotClass::Idle, 1)])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        answers,
        [
            SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Replayed),
            SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Recorded),
            SlotOutcomeAnswer::Refused(
                "statek: the reservation range of shard primary-v1 at sequence 5 holds 4 slots, the record names 3"
                    .to_owned()
            ),
            SlotOutcomeAnswer::Refused(
                "statek: shard primary-v1 has no retained reservation range starting at sequence 9"
                    .to_owned()
            ),
        ]
    );
    let kept: Vec<u64> = store
        .slot_outcomes(shard, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.first_sequence)
        .collect();
    assert_eq!(kept, [0, 3]);
    assert!(matches!(
        store.record_slot_outcome_ranges(shard, &[]).await,
        Err(StoreError::InvalidArgument(_))
    ));
    // A malformed call as a whole is refused (SK002) before any record.
    let client = db.client().await;
    let err = client
        .query(
            "SELECT * FROM statek.record_slot_outcomes('primary-v1', '{5}', '{x}', '{1}', '{4,1}')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("SK002"));
    // Malformed classes are answered, not written.
    let err_answer: Vec<String> = client
        .query(
            "SELECT status FROM statek.record_slot_outcomes('primary-v1', '{5}', '{xx}', '{2}', '{2,2}')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        err_answer,
        ["refused: statek: classes xx with 2 counts are not runs of the letters c, i, k, n, l, d, x, adjacent runs differing, each at least 1 slot"]
    );
}

/// The table checks every new row itself, whoever inserts it (the owner
/// too), and sets its time; records are made at read committed only.
#[tokio::test]
async fn the_table_checks_a_record_inserted_by_hand() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    let a = tenant("tenant-a");
    store
        .enqueue(&NewRun::new(a.clone(), b"a1".to_vec()))
        .await
        .unwrap();
    // Range 0..3 (a, a, b); a's first slot claims its run.
    reserve_next_slots(&store, &p, 3).await;
    let first_a = (0..3u64)
        .find(|s| p.tenant_for_slot(*s) == Some(&a))
        .unwrap();
    store
        .claim_runs_for_slots(&[(first_a, a.clone())], shard, LEASE)
        .await
        .unwrap();
    let client = db.client().await;
    let insert = |sql: &'static str| {
        let client = &client;
        async move { client.execute(sql, &[]).await }
    };
    let hidden = insert(
        "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts)
         VALUES ('primary-v1', 0, 3, 'k', '{3}')",
    )
    .await
    .unwrap_err();
    assert_eq!(
        hidden.as_db_error().unwrap().message(),
        format!(
            "statek: slot {first_a} of shard primary-v1 claimed a run; its record must call it c"
        )
    );
    let short = insert(
        "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts)
         VALUES ('primary-v1', 0, 2, 'i', '{2}')",
    )
    .await
    .unwrap_err();
    assert_eq!(
        short.as_db_error().unwrap().message(),
        "statek: a slot outcome record covers exactly one retained reservation range (shard primary-v1, sequence 0)"
    );
    // A well-formed record by hand is kept, with the database's time.
    let classes = match first_a {
        0 => "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts, recorded_at)
              VALUES ('primary-v1', 0, 3, 'ci', '{1,2}', '2000-01-01')",
        1 => "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts, recorded_at)
              VALUES ('primary-v1', 0, 3, 'ici', '{1,1,1}', '2000-01-01')",
        _ => "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts, recorded_at)
              VALUES ('primary-v1', 0, 3, 'ic', '{2,1}', '2000-01-01')",
    };
    assert_eq!(insert(classes).await.unwrap(), 1);
    let recent: bool = client
        .query_one(
            "SELECT recorded_at > now() - interval '1 minute' FROM statek.slot_outcomes",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(recent);
    // Not at another isolation level.
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        client
            .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}"))
            .await
            .unwrap();
        let err = client
            .query(
                "SELECT * FROM statek.record_slot_outcomes('primary-v1', '{0}', '{i}', '{1}', '{3}')",
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.as_db_error().unwrap().message(),
            format!(
                "statek: slot outcomes must be recorded at read committed, not {}",
                level.to_lowercase()
            )
        );
        client.batch_execute("ROLLBACK").await.unwrap();
    }
}
