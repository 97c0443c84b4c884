//! `statek audit --shard S [--sequences A..B | --from TIME --to TIME]`: a
//! shard's fairness evidence (reservation ranges, slot outcome records,
//! claims) judged against its own policy, through
//! `PgStore::audit_shard`. Exit code `AUDIT_FAILED` when a gap exceeds
//! its bound or the evidence is inconsistent, after the report.

use std::fmt;
use std::ops::Range;
use std::time::SystemTime;

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::{EchoedValue, SchedulerShardId};
use statek_store_pg::{
    AuditFinding, AuditOptions, AuditReport, ScheduleAudit, SeamAudit, TenantAudit,
};

use crate::db::DbArgs;
use crate::exit::{AuditFailed, InvalidInput};
use crate::out::{count, Report};
use crate::shard_cmd::shard_id;

/// Parses `A..B` (sequences `A` to `B - 1`) or `A..` (to the cursor).
pub fn sequences(text: &str) -> Result<Range<u64>, String> {
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| format!("{} is not A..B or A..", EchoedValue(text)))?;
    let number = |part: &str| {
        // Digits only (`parse` would take a leading `+`).
        Some(part)
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u64>().ok())
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or_else(|| format!("{} is not a sequence (0..=2^63-1)", EchoedValue(part)))
    };
    let start = number(start)?;
    let end = if end.is_empty() {
        u64::MAX
    } else {
        number(end)?
    };
    if end <= start {
        return Err(format!(
            "{} is an empty span of sequences",
            EchoedValue(text)
        ));
    }
    Ok(start..end)
}

/// What to audit: sequences, or the ranges reserved between two times.
pub enum Span {
    Sequences(Range<u64>),
    Between(SystemTime, SystemTime),
}

/// Runs the audit; the report, and whether it failed. `concurrency`: `D`
/// of cost mode's bound (`AuditOptions::concurrency`; without it a cost
/// shard's costs are reported, not judged).
pub async fn audit(
    shard: &str,
    span: Span,
    concurrency: Option<u32>,
    db: &DbArgs,
) -> Result<AuditLines> {
    let shard = shard_id(shard)?;
    let store = db.store(1)?;
    // An unknown shard is an error, also for a span of times.
    store.load_shard(&shard).await?;
    let sequences = match span {
        Span::Sequences(sequences) => sequences,
        Span::Between(from, to) => {
            if to <= from {
                return Err(anyhow!(InvalidInput(
                    "--to must be later than --from".to_owned()
                )));
            }
            store.sequences_reserved_between(&shard, from, to).await?
        }
    };
    let report = if sequences.is_empty() {
        None
    } else {
        let options =
            concurrency.map_or_else(AuditOptions::new, |d| AuditOptions::new().concurrency(d));
        Some(
            store
                .audit_shard_with(&shard, sequences.clone(), options)
                .await?,
        )
    };
    Ok(AuditLines::new(&shard, sequences, report.as_ref()))
}

/// Audits every shard of the schedule `shard` belongs to, and each seam
/// (`concurrency` as for [`audit`]).
pub async fn audit_schedule(
    shard: &str,
    concurrency: Option<u32>,
    db: &DbArgs,
) -> Result<ScheduleLines> {
    let shard = shard_id(shard)?;
    let store = db.store(1)?;
    let options =
        concurrency.map_or_else(AuditOptions::new, |d| AuditOptions::new().concurrency(d));
    let audit = store.audit_schedule_with(&shard, options).await?;
    Ok(ScheduleLines::new(&audit))
}

/// One tenant at one seam.
#[derive(Serialize)]
pub struct SeamTenantLine {
    tenant: String,
    bound: u64,
    observed: Option<u64>,
    joining: bool,
    waited_since_last_pick: Option<u64>,
}

/// One seam.
#[derive(Serialize)]
pub struct SeamLine {
    sealed: String,
    successor: String,
    sealed_at_sequence: u64,
    tenants: Vec<SeamTenantLine>,
    over_bound: usize,
}

impl SeamLine {
    fn new(seam: &SeamAudit) -> Self {
        Self {
            sealed: seam.sealed.to_string(),
            successor: seam.successor.to_string(),
            sealed_at_sequence: seam.sealed_at_sequence,
            tenants: seam
                .tenants
                .iter()
                .map(|t| SeamTenantLine {
                    tenant: t.tenant.to_string(),
                    bound: t.bound,
                    observed: t.observed,
                    joining: t.joining,
                    waited_since_last_pick: t.waited_since_last_pick,
                })
                .collect(),
            over_bound: seam.over_bound().count(),
        }
    }
}

/// What `statek audit --whole-schedule` reports.
#[derive(Serialize)]
pub struct ScheduleLines {
    shards: Vec<AuditLines>,
    seams: Vec<SeamLine>,
    passed: bool,
}

impl ScheduleLines {
    fn new(audit: &ScheduleAudit) -> Self {
        Self {
            shards: audit
                .shards
                .iter()
                .map(|r| AuditLines::new(&r.shard, r.from..r.to, Some(r)))
                .collect(),
            seams: audit.seams.iter().map(SeamLine::new).collect(),
            passed: audit.passed(),
        }
    }

    /// The audit's failure (exit code `AUDIT_FAILED`), if it failed.
    ///
    /// # Errors
    /// [`AuditFailed`] naming the shards and seams that failed.
    pub fn into_result(self) -> Result<()> {
        if self.passed {
            return Ok(());
        }
        let shards = self.shards.iter().filter(|s| !s.passed).count() as u64;
        let seams = self.seams.iter().filter(|s| s.over_bound > 0).count() as u64;
        Err(anyhow!(AuditFailed(format!(
            "the audit of the schedule found problems in {} and {}",
            count(shards, "shard", "shards"),
            count(seams, "seam", "seams")
        ))))
    }
}

fn or_dash(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

impl Report for ScheduleLines {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        for (k, shard) in self.shards.iter().enumerate() {
            if k > 0 {
                writeln!(w)?;
                if let Some(seam) = self.seams.get(k - 1) {
                    seam.write_text(w)?;
                    writeln!(w)?;
                }
            }
            shard.write_text(w)?;
        }
        writeln!(w)?;
        if self.passed {
            writeln!(
                w,
                "schedule: passed ({}, {})",
                count(self.shards.len() as u64, "shard", "shards"),
                count(self.seams.len() as u64, "seam", "seams")
            )
        } else {
            writeln!(w, "schedule: FAILED")
        }
    }
}

impl SeamLine {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "seam {} -> {} (sealed at sequence {}): gaps across it, in reservations",
            self.sealed, self.successor, self.sealed_at_sequence
        )?;
        writeln!(
            w,
            "{:<24} {:>9} {:>9} {:>8} {:>22}",
            "tenant", "bound", "observed", "joining", "waited since last pick"
        )?;
        for t in &self.tenants {
            let over = if t.observed.is_some_and(|gap| gap > t.bound) {
                "  ABOVE ITS BOUND"
            } else {
                ""
            };
            writeln!(
                w,
                "{:<24} {:>9} {:>9} {:>8} {:>22}{over}",
                t.tenant,
                t.bound,
                or_dash(t.observed),
                if t.joining { "yes" } else { "no" },
                or_dash(t.waited_since_last_pick)
            )?;
        }
        writeln!(
            w,
            "(observed: -, not seen in the evidence; waited since last pick: a joining tenant that was in an earlier shard, counted from its last pick there)"
        )
    }
}

/// One tenant's line.
#[derive(Serialize)]
pub struct TenantLine {
    tenant: String,
    weight: u32,
    bound: u32,
    entitled: f64,
    slots: u64,
    claimed: u64,
    idle: u64,
    idle_known: u64,
    contended: u64,
    limited: u64,
    debt: u64,
    unused: u64,
    unrecorded: u64,
    claimed_after_record: u64,
    claims_in_holes: u64,
    largest_gap: u64,
    lag_samples: u64,
    lag_p50_ms: Option<f64>,
    lag_p99_ms: Option<f64>,
    runs_completed: u64,
    runs_failed: u64,
    runs_cancelled: u64,
    runs_open: u64,
    retried_attempts: u64,
    largest_service_gap: u64,
    service_gap_at: Option<u64>,
    service_gap_slots_passed: u64,
    service_gap_idle: u64,
    service_gap_at_least: bool,
    cost_served: u64,
    attempts_without_cost: u64,
    /// Cost mode only (null otherwise): its attempts claimed in the span
    /// against the bound.
    cost_mode: Option<CostLine>,
}

/// One tenant's attempts on a cost shard against cost mode's bound, in
/// cost units (`statek_store_pg::TenantCostAudit`).
#[derive(Serialize)]
pub struct CostLine {
    /// `S`: what its ended attempts claimed in the span were charged.
    charged: u64,
    /// Attempts still running (each adds at most `C_max` when it ends).
    uncharged: u64,
    /// Ended without their holder's finish (charged the default).
    ended_without_finish: u64,
    /// `E = q·slots·weight/L`.
    entitled: f64,
    /// Its concurrency cap when audited (information: expired leases
    /// escape a cap, so it is not D).
    cap: Option<u32>,
    /// `D` the upper side was judged with (null: not judged).
    concurrency: Option<u64>,
    /// `q·(n − 1) + D·C_max + b_cap`.
    upper: Option<u64>,
    /// `q·n − D·C_max − b_cap`: holds while no credit was cut by `b_cap`.
    lower: Option<i128>,
    /// Whether the lower side was judged (no hole, every slot credited,
    /// none of its credits in the span cut: V20's record).
    lower_judged: bool,
    /// `n`: its slots in the span.
    slots_in_span: u64,
    /// The last sequence through which a credit of it was cut by `b_cap`.
    clipped_through: Option<u64>,
}

impl TenantLine {
    fn new(t: &TenantAudit) -> Self {
        let gap = t.largest_service_gap;
        Self {
            tenant: t.tenant.to_string(),
            weight: t.weight,
            bound: t.bound,
            entitled: t.entitled,
            slots: t.slots,
            claimed: t.claimed,
            idle: t.idle,
            idle_known: t.idle_known,
            contended: t.contended,
            limited: t.limited,
            debt: t.debt,
            unused: t.unused,
            unrecorded: t.unrecorded,
            claimed_after_record: t.claimed_after_record,
            claims_in_holes: t.claims_in_holes,
            largest_gap: t.largest_gap,
            lag_samples: t.lag_samples,
            lag_p50_ms: t.lag_p50_ms,
            lag_p99_ms: t.lag_p99_ms,
            runs_completed: t.runs_completed,
            runs_failed: t.runs_failed,
            runs_cancelled: t.runs_cancelled,
            runs_open: t.runs_open,
            retried_attempts: t.retried_attempts,
            largest_service_gap: gap.map_or(0, |g| g.reservations),
            service_gap_at: gap.map(|g| g.at),
            service_gap_slots_passed: gap.map_or(0, |g| g.slots_passed),
            service_gap_idle: gap.map_or(0, |g| g.idle),
            service_gap_at_least: gap.is_some_and(|g| g.at_least),
            cost_served: t.cost_served,
            attempts_without_cost: t.attempts_without_cost,
            cost_mode: t.cost.as_ref().map(|c| CostLine {
                charged: c.charged,
                uncharged: c.uncharged,
                ended_without_finish: c.ended_without_finish,
                entitled: c.entitled,
                cap: c.cap,
                concurrency: c.concurrency,
                upper: c.upper,
                lower: c.lower,
                lower_judged: c.lower_judged,
                slots_in_span: c.slots_in_span,
                clipped_through: c.clipped_through,
            }),
        }
    }
}

/// One finding, with its kind and a sentence.
#[derive(Serialize)]
pub struct FindingLine {
    kind: &'static str,
    sequence: u64,
    text: String,
}

impl FindingLine {
    /// `from`: the span's first sequence, where a finding about the whole
    /// span (cost mode's) is placed.
    fn new(finding: &AuditFinding, from: u64) -> Self {
        let (kind, sequence, text) = match finding {
            AuditFinding::GapOverBound {
                tenant,
                gap,
                bound,
                at_sequence,
            } => (
                "gap_over_bound",
                *at_sequence,
                format!("{tenant} waited {gap} reservations for this slot; its bound is {bound}"),
            ),
            AuditFinding::ClaimOfAnotherTenant {
                sequence,
                expected,
                found,
            } => (
                "claim_of_another_tenant",
                *sequence,
                format!(
                    "the slot is {expected}'s, and claimed a run of {}",
                    EchoedValue(found)
                ),
            ),
            AuditFinding::ClaimOutsideRanges { sequence } => (
                "claim_outside_ranges",
                *sequence,
                "a claim of a sequence no retained range row holds".to_owned(),
            ),
            AuditFinding::SlotMismatch {
                sequence,
                stored_slot,
                expected_slot,
            } => (
                "slot_mismatch",
                *sequence,
                format!("the range row says slot {stored_slot}, the cycle {expected_slot}"),
            ),
            AuditFinding::DigestMismatch { sequence } => (
                "digest_mismatch",
                *sequence,
                "the range row was reserved under another policy digest".to_owned(),
            ),
            AuditFinding::OverlappingRanges { sequence } => (
                "overlapping_ranges",
                *sequence,
                "a range row starts inside the one before it".to_owned(),
            ),
            AuditFinding::CostUnderBound {
                tenant,
                served_at_most,
                lower,
                concurrency,
            } => (
                "cost_under_bound",
                from,
                format!(
                    "the attempts {} claimed in the span were charged at most {served_at_most} \
                     (running ones at C_max), below the lower side of cost mode's bound {lower} \
                     (D = {concurrency}), though none of its credits in the span was cut",
                    EchoedValue(tenant.as_str())
                ),
            ),
            AuditFinding::CostOverBound {
                tenant,
                charged,
                upper,
                concurrency,
            } => (
                "cost_over_bound",
                from,
                format!(
                    "the attempts {} claimed in the span were charged {charged}, above the upper \
                     side of cost mode's bound {upper} (D = {concurrency})",
                    EchoedValue(tenant.as_str())
                ),
            ),
        };
        Self {
            kind,
            sequence,
            text,
        }
    }
}

/// What `statek audit` reports.
#[derive(Serialize)]
pub struct AuditLines {
    shard: String,
    /// `[from, to)`, as asked (or as the times mapped), before clipping to
    /// the cursor; `to` is null for a span open to the cursor.
    asked: (u64, Option<u64>),
    /// `[from, to)` audited (clipped to the cursor); absent when the times
    /// held no reservation.
    audited: Option<(u64, u64)>,
    cycle_length: Option<u32>,
    cycle_digest: Option<String>,
    audited_slots: u64,
    holes: Vec<(u64, u64)>,
    hole_count: u64,
    tenants: Vec<TenantLine>,
    /// Cost mode: the shard's `C_max` (null in slot mode).
    max_cost: Option<u64>,
    findings: Vec<FindingLine>,
    finding_count: u64,
    passed: bool,
}

impl AuditLines {
    fn new(shard: &SchedulerShardId, asked: Range<u64>, report: Option<&AuditReport>) -> Self {
        Self {
            shard: shard.to_string(),
            asked: (asked.start, (asked.end != u64::MAX).then_some(asked.end)),
            audited: report.map(|r| (r.from, r.to)),
            cycle_length: report.map(|r| r.cycle_length),
            cycle_digest: report.map(|r| r.cycle_digest.clone()),
            audited_slots: report.map_or(0, |r| r.audited_slots),
            holes: report.map_or_else(Vec::new, |r| {
                r.holes.iter().map(|h| (h.start, h.end)).collect()
            }),
            hole_count: report.map_or(0, |r| r.hole_count),
            tenants: report.map_or_else(Vec::new, |r| {
                r.tenants.iter().map(TenantLine::new).collect()
            }),
            max_cost: report.and_then(|r| r.cost_parameters.map(|c| c.max_cost())),
            findings: report.map_or_else(Vec::new, |r| {
                r.findings
                    .iter()
                    .map(|f| FindingLine::new(f, r.from))
                    .collect()
            }),
            finding_count: report.map_or(0, |r| r.finding_count),
            passed: report.is_none_or(AuditReport::passed),
        }
    }

    /// The audit's failure (exit code `AUDIT_FAILED`), if it failed.
    ///
    /// # Errors
    /// [`AuditFailed`] naming the findings' count.
    pub fn into_result(self) -> Result<()> {
        if self.passed {
            return Ok(());
        }
        Err(anyhow!(AuditFailed(format!(
            "the audit of shard {} found {}",
            self.shard,
            count(self.finding_count, "problem", "problems")
        ))))
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
}

impl Report for AuditLines {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let Some((from, to)) = self.audited else {
            return writeln!(
                w,
                "audit of shard {}: no reservation in the span asked; nothing to judge",
                self.shard
            );
        };
        if from == to {
            return writeln!(
                w,
                "audit of shard {}: the span asked starts at or past the cursor ({to}); nothing to judge",
                self.shard
            );
        }
        writeln!(
            w,
            "audit of shard {}, sequences {from}..{to}: {} with evidence; cycle L = {}, cycle digest {}",
            self.shard,
            count(self.audited_slots, "slot", "slots"),
            self.cycle_length.unwrap_or(0),
            self.cycle_digest.as_deref().unwrap_or("-"),
        )?;
        writeln!(
            w,
            "{:<24} {:>6} {:>6} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9} {:>8} {:>6} {:>7} {:>10} {:>7} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>16}",
            "tenant", "weight", "bound", "entitled", "slots", "claimed", "idle", "known",
            "contended", "limited", "debt", "unused", "unrecorded", "gap", "svc gap", "lag p50",
            "lag p99", "completed", "failed", "retried", "cost"
        )?;
        for t in &self.tenants {
            writeln!(
                w,
                "{:<24} {:>6} {:>6} {:>10.1} {:>9} {:>9} {:>8} {:>8} {:>9} {:>8} {:>6} {:>7} {:>10} {:>7} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>16}",
                t.tenant, t.weight, t.bound, t.entitled, t.slots, t.claimed, t.idle,
                t.idle_known, t.contended, t.limited, t.debt, t.unused, t.unrecorded, t.largest_gap,
                match (t.service_gap_at, t.service_gap_at_least) {
                    (None, _) => "-".to_owned(),
                    (Some(_), true) => format!(">={}", t.largest_service_gap),
                    (Some(_), false) => t.largest_service_gap.to_string(),
                },
                ms(t.lag_p50_ms), ms(t.lag_p99_ms), t.runs_completed, t.runs_failed,
                t.retried_attempts, t.cost_served
            )?;
        }
        writeln!(
            w,
            "(slots: the cycle's slots of the tenant with evidence; gap: the largest selection gap seen, in reservations; svc gap: the longest a run waited for its claim, in reservations from its tenant's first slot reserved after it became runnable; lag: ms from runnable to claim, first attempts; cost: the cost recorded with the finishes of the attempts its slots claimed)"
        )?;
        if self.tenants.iter().any(|t| t.cost_mode.is_some()) {
            writeln!(
                w,
                "{:<24} {:>12} {:>12} {:>8} {:>6} {:>6} {:>12} {:>12} {:>7}",
                "cost mode",
                "entitled E",
                "charged S",
                "running",
                "cap",
                "D",
                "upper",
                "lower",
                "judged"
            )?;
            for t in &self.tenants {
                let Some(c) = &t.cost_mode else { continue };
                let at_most = c
                    .charged
                    .saturating_add(c.uncharged.saturating_mul(self.max_cost.unwrap_or(0)));
                let over = if c.upper.is_some_and(|u| c.charged > u) {
                    "  ABOVE ITS BOUND"
                } else if c.lower_judged && c.lower.is_some_and(|l| i128::from(at_most) < l) {
                    "  BELOW ITS BOUND"
                } else {
                    ""
                };
                writeln!(
                    w,
                    "{:<24} {:>12.1} {:>12} {:>8} {:>6} {:>6} {:>12} {:>12} {:>7}{over}",
                    t.tenant,
                    c.entitled,
                    c.charged,
                    c.uncharged,
                    c.cap.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                    or_dash(c.concurrency),
                    or_dash(c.upper),
                    c.lower.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                    if c.lower_judged {
                        "both"
                    } else if c.upper.is_some() {
                        "upper"
                    } else {
                        "no"
                    }
                )?;
            }
            writeln!(
                w,
                "(cost mode: S = what the ended attempts its slots claimed were charged; upper = q·(slots − 1) + D·C_max + b_cap; lower = q·slots − D·C_max* − b_cap, which holds while none of its credits is cut by b_cap: judged when the span has no hole and the ledger shows every slot of it credited and none cut (its last cut before the span), running attempts counted at C_max; both sides judged only with --concurrency D, the most attempts of a tenant claimed and not yet charged at any moment (a cap is not D: expired leases escape it); the lower with the largest C_max of the schedule's cost shards, a debt may come from an earlier one; docs/guarantees.md, \"Cost mode: the bound\")"
            )?;
        }
        let in_holes: u64 = self.tenants.iter().map(|t| t.claims_in_holes).sum();
        if in_holes > 0 {
            writeln!(
                w,
                "{} in holes (their range rows pruned, their run rows kept): tenant checked, not counted above",
                count(in_holes, "claim", "claims")
            )?;
        }
        for t in self.tenants.iter().filter(|t| t.service_gap_idle > 0) {
            writeln!(
                w,
                "{}: a run waited {}{} reservations for its claim (at sequence {}): {} passed it, {} idle (found nothing; an enqueue commits after its runnable time: look for long enqueue transactions)",
                t.tenant,
                if t.service_gap_at_least { "at least " } else { "" },
                t.largest_service_gap,
                t.service_gap_at.unwrap_or_default(),
                count(t.service_gap_slots_passed, "of its slots", "of its slots"),
                t.service_gap_idle,
            )?;
        }
        let late: u64 = self.tenants.iter().map(|t| t.claimed_after_record).sum();
        if late > 0 {
            writeln!(
                w,
                "{} claimed after its range was recorded otherwise (a lost acknowledgement); counted as claimed",
                count(late, "slot was", "slots were")
            )?;
        }
        if self.hole_count == 0 {
            writeln!(w, "holes: none")?;
        } else {
            let shown: Vec<String> = self
                .holes
                .iter()
                .map(|(a, b)| format!("{a}..{b}"))
                .collect();
            writeln!(
                w,
                "holes: {} without evidence (pruned, or never reserved), not judged: {}{}",
                count(self.hole_count, "stretch", "stretches"),
                shown.join(", "),
                if self.hole_count > self.holes.len() as u64 {
                    ", …"
                } else {
                    ""
                }
            )?;
        }
        if self.passed {
            return writeln!(
                w,
                "result: passed (every gap within its bound, the evidence consistent)"
            );
        }
        writeln!(
            w,
            "result: FAILED, {}:",
            count(self.finding_count, "finding", "findings")
        )?;
        for f in &self.findings {
            writeln!(w, "  sequence {}: {} ({})", f.sequence, f.text, f.kind)?;
        }
        if self.finding_count > self.findings.len() as u64 {
            writeln!(
                w,
                "  … and {} more",
                self.finding_count - self.findings.len() as u64
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::sequences;

    /// Spans are digits: `A..B`, `A..`; a sign, an empty or reversed span
    /// and a sequence past 2^63 - 1 are refused with what was given.
    #[test]
    fn spans_of_sequences() {
        assert_eq!(sequences("2..6"), Ok(2..6));
        assert_eq!(sequences("7.."), Ok(7..u64::MAX));
        for (text, why) in [
            ("+1..5", "\"+1\" is not a sequence (0..=2^63-1)"),
            ("-1..5", "\"-1\" is not a sequence (0..=2^63-1)"),
            ("5..5", "\"5..5\" is an empty span of sequences"),
            (
                "9223372036854775808..",
                "\"9223372036854775808\" is not a sequence (0..=2^63-1)",
            ),
            ("1-5", "\"1-5\" is not A..B or A.."),
        ] {
            assert_eq!(sequences(text), Err(why.to_owned()), "{text}");
        }
    }
}
