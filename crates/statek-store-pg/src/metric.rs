//! The metric catalogue's shape ([`Metric`]: name, kind, labels, unit,
//! help) and the metrics statek-store-pg emits itself ([`STORE_METRICS`]).
//! statek-scheduler's `metrics::catalogue()` adds its own to these: that
//! one list is what the exporter is told (HELP lines), what deploy-check
//! checks alerts and dashboards against, and what docs/operations.md's
//! table is checked against. The names stay `&str` constants next to the
//! code that records them.

use crate::durability::DURABILITY_RISK;
use crate::failover::{RESERVATIONS_LOST_TOTAL, TIMELINE_CHANGES_TOTAL};
use crate::halt::SHARD_HALTED;
use crate::retention::{
    PRUNE_BATCH_DURATION_SECONDS, PRUNE_CUTOFF_TIMESTAMP_SECONDS, PRUNE_DELETED_TOTAL,
};
use crate::run_retention::RUNS_PRUNED_TOTAL;

/// What a metric is, as Prometheus sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetricKind {
    /// Exposed as `NAME` (a `_total` name by convention).
    Counter,
    /// Exposed as `NAME`.
    Gauge,
    /// Exposed as `NAME_bucket{le}`, `NAME_sum` and `NAME_count`.
    Histogram,
}

impl MetricKind {
    /// `counter`, `gauge` or `histogram`, as Prometheus' `# TYPE` line and
    /// docs/operations.md write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric statek emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Metric {
    /// The exposed name (for a histogram, without `_bucket`/`_sum`/`_count`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels, in the order the code sets them.
    pub labels: &'static [&'static str],
    /// What one unit of its value is (`seconds`, `Unix seconds`,
    /// `reservations`, `runs`, `1` for a flag), as docs/operations.md
    /// writes it.
    pub unit: &'static str,
    /// One line for the exporter's `# HELP`.
    pub help: &'static str,
}

impl Metric {
    /// A catalogue entry.
    #[must_use]
    pub const fn new(
        name: &'static str,
        kind: MetricKind,
        labels: &'static [&'static str],
        unit: &'static str,
        help: &'static str,
    ) -> Self {
        Metric {
            name,
            kind,
            labels,
            unit,
            help,
        }
    }

    /// Whether the unit is seconds (a duration or a Unix time), which the
    /// exporter is told as such.
    #[must_use]
    pub fn in_seconds(&self) -> bool {
        self.unit == "seconds" || self.unit == "Unix seconds"
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// The metrics statek-store-pg records itself (pruning, the durability
/// check, failover detection, run retention).
pub const STORE_METRICS: &[Metric] = &[
    Metric::new(
        PRUNE_DELETED_TOTAL,
        Counter,
        &[],
        "rows",
        "Reservation rows deleted by pruning.",
    ),
    Metric::new(
        PRUNE_CUTOFF_TIMESTAMP_SECONDS,
        Gauge,
        &[],
        "Unix seconds",
        "Cutoff of the last prune batch (database time minus the retention).",
    ),
    Metric::new(
        PRUNE_BATCH_DURATION_SECONDS,
        Histogram,
        &[],
        "seconds",
        "One prune batch (one transaction).",
    ),
    Metric::new(
        DURABILITY_RISK,
        Gauge,
        &["risk"],
        "0 or 1",
        "1 when the last durability check found the risk, else 0.",
    ),
    Metric::new(
        RESERVATIONS_LOST_TOTAL,
        Counter,
        &["shard"],
        "reservations",
        "Acknowledged reservations found lost after a change of the server's timeline.",
    ),
    Metric::new(
        TIMELINE_CHANGES_TOTAL,
        Counter,
        &["shard"],
        "changes",
        "Server timeline changes met by reservations, each followed by a check of the \
         recently acknowledged reservations.",
    ),
    Metric::new(
        SHARD_HALTED,
        Gauge,
        &["shard"],
        "0 or 1",
        "1 while the shard is halted in the database after a reservation loss (or an \
         unverified failover) until an owner runs `statek shard resume`, else 0.",
    ),
    Metric::new(
        RUNS_PRUNED_TOTAL,
        Counter,
        &[],
        "runs",
        "Finished runs deleted by run retention.",
    ),
];
