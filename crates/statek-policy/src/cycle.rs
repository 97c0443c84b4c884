//! The cycle: compiling weights into the periodic list of tenant picks with
//! the policy's algorithm (`swrr-v1` in [`swrr`](crate::swrr), `min-gap-v1`
//! in [`min_gap`](crate::min_gap), `min-gap-v2` in
//! [`min_gap_v2`](crate::min_gap_v2)), checking it, measuring each tenant's
//! starvation bound on it, and the borrowed [`CycleView`].

use alloc::vec::Vec;
use core::iter::FusedIterator;

use crate::algorithm::PolicyAlgorithm;
use crate::error::PolicyError;
use crate::id::TenantId;
use crate::measure::{check_counts, measure_bounds};
use crate::optimality::{CycleOptimality, UnprovenReason};
use crate::ratio::ideal_bound;
use crate::swrr::swrr_v1;
use crate::weight::TenantFairnessWeight;
use crate::{min_gap, min_gap_v2};

/// A compiled cycle and the measured starvation bound of every tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompiledCycle {
    /// For each slot `0..L`, the index of the picked tenant.
    pub(crate) slots: Vec<u16>,
    /// For each tenant index, its largest circular gap in slots.
    pub(crate) bounds: Vec<u32>,
    /// What is proven about the cycle's largest ratio.
    pub(crate) optimality: CycleOptimality,
}

/// Compiles `tenants` (sorted by id, unique, `L = length`) with `algorithm`,
/// checks that every tenant appears exactly `weight` times and measures the
/// bounds.
///
/// The caller has checked the limits; `length` is the sum of the weights.
pub(crate) fn compile(
    algorithm: PolicyAlgorithm,
    tenants: &[TenantFairnessWeight],
    length: u32,
) -> Result<CompiledCycle, PolicyError> {
    let (slots, unproven) = match algorithm {
        PolicyAlgorithm::SwrrV1 => (swrr_v1(tenants, length), Some(UnprovenReason::NotSearched)),
        PolicyAlgorithm::MinGapV1 => (
            min_gap::min_gap_v1(tenants, length),
            Some(UnprovenReason::NotSearched),
        ),
        PolicyAlgorithm::MinGapV2 => min_gap_v2::min_gap_v2(tenants, length),
    };
    check_counts(tenants, &slots)?;
    let bounds = measure_bounds(tenants.len(), &slots, length);
    let optimality = judge(tenants, &bounds, length, unproven);
    Ok(CompiledCycle {
        slots,
        bounds,
        optimality,
    })
}

/// [`CycleOptimality::Ideal`] when every measured bound is `ceil(L / w)`,
/// else proven optimal or not as the algorithm's search says (`None`:
/// proven).
fn judge(
    tenants: &[TenantFairnessWeight],
    bounds: &[u32],
    length: u32,
    unproven: Option<UnprovenReason>,
) -> CycleOptimality {
    let ideal = tenants
        .iter()
        .zip(bounds)
        .all(|(tenant, &bound)| bound == ideal_bound(length, tenant.weight()));
    match (ideal, unproven) {
        (true, _) => CycleOptimality::Ideal,
        (false, None) => CycleOptimality::ProvenOptimal,
        (false, Some(reason)) => CycleOptimality::Unproven(reason),
    }
}

/// A borrowed view of a policy's compiled cycle, returned by
/// [`WeightedFairnessPolicy::cycle`](crate::WeightedFairnessPolicy::cycle):
/// the tenant picked in each slot `0..L`.
///
/// Iterate it with [`iter`](Self::iter) or a `for` loop.
#[derive(Debug, Clone, Copy)]
pub struct CycleView<'a> {
    slots: &'a [u16],
    tenants: &'a [TenantFairnessWeight],
}

impl<'a> CycleView<'a> {
    pub(crate) fn new(slots: &'a [u16], tenants: &'a [TenantFairnessWeight]) -> Self {
        Self { slots, tenants }
    }

    /// The number of slots: the cycle length `L`.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the cycle has no slots; never true for a built policy.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The tenant picked in `slot`, or `None` if `slot >= L`.
    #[must_use]
    pub fn get(&self, slot: usize) -> Option<&'a TenantId> {
        lookup(self.tenants, *self.slots.get(slot)?)
    }

    /// The tenants in slot order.
    #[must_use]
    pub fn iter(&self) -> CycleTenants<'a> {
        CycleTenants {
            slots: self.slots.iter(),
            tenants: self.tenants,
        }
    }

    /// The cycle as indexes into the policy's
    /// [`tenants`](crate::WeightedFairnessPolicy::tenants).
    #[must_use]
    pub fn tenant_indexes(&self) -> &'a [u16] {
        self.slots
    }
}

impl<'a> IntoIterator for CycleView<'a> {
    type Item = &'a TenantId;
    type IntoIter = CycleTenants<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

fn lookup(tenants: &[TenantFairnessWeight], index: u16) -> Option<&TenantId> {
    tenants
        .get(usize::from(index))
        .map(TenantFairnessWeight::tenant)
}

/// An iterator over the tenant picked in each slot of a cycle, in slot
/// order; see [`CycleView::iter`].
#[derive(Debug, Clone)]
pub struct CycleTenants<'a> {
    slots: core::slice::Iter<'a, u16>,
    tenants: &'a [TenantFairnessWeight],
}

impl<'a> Iterator for CycleTenants<'a> {
    type Item = &'a TenantId;

    fn next(&mut self) -> Option<Self::Item> {
        lookup(self.tenants, *self.slots.next()?)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

impl DoubleEndedIterator for CycleTenants<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        lookup(self.tenants, *self.slots.next_back()?)
    }
}

impl ExactSizeIterator for CycleTenants<'_> {}

impl FusedIterator for CycleTenants<'_> {}

#[cfg(test)]
mod tests {
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::*;

    /// Compiles `weights` (given sorted by id) and returns the cycle as ids
    /// and the bounds.
    fn compiled(weights: &[(&str, u32)]) -> (Vec<String>, Vec<u32>) {
        let tenants: Vec<TenantFairnessWeight> = weights
            .iter()
            .map(|(id, w)| TenantFairnessWeight::new(TenantId::try_from(*id).unwrap(), *w).unwrap())
            .collect();
        let length = weights.iter().map(|(_, w)| w).sum();
        let cycle = compile(PolicyAlgorithm::SwrrV1, &tenants, length).unwrap();
        let ids = CycleView::new(&cycle.slots, &tenants)
            .iter()
            .map(|t| String::from(t.as_str()))
            .collect();
        (ids, cycle.bounds)
    }

    fn check(weights: &[(&str, u32)], cycle: &str, bounds: &[u32]) {
        let (ids, measured) = compiled(weights);
        assert_eq!(ids.join(" "), cycle, "{weights:?}");
        assert_eq!(measured, bounds, "{weights:?}");
    }

    #[test]
    fn hand_checked_cycles() {
        check(&[("a", 1)], "a", &[1]);
        check(&[("a", 5)], "a a a a a", &[1]);
        check(&[("a", 3), ("b", 1)], "a a b a", &[2, 4]);
        check(&[("a", 1), ("b", 1)], "a b", &[2, 2]);
        check(&[("a", 1), ("b", 1), ("c", 1)], "a b c", &[3, 3, 3]);
        check(&[("a", 2), ("b", 1)], "a b a", &[2, 3]);
        check(&[("a", 1), ("b", 2)], "b a b", &[3, 2]);
        check(&[("a", 5), ("b", 1), ("c", 1)], "a a b a c a a", &[2, 7, 7]);
        check(
            &[("a", 5), ("b", 2), ("c", 1)],
            "a b a a c a b a",
            &[2, 5, 8],
        );
        check(&[("a", 2), ("b", 2)], "a b a b", &[2, 2]);
        check(&[("a", 1), ("b", 3)], "b a b b", &[4, 2]);
        check(&[("a", 4), ("b", 3)], "a b a b a b a", &[2, 3]);
    }

    #[test]
    fn gap_can_exceed_ceil_of_length_over_weight() {
        // L = 8: ceil(8 / 2) = 4, but b's picks (slots 1 and 6) are 5 apart.
        check(
            &[("a", 5), ("b", 2), ("c", 1)],
            "a b a a c a b a",
            &[2, 5, 8],
        );
        // L = 9: ceil(9 / 2) = 5, but b's picks (slots 1 and 7) are 6 apart.
        check(
            &[("a", 6), ("b", 2), ("c", 1)],
            "a b a a c a a b a",
            &[2, 6, 9],
        );
    }
}
