//! [`FairnessUnit`]: what a policy's weights share, slots (the default) or
//! cost ([`CostFairness`], opt-in), and the cost mode's parameters.
//!
//! In slot mode a tenant of weight `w` gets `w` of every `L` slots. In cost
//! mode each of its slots also grants it `quantum` units of credit; an
//! attempt's cost (reported after the run, at most `max_cost`; an attempt
//! that reports none is charged `default_cost`) is debited from it, and a
//! slot whose tenant is in debt is consumed without a claim. Its balance
//! never exceeds `balance_cap`. All four are integers in
//! `0..=`[`MAX_COST_PARAMETER`] (see [`CostFairness::new`] for each one's
//! range), part of the canonical bytes and the digest: changing them is a
//! rollout to a new shard.

use crate::error::PolicyError;

/// The largest value of any cost parameter: 2^40 (1,099,511,627,776)
/// units. A balance then stays far inside `i64` whatever a cycle of at most
/// 4,096 slots credits.
pub const MAX_COST_PARAMETER: u64 = 1 << 40;

/// What a policy's weights share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FairnessUnit {
    /// Slots (scheduling opportunities): the default, and the only unit of
    /// policies before cost mode. Its canonical bytes carry no unit.
    #[default]
    Slots,
    /// Cost reported after each attempt, charged against credit the
    /// tenant's slots grant.
    Cost(CostFairness),
}

impl FairnessUnit {
    /// The unit's name in a policy file: `slots` or `cost`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Slots => "slots",
            Self::Cost(_) => "cost",
        }
    }

    /// The cost parameters, in cost mode.
    #[must_use]
    pub fn cost(&self) -> Option<&CostFairness> {
        match self {
            Self::Slots => None,
            Self::Cost(cost) => Some(cost),
        }
    }
}

/// The parameters of cost mode, all in the policy's cost units (whatever
/// the handlers report: tokens, CPU-milliseconds, cents).
///
/// ```
/// use statek_policy::CostFairness;
/// let cost = CostFairness::new(1, 40, 40, 80)?;
/// assert_eq!((cost.quantum(), cost.max_cost()), (1, 40));
/// assert!(CostFairness::new(0, 40, 40, 80).is_err());
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CostFairness {
    quantum: u64,
    max_cost: u64,
    default_cost: u64,
    balance_cap: u64,
}

impl CostFairness {
    /// Validates the four parameters:
    ///
    /// - `quantum` (q, the credit one slot grants): `1..=2^40`;
    /// - `max_cost` (C_max, the most one attempt is charged; a larger
    ///   reported cost is charged this): `1..=2^40`;
    /// - `default_cost` (charged for an attempt that reports no cost: a
    ///   lease that expired, a cancel, a crash): `0..=max_cost`;
    /// - `balance_cap` (b_cap, the largest positive balance): `0..=2^40`.
    ///
    /// # Errors
    /// [`PolicyError::CostParameterOutOfRange`] naming the first parameter
    /// out of its range.
    pub fn new(
        quantum: u64,
        max_cost: u64,
        default_cost: u64,
        balance_cap: u64,
    ) -> Result<Self, PolicyError> {
        check("quantum", quantum, 1, MAX_COST_PARAMETER)?;
        check("max_cost", max_cost, 1, MAX_COST_PARAMETER)?;
        check("default_cost", default_cost, 0, max_cost)?;
        check("balance_cap", balance_cap, 0, MAX_COST_PARAMETER)?;
        Ok(Self {
            quantum,
            max_cost,
            default_cost,
            balance_cap,
        })
    }

    /// q: the credit one of the tenant's slots grants.
    #[must_use]
    pub fn quantum(&self) -> u64 {
        self.quantum
    }

    /// C_max: the most one attempt is charged.
    #[must_use]
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }

    /// The cost charged for an attempt that reports none.
    #[must_use]
    pub fn default_cost(&self) -> u64 {
        self.default_cost
    }

    /// b_cap: the largest positive balance.
    #[must_use]
    pub fn balance_cap(&self) -> u64 {
        self.balance_cap
    }

    /// What an attempt that reported `reported` (`None`: nothing) is
    /// charged: `min(reported, C_max)`, or the default.
    #[must_use]
    pub fn charge_for(&self, reported: Option<u64>) -> u64 {
        reported.map_or(self.default_cost, |cost| cost.min(self.max_cost))
    }

    /// Whether a report of `reported` exceeds `C_max` (it is charged
    /// `C_max`, so its tenant is served more than it is charged).
    #[must_use]
    pub fn exceeds_max(&self, reported: Option<u64>) -> bool {
        reported.is_some_and(|cost| cost > self.max_cost)
    }
}

fn check(parameter: &'static str, value: u64, min: u64, max: u64) -> Result<(), PolicyError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(PolicyError::CostParameterOutOfRange {
            parameter,
            value,
            min,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(q: u64, c: u64, d: u64, b: u64) -> (&'static str, u64, u64, u64) {
        match CostFairness::new(q, c, d, b) {
            Err(PolicyError::CostParameterOutOfRange {
                parameter,
                value,
                min,
                max,
            }) => (parameter, value, min, max),
            other => panic!("{q} {c} {d} {b}: {other:?}"),
        }
    }

    #[test]
    fn every_parameter_has_its_range() {
        let top = MAX_COST_PARAMETER;
        assert!(CostFairness::new(1, 1, 0, 0).is_ok());
        assert!(CostFairness::new(top, top, top, top).is_ok());
        assert_eq!(refused(0, 40, 40, 80), ("quantum", 0, 1, top));
        assert_eq!(refused(top + 1, 40, 40, 80), ("quantum", top + 1, 1, top));
        assert_eq!(refused(1, 0, 0, 80), ("max_cost", 0, 1, top));
        assert_eq!(refused(1, top + 1, 0, 80), ("max_cost", top + 1, 1, top));
        assert_eq!(refused(1, 40, 41, 80), ("default_cost", 41, 0, 40));
        assert_eq!(
            refused(1, 40, 40, top + 1),
            ("balance_cap", top + 1, 0, top)
        );
        let cost = CostFairness::new(2, 40, 7, 80).unwrap();
        assert_eq!(
            (
                cost.quantum(),
                cost.max_cost(),
                cost.default_cost(),
                cost.balance_cap()
            ),
            (2, 40, 7, 80)
        );
        assert_eq!(FairnessUnit::Cost(cost).cost(), Some(&cost));
        assert_eq!(FairnessUnit::Cost(cost).name(), "cost");
        assert_eq!(FairnessUnit::default(), FairnessUnit::Slots);
        assert_eq!(FairnessUnit::Slots.cost(), None);
    }
}
