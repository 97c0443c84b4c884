//! The tasks that link statek's crates (demo, bench, failover, ha-layouts,
//! chaos, bounds-report, deploy-check) live in crate statek-bench, so xtask
//! itself links no product crate: `cargo xtask pg start` and the start of
//! `cargo xtask test` compile in seconds, not minutes.
//!
//! - From the command line, [`run`] calls `cargo run --package statek-bench
//!   -- TASK ARGS`, passing the arguments on unchanged, and exits with the
//!   task's own exit status. `bench` too starts from the debug build (the
//!   one `cargo xtask demo` builds): it checks its options and `pgbench`
//!   there, in a second, and only then re-runs itself from a release build
//!   (its client must not be a debug build), so a mistyped option is not
//!   refused after a ten-minute release build.
//! - In the test matrix, [`run_built`] runs the statek-bench binary of the
//!   matrix's build step (`cargo build --workspace --all-features --tests
//!   --bins`), whose features are those of `cargo test --workspace
//!   --all-features`, so the product is compiled once for both.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Result};

use crate::{command, workspace};

/// The package and binary that runs the tasks.
pub const PACKAGE: &str = "statek-bench";

/// The arguments of a task that statek-bench runs, passed on unchanged
/// (`--help` included).
#[derive(Debug, Clone, clap::Args)]
pub struct Passed {
    /// The task's own options (`cargo xtask TASK --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// The `cargo run` command for `task`.
fn cargo_run(task: &str, passed: &Passed) -> Command {
    let mut cargo = workspace::cargo();
    cargo.arg("run");
    cargo
        .args(["--package", PACKAGE, "--"])
        .arg(task)
        .args(&passed.args);
    cargo
}

/// Runs `task` through `cargo run --package statek-bench`; a failing task
/// ends this process with the task's exit status (the demo's and the
/// trials' statuses mean something), after its own error message.
pub fn run(task: &str, passed: &Passed) -> Result<()> {
    let mut cargo = cargo_run(task, passed);
    let status = cargo
        .status()
        .map_err(|error| command::spawn_error(&cargo, &error))?;
    if status.success() {
        return Ok(());
    }
    match status.code() {
        Some(code) => std::process::exit(code),
        None => bail!("{} ended by a signal ({status})", command::display(&cargo)),
    }
}

/// The statek-bench binary of the test matrix's build step.
pub fn built_binary() -> PathBuf {
    workspace::target_dir().join("debug").join(PACKAGE)
}

/// Runs `task` from the test matrix's build of statek-bench.
pub fn run_built(task: &str, args: &[&str]) -> Result<()> {
    command::run_inherited(&mut built_command(task, args)?)
}

/// Runs `task` from the test matrix's build of statek-bench on a server
/// it provisions itself: `DATABASE_URL` is not passed on, so a database
/// the caller's environment names is never used.
pub fn run_built_on_own_server(task: &str, args: &[&str]) -> Result<()> {
    let mut command = built_command(task, args)?;
    command.env_remove("DATABASE_URL");
    command::run_inherited(&mut command)
}

fn built_command(task: &str, args: &[&str]) -> Result<Command> {
    let binary = built_binary();
    if !binary.is_file() {
        bail!(
            "{} is missing: the step `cargo build --workspace --all-features --tests --bins` \
             builds it (did it fail?)",
            binary.display()
        );
    }
    let mut command = Command::new(binary);
    command.arg(task).args(args);
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn arguments_are_passed_on_unchanged_after_the_task() {
        let passed = Passed {
            args: vec!["--quick".into(), "--pg".into(), "16".into()],
        };
        assert_eq!(
            words(&cargo_run("chaos", &passed)),
            [
                "run",
                "--package",
                "statek-bench",
                "--",
                "chaos",
                "--quick",
                "--pg",
                "16"
            ]
        );
    }

    #[test]
    fn the_bench_starts_from_the_debug_build_that_checks_its_options() {
        let passed = Passed {
            args: vec![
                "--only".into(),
                "sustained".into(),
                "--sustained-minutes".into(),
                "5".into(),
            ],
        };
        assert_eq!(
            words(&cargo_run("bench", &passed)),
            [
                "run",
                "--package",
                "statek-bench",
                "--",
                "bench",
                "--only",
                "sustained",
                "--sustained-minutes",
                "5"
            ]
        );
    }
}
