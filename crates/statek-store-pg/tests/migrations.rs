//! Migration integrity: the committed manifest pins every migration file's
//! SHA-256 (a landed migration is never edited), and a database created with
//! an older migration set upgrades in place.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
    // Every file is embedded, as V<n>__<verb_object>.sql, numbered 1..=n.
    let embedded: Vec<String> = embedded_migrations()
        .into_iter()
        .map(|(v, name)| format!("V{v}__{name}.sql"))
        .collect();
    assert_eq!(embedded, found.keys().cloned().collect::<Vec<_>>());
    for (i, (version, _)) in embedded_migrations().iter().enumerate() {
        assert_eq!(*version as usize, i + 1);
    }
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

#[tokio::test]
async fn a_database_from_the_previous_migration_set_upgrades_in_place() {
    let latest = embedded_migrations().last().unwrap().0;
    let db = TestDatabase::create_at_version(latest - 1).await;
    let store = db.store();
    let p = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("tenant-a").unwrap(), 1).unwrap()],
    )
    .unwrap();
    store.register(&p).await.unwrap();
    // A reservation as the previous schema's statement wrote it (this
    // build's statement needs the latest schema).
    db.client()
        .await
        .execute(
            "WITH r AS (INSERT INTO statek.scheduler_reservations
                            (reservation_id, shard_id, sequence, slot, policy_digest)
                        SELECT $1, shard_id, 0, 0, policy_digest FROM statek.scheduler_shards
                        RETURNING shard_id)
             UPDATE statek.scheduler_shards SET next_sequence = 1 FROM r
             WHERE scheduler_shards.shard_id = r.shard_id",
            &[&Uuid::now_v7()],
        )
        .await
        .unwrap();
    let before = store.reservations(p.shard_id(), 0, 10).await.unwrap();
    assert_eq!(before.len(), 1);
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.applied().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        vec![latest]
    );
    // The evidence survived and the sequence continues.
    assert_eq!(
        store.reservations(p.shard_id(), 0, 10).await.unwrap(),
        before
    );
    let next = store
        .reserve(p.shard_id(), &p.digest(), Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(next.sequence(), 1);
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
        Err(StoreError::MigrationDivergent { version, .. }) => assert_eq!(version, 1),
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
        Err(StoreError::MigrationMissing { version, name }) => {
            assert_eq!((version, name.as_str()), (999, "from_the_future"))
        }
        other => panic!("expected MigrationMissing, got {other:?}"),
    }
}
