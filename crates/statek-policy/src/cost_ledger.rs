//! [`CostLedger`]: cost mode's ledger, the rule docs/guarantees.md ("Cost
//! mode: the bound") proves its bound for, as one value an executor keeps
//! in memory (statek-testing's in-memory executor does; the PostgreSQL run
//! queue keeps the same rule in the database, migration V19).

use alloc::collections::BTreeMap;

use crate::fairness_unit::CostFairness;
use crate::id::TenantId;

/// Cost mode's ledger: one balance per tenant, in cost units.
///
/// The rule, slot by slot (docs/guarantees.md, "Cost mode: the bound"):
/// every finished attempt is charged to its tenant once
/// ([`charge`](Self::charge): `min(reported, C_max)`, or the policy's
/// `default_cost` when it reported none); at a slot of tenant `i`, `i` is
/// credited `q` and its balance cut to `b_cap` if above
/// ([`credit`](Self::credit)); if the balance is then negative the slot is
/// a *debt slot*, consumed without a claim. A charge never waits for a
/// slot: charging at the finish is the same as charging at the tenant's
/// next slot, which is when the balance is next read.
///
/// Every balance starts at 0 (no attempt claimed, nothing charged). A
/// tenant no slot maps to any more keeps its balance: debt is never
/// forgiven, and a tenant that comes back has at most `b_cap`.
/// [`reconfigure`](Self::reconfigure) takes new parameters (a rollout
/// to a policy with another `q`, `C_max`, default or `b_cap`): positive
/// balances are cut to the new `b_cap`, debts stay.
///
/// ```
/// use statek_policy::{CostFairness, CostLedger, TenantId};
/// // q = 2, C_max = 10, default 10, b_cap = 4.
/// let mut ledger = CostLedger::new(CostFairness::new(2, 10, 10, 4)?);
/// let a = TenantId::try_from("tenant-a")?;
/// assert_eq!(ledger.credit(&a).balance, 2);
/// assert_eq!(ledger.charge(&a, Some(7)), 7);          // 2 − 7 = −5
/// let slot = ledger.credit(&a);                         // −5 + 2 = −3
/// assert!(slot.is_debt() && !slot.clipped);
/// assert_eq!(ledger.charge(&a, Some(50)), 10);         // C_max
/// assert_eq!(ledger.charge(&a, None), 10);             // default
/// assert_eq!(ledger.balance(&a), -23);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostLedger {
    cost: CostFairness,
    balances: BTreeMap<TenantId, i128>,
}

/// What one credit did: the balance after it, and whether the cap cut it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCredit {
    /// The tenant's balance after the credit (and the cut), in cost units.
    pub balance: i128,
    /// The cap cut the credit: the balance would have exceeded `b_cap`.
    pub clipped: bool,
}

impl SlotCredit {
    /// The slot is a debt slot: the balance is negative after its credit.
    #[must_use]
    pub fn is_debt(&self) -> bool {
        self.balance < 0
    }
}

impl CostLedger {
    /// A ledger with every balance at 0.
    #[must_use]
    pub fn new(cost: CostFairness) -> Self {
        Self {
            cost,
            balances: BTreeMap::new(),
        }
    }

    /// A ledger with the given starting balances (every other tenant at
    /// 0), each cut to `b_cap` if above: for example balances read back
    /// from where an executor keeps them.
    #[must_use]
    pub fn with_balances(
        cost: CostFairness,
        balances: impl IntoIterator<Item = (TenantId, i128)>,
    ) -> Self {
        let cap = i128::from(cost.balance_cap());
        Self {
            cost,
            balances: balances
                .into_iter()
                .map(|(tenant, balance)| (tenant, balance.min(cap)))
                .collect(),
        }
    }

    /// The parameters in force.
    #[must_use]
    pub fn cost(&self) -> &CostFairness {
        &self.cost
    }

    /// Takes `cost` as the parameters from now on; positive balances
    /// above its `b_cap` are cut to it, debts are kept.
    pub fn reconfigure(&mut self, cost: CostFairness) {
        let cap = i128::from(cost.balance_cap());
        for balance in self.balances.values_mut() {
            *balance = (*balance).min(cap);
        }
        self.cost = cost;
    }

    /// The tenant's balance (0 for a tenant never credited or charged).
    #[must_use]
    pub fn balance(&self, tenant: &TenantId) -> i128 {
        self.balances.get(tenant).copied().unwrap_or(0)
    }

    /// The balance of every tenant credited or charged so far, by tenant
    /// id.
    pub fn balances(&self) -> impl Iterator<Item = (&TenantId, i128)> {
        self.balances
            .iter()
            .map(|(tenant, balance)| (tenant, *balance))
    }

    /// What an attempt that reported `reported` (`None`: nothing) is
    /// charged: `min(reported, C_max)`, or `default_cost`.
    #[must_use]
    pub fn charged(&self, reported: Option<u64>) -> u64 {
        self.cost.charge_for(reported)
    }

    /// Charges one finished attempt of `tenant` (call it once per
    /// attempt); returns the amount charged ([`charged`](Self::charged)).
    pub fn charge(&mut self, tenant: &TenantId, reported: Option<u64>) -> u64 {
        let charged = self.charged(reported);
        *self.balances.entry(tenant.clone()).or_insert(0) -= i128::from(charged);
        charged
    }

    /// Credits `tenant` for one of its slots: `q`, the balance then cut to
    /// `b_cap`. The slot is a debt slot if the balance is still negative
    /// ([`SlotCredit::is_debt`]).
    pub fn credit(&mut self, tenant: &TenantId) -> SlotCredit {
        let balance = self.balances.entry(tenant.clone()).or_insert(0);
        let credited = *balance + i128::from(self.cost.quantum());
        let cap = i128::from(self.cost.balance_cap());
        *balance = credited.min(cap);
        SlotCredit {
            balance: *balance,
            clipped: credited > cap,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::try_from(id).unwrap()
    }

    /// q = 5, C_max = 40, default 40, b_cap = 10; one tenant, written out
    /// slot by slot.
    #[test]
    fn balances_follow_the_rule_slot_by_slot() {
        let mut ledger = CostLedger::new(CostFairness::new(5, 40, 40, 10).unwrap());
        let a = tenant("a");
        // 0 + 5 = 5; 5 + 5 = 10; 10 + 5 = 15 → cut to 10 (clipped).
        assert_eq!(
            ledger.credit(&a),
            SlotCredit {
                balance: 5,
                clipped: false
            }
        );
        assert_eq!(
            ledger.credit(&a),
            SlotCredit {
                balance: 10,
                clipped: false
            }
        );
        assert_eq!(
            ledger.credit(&a),
            SlotCredit {
                balance: 10,
                clipped: true
            }
        );
        // A finish reporting 100 is charged C_max = 40: 10 − 40 = −30.
        assert_eq!(ledger.charge(&a, Some(100)), 40);
        assert_eq!(ledger.balance(&a), -30);
        // −25, −20, −15, −10, −5: five debt slots; then 0, not debt.
        for expected in [-25, -20, -15, -10, -5] {
            let slot = ledger.credit(&a);
            assert_eq!((slot.balance, slot.is_debt()), (expected, true));
        }
        let slot = ledger.credit(&a);
        assert_eq!(
            (slot.balance, slot.is_debt(), slot.clipped),
            (0, false, false)
        );
        // An attempt that reported nothing: the default, 40.
        assert_eq!(ledger.charge(&a, None), 40);
        assert_eq!(ledger.balance(&a), -40);
    }

    #[test]
    fn tenants_have_their_own_balances() {
        let mut ledger = CostLedger::new(CostFairness::new(1, 40, 0, 2).unwrap());
        let (a, b) = (tenant("a"), tenant("b"));
        ledger.credit(&a);
        assert_eq!(ledger.charge(&b, Some(3)), 3);
        assert_eq!(ledger.charge(&b, None), 0);
        assert_eq!((ledger.balance(&a), ledger.balance(&b)), (1, -3));
        assert_eq!(ledger.balance(&tenant("c")), 0);
        let mut all: Vec<_> = ledger.balances().map(|(t, b)| (t.to_string(), b)).collect();
        all.sort();
        assert_eq!(all, vec![("a".to_string(), 1), ("b".to_string(), -3)]);
    }

    #[test]
    fn a_new_cap_cuts_credit_and_keeps_debt() {
        let mut ledger = CostLedger::new(CostFairness::new(4, 40, 40, 12).unwrap());
        let (a, b) = (tenant("a"), tenant("b"));
        for _ in 0..3 {
            ledger.credit(&a);
        }
        ledger.charge(&b, Some(30));
        assert_eq!((ledger.balance(&a), ledger.balance(&b)), (12, -30));
        ledger.reconfigure(CostFairness::new(1, 40, 40, 5).unwrap());
        assert_eq!((ledger.balance(&a), ledger.balance(&b)), (5, -30));
        // The new quantum: −30 + 1.
        assert_eq!(ledger.credit(&b).balance, -29);
        assert_eq!(ledger.cost().quantum(), 1);
    }

    #[test]
    fn starting_balances_are_cut_to_the_cap() {
        let cost = CostFairness::new(1, 40, 40, 5).unwrap();
        let ledger = CostLedger::with_balances(cost, [(tenant("a"), 9), (tenant("b"), -7)]);
        assert_eq!(
            (ledger.balance(&tenant("a")), ledger.balance(&tenant("b"))),
            (5, -7)
        );
    }

    #[test]
    fn the_largest_parameters_do_not_overflow() {
        let max = crate::MAX_COST_PARAMETER;
        let mut ledger = CostLedger::new(CostFairness::new(max, max, max, max).unwrap());
        let a = tenant("a");
        for _ in 0..1_000 {
            ledger.charge(&a, Some(u64::MAX));
        }
        assert_eq!(ledger.balance(&a), -1_000 * i128::from(max));
        assert_eq!(ledger.credit(&a).balance, -999 * i128::from(max));
    }
}
