//! What [`PgStore::audit_shard`](crate::PgStore::audit_shard) reports: per
//! tenant what it got in the audited span ([`TenantAudit`]), what was
//! found wrong ([`AuditFinding`]) and the whole report ([`AuditReport`]).

use std::ops::Range;

use statek_policy::{SchedulerShardId, TenantId};

/// Findings kept in a report (more are counted, not kept).
pub const MAX_AUDIT_FINDINGS: usize = 100;

/// Holes kept in a report (more are counted, not kept).
pub const MAX_AUDIT_HOLES: usize = 100;

/// What one tenant got in an audited span. Counts are slots unless named
/// otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantAudit {
    /// The tenant.
    pub tenant: TenantId,
    /// Its weight in the policy.
    pub weight: u32,
    /// Its starvation bound, in reservations.
    pub bound: u32,
    /// Slots of the span with evidence × weight / L.
    pub entitled: f64,
    /// Slots of the span with evidence that the cycle gave it.
    pub slots: u64,
    /// Slots that claimed a run (a claim on record).
    pub claimed: u64,
    /// Slots recorded idle: the claim asked, no claimable run.
    pub idle: u64,
    /// Slots recorded idle without asking (the tenant was known empty).
    pub idle_known: u64,
    /// Slots recorded contended: claimable runs, all held by other claimers.
    pub contended: u64,
    /// Slots recorded limited: the tenant's cap or rate limit held it back.
    pub limited: u64,
    /// Slots recorded debt (cost mode): a claimable run, but the tenant
    /// was in debt after the slot's credit.
    pub debt: u64,
    /// Slots recorded unused: the Worker stopped before deciding them.
    pub unused: u64,
    /// Slots of ranges without an outcome record (and without a claim).
    pub unrecorded: u64,
    /// Claimed slots whose range's record says otherwise (the claim was
    /// answered after the record: a lost acknowledgement).
    pub claimed_after_record: u64,
    /// Claims of its slots in holes (range rows pruned by retention while
    /// the run rows stay): their tenant is checked, nothing else.
    pub claims_in_holes: u64,
    /// The largest selection gap seen, in reservations (0: fewer than two
    /// of its slots in one stretch of evidence).
    pub largest_gap: u64,
    /// Its first and last slot with evidence in the span (sequences).
    pub first_slot: Option<u64>,
    /// See `first_slot`.
    pub last_slot: Option<u64>,
    /// First attempts whose service lag was measured.
    pub lag_samples: u64,
    /// The median service lag of those first attempts, milliseconds.
    pub lag_p50_ms: Option<f64>,
    /// The 99th percentile of the same, milliseconds.
    pub lag_p99_ms: Option<f64>,
    /// Claims (on run rows) whose run is now completed.
    pub runs_completed: u64,
    /// Claims whose run is now failed.
    pub runs_failed: u64,
    /// Claims whose run is now cancelled.
    pub runs_cancelled: u64,
    /// Claims whose run is running, or available for another attempt.
    pub runs_open: u64,
    /// Claims of an attempt after the first (on run rows or in history).
    pub retried_attempts: u64,
    /// The cost recorded with the finishes of the attempts claimed by its
    /// slots in the span (migration V18), in the handlers' cost units:
    /// what it was served, counted by claim (`S` of docs/guarantees.md,
    /// "Cost mode: the bound").
    pub cost_served: u64,
    /// The longest a run of it waited for its claim ([`ServiceGap`]);
    /// `None` when no first attempt was claimed by its slots in the span.
    /// Reported, not judged: an enqueue commits after its runnable time,
    /// so a slot that found nothing then may be right.
    pub largest_service_gap: Option<ServiceGap>,
    /// Attempts claimed by its slots in the span with no cost recorded:
    /// still running, reported none, not finished by their holder, or
    /// finished before V18.
    pub attempts_without_cost: u64,
}

/// How long a run waited for its claim (`statek audit`'s service gap):
/// counted in reservations from its tenant's first slot reserved at or
/// after the run became runnable to the slot that claimed it (first
/// attempts on their run rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceGap {
    /// Reservations from that first slot to the claiming one (0: that
    /// first slot claimed it).
    pub reservations: u64,
    /// Its tenant's slots in between, which did not claim it.
    pub slots_passed: u64,
    /// Of those, the ones whose claim found no claimable run (idle).
    pub idle: u64,
    /// The claiming slot.
    pub at: u64,
    /// The run may have become runnable before what the audit saw (before
    /// the span's start, a hole, or the 4,096 ranges its look back
    /// remembers): `reservations` is a lower bound.
    pub at_least: bool,
}

impl ServiceGap {
    /// Whether this gap is reported over `other` as a tenant's largest:
    /// longer, or as long and a lower bound where `other` is exact.
    pub(crate) fn outranks(&self, other: &ServiceGap) -> bool {
        self.reservations > other.reservations
            || (self.reservations == other.reservations && self.at_least && !other.at_least)
    }
}

/// What makes an audit fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditFinding {
    /// Two slots of `tenant` were `gap` reservations apart, above its bound.
    GapOverBound {
        /// The tenant.
        tenant: TenantId,
        /// The gap, in reservations.
        gap: u64,
        /// Its starvation bound.
        bound: u32,
        /// The slot that ended the gap.
        at_sequence: u64,
    },
    /// A claim of `sequence` took a run of `found`; the cycle gives the
    /// slot to `expected`.
    ClaimOfAnotherTenant {
        /// The slot.
        sequence: u64,
        /// The cycle's tenant of the slot.
        expected: TenantId,
        /// The claimed run's tenant, as stored.
        found: String,
    },
    /// A claim of a sequence at or past the shard's cursor: no range was
    /// ever reserved for it.
    ClaimOutsideRanges {
        /// The claimed sequence.
        sequence: u64,
    },
    /// A range row's slot is not its sequence modulo L.
    SlotMismatch {
        /// The range's first sequence.
        sequence: u64,
        /// The slot the row holds.
        stored_slot: i32,
        /// `sequence % L`.
        expected_slot: u32,
    },
    /// A range row was reserved under another policy digest.
    DigestMismatch {
        /// The range's first sequence.
        sequence: u64,
    },
    /// A range row starts inside the one before it.
    OverlappingRanges {
        /// The later range's first sequence.
        sequence: u64,
    },
}

/// A shard's audit ([`PgStore::audit_shard`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditReport {
    /// The shard audited.
    pub shard: SchedulerShardId,
    /// The digest of the cycle the evidence was judged against.
    pub cycle_digest: String,
    /// `L`, the cycle's length in slots.
    pub cycle_length: u32,
    /// The span asked for, `[from, to)` (`to` at most the shard's cursor).
    pub from: u64,
    /// The end of the span audited (exclusive).
    pub to: u64,
    /// Slots of the span with evidence (a range row).
    pub audited_slots: u64,
    /// Stretches of the span without a range row (the first
    /// [`MAX_AUDIT_HOLES`]), and their count.
    pub holes: Vec<Range<u64>>,
    /// How many stretches without a range row there were.
    pub hole_count: u64,
    /// One per tenant of the policy, in the policy's order.
    pub tenants: Vec<TenantAudit>,
    /// The first [`MAX_AUDIT_FINDINGS`] findings, and their count.
    pub findings: Vec<AuditFinding>,
    /// How many findings there were.
    pub finding_count: u64,
    /// Where the last stretch of evidence ends.
    pub(super) covered_to: u64,
}

impl AuditReport {
    /// Whether nothing was found: every observed gap within its bound and
    /// the evidence consistent.
    pub fn passed(&self) -> bool {
        self.finding_count == 0
    }

    /// Whether the evidence covers the span's first sequence (the first
    /// hole, always kept, does not start there).
    pub fn covers_start(&self) -> bool {
        self.audited_slots > 0 && self.holes.first().is_none_or(|h| h.start > self.from)
    }

    /// Whether the evidence covers the span's last sequence.
    pub fn covers_end(&self) -> bool {
        self.audited_slots > 0 && self.covered_to == self.to
    }
}
