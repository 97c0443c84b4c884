//! [`BoundRatio`]: a tenant's measured bound next to its ideal
//! `ceil(L / w)`, and a cycle's largest ratio over its tenants: the measure
//! `min-gap-v1` and `min-gap-v2` minimise and the bounds report compares.

use core::cmp::Ordering;

use crate::measure::{check_counts, measure_bounds};
use crate::weight::TenantFairnessWeight;

/// A tenant's measured bound next to the ideal `ceil(L / w)`, compared as
/// the fraction `bound / ideal` with integer cross-multiplication (so
/// `6/4` and `3/2` compare equal).
///
/// ```
/// use statek_policy::analysis::BoundRatio;
/// let ratio = BoundRatio::new(6, 4);
/// assert!(BoundRatio::new(4, 3).is_below(ratio));
/// assert_eq!(ratio.cmp_value(&BoundRatio::new(3, 2)), core::cmp::Ordering::Equal);
/// assert_eq!(ratio.excess(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BoundRatio {
    /// The measured bound (largest circular gap), in slots.
    pub(crate) bound: u32,
    /// `ceil(L / w)`: the smallest bound any cycle can give the tenant.
    pub(crate) ideal: u32,
}

impl BoundRatio {
    /// The ratio `bound / ideal`; an ideal of 0 (never measured) counts as 1.
    #[must_use]
    pub const fn new(bound: u32, ideal: u32) -> Self {
        Self {
            bound,
            ideal: if ideal == 0 { 1 } else { ideal },
        }
    }

    /// The measured bound, in slots.
    #[must_use]
    pub const fn bound(&self) -> u32 {
        self.bound
    }

    /// The ideal `ceil(L / w)`, in slots.
    #[must_use]
    pub const fn ideal(&self) -> u32 {
        self.ideal
    }

    /// The additive excess `bound − ideal` in slots (0 when at or below).
    #[must_use]
    pub const fn excess(&self) -> u32 {
        self.bound.saturating_sub(self.ideal)
    }

    /// Whether `self` is strictly smaller than `other` as a fraction.
    #[must_use]
    pub fn is_below(self, other: BoundRatio) -> bool {
        self.cmp_value(&other) == Ordering::Less
    }

    /// Compares the two fractions by value.
    #[must_use]
    pub fn cmp_value(&self, other: &BoundRatio) -> Ordering {
        (u64::from(self.bound) * u64::from(other.ideal))
            .cmp(&(u64::from(other.bound) * u64::from(self.ideal)))
    }

    /// Whether the ratio is 1 or below, which no cycle can improve on.
    #[must_use]
    pub fn is_ideal(self) -> bool {
        self.bound <= self.ideal
    }

    /// The ratio as a float, for display only (comparisons use
    /// [`cmp_value`](Self::cmp_value)).
    #[must_use]
    pub fn to_f64(self) -> f64 {
        f64::from(self.bound) / f64::from(self.ideal)
    }
}

/// `ceil(length / weight)`, the ideal bound of a tenant of `weight`; a
/// weight of 0 (never built) counts as 1.
#[must_use]
pub(crate) fn ideal_bound(length: u32, weight: u32) -> u32 {
    length.div_ceil(weight.max(1))
}

/// The largest ratio of measured bound to `ceil(L / w)` over all tenants of
/// the cycle `slots` (the first such tenant in index order on a tie), or
/// `None` if `slots` does not pick every tenant exactly `weight` times.
pub(crate) fn largest_ratio(
    tenants: &[TenantFairnessWeight],
    slots: &[u16],
    length: u32,
) -> Option<BoundRatio> {
    check_counts(tenants, slots).ok()?;
    let bounds = measure_bounds(tenants.len(), slots, length);
    largest_of(
        tenants.iter().map(TenantFairnessWeight::weight),
        &bounds,
        length,
    )
}

/// The largest ratio of `bounds` (by tenant index) against the ideals of
/// `weights`; `None` without tenants.
pub(crate) fn largest_of(
    weights: impl IntoIterator<Item = u32>,
    bounds: &[u32],
    length: u32,
) -> Option<BoundRatio> {
    let mut largest: Option<BoundRatio> = None;
    for (weight, &bound) in weights.into_iter().zip(bounds) {
        let ratio = BoundRatio::new(bound, ideal_bound(length, weight));
        if largest.is_none_or(|largest| largest.is_below(ratio)) {
            largest = Some(ratio);
        }
    }
    largest
}

/// How `min-gap-v2` ranks candidate cycles: by largest ratio, then by the
/// largest additive excess `bound − ceil(L / w)` (slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CycleScore {
    pub(crate) ratio: BoundRatio,
    pub(crate) excess: u32,
}

impl CycleScore {
    /// Whether `self` is strictly better: a smaller largest ratio, or an
    /// equal one (by value) with a smaller largest excess.
    pub(crate) fn is_better_than(self, other: CycleScore) -> bool {
        match self.ratio.cmp_value(&other.ratio) {
            Ordering::Less => true,
            Ordering::Equal => self.excess < other.excess,
            Ordering::Greater => false,
        }
    }
}

/// The [`CycleScore`] of `slots`, or `None` if it does not pick every tenant
/// exactly `weight` times.
pub(crate) fn cycle_score(
    tenants: &[TenantFairnessWeight],
    slots: &[u16],
    length: u32,
) -> Option<CycleScore> {
    check_counts(tenants, slots).ok()?;
    let bounds = measure_bounds(tenants.len(), slots, length);
    let weights = tenants.iter().map(TenantFairnessWeight::weight);
    let ratio = largest_of(weights.clone(), &bounds, length)?;
    let excess = weights
        .zip(&bounds)
        .map(|(weight, &bound)| bound.saturating_sub(ideal_bound(length, weight)))
        .max()?;
    Some(CycleScore { ratio, excess })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bound: u32, ideal: u32, other: (u32, u32), below: bool) {
        let ratio = BoundRatio::new(bound, ideal);
        let other = BoundRatio::new(other.0, other.1);
        assert_eq!(ratio.is_below(other), below, "{ratio:?} {other:?}");
    }

    #[test]
    fn ratios() {
        check(1, 1, (1, 1), false);
        check(4, 3, (3, 2), true);
        check(3, 2, (4, 3), false);
        check(6, 4, (3, 2), false);
        check(512, 512, (1023, 512), true);
        check(4096, 4096, (4095, 4096), false);
        assert!(BoundRatio::new(2, 2).is_ideal());
        assert!(!BoundRatio::new(3, 2).is_ideal());
        assert_eq!(BoundRatio::new(5, 0), BoundRatio::new(5, 1));
        assert_eq!(BoundRatio::new(9, 6).excess(), 3);
        assert_eq!(BoundRatio::new(2, 3).excess(), 0);
        assert_eq!(ideal_bound(1024, 2), 512);
        assert_eq!(ideal_bound(8, 3), 3);
        assert_eq!(ideal_bound(4096, 1), 4096);
        assert_eq!(ideal_bound(7, 7), 1);
    }

    #[test]
    fn largest() {
        // L = 8, weights 5, 2, 1: bounds 2/2, 5/4, 8/8.
        assert_eq!(
            largest_of([5, 2, 1], &[2, 5, 8], 8),
            Some(BoundRatio::new(5, 4))
        );
        // A tie by value keeps the first tenant.
        assert_eq!(largest_of([2, 2], &[3, 3], 4), Some(BoundRatio::new(3, 2)));
        assert_eq!(largest_of([], &[], 1), None);
    }

    #[test]
    fn scores() {
        let score = |bound, ideal, excess| CycleScore {
            ratio: BoundRatio::new(bound, ideal),
            excess,
        };
        assert!(score(4, 3, 9).is_better_than(score(3, 2, 1)));
        assert!(score(6, 4, 1).is_better_than(score(3, 2, 2)));
        assert!(!score(6, 4, 2).is_better_than(score(3, 2, 2)));
        assert!(!score(3, 2, 0).is_better_than(score(4, 3, 0)));
        // L = 8, weights 5, 2, 1 in swrr-v1's a b a a c a b a.
        let tenants = crate::test_support::tenants(&[5, 2, 1]);
        assert_eq!(
            cycle_score(&tenants, &[0, 1, 0, 0, 2, 0, 1, 0], 8),
            Some(score(5, 4, 1))
        );
        assert_eq!(cycle_score(&tenants, &[0, 0, 0, 0, 0, 0, 1, 2], 8), None);
    }
}
