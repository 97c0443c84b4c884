//! The metrics statek-store-pg emits itself ([`STORE_METRICS`]), in the
//! catalogue's shape (statek-core's `Metric`: name, kind, labels, unit,
//! help).
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

use statek_core::Metric;
use statek_core::MetricKind::{Counter, Gauge, Histogram};

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
