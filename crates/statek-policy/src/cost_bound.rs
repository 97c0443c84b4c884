//! [`CostBound`]: how far the cost a tenant is served in cost mode can
//! stray from its entitlement over a window, `B = q·Δ + D·C_max + b_cap`
//! (docs/guarantees.md, "Cost mode: the bound").

use crate::discrepancy::WindowDiscrepancy;
use crate::fairness_unit::CostFairness;
use crate::id::TenantId;

/// The slack of one tenant's served cost in cost mode, in cost units:
/// over a window `W` of consecutive slots, the charged cost `S` of its
/// attempts claimed in `W` is at most `E + B`, and at least `E − B` when
/// none of its credits in `W` is clipped by `b_cap` (its balance is at
/// most `b_cap − q` before each of them), with `E = q·|W|·w/L` and
/// `B = q·Δ + D·C_max + b_cap`, where `Δ` is the tenant's
/// [`WindowDiscrepancy`] and `D` the most attempts of the tenant claimed
/// and not yet charged at once (its concurrency cap; see the proof for
/// `D` without one). Proven in docs/guarantees.md ("Cost mode: the
/// bound"), for the ledger [`crate::CostLedger`] keeps (and the
/// PostgreSQL run queue keeps in the database).
///
/// ```
/// use statek_policy::{CostFairness, FairnessUnit, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
///      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
/// )?
/// .with_fairness(FairnessUnit::Cost(CostFairness::new(4, 40, 40, 80)?));
/// let bounds: Vec<_> = policy.cost_bounds().expect("cost mode").collect();
/// // q·Δ = 4 · 3/4 = 3, b_cap = 80: B = 83 + D·40.
/// assert_eq!(bounds[0].fixed(), 83.0);
/// assert_eq!(bounds[0].slack(16), 83.0 + 16.0 * 40.0);
/// assert_eq!(bounds[0].slack_scaled(16), (3 * 4 + 4 * (80 + 16 * 40)) as u128);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CostBound {
    discrepancy: WindowDiscrepancy,
    cost: CostFairness,
}

impl CostBound {
    pub(crate) fn new(discrepancy: WindowDiscrepancy, cost: CostFairness) -> Self {
        Self { discrepancy, cost }
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        self.discrepancy.tenant()
    }

    /// The tenant's window discrepancy `Δ`, the bound's slot part.
    #[must_use]
    pub fn discrepancy(&self) -> &WindowDiscrepancy {
        &self.discrepancy
    }

    /// The policy's cost parameters.
    #[must_use]
    pub fn cost(&self) -> &CostFairness {
        &self.cost
    }

    /// `q·Δ + b_cap`: the part of `B` that does not grow with `D`.
    #[must_use]
    pub fn fixed(&self) -> f64 {
        self.cost.quantum() as f64 * self.discrepancy.slots() + self.cost.balance_cap() as f64
    }

    /// `B` for `concurrency` = `D`, in cost units.
    #[must_use]
    pub fn slack(&self, concurrency: u32) -> f64 {
        self.slack_scaled(concurrency) as f64 / f64::from(self.discrepancy.cycle_length().max(1))
    }

    /// `B · L`, exact: `q·(Δ·L) + L·(D·C_max + b_cap)`.
    #[must_use]
    pub fn slack_scaled(&self, concurrency: u32) -> u128 {
        let l = u128::from(self.discrepancy.cycle_length());
        u128::from(self.cost.quantum()) * u128::from(self.discrepancy.scaled())
            + l * (u128::from(concurrency) * u128::from(self.cost.max_cost())
                + u128::from(self.cost.balance_cap()))
    }
}

/// The cost bound of one tenant across a rollout's seam, from a cost-mode
/// shard to a cost-mode successor ([`crate::PolicySeam::cost_bounds`]).
/// The ledger carries over the seal (positive balances cut to the new
/// `b_cap`, debts kept), so a window `W` that straddles it, with `W₁` its
/// sequences on the sealed shard and `W₂` those on the successor, obeys
/// the one-shard bound with both parts added up (docs/guarantees.md,
/// "Across a rollout's seam"):
///
/// ```text
/// E − B ≤ S ≤ E + B,   E = q₁·|W₁|·w₁/L₁ + q₂·|W₂|·w₂/L₂,
///                      B = q₁·Δ₁ + q₂·Δ₂ + D·max(C_max₁, C_max₂) + max(b_cap₁, b_cap₂)
/// ```
///
/// the upper side always, the lower side while no credit of the tenant in
/// `W` is clipped and the seal did not cut its balance inside `W`. A
/// tenant absent from one side has no picks there (`w = 0`, `Δ = 0`).
/// Exact in integers scaled by `L₁·L₂` ([`scale`](Self::scale)).
///
/// ```
/// use statek_policy::{CostFairness, FairnessUnit, PolicySeam, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let (a, b) = (TenantId::try_from("tenant-a")?, TenantId::try_from("tenant-b")?);
/// let old = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(a.clone(), 3)?, TenantFairnessWeight::new(b.clone(), 1)?],
/// )?
/// .with_fairness(FairnessUnit::Cost(CostFairness::new(4, 40, 40, 80)?));
/// let new = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v2")?,
///     [TenantFairnessWeight::new(a.clone(), 1)?, TenantFairnessWeight::new(b.clone(), 1)?],
/// )?
/// .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 60, 60, 30)?));
/// let bounds = PolicySeam::new(&old, &new).cost_bounds().expect("both in cost mode");
/// // tenant-a: q₁·Δ₁ = 4·3/4 = 3, q₂·Δ₂ = 2·1/2 = 1, max b_cap = 80: B = 84 + D·60.
/// assert_eq!(bounds[0].slack(2), 84.0 + 2.0 * 60.0);
/// // 8 sequences on primary-v1 and 4 on primary-v2: E = 4·8·3/4 + 2·4·1/2 = 28.
/// assert_eq!(bounds[0].entitled_scaled(8, 4) as f64 / bounds[0].scale() as f64, 28.0);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CostSeamBound {
    tenant: TenantId,
    old: Side,
    new: Side,
}

/// One side of a seam for one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Side {
    cost: CostFairness,
    cycle_length: u32,
    /// Its weight there (0: absent).
    weight: u32,
    /// `Δ·L` there (0: absent).
    scaled: u64,
}

impl Side {
    fn of(cost: CostFairness, cycle_length: u32, bound: Option<&CostBound>) -> Self {
        Self {
            cost,
            cycle_length,
            weight: bound.map_or(0, |b| b.discrepancy().weight()),
            scaled: bound.map_or(0, |b| b.discrepancy().scaled()),
        }
    }
}

impl CostSeamBound {
    pub(crate) fn new(
        tenant: TenantId,
        (old_cost, old_length, old): (CostFairness, u32, Option<&CostBound>),
        (new_cost, new_length, new): (CostFairness, u32, Option<&CostBound>),
    ) -> Self {
        Self {
            tenant,
            old: Side::of(old_cost, old_length, old),
            new: Side::of(new_cost, new_length, new),
        }
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Whether the tenant is in the sealed shard's policy.
    #[must_use]
    pub fn in_old(&self) -> bool {
        self.old.weight > 0
    }

    /// Whether the tenant is in the successor's policy.
    #[must_use]
    pub fn in_new(&self) -> bool {
        self.new.weight > 0
    }

    /// `L₁·L₂`: the scale of [`slack_scaled`](Self::slack_scaled) and
    /// [`entitled_scaled`](Self::entitled_scaled).
    #[must_use]
    pub fn scale(&self) -> u64 {
        u64::from(self.old.cycle_length) * u64::from(self.new.cycle_length)
    }

    /// `B·L₁·L₂` for `concurrency` = `D`, exact.
    #[must_use]
    pub fn slack_scaled(&self, concurrency: u32) -> u128 {
        let (l1, l2) = (
            u128::from(self.old.cycle_length),
            u128::from(self.new.cycle_length),
        );
        let max_cost = self.old.cost.max_cost().max(self.new.cost.max_cost());
        let cap = self.old.cost.balance_cap().max(self.new.cost.balance_cap());
        u128::from(self.old.cost.quantum()) * u128::from(self.old.scaled) * l2
            + u128::from(self.new.cost.quantum()) * u128::from(self.new.scaled) * l1
            + l1 * l2 * (u128::from(concurrency) * u128::from(max_cost) + u128::from(cap))
    }

    /// `B` for `concurrency` = `D`, in cost units.
    #[must_use]
    pub fn slack(&self, concurrency: u32) -> f64 {
        self.slack_scaled(concurrency) as f64 / self.scale().max(1) as f64
    }

    /// `E·L₁·L₂` for a window with `old_sequences` sequences on the
    /// sealed shard and `new_sequences` on the successor, exact.
    #[must_use]
    pub fn entitled_scaled(&self, old_sequences: u64, new_sequences: u64) -> u128 {
        u128::from(self.old.cost.quantum())
            * u128::from(old_sequences)
            * u128::from(self.old.weight)
            * u128::from(self.new.cycle_length)
            + u128::from(self.new.cost.quantum())
                * u128::from(new_sequences)
                * u128::from(self.new.weight)
                * u128::from(self.old.cycle_length)
    }
}
