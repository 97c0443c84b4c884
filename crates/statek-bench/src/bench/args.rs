//! The options of `cargo xtask bench` ([`BenchArgs`]) and its sections
//! ([`Section`]).

use std::path::PathBuf;

use super::workloads::WorkloadPick;

/// Options of `cargo xtask bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Seconds per measured load.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Concurrent clients of the reservation comparison, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64",
          value_parser = clap::value_parser!(u16).range(1..=500))]
    pub clients: Vec<u16>,
    /// Slots per batch for the batch reservation figures.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub batch: u32,
    /// Retained old rows at which reservation latency is measured (the
    /// first is also the prune workload), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000,5000000")]
    pub retained: Vec<u64>,
    /// A smoke run of the harness: 2 s windows, 10k/50k retained rows
    /// (figures not comparable to a full run).
    #[arg(long)]
    pub quick: bool,
    /// Seconds per measured window of section `workloads` (after 0.5 s of
    /// warm-up; each workload runs three sides on two settings).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub workload_seconds: u64,
    /// Samples per side and setting of section `workloads` (sides
    /// interleaved; each side judged by its median; `--quick` takes 1).
    #[arg(long, default_value_t = super::workloads::samples::SAMPLES, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub samples: u32,
    /// Workloads of section `workloads` to run, comma-separated (default:
    /// every one, and one Worker's slot rate); the targets of the others
    /// are not judged.
    #[arg(long = "workload", value_enum, value_delimiter = ',', default_values_t = WorkloadPick::ALL)]
    pub workloads: Vec<WorkloadPick>,
    /// Settings of section `workloads`, comma-separated (default: both).
    #[arg(long = "setting", value_enum, value_delimiter = ',', default_values_t = Setting::ALL)]
    pub settings: Vec<Setting>,
    /// Minutes at full load of section `soak`.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=240))]
    pub soak_minutes: u64,
    /// Minutes per phase of section `sustained` (four phases: the fair
    /// Worker and the batched queue, each at a fixed depth and at a fixed
    /// offered rate).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(super::sustained::MIN_MINUTES..=240))]
    pub sustained_minutes: u64,
    /// The bench process's allocator for section `soak`: `system` (glibc's
    /// malloc; set `MALLOC_ARENA_MAX` in the environment to limit its
    /// arenas) or `mimalloc` (statek-bench rebuilt with its feature `mimalloc`).
    #[arg(long, value_enum, default_value_t = super::soak::Allocator::System)]
    pub allocator: super::soak::Allocator,
    /// Sections to run, comma-separated (default: all but `soak` and
    /// `sustained`).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Section::ALL)]
    pub only: Vec<Section>,
    /// Where the JSON and charts go (default: target/bench).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only rewrite the generated tables of docs/benchmarks.md from the
    /// results files they name (under docs/bench/); measures nothing.
    #[arg(long, conflicts_with = "charts_from")]
    pub update_docs: bool,
    /// Only redraw the charts (and reprint the tables) of a saved
    /// `results.json`; measures nothing.
    #[arg(long, value_name = "RESULTS_JSON")]
    pub charts_from: Option<PathBuf>,
}

impl BenchArgs {
    /// Samples per side of section `workloads`: `--samples`, or 1 for a
    /// `--quick` smoke run.
    pub(super) fn workload_samples(&self) -> u32 {
        if self.quick {
            1
        } else {
            self.samples
        }
    }
}

/// The sections of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// Reservations against pgbench, single and batch.
    Reservations,
    /// Fair replicas against a plain SKIP LOCKED claimer; empty slots.
    Queue,
    /// Prune throughput, latency while pruning and with retained rows.
    Retention,
    /// Policy compile time (criterion).
    Compile,
    /// Reservations with durable commits: a durable server alone and with
    /// a synchronous standby (both provisioned by the bench; skipped with
    /// DATABASE_URL).
    Durable,
    /// The workloads (all-backlogged, noisy, sparse, long runs): a fair Worker against a plain and a batched
    /// unfair queue, fast settings and durable; one Worker's slot rate.
    Workloads,
    /// Enqueue throughput: one run per statement against bulk enqueue
    /// (`NewRun` one by one against `enqueue_many`).
    Enqueue,
    /// Runs that differ in cost (issue 25): four tenants of weight 1, one
    /// whose runs work 200 ms and cost 40, three at 5 ms and 1; the fair
    /// Worker in slot mode against the batched FIFO queue, and the
    /// in-memory executor in slot mode and in cost mode, each tenant's
    /// share of executor time and of cost served.
    CostSkew,
    /// Opt-in: one Worker's RSS over --soak-minutes at full load (not in
    /// the default run).
    Soak,
    /// Opt-in: the fair Worker and the batched queue, each for
    /// --sustained-minutes at a fixed queue depth and at a fixed offered
    /// rate, on a durable server with autovacuum at its defaults (not in
    /// the default run; about 4 × 30 minutes).
    Sustained,
}

impl Section {
    const ALL: [Self; 8] = [
        Self::Reservations,
        Self::Queue,
        Self::Retention,
        Self::Durable,
        Self::Workloads,
        Self::CostSkew,
        Self::Enqueue,
        Self::Compile,
    ];
}

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum;
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => Ok(()),
        }
    }
}

/// A server setting of section `workloads` (`--setting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Setting {
    /// The bench's server on the development settings (`fsync` off).
    Fast,
    /// A durable server the bench starts (`fsync` and `synchronous_commit`
    /// on).
    Durable,
}

impl Setting {
    const ALL: [Self; 2] = [Self::Fast, Self::Durable];
}
