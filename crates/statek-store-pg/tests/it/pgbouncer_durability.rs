//! Through a real PgBouncer in transaction pooling mode whose server
//! connections default to `synchronous_commit = off` (a role default, or a
//! session `SET` another client left on a shared server connection): every
//! run-queue write of a store commits with the store's own
//! `synchronous_commit` all the same, seen from inside each write's
//! transaction by a trigger.
//!
//! Needs `STATEK_TEST_PGBOUNCER_URL` (set by `cargo xtask test`); without
//! it these tests fail, they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{reserved_slots, TestDatabase};
use statek_store_pg::{ClaimOutcome, FinishRun, NewRun, PgStore, SlotClaim};

const LEASE: Duration = Duration::from_secs(30);

/// Records, for every row a statement writes in `statek.runs`, the
/// operation, the row's state and the `synchronous_commit` in force in
/// that transaction.
const RECORD_LEVELS: &str = "
    CREATE TABLE public.commit_levels (
        n bigint GENERATED ALWAYS AS IDENTITY, what text, level text);
    CREATE FUNCTION public.record_level() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO public.commit_levels (what, level)
        VALUES (TG_OP || ' ' || NEW.state, current_setting('synchronous_commit'));
        RETURN NULL;
    END $$;
    CREATE TRIGGER record_level AFTER INSERT OR UPDATE ON statek.runs
        FOR EACH ROW EXECUTE FUNCTION public.record_level();";

async fn levels(client: &tokio_postgres::Client) -> Vec<(String, String)> {
    client
        .query(
            "SELECT what, level FROM public.commit_levels ORDER BY n",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("what"), r.get("level")))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(w, l)| ((*w).to_owned(), (*l).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_queue_write_commits_with_the_stores_synchronous_commit() {
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config().pool_size(2).unwrap();
    db.set_session_settings(&config).await;
    let client = db.client().await;
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name()
        ))
        .await
        .unwrap();
    client.batch_execute(RECORD_LEVELS).await.unwrap();

    // The hole: an autocommit write through PgBouncer commits with the
    // server connection's setting, not the client's.
    let plain = db.pgbouncer_store_config().connect_client().await.unwrap();
    plain
        .batch_execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload)
             VALUES (gen_random_uuid(), 'tenant-x', '')",
        )
        .await
        .unwrap();
    assert_eq!(levels(&client).await, pairs(&[("INSERT available", "off")]));
    client
        .batch_execute("TRUNCATE public.commit_levels")
        .await
        .unwrap();

    let store = PgStore::new(config).unwrap();
    let a = TenantId::try_from("tenant-a").unwrap();
    for _ in 0..2 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![]))
            .await
            .unwrap();
    }
    store
        .enqueue_many(&[
            NewRun::new(a.clone(), vec![]),
            NewRun::new(a.clone(), vec![]),
        ])
        .await
        .unwrap();
    let ClaimOutcome::Claimed(one) = store.claim_run(&a, LEASE).await.unwrap() else {
        panic!("a run to claim");
    };
    store.heartbeat_run(&one.lease, LEASE).await.unwrap();
    store.complete_run(&one.lease).await.unwrap();
    let ClaimOutcome::Claimed(two) = store.claim_run(&a, LEASE).await.unwrap() else {
        panic!("a run to claim");
    };
    store
        .fail_run(&two.lease, "boom", Duration::from_secs(3600))
        .await
        .unwrap();
    // Two reserved slots of tenant-a (registering and reserving write no
    // run, so the trigger records nothing for them).
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(a.clone(), 1).unwrap()],
    )
    .unwrap();
    store.register(&policy).await.unwrap();
    let slots = reserved_slots(&store, &policy, &[&a, &a]).await;
    let claims = store
        .claim_runs_for_slots(&slots, policy.shard_id(), LEASE)
        .await
        .unwrap();
    let leases: Vec<_> = claims
        .iter()
        .map(|c| match c {
            SlotClaim::Claimed(run) => run.lease,
            other => panic!("{other:?}"),
        })
        .collect();
    store
        .finish_runs(&[
            FinishRun::complete(leases[0]),
            FinishRun::fail(leases[1], "boom", Duration::ZERO),
        ])
        .await
        .unwrap();
    assert!(store.cancel_run(two.lease.run_id()).await.unwrap());
    store.retry_run(two.lease.run_id()).await.unwrap();

    assert_eq!(
        levels(&client).await,
        pairs(&[
            ("INSERT available", "on"),
            ("INSERT available", "on"),
            ("INSERT available", "on"),
            ("INSERT available", "on"),
            ("UPDATE running", "on"),
            ("UPDATE running", "on"),
            ("UPDATE completed", "on"),
            ("UPDATE running", "on"),
            ("UPDATE available", "on"),
            ("UPDATE running", "on"),
            ("UPDATE running", "on"),
            ("UPDATE completed", "on"),
            ("UPDATE available", "on"),
            ("UPDATE cancelled", "on"),
            ("UPDATE available", "on"),
        ])
    );
}
