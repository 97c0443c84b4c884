//! Shard succession (migration V8) against a real PostgreSQL: a rollout
//! seals the live shard at its cursor and registers its successor in one
//! transaction; the database refuses every other change to the chain,
//! whoever asks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_core::Registration;
use statek_policy::{PolicySeam, ScheduleId, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::fault_proxy::{Fault, FaultProxy};
use statek_store_pg::testing::{policy, TestDatabase};
use statek_store_pg::RolloutError;
use statek_store_pg::{PgStore, RoleProfile, StoreError};
use uuid::Uuid;

fn v1() -> WeightedFairnessPolicy {
    policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

fn v2() -> WeightedFairnessPolicy {
    policy(
        "primary-v2",
        &[("tenant-a", 1), ("tenant-b", 1), ("tenant-c", 2)],
    )
}

fn schedule(name: &str) -> ScheduleId {
    ScheduleId::try_from(name).unwrap()
}

async fn reserve_n(store: &PgStore, p: &WeightedFairnessPolicy, n: u64) {
    for expected in 0..n {
        let r = store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(r.sequence(), expected);
    }
}

/// The SQLSTATE of a failed statement.
fn code(result: Result<u64, tokio_postgres::Error>) -> String {
    let e = result.expect_err("the database refuses");
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

#[tokio::test]
async fn a_rollout_seals_at_the_cursor_and_the_successor_starts_at_zero() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (v1, v2) = (v1(), v2());
    store
        .register_in(&v1, Some(&schedule("primary")))
        .await
        .unwrap();
    reserve_n(&store, &v1, 5).await;
    let rollout = store
        .rollout(&v1, &v2, Some(&schedule("primary")))
        .await
        .unwrap();
    assert_eq!(rollout.sealed_at_sequence(), 5);
    assert_eq!(rollout.schedule().as_str(), "primary");
    assert_eq!(rollout.predecessor(), v1.shard_id());
    assert_eq!(rollout.successor(), v2.shard_id());
    assert!(!rollout.replayed());
    assert_eq!(rollout.seam(), PolicySeam::new(&v1, &v2).at(5).as_slice());
    assert!(rollout.leaving().is_empty());
    // v1's cycle is a a b a (SWRR 3:1): sequences 0..5 are a a b a a. v2's
    // cycle (a:1, b:1, c:2) starts c a b c (SWRR, ties by id). a: last pick
    // 4, first pick 1 -> (5 - 4) + 1 = 2; b: 2 and 2 -> 5; c joins at 0 -> 1.
    let gaps: Vec<(String, Option<u64>, u64, u64)> = rollout
        .seam()
        .iter()
        .map(|b| {
            (
                b.tenant().to_string(),
                b.last_pick_before_seal(),
                b.first_pick_after_seal(),
                b.reservations_across_seam(),
            )
        })
        .collect();
    let v2_cycle: Vec<String> = v2.cycle().iter().map(|t| t.to_string()).collect();
    assert_eq!(v2_cycle, ["tenant-c", "tenant-a", "tenant-b", "tenant-c"]);
    assert_eq!(
        gaps,
        [
            ("tenant-a".to_string(), Some(4), 1, 2),
            ("tenant-b".to_string(), Some(2), 2, 5),
            ("tenant-c".to_string(), None, 0, 1),
        ]
    );

    // The sealed shard takes nothing more; the error names the successor.
    match store
        .reserve(v1.shard_id(), &v1.digest(), Uuid::now_v7())
        .await
    {
        Err(StoreError::Rollout(RolloutError::ShardSealed {
            shard,
            sealed_at_sequence,
            successor,
        })) => {
            assert_eq!(
                (&shard, sealed_at_sequence, &successor),
                (v1.shard_id(), 5, v2.shard_id())
            );
        }
        other => panic!("expected ShardSealed, got {other:?}"),
    }
    match store
        .reserve_batch(v1.shard_id(), &v1.digest(), Uuid::now_v7(), 4)
        .await
    {
        Err(StoreError::Rollout(RolloutError::ShardSealed { successor, .. })) => {
            assert_eq!(&successor, v2.shard_id())
        }
        other => panic!("expected ShardSealed, got {other:?}"),
    }
    assert_eq!(store.next_sequence(v1.shard_id()).await.unwrap(), 5);
    // The successor starts at 0.
    let first = store
        .reserve(v2.shard_id(), &v2.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!((first.sequence(), first.slot()), (0, 0));

    let sealed = store.load_shard(v1.shard_id()).await.unwrap();
    let seal = sealed.seal().expect("sealed");
    assert_eq!(
        (seal.sealed_at_sequence(), seal.successor()),
        (5, v2.shard_id())
    );
    assert_eq!(sealed.schedule().as_str(), "primary");
    let successor = store.load_shard(v2.shard_id()).await.unwrap();
    assert_eq!(successor.predecessor(), Some(v1.shard_id()));
    assert_eq!(successor.schedule().as_str(), "primary");
    assert!(successor.seal().is_none());
    assert_eq!(
        store.live_shard(v1.shard_id()).await.unwrap(),
        *v2.shard_id()
    );
    assert_eq!(
        store.live_shard(v2.shard_id()).await.unwrap(),
        *v2.shard_id()
    );
    let seam = store.load_seam(v1.shard_id()).await.unwrap();
    assert_eq!(seam.sealed_at_sequence(), 5);
    assert_eq!(seam.seam(), rollout.seam());

    // A replay of the rollout (lost acknowledgement) answers the same seal.
    let again = store.rollout(&v1, &v2, None).await.unwrap();
    assert!(again.replayed());
    assert_eq!(again.sealed_at_sequence(), 5);
    assert_eq!(again.seam(), rollout.seam());

    // A replica started with v1's file re-registers idempotently.
    assert!(matches!(
        store
            .register_in(&v1, Some(&schedule("primary")))
            .await
            .unwrap(),
        Registration::Idempotent { .. }
    ));
    assert!(matches!(
        store.register(&v2).await.unwrap(),
        Registration::Idempotent { .. }
    ));
}

#[tokio::test]
async fn a_chain_of_any_length_and_the_typed_refusals_of_rollout_and_register() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let (v1, v2) = (v1(), v2());
    let v3 = policy("primary-v3", &[("tenant-b", 2), ("tenant-d", 1)]);
    // Registered without a schedule: the schedule named like the shard.
    store.register(&v1).await.unwrap();
    assert_eq!(
        store
            .load_shard(v1.shard_id())
            .await
            .unwrap()
            .schedule()
            .as_str(),
        "primary-v1"
    );
    reserve_n(&store, &v1, 3).await;
    let first = store.rollout(&v1, &v2, None).await.unwrap();
    assert_eq!(first.schedule().as_str(), "primary-v1");
    reserve_n(&store, &v2, 7).await;
    let second = store.rollout(&v2, &v3, None).await.unwrap();
    assert_eq!(second.sealed_at_sequence(), 7);
    assert_eq!(
        second.leaving(),
        [
            TenantId::try_from("tenant-a").unwrap(),
            TenantId::try_from("tenant-c").unwrap()
        ]
        .as_slice()
    );
    assert_eq!(
        store.live_shard(v1.shard_id()).await.unwrap(),
        *v3.shard_id()
    );

    // Rolling out from a sealed shard names the live one.
    let v4 = policy("primary-v4", &[("tenant-b", 1)]);
    match store.rollout(&v1, &v4, None).await {
        Err(StoreError::Rollout(RolloutError::NotLiveShard {
            shard,
            schedule,
            sealed_at_sequence,
            live,
        })) => {
            assert_eq!(
                (&shard, schedule.as_str(), sealed_at_sequence, &live),
                (v1.shard_id(), "primary-v1", 3, v3.shard_id())
            );
        }
        other => panic!("expected NotLiveShard, got {other:?}"),
    }
    // The successor must be new.
    match store.rollout(&v3, &v1, None).await {
        Err(StoreError::Rollout(RolloutError::SuccessorExists { shard })) => {
            assert_eq!(&shard, v1.shard_id())
        }
        other => panic!("expected SuccessorExists, got {other:?}"),
    }
    // A different chain.
    match store.rollout(&v3, &v4, Some(&schedule("other"))).await {
        Err(StoreError::Rollout(RolloutError::ScheduleConflict {
            shard,
            stored,
            offered,
        })) => assert_eq!(
            (&shard, stored.as_str(), offered.as_str()),
            (v3.shard_id(), "primary-v1", "other")
        ),
        other => panic!("expected ScheduleConflict, got {other:?}"),
    }
    // FROM.toml that is not what the shard holds.
    let not_v3 = policy("primary-v3", &[("tenant-b", 9)]);
    assert!(matches!(
        store.rollout(&not_v3, &v4, None).await,
        Err(StoreError::Rollout(RolloutError::PolicyConflict { .. }))
    ));
    let unknown = policy("nowhere", &[("tenant-b", 1)]);
    assert!(matches!(
        store.rollout(&unknown, &v4, None).await,
        Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
    ));
    assert!(matches!(
        store.rollout(&v3, &v3, None).await,
        Err(StoreError::InvalidArgument(_))
    ));
    // None of these wrote anything: v3 is live, v4 unregistered.
    assert!(store
        .load_shard(v3.shard_id())
        .await
        .unwrap()
        .seal()
        .is_none());
    assert!(matches!(
        store.load_shard(v4.shard_id()).await,
        Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
    ));

    // A second first shard of a schedule: refused, pointing at rollout.
    match store.register_in(&v4, Some(&schedule("primary-v1"))).await {
        Err(e @ StoreError::Rollout(RolloutError::ScheduleHasLiveShard { .. })) => {
            let StoreError::Rollout(RolloutError::ScheduleHasLiveShard { schedule, live }) = &e
            else {
                unreachable!()
            };
            assert_eq!((schedule.as_str(), live), ("primary-v1", v3.shard_id()));
            assert!(e.to_string().contains("statek rollout"), "{e}");
            assert!(!e.is_retryable());
        }
        other => panic!("expected ScheduleHasLiveShard, got {other:?}"),
    }
    // The same bytes into another schedule: a conflict, not idempotent.
    match store.register_in(&v2, Some(&schedule("elsewhere"))).await {
        Err(StoreError::Rollout(RolloutError::ScheduleConflict {
            stored, offered, ..
        })) => {
            assert_eq!(
                (stored.as_str(), offered.as_str()),
                ("primary-v1", "elsewhere")
            );
        }
        other => panic!("expected ScheduleConflict, got {other:?}"),
    }
    assert!(matches!(
        store.load_shard(v4.shard_id()).await,
        Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_rollouts_of_one_shard_one_wins() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let v1 = v1();
    store.register(&v1).await.unwrap();
    reserve_n(&store, &v1, 2).await;
    let mut live = v1.clone();
    for round in 0..5u64 {
        let a = policy(&format!("r{round}-a"), &[("tenant-a", 1), ("tenant-b", 2)]);
        let b = policy(&format!("r{round}-b"), &[("tenant-a", 2), ("tenant-b", 1)]);
        let (ra, rb) = tokio::join!(
            store.rollout(&live, &a, None),
            store.rollout(&live, &b, None)
        );
        let (winner, won, loser, lost) = match (ra, rb) {
            (Ok(w), Err(e)) => (w, a, b, e),
            (Err(e), Ok(w)) => (w, b, a, e),
            other => panic!("round {round}: exactly one must win, got {other:?}"),
        };
        match lost {
            StoreError::Rollout(RolloutError::NotLiveShard {
                shard, live: now, ..
            }) => {
                assert_eq!((&shard, &now), (live.shard_id(), won.shard_id()));
            }
            other => panic!("round {round}: expected NotLiveShard, got {other:?}"),
        }
        assert_eq!(winner.successor(), won.shard_id());
        // The loser changed nothing: its shard does not exist.
        assert!(matches!(
            store.load_shard(loser.shard_id()).await,
            Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
        ));
        let sealed = store.load_shard(live.shard_id()).await.unwrap();
        assert_eq!(sealed.seal().unwrap().successor(), won.shard_id());
        assert_eq!(
            store.live_shard(v1.shard_id()).await.unwrap(),
            *won.shard_id()
        );
        reserve_n(&store, &won, round + 1).await;
        live = won;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_before_the_seal_replays_to_its_original_sequence() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::start(db.pg_config()).await;
    let through_proxy = PgStore::new(
        statek_store_pg::testing::test_store_config(proxy.pg_config())
            .pool_size(1)
            .unwrap(),
    )
    .unwrap();
    let store = db.store();
    let (v1, v2) = (v1(), v2());
    store.register(&v1).await.unwrap();
    reserve_n(&store, &v1, 3).await;
    // Sequence 3 commits, its acknowledgement is lost.
    let single = Uuid::now_v7();
    proxy.arm(Fault::AfterCommit);
    let err = through_proxy
        .reserve(v1.shard_id(), &v1.digest(), single)
        .await
        .expect_err("the proxy cuts the connection after COMMIT");
    assert!(err.is_retryable(), "{err:?}");
    // A batch of 4 (sequences 4..8) likewise.
    let batch = Uuid::now_v7();
    proxy.arm(Fault::AfterCommit);
    through_proxy
        .reserve_batch(v1.shard_id(), &v1.digest(), batch, 4)
        .await
        .expect_err("the proxy cuts the connection after COMMIT");
    // One more is cut before its COMMIT reached the server: never written.
    let uncommitted = Uuid::now_v7();
    proxy.arm(Fault::BeforeCommit);
    through_proxy
        .reserve(v1.shard_id(), &v1.digest(), uncommitted)
        .await
        .expect_err("the proxy cuts the connection before COMMIT");
    assert_eq!(proxy.fired(), 3);
    assert!(!proxy.is_armed());
    let rollout = store.rollout(&v1, &v2, None).await.unwrap();
    assert_eq!(rollout.sealed_at_sequence(), 8);
    // Its retry after the seal is refused, typed, naming the successor.
    match store
        .reserve(v1.shard_id(), &v1.digest(), uncommitted)
        .await
    {
        Err(StoreError::Rollout(RolloutError::ShardSealed {
            successor,
            sealed_at_sequence: 8,
            ..
        })) => {
            assert_eq!(&successor, v2.shard_id());
        }
        other => panic!("expected ShardSealed, got {other:?}"),
    }
    // The retries after the seal find the originals.
    let replayed = store
        .reserve(v1.shard_id(), &v1.digest(), single)
        .await
        .unwrap();
    assert_eq!((replayed.sequence(), replayed.replayed()), (3, true));
    let replayed = store
        .reserve_batch(v1.shard_id(), &v1.digest(), batch, 4)
        .await
        .unwrap();
    assert_eq!(
        (
            replayed.first_sequence(),
            replayed.len(),
            replayed.replayed()
        ),
        (4, 4, true)
    );
    // A new id on the sealed shard is refused.
    assert!(matches!(
        store
            .reserve(v1.shard_id(), &v1.digest(), Uuid::now_v7())
            .await,
        Err(StoreError::Rollout(RolloutError::ShardSealed {
            sealed_at_sequence: 8,
            ..
        }))
    ));
}

/// Every refusal of the seal rules, by the database, as a superuser (the
/// test's own connection), as the owner role and as the runtime role.
#[tokio::test]
async fn the_database_refuses_every_other_change_to_a_chain_as_every_role() {
    let db = TestDatabase::create().await;
    let suffix = &db.name()["statek_test_".len()..];
    let (owner, runtime, retention) = (
        format!("so_{suffix}"),
        format!("srt_{suffix}"),
        format!("srn_{suffix}"),
    );
    let admin = db.client().await;
    for role in [&owner, &runtime, &retention] {
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN; GRANT CONNECT ON DATABASE {} TO {role}",
                db.name()
            ))
            .await
            .unwrap();
    }
    db.store()
        .apply_role_profile(&RoleProfile::new(&owner, &runtime, &retention).unwrap())
        .await
        .unwrap();
    let as_role = |role: &str| {
        let mut pg = db.pg_config().clone();
        pg.user(role);
        pg
    };
    let connect = |pg: tokio_postgres::Config| async move {
        let (client, connection) = pg.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    };
    let own = connect(as_role(&owner)).await;
    let rt = connect(as_role(&runtime)).await;
    let rt_store = PgStore::new(statek_store_pg::testing::test_store_config(as_role(
        &runtime,
    )))
    .unwrap();
    let own_store =
        PgStore::new(statek_store_pg::testing::test_store_config(as_role(&owner))).unwrap();

    let (v1, v2) = (v1(), v2());
    rt_store.register(&v1).await.unwrap();
    reserve_n(&rt_store, &v1, 4).await;
    // The runtime role registers and reserves but cannot seal.
    assert!(matches!(
        rt_store.rollout(&v1, &v2, None).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    assert_eq!(
        code(
            rt.execute(
                "UPDATE statek.scheduler_shards SET sealed_at_sequence = next_sequence, \
                 successor_id = 'x', seam_bounds = '[]' WHERE shard_id = 'primary-v1'",
                &[],
            )
            .await
        ),
        "42501"
    );

    for (who, client) in [("superuser", &admin), ("owner", &own)] {
        // A seal not at the cursor.
        assert_eq!(
            code(client.execute(
                "UPDATE statek.scheduler_shards SET sealed_at_sequence = next_sequence + 1, \
                 successor_id = 'ghost', seam_bounds = '[]' WHERE shard_id = 'primary-v1'",
                &[],
            ).await),
            "SK001",
            "{who}: seal off the cursor"
        );
        // A seal naming no successor, or without seam bounds.
        assert_eq!(
            code(
                client
                    .execute(
                        "UPDATE statek.scheduler_shards SET sealed_at_sequence = next_sequence \
                 WHERE shard_id = 'primary-v1'",
                        &[],
                    )
                    .await
            ),
            "SK001",
            "{who}: seal columns in part"
        );
        // The seal columns without the seal sequence.
        assert_eq!(
            code(client.execute(
                "UPDATE statek.scheduler_shards SET successor_id = 'ghost', next_sequence = next_sequence + 1 \
                 WHERE shard_id = 'primary-v1'",
                &[],
            ).await),
            "SK001",
            "{who}: successor without a seal"
        );
        // A seal whose successor is not registered by its transaction:
        // refused at commit by the deferred foreign key.
        let refused = client
            .batch_execute(
                "BEGIN; UPDATE statek.scheduler_shards SET sealed_at_sequence = next_sequence, \
                 successor_id = 'ghost', seam_bounds = '[]' WHERE shard_id = 'primary-v1'; COMMIT",
            )
            .await
            .expect_err("commit refused");
        assert_eq!(
            refused.code().map(|c| c.code()),
            Some("23503"),
            "{who}: {refused}"
        );
        let _ = client.batch_execute("ROLLBACK").await;
        // A successor of a live shard.
        assert_eq!(
            code(client.execute(
                "INSERT INTO statek.scheduler_shards (shard_id, policy_bytes, policy_digest, \
                 cycle_length, cycle_digest, predecessor_id) \
                 SELECT 'primary-x', policy_bytes, policy_digest, cycle_length, cycle_digest, \
                 'primary-v1' FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
                &[],
            ).await),
            "SK001",
            "{who}: successor of a live shard"
        );
        // A second first shard of the schedule.
        assert_eq!(
            code(client.execute(
                "INSERT INTO statek.scheduler_shards (shard_id, policy_bytes, policy_digest, \
                 cycle_length, cycle_digest, schedule_id) \
                 SELECT 'primary-y', policy_bytes, policy_digest, cycle_length, cycle_digest, \
                 'primary-v1' FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
                &[],
            ).await),
            "23505",
            "{who}: second first shard"
        );
        // Born sealed.
        assert_eq!(
            code(client.execute(
                "INSERT INTO statek.scheduler_shards (shard_id, policy_bytes, policy_digest, \
                 cycle_length, cycle_digest, sealed_at_sequence, successor_id, sealed_at, seam_bounds) \
                 SELECT 'primary-z', policy_bytes, policy_digest, cycle_length, cycle_digest, \
                 0, 'primary-v1', now(), '[]' FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
                &[],
            ).await),
            "SK001",
            "{who}: born sealed"
        );
    }

    // The owner seals (through the store), then nobody changes the seal.
    let rollout = own_store.rollout(&v1, &v2, None).await.unwrap();
    assert_eq!(rollout.sealed_at_sequence(), 4);
    for (who, client) in [("superuser", &admin), ("owner", &own)] {
        for (what, sql) in [
            (
                "unseal",
                "UPDATE statek.scheduler_shards SET sealed_at_sequence = NULL, successor_id = NULL, \
                 sealed_at = NULL, seam_bounds = NULL WHERE shard_id = 'primary-v1'",
            ),
            (
                "reseal",
                "UPDATE statek.scheduler_shards SET successor_id = 'primary-v3' WHERE shard_id = 'primary-v1'",
            ),
            (
                "move a sealed cursor",
                "UPDATE statek.scheduler_shards SET next_sequence = next_sequence + 1 WHERE shard_id = 'primary-v1'",
            ),
            (
                "change the seam bounds",
                "UPDATE statek.scheduler_shards SET seam_bounds = '[]' WHERE shard_id = 'primary-v1'",
            ),
            (
                "move the successor to another schedule",
                "UPDATE statek.scheduler_shards SET schedule_id = 'other', next_sequence = next_sequence + 1 \
                 WHERE shard_id = 'primary-v2'",
            ),
            (
                "a reservation row on the sealed shard",
                "INSERT INTO statek.scheduler_reservations (reservation_id, shard_id, sequence, slot, policy_digest) \
                 SELECT gen_random_uuid(), shard_id, next_sequence, 0, policy_digest \
                 FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            ),
            (
                "a second successor",
                "INSERT INTO statek.scheduler_shards (shard_id, policy_bytes, policy_digest, \
                 cycle_length, cycle_digest, predecessor_id, schedule_id) \
                 SELECT 'primary-w', policy_bytes, policy_digest, cycle_length, cycle_digest, \
                 'primary-v1', 'primary-v1' FROM statek.scheduler_shards WHERE shard_id = 'primary-v2'",
            ),
            (
                "delete the sealed shard",
                "DELETE FROM statek.scheduler_shards WHERE shard_id = 'primary-v1'",
            ),
        ] {
            let got = code(client.execute(sql, &[]).await);
            assert!(
                got == "SK001" || (what == "a second successor" && got == "23505"),
                "{who}: {what}: got SQLSTATE {got}"
            );
        }
    }
    // The runtime role reserves on the successor from 0; not on v1.
    let r = rt_store
        .reserve(v2.shard_id(), &v2.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(r.sequence(), 0);
    assert!(matches!(
        rt_store
            .reserve(v1.shard_id(), &v1.digest(), Uuid::now_v7())
            .await,
        Err(StoreError::Rollout(RolloutError::ShardSealed {
            sealed_at_sequence: 4,
            ..
        }))
    ));
    let loaded = rt_store.load_seam(v1.shard_id()).await.unwrap();
    assert_eq!(loaded.seam(), rollout.seam());
}

/// Two rollouts in a row, the second before the middle shard ever picked a
/// tenant (found by a helper trying to break it): the tenant's gap runs on
/// from its last pick in the first shard, and the stored seam bound says so
/// (19, not the 10 of counting from the middle shard's start).
#[tokio::test]
async fn a_seam_after_a_shard_that_never_picked_the_tenant_carries_its_open_gap() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let ten: Vec<(&str, u32)> = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "z"]
        .into_iter()
        .map(|t| (t, 1))
        .collect();
    let (s1, s2, s3) = (
        policy("s-v1", &ten),
        policy("s-v2", &[("z", 1)]),
        policy("s-v3", &ten),
    );
    store.register(&s1).await.unwrap();
    reserve_n(&store, &s1, 19).await;
    let first = store.rollout(&s1, &s2, None).await.unwrap();
    assert_eq!(first.seam()[0].reservations_across_seam(), 10);
    let second = store.rollout(&s2, &s3, None).await.unwrap();
    assert_eq!(second.sealed_at_sequence(), 0);
    let z = second
        .seam()
        .iter()
        .find(|b| b.tenant().as_str() == "z")
        .unwrap();
    // z: last picked at s-v1's 9; s-v2 sealed at 0 (19 + 0); first in s-v3
    // at 9: positions 9 and 28.
    assert_eq!(
        (z.last_pick_before_seal(), z.reservations_across_seam()),
        (None, 19)
    );
    // A tenant new in s-v3 is counted from the seam.
    let k1 = second
        .seam()
        .iter()
        .find(|b| b.tenant().as_str() == "k1")
        .unwrap();
    assert!(k1.joining());
    assert_eq!(
        k1.reservations_across_seam(),
        k1.first_pick_after_seal() + 1
    );
    // Read back fail-closed with the same carry.
    assert_eq!(
        store.load_seam(s2.shard_id()).await.unwrap().seam(),
        second.seam()
    );
}
