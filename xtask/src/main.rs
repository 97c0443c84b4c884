//! `cargo xtask`: statek's only task runner for development and CI.
//!
//! - `cargo xtask pg start|stop|status|url [--version 16|17]`: PostgreSQL for
//!   development (see [`pg`]).
//! - `cargo xtask migrate`: applies the migrations to `DATABASE_URL`.
//! - `cargo xtask test`: formatting, lints, arch-check, deploy-check and
//!   every test, against PostgreSQL 17 and 16; what CI runs.
//! - `cargo xtask arch-check`: the allowed arrows between workspace crates.
//! - `cargo xtask deploy-check`: the YAML and JSON under `deploy/` parse, and
//!   alerts and dashboard use exactly the metrics statek emits.
//! - `cargo xtask rule-tests`: `promtool test rules` on the alerts' unit
//!   tests (Debian's package `prometheus`, installed when missing as root).
//! - `cargo xtask demo`, `bench`, `failover`, `ha-layouts`, `chaos`,
//!   `bounds-report`, `deploy-check`: the tasks that link the product, run
//!   by crate statek-bench (`cargo run -p statek-bench -- TASK ARGS`, see
//!   [`linked`]); xtask passes the arguments on unchanged, so
//!   `cargo xtask bench --help` shows that task's options.
//!
//! xtask links no product crate (only its tests do), so `cargo xtask pg
//! start` and the start of `cargo xtask test` compile in seconds, and the
//! product is compiled once, by the test build, whose statek-bench binary
//! the test matrix then runs.
//!
//! Relative paths given to xtask are relative to the workspace root.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod arch_check;
mod linked;
mod migrate;
mod rule_tests;
mod test_binaries;
mod test_matrix;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use devpg::{command, debian_tool, interrupt, pg, workspace};

use linked::Passed;
use pg::PgMajor;

/// statek development and CI tasks.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about,
    disable_version_flag = true
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// PostgreSQL 16/17 for development: DATABASE_URL, STATEK_PG_BIN, or the pinned npm binaries.
    Pg {
        #[command(subcommand)]
        action: PgAction,
    },
    /// Apply the migrations to the server in DATABASE_URL.
    Migrate,
    /// Run fmt, clippy, arch-check and all tests against PostgreSQL 17 and 16 (what CI runs).
    Test(test_matrix::TestArgs),
    /// Check the arrows between workspace crates (ARCHITECTURE.md, "Allowed arrows").
    ArchCheck,
    /// Run the alert rules' unit tests with promtool (deploy/prometheus/alerts.test.yaml).
    RuleTests,
    /// Parse deploy/ YAML and JSON; check alert and dashboard metrics against the emitted ones.
    #[command(disable_help_flag = true)]
    DeployCheck(Passed),
    /// Run the noisy-neighbour demo (against DATABASE_URL or a fresh server; `--help` for its options).
    #[command(disable_help_flag = true)]
    Demo(Passed),
    /// Measure reservations vs pgbench, the fairness tax, retention and compile time (release build; `--help`).
    #[command(disable_help_flag = true)]
    Bench(Passed),
    /// A real failover under load: primary crashed, standby promoted (`--help` for its options).
    #[command(disable_help_flag = true)]
    Failover(Passed),
    /// A Worker fleet on a durable server through restarts, killed backends, taken connections and held row locks.
    #[command(disable_help_flag = true)]
    Chaos(Passed),
    /// Judge real standby layouts (FIRST 1, ANY 1 and FIRST 2 of two, FIRST 1 beside an asynchronous one).
    #[command(disable_help_flag = true)]
    HaLayouts(Passed),
    /// Print bound / ceil(L/w) ratios of swrr-v1, min-gap-v1 and min-gap-v2 over generated weight families.
    #[command(disable_help_flag = true)]
    BoundsReport(Passed),
}

#[derive(Debug, Subcommand)]
enum PgAction {
    /// Provision and start a cluster that keeps running until `pg stop` (prints DATABASE_URL).
    Start {
        /// PostgreSQL major version.
        #[arg(long, value_enum, default_value_t = PgMajor::V17)]
        version: PgMajor,
    },
    /// Stop the cluster started by `pg start` (data is kept); all versions by default.
    Stop {
        /// PostgreSQL major version.
        #[arg(long, value_enum)]
        version: Option<PgMajor>,
    },
    /// Show version, port, data directory, whether it runs and DATABASE_URL; all versions by default.
    Status {
        /// PostgreSQL major version.
        #[arg(long, value_enum)]
        version: Option<PgMajor>,
    },
    /// Print only the DATABASE_URL of the running cluster: `export DATABASE_URL=$(cargo xtask pg url)`.
    Url {
        /// PostgreSQL major version.
        #[arg(long, value_enum, default_value_t = PgMajor::V17)]
        version: PgMajor,
    },
    /// Run a durable primary and a streaming standby in the foreground until Ctrl-C, to try failover.
    Pair {
        /// PostgreSQL major version.
        #[arg(long, value_enum, default_value_t = PgMajor::V17)]
        version: PgMajor,
        /// Replicate asynchronously (default: synchronous_standby_names lists the standby).
        #[arg(long)]
        asynchronous: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    devpg::task::run(|| run(cli), |_| 1)
}

fn run(cli: Cli) -> Result<()> {
    match cli.task {
        Task::Pg { action } => match action {
            PgAction::Start { version } => pg::start(version),
            PgAction::Stop { version } => pg::stop(version),
            PgAction::Status { version } => pg::status(version),
            PgAction::Url { version } => pg::url(version),
            PgAction::Pair {
                version,
                asynchronous,
            } => pg::pair(version, asynchronous),
        },
        Task::Migrate => migrate::run(),
        Task::Test(args) => test_matrix::run(&args),
        Task::ArchCheck => arch_check::run(),
        Task::RuleTests => rule_tests::run(),
        Task::DeployCheck(args) => linked::run("deploy-check", &args),
        Task::Demo(args) => linked::run("demo", &args),
        Task::Bench(args) => linked::run("bench", &args),
        Task::Failover(args) => linked::run("failover", &args),
        Task::Chaos(args) => linked::run("chaos", &args),
        Task::HaLayouts(args) => linked::run("ha-layouts", &args),
        Task::BoundsReport(args) => linked::run("bounds-report", &args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks its definitions only when a command is parsed; this
    /// makes every subcommand's definition a test (a duplicate argument
    /// group once broke `cargo xtask demo`).
    #[test]
    fn the_command_line_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
