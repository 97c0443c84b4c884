//! [`SwrrProperties`]: the properties docs/guarantees.md states about
//! `swrr-v1` (proven, observed or refuted), checked on one cycle.

use alloc::vec;

use crate::measure::measure_bounds;
use crate::ratio::{ideal_bound, BoundRatio};

/// The largest lag of one cycle: how far a tenant fell behind its
/// proportional share `t · w / L` before a pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// How far behind, in units of `1 / L` slots.
    pub behind: i64,
    /// The tenant index.
    pub tenant: usize,
    /// The slot before which it was measured (slots `0..slot` passed).
    pub slot: u32,
    /// The tenant's picks in slots `0..slot`.
    pub picks_before: u32,
}

/// What one cycle shows about the `swrr-v1` properties (any cycle can be
/// checked; the report checks `swrr-v1`'s).
///
/// Fractions of a slot are kept in units of `1 / L` slots, so every
/// comparison is exact.
///
/// ```
/// use statek_policy::analysis::SwrrProperties;
/// // The smallest lag of a whole slot: a, b, c, d of weight 1, e, f of 4;
/// // swrr-v1 gives e f a b e f c d e f e f, and f is 1 slot behind after 9.
/// let cycle = [4, 5, 0, 1, 4, 5, 2, 3, 4, 5, 4, 5];
/// let facts = SwrrProperties::of(&[1, 1, 1, 1, 4, 4], &cycle);
/// assert!(facts.counts_exact && facts.over_service_within_bound());
/// assert!(facts.lag_of_a_slot());
/// assert_eq!((facts.largest_lag.tenant, facts.largest_lag.slot), (5, 9));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SwrrProperties {
    /// The number of tenants `k`.
    pub tenants: usize,
    /// The cycle length `L`.
    pub length: u32,
    /// Every tenant picked exactly `weight` times.
    pub counts_exact: bool,
    /// The largest over-service after a pick, `L·picks − (t + 1)·w`, in
    /// units of `1 / L` slots.
    pub largest_over_service: i64,
    /// The largest lag before a pick.
    pub largest_lag: Lag,
    /// The largest ratio of bound to `ceil(L / w)`.
    pub largest_ratio: BoundRatio,
    /// Tenants whose bound is at least `2 · ceil(L / w)`.
    pub tenants_at_twice_ideal: usize,
    /// The largest `bound · w` over the tenants: the largest gap as a
    /// multiple of `L / w` is this divided by `L`.
    pub largest_gap_times_weight: u64,
    /// The first tenant (index, bound) whose bound is at least `2 · L / w`.
    pub gap_of_twice_share: Option<(usize, u32)>,
}

impl SwrrProperties {
    /// Checks the cycle `slots` (tenant index per slot) of `weights` (by
    /// tenant index, summing to `slots.len()`).
    #[must_use]
    pub fn of(weights: &[u32], slots: &[u16]) -> Self {
        let length = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        let total = i64::from(length);
        let mut counts = vec![0_u32; weights.len()];
        let mut lag = Lag {
            behind: i64::MIN,
            ..Lag::default()
        };
        let mut over_service = i64::MIN;
        for (slot, &tenant) in (0_u32..).zip(slots) {
            let index = usize::from(tenant);
            let (Some(&weight), Some(count)) = (weights.get(index), counts.get_mut(index)) else {
                continue;
            };
            let behind = i64::from(slot) * i64::from(weight) - total * i64::from(*count);
            if behind > lag.behind {
                lag = Lag {
                    behind,
                    tenant: index,
                    slot,
                    picks_before: *count,
                };
            }
            *count += 1;
            over_service = over_service
                .max(total * i64::from(*count) - (i64::from(slot) + 1) * i64::from(weight));
        }
        let counts_exact = counts == weights;
        let bounds = measure_bounds(weights.len(), slots, length);
        let mut largest_ratio = BoundRatio::new(0, 1);
        let mut tenants_at_twice_ideal = 0;
        let mut largest_gap_times_weight = 0_u64;
        let mut gap_of_twice_share = None;
        for (index, (&weight, &bound)) in weights.iter().zip(&bounds).enumerate() {
            let ideal = ideal_bound(length, weight);
            let ratio = BoundRatio::new(bound, ideal);
            if largest_ratio.is_below(ratio) {
                largest_ratio = ratio;
            }
            if u64::from(bound) >= 2 * u64::from(ideal) {
                tenants_at_twice_ideal += 1;
            }
            let gap_times_weight = u64::from(bound) * u64::from(weight);
            largest_gap_times_weight = largest_gap_times_weight.max(gap_times_weight);
            if gap_times_weight >= 2 * u64::from(length) && gap_of_twice_share.is_none() {
                gap_of_twice_share = Some((index, bound));
            }
        }
        Self {
            tenants: weights.len(),
            length,
            counts_exact,
            largest_over_service: over_service,
            largest_lag: lag,
            largest_ratio,
            tenants_at_twice_ideal,
            largest_gap_times_weight,
            gap_of_twice_share,
        }
    }

    /// Proven property 3: no tenant is ever `1 − 1/k` slots or more ahead
    /// of its share (`k · over ≤ (k − 1) · L`).
    #[must_use]
    pub fn over_service_within_bound(&self) -> bool {
        let k = i64::try_from(self.tenants).unwrap_or(i64::MAX);
        k.saturating_mul(self.largest_over_service)
            <= (k - 1).saturating_mul(i64::from(self.length))
    }

    /// Whether some tenant fell a whole slot or more behind its share.
    #[must_use]
    pub fn lag_of_a_slot(&self) -> bool {
        self.largest_lag.behind >= i64::from(self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swrr::swrr;

    fn check(weights: &[u32], lag: (usize, u32, u32), whole_slot: bool, ratio: (u32, u32)) {
        let length = weights.iter().sum();
        let facts = SwrrProperties::of(weights, &swrr(weights, length));
        assert!(facts.counts_exact, "{weights:?}");
        assert!(facts.over_service_within_bound(), "{weights:?}");
        let got = facts.largest_lag;
        assert_eq!((got.tenant, got.slot, got.picks_before), lag, "{weights:?}");
        assert_eq!(facts.lag_of_a_slot(), whole_slot, "{weights:?}");
        assert_eq!(
            facts.largest_ratio,
            BoundRatio::new(ratio.0, ratio.1),
            "{weights:?}"
        );
    }

    #[test]
    fn known_cycles() {
        check(&[3, 1], (1, 2, 0), false, (2, 2));
        check(&[5, 2, 1], (2, 4, 0), false, (5, 4));
        check(&[1, 1, 1, 1, 4, 4], (5, 9, 2), true, (4, 3));
        // The lockstep shape: the weight-2 tenant waits 1,023 of 1,024.
        let mut lockstep = vec![1_u32; 1022];
        lockstep.insert(0, 2);
        let facts = SwrrProperties::of(&lockstep, &swrr(&lockstep, 1024));
        assert_eq!(facts.largest_ratio, BoundRatio::new(1023, 512));
        assert_eq!(facts.gap_of_twice_share, None);
        assert_eq!(facts.largest_gap_times_weight, 2046);
    }

    #[test]
    fn a_broken_cycle_fails_the_checks() {
        // Tenant 0 of weight 2 picked three times: counts and over-service
        // both fail, so the checks can fail.
        let facts = SwrrProperties::of(&[2, 1], &[0, 0, 0]);
        assert!(!facts.counts_exact);
        assert!(!facts.over_service_within_bound());
    }
}
