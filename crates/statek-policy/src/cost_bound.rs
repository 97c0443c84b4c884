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
