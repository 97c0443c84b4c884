//! The judgement of `audit.rs`, without SQL: a [`Walk`] over the pages of
//! a shard's evidence counts each tenant's slots, claims and lags
//! ([`Tally`]), finds holes and judges every range row and claim against
//! the policy's cycle.

use std::collections::HashMap;
use std::ops::Range;
use std::time::SystemTime;

use statek_core::SlotClass;
use statek_policy::{SchedulerShardId, WeightedFairnessPolicy};

use super::{AuditFinding, AuditReport, TenantAudit, MAX_AUDIT_FINDINGS, MAX_AUDIT_HOLES};
use crate::StoreError;

/// One tenant's running tallies.
pub(super) struct Tally {
    pub(super) audit: TenantAudit,
    /// Its last slot in the current stretch of evidence.
    last: Option<u64>,
    lags: hdrhistogram::Histogram<u64>,
}

impl Tally {
    pub(super) fn new(bound: &statek_policy::TenantStarvationBound) -> Result<Self, StoreError> {
        Ok(Self {
            audit: TenantAudit {
                tenant: bound.tenant().clone(),
                weight: bound.weight(),
                bound: bound.maximum_reservations_until_selection(),
                entitled: 0.0,
                slots: 0,
                claimed: 0,
                idle: 0,
                idle_known: 0,
                contended: 0,
                limited: 0,
                unused: 0,
                unrecorded: 0,
                claimed_after_record: 0,
                claims_in_holes: 0,
                largest_gap: 0,
                first_slot: None,
                last_slot: None,
                lag_samples: 0,
                lag_p50_ms: None,
                lag_p99_ms: None,
                runs_completed: 0,
                runs_failed: 0,
                runs_cancelled: 0,
                runs_open: 0,
                retried_attempts: 0,
            },
            last: None,
            // 1 µs to one hour, two significant digits.
            lags: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .map_err(|e| StoreError::InvalidArgument(e.to_string()))?,
        })
    }
}

pub(super) struct Walk<'p> {
    policy: &'p WeightedFairnessPolicy,
    indexes: &'p [u16],
    cycle_length: u64,
    digest: Vec<u8>,
    pub(super) tallies: Vec<Tally>,
    by_tenant: HashMap<&'p str, usize>,
    /// The report as it grows; its `covered_to` is the end of the
    /// evidence walked so far (the next sequence expected).
    pub(super) report: AuditReport,
}

impl<'p> Walk<'p> {
    /// A walk of `span` of `shard` under `policy`, nothing seen yet.
    pub(super) fn new(
        policy: &'p WeightedFairnessPolicy,
        shard: &SchedulerShardId,
        span: Range<u64>,
    ) -> Result<Self, StoreError> {
        let cycle_length = policy.cycle_length();
        Ok(Self {
            policy,
            indexes: policy.cycle_tenant_indexes(),
            cycle_length: u64::from(cycle_length),
            digest: policy.digest().as_bytes().to_vec(),
            tallies: policy
                .starvation_bounds()
                .map(|bound| Tally::new(&bound))
                .collect::<Result<_, StoreError>>()?,
            by_tenant: policy
                .tenants()
                .iter()
                .enumerate()
                .map(|(i, w)| (w.tenant().as_str(), i))
                .collect(),
            report: AuditReport {
                shard: shard.clone(),
                cycle_digest: policy.cycle_digest().to_string(),
                cycle_length,
                from: span.start,
                to: span.end,
                audited_slots: 0,
                holes: Vec::new(),
                hole_count: 0,
                tenants: Vec::new(),
                findings: Vec::new(),
                finding_count: 0,
                covered_to: span.start,
            },
        })
    }

    /// The end of the evidence walked so far.
    pub(super) fn covered_to(&self) -> u64 {
        self.report.covered_to
    }

    pub(super) fn find(&mut self, finding: AuditFinding) {
        self.report.finding_count += 1;
        if self.report.findings.len() < MAX_AUDIT_FINDINGS {
            self.report.findings.push(finding);
        }
    }

    pub(super) fn hole(&mut self, hole: Range<u64>) {
        if hole.is_empty() {
            return;
        }
        self.report.hole_count += 1;
        if self.report.holes.len() < MAX_AUDIT_HOLES {
            self.report.holes.push(hole);
        }
        // Gaps are judged within a stretch of evidence only.
        for tally in &mut self.tallies {
            tally.last = None;
        }
    }

    fn tenant_at(&self, sequence: u64) -> usize {
        // `cycle_length` is the policy's L (1..=4096) and `indexes` has L
        // entries: the index is in range.
        usize::from(self.indexes[(sequence % self.cycle_length) as usize])
    }

    /// One range row, clipped to the span, with its record and claims.
    /// `claims`: the claims of `span`, in sequence order.
    pub(super) fn range(
        &mut self,
        span: Range<u64>,
        classes: Option<&[SlotClass]>,
        claims: &[&Claim],
    ) {
        let mut next_claim = 0;
        for (offset, sequence) in span.enumerate() {
            let index = self.tenant_at(sequence);
            let recorded = classes.and_then(|c| c.get(offset)).copied();
            let mut claimed = false;
            while let Some(claim) = claims.get(next_claim).filter(|c| c.sequence <= sequence) {
                claimed |= claim.sequence == sequence;
                next_claim += 1;
            }
            let tally = &mut self.tallies[index];
            let gap = tally.last.map(|last| sequence - last);
            tally.last = Some(sequence);
            let a = &mut tally.audit;
            a.slots += 1;
            a.first_slot.get_or_insert(sequence);
            a.last_slot = Some(sequence);
            if let Some(gap) = gap {
                a.largest_gap = a.largest_gap.max(gap);
                if gap > u64::from(a.bound) {
                    let finding = AuditFinding::GapOverBound {
                        tenant: a.tenant.clone(),
                        gap,
                        bound: a.bound,
                        at_sequence: sequence,
                    };
                    self.count_class(index, claimed, recorded);
                    self.find(finding);
                    continue;
                }
            }
            self.count_class(index, claimed, recorded);
        }
    }

    fn count_class(&mut self, index: usize, claimed: bool, recorded: Option<SlotClass>) {
        let a = &mut self.tallies[index].audit;
        match (claimed, recorded) {
            (true, Some(class)) if class != SlotClass::Claimed => {
                a.claimed += 1;
                a.claimed_after_record += 1;
            }
            (true, _) | (false, Some(SlotClass::Claimed)) => a.claimed += 1,
            (false, Some(SlotClass::Idle)) => a.idle += 1,
            (false, Some(SlotClass::IdleKnown)) => a.idle_known += 1,
            (false, Some(SlotClass::Contended)) => a.contended += 1,
            (false, Some(SlotClass::Limited)) => a.limited += 1,
            (false, Some(SlotClass::Unused)) => a.unused += 1,
            (false, None) => a.unrecorded += 1,
        }
    }

    fn claim(&mut self, claim: &Claim) {
        let expected = self.tenant_at(claim.sequence);
        match self.by_tenant.get(claim.tenant.as_str()) {
            Some(&index) if index == expected => {}
            _ => {
                let finding = AuditFinding::ClaimOfAnotherTenant {
                    sequence: claim.sequence,
                    expected: self.tallies[expected].audit.tenant.clone(),
                    found: claim.tenant.clone(),
                };
                self.find(finding);
                return;
            }
        }
        let a = &mut self.tallies[expected].audit;
        if claim.attempt > 1 {
            a.retried_attempts += 1;
        }
        if !claim.current {
            return;
        }
        match claim.state.as_deref() {
            Some("completed") => a.runs_completed += 1,
            Some("failed") => a.runs_failed += 1,
            Some("cancelled") => a.runs_cancelled += 1,
            _ => a.runs_open += 1,
        }
        if claim.attempt == 1 {
            if let Some(lag) = claim
                .available_at
                .and_then(|at| claim.claimed_at.duration_since(at).ok())
            {
                let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
                let tally = &mut self.tallies[expected];
                // Saturates at the histogram's top (one hour) instead of
                // failing.
                tally.lags.saturating_record(micros);
                tally.audit.lag_samples += 1;
            }
        }
    }
}

/// One claim of the span: on its run row (`current`) or in history.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub(super) sequence: u64,
    pub(super) tenant: String,
    pub(super) attempt: i32,
    pub(super) state: Option<String>,
    pub(super) current: bool,
    pub(super) claimed_at: SystemTime,
    pub(super) available_at: Option<SystemTime>,
}

/// One page of evidence: range rows `(first, count, slot, digest)`, the
/// records by first sequence, the claims of their sequences.
#[derive(Default)]
pub(super) struct Page {
    pub(super) ranges: Vec<(u64, u64, i32, Vec<u8>)>,
    pub(super) records: HashMap<u64, Vec<SlotClass>>,
    pub(super) claims: Vec<Claim>,
}

impl Walk<'_> {
    /// A claim of a sequence without a range row (pruned): its tenant is
    /// checked and it is counted, nothing else.
    fn hole_claim(&mut self, claim: &Claim) {
        let expected = self.tenant_at(claim.sequence);
        if self.by_tenant.get(claim.tenant.as_str()) == Some(&expected) {
            self.tallies[expected].audit.claims_in_holes += 1;
        } else {
            let finding = AuditFinding::ClaimOfAnotherTenant {
                sequence: claim.sequence,
                expected: self.tallies[expected].audit.tenant.clone(),
                found: claim.tenant.clone(),
            };
            self.find(finding);
        }
    }

    /// Walks one page: its rows in sequence order, the holes between
    /// them, and its claims (sorted, all of sequences after what earlier
    /// pages walked).
    pub(super) fn page(&mut self, page: &Page) {
        let claims = &page.claims;
        let mut next_claim = 0;
        for (first, count, slot, digest) in &page.ranges {
            let range = *first..first + count;
            // Rows come in sequence order: one that starts inside evidence
            // already walked overlaps the row before it (the first row may
            // start before the span: only its part in the span counts).
            if range.start < self.report.covered_to && range.start >= self.report.from {
                self.find(AuditFinding::OverlappingRanges {
                    sequence: range.start,
                });
                continue;
            }
            let expected_slot = (range.start % self.cycle_length) as u32;
            if i64::from(*slot) != i64::from(expected_slot) {
                self.find(AuditFinding::SlotMismatch {
                    sequence: range.start,
                    stored_slot: *slot,
                    expected_slot,
                });
            }
            if *digest != self.digest {
                self.find(AuditFinding::DigestMismatch {
                    sequence: range.start,
                });
            }
            let clipped = range.start.max(self.report.covered_to)..range.end.min(self.report.to);
            if clipped.is_empty() {
                continue;
            }
            let covered = self.report.covered_to;
            self.hole(covered..clipped.start);
            while let Some(claim) = claims
                .get(next_claim)
                .filter(|c| c.sequence < clipped.start)
            {
                self.hole_claim(claim);
                next_claim += 1;
            }
            let from = next_claim;
            while claims
                .get(next_claim)
                .is_some_and(|c| c.sequence < clipped.end)
            {
                next_claim += 1;
            }
            let in_range: Vec<&Claim> = claims[from..next_claim].iter().collect();
            for claim in &in_range {
                self.claim(claim);
            }
            let classes = page.records.get(&range.start).map(|classes| {
                let skip = usize::try_from(clipped.start - range.start).unwrap_or(usize::MAX);
                classes.get(skip..).unwrap_or_default()
            });
            self.range(clipped.clone(), classes, &in_range);
            self.report.audited_slots += clipped.end - clipped.start;
            self.report.covered_to = clipped.end;
        }
        // Claims past the page's last row (only a page without rows reads
        // them: the rest of the span is a hole).
        for claim in claims.get(next_claim..).unwrap_or_default() {
            if claim.sequence >= self.report.covered_to {
                self.hole_claim(claim);
            }
        }
    }

    /// The report: the trailing hole (if any) and each tenant's figures.
    pub(super) fn finish(mut self) -> AuditReport {
        let (covered, to) = (self.report.covered_to, self.report.to);
        self.hole(covered..to);
        let audited = self.report.audited_slots as f64;
        let l = f64::from(self.policy.cycle_length());
        self.report.tenants = self
            .tallies
            .into_iter()
            .map(|tally| {
                let mut audit = tally.audit;
                audit.entitled = audited * f64::from(audit.weight) / l;
                if audit.lag_samples > 0 {
                    let ms = |q: f64| tally.lags.value_at_quantile(q) as f64 / 1000.0;
                    audit.lag_p50_ms = Some(ms(0.5));
                    audit.lag_p99_ms = Some(ms(0.99));
                }
                audit
            })
            .collect();
        self.report
    }
}
