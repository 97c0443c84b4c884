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
///
/// Two implementations give the same cycle: [`swrr_reference`], the plain
/// loop above (`O(L × entries)`), and [`swrr_grouped`] (`O(L × distinct
/// weights)`). This picks the grouped one when weights repeat enough for it
/// to be cheaper; the reference is the test oracle either way.
pub(crate) fn swrr(weights: &[u32], length: u32) -> Vec<u16> {
    let mut distinct: Vec<u32> = weights.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    // Per step the grouped loop does a little more work per group than the
    // plain loop per entry; it wins once a quarter of the entries share a
    // weight with another (measured: `cargo bench -p statek-policy`).
    if distinct.len().saturating_mul(4) <= weights.len().saturating_mul(3) {
        swrr_grouped(weights, length)
    } else {
        swrr_reference(weights, length)
    }
}

/// The reference SWRR loop: `O(L × entries)`, at most 4096 × 1024
/// additions. Kept as the definition and as the oracle of [`swrr_grouped`].
pub(crate) fn swrr_reference(weights: &[u32], length: u32) -> Vec<u16> {
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

/// The entries of one weight in [`swrr_grouped`].
struct WeightGroup {
    weight: i64,
    /// The score of the group's candidate, `members[next]`.
    score: i64,
    /// The candidate: the member picked next if the group wins.
    candidate: u16,
    /// Position of the candidate in `members`.
    next: usize,
    /// Indexes of the entries with this weight, ascending.
    members: Vec<u16>,
}

/// SWRR grouped by weight: the same cycle as [`swrr_reference`] in
/// `O(L × distinct weights)` (at most ~90 distinct weights fit in 4096).
///
/// Why it is the same: entries of one weight start at score 0 and gain the
/// same amount each step, so after the group was picked `c` times (in index
/// order, round robin) the first `c mod m` members have score `s - L` and the
/// rest `s`. The reference loop's pick, the highest score with the lowest
/// index on a tie, is therefore always some group's member `c mod m`; it is
/// enough to track that candidate's score per group and break ties between
/// groups by the candidates' indexes.
pub(crate) fn swrr_grouped(weights: &[u32], length: u32) -> Vec<u16> {
    let total = i64::from(length);
    let mut order: Vec<(u32, u16)> = weights
        .iter()
        .zip(0_u16..)
        .map(|(&weight, index)| (weight, index))
        .collect();
    order.sort_unstable();
    let mut groups: Vec<WeightGroup> = Vec::new();
    for (weight, index) in order {
        match groups.last_mut() {
            Some(group) if group.weight == i64::from(weight) => group.members.push(index),
            _ => groups.push(WeightGroup {
                weight: i64::from(weight),
                score: 0,
                candidate: index,
                next: 0,
                members: vec![index],
            }),
        }
    }
    let mut slots = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
    for _ in 0..length {
        // (group position, score, candidate index) of the best so far.
        let mut best = (0_usize, i64::MIN, u16::MAX);
        for (position, group) in groups.iter_mut().enumerate() {
            group.score += group.weight;
            if group.score > best.1 || (group.score == best.1 && group.candidate < best.2) {
                best = (position, group.score, group.candidate);
            }
        }
        let (position, _, index) = best;
        if let Some(group) = groups.get_mut(position) {
            group.next += 1;
            if group.next == group.members.len() {
                // The round is over: the first member, already at `s - L`,
                // is the candidate again.
                group.next = 0;
                group.score -= total;
            }
            // Otherwise the next member has the picked one's old score.
            group.candidate = group.members.get(group.next).copied().unwrap_or(u16::MAX);
        }
        slots.push(index);
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

    /// Weights of `n` entries summing to at most `MAX_CYCLE_LENGTH`, drawn
    /// from a small range so that ties (equal weights, equal scores) are
    /// the common case, or from the full range.
    fn weight_lists() -> impl proptest::strategy::Strategy<Value = Vec<u32>> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::collection::vec(1_u32..=4, 1..=1024),
            proptest::collection::vec(1_u32..=12, 1..=300),
            proptest::collection::vec(1_u32..=1024, 1..=8),
            proptest::collection::vec(prop_oneof![Just(1_u32), Just(2), Just(1024)], 1..=64),
        ]
        .prop_map(|mut weights| {
            // Trim to the cycle limit, keeping at least one entry.
            let mut total = 0_u32;
            weights.retain(|&w| {
                total += w;
                total <= MAX_CYCLE_LENGTH
            });
            if weights.is_empty() {
                weights.push(1);
            }
            weights
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        #[test]
        fn grouped_swrr_equals_the_reference_loop(weights in weight_lists()) {
            let length: u32 = weights.iter().sum();
            let reference = swrr_reference(&weights, length);
            proptest::prop_assert_eq!(&swrr_grouped(&weights, length), &reference);
            proptest::prop_assert_eq!(&swrr(&weights, length), &reference);
        }
    }

    #[test]
    fn grouped_swrr_equals_the_reference_on_the_worst_shapes() {
        let shapes: [Vec<u32>; 4] = [
            vec![4; 1024],
            core::iter::once(1024)
                .chain(core::iter::repeat_n(3, 1023))
                .collect(),
            core::iter::once(2)
                .chain(core::iter::repeat_n(1, 1022))
                .collect(),
            (1..=90).collect(),
        ];
        for weights in shapes {
            let length: u32 = weights.iter().sum();
            assert!(length <= MAX_CYCLE_LENGTH, "{length}");
            let reference = swrr_reference(&weights, length);
            assert_eq!(reference.len(), usize::try_from(length).unwrap());
            assert_eq!(swrr_grouped(&weights, length), reference, "{weights:?}");
            assert_eq!(swrr(&weights, length), reference, "{weights:?}");
        }
    }

    #[test]
    fn grouped_swrr_hand_checked() {
        // a:3 b:1 → a a b a; equal weights go round robin in index order.
        assert_eq!(swrr_grouped(&[3, 1], 4), [0, 0, 1, 0]);
        assert_eq!(swrr_grouped(&[1, 1, 1], 3), [0, 1, 2]);
        assert_eq!(swrr_grouped(&[5, 2, 1], 8), [0, 1, 0, 0, 2, 0, 1, 0]);
        assert_eq!(swrr_grouped(&[1, 2, 1, 2], 6), [1, 3, 0, 2, 1, 3]);
        assert_eq!(swrr_reference(&[1, 2, 1, 2], 6), [1, 3, 0, 2, 1, 3]);
    }
}
