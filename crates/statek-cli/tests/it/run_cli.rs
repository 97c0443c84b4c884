//! Runs the `statek` binary the tests build, from the workspace root, with
//! `DATABASE_URL` set to a test database, and reads its output as text.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// `statek ARGS` against `database_url`, its output collected.
pub fn statek(args: &[&str], database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_statek"))
        .args(args)
        .current_dir(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
        .env("DATABASE_URL", database_url)
        .output()
        .unwrap()
}

/// Output bytes as UTF-8 text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}
