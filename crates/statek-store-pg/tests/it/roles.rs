//! The role profile with real login roles: every denied action fails with
//! SQLSTATE 42501 as `PermissionDenied`, every allowed action succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{
    ClaimOutcome, FinishOutcome, FinishRun, NewRun, PgStore, RoleProfile,
    SchedulerFairnessRetentionPolicy, StoreError,
};
use uuid::Uuid;

fn policy(weight: u32) -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", weight)])
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
    // Every table, view, sequence and function of the schema is the
    // owner's (a migration's new object missing from the profile shows
    // here).
    let not_owned: Vec<String> = admin
        .query(
            "SELECT c.relname::text FROM pg_class AS c
             WHERE c.relnamespace = 'statek'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p')
               AND c.relowner <> $1::text::regrole
             UNION ALL
             SELECT p.oid::regprocedure::text FROM pg_proc AS p
             WHERE p.pronamespace = 'statek'::regnamespace AND p.proowner <> $1::text::regrole
             ORDER BY 1",
            &[&owner],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(not_owned, Vec::<String>::new());

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
    // Completion batching: locks runs (FOR UPDATE) and, for the replayed
    // run, reads its claim locked (FOR SHARE).
    rt.enqueue(&NewRun::new(a.clone(), vec![2]).max_attempts(1))
        .await
        .unwrap();
    let ClaimOutcome::Claimed(next) = rt.claim_run(&a, Duration::from_secs(30)).await.unwrap()
    else {
        panic!("claim")
    };
    assert_eq!(
        rt.finish_runs(&[
            FinishRun::complete(run.lease),
            FinishRun::fail(next.lease, "boom", Duration::ZERO),
        ])
        .await
        .unwrap(),
        [FinishOutcome::AlreadyRecorded, FinishOutcome::Failed]
    );
    assert_eq!(
        rt.load_shard(p.shard_id()).await.unwrap().next_sequence(),
        1
    );

    // Slot outcome records (V14): the runtime role writes them only
    // through statek.record_slot_outcomes, both roles read them, and no
    // role but the owner's cascade deletes one.
    let one_idle = statek_core::SlotOutcomes::from_iter([statek_core::SlotClass::Idle]);
    assert_eq!(
        rt.record_slot_outcomes(p.shard_id(), 0, &one_idle)
            .await
            .unwrap(),
        statek_core::SlotOutcomesRecorded::Recorded
    );
    assert_eq!(
        rn.slot_outcomes(p.shard_id(), 0, 10).await.unwrap().len(),
        1
    );
    denied(
        "retention records slot outcomes",
        rn.record_slot_outcomes(p.shard_id(), 0, &one_idle).await,
    );
    {
        let rt_sql = client_as(&db, &runtime).await;
        for (what, sql) in [
            (
                "runtime inserts a slot outcome record",
                "INSERT INTO statek.slot_outcomes (shard_id, first_sequence, slot_count, classes, counts)
                 VALUES ('primary-v1', 1, 1, 'c', '{1}')",
            ),
            (
                "runtime changes a slot outcome record",
                "UPDATE statek.slot_outcomes SET classes = 'c'",
            ),
            (
                "runtime deletes a slot outcome record",
                "DELETE FROM statek.slot_outcomes",
            ),
        ] {
            sql_denied(what, rt_sql.execute(sql, &[]).await);
        }
        let rn_sql = client_as(&db, &retention).await;
        sql_denied(
            "retention deletes a slot outcome record",
            rn_sql
                .execute("DELETE FROM statek.slot_outcomes", &[])
                .await,
        );
    }

    // Tenant limits: the owner changes them, the runtime role reads them
    // and its claims lock them (through statek.claim_allowance) but may
    // not change them; the retention role may not even read them.
    let capped = TenantId::try_from("tenant-capped").unwrap();
    let cap = statek_store_pg::TenantLimits::new(Some(1), None).unwrap();
    own.set_tenant_limits(&capped, &cap).await.unwrap();
    assert_eq!(
        rt.tenant_limits(&capped).await.unwrap().unwrap().limits,
        cap
    );
    denied(
        "runtime sets limits",
        rt.set_tenant_limits(&capped, &cap).await,
    );
    denied(
        "runtime clears limits",
        rt.clear_tenant_limits(&capped).await,
    );
    denied("retention reads limits", rn.tenant_limits(&capped).await);
    let in_tx = rt
        .enqueue_many(&[
            NewRun::new(capped.clone(), vec![1]),
            NewRun::new(capped.clone(), vec![2]),
        ])
        .await
        .unwrap();
    assert_eq!(in_tx.len(), 2);
    let ClaimOutcome::Claimed(capped_run) = rt
        .claim_run(&capped, Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("claim")
    };
    assert_eq!(
        rt.claim_run(&capped, Duration::from_secs(30))
            .await
            .unwrap(),
        ClaimOutcome::Limited
    );
    rt.complete_run(&capped_run.lease).await.unwrap();
    assert!(rt.cancel_run(in_tx[1].run_id).await.unwrap());
    assert_eq!(
        rt.retry_run(in_tx[1].run_id).await.unwrap().state,
        statek_store_pg::RunState::Available
    );
    assert!(rt.cancel_run(in_tx[1].run_id).await.unwrap());
    assert!(own.clear_tenant_limits(&capped).await.unwrap());
    // Runtime may not prune runs.
    let run_retention =
        statek_store_pg::RunRetentionPolicy::new(Duration::from_secs(3600), 10).unwrap();
    denied(
        "runtime prunes runs",
        rt.prune_finished_runs(&run_retention).await,
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

    // Runtime may not write reservation rows or move the cursor itself:
    // only `statek.reserve`/`statek.reserve_batch` (SECURITY DEFINER) do,
    // at the locked cursor with the shard's slot and digest.
    sql_denied(
        "runtime insert reservation at cursor + 3",
        rt_sql
            .execute(
                "INSERT INTO statek.scheduler_reservations
                     (reservation_id, shard_id, sequence, slot, policy_digest)
                 SELECT $1, shard_id, next_sequence + 3, 0, policy_digest
                 FROM statek.scheduler_shards",
                &[&Uuid::now_v7()],
            )
            .await,
    );
    // Nor a range row of a batch (migration V5), nor stretch one.
    sql_denied(
        "runtime insert range",
        rt_sql
            .execute(
                "INSERT INTO statek.scheduler_reservations
                     (reservation_id, shard_id, sequence, slot, policy_digest, batch_id,
                      sequence_count)
                 SELECT $1, shard_id, next_sequence, 0, policy_digest, $1, 64
                 FROM statek.scheduler_shards",
                &[&Uuid::now_v7()],
            )
            .await,
    );
    sql_denied(
        "runtime stretch range",
        rt_sql
            .execute(
                "UPDATE statek.scheduler_reservations SET sequence_count = sequence_count + 1",
                &[],
            )
            .await,
    );
    // The claim history: written only by the claim and finish functions
    // (migration V11), never by the runtime role's own statements.
    sql_denied(
        "runtime delete claim history",
        rt_sql.execute("DELETE FROM statek.run_claims", &[]).await,
    );
    sql_denied(
        "runtime rewrite claim history",
        rt_sql
            .execute("UPDATE statek.run_claims SET sequence = 0", &[])
            .await,
    );
    sql_denied(
        "runtime finishes a claim itself",
        rt_sql
            .execute(
                "UPDATE statek.run_claims SET finished_at = now() WHERE finished_at IS NULL",
                &[],
            )
            .await,
    );
    sql_denied(
        "runtime forges a claim",
        rt_sql
            .execute(
                "INSERT INTO statek.run_claims
                     (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at)
                 SELECT run_id, attempt + 1, tenant_id, 'primary-v1', 0, gen_random_uuid(), now()
                 FROM statek.runs LIMIT 1",
                &[],
            )
            .await,
    );
    // Runs: never the tenant, payload, attempt, claim time or priority.
    for column in [
        "tenant_id = 'tenant-b'",
        "payload = '\\x00'",
        "attempt = attempt + 1",
        "claimed_at = now()",
        "priority = 5",
        // The claim of the current attempt, kept on the run row (V13).
        "claim_token = gen_random_uuid()",
        "claim_shard_id = 'primary-v1', claim_sequence = 0",
        "claim_finished_at = now()",
        // Whether its claim counts for a rate limit (V17).
        "rate_counted = true",
    ] {
        sql_denied(
            &format!("runtime sets runs.{column}"),
            rt_sql
                .execute(&format!("UPDATE statek.runs SET {column}"), &[])
                .await,
        );
    }
    // Enqueue inserts only a new, unclaimed run (migration V13): no state,
    // attempt, lease, finish or claim of the runtime role's choosing.
    for (what, columns, values) in [
        (
            "runtime inserts a completed run",
            "state, finished_at",
            "'completed', now()",
        ),
        (
            "runtime inserts a claimed attempt",
            "attempt, claimed_at",
            "1, now()",
        ),
        (
            "runtime inserts a slot's claim",
            "claim_shard_id, claim_sequence, claim_token",
            "'primary-v1', 0, gen_random_uuid()",
        ),
        (
            "runtime inserts a leased run",
            "lease_token, lease_expires_at",
            "gen_random_uuid(), now()",
        ),
        (
            "runtime inserts a claim counted for a rate limit (V17)",
            "rate_counted",
            "true",
        ),
    ] {
        sql_denied(
            what,
            rt_sql
                .execute(
                    &format!(
                        "INSERT INTO statek.runs (run_id, tenant_id, payload, {columns})
                         VALUES (gen_random_uuid(), 'tenant-a', '\\x00', {values})"
                    ),
                    &[],
                )
                .await,
        );
    }
    // Completions (migration V12): a completed run's row never changes,
    // and only statek.finish_runs completes a run, whatever the role's
    // column grants allow.
    let completed = run.lease.run_id();
    rt.enqueue(&NewRun::new(a.clone(), vec![3])).await.unwrap();
    let ClaimOutcome::Claimed(running) = rt.claim_run(&a, Duration::from_secs(30)).await.unwrap()
    else {
        panic!("claim")
    };
    let rn_rows = client_as(&db, &retention).await;
    // Since migration V13 the runtime role updates no run column at all
    // (heartbeat, cancel, rescue and retry are functions).
    for (what, sql, run_id) in [
        (
            "runtime moves a completion's finish time",
            "UPDATE statek.runs SET finished_at = '2000-01-01' WHERE run_id = $1",
            completed,
        ),
        (
            "runtime erases a completion",
            "UPDATE statek.runs SET state = 'available', finished_at = NULL WHERE run_id = $1",
            completed,
        ),
        (
            "runtime forges a completion",
            "UPDATE statek.runs SET state = 'completed', finished_at = clock_timestamp(),
                 lease_token = NULL, lease_expires_at = NULL WHERE run_id = $1",
            running.lease.run_id(),
        ),
        (
            "runtime puts a run back under a lease of its own",
            "UPDATE statek.runs SET state = 'running', lease_token = gen_random_uuid(),
                 lease_expires_at = now() + interval '1 hour' WHERE run_id = $1",
            completed,
        ),
    ] {
        sql_denied(what, rt_sql.execute(sql, &[&run_id]).await);
    }
    // A role granted UPDATE of runs by hand (a misconfiguration) still
    // cannot touch a completion nor complete a run itself.
    let rogue = format!("rg_{suffix}");
    admin
        .batch_execute(&format!(
            "CREATE ROLE {rogue} LOGIN; GRANT CONNECT ON DATABASE {} TO {rogue};
             GRANT USAGE ON SCHEMA statek TO {rogue};
             GRANT SELECT, UPDATE ON statek.runs TO {rogue}",
            db.name()
        ))
        .await
        .unwrap();
    let rogue_sql = client_as(&db, &rogue).await;
    for (what, client, sql, run_id, message) in [
        (
            "a hand-granted role moves a completion's finish time",
            &rogue_sql,
            "UPDATE statek.runs SET finished_at = '2000-01-01' WHERE run_id = $1",
            completed,
            format!("statek: run {completed} is completed; its row is evidence and never changes"),
        ),
        (
            "retention moves a completion's finish time",
            &rn_rows,
            "UPDATE statek.runs SET finished_at = '1999-01-01' WHERE run_id = $1",
            completed,
            format!("statek: run {completed} is completed; its row is evidence and never changes"),
        ),
        // Migration V16: a finish time is statek's functions' to set, on
        // every run, not only a completed one.
        (
            "retention moves a failed run's finish time",
            &rn_rows,
            "UPDATE statek.runs SET finished_at = '1999-01-01' WHERE run_id = $1",
            next.lease.run_id(),
            format!(
                "statek: only statek's functions set a run's finish time (run {})",
                next.lease.run_id()
            ),
        ),
        (
            "a hand-granted role gives a running run a finish time",
            &rogue_sql,
            "UPDATE statek.runs SET finished_at = clock_timestamp() WHERE run_id = $1",
            running.lease.run_id(),
            format!(
                "statek: only statek's functions set a run's finish time (run {})",
                running.lease.run_id()
            ),
        ),
        (
            "a hand-granted role forges a completion",
            &rogue_sql,
            "UPDATE statek.runs SET state = 'completed', finished_at = clock_timestamp(),
                 lease_token = NULL, lease_expires_at = NULL WHERE run_id = $1",
            running.lease.run_id(),
            format!(
                "statek: only statek.finish_runs completes a run (run {})",
                running.lease.run_id()
            ),
        ),
    ] {
        let err = client.execute(sql, &[&run_id]).await.expect_err(what);
        let db_error = err.as_db_error().expect(what);
        assert_eq!(
            (db_error.code().code(), db_error.message()),
            ("SK001", message.as_str()),
            "{what}"
        );
    }
    // The forged completion left the run running under its lease, which
    // the finish function still completes.
    assert_eq!(
        rt.finish_runs(&[FinishRun::complete(running.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    sql_denied(
        "runtime attaches a slot map itself",
        rt_sql
            .execute(
                "INSERT INTO statek.shard_slot_maps (shard_id, tenant_ids, slot_map)
                 VALUES ('primary-v1', ARRAY['tenant-a'], ARRAY[0::smallint])",
                &[],
            )
            .await,
    );
    sql_denied(
        "runtime advance cursor",
        rt_sql
            .execute(
                "UPDATE statek.scheduler_shards SET next_sequence = next_sequence + 1000000",
                &[],
            )
            .await,
    );
    sql_denied(
        "runtime truncate reservations",
        rt_sql
            .execute("TRUNCATE statek.scheduler_reservations", &[])
            .await,
    );
    sql_denied(
        "runtime truncate shards",
        rt_sql
            .execute("TRUNCATE statek.scheduler_shards CASCADE", &[])
            .await,
    );
    // A new shard row must start at 0 with the digest of its bytes and the
    // sum of its weights as L, whoever inserts it.
    for (what, sql) in [
        (
            "runtime insert shard mid-sequence",
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length, next_sequence)
             SELECT 'forged-1', policy_bytes, policy_digest, cycle_length, 5
             FROM statek.scheduler_shards",
        ),
        (
            "runtime insert shard with another digest",
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length)
             SELECT 'forged-2', policy_bytes, sha256(policy_bytes), cycle_length
             FROM statek.scheduler_shards",
        ),
        (
            "runtime insert shard with another cycle length",
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length)
             SELECT 'forged-3', policy_bytes, policy_digest, cycle_length + 1
             FROM statek.scheduler_shards",
        ),
        (
            "runtime insert shard without a cycle digest",
            "INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length)
             SELECT 'forged-4', policy_bytes, policy_digest, cycle_length
             FROM statek.scheduler_shards",
        ),
        (
            "runtime insert shard of an unknown algorithm (digest matching its bytes)",
            "WITH b AS (SELECT convert_to(replace(convert_from(policy_bytes, 'UTF8'),
                                                  'swrr-v1', 'bogus-v1'), 'UTF8') AS bytes,
                               cycle_length, cycle_digest
                        FROM statek.scheduler_shards)
             INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
             SELECT 'forged-5', bytes,
                    sha256('\\x73746174656b2e706f6c6963792e763100'::bytea || bytes),
                    cycle_length, cycle_digest
             FROM b",
        ),
        (
            "runtime insert shard with non-canonical bytes (digest matching them)",
            "WITH b AS (SELECT convert_to(replace(convert_from(policy_bytes, 'UTF8'),
                                                  '\"tenants\":', '\"tenants\": '), 'UTF8')
                               AS bytes, cycle_length, cycle_digest
                        FROM statek.scheduler_shards)
             INSERT INTO statek.scheduler_shards
                 (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
             SELECT 'forged-6', bytes,
                    sha256('\\x73746174656b2e706f6c6963792e763100'::bytea || bytes),
                    cycle_length, cycle_digest
             FROM b",
        ),
    ] {
        let err = rt_sql.execute(sql, &[]).await.expect_err(what);
        assert_eq!(err.code().map(|c| c.code()), Some("SK001"), "{what}: {err}");
    }

    // A claim history row (migration V13): an attempt moves into the
    // history when its run is claimed again.
    let h = TenantId::try_from("tenant-h").unwrap();
    rt.enqueue(&NewRun::new(h.clone(), vec![4])).await.unwrap();
    let ClaimOutcome::Claimed(first) = rt.claim_run(&h, Duration::from_secs(30)).await.unwrap()
    else {
        panic!("claim")
    };
    assert!(matches!(
        rt.finish_runs(&[FinishRun::fail(first.lease, "again", Duration::ZERO)])
            .await
            .unwrap()[..],
        [FinishOutcome::Retrying { .. }]
    ));
    let ClaimOutcome::Claimed(second) = rt.claim_run(&h, Duration::from_secs(30)).await.unwrap()
    else {
        panic!("claim")
    };
    assert_eq!(second.lease.run_id(), first.lease.run_id());
    let moved: i64 = admin
        .query_one("SELECT count(*) FROM statek.run_claims", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(moved, 1);
    assert_eq!(
        rt.finish_runs(&[FinishRun::complete(second.lease)])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    // A run row holding its attempt's claim is deleted only when that
    // claim may go (an hour after it, its run finished, its slot's
    // reservation pruned), by every role that may delete runs.
    let held_claim = first.lease.run_id();
    for (what, client) in [
        ("retention deletes a run holding a fresh claim", &rn_rows),
        (
            "owner deletes a run holding a fresh claim",
            &client_as(&db, &owner).await,
        ),
    ] {
        let err = client
            .execute("DELETE FROM statek.runs WHERE run_id = $1", &[&held_claim])
            .await
            .expect_err(what);
        let db_error = err.as_db_error().expect(what);
        assert_eq!(
            (db_error.code().code(), db_error.message()),
            (
                "SK001",
                format!(
                    "statek: run {held_claim} holds the claim of its attempt 2 as evidence still kept (the run is live, the claim is younger than an hour, or its slot's reservation is retained)"
                )
                .as_str()
            ),
            "{what}"
        );
    }

    // The owner, who owns the tables, is still refused by the triggers it
    // owns (it could disable them; only superusers and owners can).
    let own_sql = client_as(&db, &owner).await;
    for (what, sql) in [
        (
            "owner truncate shards",
            "TRUNCATE statek.scheduler_shards CASCADE",
        ),
        (
            "owner truncate reservations",
            "TRUNCATE statek.scheduler_reservations CASCADE",
        ),
        (
            "owner move cursor back",
            "UPDATE statek.scheduler_shards SET next_sequence = 0",
        ),
        ("owner delete shard", "DELETE FROM statek.scheduler_shards"),
        (
            "owner delete claim history",
            "DELETE FROM statek.run_claims",
        ),
        ("owner truncate claim history", "TRUNCATE statek.run_claims"),
        (
            "owner truncate slot outcome records",
            "TRUNCATE statek.slot_outcomes",
        ),
        (
            "owner rewrite claim history",
            "UPDATE statek.run_claims SET lease_token = lease_token",
        ),
    ] {
        let err = own_sql.execute(sql, &[]).await.expect_err(what);
        assert_eq!(err.code().map(|c| c.code()), Some("SK001"), "{what}: {err}");
    }

    // Without CASCADE, the outcome records' foreign key (V14) refuses it
    // before the trigger would.
    let err = own_sql
        .execute("TRUNCATE statek.scheduler_reservations", &[])
        .await
        .expect_err("owner truncate reservations without cascade");
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err}");

    // Retention: prune only.
    let report = rn
        .prune_scheduler_fairness_reservations(&retention_policy)
        .await
        .unwrap();
    assert_eq!(report.deleted, 0);
    // Finished runs too (none is old enough yet), but no runs of its own.
    let pruned = rn.prune_finished_runs(&run_retention).await.unwrap();
    assert_eq!(pruned.deleted_runs, 0);
    denied(
        "retention retries a run",
        rn.retry_run(in_tx[1].run_id).await,
    );
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
    let rn_sql = client_as(&db, &retention).await;
    // Retention may delete only rows at least an hour old: a fresh
    // acknowledgement stays replayable.
    let young = rn_sql
        .execute("DELETE FROM statek.scheduler_reservations", &[])
        .await
        .expect_err("retention deletes a fresh reservation");
    assert_eq!(young.code().map(|c| c.code()), Some("SK001"), "{young}");
    sql_denied(
        "retention calls statek.reserve",
        rn_sql
            .execute(
                "SELECT * FROM statek.reserve($1, 'primary-v1', '\\x00'::bytea, NULL, 'on')",
                &[&Uuid::now_v7()],
            )
            .await,
    );

    // Nothing a denied call tried was written: one shard, one
    // reservation, and the next one is sequence 1.
    assert_eq!(rt.next_sequence(p.shard_id()).await.unwrap(), 1);
    let shards: i64 = admin
        .query_one("SELECT count(*) FROM statek.scheduler_shards", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shards, 1);
    assert_eq!(
        rt.reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
            .await
            .unwrap()
            .sequence(),
        1
    );
    assert_eq!(rt.count_live_runs().await.unwrap(), 0);
}

#[tokio::test]
async fn the_profile_can_set_the_runtime_roles_synchronous_commit() {
    let db = TestDatabase::create().await;
    let suffix = &db.name()["statek_test_".len()..];
    let (owner, runtime, retention) = (
        format!("o_{suffix}"),
        format!("rt_{suffix}"),
        format!("rn_{suffix}"),
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
    let role_settings = |role: String| {
        let admin = &admin;
        async move {
            admin
                .query(
                    "SELECT unnest(s.setconfig) AS setting FROM pg_db_role_setting AS s
                     JOIN pg_roles AS r ON r.oid = s.setrole
                     WHERE r.rolname = $1 AND s.setdatabase = 0",
                    &[&role],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>("setting"))
                .collect::<Vec<_>>()
        }
    };
    // Without the option the role keeps no setting of its own.
    let profile = RoleProfile::new(&owner, &runtime, &retention).unwrap();
    db.store().apply_role_profile(&profile).await.unwrap();
    assert_eq!(role_settings(runtime.clone()).await, Vec::<String>::new());
    let profile =
        profile.runtime_synchronous_commit(statek_store_pg::SynchronousCommit::RemoteApply);
    assert!(profile.sql().ends_with(&format!(
        "ALTER ROLE \"{runtime}\" SET synchronous_commit = 'remote_apply';\n"
    )));
    db.store().apply_role_profile(&profile).await.unwrap();
    assert_eq!(
        role_settings(runtime.clone()).await,
        ["synchronous_commit=remote_apply"]
    );
    assert_eq!(role_settings(owner.clone()).await, Vec::<String>::new());
    // A new session of the runtime role starts with it.
    let session = client_as(&db, &runtime).await;
    let level: String = session
        .query_one("SELECT current_setting('synchronous_commit') AS level", &[])
        .await
        .unwrap()
        .get("level");
    assert_eq!(level, "remote_apply");
}
