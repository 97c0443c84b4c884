//! The durable halt (migration V10) against a real PostgreSQL: a recorded
//! reservation loss halts the shard for every store, restarted ones
//! included, until the owner resumes it; halts and resumes are evidence no
//! role changes; a store that reserves first after the shard's last
//! timeline changed halts the shard as unverified.
//!
//! The real failover (a standby promoted, reservations really lost) is
//! `cargo xtask failover`; here the loss is recorded through the database's
//! own function, as a store's `failover.rs` does after its re-read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{SchedulerShardId, WeightedFairnessPolicy};
use statek_store_pg::testing::{test_store_config, TestDatabase};
use statek_store_pg::{DurabilityError, RolloutError};
use statek_store_pg::{
    HaltCause, LossEvidence, PgStore, ReissuedRange, RoleProfile, ShardHalt, StoreError,
};
use uuid::Uuid;

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("halt-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

/// The SQLSTATE of a failed statement.
fn code(result: Result<u64, tokio_postgres::Error>) -> String {
    let e = result.expect_err("the database refuses");
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

struct Roles {
    db: TestDatabase,
    owner: String,
    runtime: String,
}

impl Roles {
    async fn new() -> Self {
        let db = TestDatabase::create().await;
        let suffix = &db.name()["statek_test_".len()..];
        let (owner, runtime, retention) = (
            format!("ho_{suffix}"),
            format!("hrt_{suffix}"),
            format!("hrn_{suffix}"),
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
        Roles { db, owner, runtime }
    }

    fn config(&self, role: &str) -> tokio_postgres::Config {
        let mut pg = self.db.pg_config().clone();
        pg.user(role);
        pg
    }

    fn store(&self, role: &str) -> PgStore {
        PgStore::new(test_store_config(self.config(role))).unwrap()
    }

    async fn client(&self, role: &str) -> tokio_postgres::Client {
        let (client, connection) = self
            .config(role)
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }
}

async fn server_timeline(client: &tokio_postgres::Client) -> i32 {
    client
        .query_one("SELECT statek.server_timeline()", &[])
        .await
        .unwrap()
        .get(0)
}

/// What a store that found two reservations lost records (through the
/// database's function, as the runtime role).
const RECORD: &str = "
    SELECT * FROM statek.record_reservation_loss('halt-v1', true, $1, 8,
        jsonb_build_array(
            jsonb_build_object('reservation_id', $2::uuid, 'sequence', 5, 'count', 1,
                               'evidence', 'missing'),
            jsonb_build_object('reservation_id', $3::uuid, 'sequence', 6, 'count', 3,
                               'evidence', 'reissued', 'held_by', $4::uuid)),
        'replica-a pid 1', 'on')";

fn halted(result: Result<impl std::fmt::Debug, StoreError>) -> Vec<ShardHalt> {
    match result {
        Err(StoreError::Durability(DurabilityError::ShardHalted(h))) => h.halts,
        other => panic!("expected ShardHalted, got {other:?}"),
    }
}

#[tokio::test]
async fn a_recorded_loss_halts_every_store_until_the_owner_resumes() {
    let roles = Roles::new().await;
    let p = policy();
    let (a, b) = (roles.store(&roles.runtime), roles.store(&roles.runtime));
    a.register(&p).await.unwrap();
    let replayed_id = Uuid::now_v7();
    let first = a
        .reserve(p.shard_id(), &p.digest(), replayed_id)
        .await
        .unwrap();
    assert_eq!(first.sequence(), 0);
    for expected in 1..5 {
        let r = b
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(r.sequence(), expected);
    }
    let batch = b
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 4)
        .await
        .unwrap();
    assert_eq!(batch.first_sequence(), 5);

    let rt = roles.client(&roles.runtime).await;
    let timeline = server_timeline(&rt).await;
    let (lost_a, lost_b, holder) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let row = rt
        .query_one(RECORD, &[&(timeline + 1), &lost_a, &lost_b, &holder])
        .await
        .unwrap();
    let halt_id: i64 = row.get("recorded_id");
    assert!(row.get::<_, bool>("shard_halted"));

    // Every store is refused: both live ones, and a new one (a restarted
    // process, with no ring of its own).
    let restarted = roles.store(&roles.runtime);
    for store in [&a, &b, &restarted] {
        let halts = halted(
            store
                .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
                .await,
        );
        assert_eq!(halts.len(), 1);
        let h = &halts[0];
        assert_eq!(h.halt_id, halt_id);
        assert_eq!(h.cause, HaltCause::Lost);
        assert!(h.halts && h.is_open());
        assert_eq!(
            (h.from_timeline, h.to_timeline),
            (
                u32::try_from(timeline + 1).unwrap(),
                u32::try_from(timeline).unwrap()
            )
        );
        assert_eq!(h.checked, 8);
        assert_eq!(h.cursor_at_detection, 9);
        assert_eq!(h.detected_by, "replica-a pid 1");
        assert_eq!(h.detected_role, roles.runtime);
        assert_eq!(h.lost.len(), 2);
        assert_eq!(
            (
                h.lost[0].reservation_id,
                h.lost[0].acknowledged_sequence,
                h.lost[0].count,
                h.lost[0].evidence
            ),
            (lost_a, 5, 1, LossEvidence::Missing)
        );
        assert_eq!(
            (
                h.lost[1].reservation_id,
                h.lost[1].acknowledged_sequence,
                h.lost[1].count,
                h.lost[1].evidence
            ),
            (
                lost_b,
                6,
                3,
                LossEvidence::Reissued {
                    reservation_id: holder
                }
            )
        );
        assert!(h.resume.is_none());
        halted(
            store
                .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 3)
                .await,
        );
    }
    let message = a
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with(
            "shard halt-v1 is halted and accepts no reservation until an owner runs \
             `statek shard resume halt-v1 --acknowledge-loss`:"
        ),
        "{message}"
    );
    // A replay of an id reserved before the halt still finds its sequence.
    let replay = a
        .reserve(p.shard_id(), &p.digest(), replayed_id)
        .await
        .unwrap();
    assert!(replay.replayed());
    assert_eq!(replay.sequence(), 0);
    // Nothing moved the cursor.
    assert_eq!(a.next_sequence(p.shard_id()).await.unwrap(), 9);

    // The runtime role may not resume.
    assert!(matches!(
        a.resume_shard(p.shard_id(), None).await,
        Err(StoreError::PermissionDenied { .. })
    ));
    // The owner resumes: the reissued range comes from the halt.
    let owner = roles.store(&roles.owner);
    let resumed = owner
        .resume_shard(p.shard_id(), Some("INC-1"))
        .await
        .unwrap();
    assert_eq!(resumed.len(), 1);
    let resume = resumed[0].resume.as_ref().unwrap();
    assert_eq!(
        resume.reissued,
        ReissuedRange {
            halt_id,
            first: 5,
            end: Some(9)
        }
    );
    assert_eq!(resume.resumed_role, roles.owner);
    assert_eq!(resume.note.as_deref(), Some("INC-1"));
    assert!(!resumed[0].is_open());
    assert_eq!(
        owner.reissued_ranges(p.shard_id()).await.unwrap(),
        vec![resume.reissued]
    );
    // A second resume finds nothing to do and writes nothing.
    assert!(owner
        .resume_shard(p.shard_id(), None)
        .await
        .unwrap()
        .is_empty());
    // Every store reserves again, at the cursor.
    for (store, expected) in [(&a, 9), (&b, 10), (&restarted, 11)] {
        let r = store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(r.sequence(), expected);
    }
    assert!(matches!(
        owner
            .resume_shard(&SchedulerShardId::try_from("ghost").unwrap(), None)
            .await,
        Err(StoreError::Rollout(RolloutError::UnknownShard { .. }))
    ));
}

#[tokio::test]
async fn halts_and_resumes_are_evidence_no_role_changes() {
    let roles = Roles::new().await;
    let p = policy();
    let store = roles.store(&roles.runtime);
    store.register(&p).await.unwrap();
    for _ in 0..3 {
        store
            .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    let admin = roles.db.client().await;
    let own = roles.client(&roles.owner).await;
    let rt = roles.client(&roles.runtime).await;
    let timeline = server_timeline(&rt).await;

    // Bad losses are refused with 22023, nothing recorded.
    for bad in [
        "'[]'::jsonb",
        "'{}'::jsonb",
        "'[{\"reservation_id\": \"x\", \"sequence\": 1, \"count\": 1, \"evidence\": \"missing\"}]'::jsonb",
        "'[{\"reservation_id\": \"018f0000-0000-7000-8000-000000000000\", \"sequence\": -1, \"count\": 1, \"evidence\": \"missing\"}]'::jsonb",
        "'[{\"reservation_id\": \"018f0000-0000-7000-8000-000000000000\", \"sequence\": 1, \"count\": 0, \"evidence\": \"missing\"}]'::jsonb",
        "'[{\"reservation_id\": \"018f0000-0000-7000-8000-000000000000\", \"sequence\": 1, \"count\": 1, \"evidence\": \"reissued\"}]'::jsonb",
        "'[{\"reservation_id\": \"018f0000-0000-7000-8000-000000000000\", \"sequence\": 1, \"count\": 1, \"evidence\": \"gone\"}]'::jsonb",
    ] {
        let sql = format!(
            "SELECT * FROM statek.record_reservation_loss('halt-v1', true, {}, 4, {bad}, 'r', 'on')",
            timeline + 1
        );
        let e = rt.query(&sql, &[]).await.expect_err(bad);
        assert_eq!(e.code().unwrap().code(), "22023", "{bad}: {e}");
    }
    // From the server's own timeline is no failover.
    let same = format!(
        "SELECT * FROM statek.record_reservation_loss('halt-v1', true, {timeline}, 4, \
         '[{{\"reservation_id\": \"018f0000-0000-7000-8000-000000000000\", \"sequence\": 1, \
         \"count\": 1, \"evidence\": \"missing\"}}]', 'r', 'on')"
    );
    assert_eq!(
        rt.query(&same, &[])
            .await
            .unwrap_err()
            .code()
            .unwrap()
            .code(),
        "22023"
    );
    assert!(store.shard_halts(p.shard_id()).await.unwrap().is_empty());

    // The runtime role writes neither table directly, and may not resume.
    assert_eq!(
        code(rt.execute(
            "INSERT INTO statek.shard_halts (shard_id, cause, halts, from_timeline, to_timeline, \
             checked, lost, cursor_at_detection, detected_by, detected_role, detected_at) \
             VALUES ('halt-v1', 'unverified', true, 1, 2, 0, '[]', 0, 'x', 'x', now())",
            &[]
        ).await),
        "42501"
    );
    assert_eq!(
        code(
            rt.execute("SELECT statek.resume_shard('halt-v1', NULL)", &[])
                .await
        ),
        "42501"
    );
    let lost = Uuid::now_v7();
    rt.query(
        RECORD,
        &[&(timeline + 1), &lost, &Uuid::now_v7(), &Uuid::now_v7()],
    )
    .await
    .unwrap();
    // No role changes or deletes a halt; none moves a halted cursor, seals
    // it, or clears the halt without a resume.
    for (who, client) in [("superuser", &admin), ("owner", &own)] {
        for sql in [
            "UPDATE statek.shard_halts SET detected_by = 'forged'",
            "DELETE FROM statek.shard_halts",
            "TRUNCATE statek.shard_halts CASCADE",
            "UPDATE statek.scheduler_shards SET next_sequence = next_sequence + 1 WHERE shard_id = 'halt-v1'",
            "UPDATE statek.scheduler_shards SET halt_id = NULL WHERE shard_id = 'halt-v1'",
            "UPDATE statek.scheduler_shards SET halt_id = halt_id + 1000 WHERE shard_id = 'halt-v1'",
            "UPDATE statek.scheduler_shards SET sealed_at_sequence = next_sequence, \
             successor_id = 'ghost', seam_bounds = '[]' WHERE shard_id = 'halt-v1'",
        ] {
            assert_eq!(code(client.execute(sql, &[]).await), "SK001", "{who}: {sql}");
        }
        // A row a writer puts in bypassing the functions is refused too.
        assert_eq!(
            code(client.execute(
                "INSERT INTO statek.scheduler_reservations (reservation_id, shard_id, sequence, slot, policy_digest) \
                 SELECT gen_random_uuid(), shard_id, next_sequence, (next_sequence % cycle_length)::integer, policy_digest \
                 FROM statek.scheduler_shards WHERE shard_id = 'halt-v1'",
                &[]
            ).await),
            "SK001",
            "{who}: a reservation row on a halted shard"
        );
    }
    for sql in [
        "UPDATE statek.shard_halts SET detected_by = 'forged'",
        "DELETE FROM statek.shard_halts",
        "UPDATE statek.scheduler_shards SET halt_id = NULL WHERE shard_id = 'halt-v1'",
    ] {
        assert_eq!(code(rt.execute(sql, &[]).await), "42501", "runtime: {sql}");
    }
    // A halt the owner inserts directly carries the database's time and
    // the owner's role, whatever it says.
    own.execute(
        "INSERT INTO statek.shard_halts (shard_id, cause, halts, from_timeline, to_timeline, \
         checked, lost, cursor_at_detection, detected_by, detected_role, detected_at) \
         VALUES ('halt-v1', 'unverified', false, 1, 2, 0, '[]', 0, 'owner by hand', 'forged', \
         '2000-01-01')",
        &[],
    )
    .await
    .unwrap();
    let halts = store.shard_halts(p.shard_id()).await.unwrap();
    assert_eq!(halts.len(), 2);
    assert_eq!(halts[1].detected_role, roles.owner);
    assert!(
        halts[1].detected_at
            > std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000)
    );
    assert!(!halts[1].halts);

    // The resume, and then no role changes it either.
    roles
        .store(&roles.owner)
        .resume_shard(p.shard_id(), None)
        .await
        .unwrap();
    for (who, client) in [("superuser", &admin), ("owner", &own)] {
        for sql in [
            "UPDATE statek.shard_resumes SET reissued_first = 0",
            "DELETE FROM statek.shard_resumes",
            "TRUNCATE statek.shard_resumes",
        ] {
            assert_eq!(
                code(client.execute(sql, &[]).await),
                "SK001",
                "{who}: {sql}"
            );
        }
    }
    // A second resume row for a halt is refused (one per halt), and a
    // resume of the non-halting record is refused by its trigger.
    assert_eq!(
        code(own.execute(
            "INSERT INTO statek.shard_resumes (halt_id, shard_id, reissued_first, resumed_role, resumed_at) \
             SELECT halt_id, shard_id, 0, 'x', now() FROM statek.shard_halts WHERE NOT halts",
            &[]
        ).await),
        "SK001"
    );
    let r = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(r.sequence(), 3);
}

#[tokio::test]
async fn a_store_first_to_reserve_after_the_timeline_changed_halts_the_shard_as_unverified() {
    let db = TestDatabase::create().await;
    let p = policy();
    let live = db.store();
    live.register(&p).await.unwrap();
    for _ in 0..4 {
        live.reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    let admin = db.client().await;
    let timeline = server_timeline(&admin).await;
    let last: Option<i32> = admin
        .query_one(
            "SELECT last_timeline FROM statek.scheduler_shards WHERE shard_id = 'halt-v1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        last,
        Some(timeline),
        "each reservation records its timeline"
    );
    let recorded: Vec<Option<i32>> = admin
        .query(
            "SELECT timeline FROM statek.scheduler_reservations WHERE shard_id = 'halt-v1'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(recorded, vec![Some(timeline); 4]);
    // The state a promotion leaves behind: the shard's last reservation on
    // another timeline than the server's (a real promotion:
    // `cargo xtask failover`). The superuser's one-off edit, trigger off.
    admin
        .batch_execute(&format!(
            "ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable;
             UPDATE statek.scheduler_shards SET last_timeline = {} WHERE shard_id = 'halt-v1';
             ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable;",
            timeline + 1
        ))
        .await
        .unwrap();
    // The live store knows its timeline (it reserved on it): it reserves.
    let r = live
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(r.sequence(), 4);
    admin
        .batch_execute(&format!(
            "ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable;
             UPDATE statek.scheduler_shards SET last_timeline = {} WHERE shard_id = 'halt-v1';
             ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable;",
            timeline + 1
        ))
        .await
        .unwrap();
    // A new store has nothing to re-read: it halts the shard instead.
    let fresh = db.store();
    let halts = halted(
        fresh
            .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 2)
            .await,
    );
    assert_eq!(halts.len(), 1);
    let h = &halts[0];
    assert_eq!(h.cause, HaltCause::Unverified);
    assert_eq!(
        (
            h.from_timeline,
            h.to_timeline,
            h.checked,
            h.cursor_at_detection
        ),
        (
            u32::try_from(timeline + 1).unwrap(),
            u32::try_from(timeline).unwrap(),
            0,
            5
        )
    );
    assert!(h.lost.is_empty());
    // And now the live store is refused too.
    halted(
        live.reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await,
    );
    let resumed = db.store().resume_shard(p.shard_id(), None).await.unwrap();
    assert_eq!(
        resumed[0].resume.as_ref().unwrap().reissued,
        ReissuedRange {
            halt_id: h.halt_id,
            first: 5,
            end: None
        }
    );
    let r = fresh
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(r.sequence(), 5);
}
