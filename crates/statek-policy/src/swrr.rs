//! Smooth weighted round robin: the `swrr-v1` cycle, and the kernel that
//! class SWRR runs over the weight classes.

use alloc::vec;
use alloc::vec::Vec;

use crate::weight::TenantFairnessWeight;

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

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::cycle_length::MAX_CYCLE_LENGTH;

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
