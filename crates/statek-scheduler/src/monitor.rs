//! [`FairnessMonitor`]: what the schedule actually did, per tenant, measured
//! from tick outcomes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use statek_policy::{PolicySeam, SchedulerShardId, TenantId, WeightedFairnessPolicy};
use uuid::Uuid;

use crate::fairness_report::{
    ClaimLag, FairnessReport, GapStats, GapViolation, TenantFairnessRow, TimeLag,
};
pub use crate::monitor_options::{
    MonitorOptions, DEFAULT_MAX_PENDING, DEFAULT_MAX_TRACKED_RUNS, DEFAULT_MAX_VIOLATIONS,
};
use crate::{SchedulerError, TickOutcome};
use statek_core::{ExecutedRun, TenantTickOutcome};

/// Distinct gap lengths counted exactly per tenant; longer-tailed gap
/// distributions share one overflow bucket.
const MAX_DISTINCT_GAPS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Executed,
    ExecutionFailed,
    Idle,
    Contended,
    Limited,
    Debt,
    Cancelled,
}

impl Kind {
    /// Whether the selection shows the tenant had runnable work.
    fn had_work(self) -> bool {
        matches!(
            self,
            Kind::Executed | Kind::ExecutionFailed | Kind::Contended | Kind::Limited | Kind::Debt
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Claim {
    run_id: Uuid,
    available_at: SystemTime,
    claimed_at: SystemTime,
}

/// What is kept of one outcome: no strings, a few dozen bytes.
#[derive(Debug, Clone, Copy)]
struct Observation {
    /// The tenant's row and its index in its shard's policy.
    tenant: Option<(usize, usize)>,
    kind: Kind,
    claim: Option<Claim>,
}

/// One shard of the schedule as the monitor follows it: its sequences are
/// the monitor's sequences `offset..end` (`end` once sealed).
#[derive(Debug, Clone)]
struct Segment {
    shard: SchedulerShardId,
    offset: u64,
    end: Option<u64>,
    policy: WeightedFairnessPolicy,
    /// Row of each tenant of `policy`, by tenant index.
    rows: Vec<usize>,
    /// Starvation bound of each tenant, by tenant index.
    bounds: Vec<u32>,
    /// Seam bound of each tenant into this shard (empty for the first).
    seam: Vec<u64>,
    /// The seam bounds into this shard, whose open gaps the next seal
    /// carries (empty for the first).
    seam_bounds: Vec<statek_policy::SeamBound>,
}

impl Observation {
    /// The observation of `sequence` (of `segment`'s shard), selected for
    /// `tenant`. The tenant's index comes from the policy's one mapping of
    /// the sequence ([`WeightedFairnessPolicy::pick`]); only a tenant the
    /// cycle did not pick there is looked up by id.
    fn new(
        segment: &Segment,
        sequence: u64,
        tenant: &TenantId,
        outcome: &TenantTickOutcome,
    ) -> Self {
        let claim = |run: &ExecutedRun| Claim {
            run_id: run.run_id,
            available_at: run.available_at,
            claimed_at: run.claimed_at,
        };
        let (kind, claim) = match outcome {
            TenantTickOutcome::Executed(run) => (Kind::Executed, Some(claim(run))),
            TenantTickOutcome::ExecutionFailed { run, .. } => {
                (Kind::ExecutionFailed, Some(claim(run)))
            }
            TenantTickOutcome::Idle => (Kind::Idle, None),
            TenantTickOutcome::Contended => (Kind::Contended, None),
            TenantTickOutcome::Limited => (Kind::Limited, None),
            TenantTickOutcome::Debt => (Kind::Debt, None),
            // Cancelled, and any outcome added later: no evidence.
            _ => (Kind::Cancelled, None),
        };
        Self {
            tenant: segment
                .policy
                .pick(sequence)
                .filter(|pick| pick.tenant() == tenant)
                .map(|pick| pick.tenant_index())
                .or_else(|| segment.policy.tenant_index(tenant))
                .and_then(|i| Some((*segment.rows.get(i)?, i))),
            kind,
            claim,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct TimeAccumulator {
    count: u64,
    max: Duration,
    total: Duration,
}

impl TimeAccumulator {
    fn add(&mut self, lag: Duration) {
        self.count += 1;
        self.max = self.max.max(lag);
        self.total = self.total.saturating_add(lag);
    }

    fn stats(&self) -> TimeLag {
        let mean = match u32::try_from(self.count) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.total / n,
            Err(_) => Duration::from_secs_f64(self.total.as_secs_f64() / self.count as f64),
        };
        TimeLag {
            count: self.count,
            max: self.max,
            mean,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct TenantState {
    selections: u64,
    executed: u64,
    execution_failed: u64,
    idle: u64,
    contended: u64,
    limited: u64,
    debt: u64,
    cancelled: u64,
    /// The previous selection: its sequence and whether it had work.
    last: Option<(u64, bool)>,
    gap_count: u64,
    gap_max: u64,
    gap_histogram: BTreeMap<u64, u64>,
    gap_overflow: u64,
    gaps_unmeasured: u64,
    above_bound_without_work: u64,
    violations: u64,
    claim_count: u64,
    claim_max: u64,
    claim_total: u128,
    claim_time: TimeAccumulator,
    service: TimeAccumulator,
}

impl TenantState {
    fn add_gap(&mut self, gap: u64) {
        self.gap_count += 1;
        self.gap_max = self.gap_max.max(gap);
        if let Some(count) = self.gap_histogram.get_mut(&gap) {
            *count += 1;
        } else if self.gap_histogram.len() < MAX_DISTINCT_GAPS {
            self.gap_histogram.insert(gap, 1);
        } else {
            self.gap_overflow += 1;
        }
    }

    /// Nearest-rank percentile, `per_mille` in 1..=1000.
    fn gap_percentile(&self, per_mille: u64) -> Option<u64> {
        if self.gap_count == 0 {
            return None;
        }
        let rank = (self.gap_count * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (&gap, &count) in &self.gap_histogram {
            seen += count;
            if seen >= rank {
                return Some(gap);
            }
        }
        Some(self.gap_max)
    }
}

#[derive(Debug, Clone, Copy)]
struct Runnable {
    /// The tenant's row.
    tenant: Option<usize>,
    cursor: u64,
    at: SystemTime,
}

/// Measures, per tenant, what a shard's schedule actually did: selections,
/// selection gaps, claim and service lag, outcome counts, and every gap
/// above the tenant's starvation bound while the tenant had work.
///
/// Feed it every [`TickOutcome`] of the shard, from any number of replicas
/// and in any order ([`observe`](Self::observe)), or the same facts from a
/// custom pipeline ([`observe_parts`](Self::observe_parts)). It buffers
/// outcomes that arrive ahead of the first unseen sequence and processes
/// sequences strictly in order below a contiguous *watermark*, so the
/// report does not depend on arrival order. It is a plain value (`&mut
/// self`): share it behind a `Mutex` between tasks.
///
/// **Gaps.** The gap between two consecutive selections of a tenant at
/// sequences `p < s` is `s - p` reservations (counting the selecting one):
/// the quantity the tenant's
/// [`starvation bound`](statek_policy::TenantStarvationBound::maximum_reservations_until_selection)
/// limits. A gap spanning a missing sequence is not measured.
///
/// **Had work the whole time.** A gap `p → s` above the bound is reported
/// as a [`GapViolation`] only when neither end was `Idle` or `Cancelled`,
/// i.e. both selections were `Executed`, `ExecutionFailed`, `Contended` or
/// `Limited` or `Debt` (a limited or indebted tenant had claimable runs:
/// its slot reached it).
/// The tenant has no selection strictly between `p` and `s`, so this is
/// exactly "no selection of the tenant from `p` to `s`, both included, was
/// idle": it showed claimable work at `p` (it claimed a run or found one
/// locked) and again at `s`. `Cancelled` (shutdown) is no evidence either
/// way and so does not count as work. The monitor cannot see the queue
/// between selections: a tenant that ran its last run at `p` and received
/// a new one just before `s` also counts as having had work. Gaps above
/// the bound with an idle or cancelled end are only counted
/// ([`GapStats::above_bound_without_work`]). On a healthy shard no gap
/// exceeds the bound at all; a violation means the tenant's slots went
/// elsewhere (another policy or shard id behind the same queue, or a
/// pipeline that routes slots wrongly).
///
/// **Claim lag.** Call [`record_runnable`](Self::record_runnable) when a
/// run becomes runnable, with the shard's *cursor* then (its next
/// sequence, e.g. from `PgStore::next_sequence`); the first claim of the
/// run yields its lag in reservations and in time. **Service lag** needs no
/// record: every claim yields `claimed_at - available_at` from its
/// [`ExecutedRun`].
///
/// **Memory bound.** At most `max_pending` buffered outcomes (about 80
/// bytes each), `max_tracked_runs` runnable records (about 60 bytes each,
/// plus twice as many 16-byte ids in an eviction queue),
/// `max_violations` kept violations, and per tenant a fixed-size row with
/// at most 64 histogram entries; see [`MonitorOptions`]. Nothing grows
/// with the number of sequences observed.
///
/// **Cost.** An outcome arriving in order is processed at once: a tenant
/// lookup (O(log tenants)), a few counter updates and, for a claim, one
/// hash lookup; one arriving ahead of the watermark costs an
/// O(log max_pending) insert. Processing allocates only for a new gap
/// length or a violation.
///
/// ```
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// use statek_scheduler::{FairnessMonitor, TenantTickOutcome};
///
/// let a = TenantId::try_from("tenant-a")?;
/// let b = TenantId::try_from("tenant-b")?;
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(a.clone(), 3)?, TenantFairnessWeight::new(b.clone(), 1)?],
/// )?;
/// let mut monitor = FairnessMonitor::new(&policy);
/// // Outcomes of sequences 0..8 arriving out of order (cycle a a b a).
/// for sequence in [3, 0, 7, 1, 2, 6, 5, 4] {
///     let tenant = policy.pick(sequence).expect("a compiled cycle").tenant();
///     monitor.observe_parts(sequence, tenant, &TenantTickOutcome::Contended);
/// }
/// let report = monitor.report();
/// assert_eq!(report.watermark, 8);
/// assert_eq!(report.tenant(&a).map(|row| row.gaps.max), Some(2));
/// assert_eq!(report.tenant(&b).map(|row| row.gaps.max), Some(4));
/// assert!(report.is_fair());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FairnessMonitor {
    /// The shards followed, oldest first (one until a rollout).
    segments: Vec<Segment>,
    /// Tenant, weight and bound of each row, as in the newest shard that
    /// schedules the tenant.
    rows: Vec<(TenantId, u32, u32)>,
    options: MonitorOptions,
    watermark: u64,
    pending: BTreeMap<u64, Observation>,
    /// The highest sequence given up as missing, if any.
    last_missing: Option<u64>,
    observed: u64,
    missing: u64,
    late: u64,
    unknown_tenant: u64,
    unknown_shard: u64,
    isolation_violations: u64,
    tenants: Vec<TenantState>,
    runnable: HashMap<Uuid, Runnable>,
    /// Insertion order of `runnable`, with stale ids removed lazily.
    runnable_order: VecDeque<Uuid>,
    runnable_evicted: u64,
    violations: Vec<GapViolation>,
    violations_dropped: u64,
}

impl FairnessMonitor {
    /// A monitor for `policy`'s shard from sequence 0, with default limits.
    pub fn new(policy: &WeightedFairnessPolicy) -> Self {
        Self::with_options(policy, 0, MonitorOptions::default())
    }

    /// A monitor whose first expected sequence is `first_sequence` (e.g.
    /// the shard's next sequence when monitoring starts mid-stream);
    /// outcomes below it are counted as [`late`](FairnessReport::late).
    pub fn with_options(
        policy: &WeightedFairnessPolicy,
        first_sequence: u64,
        options: MonitorOptions,
    ) -> Self {
        let rows: Vec<(TenantId, u32, u32)> = policy
            .starvation_bounds()
            .map(|b| {
                (
                    b.tenant().clone(),
                    b.weight(),
                    b.maximum_reservations_until_selection(),
                )
            })
            .collect();
        let segment = Segment {
            shard: policy.shard_id().clone(),
            offset: 0,
            end: None,
            policy: policy.clone(),
            rows: (0..rows.len()).collect(),
            bounds: rows.iter().map(|(_, _, bound)| *bound).collect(),
            seam: Vec::new(),
            seam_bounds: Vec::new(),
        };
        Self {
            segments: vec![segment],
            tenants: vec![TenantState::default(); rows.len()],
            rows,
            options,
            watermark: first_sequence,
            pending: BTreeMap::new(),
            last_missing: None,
            observed: 0,
            missing: 0,
            late: 0,
            unknown_tenant: 0,
            unknown_shard: 0,
            isolation_violations: 0,
            runnable: HashMap::new(),
            runnable_order: VecDeque::new(),
            runnable_evicted: 0,
            violations: Vec::new(),
            violations_dropped: 0,
        }
    }

    /// The first sequence not processed yet: every sequence below it is in
    /// the report (observed or missing).
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// Follows a rollout: the newest shard the monitor follows was sealed
    /// at `sealed_at_sequence` (`N`) and `successor` goes on from its own
    /// sequence 0, which the monitor numbers `offset + N` (sequences of
    /// the first shard keep their numbers; later shards follow on, so the
    /// watermark, gaps and violations count across the seam in one
    /// numbering). From here on a tenant's gap from its last pick in the
    /// sealed shard to its first in `successor` is judged against its
    /// exact seam bound ([`PolicySeam::at_carrying`]); gaps inside a shard against
    /// that shard's starvation bound; a gap spanning a whole shard (a
    /// tenant absent from it) is not measured. Tenants new in `successor`
    /// get rows of their own; rows of tenants that left stay.
    ///
    /// Call it before feeding the successor's outcomes (they are counted
    /// as [`unknown_shard`](FairnessReport::unknown_shard) until then), as
    /// soon as the seal is known (`PgStore::load_seam`, or the scheduler's
    /// log of following the rollout).
    ///
    /// # Errors
    /// [`SchedulerError::InvalidOption`] when `successor` is a shard the
    /// monitor follows already, or an outcome of the sealed shard at or
    /// after `N` was already fed (the seal cannot be there).
    pub fn follow_rollout(
        &mut self,
        successor: &WeightedFairnessPolicy,
        sealed_at_sequence: u64,
    ) -> Result<(), SchedulerError> {
        if self
            .segments
            .iter()
            .any(|s| &s.shard == successor.shard_id())
        {
            return Err(SchedulerError::InvalidOption(format!(
                "the monitor already follows shard {}",
                successor.shard_id()
            )));
        }
        let Some(last) = self.segments.last() else {
            return Err(SchedulerError::InvalidOption(
                "the monitor follows no shard".into(),
            ));
        };
        let end = last.offset.checked_add(sealed_at_sequence).ok_or_else(|| {
            SchedulerError::InvalidOption(format!("seal at {sealed_at_sequence} overflows"))
        })?;
        let beyond = self.pending.range(end..).next().map(|(&s, _)| s);
        if let Some(seen) = beyond.or_else(|| (self.watermark > end).then(|| self.watermark - 1)) {
            return Err(SchedulerError::InvalidOption(format!(
                "shard {} cannot be sealed at {sealed_at_sequence}: its sequence {} was observed",
                last.shard,
                seen - last.offset
            )));
        }
        // A tenant the sealed shard never picked is counted from its last
        // pick before that shard (the open gap of the seam into it).
        let seam = PolicySeam::new(&last.policy, successor).at_carrying(sealed_at_sequence, |t| {
            last.seam_bounds
                .iter()
                .find(|b| b.tenant() == t)
                .map(statek_policy::SeamBound::open_gap_at_successor_start)
        });
        let mut rows = Vec::with_capacity(successor.tenants().len());
        let mut bounds = Vec::with_capacity(successor.tenants().len());
        for bound in successor.starvation_bounds() {
            let entry = (
                bound.tenant().clone(),
                bound.weight(),
                bound.maximum_reservations_until_selection(),
            );
            let row = match self.rows.iter().position(|(t, _, _)| t == bound.tenant()) {
                Some(row) => {
                    self.rows[row] = entry;
                    row
                }
                None => {
                    self.rows.push(entry);
                    self.tenants.push(TenantState::default());
                    self.rows.len() - 1
                }
            };
            rows.push(row);
            bounds.push(bound.maximum_reservations_until_selection());
        }
        if let Some(last) = self.segments.last_mut() {
            last.end = Some(end);
        }
        self.segments.push(Segment {
            shard: successor.shard_id().clone(),
            offset: end,
            end: None,
            policy: successor.clone(),
            rows,
            bounds,
            seam: seam.iter().map(|b| b.reservations_across_seam()).collect(),
            seam_bounds: seam,
        });
        Ok(())
    }

    /// Feeds one tick outcome (of any shard the monitor follows).
    pub fn observe(&mut self, outcome: &TickOutcome) {
        self.observe_on(
            outcome.reservation().shard(),
            outcome.reservation().sequence(),
            outcome.tenant(),
            outcome.tenant_outcome(),
        );
    }

    /// Feeds one outcome given as its parts: the reservation's sequence in
    /// the monitor's first shard, the tenant its slot selected, and what
    /// the executor did. After a rollout use
    /// [`observe_on`](Self::observe_on).
    pub fn observe_parts(&mut self, sequence: u64, tenant: &TenantId, outcome: &TenantTickOutcome) {
        if let Some(first) = self.segments.first().map(|s| s.shard.clone()) {
            self.observe_on(&first, sequence, tenant, outcome);
        }
    }

    /// Feeds one outcome of `shard` (the monitor's first shard or one it
    /// follows, see [`follow_rollout`](Self::follow_rollout)) given as its
    /// parts: the reservation's sequence in `shard`, the tenant its slot
    /// selected, and what the executor did. An outcome of another shard,
    /// or of a sealed shard at or after its seal, is only counted
    /// ([`FairnessReport::unknown_shard`]).
    pub fn observe_on(
        &mut self,
        shard: &SchedulerShardId,
        sequence: u64,
        tenant: &TenantId,
        outcome: &TenantTickOutcome,
    ) {
        let Some(segment) = self.segments.iter().find(|s| &s.shard == shard) else {
            self.unknown_shard += 1;
            return;
        };
        let Some(global) = segment
            .offset
            .checked_add(sequence)
            .filter(|g| segment.end.is_none_or(|end| *g < end))
        else {
            self.unknown_shard += 1;
            return;
        };
        let observation = Observation::new(segment, sequence, tenant, outcome);
        let sequence = global;
        if sequence < self.watermark || self.pending.contains_key(&sequence) {
            self.late += 1;
            return;
        }
        if sequence == self.watermark {
            self.process(sequence, observation);
            self.watermark += 1;
            self.drain();
            return;
        }
        self.pending.insert(sequence, observation);
        if self.pending.len() > self.options.max_pending {
            self.skip_to_first_pending();
            self.drain();
        }
    }

    /// Tells the monitor that run `run_id` of `tenant` became runnable
    /// (enqueued available, or made available by a delay) when the shard's
    /// next sequence was `cursor`, at time `at` (database time, to compare
    /// with claim times). Its first claim then yields its claim lag. A
    /// second record for the same run replaces the first. `cursor` is of
    /// the newest shard the monitor follows.
    pub fn record_runnable(
        &mut self,
        run_id: Uuid,
        tenant: &TenantId,
        cursor: u64,
        at: SystemTime,
    ) {
        let offset = self.segments.last().map_or(0, |s| s.offset);
        let record = Runnable {
            tenant: self.rows.iter().position(|(t, _, _)| t == tenant),
            cursor: offset.saturating_add(cursor),
            at,
        };
        if self.runnable.insert(run_id, record).is_none() {
            self.runnable_order.push_back(run_id);
        }
        while self.runnable.len() > self.options.max_tracked_runs {
            let Some(oldest) = self.runnable_order.pop_front() else {
                break;
            };
            if self.runnable.remove(&oldest).is_some() {
                self.runnable_evicted += 1;
            }
        }
        if self.runnable_order.len() > 2 * self.options.max_tracked_runs {
            let runnable = &self.runnable;
            self.runnable_order.retain(|id| runnable.contains_key(id));
        }
    }

    /// Gives up on every unseen sequence below the highest buffered one and
    /// processes all buffered outcomes: call it when the shard stopped (all
    /// outcomes fed) to get a complete report. The given-up sequences count
    /// as [`missing`](FairnessReport::missing).
    pub fn flush(&mut self) {
        while !self.pending.is_empty() {
            self.skip_to_first_pending();
            self.drain();
        }
    }

    /// A snapshot of everything processed below the watermark.
    pub fn report(&self) -> FairnessReport {
        let tenants = self
            .rows
            .iter()
            .zip(&self.tenants)
            .map(|((tenant, weight, bound), state)| TenantFairnessRow {
                tenant: tenant.clone(),
                weight: *weight,
                bound: *bound,
                selections: state.selections,
                executed: state.executed,
                execution_failed: state.execution_failed,
                idle: state.idle,
                contended: state.contended,
                limited: state.limited,
                debt: state.debt,
                cancelled: state.cancelled,
                gaps: GapStats {
                    count: state.gap_count,
                    max: state.gap_max,
                    p50: state.gap_percentile(500),
                    p99: state.gap_percentile(990),
                    histogram: state.gap_histogram.iter().map(|(&g, &c)| (g, c)).collect(),
                    overflow: state.gap_overflow,
                    unmeasured: state.gaps_unmeasured,
                    above_bound_without_work: state.above_bound_without_work,
                    violations: state.violations,
                },
                claim_lag: ClaimLag {
                    count: state.claim_count,
                    max_reservations: state.claim_max,
                    mean_reservations: if state.claim_count == 0 {
                        0
                    } else {
                        u64::try_from(state.claim_total / u128::from(state.claim_count))
                            .unwrap_or(u64::MAX)
                    },
                    time: state.claim_time.stats(),
                },
                service_lag: state.service.stats(),
            })
            .collect();
        FairnessReport {
            watermark: self.watermark,
            observed: self.observed,
            missing: self.missing,
            pending: self.pending.len(),
            late: self.late,
            unknown_tenant: self.unknown_tenant,
            unknown_shard: self.unknown_shard,
            isolation_violations: self.isolation_violations,
            runnable_evicted: self.runnable_evicted,
            tenants,
            violations: self.violations.clone(),
            violations_dropped: self.violations_dropped,
        }
    }

    /// Processes buffered outcomes while they continue the watermark.
    fn drain(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() != self.watermark {
                break;
            }
            let observation = entry.remove();
            self.process(self.watermark, observation);
            self.watermark += 1;
        }
    }

    /// Gives up on the unseen sequences below the first buffered one.
    fn skip_to_first_pending(&mut self) {
        if let Some((&first, _)) = self.pending.first_key_value() {
            if first > self.watermark {
                self.missing += first - self.watermark;
                self.last_missing = Some(first - 1);
                self.watermark = first;
            }
        }
    }

    fn process(&mut self, sequence: u64, observation: Observation) {
        self.observed += 1;
        let Some((index, in_policy)) = observation.tenant else {
            self.unknown_tenant += 1;
            return;
        };
        let position = self
            .segments
            .iter()
            .rposition(|s| s.offset <= sequence)
            .unwrap_or(0);
        let Some(segment) = self.segments.get(position) else {
            return;
        };
        let previous_offset = position
            .checked_sub(1)
            .and_then(|p| self.segments.get(p))
            .map(|s| s.offset);
        let (Some(&bound), Some((tenant, _, _)), Some(state)) = (
            segment.bounds.get(in_policy),
            self.rows.get(index),
            self.tenants.get_mut(index),
        ) else {
            return;
        };
        let seam_bound = segment.seam.get(in_policy).copied();
        let segment_offset = segment.offset;
        let last_missing = self.last_missing;
        state.selections += 1;
        *match observation.kind {
            Kind::Executed => &mut state.executed,
            Kind::ExecutionFailed => &mut state.execution_failed,
            Kind::Idle => &mut state.idle,
            Kind::Contended => &mut state.contended,
            Kind::Limited => &mut state.limited,
            Kind::Debt => &mut state.debt,
            Kind::Cancelled => &mut state.cancelled,
        } += 1;
        let had_work = observation.kind.had_work();
        let mut violation = None;
        if let Some((previous, previous_had_work)) = state.last {
            // Inside the shard: its starvation bound; across the seam
            // from the shard before: the exact seam bound; across a whole
            // shard: not measured.
            let judged = if previous >= segment_offset {
                Some(u64::from(bound))
            } else if previous_offset.is_some_and(|o| previous >= o) {
                seam_bound
            } else {
                None
            };
            if last_missing.is_some_and(|missing| missing > previous) || judged.is_none() {
                state.gaps_unmeasured += 1;
            } else if let Some(judged) = judged {
                let gap = sequence - previous;
                state.add_gap(gap);
                if gap > judged {
                    if previous_had_work && had_work {
                        state.violations += 1;
                        violation = Some(GapViolation {
                            tenant: tenant.clone(),
                            from_sequence: previous,
                            to_sequence: sequence,
                            gap,
                            bound: u32::try_from(judged).unwrap_or(u32::MAX),
                        });
                    } else {
                        state.above_bound_without_work += 1;
                    }
                }
            }
        }
        state.last = Some((sequence, had_work));
        if let Some(claim) = observation.claim {
            state.service.add(
                claim
                    .claimed_at
                    .duration_since(claim.available_at)
                    .unwrap_or_default(),
            );
            if let Some(runnable) = self.runnable.remove(&claim.run_id) {
                if runnable.tenant != Some(index) {
                    self.isolation_violations += 1;
                }
                let lag = (sequence + 1).saturating_sub(runnable.cursor);
                state.claim_count += 1;
                state.claim_max = state.claim_max.max(lag);
                state.claim_total += u128::from(lag);
                state.claim_time.add(
                    claim
                        .claimed_at
                        .duration_since(runnable.at)
                        .unwrap_or_default(),
                );
            }
        }
        if let Some(violation) = violation {
            if self.violations.len() < self.options.max_violations {
                self.violations.push(violation);
            } else {
                self.violations_dropped += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
