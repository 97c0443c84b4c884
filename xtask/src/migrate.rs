//! `cargo xtask migrate`: applies the migrations in `/migrations` to the
//! server in `DATABASE_URL`, through statek-store-pg's `migrate` example (so
//! that xtask itself does not depend on the workspace crates).

use anyhow::{anyhow, Result};

use crate::{command, pg, workspace};

/// Runs `cargo run --quiet --package statek-store-pg --example migrate` with
/// `DATABASE_URL` in its environment.
pub fn run() -> Result<()> {
    let url = pg::external_database_url().ok_or_else(|| {
        anyhow!(
            "DATABASE_URL is not set; start a development server with \
             `cargo xtask pg start --version 17`, then `export DATABASE_URL=$(cargo xtask pg url --version 17)`"
        )
    })?;
    println!("migrate: applying migrations to {}", pg::redact(&url));
    let mut cargo = workspace::cargo();
    cargo
        .args([
            "run",
            "--quiet",
            "--package",
            "statek-store-pg",
            "--example",
            "migrate",
        ])
        .env("DATABASE_URL", url);
    command::run_inherited(&mut cargo)
}
