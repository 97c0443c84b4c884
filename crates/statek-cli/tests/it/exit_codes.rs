//! One test per exit code of the `statek` binary (see `exit.rs`), and a
//! closed standard output: a reader that stops early ends the command
//! quietly with 0, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use statek_store_pg::testing::TestDatabase;
use uuid::Uuid;

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn command(args: &[&str], database_url: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_statek"));
    cmd.args(args)
        .current_dir(workspace())
        .env_remove("DATABASE_URL")
        // The test server is fast, not durable: exit 10 by default is
        // tested in tests/it/cli.rs.
        .env("STATEK_DURABILITY", "none")
        .env("RUST_BACKTRACE", "1");
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    cmd
}

fn statek(args: &[&str], database_url: Option<&str>) -> Output {
    command(args, database_url).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit code and the whole of stderr.
fn outcome(o: &Output) -> (Option<i32>, String) {
    (o.status.code(), stderr(o))
}

/// A policy file whose cycle is the longest allowed (4096 slots), so that
/// `--show-cycle` prints far more than a pipe buffers.
fn big_policy() -> PathBuf {
    let path = std::env::temp_dir().join(format!("statek-big-{}.toml", Uuid::now_v7().simple()));
    let mut text = String::from("shard = \"primary-v1\"\n");
    for i in 0..1024 {
        text.push_str(&format!(
            "\n[[tenants]]\nid = \"tenant-{i:04}\"\nweight = 4\n"
        ));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `statek args`, reads `keep` bytes of its stdout and closes the
/// pipe, like `| head -c keep`.
fn read_then_close(args: &[&str], database_url: Option<&str>, keep: usize) -> (Vec<u8>, Output) {
    let mut child = command(args, database_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut head = vec![0; keep];
    stdout.read_exact(&mut head).unwrap();
    drop(stdout);
    (head, child.wait_with_output().unwrap())
}

#[test]
fn ok_0_when_the_reader_closes_stdout_early() {
    let file = big_policy();
    let file_arg = file.to_str().unwrap();
    for format in ["json", "text"] {
        let (head, out) = read_then_close(
            &[
                "policy",
                "compile",
                file_arg,
                "--show-cycle",
                "--format",
                format,
            ],
            None,
            10,
        );
        assert_eq!(head.len(), 10);
        assert_eq!(outcome(&out), (Some(0), String::new()), "--format {format}");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn failure_1_when_stdout_fails_otherwise() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = command(
        &["policy", "compile", "deploy/policies/two-tenants.toml"],
        None,
    )
    .stdout(full)
    .output()
    .unwrap();
    assert_eq!(
        outcome(&out),
        (
            Some(1),
            "statek: error: cannot write to standard output: No space left on device (os error 28)\n"
                .to_owned()
        )
    );
}

/// A standard error that cannot be written (`2>/dev/full`) drops the
/// error line; the exit code still says what failed (no panic, no 101).
#[test]
fn the_exit_code_stands_when_stderr_cannot_be_written() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let out = command(&["policy", "compile", "no-such-policy.toml"], None)
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // Both streams unwritable: the same.
    let out = command(&["policy", "compile", "no-such-policy.toml"], None)
        .stdout(full())
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
}

/// An environment value of a boolean option that is not a boolean is a
/// usage error, not silently on or off.
#[test]
fn usage_2_for_a_non_boolean_transaction_pooling_value() {
    let out = command(
        &["status", "--shard", "primary-v1"],
        Some("host=127.0.0.1 port=1"),
    )
    .env("STATEK_TRANSACTION_POOLING", "maybe")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(
            "error: invalid value 'maybe' for '--transaction-pooling': value was not a boolean"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_2() {
    let out = statek(&["no-such-command"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn usage_2_for_diff_algorithm_with_two_files() {
    // `--algorithm` only applies with `--against`; with two files it would
    // be ignored silently, so it is refused.
    let file = "deploy/policies/two-tenants.toml";
    let out = statek(
        &["policy", "diff", file, file, "--algorithm", "min-gap-v1"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--algorithm"), "{}", stderr(&out));
    let out = statek(
        &[
            "policy",
            "diff",
            file,
            "--algorithm",
            "min-gap-v1",
            "--against",
            "min-gap-v2",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A flag value that is not of its kind (not an integer, not one of the
/// listed names, not a UUID) is refused by clap before anything else, as
/// `--batch two` always was: exit 2 and clap's message; no database needed.
#[test]
fn usage_2_for_a_flag_value_that_is_not_of_its_kind() {
    let file = "deploy/policies/two-tenants.toml";
    let algorithms = "  [possible values: swrr-v1, min-gap-v1, min-gap-v2]\n";
    let states = "  [possible values: available, running, completed, failed, cancelled]\n";
    for (args, message) in [
        (
            &["prune", "--retain", "24h", "--batch", "two"][..],
            "invalid value 'two' for '--batch <BATCH>': two is not a whole number in 1..=10000\n"
                .to_owned(),
        ),
        (
            &["prune", "--retain", "-24h"][..],
            "invalid value '-24h' for '--retain <RETAIN>': -24h is negative: give how long to \
             keep, such as 24h or 30d\n"
                .to_owned(),
        ),
        (
            &[
                "limits",
                "set",
                "--tenant",
                "tenant-a",
                "--max-running",
                "two",
            ][..],
            "invalid value 'two' for '--max-running <N>': invalid digit found in string\n"
                .to_owned(),
        ),
        (
            &["policy", "diff", file, "--against", "min-gap-v9"][..],
            format!(
                "invalid value 'min-gap-v9' for '--against <AGAINST>'\n{algorithms}\n  tip: a \
                 similar value exists: 'min-gap-v2'\n"
            ),
        ),
        (
            &[
                "policy",
                "diff",
                file,
                "--algorithm",
                "x",
                "--against",
                "swrr-v1",
            ][..],
            format!("invalid value 'x' for '--algorithm <ALGORITHM>'\n{algorithms}"),
        ),
        (
            &["runs", "list", "--state", "done"][..],
            format!("invalid value 'done' for '--state <STATE>'\n{states}"),
        ),
        (
            &["runs", "cancel", "not-a-uuid"][..],
            "invalid value 'not-a-uuid' for '<ID>': invalid character: found `n` at 0\n".to_owned(),
        ),
        (
            &["runs", "retry", "not-a-uuid"][..],
            "invalid value 'not-a-uuid' for '<ID>': invalid character: found `n` at 0\n".to_owned(),
        ),
    ] {
        assert_eq!(
            outcome(&statek(args, None)),
            (
                Some(2),
                format!("error: {message}\nFor more information, try '--help'.\n")
            ),
            "{args:?}"
        );
    }
    // An integer out of range is the command's check: invalid input, exit 3.
    assert_eq!(
        outcome(&statek(
            &[
                "limits",
                "set",
                "--tenant",
                "tenant-a",
                "--max-running",
                "-5"
            ],
            None
        )),
        (
            Some(3),
            "statek: error: invalid tenant limit: max running must be 1..=100000, got -5\n"
                .to_owned()
        )
    );
}

#[test]
fn invalid_input_3_for_status_retain_like_prune() {
    for command in ["status", "prune"] {
        let mut args = vec![command, "--retain", "10000y"];
        if command == "status" {
            args.extend(["--shard", "primary-v1"]);
        }
        // Validated before any connection: no database is needed.
        let out = statek(&args, None);
        assert_eq!(
            outcome(&out),
            (
                Some(3),
                "statek: error: invalid argument: retention must be 1 hour..=366 days, got \
                 315576000000 s\n"
                    .to_owned()
            ),
            "{command}"
        );
    }
}

#[test]
fn invalid_input_3_echoes_at_most_64_characters() {
    let file = std::env::temp_dir().join(format!("statek-algo-{}.toml", Uuid::now_v7().simple()));
    let name = "x".repeat(100_000);
    std::fs::write(
        &file,
        format!(
            "shard = \"primary-v1\"\nalgorithm = \"{name}\"\n\n[[tenants]]\nid = \"a\"\nweight = 1\n"
        ),
    )
    .unwrap();
    let out = statek(&["policy", "compile", file.to_str().unwrap()], None);
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        outcome(&out),
        (
            Some(3),
            format!(
                "statek: error: {}:2:13: algorithm: unknown policy algorithm \"{}\"…(100000 bytes)\n",
                file.display(),
                "x".repeat(64)
            )
        )
    );
}

#[test]
fn configuration_9_for_unusable_connection_settings() {
    let check = |url: Option<&str>, message: &str| {
        let out = statek(&["migrate"], url);
        assert_eq!(
            outcome(&out),
            (Some(9), format!("statek: error: {message}\n")),
            "{url:?}"
        );
    };
    check(None, "no database: pass --database-url or set DATABASE_URL");
    check(
        Some(""),
        "the database URL is empty: pass --database-url or set DATABASE_URL",
    );
    check(
        Some("postgres://"),
        "invalid connection string: it names no host (postgres://HOST/DB or host=HOST)",
    );
    check(
        Some("postgres://u:hunter2@h/db?sslmode=bogus"),
        "invalid connection string: sslmode must be disable, prefer, require, verify-ca or \
         verify-full, got \"bogus\"",
    );
    check(
        Some("postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt"),
        "tls configuration: cannot read the root certificate (sslrootcert) file \
         \"/nonexistent/ca.crt\": No such file or directory (os error 2)",
    );
}

#[test]
fn unavailable_6_names_the_cause() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://statek@127.0.0.1:{port}/statek?connect_timeout=5");
    let out = statek(&["migrate"], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(6),
            "statek: error: connection to PostgreSQL failed: error connecting to server: \
             Connection refused (os error 111)\n"
                .to_owned()
        )
    );
}

/// Server errors whose message does not say what to do get the next step:
/// a database without the schema (run migrate), a role profile naming a
/// role that does not exist (create the roles).
#[tokio::test]
async fn failure_1_says_what_to_do_next() {
    let db = TestDatabase::create_empty().await;
    let url = db.connection_string();
    let out = statek(&["status", "--shard", "primary-v1"], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(1),
            "statek: error: database error 42P01: relation \"statek.scheduler_shards\" does not \
             exist (the statek schema is not migrated in this database: run `statek migrate` as \
             the owner role)\n"
                .to_owned()
        )
    );
    let out = statek(&["migrate"], Some(&url));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let user = db.pg_config().get_user().unwrap();
    let out = statek(
        &[
            "roles",
            "apply",
            "--owner",
            user,
            "--runtime",
            "statek_no_such_role",
            "--retention",
            "statek_no_such_role_either",
        ],
        Some(&url),
    );
    assert_eq!(
        outcome(&out),
        (
            Some(1),
            "statek: error: database error 42704: role \"statek_no_such_role\" does not exist \
             (create the three login roles first, see docs/operations.md \"Roles and connection \
             strings\")\n"
                .to_owned()
        )
    );
}

#[tokio::test]
async fn configuration_9_for_a_missing_database_or_role() {
    let db = TestDatabase::create_empty().await;
    let url = db.connection_string();
    let missing = url.replace(&format!("dbname={}", db.name()), "dbname=statek_missing_db");
    let out = statek(&["migrate"], Some(&missing));
    assert_eq!(
        outcome(&out),
        (
            Some(9),
            "statek: error: PostgreSQL refused the connection (3D000): database \
             \"statek_missing_db\" does not exist\n"
                .to_owned()
        )
    );
    let user = db.pg_config().get_user().unwrap();
    let no_role = url.replace(&format!("user={user}"), "user=statek_missing_role");
    let out = statek(&["migrate"], Some(&no_role));
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
}

#[tokio::test]
async fn corrupt_5_permission_denied_7_and_a_closed_stdout_of_status() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let out = statek(
        &["register", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // `statek status ... | head -1`.
    let (head, out) = read_then_close(&["status", "--shard", "primary-v1"], Some(&url), 5);
    assert_eq!(head, b"shard");
    assert_eq!(outcome(&out), (Some(0), String::new()));

    // 7: a role without any privilege on the schema.
    let role = format!("statek_nobody_{}", Uuid::now_v7().simple());
    let admin = db.client().await;
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .await
        .unwrap();
    let user = db.pg_config().get_user().unwrap();
    let as_role = url.replace(&format!("user={user}"), &format!("user={role}"));
    let out = statek(&["prune", "--retain", "24h"], Some(&as_role));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));

    // 5: the stored cycle length no longer matches the policy bytes
    // (written as the superuser with triggers off).
    admin
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE statek.scheduler_shards SET cycle_length = cycle_length + 1;
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    let out = statek(
        &["policy", "verify", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    admin
        .batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
}

/// Writes a policy file named `name` in a fresh directory.
fn policy_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn two_tenants(shard: &str, schedule: Option<&str>, weights: (u32, u32)) -> String {
    format!(
        "shard = \"{shard}\"\n{}[[tenants]]\nid = \"tenant-a\"\nweight = {}\n[[tenants]]\nid = \"tenant-b\"\nweight = {}\n",
        schedule.map_or_else(String::new, |s| format!("schedule = \"{s}\"\n")),
        weights.0,
        weights.1
    )
}

#[test]
fn schedule_conflict_13_when_the_files_of_a_rollout_name_two_schedules() {
    let dir = std::env::temp_dir().join(format!("statek-rollout-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let from = policy_file(
        &dir,
        "v1.toml",
        &two_tenants("primary-v1", Some("primary"), (3, 1)),
    );
    let to = policy_file(
        &dir,
        "v2.toml",
        &two_tenants("primary-v2", Some("other"), (1, 1)),
    );
    // Refused before any connection (there is no database here), dry run
    // or not.
    for dry_run in [true, false] {
        let mut args = vec!["rollout", from.as_str(), to.as_str()];
        if dry_run {
            args.push("--dry-run");
        }
        assert_eq!(
            outcome(&statek(&args, None)),
            (
                Some(13),
                format!(
                    "statek: error: {from} names schedule primary, {to} names schedule other: a \
                     rollout continues one schedule (give {to} schedule = \"primary\", or leave \
                     the key out)\n"
                )
            ),
            "dry run {dry_run}"
        );
    }
    // The same shard id on both sides: invalid input, before connecting.
    let out = statek(&["rollout", &from, &from, "--dry-run"], None);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

#[tokio::test]
async fn rollout_refusals_11_12_13_14_and_7_for_the_runtime_role() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let dir = std::env::temp_dir().join(format!("statek-rollout-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let v1 = policy_file(
        &dir,
        "v1.toml",
        &two_tenants("primary-v1", Some("primary"), (3, 1)),
    );
    let v2 = policy_file(
        &dir,
        "v2.toml",
        &two_tenants("primary-v2", Some("primary"), (1, 1)),
    );
    let v3 = policy_file(
        &dir,
        "v3.toml",
        &two_tenants("primary-v3", Some("primary"), (1, 2)),
    );
    let ok = |args: &[&str]| {
        let out = statek(args, Some(&url));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    };
    ok(&["register", &v1]);

    // 7: the runtime role registers and reserves but cannot seal.
    let suffix = &db.name()["statek_test_".len()..];
    let (owner, runtime, retention) = (
        format!("co_{suffix}"),
        format!("crt_{suffix}"),
        format!("crn_{suffix}"),
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
        .apply_role_profile(
            &statek_store_pg::RoleProfile::new(&owner, &runtime, &retention).unwrap(),
        )
        .await
        .unwrap();
    let user = db.pg_config().get_user().unwrap();
    let as_runtime = url.replace(&format!("user={user}"), &format!("user={runtime}"));
    let out = statek(&["rollout", &v1, &v2], Some(&as_runtime));
    assert_eq!(
        outcome(&out),
        (
            Some(7),
            "statek: error: rollout needs the owner role (the --database-url of migrate): the \
             runtime and retention roles may not seal a shard: permission denied: permission \
             denied for table scheduler_shards\n"
                .to_owned()
        )
    );

    // 7 with the role to use: limits and prunes as the runtime role.
    let out = statek(
        &[
            "limits",
            "set",
            "--tenant",
            "tenant-a",
            "--max-running",
            "2",
        ],
        Some(&as_runtime),
    );
    assert_eq!(
        outcome(&out),
        (
            Some(7),
            "statek: error: limits set and clear need the owner role (the --database-url of \
             migrate): the runtime role may only read them: permission denied: permission denied \
             for table tenant_limits\n"
                .to_owned()
        )
    );
    let out = statek(&["prune", "--retain", "1h"], Some(&as_runtime));
    assert_eq!(
        outcome(&out),
        (
            Some(7),
            "statek: error: prune needs the retention role's --database-url (or the owner's): \
             the runtime role may not delete reservation rows: permission denied: permission \
             denied for table scheduler_reservations\n"
                .to_owned()
        )
    );

    // 14: a second shard registered into a schedule with a live shard.
    let out = statek(&["register", &v2], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(14),
            "statek: error: schedule primary already has the live shard primary-v1: change its \
             policy with `statek rollout` (a new shard joins a schedule only as a successor)\n"
                .to_owned()
        )
    );

    // 13 from the database: the file names another schedule than the
    // shard's (the same bytes; a different chain).
    let v1_other = policy_file(
        &dir,
        "v1-other.toml",
        &two_tenants("primary-v1", Some("other"), (3, 1)),
    );
    let v2_unnamed = policy_file(
        &dir,
        "v2-unnamed.toml",
        &two_tenants("primary-v2", None, (1, 1)),
    );
    let out = statek(&["rollout", &v1_other, &v2_unnamed], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(13),
            "statek: error: shard primary-v1 belongs to schedule primary, not other\n".to_owned()
        )
    );
    let out = statek(&["register", &v1_other], Some(&url));
    assert_eq!(out.status.code(), Some(13), "{}", stderr(&out));

    // 12: the successor's shard id is taken (here by a shard of its own
    // schedule).
    let taken = policy_file(&dir, "taken.toml", &two_tenants("taken-v1", None, (1, 3)));
    ok(&["register", &taken]);
    let out = statek(&["rollout", &v1, &taken], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(12),
            "statek: error: shard taken-v1 is already registered: a rollout needs a new shard id \
             as successor\n"
                .to_owned()
        )
    );

    // 11: after v1 -> v2, a rollout from v1 again names the live shard.
    ok(&["rollout", &v1, &v2]);
    let out = statek(&["rollout", &v1, &v3], Some(&url));
    assert_eq!(
        outcome(&out),
        (
            Some(11),
            "statek: error: shard primary-v1 is not the live shard of schedule primary: it was \
             sealed at sequence 0; roll out from primary-v2\n"
                .to_owned()
        )
    );
    // From the live shard it goes on; the chain is v1 -> v2 -> v3.
    ok(&["rollout", &v2, &v3]);
    let status = statek(
        &["status", "--shard", "primary-v1", "--format", "json"],
        Some(&url),
    );
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(s["live_shard"], "primary-v3");
    // The refused rollouts wrote nothing: taken-v1 has no predecessor.
    let status = statek(
        &["status", "--shard", "taken-v1", "--format", "json"],
        Some(&url),
    );
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (s["predecessor"].clone(), s["schedule"].clone()),
        (serde_json::Value::Null, "taken-v1".into())
    );
}

/// 11 from the demo: its shard was rolled out, so its checks (one shard
/// against its own cycle) cannot judge it; nothing runs.
#[cfg(feature = "demo")]
#[tokio::test]
async fn not_live_shard_11_for_a_demo_on_a_rolled_out_shard() {
    let dir = std::env::temp_dir().join(format!("statek-demo-sealed-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let v1 = policy_file(&dir, "v1.toml", &two_tenants("demo-v1", None, (3, 1)));
    let v2 = policy_file(&dir, "v2.toml", &two_tenants("demo-v2", None, (1, 1)));
    for args in [
        vec!["register", v1.as_str()],
        vec!["rollout", v1.as_str(), v2.as_str()],
    ] {
        let out = statek(&args, Some(&url));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    // Two levels the demo's early check of the charts directory creates,
    // and removes again.
    let charts = dir.join("charts").join("nested");
    let out = statek(
        &[
            "demo",
            "--policy",
            &v1,
            "--durability",
            "none",
            "--charts-dir",
            charts.to_str().unwrap(),
        ],
        Some(&url),
    );
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(11),
            "statek: error: the demo's shard was rolled out before the demo: run the demo on a \
             database of its own, or give --policy a file with a new shard id: shard demo-v1 is \
             sealed at sequence 0 (its last sequence is the one before): its successor is \
             demo-v2\n"
                .to_owned()
        )
    );
    assert!(!dir.join("charts").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// 10: the durability check refuses the fast test server by default, and
/// the message says what to do, `--durability none` for a throw-away one
/// included (a new user's first `statek register` after `cargo xtask pg
/// start` meets exactly this).
#[tokio::test]
async fn durability_refused_10_says_what_to_do() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let out = statek(
        &[
            "register",
            "deploy/policies/two-tenants.toml",
            "--durability",
            "require",
        ],
        Some(&url),
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(10), "{text}");
    assert!(
        text.starts_with("statek: error: ") && text.ends_with(
            " (make the server durable (docs/operations.md \"High availability and durability\"), \
             or, for a throw-away development server such as `cargo xtask pg start`'s, pass \
             `--durability none`)\n"
        ),
        "{text}"
    );
}

/// `prune --until-empty` waits behind due rows another transaction holds,
/// but not forever: a lock held for 10 s (a stuck transaction, not a
/// pruner's batch) ends the run with exit 0, a line on standard error,
/// and the rows left for the next run, which then deletes them.
#[tokio::test]
async fn prune_until_empty_stops_behind_a_stuck_lock() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let out = statek(
        &["register", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let admin = db.client().await;
    admin
        .batch_execute(
            "INSERT INTO statek.scheduler_reservations
                 (reservation_id, shard_id, sequence, slot, policy_digest, reserved_at)
             SELECT gen_random_uuid(), s.shard_id, g, (g % 4)::integer, s.policy_digest,
                    now() - interval '2 days' + g * interval '1 millisecond'
             FROM statek.scheduler_shards AS s, generate_series(0::bigint, 9) AS g;
             UPDATE statek.scheduler_shards SET next_sequence = 10;",
        )
        .await
        .unwrap();
    let mut holder = db.client().await;
    let held = holder.transaction().await.unwrap();
    held.execute(
        "SELECT 1 FROM statek.scheduler_reservations WHERE sequence = 0 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let out = statek(
        &["prune", "--retain", "24h", "--batch", "4", "--until-empty"],
        Some(&url),
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "prune: the oldest due rows stayed locked by another transaction for 10 s; stopping (run it again later)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("pruned 0 reservation rows in 201 batches"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    held.rollback().await.unwrap();
    let out = statek(
        &["prune", "--retain", "24h", "--batch", "4", "--until-empty"],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("pruned 10 reservation rows in 3 batches"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
