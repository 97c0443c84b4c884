//! `statek roles apply --synchronous-commit LEVEL`: the runtime role's
//! default `synchronous_commit` in the profile's SQL (no database needed
//! for `--print`); a level that is not one is a usage error.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

fn statek(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_statek"))
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap()
}

const ROLES: [&str; 8] = [
    "roles",
    "apply",
    "--owner",
    "statek_owner",
    "--runtime",
    "statek_runtime",
    "--retention",
    "statek_retention",
];

#[test]
fn the_printed_profile_ends_by_setting_the_runtime_roles_synchronous_commit() {
    let out = statek(
        &[
            &ROLES[..],
            &["--synchronous-commit", "remote_apply", "--print"],
        ]
        .concat(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sql = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        sql.lines().last(),
        Some("ALTER ROLE \"statek_runtime\" SET synchronous_commit = 'remote_apply';")
    );
    assert_eq!(sql.matches("ALTER ROLE").count(), 1);

    let without = statek(&[&ROLES[..], &["--print"]].concat());
    let sql = String::from_utf8(without.stdout).unwrap();
    assert_eq!(sql.matches("ALTER ROLE").count(), 0);

    let bad = statek(
        &[
            &ROLES[..],
            &["--synchronous-commit", "sometimes", "--print"],
        ]
        .concat(),
    );
    assert_eq!(bad.status.code(), Some(2));
}
