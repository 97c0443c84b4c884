//! `statek-bench`: statek's development tools that link the product crates,
//! run through `cargo xtask` (which passes its arguments on unchanged and
//! links no product crate itself):
//!
//! - `bench [--quick]`: performance figures against pgbench and plain
//!   `SKIP LOCKED` queues (see `docs/benchmarks.md`);
//! - `failover`: a primary crashed under load, its standby promoted;
//! - `ha-layouts`: the durability check on real standby layouts;
//! - `chaos [--quick]`: a Worker fleet through database faults;
//! - `bounds-report`: starvation bound ratios over generated weight
//!   families (the figures in `docs/guarantees.md`);
//! - `deploy-check`: the files under `deploy/` parse and use exactly the
//!   metrics statek emits;
//! - `demo`: `statek demo` on a PostgreSQL it provisions.
//!
//! The workload sides the demo and the bench compare (a fair `Worker` and
//! a batched FIFO queue) live in statek-cli's demo and statek-store-pg's
//! `baseline`; this crate drives them. Relative paths are relative to the
//! workspace root.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// Only with feature `mimalloc`: the allocator section `soak` measures
/// against glibc's malloc (`--allocator mimalloc`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod bounds_report;
mod chaos;
mod cnpg_check;
mod demo;
mod deploy_check;
mod failover;
mod failover_judge;
mod ha_layouts;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use devpg::{pg, workspace};

/// statek's development tools that link the product (run them through `cargo xtask`).
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
    /// Run the noisy-neighbour demo (against DATABASE_URL or a fresh server).
    Demo(demo::XtaskDemoArgs),
    /// Measure reservations vs pgbench, the fairness tax, retention and compile time (target/bench).
    Bench(bench::BenchArgs),
    /// A real failover under load: primary crashed, standby promoted (asynchronous with lag, then synchronous).
    Failover(failover::FailoverArgs),
    /// A Worker fleet under load on a durable server through restarts, killed backends, taken connections and held row locks.
    Chaos(chaos::ChaosArgs),
    /// Judge real standby layouts (FIRST 1, ANY 1 and FIRST 2 of two, FIRST 1 beside an asynchronous one) with the durability check.
    HaLayouts(ha_layouts::HaLayoutsArgs),
    /// Print bound / ceil(L/w) ratios of swrr-v1, min-gap-v1 and min-gap-v2 over generated weight families.
    BoundsReport(bounds_report::BoundsReportArgs),
    /// Parse deploy/ YAML and JSON; check alert and dashboard metrics against the emitted ones.
    DeployCheck,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The `statek` binary's exit codes (8: a demo check failed, 3: invalid
    // input, ...); 1 for any other failure.
    devpg::task::run(|| run(cli), statek_cli::exit::code_for)
}

fn run(cli: Cli) -> Result<()> {
    match cli.task {
        Task::DeployCheck => deploy_check::run(),
        Task::BoundsReport(args) => bounds_report::run(&args),
        Task::Bench(args) => bench::run(&args),
        Task::Failover(args) => failover::run(&args),
        Task::HaLayouts(args) => ha_layouts::run(&args),
        Task::Chaos(args) => chaos::run(&args),
        Task::Demo(args) if args.demo.cost_skew => {
            // No database: the in-memory executor.
            let args = demo::with_default_charts_dir(args);
            statek_cli::demo::run_cost_skew(&args.demo)
        }
        Task::Demo(args) => {
            let args = demo::with_default_charts_dir(args);
            // A bad policy file or charts directory fails before any
            // server starts.
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
