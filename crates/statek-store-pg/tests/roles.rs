//! The role profile with real login roles: every denied action fails with
//! SQLSTATE 42501 as `PermissionDenied`, every allowed action succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{
    ClaimOutcome, NewRun, PgStore, RoleProfile, SchedulerFairnessRetentionPolicy, StoreError,
};
use uuid::Uuid;

fn policy(weight: u32) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), weight).unwrap()],
    )
    .unwrap()
}

fn store_as(db: &TestDatabase, role: &str) -> PgStore {
    let mut pg = db.pg_config().clone();
    pg.user(role);
    PgStore::new(statek_store_pg::testing::test_store_config(pg)).unwrap()
}

async fn client_as(db: &TestDatabase, role: &str) -> tokio_postgres::Client {
    let mut pg = db.pg_config().clone();
    pg.user(role);
    let (client, connection) = pg.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn denied<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) {
    match result {
        Err(e @ StoreError::PermissionDenied { .. }) => {
            assert_eq!(e.sqlstate(), Some("42501"), "{what}");
            assert!(!e.is_retryable());
        }
        other => panic!("{what}: expected PermissionDenied, got {other:?}"),
    }
}

fn sql_denied(what: &str, result: Result<u64, tokio_postgres::Error>) {
    let err = result.expect_err(what);
    assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{what}: {err}");
}

#[tokio::test]
async fn the_role_matrix_holds() {
    let db = TestDatabase::create().await;
    // Login roles are cluster-wide: name them after this test's database.
    let suffix = &db.name()["statek_test_".len()..];
    let (owner, runtime, retention) = (
        format!("o_{suffix}"),
        format!("rt_{suffix}"),
        format!("rn_{suffix}"),
    );
    let admin = db.client().await;
    for role in [&owner, &runtime, &retention] {
        admin
            .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!(
                "GRANT CONNECT ON DATABASE {} TO {role}",
                db.name()
            ))
            .await
            .unwrap();
    }
    let profile = RoleProfile::new(&owner, &runtime, &retention).unwrap();
    db.store().apply_role_profile(&profile).await.unwrap();
    // Applying twice is harmless.
    db.store().apply_role_profile(&profile).await.unwrap();

    let p = policy(2);
    let rt = store_as(&db, &runtime);
    let rn = store_as(&db, &retention);
    let own = store_as(&db, &owner);

    // Owner: migrations (nothing left to apply, but it may read the history).
    assert_eq!(own.migrate().await.unwrap().applied().len(), 0);

    // Runtime: register, reserve, run queue.
    rt.register(&p).await.unwrap();
    let first = rt
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(first.sequence(), 0);
    let a = TenantId::try_from("tenant-a").unwrap();
    rt.enqueue(&NewRun::new(a.clone(), vec![1])).await.unwrap();
    let ClaimOutcome::Claimed(run) = rt.claim_run(&a, Duration::from_secs(30)).await.unwrap()
    else {
        panic!("claim")
    };
    rt.heartbeat_run(&run.lease, Duration::from_secs(30))
        .await
        .unwrap();
    rt.complete_run(&run.lease).await.unwrap();
    assert_eq!(
        rt.load_shard(p.shard_id()).await.unwrap().next_sequence(),
        1
    );

    // Runtime may not prune, migrate, delete reservations or shards, or
    // change policy columns.
    let retention_policy =
        SchedulerFairnessRetentionPolicy::new(Duration::from_secs(3600), 10).unwrap();
    denied(
        "runtime prune",
        rt.prune_scheduler_fairness_reservations(&retention_policy)
            .await,
    );
    denied("runtime migrate", rt.migrate().await);
    let rt_sql = client_as(&db, &runtime).await;
    sql_denied(
        "runtime delete reservation",
        rt_sql
            .execute("DELETE FROM statek.scheduler_reservations", &[])
            .await,
    );
    sql_denied(
        "runtime delete shard",
        rt_sql
            .execute("DELETE FROM statek.scheduler_shards", &[])
            .await,
    );
    sql_denied(
        "runtime update policy",
        rt_sql
            .execute(
                "UPDATE statek.scheduler_shards SET policy_bytes = policy_bytes",
                &[],
            )
            .await,
    );
    sql_denied(
        "runtime update reservation",
        rt_sql
            .execute("UPDATE statek.scheduler_reservations SET slot = 0", &[])
            .await,
    );

    // Retention: prune only.
    let report = rn
        .prune_scheduler_fairness_reservations(&retention_policy)
        .await
        .unwrap();
    assert_eq!(report.deleted, 0);
    denied(
        "retention reserve",
        rn.reserve(p.shard_id(), &p.digest(), Uuid::now_v7()).await,
    );
    denied("retention register", rn.register(&policy(3)).await);
    denied(
        "retention enqueue",
        rn.enqueue(&NewRun::new(a.clone(), vec![])).await,
    );
    denied(
        "retention claim",
        rn.claim_run(&a, Duration::from_secs(30)).await,
    );
    denied("retention load", rn.load_shard(p.shard_id()).await);
    denied("retention migrate", rn.migrate().await);

    // Nothing a denied call tried was written.
    assert_eq!(rt.next_sequence(p.shard_id()).await.unwrap(), 1);
    assert_eq!(rt.count_live_runs().await.unwrap(), 0);
}
