//! Cost mode's part of an audit: each tenant's served cost, rebuilt from
//! the claims as the ledger's trigger charged them, judged against both
//! sides of the bound ([`TenantCostAudit`], docs/guarantees.md "Cost
//! mode: the bound"), with the operator's `D` ([`AuditOptions`]).

use std::collections::HashMap;
use std::ops::Range;

use statek_policy::{CostFairness, TenantId};
use tokio_postgres::types::Type;

use super::{to_u64, AuditFinding, AuditReport, TenantCostAudit};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// How [`PgStore::audit_shard_with`] judges what the evidence cannot tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditOptions {
    /// Cost mode: `D`, the most attempts of one tenant claimed and not yet
    /// charged at any moment: at most the sum, over every Worker process
    /// that held attempts of the schedule within one lease period of
    /// another (a crashed one's stay uncharged until rescued; a
    /// predecessor shard's Workers too, for a debt carried over), of its
    /// concurrency plus twice its completion batch. Both sides of the
    /// cost bound are judged with it for every tenant ([`TenantCostAudit`]).
    pub concurrency: Option<u32>,
}

impl AuditOptions {
    /// No concurrency: cost mode's bound is reported, not judged.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges cost mode's bound with `D` = `concurrency`.
    #[must_use]
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }
}

/// The largest `C_max` of the cost shards of `$1`'s schedule.
const SELECT_SCHEDULE_MAX_COST: &str = "
    SELECT max(c.max_cost) AS max_cost FROM statek.shard_costs AS c
    WHERE c.schedule_id = (SELECT s.schedule_id FROM statek.shard_costs AS s
                           WHERE s.shard_id = $1)";

/// Cost mode: how far `$1` credited each tenant and the last sequence
/// through which a credit was cut by `b_cap` (V20).
const SELECT_CREDIT_PROGRESS: &str = "
    SELECT g.tenant_id, g.as_of_sequence, g.clipped_through
    FROM statek.cost_credit_progress AS g
    WHERE g.shard_id = $1";

/// What judging one tenant needs from its shard and the options.
pub(super) struct Context {
    pub(super) params: CostFairness,
    /// `D`, given.
    pub(super) concurrency: Option<u64>,
    /// The largest `C_max` of the schedule's cost shards.
    pub(super) schedule_max_cost: u64,
    /// The span has no hole.
    pub(super) no_holes: bool,
    /// The span's first sequence.
    pub(super) from: u64,
}

/// The picks of tenant `index` in the sequences `span` of a cycle whose
/// slots are `indexes`, and the last of them.
pub(super) fn picks_in(indexes: &[u16], index: usize, span: Range<u64>) -> (u64, Option<u64>) {
    let l = indexes.len() as u64;
    if l == 0 || span.is_empty() {
        return (0, None);
    }
    let mine = |i: &&u16| usize::from(**i) == index;
    let per_cycle = indexes.iter().filter(mine).count() as u64;
    // Picks in `0..t`.
    let before = |t: u64| {
        (t / l) * per_cycle + indexes[..(t % l) as usize].iter().filter(mine).count() as u64
    };
    let count = before(span.end) - before(span.start);
    let last = (count > 0).then(|| {
        // The last pick before `span.end`: at most one cycle back.
        (span.start.max(span.end.saturating_sub(l))..span.end)
            .rev()
            .find(|&s| usize::from(indexes[(s % l) as usize]) == index)
            .unwrap_or(span.start)
    });
    (count, last)
}

impl PgStore {
    /// Cost mode: judges each tenant's served cost against both sides of
    /// the bound with `options`' concurrency ([`TenantCostAudit`]); its
    /// slots in the span come from the cycle (`indexes`).
    pub(super) async fn judge_costs(
        &self,
        report: &mut AuditReport,
        indexes: &[u16],
        options: AuditOptions,
    ) -> Result<(), StoreError> {
        let Some(params) = report.cost_parameters else {
            return Ok(());
        };
        let limits = self.all_tenant_limits().await?;
        let shard = report.shard.as_str();
        let (rows, max_cost) = self
            .with_response_timeout(async |db: &Db<'_>| {
                let rows = db
                    .query(SELECT_CREDIT_PROGRESS, &[(&shard, Type::TEXT)])
                    .await?;
                let max_cost: Option<i64> = db
                    .query_one(SELECT_SCHEDULE_MAX_COST, &[(&shard, Type::TEXT)])
                    .await?
                    .try_get("max_cost")?;
                Ok((rows, max_cost))
            })
            .await
            .map_err(|e| e.schema_behind(20, "the audit of a cost shard"))?;
        let schedule_max_cost = max_cost
            .map(|c| to_u64(c, "max_cost"))
            .transpose()?
            .unwrap_or(params.max_cost());
        let mut progress = HashMap::new();
        for row in &rows {
            let tenant: String = row.try_get("tenant_id")?;
            // -1: nothing credited yet.
            let credited = u64::try_from(row.try_get::<_, i64>("as_of_sequence")?).ok();
            let clipped: Option<i64> = row.try_get("clipped_through")?;
            let clipped = clipped.map(|c| to_u64(c, "clipped credit")).transpose()?;
            progress.insert(tenant, (credited, clipped));
        }
        let context = Context {
            params,
            concurrency: options.concurrency.map(u64::from),
            schedule_max_cost,
            no_holes: report.hole_count == 0,
            from: report.from,
        };
        let span = report.from..report.to;
        let mut found = Vec::new();
        for (index, t) in report.tenants.iter_mut().enumerate() {
            let Some(cost) = t.cost.as_mut() else {
                continue;
            };
            (cost.slots_in_span, cost.last_slot) = picks_in(indexes, index, span.clone());
            cost.entitled = params.quantum() as f64 * t.entitled;
            if let Some((credited, clipped)) = progress.get(t.tenant.as_str()) {
                cost.credited_through = *credited;
                cost.clipped_through = *clipped;
            }
            cost.cap = limits
                .iter()
                .find(|l| l.tenant == t.tenant)
                .and_then(|l| l.limits.max_running());
            found.extend(cost.judge(&t.tenant, &context));
        }
        for finding in found {
            report.add_finding(finding);
        }
        Ok(())
    }
}

impl TenantCostAudit {
    /// Nothing counted or judged yet.
    pub(super) fn empty() -> Self {
        Self {
            charged: 0,
            uncharged: 0,
            ended_without_finish: 0,
            entitled: 0.0,
            cap: None,
            concurrency: None,
            upper: None,
            lower: None,
            slots_in_span: 0,
            clipped_through: None,
            credited_through: None,
            lower_judged: false,
            last_slot: None,
        }
    }

    /// Counts one attempt its slots claimed, as the trigger
    /// `runs_charge_cost` charged it: not yet if it has not `ended`; what
    /// it reported (`cost`, cut to `C_max`, or the default for none) if
    /// its holder `finished` it; else the default.
    pub(super) fn count(
        &mut self,
        params: &CostFairness,
        ended: bool,
        finished: bool,
        cost: Option<u64>,
    ) {
        if !ended {
            self.uncharged += 1;
        } else if finished {
            self.charged = self.charged.saturating_add(params.charge_for(cost));
        } else {
            self.charged = self.charged.saturating_add(params.default_cost());
            self.ended_without_finish += 1;
        }
    }

    /// Judges both sides with `D` = the context's concurrency (nothing
    /// without it): the upper with the shard's own parameters, the lower
    /// with the schedule's largest `C_max` and only when the span has no
    /// hole and the ledger shows no cut credit of it; the findings.
    pub(super) fn judge(&mut self, tenant: &TenantId, context: &Context) -> Vec<AuditFinding> {
        let Some(d) = context.concurrency else {
            return Vec::new();
        };
        let params = &context.params;
        let n = self.slots_in_span;
        let q = u128::from(params.quantum());
        let cap = u128::from(params.balance_cap());
        let mut found = Vec::new();
        let fixed = u128::from(d) * u128::from(params.max_cost()) + cap;
        let upper = if n == 0 {
            0
        } else {
            q * u128::from(n - 1) + fixed
        };
        let upper = u64::try_from(upper).unwrap_or(u64::MAX);
        self.concurrency = Some(d);
        self.upper = Some(upper);
        if self.charged > upper {
            found.push(AuditFinding::CostOverBound {
                tenant: tenant.clone(),
                charged: self.charged,
                upper,
                concurrency: d,
            });
        }
        let fixed =
            u128::from(d) * u128::from(context.schedule_max_cost.max(params.max_cost())) + cap;
        let lower = i128::try_from(q * u128::from(n)).unwrap_or(i128::MAX)
            - i128::try_from(fixed).unwrap_or(i128::MAX);
        self.lower = Some(lower);
        self.lower_judged = context.no_holes && self.lower_judgeable(context.from);
        let served_at_most = self
            .charged
            .saturating_add(self.uncharged.saturating_mul(params.max_cost()));
        if self.lower_judged && i128::from(served_at_most) < lower {
            found.push(AuditFinding::CostUnderBound {
                tenant: tenant.clone(),
                served_at_most,
                lower,
                concurrency: d,
            });
        }
        found
    }

    /// No credit of the tenant's slots in the span (from `from`) was cut,
    /// as far as the ledger shows: every one of them credited, none cut.
    fn lower_judgeable(&self, from: u64) -> bool {
        let credited = match (self.last_slot, self.credited_through) {
            (None, _) => true,
            (Some(last), Some(through)) => through >= last,
            (Some(_), None) => false,
        };
        credited && self.clipped_through.is_none_or(|c| c < from)
    }
}
