//! The `statek` binary through PgBouncer in transaction pooling mode
//! (`STATEK_TEST_PGBOUNCER_URL`, set by `cargo xtask test`; without it this
//! test fails, it never skips): `--transaction-pooling` and
//! `--direct-database-url`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use statek_store_pg::testing::TestDatabase;

fn statek(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_statek"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env_remove("DATABASE_URL")
        .env_remove("STATEK_TRANSACTION_POOLING")
        .env_remove("STATEK_DIRECT_DATABASE_URL")
        // The test server is fast, not durable (see tests/it/cli.rs for the
        // default refusal).
        .env("STATEK_DURABILITY", "none")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A key-value connection string for `pg`.
fn connection_string(pg: &tokio_postgres::Config) -> String {
    let mut parts = Vec::new();
    if let Some(tokio_postgres::config::Host::Tcp(host)) = pg.get_hosts().first() {
        parts.push(format!("host={host}"));
    }
    if let Some(port) = pg.get_ports().first() {
        parts.push(format!("port={port}"));
    }
    if let Some(user) = pg.get_user() {
        parts.push(format!("user={user}"));
    }
    if let Some(db) = pg.get_dbname() {
        parts.push(format!("dbname={db}"));
    }
    parts.join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_status_and_migrate_through_pgbouncer() {
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config();
    let bouncer = connection_string(config.pg_config());
    let policy = PathBuf::from("deploy/policies/two-tenants.toml");
    let policy = policy.to_str().unwrap();

    // Without the mode PgBouncer 1.18 refuses statek's startup options.
    // That is a configuration error (exit 9), not "retry later".
    let out = statek(&["register", policy, "--database-url", &bouncer]);
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unsupported startup parameter"),
        "{}",
        stderr(&out)
    );

    // In the mode, a role without the timeouts is refused, naming the fix
    // (a configuration error, exit 9).
    let out = statek(&[
        "register",
        policy,
        "--database-url",
        &bouncer,
        "--transaction-pooling",
    ]);
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ALTER ROLE \"postgres\" SET lock_timeout = '5000ms'"),
        "{}",
        stderr(&out)
    );

    // A database whose settings are right from the start: PgBouncer keeps
    // the server connections it opened above, and a per-database setting
    // reaches only new ones (docs/operations.md, PgBouncer section).
    let db = TestDatabase::create().await;
    let config = db.pgbouncer_store_config();
    let bouncer = connection_string(config.pg_config());
    let direct = db.connection_string();
    db.set_session_settings(&config).await;
    let out = statek(&[
        "register",
        policy,
        "--database-url",
        &bouncer,
        "--transaction-pooling",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_statek"))
        .args(["status", "--shard", "primary-v1", "--format", "json"])
        .env("DATABASE_URL", &bouncer)
        .env("STATEK_TRANSACTION_POOLING", "1")
        .env("STATEK_DURABILITY", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&status["next_sequence"], &status["retained_reservations"]),
        (&serde_json::json!(0), &serde_json::json!(0))
    );

    // Migrations need the direct connection (a configuration error, exit 9).
    let out = statek(&[
        "migrate",
        "--database-url",
        &bouncer,
        "--transaction-pooling",
    ]);
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--direct-database-url"),
        "{}",
        stderr(&out)
    );
    let out = statek(&[
        "migrate",
        "--database-url",
        &bouncer,
        "--transaction-pooling",
        "--direct-database-url",
        &direct,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
