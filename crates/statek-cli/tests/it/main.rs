//! The integration tests of statek-cli in one test binary: one link of the
//! whole stack instead of one per file (each file is a module here;
//! `cargo test -p statek-cli --test it MODULE::` runs one).
//! Tests that install a global metrics recorder keep binaries of their
//! Every file of the folder is a module of this binary.

mod audit;
mod cli;
#[cfg(feature = "demo")]
mod demo;
mod exit_codes;
mod halt;
mod pgbouncer;
mod roles_apply;
mod rollout_dry_run;
mod run_cli;
