//! Migration integrity: the committed manifest pins every migration file's
//! SHA-256 (a landed migration is never edited), and a database created with
//! an older migration set upgrades in place.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::{MigrationError, RunQueueError};
use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{embedded_migrations, StoreError};
use uuid::Uuid;

fn migrations_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_migration_file_matches_the_committed_manifest() {
    let manifest = std::fs::read_to_string(migrations_dir().join("MANIFEST.sha256")).unwrap();
    let pinned: BTreeMap<String, String> = manifest
        .lines()
        .map(|line| {
            let (hash, name) = line.split_once("  ").expect("`<sha256>  <file>` lines");
            (name.to_owned(), hash.to_owned())
        })
        .collect();
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(migrations_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sql") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            found.insert(name, hex(&Sha256::digest(std::fs::read(&path).unwrap())));
        }
    }
    assert_eq!(
        found, pinned,
        "a migration was added, removed or edited: landed migrations are never edited; \
         a new one is added to migrations/MANIFEST.sha256 in the same commit"
    );
    // Every file is embedded, as V<n>__<verb_object>.sql, numbered from 1
    // upwards. Versions are strictly increasing rather than contiguous:
    // branches number their migrations ahead of ones still under review
    // (V6 landed before V5).
    let embedded: Vec<String> = embedded_migrations()
        .into_iter()
        .map(|(v, name)| format!("V{v}__{name}.sql"))
        .collect();
    let mut by_name = found.keys().cloned().collect::<Vec<_>>();
    by_name.sort_by_key(|name| {
        name.trim_start_matches('V')
            .split("__")
            .next()
            .and_then(|v| v.parse::<u32>().ok())
    });
    assert_eq!(embedded, by_name);
    let versions: Vec<u32> = embedded_migrations().iter().map(|(v, _)| *v).collect();
    assert_eq!(versions.first(), Some(&1));
    assert!(
        versions.windows(2).all(|pair| pair[0] < pair[1]),
        "{versions:?}"
    );
}

#[test]
fn every_migration_opens_with_a_comment_saying_why() {
    for (version, name) in embedded_migrations() {
        let text =
            std::fs::read_to_string(migrations_dir().join(format!("V{version}__{name}.sql")))
                .unwrap();
        assert!(text.starts_with("-- Why: "), "V{version}__{name}.sql");
    }
}

async fn has_column(db: &TestDatabase, column: &str) -> bool {
    db.client()
        .await
        .query_opt(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'statek' \
             AND table_name = 'scheduler_shards' AND column_name = $1",
            &[&column],
        )
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_database_from_the_previous_migration_set_upgrades_in_place() {
    let versions: Vec<u32> = embedded_migrations().iter().map(|(v, _)| *v).collect();
    let latest = *versions.last().unwrap();
    let previous = versions[versions.len() - 2];
    let db = TestDatabase::create_at_version(previous).await;
    let store = db.store();
    let p = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap();
    // Without V6's column, register the way the code of that migration set
    // did (today's register writes the cycle digest).
    let registered_before = db
        .client()
        .await
        .query_opt(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'statek' \
             AND table_name = 'scheduler_shards' AND column_name = 'cycle_digest'",
            &[],
        )
        .await
        .unwrap()
        .is_none();
    if registered_before {
        db.client()
            .await
            .execute(
                "INSERT INTO statek.scheduler_shards (shard_id, policy_bytes, policy_digest, cycle_length)
                 VALUES ($1, $2, $3, $4)",
                &[
                    &p.shard_id().as_str(),
                    &p.canonical_bytes(),
                    &&p.digest().as_bytes()[..],
                    &i32::try_from(p.cycle_length()).unwrap(),
                ],
            )
            .await
            .unwrap();
    } else if !has_column(&db, "schedule_id").await || !has_slot_maps(&db).await {
        // Before V8: no schedule column, which today's register writes;
        // before V11: no slot maps, which today's register attaches.
        db.client()
            .await
            .execute(
                "INSERT INTO statek.scheduler_shards
                     (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest)
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &p.shard_id().as_str(),
                    &p.canonical_bytes(),
                    &&p.digest().as_bytes()[..],
                    &i32::try_from(p.cycle_length()).unwrap(),
                    &&p.cycle_digest().as_bytes()[..],
                ],
            )
            .await
            .unwrap();
    } else {
        store.register(&p).await.unwrap();
    }
    let schedules_before = has_column(&db, "schedule_id").await;
    let slot_maps_before = has_slot_maps(&db).await;
    store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    // Read with plain SQL: today's reader expects the latest schema.
    let before: Vec<(Uuid, u64, u32)> = db
        .client()
        .await
        .query(
            "SELECT reservation_id, sequence, slot FROM statek.scheduler_reservations",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get("reservation_id"),
                u64::try_from(r.get::<_, i64>("sequence")).unwrap(),
                u32::try_from(r.get::<_, i32>("slot")).unwrap(),
            )
        })
        .collect();
    assert_eq!(before.len(), 1);
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        vec![latest]
    );
    // The evidence survived and the sequence continues.
    let after: Vec<(Uuid, u64, u32)> = store
        .reservations(p.shard_id(), 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.id(), r.sequence(), r.slot()))
        .collect();
    assert_eq!(after, before);
    let next = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(next.sequence(), 1);
    // A shard from before V8 is the first shard of the schedule named like
    // it, live.
    let upgraded = store.load_shard(p.shard_id()).await.unwrap();
    assert_eq!(upgraded.schedule().as_str(), "primary-v1");
    assert_eq!((upgraded.predecessor(), upgraded.seal()), (None, None));
    if !schedules_before {
        let q = WeightedFairnessPolicy::new(
            SchedulerShardId::try_from("primary-v3").unwrap(),
            [TenantFairnessWeight::new(TenantId::try_from("tenant-b").unwrap(), 1).unwrap()],
        )
        .unwrap();
        let rollout = store.rollout(&p, &q, None).await.unwrap();
        assert_eq!(rollout.sealed_at_sequence(), 2);
        assert_eq!(rollout.schedule().as_str(), "primary-v1");
    }
    if !slot_maps_before && !registered_before {
        // A shard registered before V11 gets its slot map when registered
        // again (a Worker registers at start).
        assert_eq!(slot_maps(&db).await, 0);
        store.register(&p).await.unwrap();
        assert_eq!(slot_maps(&db).await, 1);
    }
    if registered_before {
        // A shard registered before V6 has no cycle digest to check; a
        // shard registered after it has its own.
        assert_eq!(
            store.load_shard(p.shard_id()).await.unwrap().cycle_digest(),
            None
        );
        let q = WeightedFairnessPolicy::new(
            SchedulerShardId::try_from("primary-v2").unwrap(),
            [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
        )
        .unwrap();
        store.register(&q).await.unwrap();
        assert_eq!(
            store.load_shard(q.shard_id()).await.unwrap().cycle_digest(),
            Some(q.cycle_digest())
        );
    }
}

#[tokio::test]
async fn divergent_and_unknown_applied_migrations_are_typed_errors() {
    let db = TestDatabase::create().await;
    let client = db.client().await;
    client
        .batch_execute("UPDATE statek.refinery_schema_history SET checksum = '1' WHERE version = 1")
        .await
        .unwrap();
    match db.store().migrate().await {
        Err(StoreError::Migration(MigrationError::Divergent { version, .. })) => {
            assert_eq!(version, 1)
        }
        other => panic!("expected MigrationDivergent, got {other:?}"),
    }

    let db = TestDatabase::create().await;
    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO statek.refinery_schema_history (version, name, applied_on, checksum)
             SELECT 999, 'from_the_future', applied_on, checksum
             FROM statek.refinery_schema_history WHERE version = 1",
        )
        .await
        .unwrap();
    match db.store().migrate().await {
        Err(StoreError::Migration(MigrationError::Missing { version, name })) => {
            assert_eq!((version, name.as_str()), (999, "from_the_future"))
        }
        other => panic!("expected MigrationMissing, got {other:?}"),
    }
}

/// Whether migration V11's slot maps exist yet.
async fn has_slot_maps(db: &TestDatabase) -> bool {
    db.client()
        .await
        .query_opt(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'statek' \
             AND table_name = 'shard_slot_maps'",
            &[],
        )
        .await
        .unwrap()
        .is_some()
}

/// How many slot maps (migration V11) are attached.
async fn slot_maps(db: &TestDatabase) -> i64 {
    db.client()
        .await
        .query_one("SELECT count(*) FROM statek.shard_slot_maps", &[])
        .await
        .unwrap()
        .get(0)
}

/// Cancels a live run with the statement a binary built before migration
/// V13 sent (V13 made it `statek.cancel_run`, which this binary calls).
async fn cancel_before_v13(db: &TestDatabase, run_id: Uuid) {
    let cancelled = db
        .client()
        .await
        .execute(
            "UPDATE statek.runs SET state = 'cancelled', finished_at = clock_timestamp(),
                 lease_token = NULL, lease_expires_at = NULL
             WHERE run_id = $1 AND state IN ('available', 'running')",
            &[&run_id],
        )
        .await
        .unwrap();
    assert_eq!(cancelled, 1);
}

/// Every run's attempts as `(run, attempt, finish time)`: the raw claim
/// rows, or (from V12) as `statek.run_attempts` reads them.
async fn attempt_finishes(
    db: &TestDatabase,
    relation: &str,
) -> Vec<(Uuid, i32, Option<std::time::SystemTime>)> {
    db.client()
        .await
        .query(
            &format!("SELECT run_id, attempt, finished_at FROM statek.{relation} ORDER BY run_id, attempt"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// V11 to V12 (and V13): a completion stops writing its claim row. Runs claimed,
/// completed, retried, finally failed and cancelled under V11 keep every
/// claim row and finish time through the upgrade; a run still running at
/// the upgrade completes under V12 with its claim row untouched and its
/// finish time read from the run.
#[tokio::test]
async fn claim_history_written_before_v12_reads_the_same_after_it() {
    use statek_store_pg::{ClaimOutcome, FinishOutcome, FinishRun, NewRun};
    let db = TestDatabase::create_at_version(11).await;
    let store = db.store();
    let tenant = TenantId::try_from("tenant-a").unwrap();
    let lease = std::time::Duration::from_secs(60);
    let mut leases = Vec::new();
    for max_attempts in [5, 5, 1, 5, 5] {
        store
            .enqueue(&NewRun::new(tenant.clone(), b"x".to_vec()).max_attempts(max_attempts))
            .await
            .unwrap();
        let ClaimOutcome::Claimed(run) = store.claim_run(&tenant, lease).await.unwrap() else {
            panic!("expected a claim");
        };
        leases.push(run.lease);
    }
    let outcomes = store
        .finish_runs(&[
            FinishRun::complete(leases[0]),
            FinishRun::fail(leases[1], "again", std::time::Duration::from_secs(3600)),
            FinishRun::fail(leases[2], "last", std::time::Duration::ZERO),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes[0], FinishOutcome::Completed);
    assert_eq!(outcomes[2], FinishOutcome::Failed);
    cancel_before_v13(&db, leases[3].run_id()).await;
    let before = attempt_finishes(&db, "run_claims").await;
    assert_eq!(
        before
            .iter()
            .map(|(_, a, f)| (*a, f.is_some()))
            .collect::<Vec<_>>(),
        [(1, true), (1, true), (1, true), (1, false), (1, false)]
    );

    // V12 and then V13, which moves new claims onto the run rows: the
    // claims made before either keep their rows and read the same.
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [12, 13, 14, 15, 16, 17, 18, 19, 20]
    );
    assert_eq!(attempt_finishes(&db, "run_claims").await, before);
    assert_eq!(attempt_finishes(&db, "run_attempts").await, before);

    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(leases[4])])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    let raw = attempt_finishes(&db, "run_claims").await;
    let read = attempt_finishes(&db, "run_attempts").await;
    assert_eq!(raw[..4], before[..4]);
    assert_eq!(read[..4], before[..4]);
    assert_eq!(raw[4].2, None);
    let run_finished: Option<std::time::SystemTime> = db
        .client()
        .await
        .query_one(
            "SELECT finished_at FROM statek.runs WHERE run_id = $1",
            &[&leases[4].run_id()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(run_finished.is_some());
    assert_eq!(read[4], (leases[4].run_id(), 1, run_finished));
    // A replay of a V11 completion is still recorded.
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(leases[0])])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded]
    );
}

/// V12 to V13: claims move onto the run rows. Claims made under V12 (with
/// and without a slot) that completed, failed for good, failed and will
/// retry, were cancelled or still run at the upgrade keep their history
/// rows and read the same through `statek.run_attempts`. The running one
/// is finished through its history row; the retried one is claimed again
/// under V13 and holds its second attempt on its row, its first staying in
/// the history once; the rate limit's count sees every claim; replays of
/// V12 finishes are recorded; a V12 slot never claims again.
#[tokio::test]
async fn claims_made_before_v13_read_the_same_after_it() {
    use statek_store_pg::{ClaimOutcome, FinishOutcome, FinishRun, NewRun, SlotClaim};
    let db = TestDatabase::create_at_version(12).await;
    let store = db.store();
    let client = db.client().await;
    let tenant = TenantId::try_from("tenant-a").unwrap();
    let p = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(tenant.clone(), 1).unwrap()],
    )
    .unwrap();
    store.register(&p).await.unwrap();
    let lease = std::time::Duration::from_secs(60);
    let mut leases = Vec::new();
    for max_attempts in [5, 5, 1, 5, 5] {
        store
            .enqueue(&NewRun::new(tenant.clone(), b"x".to_vec()).max_attempts(max_attempts))
            .await
            .unwrap();
        let ClaimOutcome::Claimed(run) = store.claim_run(&tenant, lease).await.unwrap() else {
            panic!("expected a claim");
        };
        leases.push(run.lease);
    }
    store
        .enqueue(&NewRun::new(tenant.clone(), b"slot".to_vec()))
        .await
        .unwrap();
    let slots = statek_store_pg::testing::reserved_slots(&store, &p, &[&tenant]).await;
    let claims = store
        .claim_runs_for_slots(&slots, p.shard_id(), lease)
        .await
        .unwrap();
    let [SlotClaim::Claimed(by_slot)] = &claims[..] else {
        panic!("expected a slot claim, got {claims:?}");
    };
    leases.push(by_slot.lease);
    let outcomes = store
        .finish_runs(&[
            FinishRun::complete(leases[0]),
            FinishRun::fail(leases[1], "again", std::time::Duration::ZERO),
            FinishRun::fail(leases[2], "last", std::time::Duration::ZERO),
            FinishRun::complete(leases[5]),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes[0], FinishOutcome::Completed);
    assert!(matches!(outcomes[1], FinishOutcome::Retrying { .. }));
    assert_eq!(
        outcomes[2..],
        [FinishOutcome::Failed, FinishOutcome::Completed]
    );
    cancel_before_v13(&db, leases[3].run_id()).await;
    let history_rows = async || -> i64 {
        client
            .query_one("SELECT count(*) FROM statek.run_claims", &[])
            .await
            .unwrap()
            .get(0)
    };
    assert_eq!(history_rows().await, 6);
    let before = attempt_finishes(&db, "run_attempts").await;

    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [13, 14, 15, 16, 17, 18, 19, 20]
    );
    assert_eq!(attempt_finishes(&db, "run_attempts").await, before);

    // The run still running at the upgrade completes through its V12
    // claim row.
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(leases[4])])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    // The retried run is claimed again, now on its row.
    let ClaimOutcome::Claimed(again) = store.claim_run(&tenant, lease).await.unwrap() else {
        panic!("expected a claim");
    };
    assert_eq!(
        (again.lease.run_id(), again.attempt),
        (leases[1].run_id(), 2)
    );
    assert_eq!(history_rows().await, 6);
    let after = attempt_finishes(&db, "run_attempts").await;
    assert_eq!(after.len(), 7);
    let retried: Vec<(i32, bool)> = after
        .iter()
        .filter(|(run, ..)| *run == leases[1].run_id())
        .map(|(_, attempt, finished)| (*attempt, finished.is_some()))
        .collect();
    assert_eq!(retried, [(1, true), (2, false)]);
    let finished_run: Vec<bool> = after
        .iter()
        .filter(|(run, ..)| *run == leases[4].run_id())
        .map(|(.., finished)| finished.is_some())
        .collect();
    assert_eq!(finished_run, [true]);
    // The rate limit's count (V17): the history always, a run row's claim
    // once marked for a rate limit. Without one, the history's six; a
    // limit set now marks the run rows' claims inside its window (the
    // completed ones too), and it counts all seven.
    let counted = async || crate::lighter_claims::counted(&client).await;
    assert_eq!(counted().await, 6);
    client
        .execute(
            "INSERT INTO statek.tenant_limits (tenant_id, rate_limit, rate_window_ms)
             VALUES ('tenant-a', 1000, 3600000)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(counted().await, 7);
    client
        .execute("DELETE FROM statek.tenant_limits", &[])
        .await
        .unwrap();
    // Replays of V12 finishes are recorded; a V12 slot never claims again
    // (a run of its tenant waits: nothing of the call is kept).
    assert_eq!(
        store
            .finish_runs(&[
                FinishRun::complete(leases[0]),
                FinishRun::fail(leases[1], "again", std::time::Duration::ZERO),
            ])
            .await
            .unwrap(),
        [FinishOutcome::AlreadyRecorded; 2]
    );
    store
        .enqueue(&NewRun::new(tenant.clone(), b"waits".to_vec()))
        .await
        .unwrap();
    assert!(matches!(
        store
            .claim_runs_for_slots(&slots, p.shard_id(), lease)
            .await,
        Err(StoreError::RunQueue(
            RunQueueError::SlotAlreadyClaimed { .. }
        ))
    ));
}

/// Migration V18: the six-argument `statek.finish_runs` (with costs) is
/// executable by every role that could execute the five-argument form
/// before the upgrade, and by nobody else; attempts finished before it
/// read no cost, and the five-argument form still finishes, recording
/// none.
#[tokio::test]
async fn v18_grants_finishes_with_costs_to_whoever_could_finish() {
    use statek_store_pg::{ClaimOutcome, FinishOutcome, FinishRun, NewRun};
    let db = TestDatabase::create_at_version(17).await;
    let store = db.store();
    let admin = db.client().await;
    let suffix = Uuid::now_v7().simple().to_string();
    let (finisher, other) = (format!("finisher_{suffix}"), format!("other_{suffix}"));
    for role in [&finisher, &other] {
        admin
            .batch_execute(&format!("CREATE ROLE {role} NOLOGIN"))
            .await
            .unwrap();
    }
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[])
                 TO {finisher}"
        ))
        .await
        .unwrap();
    let tenant = TenantId::try_from("tenant-a").unwrap();
    let mut leases = Vec::new();
    for _ in 0..2 {
        store
            .enqueue(&NewRun::new(tenant.clone(), b"x".to_vec()))
            .await
            .unwrap();
        let ClaimOutcome::Claimed(run) = store
            .claim_run(&tenant, std::time::Duration::from_secs(60))
            .await
            .unwrap()
        else {
            panic!("expected a claim");
        };
        leases.push(run.lease);
    }
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(leases[0])])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    // A finish with a cost needs V18: a typed configuration error, and
    // nothing recorded.
    let early = store
        .finish_runs(&[FinishRun::complete(leases[1]).with_cost(Some(3))])
        .await
        .unwrap_err();
    assert!(
        matches!(
            early,
            StoreError::Migration(MigrationError::Behind { version: 18, .. })
        ),
        "{early:?}"
    );
    assert!(early.is_configuration() && !early.is_retryable());
    // Reading the attempts back needs V18's columns.
    assert!(matches!(
        store.run_history(&[leases[0].run_id()]).await,
        Err(StoreError::Migration(MigrationError::Behind {
            version: 18,
            ..
        }))
    ));
    assert_eq!(
        early.to_string(),
        "recording an attempt's cost needs migration V18, which the database does not have \
         yet: run `statek migrate`"
    );

    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [18, 19, 20]
    );
    let may = async |role: &str| -> bool {
        admin
            .query_one(
                "SELECT has_function_privilege($1,
                     'statek.finish_runs(uuid[], uuid[], text[], float8[], text[], bigint[])',
                     'EXECUTE')",
                &[&role],
            )
            .await
            .unwrap()
            .get(0)
    };
    assert!(may(&finisher).await);
    assert!(!may(&other).await);
    assert_eq!(
        store
            .finish_runs(&[FinishRun::complete(leases[1])])
            .await
            .unwrap(),
        [FinishOutcome::Completed]
    );
    let history = store
        .run_history(&[leases[0].run_id(), leases[1].run_id()])
        .await
        .unwrap();
    let costs: Vec<Vec<Option<u64>>> = history
        .iter()
        .map(|run| run.claims.iter().map(|claim| claim.cost).collect())
        .collect();
    assert_eq!(costs, [vec![None], vec![None]]);
    for role in [&finisher, &other] {
        admin
            .batch_execute(&format!(
                "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA statek FROM {role}; DROP ROLE {role}"
            ))
            .await
            .unwrap();
    }
}

/// Migration V15: PostgreSQL grants EXECUTE on a new function to PUBLIC,
/// and a SECURITY DEFINER function runs with its owner's rights. In a
/// freshly migrated database (no role profile applied) no SECURITY
/// DEFINER function of the schema keeps that grant, so a role given only
/// USAGE on the schema cannot call one: not to record a reservation loss
/// (which halts a shard), not to lock a tenant's limits.
#[tokio::test]
async fn no_security_definer_function_is_executable_by_public() {
    let db = TestDatabase::create().await;
    let admin = db.client().await;
    let definers: Vec<(String, bool)> = admin
        .query(
            "SELECT p.oid::regprocedure::text,
                    EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                            WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
             FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
             WHERE n.nspname = 'statek' AND p.prosecdef
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let names: Vec<&str> = definers.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        names.contains(&"statek.claim_allowance(text[],bigint[])")
            && names.contains(
                &"statek.record_reservation_loss(text,boolean,integer,integer,jsonb,text,text)"
            ),
        "the two functions V15 revokes are SECURITY DEFINER functions: {names:?}"
    );
    let public: Vec<&str> = definers
        .iter()
        .filter(|(_, public)| *public)
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(public, Vec::<&str>::new(), "PUBLIC may execute these");

    // A role with USAGE on the schema and nothing else is refused.
    let role = format!("u_{}", &db.name()["statek_test_".len()..]);
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT CONNECT ON DATABASE {} TO {role};
             GRANT USAGE ON SCHEMA statek TO {role}",
            db.name()
        ))
        .await
        .unwrap();
    let mut pg = db.pg_config().clone();
    pg.user(&role);
    let (client, connection) = pg.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    for call in [
        "SELECT * FROM statek.record_reservation_loss('primary-v1', true, 1, 0, '[]'::jsonb, 'test', 'on')",
        "SELECT * FROM statek.claim_allowance(ARRAY['tenant-a'], ARRAY[1::bigint])",
    ] {
        let e = client.query(call, &[]).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{call}: {e}"
        );
    }
}

/// Migration V19: whoever could claim slots before still may, and may
/// claim a cost shard's slots through the new function; a cost-mode shard on a
/// database before V19 is a configuration error naming the migration, and
/// registers after it with its parameters recorded.
#[tokio::test]
async fn v19_keeps_claim_grants_and_admits_cost_shards() {
    use statek_policy::{CostFairness, FairnessUnit};
    let db = TestDatabase::create_at_version(18).await;
    let store = db.store();
    let admin = db.client().await;
    let suffix = Uuid::now_v7().simple().to_string();
    let (claimer, other) = (format!("claimer_{suffix}"), format!("other_{suffix}"));
    for role in [&claimer, &other] {
        admin
            .batch_execute(&format!("CREATE ROLE {role} NOLOGIN"))
            .await
            .unwrap();
    }
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint)
                 TO {claimer}"
        ))
        .await
        .unwrap();
    let cost = statek_store_pg::testing::policy("cost-v1", &[("tenant-a", 3), ("tenant-b", 1)])
        .with_fairness(FairnessUnit::Cost(
            CostFairness::new(1, 40, 40, 80).unwrap(),
        ));
    let early = store.register(&cost).await.unwrap_err();
    assert!(
        matches!(
            &early,
            StoreError::Migration(MigrationError::Behind { version: 19, .. })
        ),
        "{early:?}"
    );
    assert_eq!(
        early.to_string(),
        "a shard that shares cost needs migration V19, which the database does not have yet: \
         run `statek migrate`"
    );
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [19, 20]
    );
    let may = async |role: &str, function: &str| -> bool {
        admin
            .query_one(
                "SELECT has_function_privilege($1, $2, 'EXECUTE')",
                &[
                    &role,
                    &format!("statek.{function}(bigint[], text[], uuid[], float8, text, bigint)"),
                ],
            )
            .await
            .unwrap()
            .get(0)
    };
    assert!(may(&claimer, "claim_slots").await);
    assert!(may(&claimer, "claim_cost_slots").await);
    assert!(!may(&other, "claim_slots").await);
    assert!(!may(&other, "claim_cost_slots").await);
    // The mark that lets statek.claim_slots take a cost shard's slots is
    // the owner's to write (statek.claim_cost_slots), nobody else's.
    let marks: bool = admin
        .query_one(
            "SELECT has_table_privilege($1, 'statek.cost_claims_open', 'INSERT')",
            &[&claimer],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!marks);
    store.register(&cost).await.unwrap();
    let row = admin
        .query_one(
            "SELECT schedule_id, quantum, max_cost, default_cost, balance_cap
             FROM statek.shard_costs WHERE shard_id = 'cost-v1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            row.get::<_, i64>(3),
            row.get::<_, i64>(4)
        ),
        ("cost-v1".to_owned(), 1, 40, 40, 80)
    );
    for role in [&claimer, &other] {
        admin
            .batch_execute(&format!(
                "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA statek FROM {role}; DROP ROLE {role}"
            ))
            .await
            .unwrap();
    }
}

/// Migration V20: cost claims made before it recorded no cut credits, so
/// it marks each progress row cut through what it had credited (an audit
/// gives spans before the upgrade no lower-side verdict); a cost shard's
/// audit on a database before V20 names the migration.
#[tokio::test]
async fn v20_marks_earlier_credits_cut_through_their_progress() {
    use statek_policy::{CostFairness, FairnessUnit};
    use statek_store_pg::{NewRun, SlotClaim, SlotClaimRequest};
    let db = TestDatabase::create_at_version(19).await;
    let store = db.store();
    let policy = statek_store_pg::testing::policy("cost-v1", &[("tenant-a", 1), ("tenant-b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap()));
    store.register(&policy).await.unwrap();
    let a = TenantId::try_from("tenant-a").unwrap();
    store.enqueue(&NewRun::new(a, vec![])).await.unwrap();
    let slots = statek_store_pg::testing::reserve_next_slots(&store, &policy, 2).await;
    let request = SlotClaimRequest::new(
        policy.shard_id(),
        &slots,
        std::time::Duration::from_secs(60),
        2,
    )
    .unwrap()
    .in_cost_mode();
    let claims = store.claim_slots(&request).await.unwrap();
    assert!(
        matches!(&claims[..], [SlotClaim::Claimed(_), SlotClaim::Idle]),
        "{claims:?}"
    );
    let early = store
        .audit_shard(policy.shard_id(), 0..2)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &early,
            StoreError::Migration(MigrationError::Behind { version: 20, .. })
        ),
        "{early:?}"
    );
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [20]
    );
    let client = db.client().await;
    let rows: Vec<(String, i64, Option<i64>)> = client
        .query(
            "SELECT tenant_id, as_of_sequence, clipped_through FROM statek.cost_credit_progress
             ORDER BY tenant_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [
            ("tenant-a".to_owned(), 0, Some(0)),
            ("tenant-b".to_owned(), 1, Some(1))
        ]
    );
    let audited = store.audit_shard(policy.shard_id(), 0..2).await.unwrap();
    let judged: Vec<Option<u64>> = audited
        .tenants
        .iter()
        .map(|t| t.cost.as_ref().unwrap().clipped_through)
        .collect();
    assert_eq!(judged, [Some(0), Some(1)]);
}
