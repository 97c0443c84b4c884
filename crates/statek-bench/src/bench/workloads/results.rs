//! What section `workloads` measured: per setting and workload, one row
//! per side, and the slot rate of one Worker. Plain data, serialised into
//! `results.json` and `workloads.json`.

use serde::Serialize;

use super::lag::Lag;

/// The fair side.
pub const FAIR: &str = "fair Worker";
/// The plain `SKIP LOCKED` claimer (one claim, one completion per run).
pub const PLAIN: &str = "plain SKIP LOCKED claimer";
/// The batched plain queue (River-style fetch and completion batches).
pub const BATCHED: &str = "batched plain queue";

/// One side of a workload.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Side {
    /// [`FAIR`], [`PLAIN`] or [`BATCHED`].
    pub side: String,
    /// Runs completed in the window (database `finished_at`).
    pub runs: i64,
    /// Window, seconds (database clock).
    pub seconds: f64,
    /// Runs per second.
    pub runs_per_second: f64,
    /// Slots consumed per second (the shard's cursor; fair side only).
    pub slots_per_second: Option<f64>,
    /// Service lag of the fed tenants (noisy-neighbour).
    pub lag: Option<Lag>,
    /// Runs of the backlogged tenant still available at the window's end
    /// (noisy-neighbour: 0 means its backlog ran out inside the window).
    pub backlog_left: Option<i64>,
    /// Which sample of the side this is (0-based; sides interleaved: fair,
    /// plain, batched, then the next sample).
    #[serde(default)]
    pub sample: u32,
    /// A backlogged tenant's queue ran empty inside the window: the
    /// sample measured the queue running dry, not the side, and is never
    /// judged (it is re-run with a larger backlog).
    #[serde(default)]
    pub drained: bool,
    /// Times the backlog of this sample was the workload's (1, or 2, 4
    /// after drained samples).
    #[serde(default = "one")]
    pub backlog_scale: u64,
    /// The database's work per completed run over the side's whole life
    /// (start to its sessions' end), when measured.
    #[serde(default)]
    pub work: Option<DbWork>,
    /// In a median row: the lowest and highest runs/s of the judged
    /// samples, and how many there were.
    #[serde(default)]
    pub range: Option<Range>,
    /// The side's top-level statements by server time per run, most first
    /// (at most [`TOP_STATEMENTS`]; empty without `pg_stat_statements`):
    /// where the side's database work goes.
    #[serde(default)]
    pub statements: Vec<StatementWork>,
}

/// Statements kept per side in [`Side::statements`].
pub const TOP_STATEMENTS: usize = 6;

/// One top-level statement's work per completed run while one side ran
/// (`pg_stat_statements`, the differences of two readings).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct StatementWork {
    /// The statement's text, whitespace collapsed, at most 100 characters.
    pub query: String,
    /// Calls per run.
    pub calls: f64,
    /// Execution milliseconds per run.
    pub exec_ms: f64,
    /// Planning milliseconds per run.
    pub plan_ms: f64,
    /// WAL bytes per run (`pg_stat_statements.wal_bytes`).
    pub wal_bytes: f64,
}

fn one() -> u64 {
    1
}

/// The spread of a side's judged samples.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq)]
pub struct Range {
    /// Lowest runs/s.
    pub low: f64,
    /// Highest runs/s.
    pub high: f64,
    /// Judged samples.
    pub samples: u32,
}

/// What the database did per completed run while one side ran (start to
/// its sessions' end), from `pg_current_wal_lsn()`, `pg_stat_wal` and
/// `pg_stat_user_tables` of schema `statek` (read after every session of
/// the side ended, so each backend flushed its statistics), and the bench
/// process's CPU (`getrusage`), which runs the side's clients. The feeder's
/// arrivals, where a workload has them, are counted on every side alike.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq)]
pub struct DbWork {
    /// Runs completed over the side's life.
    pub runs: i64,
    /// WAL bytes per run.
    pub wal_bytes: f64,
    /// Full-page images per run (`pg_stat_wal.wal_fpi`).
    pub wal_fpi: f64,
    /// Rows inserted per run (every statek table).
    pub inserted: f64,
    /// Rows updated per run (HOT included).
    pub updated: f64,
    /// Of those, HOT updates per run.
    pub hot_updated: f64,
    /// Rows deleted per run.
    pub deleted: f64,
    /// The bench process's CPU milliseconds per run (user + system).
    pub client_cpu_ms: f64,
    /// Top-level statements per run (`pg_stat_statements.calls`); `None`
    /// where the extension is not loaded (a `DATABASE_URL` server).
    #[serde(default)]
    pub statements: Option<f64>,
    /// Execution milliseconds per run (`total_exec_time`).
    #[serde(default)]
    pub exec_ms: Option<f64>,
    /// Planning milliseconds per run (`total_plan_time`, with
    /// `pg_stat_statements.track_planning`).
    #[serde(default)]
    pub plan_ms: Option<f64>,
}

impl DbWork {
    /// Rows written per run: inserted, updated and deleted.
    pub fn rows_written(&self) -> f64 {
        self.inserted + self.updated + self.deleted
    }

    /// The server's execution plus planning milliseconds per run, when
    /// `pg_stat_statements` measured them.
    pub fn db_ms(&self) -> Option<f64> {
        Some(self.exec_ms? + self.plan_ms?)
    }
}

/// One workload on one setting.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct WorkloadRun {
    /// `fast` (xtask's test settings) or `durable`.
    pub setting: String,
    /// The workload's name.
    pub workload: String,
    /// Executing runs per side.
    pub executing_runs: usize,
    /// Handler time per run, milliseconds.
    pub handler_ms: u64,
    /// Fair, plain, batched: per side the sample of median runs/s among
    /// the judged ones, with their range (see `samples.rs`).
    pub sides: Vec<Side>,
    /// Every sample of every side, drained ones included, in the order run.
    #[serde(default)]
    pub samples: Vec<Side>,
}

impl WorkloadRun {
    /// The side named `name`.
    pub fn side(&self, name: &str) -> Option<&Side> {
        self.sides.iter().find(|s| s.side == name)
    }
}

/// Slots consumed by one Worker on the sparse policy with one backlogged
/// tenant, and the reservation rows written meanwhile.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SlotRate {
    /// `fast` or `durable`.
    pub setting: String,
    /// The Worker's concurrency.
    pub concurrency: usize,
    /// Window, seconds (database clock).
    pub seconds: f64,
    /// Slots consumed in the window (cursor).
    pub slots: i64,
    /// Slots per second.
    pub slots_per_second: f64,
    /// Runs completed in the window.
    pub runs: i64,
    /// Over the Worker's whole life (start to its sessions' end): seconds.
    pub lifetime_seconds: f64,
    /// Reservation rows written over its life.
    pub lifetime_rows: i64,
    /// Rows per second over its life.
    pub rows_per_second: f64,
    /// `statek.reserve` + `statek.reserve_batch` calls over its life (one
    /// per batch), `None` when the server does not count them.
    pub batches: Option<i64>,
    /// Batches per second over its life.
    pub batches_per_second: Option<f64>,
}

/// Everything of section `workloads`.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Workloads {
    /// Seconds per measured window.
    pub window_seconds: u64,
    /// Per setting and workload.
    pub runs: Vec<WorkloadRun>,
    /// Per setting.
    pub slot_rate: Vec<SlotRate>,
}
