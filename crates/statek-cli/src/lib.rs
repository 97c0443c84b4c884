//! The `statek` operator tool, as a library (the binary is a thin `main`).
//!
//! Commands: `policy compile|diff|verify`, `migrate`, `register`,
//! `rollout`, `roles apply`, `status`, `shard halts|resume`, `prune`, `limits set|show|clear`,
//! `runs list|cancel|retry|prune`, and `demo` with feature `demo`. Read commands take
//! `--format json`. Database URLs come from `--database-url` or
//! `DATABASE_URL` and are never printed with their password. Exit codes
//! (see [`exit`]): 0 ok, 1 other failure, 2 usage, 3 invalid input, 4 policy
//! conflict, 5 corrupt data, 6 database unavailable, 7 permission denied,
//! 8 a demo check failed, 9 configuration (connection settings: no or a bad
//! URL, TLS, the server refused the role, password or database; retrying
//! does not help), 10 durability refused, 11 not the live shard (sealed),
//! 12 successor exists, 13 schedule conflict (a different chain), 14 the
//! schedule already has a live shard (use `rollout`), 15 the shard is halted
//! after a reservation loss (`statek shard resume`). A closed standard output (`statek status | head -1`)
//! ends the command quietly with 0. Database URLs accept libpq's TLS
//! parameters (`sslmode=verify-full&sslrootcert=...`, see
//! `statek_store_pg::StoreConfig::from_url`).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use clap::Parser;
//! let cli = statek_cli::Cli::parse_from(["statek", "policy", "compile", "deploy/policies/two-tenants.toml"]);
//! statek_cli::run(cli)?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod audit_cmd;
#[cfg(feature = "demo")]
pub mod charts;
mod cli;
mod count_arg;
pub mod db;
#[cfg(feature = "demo")]
pub mod demo;
pub mod exit;
mod limits_cmd;
mod out;
pub mod policy_cmd;
pub mod policy_compile;
mod rollout_cmd;
mod runs_cmd;
mod shard_cmd;
mod store_cmd;

pub use cli::{run, Cli};
