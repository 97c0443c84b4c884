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
    /// Fair, plain, batched.
    pub sides: Vec<Side>,
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
