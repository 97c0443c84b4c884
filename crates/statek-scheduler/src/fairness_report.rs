//! [`FairnessReport`]: what a [`crate::FairnessMonitor`] measured, per
//! tenant.

use std::time::Duration;

use statek_policy::TenantId;

/// One gap above a tenant's starvation bound while the tenant had work at
/// both ends (see [`crate::FairnessMonitor`] for the exact rule).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GapViolation {
    /// The tenant.
    pub tenant: TenantId,
    /// The sequence of the earlier selection.
    pub from_sequence: u64,
    /// The sequence of the next selection.
    pub to_sequence: u64,
    /// `to_sequence - from_sequence` reservations.
    pub gap: u64,
    /// The tenant's starvation bound (reservations).
    pub bound: u32,
}

/// Observed selection gaps of one tenant, in reservations: the distance
/// from one selection to the next, counting the selecting reservation (a
/// tenant picked in every slot has gaps of 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GapStats {
    /// Gaps measured.
    pub count: u64,
    /// The largest gap, 0 when none was measured.
    pub max: u64,
    /// Median (nearest rank), `None` when no gap was measured.
    pub p50: Option<u64>,
    /// 99th percentile (nearest rank), `None` when no gap was measured.
    pub p99: Option<u64>,
    /// `(gap, count)` for every distinct gap length counted exactly, in
    /// increasing gap order.
    pub histogram: Vec<(u64, u64)>,
    /// Gaps not in `histogram`: the tenant had more than 64 distinct gap
    /// lengths. A percentile that falls among them is reported as `max`,
    /// an upper bound.
    pub overflow: u64,
    /// Gaps not measured because a sequence between the two selections was
    /// never observed (see [`FairnessReport::missing`]).
    pub unmeasured: u64,
    /// Gaps above the bound where an end of the gap was `Idle` or
    /// `Cancelled`: not violations.
    pub above_bound_without_work: u64,
    /// Gaps above the bound with work at both ends: violations.
    pub violations: u64,
}

/// Lag statistics in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TimeLag {
    /// Samples.
    pub count: u64,
    /// The largest lag.
    pub max: Duration,
    /// The mean lag (zero without samples).
    pub mean: Duration,
}

/// Claim lag of one tenant: from a run becoming runnable (as told by
/// [`crate::FairnessMonitor::record_runnable`]) to its first claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ClaimLag {
    /// Claims matched with a runnable record.
    pub count: u64,
    /// Largest lag in reservations: `claim sequence + 1 - cursor`, so a run
    /// claimed by the very reservation at its cursor has a lag of 1 (0 when
    /// the cursor given was past the claim).
    pub max_reservations: u64,
    /// Mean lag in reservations, rounded down (0 without samples).
    pub mean_reservations: u64,
    /// The same in time: database claim time minus the `at` given to
    /// `record_runnable` (0 when the claim looks earlier).
    pub time: TimeLag,
}

/// One tenant's row of a [`FairnessReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantFairnessRow {
    /// The tenant.
    pub tenant: TenantId,
    /// Its weight: slots per cycle.
    pub weight: u32,
    /// Its starvation bound (reservations).
    pub bound: u32,
    /// Observed selections (outcomes of any kind).
    pub selections: u64,
    /// Outcomes `Executed`.
    pub executed: u64,
    /// Outcomes `ExecutionFailed`.
    pub execution_failed: u64,
    /// Outcomes `Idle`.
    pub idle: u64,
    /// Outcomes `Contended`.
    pub contended: u64,
    /// Outcomes `Limited`.
    pub limited: u64,
    /// Outcomes `Debt` (cost mode).
    pub debt: u64,
    /// Outcomes `Cancelled`.
    pub cancelled: u64,
    /// Selection gaps.
    pub gaps: GapStats,
    /// Claim lag (runnable to first claim).
    pub claim_lag: ClaimLag,
    /// Service lag of every claim, first or retried: database claim time
    /// minus the run's database `available_at`.
    pub service_lag: TimeLag,
}

/// A snapshot of a [`crate::FairnessMonitor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairnessReport {
    /// Every sequence below was processed (observed or given up as
    /// missing); the rows cover exactly those.
    pub watermark: u64,
    /// Sequences processed from an observation.
    pub observed: u64,
    /// Sequences given up on: never observed before the buffer filled or
    /// [`crate::FairnessMonitor::flush`] was called.
    pub missing: u64,
    /// Observations buffered above the watermark, not yet in the rows.
    pub pending: usize,
    /// Observations ignored because they arrived below the watermark
    /// (duplicates, or sequences already given up as missing).
    pub late: u64,
    /// Observations for a tenant the policy does not know (they still
    /// advance the watermark).
    pub unknown_tenant: u64,
    /// Observations of a shard the monitor does not follow (a successor
    /// fed before [`crate::FairnessMonitor::follow_rollout`]), or of a
    /// sealed shard at or after its seal.
    pub unknown_shard: u64,
    /// Claims whose run was recorded runnable for another tenant: a tenant
    /// slot ran another tenant's run.
    pub isolation_violations: u64,
    /// Runnable records forgotten because [`crate::MonitorOptions::max_tracked_runs`]
    /// was reached.
    pub runnable_evicted: u64,
    /// One row per tenant of the policy, in the policy's tenant order;
    /// after [`crate::FairnessMonitor::follow_rollout`], rows of tenants
    /// that join follow, and rows of tenants that left stay.
    pub tenants: Vec<TenantFairnessRow>,
    /// Gap violations, oldest processed first, at most
    /// [`crate::MonitorOptions::max_violations`].
    pub violations: Vec<GapViolation>,
    /// Violations counted but not kept in `violations`.
    pub violations_dropped: u64,
}

impl FairnessReport {
    /// The row of `tenant`, if the policy has it.
    pub fn tenant(&self, tenant: &TenantId) -> Option<&TenantFairnessRow> {
        self.tenants.iter().find(|row| &row.tenant == tenant)
    }

    /// True when no violation was found (an empty report is fair).
    pub fn is_fair(&self) -> bool {
        self.violations.is_empty() && self.violations_dropped == 0
    }
}
