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
    /// Cost mode only (`None` on a slot-mode shard): how its attempts
    /// claimed in the span stand in the ledger ([`TenantCostAudit`]).
    pub cost: Option<TenantCostAudit>,
}

/// One tenant's attempts claimed in a cost shard's span, against cost
/// mode's bound (docs/guarantees.md, "Cost mode: the bound"), in cost
/// units, judged by [`PgStore::audit_shard_with`](crate::PgStore::audit_shard_with)
/// with `D` = [`AuditOptions::concurrency`](crate::AuditOptions), the most
/// attempts of the tenant claimed and not yet charged at any moment (an
/// operator's statement about the fleet: the evidence cannot show how
/// many expired leases were still uncharged, so a concurrency cap is
/// reported, never taken for `D`). Without it nothing is judged.
///
/// The upper side, `S ≤ q·(n − 1) + D·C_max + b_cap` for its `n` slots in
/// the span (`S = 0` when `n = 0`), holds whatever the tenant did
/// ([`AuditFinding::CostOverBound`]). The lower side,
/// `S ≥ q·n − D·C_max* − b_cap` with `C_max*` the largest `C_max` of the
/// schedule's cost shards (a debt may come from an earlier one), holds
/// only while none of the tenant's credits in the span is cut by `b_cap`:
/// it is judged ([`AuditFinding::CostUnderBound`], each running attempt
/// counted at `C_max`) when the ledger (migration V20) shows none of the
/// span's credits cut and the span has no hole
/// ([`lower_judged`](Self::lower_judged)). Run rows pruned by run
/// retention inside a span whose range rows are kept would look like
/// attempts never made: keep runs at least as long as reservations.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantCostAudit {
    /// `S`: what its ended attempts claimed in the span were charged
    /// (the reported cost cut to `C_max`, or the policy's default when
    /// it reported none or ended without a finish), as the ledger's
    /// trigger charged them.
    pub charged: u64,
    /// Its attempts claimed in the span not charged yet (running): each
    /// adds at most `C_max` to `S` when it ends.
    pub uncharged: u64,
    /// Of the charged ones, those that ended without their holder's
    /// finish (cancelled while running, rescued, taken over).
    pub ended_without_finish: u64,
    /// `E = q·|W|·w/L`: its entitled cost over the span.
    pub entitled: f64,
    /// Its concurrency cap when audited (`statek limits`; information:
    /// expired leases escape a cap, so it is not `D`).
    pub cap: Option<u32>,
    /// `D` both sides were judged with; `None`: not judged (no
    /// concurrency given).
    pub concurrency: Option<u64>,
    /// `q·(n − 1) + D·C_max + b_cap` for that `D` (0 when `n = 0`).
    pub upper: Option<u64>,
    /// `q·n − D·C_max* − b_cap`: the lower side, which holds while no
    /// credit of the tenant in the span was cut by `b_cap`; `None` without
    /// a concurrency.
    pub lower: Option<i128>,
    /// `n`: its slots in the span, from the cycle (with or without
    /// evidence).
    pub slots_in_span: u64,
    /// The last sequence through which a credit of it on this shard was
    /// cut by `b_cap` (migration V20), `None` if never.
    pub clipped_through: Option<u64>,
    /// How far this shard credited it (`None`: never).
    pub credited_through: Option<u64>,
    /// Whether the lower side was judged: `D` known, no hole in the span,
    /// every slot of it in the span credited, and none of those credits
    /// cut (the span starts after `clipped_through`).
    pub lower_judged: bool,
    /// Its last slot in the span, from the cycle.
    pub(crate) last_slot: Option<u64>,
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
    /// Cost mode: the attempts `tenant`'s slots claimed in the span were
    /// charged at most `served_at_most` (its running attempts counted at
    /// `C_max`), below the bound's lower side `lower`
    /// (`q·n − D·C_max − b_cap`), though none of its credits in the span
    /// was cut by `b_cap`.
    CostUnderBound {
        /// The tenant.
        tenant: TenantId,
        /// `S` plus `C_max` per running attempt.
        served_at_most: u64,
        /// The lower side.
        lower: i128,
        /// `D` it was judged with.
        concurrency: u64,
    },
    /// Cost mode: the ended attempts `tenant`'s slots claimed in the span
    /// were charged `charged`, above the bound's upper side `upper`
    /// (`q·(n − 1) + D·C_max + b_cap` with `D` = `concurrency`).
    CostOverBound {
        /// The tenant.
        tenant: TenantId,
        /// `S`, as charged.
        charged: u64,
        /// The upper side.
        upper: u64,
        /// `D` it was judged with.
        concurrency: u64,
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
    /// The shard's cost parameters (cost mode), `None` in slot mode.
    pub cost_parameters: Option<statek_policy::CostFairness>,
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

    /// Counts `finding`, keeping it among the first [`MAX_AUDIT_FINDINGS`].
    pub(crate) fn add_finding(&mut self, finding: AuditFinding) {
        self.finding_count += 1;
        if self.findings.len() < MAX_AUDIT_FINDINGS {
            self.findings.push(finding);
        }
    }

    /// Whether the evidence covers the span's last sequence.
    pub fn covers_end(&self) -> bool {
        self.audited_slots > 0 && self.covered_to == self.to
    }
}
