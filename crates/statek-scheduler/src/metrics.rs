//! Metric names and labels emitted through the [`metrics`] facade, and the
//! one catalogue of every metric statek emits ([`catalogue`]: name, kind,
//! labels, unit, help; statek-store-pg's own metrics included). Install
//! any `metrics` recorder (e.g. `metrics-exporter-prometheus`, as `statek
//! demo --metrics-addr` does) to export them; without one they cost almost
//! nothing. [`describe_all`] tells the recorder every metric's help and
//! unit (the `# HELP` lines; [`Worker::run`](crate::Worker::run) calls
//! it). deploy/prometheus and deploy/grafana use exactly these metrics,
//! with these kinds and labels (`cargo xtask deploy-check`), and
//! docs/operations.md's table lists them (a tidy test in xtask).
//!
//! Every series an alert reads exists from a replica's start ([`zero_series`],
//! called by [`DurableFairScheduler::register`](crate::DurableFairScheduler::register),
//! when a replica follows a rollout, and by [`Worker::run`](crate::Worker::run)):
//! `increase()` and `rate()` ignore a series' first sample, so a counter
//! born at its first increment would hide a one-off event from its alert.
//! [`zero_at_start`] names those metrics; [`not_zero_at_start`] names the
//! few an alert reads that a 0 cannot stand for, and where their first
//! value comes from (deploy-check fails on an alert metric in neither).

use statek_core::MetricKind::{Counter, Gauge, Histogram};
pub use statek_core::{Metric, MetricKind};
use statek_policy::{CostFairness, TenantId, WeightedFairnessPolicy};
#[cfg(feature = "postgres")]
use statek_store_pg::metric_names::{
    DURABILITY_RISK, PRUNE_CUTOFF_TIMESTAMP_SECONDS, RESERVATIONS_LOST_TOTAL, SHARD_HALTED,
    TIMELINE_CHANGES_TOTAL,
};
#[cfg(feature = "postgres")]
use statek_store_pg::DurabilityRisk;

/// Counter `{shard}`: reservations made by this process (a batch counts k).
pub const RESERVATIONS_TOTAL: &str = "statek_reservations_total";
/// Counter `{shard}`: transient reservation errors retried with the same id.
pub const RESERVATION_RETRIES_TOTAL: &str = "statek_reservation_retries_total";
/// Histogram `{shard}`, seconds: one reservation call (one slot or a batch
/// of k), retries included.
pub const RESERVATION_DURATION_SECONDS: &str = "statek_reservation_duration_seconds";
/// Counter `{shard, tenant}`: slots mapped to the tenant.
pub const SELECTIONS_TOTAL: &str = "statek_selections_total";
/// Counter `{shard, tenant, outcome}`: tick outcomes (`executed`,
/// `execution_failed`, `idle`, `contended`, `limited`, `debt`, `cancelled`).
pub const TICK_OUTCOMES_TOTAL: &str = "statek_tick_outcomes_total";
/// Counter `{shard, kind}`: failed ticks (`policy_conflict`, `corrupt_data`,
/// `store`, `executor`).
pub const TICK_ERRORS_TOTAL: &str = "statek_tick_errors_total";
/// Gauge `{shard, tenant}`, reservations: the policy's starvation bound.
pub const STARVATION_BOUND_RESERVATIONS: &str = "statek_starvation_bound_reservations";
/// Gauge `{shard, tenant}`, reservations: the tenant's exact gap across the
/// seam into `shard` (its last pick in the sealed predecessor to its first
/// pick in `shard`), set when a replica follows a rollout.
pub const SEAM_BOUND_RESERVATIONS: &str = "statek_seam_bound_reservations";
/// Gauge `{shard}`: 1 once this process has followed a rollout away from
/// `shard`, or started on its successor (sealed: it takes no reservation
/// again). Alerts on a shard's reservation rate ignore sealed shards with
/// it.
pub const SHARD_SEALED: &str = "statek_shard_sealed";
/// Histogram `{shard, tenant}`, seconds: a run's availability to its claim.
pub const SERVICE_LAG_SECONDS: &str = "statek_service_lag_seconds";
/// Counter `{tenant, outcome}`: what happened to claimed runs (`completed`,
/// `failed`, `retrying`, `lease_lost`, `cancelled`).
pub const RUN_OUTCOMES_TOTAL: &str = "statek_run_outcomes_total";
/// Counter `{tenant}`, cost units: the cost finished attempts reported
/// ([`crate::Completed::with_cost`], [`crate::RunError::with_cost`]), each
/// at most [`crate::MAX_RUN_COST`], counted once the executor recorded the
/// finish ([`count_recorded_cost`]).
pub const RUN_COST_REPORTED_TOTAL: &str = "statek_run_cost_reported_total";
/// Counter `{tenant}`, attempts: finished attempts that reported more than
/// [`crate::MAX_RUN_COST`] and were recorded with that much.
pub const RUN_COST_CLAMPED_TOTAL: &str = "statek_run_cost_clamped_total";
/// Counter `{tenant}`, cost units: cost charged to cost mode's ledger,
/// each attempt once (`min(reported, C_max)`, or the policy's default),
/// by an executor that keeps the ledger ([`count_cost_charge`]). The
/// PostgreSQL executor counts the charges of the finishes it records; the
/// default charged when an attempt is rescued, cancelled or taken over is
/// in the ledger (`statek status`), not in this counter.
pub const COST_CHARGED_TOTAL: &str = "statek_cost_charged_total";
/// Counter `{tenant}`, attempts: cost-mode attempts that reported more
/// than the policy's `C_max` (`max_cost`) and were charged `C_max`
/// ([`count_cost_charge`]): the tenant was served more cost than it was
/// charged, so raise `max_cost` (a rollout) or fix the handler.
pub const COST_OVER_MAX_TOTAL: &str = "statek_cost_over_max_total";
/// Gauge `{tenant}`, cost units: the tenant's balance in cost mode's
/// ledger (negative: in debt). The in-memory executor sets it after each
/// credit and charge; the PostgreSQL executor reads the shared ledger at
/// each housekeeping pass (`WorkerOptions::maintenance_every`), so every
/// replica of a schedule reports the same fleet-wide value: aggregate
/// it with `max`, not `sum`.
pub const COST_BALANCE: &str = "statek_cost_balance";

/// Gauge `{shard, tenant}`, reservations: largest selection gap observed by
/// a [`crate::FairnessMonitor`] (published with [`publish_fairness`]).
pub const SELECTION_GAP_MAX_RESERVATIONS: &str = "statek_selection_gap_max_reservations";
/// Counter `{shard, tenant}`: gaps above the bound while the tenant had
/// work, as found by a [`crate::FairnessMonitor`].
pub const GAP_ABOVE_BOUND_TOTAL: &str = "statek_gap_above_bound_total";
/// Gauge `{shard}`, Unix seconds: the oldest retained reservation (set by
/// the [`crate::Worker`]'s housekeeping).
pub const RETAINED_OLDEST_TIMESTAMP_SECONDS: &str = "statek_retained_oldest_timestamp_seconds";

/// Gauge `{tenant, state}`, runs: the run table's runs per tenant and state
/// (`available`, `running`, `completed`, `failed`, `cancelled`), set by
/// [`crate::PgRunQueueExecutor`]'s housekeeping.
pub const RUNS: &str = "statek_runs";
/// Gauge, Unix seconds: the finish time of the oldest finished run still
/// kept, the backlog of run retention (`statek runs prune`); set by
/// [`crate::PgRunQueueExecutor`]'s housekeeping while one is kept.
pub const RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS: &str =
    "statek_runs_finished_oldest_timestamp_seconds";

/// Gauge, labels `shard`: runs a [`crate::Worker`] is executing now (its
/// execution permits in use), sampled at every reservation batch and
/// housekeeping pass; against [`crate::WorkerOptions::concurrency`] it
/// tells whether the replica is saturated.
pub const WORKER_RUNS_EXECUTING: &str = "statek_worker_runs_executing";
/// Gauge, labels `shard`: runs whose handler finished and whose outcome
/// the Worker's executor has not recorded yet
/// ([`crate::TenantExecutor::runs_awaiting_record`]), sampled with
/// [`WORKER_RUNS_EXECUTING`]. For a [`crate::PgRunQueueExecutor`] it stays
/// at most twice [`crate::ExecutorOptions::completion_batching`]'s batch;
/// at that bound records lag the claims and the Worker waits.
pub const WORKER_RUNS_AWAITING_RECORD: &str = "statek_worker_runs_awaiting_record";
/// Histogram, labels `shard`: slots per reservation batch of a
/// [`crate::Worker`] (its adaptive batch size).
pub const WORKER_BATCH_SLOTS: &str = "statek_worker_batch_slots";
/// Counter, labels `shard`: batch claim statements the
/// [`crate::PgRunQueueExecutor`] sent (a retry of the same claim counts
/// again).
pub const CLAIM_STATEMENTS_TOTAL: &str = "statek_executor_claim_statements_total";
/// Counter, labels `shard`: slots the [`crate::PgRunQueueExecutor`]
/// decided idle without asking the database, their tenant known empty
/// ([`crate::ExecutorOptions::idle_recheck`]); each is also counted
/// `idle` in [`TICK_OUTCOMES_TOTAL`].
pub const SLOTS_KNOWN_IDLE_TOTAL: &str = "statek_executor_slots_known_idle_total";

/// Counter `{shard}`, in reserved ranges: ranges whose slot outcome record
/// ([`ReservationSource::record_slot_outcomes`](crate::ReservationSource::record_slot_outcomes)) could not be
/// written (refused, or failed after 3 attempts); their slots read as
/// unrecorded in an audit.
pub const SLOT_OUTCOME_RECORDS_FAILED_TOTAL: &str = "statek_slot_outcome_records_failed_total";

/// The `kind` label values of [`TICK_ERRORS_TOTAL`].
pub const TICK_ERROR_KINDS: &[&str] = &["policy_conflict", "corrupt_data", "store", "executor"];

/// The `outcome` label values of [`RUN_OUTCOMES_TOTAL`].
pub const RUN_OUTCOMES: &[&str] = &["completed", "failed", "retrying", "lease_lost", "cancelled"];

/// The metrics whose series [`zero_series`] creates at 0 for a shard:
/// `{shard}` for the shard's counters and its sealed and halted gauges,
/// `{shard, kind}` for every [`TICK_ERROR_KINDS`], `{shard, tenant}` and
/// `{tenant, outcome}` for every tenant of the policy and every
/// [`RUN_OUTCOMES`], `{tenant}` of [`RUN_COST_CLAMPED_TOTAL`] and
/// [`COST_OVER_MAX_TOTAL`] for every tenant, and (feature `postgres`) `{risk}` for every durability
/// risk of statek-store-pg (`DurabilityRisk::LABELS`). This crate's own
/// come first, then the store's (reservations lost, timeline changes,
/// shard halted, durability risk).
pub fn zero_at_start() -> Vec<&'static str> {
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut names = vec![
        RESERVATIONS_TOTAL,
        RESERVATION_RETRIES_TOTAL,
        TICK_ERRORS_TOTAL,
        SLOT_OUTCOME_RECORDS_FAILED_TOTAL,
        SHARD_SEALED,
        GAP_ABOVE_BOUND_TOTAL,
        RUN_OUTCOMES_TOTAL,
        RUN_COST_CLAMPED_TOTAL,
        COST_OVER_MAX_TOTAL,
    ];
    #[cfg(feature = "postgres")]
    names.extend([
        RESERVATIONS_LOST_TOTAL,
        TIMELINE_CHANGES_TOTAL,
        SHARD_HALTED,
        DURABILITY_RISK,
    ]);
    names
}

/// The metrics an alert reads that a 0 cannot stand for (a Unix time of 0
/// reads as 1970 and would fire the backlog alerts), each with where its
/// first value comes from.
pub fn not_zero_at_start() -> Vec<(&'static str, &'static str)> {
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut names = vec![
        (
            RETAINED_OLDEST_TIMESTAMP_SECONDS,
            "a Unix time: a Worker publishes the shard's oldest retained reservation at its \
             start (absent while the shard retains none)",
        ),
        (
            RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS,
            "a Unix time: the PgRunQueueExecutor's housekeeping publishes it at a Worker's \
             start (absent while no finished run is kept)",
        ),
    ];
    #[cfg(feature = "postgres")]
    names.push((
        PRUNE_CUTOFF_TIMESTAMP_SECONDS,
        "a Unix time set by the process that prunes, at its first batch, never by a Worker",
    ));
    names
}

/// Creates, at 0, every series of [`zero_at_start`] for `policy`'s shard
/// and tenants, so that an alert on `increase()` or `rate()` sees the first
/// event. A series that exists already keeps its value (counters and
/// gauges are incremented by 0, never set), so a replica that calls it
/// again, or after the store set `statek_shard_halted` to 1, changes
/// nothing.
/// [`DurableFairScheduler::register`](crate::DurableFairScheduler::register),
/// a replica following a rollout and [`Worker::run`](crate::Worker::run)
/// call it; call it yourself after installing a recorder in a process that
/// only publishes a [`crate::FairnessMonitor`]'s figures.
pub fn zero_series(policy: &WeightedFairnessPolicy) {
    let shard = policy.shard_id().to_string();
    for counter in [
        RESERVATIONS_TOTAL,
        RESERVATION_RETRIES_TOTAL,
        SLOT_OUTCOME_RECORDS_FAILED_TOTAL,
    ] {
        metrics::counter!(counter, "shard" => shard.clone()).increment(0);
    }
    for kind in TICK_ERROR_KINDS {
        metrics::counter!(TICK_ERRORS_TOTAL, "shard" => shard.clone(), "kind" => *kind)
            .increment(0);
    }
    metrics::gauge!(SHARD_SEALED, "shard" => shard.clone()).increment(0.0);
    for weight in policy.tenants() {
        let tenant = weight.tenant().to_string();
        metrics::counter!(
            GAP_ABOVE_BOUND_TOTAL,
            "shard" => shard.clone(),
            "tenant" => tenant.clone()
        )
        .increment(0);
        for outcome in RUN_OUTCOMES {
            metrics::counter!(
                RUN_OUTCOMES_TOTAL,
                "tenant" => tenant.clone(),
                "outcome" => *outcome
            )
            .increment(0);
        }
        metrics::counter!(RUN_COST_CLAMPED_TOTAL, "tenant" => tenant.clone()).increment(0);
        metrics::counter!(COST_OVER_MAX_TOTAL, "tenant" => tenant.clone()).increment(0);
    }
    #[cfg(feature = "postgres")]
    {
        for counter in [RESERVATIONS_LOST_TOTAL, TIMELINE_CHANGES_TOTAL] {
            metrics::counter!(counter, "shard" => shard.clone()).increment(0);
        }
        metrics::gauge!(SHARD_HALTED, "shard" => shard.clone()).increment(0.0);
        for risk in DurabilityRisk::LABELS {
            metrics::gauge!(DURABILITY_RISK, "risk" => risk).increment(0.0);
        }
    }
}

/// Publishes a shard's starvation bounds as
/// [`STARVATION_BOUND_RESERVATIONS`].
pub(crate) fn publish_bounds(policy: &WeightedFairnessPolicy) {
    for bound in policy.starvation_bounds() {
        metrics::gauge!(
            STARVATION_BOUND_RESERVATIONS,
            "shard" => policy.shard_id().to_string(),
            "tenant" => bound.tenant().to_string()
        )
        .set(f64::from(bound.maximum_reservations_until_selection()));
    }
}

/// Publishes a fairness report's per-tenant figures as
/// [`SELECTION_GAP_MAX_RESERVATIONS`] and [`GAP_ABOVE_BOUND_TOTAL`].
pub fn publish_fairness(shard: &statek_policy::SchedulerShardId, report: &crate::FairnessReport) {
    for row in &report.tenants {
        let labels = [
            ("shard", shard.to_string()),
            ("tenant", row.tenant.to_string()),
        ];
        if row.gaps.count > 0 {
            metrics::gauge!(SELECTION_GAP_MAX_RESERVATIONS, &labels).set(row.gaps.max as f64);
        }
        metrics::counter!(GAP_ABOVE_BOUND_TOTAL, &labels).absolute(row.gaps.violations);
    }
}

/// The metrics statek-scheduler records itself.
pub const SCHEDULER_METRICS: &[Metric] = &[
    Metric::new(
        RESERVATIONS_TOTAL,
        Counter,
        &["shard"],
        "reservations",
        "Reservations made by this process (a batch counts k).",
    ),
    Metric::new(
        RESERVATION_RETRIES_TOTAL,
        Counter,
        &["shard"],
        "retries",
        "Transient reservation errors retried with the same id.",
    ),
    Metric::new(
        RESERVATION_DURATION_SECONDS,
        Histogram,
        &["shard"],
        "seconds",
        "One reservation call (one slot or a batch of k), retries and backoff included.",
    ),
    Metric::new(
        SELECTIONS_TOTAL,
        Counter,
        &["shard", "tenant"],
        "slots",
        "Slots mapped to the tenant whose executor tick completed.",
    ),
    Metric::new(
        TICK_OUTCOMES_TOTAL,
        Counter,
        &["shard", "tenant", "outcome"],
        "ticks",
        "What the executor did with a slot: executed, execution_failed, idle, contended, \
         limited, debt (cost mode: the tenant owed), cancelled.",
    ),
    Metric::new(
        TICK_ERRORS_TOTAL,
        Counter,
        &["shard", "kind"],
        "ticks",
        "Failed ticks: policy_conflict, corrupt_data, executor, store.",
    ),
    Metric::new(
        STARVATION_BOUND_RESERVATIONS,
        Gauge,
        &["shard", "tenant"],
        "reservations",
        "The policy's starvation bound of the tenant.",
    ),
    Metric::new(
        SEAM_BOUND_RESERVATIONS,
        Gauge,
        &["shard", "tenant"],
        "reservations",
        "The tenant's exact gap across the seam into the shard, set when a replica follows \
         a rollout.",
    ),
    Metric::new(
        SHARD_SEALED,
        Gauge,
        &["shard"],
        "1",
        "1 once this process followed a rollout away from the shard (sealed).",
    ),
    Metric::new(
        SELECTION_GAP_MAX_RESERVATIONS,
        Gauge,
        &["shard", "tenant"],
        "reservations",
        "Largest selection gap a fairness monitor observed (idle gaps included).",
    ),
    Metric::new(
        GAP_ABOVE_BOUND_TOTAL,
        Counter,
        &["shard", "tenant"],
        "gaps",
        "Gaps above the bound while the tenant had work at both ends.",
    ),
    Metric::new(
        SERVICE_LAG_SECONDS,
        Histogram,
        &["shard", "tenant"],
        "seconds",
        "From a run becoming available (database time) to its claim.",
    ),
    Metric::new(
        RUN_OUTCOMES_TOTAL,
        Counter,
        &["tenant", "outcome"],
        "runs",
        "What happened to claimed runs: completed, failed, retrying, lease_lost, cancelled.",
    ),
    Metric::new(
        RUN_COST_REPORTED_TOTAL,
        Counter,
        &["tenant"],
        "cost units",
        "Cost reported by finished attempts, each at most 2^40 units.",
    ),
    Metric::new(
        RUN_COST_CLAMPED_TOTAL,
        Counter,
        &["tenant"],
        "attempts",
        "Finished attempts that reported more than 2^40 cost units, recorded as 2^40.",
    ),
    Metric::new(
        COST_CHARGED_TOTAL,
        Counter,
        &["tenant"],
        "cost units",
        "Cost charged to cost mode's ledger, each attempt once: min(reported, C_max), or the policy's default.",
    ),
    Metric::new(
        COST_OVER_MAX_TOTAL,
        Counter,
        &["tenant"],
        "attempts",
        "Cost-mode attempts that reported more than the policy's max_cost and were charged max_cost.",
    ),
    Metric::new(
        COST_BALANCE,
        Gauge,
        &["tenant"],
        "cost units",
        "The tenant's balance in cost mode's ledger; negative: in debt. From PostgreSQL: the shared ledger, read at each housekeeping pass.",
    ),
    Metric::new(
        WORKER_RUNS_EXECUTING,
        Gauge,
        &["shard"],
        "runs",
        "Runs a Worker executes now (its execution permits in use).",
    ),
    Metric::new(
        WORKER_RUNS_AWAITING_RECORD,
        Gauge,
        &["shard"],
        "runs",
        "Runs whose handler finished and whose outcome is not recorded yet.",
    ),
    Metric::new(
        WORKER_BATCH_SLOTS,
        Histogram,
        &["shard"],
        "slots",
        "Slots per reservation batch of a Worker (its adaptive batch size).",
    ),
    Metric::new(
        CLAIM_STATEMENTS_TOTAL,
        Counter,
        &["shard"],
        "statements",
        "Batch claim statements the PgRunQueueExecutor sent (retries count again).",
    ),
    Metric::new(
        SLOTS_KNOWN_IDLE_TOTAL,
        Counter,
        &["shard"],
        "slots",
        "Slots the PgRunQueueExecutor decided idle without a claim statement (tenant known empty).",
    ),
    Metric::new(
        SLOT_OUTCOME_RECORDS_FAILED_TOTAL,
        Counter,
        &["shard"],
        "reserved ranges",
        "Reserved ranges whose slot outcome record could not be written (their slots read as unrecorded).",
    ),
    Metric::new(
        RETAINED_OLDEST_TIMESTAMP_SECONDS,
        Gauge,
        &["shard"],
        "Unix seconds",
        "Reservation time of the oldest retained row of the shard.",
    ),
    Metric::new(
        RUNS,
        Gauge,
        &["tenant", "state"],
        "runs",
        "Runs in the run table per tenant and state.",
    ),
    Metric::new(
        RUNS_FINISHED_OLDEST_TIMESTAMP_SECONDS,
        Gauge,
        &[],
        "Unix seconds",
        "Finish time of the oldest finished run still kept: the backlog of run retention.",
    ),
];

/// Every metric statek emits: statek-store-pg's `STORE_METRICS` (feature
/// `postgres`), then this crate's ([`SCHEDULER_METRICS`]).
pub fn catalogue() -> impl Iterator<Item = &'static Metric> {
    #[cfg(feature = "postgres")]
    let store: &[Metric] = statek_store_pg::metric_names::STORE_METRICS;
    #[cfg(not(feature = "postgres"))]
    let store: &[Metric] = &[];
    store.iter().chain(SCHEDULER_METRICS.iter())
}

/// Describes every metric of the [`catalogue`] to the installed `metrics`
/// recorder: its help text and unit, so that an exporter such as
/// `metrics-exporter-prometheus` writes `# HELP` lines. Call it after
/// installing the recorder (a description given before is lost);
/// [`Worker::run`](crate::Worker::run) calls it, and calling it again is
/// harmless.
pub fn describe_all() {
    for metric in catalogue() {
        let unit = if metric.in_seconds() {
            metrics::Unit::Seconds
        } else {
            metrics::Unit::Count
        };
        match metric.kind {
            MetricKind::Counter => metrics::describe_counter!(metric.name, unit, metric.help),
            MetricKind::Gauge => metrics::describe_gauge!(metric.name, unit, metric.help),
            MetricKind::Histogram => metrics::describe_histogram!(metric.name, unit, metric.help),
            // A kind added to the catalogue type later: no description.
            _ => {}
        }
    }
}

/// Counts one charge of an attempt of `tenant` that reported `reported`
/// (`None`: nothing) under `cost`: what it was charged
/// ([`CostLedger::charged`](statek_policy::CostLedger::charged)) in
/// [`COST_CHARGED_TOTAL`], and the attempt in [`COST_OVER_MAX_TOTAL`] if
/// it reported more than `C_max`. An executor that keeps cost mode's
/// ledger calls it once per attempt it charges; returns the charge.
pub fn count_cost_charge(tenant: &TenantId, cost: &CostFairness, reported: Option<u64>) -> u64 {
    let charged = cost.charge_for(reported);
    let tenant = tenant.to_string();
    metrics::counter!(COST_CHARGED_TOTAL, "tenant" => tenant.clone()).increment(charged);
    if cost.exceeds_max(reported) {
        metrics::counter!(COST_OVER_MAX_TOTAL, "tenant" => tenant).increment(1);
    }
    charged
}

/// Sets [`COST_BALANCE`] of `tenant` to `balance` (cost units; as `f64`,
/// exact up to 2^53): an executor that keeps cost mode's ledger calls it
/// after each credit.
pub fn publish_cost_balance(tenant: &TenantId, balance: i128) {
    metrics::gauge!(COST_BALANCE, "tenant" => tenant.to_string()).set(balance as f64);
}

/// Counts a finished attempt of `tenant` whose finish was recorded with
/// `cost` (from [`crate::charged_cost`] at [`crate::MAX_RUN_COST`]) in
/// [`RUN_COST_REPORTED_TOTAL`], and in [`RUN_COST_CLAMPED_TOTAL`] when its
/// report was `clamped`. Both executors statek ships call it once per
/// attempt whose finish was recorded (not for one whose lease was lost
/// first, or whose record failed).
pub fn count_recorded_cost(tenant: &TenantId, cost: Option<u64>, clamped: bool) {
    if let Some(cost) = cost {
        metrics::counter!(RUN_COST_REPORTED_TOTAL, "tenant" => tenant.to_string()).increment(cost);
    }
    if clamped {
        metrics::counter!(RUN_COST_CLAMPED_TOTAL, "tenant" => tenant.to_string()).increment(1);
    }
}
