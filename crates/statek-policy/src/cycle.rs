//! The cycle: compiling weights into the periodic list of tenant picks
//! (`swrr-v1` here, `min-gap-v1` in [`min_gap`](crate::min_gap)), checking
//! it, and measuring each tenant's starvation bound on it.

use alloc::vec;
use alloc::vec::Vec;
use core::iter::FusedIterator;

use crate::algorithm::PolicyAlgorithm;
use crate::error::PolicyError;
use crate::id::TenantId;
use crate::min_gap;
use crate::weight::TenantFairnessWeight;

/// The largest cycle length `L` (sum of weights), in slots.
pub const MAX_CYCLE_LENGTH: u32 = 4096;

/// A compiled cycle and the measured starvation bound of every tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompiledCycle {
    /// For each slot `0..L`, the index of the picked tenant.
    pub(crate) slots: Vec<u16>,
    /// For each tenant index, its largest circular gap in slots.
    pub(crate) bounds: Vec<u32>,
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
    let slots = match algorithm {
        PolicyAlgorithm::SwrrV1 => swrr_v1(tenants, length),
        PolicyAlgorithm::MinGapV1 => min_gap::min_gap_v1(tenants, length),
    };
    check_counts(tenants, &slots)?;
    let bounds = measure_bounds(tenants.len(), &slots, length);
    Ok(CompiledCycle { slots, bounds })
}

/// Smooth weighted round robin, exactly as specified for `swrr-v1`.
///
/// `O(L × tenants)`: at most 4096 × 1024 additions, done once per policy.
pub(crate) fn swrr_v1(tenants: &[TenantFairnessWeight], length: u32) -> Vec<u16> {
    let weights: Vec<u32> = tenants.iter().map(TenantFairnessWeight::weight).collect();
    swrr(&weights, length)
}

/// Smooth weighted round robin over `weights` (which sum to `length`):
/// for each slot, the index of the pick.
///
/// Every entry has a score starting at 0; for each of the `length` steps
/// each weight is added to its score, the highest score is picked (on a
/// tie, the lowest index) and `length` is subtracted from it. Also used by
/// `min-gap-v1`'s class SWRR, over the weights of the classes.
pub(crate) fn swrr(weights: &[u32], length: u32) -> Vec<u16> {
    let total = i64::from(length);
    let mut scores = vec![0_i64; weights.len()];
    let mut slots = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
    for _ in 0..length {
        let mut best = 0_usize;
        let mut best_score = i64::MIN;
        for (index, (score, &weight)) in scores.iter_mut().zip(weights).enumerate() {
            *score += i64::from(weight);
            // Strictly greater: on a tie the earlier entry, which sorts
            // first, keeps the pick.
            if *score > best_score {
                best = index;
                best_score = *score;
            }
        }
        if let Some(score) = scores.get_mut(best) {
            *score -= total;
        }
        // More than u16::MAX entries is impossible (at most 1024); should it
        // happen, the count check reports it.
        slots.push(u16::try_from(best).unwrap_or(u16::MAX));
    }
    slots
}

/// Checks that every tenant appears exactly `weight` times.
///
/// Since the weights sum to the number of slots, this also rules out slots
/// that name no tenant.
pub(crate) fn check_counts(
    tenants: &[TenantFairnessWeight],
    slots: &[u16],
) -> Result<(), PolicyError> {
    let mut counts = vec![0_u32; tenants.len()];
    for &slot in slots {
        if let Some(count) = counts.get_mut(usize::from(slot)) {
            *count = count.saturating_add(1);
        }
    }
    let expected_length: u64 = tenants.iter().map(|t| u64::from(t.weight())).sum();
    for (tenant, &count) in tenants.iter().zip(&counts) {
        if count != tenant.weight() {
            return Err(PolicyError::CycleInvariantViolated {
                tenant: tenant.tenant().clone(),
                expected: tenant.weight(),
                actual: count,
            });
        }
    }
    if u64::try_from(slots.len()).ok() != Some(expected_length) {
        // Unreachable when the per-tenant counts match; kept so a broken
        // compiler can never hand out a cycle of the wrong length.
        if let Some(tenant) = tenants.first() {
            return Err(PolicyError::CycleInvariantViolated {
                tenant: tenant.tenant().clone(),
                expected: tenant.weight(),
                actual: 0,
            });
        }
    }
    Ok(())
}

/// For each tenant index, the largest circular distance between two
/// consecutive picks, counting the picking slot (`length` for a tenant
/// picked once).
pub(crate) fn measure_bounds(tenant_count: usize, slots: &[u16], length: u32) -> Vec<u32> {
    // (first pick, last pick, largest gap so far), in slots.
    let mut seen: Vec<Option<(u32, u32, u32)>> = vec![None; tenant_count];
    for (slot, &index) in (0_u32..).zip(slots) {
        if let Some(entry) = seen.get_mut(usize::from(index)) {
            *entry = Some(match *entry {
                None => (slot, slot, 0),
                Some((first, last, gap)) => (first, slot, gap.max(slot - last)),
            });
        }
    }
    seen.into_iter()
        .map(|entry| match entry {
            // The wrap-around gap: from the last pick to the first pick of
            // the next lap.
            Some((first, last, gap)) => gap.max(length - last + first),
            None => length,
        })
        .collect()
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
