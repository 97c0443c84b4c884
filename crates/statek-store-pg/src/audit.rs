//! [`PgStore::audit_shard`]: a shard's fairness evidence read back and
//! judged against its own policy (issue 26, `statek audit`).
//!
//! The evidence of a shard is three things the database keeps: its
//! reservation range rows (which sequences were handed out, with each
//! range's first slot and policy digest), the outcome record of each range
//! (migration V14: claimed, idle, idle known, contended, limited, unused,
//! as runs of one letter each) and the claims (an attempt on its run row,
//! V13, or moved into `statek.run_claims`). The audit walks a span of
//! sequences in pages of range rows, so its memory is bounded by a page
//! and the policy (not by the span), and reports per tenant:
//!
//! - slots received (sequences of the span mapped to it by the cycle),
//!   against `entitled = slots × weight / L`;
//! - how its slots ended, from the records: claimed, idle, idle known,
//!   contended, limited, unused, and unrecorded (a range with no record: a
//!   Worker stopped or crashed before recording it); a claim on record
//!   always counts as claimed, also where the range's record (written
//!   before a claim whose acknowledgement was lost) says otherwise;
//! - the largest selection gap observed (reservations between two of its
//!   slots, within evidence without holes) against its starvation bound;
//! - service lag (claim time minus runnable time) of the first attempts
//!   still on their run rows (a retried run's first runnable time is not
//!   kept), p50 and p99, in milliseconds;
//! - its claims by the run's state now, and the claims of later attempts
//!   (retries);
//! - the cost recorded with the finishes of its attempts claimed in the
//!   span (migration V18), and how many recorded none.
//!
//! **Findings** make an audit fail: a gap above the bound, a claim of a
//! slot by another tenant than the cycle's, a claim outside every retained
//! range, a range row whose slot or policy digest is not the shard's, and
//! overlapping ranges. Holes (sequences of the span with no range row:
//! pruned by retention, or never reserved past the cursor) are reported,
//! not judged: nothing can be said about slots without evidence.
//!
//! - its largest service gap: the longest a first attempt waited for its
//!   claim, in reservations from its tenant's first slot reserved after it
//!   became runnable, with how many of its tenant's slots passed it (and
//!   how many of those were idle) ([`service_gap`]). Reported, not judged:
//!   an enqueue commits after its runnable time (in the caller's
//!   transaction, much later), and the evidence does not keep the commit
//!   time, so a slot that found nothing in between may be right.
//!
//! The seam across a seal is judged by [`PgStore::audit_schedule`]
//! (`audit_chain.rs`), which audits each shard of a chain.

use std::collections::HashMap;
use std::ops::Range;
use std::time::SystemTime;

use statek_core::SlotClass;
use statek_policy::{SchedulerShardId, WeightedFairnessPolicy};
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

mod cost;
mod report;
mod service_gap;
mod span;

pub use cost::AuditOptions;

pub use report::{
    AuditFinding, AuditReport, ServiceGap, TenantAudit, TenantCostAudit, MAX_AUDIT_FINDINGS,
    MAX_AUDIT_HOLES,
};

/// Range rows read per page.
const PAGE_RANGES: i64 = 1_000;

/// The row that may straddle the span's start `$2` (the last one starting
/// before it): the first page's only look back.
const SELECT_STRADDLING: &str = "
    SELECT sequence, sequence_count, slot, policy_digest, reserved_at
    FROM statek.scheduler_reservations
    WHERE shard_id = $1 AND sequence < $2
    ORDER BY sequence DESC
    LIMIT 1";

/// The rows starting in `[$2, $3)`, at most `$4`, in sequence order: a walk
/// of the `(shard_id, sequence)` key, so a page costs its rows, not the
/// rows before it. Pages go on from the last row's start + 1, so a row
/// that starts inside the one before it (an overlap) is always read.
const SELECT_RANGES: &str = "
    SELECT sequence, sequence_count, slot, policy_digest, reserved_at
    FROM statek.scheduler_reservations
    WHERE shard_id = $1 AND sequence >= $2 AND sequence < $3
    ORDER BY sequence
    LIMIT $4";

/// Claims of sequences at or past the shard's cursor `$2`: no range can
/// hold them (at most 100 read).
const SELECT_CLAIMS_PAST_CURSOR: &str = "
    (SELECT r.claim_sequence AS sequence FROM statek.runs AS r
     WHERE r.claim_shard_id = $1 AND r.claim_sequence >= $2
     ORDER BY r.claim_sequence LIMIT 100)
    UNION ALL
    (SELECT c.sequence FROM statek.run_claims AS c
     WHERE c.shard_id = $1 AND c.sequence >= $2
     ORDER BY c.sequence LIMIT 100)";

/// A page ends after this many slots (or [`PAGE_RANGES`] rows): the claims
/// of a page are held at once.
const PAGE_SLOTS: u64 = 65_536;

const SELECT_RECORDS: &str = "
    SELECT first_sequence, classes, counts
    FROM statek.slot_outcomes
    WHERE shard_id = $1 AND first_sequence >= $2 AND first_sequence < $3
    ORDER BY first_sequence";

const SELECT_CLAIMS: &str = "
    SELECT r.claim_sequence AS sequence, r.tenant_id, r.attempt, r.state,
           r.claimed_at, r.available_at, r.claim_cost AS cost,
           (r.charge_pending IS NOT TRUE AND r.state <> 'running') AS ended,
           (r.claim_finished_at IS NOT NULL) AS finished
    FROM statek.runs AS r
    WHERE r.claim_shard_id = $1 AND r.claim_sequence >= $2 AND r.claim_sequence < $3
    UNION ALL
    SELECT c.sequence, c.tenant_id, c.attempt, NULL::text, c.claimed_at, NULL::timestamptz,
           c.cost, true, (c.finished_at IS NOT NULL)
    FROM statek.run_claims AS c
    WHERE c.shard_id = $1 AND c.sequence >= $2 AND c.sequence < $3";

/// One tenant's running tallies.
struct Tally {
    audit: TenantAudit,
    /// Its last slot in the current stretch of evidence.
    last: Option<u64>,
    lags: hdrhistogram::Histogram<u64>,
    gaps: service_gap::ServiceGaps,
}

impl Tally {
    fn new(bound: &statek_policy::TenantStarvationBound) -> Result<Self, StoreError> {
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
                debt: 0,
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
                largest_service_gap: None,
                cost_served: 0,
                attempts_without_cost: 0,
                cost: None,
            },
            last: None,
            gaps: service_gap::ServiceGaps::default(),
            // 1 µs to one hour, two significant digits.
            lags: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .map_err(|e| StoreError::InvalidArgument(e.to_string()))?,
        })
    }
}

struct Walk<'p> {
    policy: &'p WeightedFairnessPolicy,
    indexes: &'p [u16],
    cycle_length: u64,
    digest: Vec<u8>,
    tallies: Vec<Tally>,
    by_tenant: HashMap<&'p str, usize>,
    report: AuditReport,
    /// The end of the evidence seen so far (next expected sequence).
    covered_to: u64,
}

impl Walk<'_> {
    fn find(&mut self, finding: AuditFinding) {
        self.report.add_finding(finding);
    }

    fn hole(&mut self, hole: Range<u64>) {
        if hole.is_empty() {
            return;
        }
        let stretch = hole.end;
        self.report.hole_count += 1;
        if self.report.holes.len() < MAX_AUDIT_HOLES {
            self.report.holes.push(hole);
        }
        // Gaps are judged within a stretch of evidence only.
        for tally in &mut self.tallies {
            tally.last = None;
            tally.gaps.reset(stretch);
        }
    }

    fn tenant_at(&self, sequence: u64) -> usize {
        // `cycle_length` is the policy's L (1..=4096) and `indexes` has L
        // entries: the index is in range.
        usize::from(self.indexes[(sequence % self.cycle_length) as usize])
    }

    /// One range row, clipped to the span, reserved at `reserved_at`,
    /// with its record and claims. `claims`: the claims of `span`, in
    /// sequence order.
    fn range(
        &mut self,
        span: Range<u64>,
        range_start: u64,
        reserved_at: SystemTime,
        classes: Option<&[SlotClass]>,
        claims: &[&Claim],
    ) {
        let mut next_claim = 0;
        for (offset, sequence) in span.enumerate() {
            let index = self.tenant_at(sequence);
            let recorded = classes.and_then(|c| c.get(offset)).copied();
            let mut claimed = false;
            // The runnable time of the first attempt this slot claimed.
            let mut runnable = None;
            while let Some(claim) = claims.get(next_claim).filter(|c| c.sequence <= sequence) {
                if claim.sequence == sequence {
                    claimed = true;
                    if claim.current && claim.attempt == 1 {
                        runnable = claim.available_at;
                    }
                }
                next_claim += 1;
            }
            let passed = match (claimed, recorded) {
                (true, _) | (false, Some(SlotClass::Claimed)) => service_gap::Passed::Claimed,
                (false, Some(SlotClass::Idle)) => service_gap::Passed::Idle,
                _ => service_gap::Passed::Other,
            };
            let tally = &mut self.tallies[index];
            if let Some(gap) = tally
                .gaps
                .slot(sequence, range_start, reserved_at, passed, runnable)
            {
                let best = &mut tally.audit.largest_service_gap;
                if best.is_none_or(|best| gap.outranks(&best)) {
                    *best = Some(gap);
                }
            }
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
            (false, Some(SlotClass::Debt)) => a.debt += 1,
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
        match claim.cost {
            Some(cost) => a.cost_served = a.cost_served.saturating_add(cost),
            None => a.attempts_without_cost += 1,
        }
        if let (Some(ledger), Some(params)) =
            (a.cost.as_mut(), self.report.cost_parameters.as_ref())
        {
            ledger.count(params, claim.ended, claim.finished, claim.cost);
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
struct Claim {
    sequence: u64,
    tenant: String,
    attempt: i32,
    state: Option<String>,
    current: bool,
    claimed_at: SystemTime,
    available_at: Option<SystemTime>,
    /// The cost recorded with its finish (V18).
    cost: Option<u64>,
    /// The attempt ended (on a cost shard: the ledger charged it, V19).
    ended: bool,
    /// Its holder recorded its finish.
    finished: bool,
}

fn to_u64(value: i64, what: &'static str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::corrupt(what, format!("negative value {value}")))
}

fn to_i64(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::InvalidArgument(format!("sequence {value} is past i64::MAX")))
}

impl PgStore {
    /// Audits the evidence of `shard` over the sequences `span` (its end
    /// clipped to the shard's cursor) against the shard's own policy: see
    /// the module documentation of `audit` for what is counted and judged.
    /// Reads in pages of 1,000 range rows; memory is bounded by a page and
    /// the policy.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty span or one past
    /// `i64::MAX`; [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard)
    /// for a shard not registered; [`StoreError::CorruptData`] for a record the database
    /// should have refused; connection and server errors.
    pub async fn audit_shard(
        &self,
        shard: &SchedulerShardId,
        span: Range<u64>,
    ) -> Result<AuditReport, StoreError> {
        self.audit_shard_with(shard, span, AuditOptions::new())
            .await
    }

    /// [`audit_shard`](Self::audit_shard) with `options` (cost mode's
    /// concurrency, [`AuditOptions`]).
    ///
    /// # Errors
    /// As [`audit_shard`](Self::audit_shard); on a cost shard
    /// [`crate::MigrationError::Behind`] before migration V20.
    pub async fn audit_shard_with(
        &self,
        shard: &SchedulerShardId,
        span: Range<u64>,
        options: AuditOptions,
    ) -> Result<AuditReport, StoreError> {
        if span.is_empty() {
            return Err(StoreError::InvalidArgument(format!(
                "the span {}..{} is empty",
                span.start, span.end
            )));
        }
        let stored = self.load_shard(shard).await?;
        let policy = stored.policy();
        let to = span.end.min(stored.next_sequence());
        let from = span.start.min(to);
        let bounds: Vec<_> = policy.starvation_bounds().collect();
        let cycle_length = policy.cycle_length();
        let mut walk = Walk {
            policy,
            indexes: policy.cycle_tenant_indexes(),
            cycle_length: u64::from(cycle_length),
            digest: policy.digest().as_bytes().to_vec(),
            tallies: bounds
                .iter()
                .map(Tally::new)
                .collect::<Result<_, StoreError>>()?,
            by_tenant: HashMap::new(),
            report: AuditReport {
                shard: shard.clone(),
                cycle_digest: policy.cycle_digest().to_string(),
                cycle_length,
                from,
                to,
                audited_slots: 0,
                holes: Vec::new(),
                hole_count: 0,
                tenants: Vec::new(),
                findings: Vec::new(),
                finding_count: 0,
                covered_to: from,
                cost_parameters: policy.fairness().cost().copied(),
            },
            covered_to: from,
        };
        if walk.report.cost_parameters.is_some() {
            for tally in &mut walk.tallies {
                tally.audit.cost = Some(TenantCostAudit::empty());
            }
        }
        // The first stretch of evidence starts at the span's start.
        for tally in &mut walk.tallies {
            tally.gaps.reset(from);
        }
        walk.by_tenant = policy
            .tenants()
            .iter()
            .enumerate()
            .map(|(i, w)| (w.tenant().as_str(), i))
            .collect();
        // Rows starting at or after `next_start` are new; the first page
        // also takes the row that straddles `from`.
        let mut next_start = from;
        let mut first_page = true;
        while next_start < to {
            let page = self
                .audit_page(shard, next_start, to, walk.covered_to, first_page)
                .await?;
            first_page = false;
            walk.page(&page);
            let Some(last) = page.ranges.last() else {
                break;
            };
            next_start = last.0 + 1;
        }
        if to > from && to == stored.next_sequence() {
            for sequence in self.claims_past(shard, to).await? {
                walk.find(AuditFinding::ClaimOutsideRanges { sequence });
            }
        }
        let covered = walk.covered_to;
        walk.report.covered_to = covered;
        walk.hole(covered..to);
        let mut report = walk.finish();
        if report.cost_parameters.is_some() {
            self.judge_costs(&mut report, policy.cycle_tenant_indexes(), options)
                .await?;
        }
        Ok(report)
    }

    /// Claims of `shard` at or past `cursor` (at most 200).
    async fn claims_past(
        &self,
        shard: &SchedulerShardId,
        cursor: u64,
    ) -> Result<Vec<u64>, StoreError> {
        let cursor = to_i64(cursor)?;
        let shard = shard.as_str();
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        SELECT_CLAIMS_PAST_CURSOR,
                        &[(&shard, Type::TEXT), (&cursor, Type::INT8)],
                    )
                    .await?)
            })
            .await?;
        rows.iter()
            .map(|row| to_u64(row.try_get("sequence")?, "claim"))
            .collect()
    }

    /// One page, read in one read-only repeatable-read transaction (a
    /// prune or a Worker beside it cannot make its three reads disagree):
    /// the range rows starting in `[next_start, to)` (and, on the first
    /// page, the one straddling `next_start`), at most [`PAGE_RANGES`] rows
    /// or about [`PAGE_SLOTS`] slots, and the records and claims of the
    /// sequences from `covered` (what earlier pages walked) to the page's
    /// end.
    async fn audit_page(
        &self,
        shard: &SchedulerShardId,
        next_start: u64,
        to: u64,
        covered: u64,
        first_page: bool,
    ) -> Result<Page, StoreError> {
        let (start_arg, to_arg) = (to_i64(next_start)?, to_i64(to)?);
        let shard = shard.as_str();
        let after = self.config().effective_response_timeout();
        self.in_transaction(after, async |db: &Db<'_>| {
            db.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .await?;
            let mut rows = Vec::new();
            if first_page {
                rows.extend(
                    db.query(
                        SELECT_STRADDLING,
                        &[(&shard, Type::TEXT), (&start_arg, Type::INT8)],
                    )
                    .await?,
                );
            }
            rows.extend(
                db.query(
                    SELECT_RANGES,
                    &[
                        (&shard, Type::TEXT),
                        (&start_arg, Type::INT8),
                        (&to_arg, Type::INT8),
                        (&PAGE_RANGES, Type::INT8),
                    ],
                )
                .await?,
            );
            let mut ranges = Vec::with_capacity(rows.len());
            let mut slots = 0_u64;
            for row in &rows {
                let first = to_u64(row.try_get("sequence")?, "reservation range")?;
                let count: i32 = row.try_get("sequence_count")?;
                let count = u64::try_from(count).unwrap_or(0).max(1);
                let slot: i32 = row.try_get("slot")?;
                let digest: Vec<u8> = row.try_get("policy_digest")?;
                let reserved_at: SystemTime = row.try_get("reserved_at")?;
                // The straddling row counts only if it reaches the span.
                if first < next_start && first + count <= next_start {
                    continue;
                }
                ranges.push((first, count, slot, digest, reserved_at));
                slots += count;
                if slots >= PAGE_SLOTS {
                    break;
                }
            }
            // Without rows: the claims of the rest of the span (a hole).
            let end = ranges.iter().map(|r| r.0 + r.1).max().unwrap_or(to);
            let first = ranges.first().map_or(to, |r| r.0);
            let (lo, hi) = (to_i64(covered)?, to_i64(end.min(to))?);
            let records = db
                .query(
                    SELECT_RECORDS,
                    &[
                        (&shard, Type::TEXT),
                        (&to_i64(first)?, Type::INT8),
                        (&to_i64(end)?, Type::INT8),
                    ],
                )
                .await?
                .iter()
                .map(|row| {
                    let first = to_u64(row.try_get("first_sequence")?, "slot outcome record")?;
                    let letters: String = row.try_get("classes")?;
                    let counts: Vec<i32> = row.try_get("counts")?;
                    let outcomes = crate::slot_outcomes::decode_outcomes(&letters, &counts)?;
                    let classes = outcomes
                        .runs()
                        .iter()
                        .flat_map(|(class, n)| {
                            std::iter::repeat_n(*class, usize::try_from(*n).unwrap_or(0))
                        })
                        .collect();
                    Ok((first, classes))
                })
                .collect::<Result<HashMap<u64, Vec<SlotClass>>, StoreError>>()?;
            let mut claims = db
                .query(
                    SELECT_CLAIMS,
                    &[(&shard, Type::TEXT), (&lo, Type::INT8), (&hi, Type::INT8)],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok(Claim {
                        sequence: to_u64(row.try_get("sequence")?, "claim")?,
                        tenant: row.try_get("tenant_id")?,
                        attempt: row.try_get("attempt")?,
                        state: row.try_get("state")?,
                        current: row.try_get::<_, Option<String>>("state")?.is_some(),
                        claimed_at: row.try_get("claimed_at")?,
                        available_at: row.try_get("available_at")?,
                        cost: row
                            .try_get::<_, Option<i64>>("cost")?
                            .map(|cost| to_u64(cost, "claim cost"))
                            .transpose()?,
                        ended: row.try_get("ended")?,
                        finished: row.try_get("finished")?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            claims.sort_by_key(|c| c.sequence);
            Ok(Page {
                ranges,
                records,
                claims,
            })
        })
        .await
        .map_err(|e| e.schema_behind(18, "an audit (the attempts' costs)"))
    }
}

/// One page of evidence: range rows `(first, count, slot, digest,
/// reserved at)`, the records by first sequence, the claims of their
/// sequences.
#[derive(Default)]
struct Page {
    ranges: Vec<(u64, u64, i32, Vec<u8>, SystemTime)>,
    records: HashMap<u64, Vec<SlotClass>>,
    claims: Vec<Claim>,
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
    fn page(&mut self, page: &Page) {
        let claims = &page.claims;
        let mut next_claim = 0;
        for (first, count, slot, digest, reserved_at) in &page.ranges {
            let range = *first..first + count;
            // Rows come in sequence order: one that starts inside evidence
            // already walked overlaps the row before it (the first row may
            // start before the span: only its part in the span counts).
            if range.start < self.covered_to && range.start >= self.report.from {
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
            let clipped = range.start.max(self.covered_to)..range.end.min(self.report.to);
            if clipped.is_empty() {
                continue;
            }
            let covered = self.covered_to;
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
            self.range(
                clipped.clone(),
                range.start,
                *reserved_at,
                classes,
                &in_range,
            );
            self.report.audited_slots += clipped.end - clipped.start;
            self.covered_to = clipped.end;
        }
        // Claims past the page's last row (only a page without rows reads
        // them: the rest of the span is a hole).
        for claim in claims.get(next_claim..).unwrap_or_default() {
            if claim.sequence >= self.covered_to {
                self.hole_claim(claim);
            }
        }
    }

    fn finish(mut self) -> AuditReport {
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

#[cfg(test)]
mod tests;
