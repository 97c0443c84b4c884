//! The options of `statek demo`.

use std::path::PathBuf;

use crate::count_arg::count;

/// Options of `statek demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Policy file (TOML; format in deploy/policies/README.md). Default: the
    /// built-in copy of deploy/policies/noisy-neighbour.toml.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Scheduler replicas ticking the shard concurrently, each with its own pool (1..=32).
    #[arg(long, allow_negative_numbers = true, default_value_t = 4, value_parser = count::<1, 32>)]
    pub replicas: u32,
    /// Stop the statek side after this many reservations (the shard's cursor, read every 50 ms) even if runs remain (1..=10,000,000).
    #[arg(long, allow_negative_numbers = true, default_value_t = 60_000, value_parser = count::<1, 10_000_000>)]
    pub max_reservations: u32,
    /// Runs queued for the heaviest tenant before the replicas start (1..=1,000,000: the
    /// comparison is about what a backlog does to the other tenants).
    #[arg(long, allow_negative_numbers = true, default_value_t = 5_000, value_parser = count::<1, 1_000_000>)]
    pub backlog: u32,
    /// Directory for the PNG charts (statek against FIFO, selection gaps).
    /// Default: `statek-demo-charts` in the current directory
    /// (`target/statek-demo` under `cargo xtask demo`).
    #[arg(long, value_name = "DIR")]
    pub charts_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at this address while the demo runs
    /// (`--metrics-addr` alone: 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Runs arriving for each other tenant while the demo runs (1..=10,000: the comparison
    /// judges their service lag).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_parser = count::<1, 10_000>)]
    pub trickle: u32,
    /// Milliseconds each run's handler works (sleeps), on both sides (0..=10,000).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_parser = count::<0, 10_000>)]
    pub work_ms: u32,
    /// Instead: runs that differ in cost, slot fairness and cost fairness
    /// side by side on statek-testing's in-memory executor, with a chart.
    /// Needs no database; of the other options only --charts-dir and
    /// --window-secs apply (the others are refused with it).
    #[arg(
        long,
        conflicts_with_all = ["policy", "replicas", "max_reservations", "backlog", "metrics_addr", "trickle", "work_ms"]
    )]
    pub cost_skew: bool,
    /// Seconds each side of --cost-skew measures, after a 2 s warm-up (5..=600).
    #[arg(long, allow_negative_numbers = true, default_value_t = 20, value_parser = count::<5, 600>, requires = "cost_skew")]
    pub window_secs: u32,
}
