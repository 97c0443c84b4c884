//! The options of `cargo xtask bounds-report`, and the fixed step budget
//! of its exhaustive optimum search.

/// Options of `cargo xtask bounds-report`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct BoundsReportArgs {
    /// Seed of the weight-set generator; the same seed gives the same report.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Weight sets generated per family.
    #[arg(long, default_value_t = 100)]
    pub sets_per_family: usize,
    /// Every weight set with a cycle of at most this many slots is checked,
    /// ids in descending and in ascending weight order.
    #[arg(long, default_value_t = 20)]
    pub exhaustive_max_length: u32,
    /// The best possible cycle is searched exhaustively up to this length.
    #[arg(long, default_value_t = 16)]
    pub optimum_max_length: u32,
    /// `swrr-v1` is checked on every id order of every weight set up to
    /// this length (`2^(L − 1)` orders per length).
    #[arg(long, default_value_t = 14)]
    pub all_orders_max_length: u32,
    /// Write the report into docs/guarantees.md between its markers.
    #[arg(long)]
    pub write_docs: bool,
}

impl BoundsReportArgs {
    /// The arguments as written in the report's first line and markers.
    pub(super) fn command_line(&self) -> String {
        format!(
            "bounds-report --seed {} --sets-per-family {} --exhaustive-max-length {} \
             --optimum-max-length {} --all-orders-max-length {}",
            self.seed,
            self.sets_per_family,
            self.exhaustive_max_length,
            self.optimum_max_length,
            self.all_orders_max_length
        )
    }
}

/// Search steps for the best possible cycle of one weight set.
pub const OPTIMUM_STEPS: u64 = 200_000_000;
