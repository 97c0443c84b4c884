//! Durable commits and failover detection against a real server.
//!
//! The test servers run with `fsync`, `synchronous_commit` and
//! `full_page_writes` off (fast, not durable): the durability check must
//! see exactly that, statek's own sessions must still commit with
//! `synchronous_commit = on`, and the default policy must refuse. A
//! failover is simulated by replacing `statek.server_timeline()` as the
//! superuser (the real promotion is tested by `cargo xtask test`'s failover
//! step): reservations acknowledged before it and then lost are reported
//! with their ids and sequences.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::DurabilityError;
use statek_store_pg::{
    DurabilityPolicy, DurabilityRisk, HaltCause, LossEvidence, LostReservationAction,
    LostReservations, PgStore, StoreConfig, StoreError, SynchronousCommit,
};
use uuid::Uuid;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

fn store(db: &TestDatabase, config: impl FnOnce(StoreConfig) -> StoreConfig) -> PgStore {
    PgStore::new(config(StoreConfig::from_pg_config(db.pg_config().clone()))).unwrap()
}

async fn shard_rows(db: &TestDatabase) -> i64 {
    db.client()
        .await
        .query_one("SELECT count(*) FROM statek.scheduler_shards", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_check_sees_the_test_servers_fast_settings_and_the_default_refuses_them() {
    let db = TestDatabase::create().await;
    // The server's own default (a plain session) is off ...
    let plain: String = db
        .client()
        .await
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(plain, "off");

    // ... but statek's session commits with `on`.
    let strict = store(&db, |c| c);
    let report = strict.durability_report().await.unwrap();
    assert!(!report.fsync);
    assert!(!report.full_page_writes);
    assert_eq!(report.synchronous_commit, SynchronousCommit::On);
    assert_eq!(report.standbys, vec![]);
    assert_eq!(report.hidden_walsenders, 0);
    assert_eq!(report.timeline, Some(1));
    assert_eq!(
        report.risks(),
        vec![DurabilityRisk::FsyncOff, DurabilityRisk::FullPageWritesOff]
    );

    // The default policy refuses registration, and writes nothing.
    match strict.register(&policy()).await {
        Err(e @ StoreError::Durability(DurabilityError::Refused { .. })) => {
            assert!(!e.is_retryable());
            assert_eq!(
                e.to_string(),
                "the server can lose acknowledged reservations: fsync is off: an \
                 operating-system crash can lose acknowledged reservations; full_page_writes is \
                 off: an operating-system crash can corrupt acknowledged reservations"
            );
        }
        other => panic!("expected DurabilityRefused, got {other:?}"),
    }
    assert_eq!(shard_rows(&db).await, 0);
    // Allowing asynchronous standbys does not allow fsync = off.
    let standbys_ok = store(&db, |c| {
        c.durability_policy(DurabilityPolicy::AllowAsynchronousStandbys)
    });
    assert!(matches!(
        standbys_ok.register(&policy()).await,
        Err(StoreError::Durability(DurabilityError::Refused { ref risks, .. })) if risks.len() == 2
    ));
    assert_eq!(shard_rows(&db).await, 0);

    // The explicit opt-in registers and reports the same facts.
    let fast = store(&db, |c| {
        c.durability_policy(DurabilityPolicy::AllowNoDurability)
    });
    fast.register(&policy()).await.unwrap();
    assert_eq!(shard_rows(&db).await, 1);
    assert_eq!(fast.ensure_durable().await.unwrap(), report);
}

#[tokio::test]
async fn a_session_without_flush_is_a_risk_and_reservations_set_their_own_level() {
    let db = TestDatabase::create().await;
    let off = store(&db, |c| {
        c.synchronous_commit(SynchronousCommit::Off)
            .durability_policy(DurabilityPolicy::AllowAsynchronousStandbys)
    });
    let report = off.durability_report().await.unwrap();
    assert_eq!(report.synchronous_commit, SynchronousCommit::Off);
    assert_eq!(
        report.risks()[2],
        DurabilityRisk::SynchronousCommitOff {
            setting: "off".to_owned()
        }
    );
    assert!(matches!(
        off.register(&policy()).await,
        Err(StoreError::Durability(DurabilityError::Refused { ref risks, .. })) if risks.len() == 3
    ));

    // The reservation function sets the level for its own transaction,
    // whatever the session says (as behind PgBouncer in transaction mode,
    // where session settings do not stick).
    let fast = store(&db, |c| {
        c.durability_policy(DurabilityPolicy::AllowNoDurability)
    });
    let p = policy();
    fast.register(&p).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute("SET synchronous_commit = off")
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT synchronous_commit, sequence FROM statek.reserve($1, $2, $3, NULL, 'remote_apply')",
            &[&Uuid::now_v7(), &p.shard_id().as_str(), &&p.digest().as_bytes()[..]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "remote_apply");
    assert_eq!(row.get::<_, i64>(1), 0);
    // It stays in force after the function returns, up to the commit (the
    // function's own `SET search_path` clause does not revert it).
    client
        .batch_execute("BEGIN; SET LOCAL synchronous_commit = off")
        .await
        .unwrap();
    client
        .query_one(
            "SELECT sequence FROM statek.reserve($1, $2, $3, NULL, 'remote_write')",
            &[
                &Uuid::now_v7(),
                &p.shard_id().as_str(),
                &&p.digest().as_bytes()[..],
            ],
        )
        .await
        .unwrap();
    let at_commit: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(at_commit, "remote_write");
    client.batch_execute("COMMIT").await.unwrap();
    // The transaction's setting ended with it.
    let after: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, "off");
    let r = fast
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((r.sequence(), r.timeline()), (2, Some(1)));
}

/// Moves the server to `timeline` as far as statek can tell (what a
/// promotion does to `pg_walfile_name(pg_current_wal_lsn())`).
async fn fake_timeline(db: &TestDatabase, timeline: i32) {
    db.client()
        .await
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION statek.server_timeline() RETURNS integer
             LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
             AS $$ SELECT {timeline} $$"
        ))
        .await
        .unwrap();
}

/// What an asynchronous standby promoted without the last commits holds:
/// the rows from `from_sequence` on are gone and the cursor is back there.
async fn lose_from(db: &TestDatabase, from_sequence: i64) {
    db.client()
        .await
        .batch_execute(&format!(
            "SET session_replication_role = replica;
             DELETE FROM statek.scheduler_reservations WHERE sequence >= {from_sequence};
             UPDATE statek.scheduler_shards SET next_sequence = {from_sequence};
             RESET session_replication_role;"
        ))
        .await
        .unwrap();
}

/// The lost reservations of a report as (id, sequence, count, evidence).
fn lost_entries(lost: &LostReservations) -> Vec<(Uuid, u64, u32, LossEvidence)> {
    lost.lost
        .iter()
        .map(|l| {
            (
                l.reservation_id,
                l.acknowledged_sequence,
                l.count,
                l.evidence,
            )
        })
        .collect()
}

fn fast_store(db: &TestDatabase, action: LostReservationAction) -> PgStore {
    store(db, |c| {
        c.durability_policy(DurabilityPolicy::AllowNoDurability)
            .on_lost_reservations(action)
    })
}

#[tokio::test]
async fn acknowledged_reservations_lost_in_a_failover_are_reported_and_halt_the_shard() {
    let db = TestDatabase::create().await;
    let p = policy();
    let replica = fast_store(&db, LostReservationAction::Halt);
    replica.register(&p).await.unwrap();
    // Another replica reserved sequence 0 on the old timeline (kept).
    let other = fast_store(&db, LostReservationAction::Halt);
    other
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    let mut acknowledged = Vec::new();
    for _ in 0..4 {
        let r = replica
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        acknowledged.push((r.id(), r.sequence()));
    }
    let batch = replica
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 3)
        .await
        .unwrap();
    assert_eq!(batch.first_sequence(), 5);

    // The failover loses sequences 3..8; the other replica re-reads its
    // own ring (all there), adopts timeline 2 and gets sequence 3 again.
    lose_from(&db, 3).await;
    fake_timeline(&db, 2).await;
    let reissued = other
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((reissued.sequence(), reissued.timeline()), (3, Some(2)));

    // The first replica checks its ring before it reserves on timeline 2.
    let err = replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    let StoreError::Durability(DurabilityError::ReservationsLostInFailover(lost)) = &err else {
        panic!("expected ReservationsLostInFailover, got {err:?}");
    };
    assert_eq!((lost.from_timeline, lost.to_timeline), (1, 2));
    assert_eq!(lost.checked, 5);
    let found = lost_entries(lost);
    let expected = vec![
        (
            acknowledged[2].0,
            3,
            1,
            LossEvidence::Reissued {
                reservation_id: reissued.id(),
            },
        ),
        (acknowledged[3].0, 4, 1, LossEvidence::Missing),
        (batch.batch_id(), 5, 3, LossEvidence::Missing),
    ];
    assert_eq!(found, expected);
    assert!(err.to_string().contains(&format!(
        "{} at sequence 3 (now held by {})",
        acknowledged[2].0,
        reissued.id()
    )));
    // Recorded in the database: the shard is halted for every store, this
    // one, the other, and a new one.
    let halts = replica.shard_halts(p.shard_id()).await.unwrap();
    assert_eq!(halts.len(), 1);
    assert_eq!(halts[0].cause, HaltCause::Lost);
    assert_eq!((halts[0].from_timeline, halts[0].to_timeline), (1, 2));
    assert_eq!(halts[0].checked, 5);
    assert_eq!(halts[0].cursor_at_detection, 4);
    assert!(halts[0].is_open());
    let recorded: Vec<_> = halts[0]
        .lost
        .iter()
        .map(|l| {
            (
                l.reservation_id,
                l.acknowledged_sequence,
                l.count,
                l.evidence,
            )
        })
        .collect();
    assert_eq!(recorded, expected);
    let fresh = fast_store(&db, LostReservationAction::Halt);
    for store in [&replica, &other, &fresh] {
        assert!(matches!(
            store
                .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
                .await,
            Err(StoreError::Durability(DurabilityError::ShardHalted(_)))
        ));
        assert!(matches!(
            store
                .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 2)
                .await,
            Err(StoreError::Durability(DurabilityError::ShardHalted(_)))
        ));
    }
    assert_eq!(replica.next_sequence(p.shard_id()).await.unwrap(), 4);
}

/// An acknowledged id found at another sequence on the new primary (a
/// second process reserved with the same id after the failover) is lost
/// as `Moved`.
#[tokio::test]
async fn an_acknowledged_id_found_at_another_sequence_is_reported_as_moved() {
    let db = TestDatabase::create().await;
    let p = policy();
    let replica = fast_store(&db, LostReservationAction::Halt);
    replica.register(&p).await.unwrap();
    let other = fast_store(&db, LostReservationAction::Halt);
    other
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            replica
                .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
                .await
                .unwrap()
                .id(),
        );
    }
    // Sequences 2 and 3 are lost; the other replica then reserves with
    // the id the first one had acknowledged at 3, and gets 2.
    lose_from(&db, 2).await;
    fake_timeline(&db, 2).await;
    let moved = other
        .reserve(p.shard_id(), &p.digest(), ids[2])
        .await
        .unwrap();
    assert_eq!((moved.sequence(), moved.replayed()), (2, false));
    let err = replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap_err();
    let StoreError::Durability(DurabilityError::ReservationsLostInFailover(lost)) = &err else {
        panic!("expected ReservationsLostInFailover, got {err:?}");
    };
    assert_eq!(
        lost_entries(lost),
        vec![
            (
                ids[1],
                2,
                1,
                LossEvidence::Reissued {
                    reservation_id: ids[2]
                }
            ),
            (ids[2], 3, 1, LossEvidence::Moved { sequence: 2 }),
        ]
    );
    assert!(err
        .to_string()
        .contains(&format!("{} at sequence 3 (now at sequence 2)", ids[2])));
    let halts = other.shard_halts(p.shard_id()).await.unwrap();
    assert_eq!(
        halts[0].lost[1].evidence,
        LossEvidence::Moved { sequence: 2 }
    );
}

#[tokio::test]
async fn a_failover_that_lost_nothing_goes_on_and_pruned_rows_are_not_losses() {
    let db = TestDatabase::create().await;
    let p = policy();
    let replica = fast_store(&db, LostReservationAction::Halt);
    replica.register(&p).await.unwrap();
    for _ in 0..5 {
        replica
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    // The database keeps rows for an hour: even the superuser's plain
    // DELETE of a fresh row is refused.
    let young = db
        .client()
        .await
        .batch_execute("DELETE FROM statek.scheduler_reservations WHERE sequence < 2")
        .await
        .unwrap_err();
    assert_eq!(young.code().map(|c| c.code()), Some("SK001"), "{young}");
    // Retention pruned sequences 0 and 1 (as if they were old enough:
    // below the cursor, nobody holds them); the promoted server has
    // everything else.
    db.client()
        .await
        .batch_execute(
            "SET session_replication_role = replica;
             DELETE FROM statek.scheduler_reservations WHERE sequence < 2;
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    fake_timeline(&db, 7).await;
    let next = replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((next.sequence(), next.timeline()), (5, Some(7)));
}

#[tokio::test]
async fn continue_reports_the_loss_once_and_reserves_on_the_new_timeline() {
    let db = TestDatabase::create().await;
    let p = policy();
    let replica = fast_store(&db, LostReservationAction::Continue);
    replica.register(&p).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            replica
                .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
                .await
                .unwrap()
                .id(),
        );
    }
    lose_from(&db, 1).await;
    fake_timeline(&db, 3).await;
    match replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
    {
        Err(StoreError::Durability(DurabilityError::ReservationsLostInFailover(lost))) => {
            let lost_ids: Vec<Uuid> = lost.lost.iter().map(|l| l.reservation_id).collect();
            assert_eq!(lost_ids, ids[1..].to_vec());
        }
        other => panic!("expected ReservationsLostInFailover, got {other:?}"),
    }
    let next = replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((next.sequence(), next.timeline()), (1, Some(3)));
}

/// A lost sequence handed out again inside another replica's batch is held
/// by that batch's range row, not missing, and never taken for pruned.
#[tokio::test]
async fn a_lost_reservation_reissued_inside_a_range_is_reported_with_its_holder() {
    let db = TestDatabase::create().await;
    let p = policy();
    let replica = fast_store(&db, LostReservationAction::Halt);
    replica.register(&p).await.unwrap();
    let other = fast_store(&db, LostReservationAction::Halt);
    other
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    let mut acknowledged = Vec::new();
    for _ in 0..4 {
        let r = replica
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        acknowledged.push(r.id());
    }
    let batch = replica
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 2)
        .await
        .unwrap();
    assert_eq!(batch.first_sequence(), 5);

    // Sequences 3..7 are lost; the other replica's batch takes 3..8.
    lose_from(&db, 3).await;
    fake_timeline(&db, 2).await;
    let range = other
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 5)
        .await
        .unwrap();
    assert_eq!((range.first_sequence(), range.len()), (3, 5));

    let err = replica
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap_err();
    let StoreError::Durability(DurabilityError::ReservationsLostInFailover(lost)) = &err else {
        panic!("expected ReservationsLostInFailover, got {err:?}");
    };
    let held_by = LossEvidence::Reissued {
        reservation_id: range.batch_id(),
    };
    let found = lost_entries(lost);
    assert_eq!(
        found,
        vec![
            (acknowledged[2], 3, 1, held_by),
            (acknowledged[3], 4, 1, held_by),
            (batch.batch_id(), 5, 2, held_by),
        ]
    );
    assert_eq!(lost.checked, 5);
}
