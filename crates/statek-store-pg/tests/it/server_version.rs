//! The server the database tests run against is the one the test matrix
//! says: `cargo xtask test` sets `STATEK_TEST_PG_VERSION` (16, 17) for each
//! run, and this test fails when the connected server's major version
//! differs, so a run labelled "PostgreSQL 16" cannot silently test 17.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::testing::TestDatabase;

/// The server's major version from `server_version_num` (e.g. 170010 is 17).
async fn server_major(db: &TestDatabase) -> u32 {
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int4 AS version_num",
            &[],
        )
        .await
        .unwrap();
    let version_num: i32 = row.get("version_num");
    u32::try_from(version_num).unwrap() / 10_000
}

#[tokio::test]
async fn the_server_is_the_major_version_the_matrix_names() {
    let db = TestDatabase::create_empty().await;
    let major = server_major(&db).await;
    match std::env::var("STATEK_TEST_PG_VERSION") {
        Ok(expected) => {
            let expected: u32 = expected.trim().parse().unwrap_or_else(|_| {
                panic!("STATEK_TEST_PG_VERSION={expected:?} is not a major version number")
            });
            assert_eq!(
                major, expected,
                "STATEK_TEST_PG_VERSION={expected} but the server at STATEK_TEST_DATABASE_URL \
                 is PostgreSQL {major}"
            );
        }
        // Outside the matrix (a developer's own server): any supported major.
        Err(_) => assert!(
            major >= 16,
            "PostgreSQL {major} is older than the supported 16"
        ),
    }
}
