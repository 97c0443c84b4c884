//! The catalogue of every metric statek emits: name, kind and labels.

use self::MetricKind::{Counter, Gauge, Histogram};

/// What a metric is, as Prometheus sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Exposed as `NAME` (a `_total` name by convention).
    Counter,
    /// Exposed as `NAME`.
    Gauge,
    /// Exposed as `NAME_bucket{le}`, `NAME_sum` and `NAME_count`.
    Histogram,
}

/// One metric statek emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The exposed name (for a histogram, without `_bucket`/`_sum`/`_count`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels.
    pub labels: &'static [&'static str],
}

const fn metric(name: &'static str, kind: MetricKind, labels: &'static [&'static str]) -> Metric {
    Metric { name, kind, labels }
}

/// Every metric statek emits, with its kind and labels.
///
/// This list MUST equal what the code emits (the names in
/// `statek_scheduler::metrics` and statek-store-pg's prune metrics); it is
/// also the table in `docs/operations.md`, "Metrics". A check against the
/// code itself is to be added next to this one: until then, change this
/// list, the code and the docs together.
pub const METRICS: &[Metric] = &[
    metric("statek_reservations_total", Counter, &["shard"]),
    metric("statek_reservation_retries_total", Counter, &["shard"]),
    metric("statek_reservation_duration_seconds", Histogram, &["shard"]),
    metric("statek_selections_total", Counter, &["shard", "tenant"]),
    metric(
        "statek_tick_outcomes_total",
        Counter,
        &["shard", "tenant", "outcome"],
    ),
    metric("statek_tick_errors_total", Counter, &["shard", "kind"]),
    metric(
        "statek_starvation_bound_reservations",
        Gauge,
        &["shard", "tenant"],
    ),
    metric(
        "statek_seam_bound_reservations",
        Gauge,
        &["shard", "tenant"],
    ),
    metric("statek_shard_sealed", Gauge, &["shard"]),
    metric(
        "statek_selection_gap_max_reservations",
        Gauge,
        &["shard", "tenant"],
    ),
    metric(
        "statek_gap_above_bound_total",
        Counter,
        &["shard", "tenant"],
    ),
    metric(
        "statek_service_lag_seconds",
        Histogram,
        &["shard", "tenant"],
    ),
    metric("statek_run_outcomes_total", Counter, &["tenant", "outcome"]),
    metric("statek_worker_runs_executing", Gauge, &["shard"]),
    metric("statek_worker_batch_slots", Histogram, &["shard"]),
    metric("statek_prune_deleted_total", Counter, &[]),
    metric("statek_prune_cutoff_timestamp_seconds", Gauge, &[]),
    metric("statek_prune_batch_duration_seconds", Histogram, &[]),
    metric(
        "statek_retained_oldest_timestamp_seconds",
        Gauge,
        &["shard"],
    ),
    metric("statek_durability_risk", Gauge, &["risk"]),
    metric("statek_reservations_lost_total", Counter, &["shard"]),
    metric("statek_timeline_changes_total", Counter, &["shard"]),
];

pub(crate) const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];
