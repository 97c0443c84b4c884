//! Property tests of the seam bound, for all three algorithms on both
//! sides: `PolicySeam::at` equals a brute-force walk of the combined
//! sequence for every seal point of three laps, and `PolicySeam::worst` its
//! largest value over them.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use statek_policy::{
    PolicyAlgorithm, PolicySeam, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy,
};

/// Tenant names the strategies draw from, so old and new policies overlap
/// in some tenants and differ in others.
const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

const ALGORITHMS: [PolicyAlgorithm; 3] = [
    PolicyAlgorithm::SwrrV1,
    PolicyAlgorithm::MinGapV1,
    PolicyAlgorithm::MinGapV2,
];

fn build(shard: &str, algorithm: usize, weights: &BTreeMap<usize, u32>) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from(shard).unwrap(),
        ALGORITHMS[algorithm],
        weights.iter().map(|(&name, &weight)| {
            TenantFairnessWeight::new(TenantId::try_from(NAMES[name]).unwrap(), weight).unwrap()
        }),
    )
    .unwrap()
}

/// 1..=6 tenants of weight 1..=8 and one of the three algorithms.
fn small_policy() -> impl Strategy<Value = (usize, BTreeMap<usize, u32>)> {
    (
        0..ALGORITHMS.len(),
        prop::collection::btree_map(0..NAMES.len(), 1..=8_u32, 1..=6),
    )
}

/// The tenant of `policy` picked at `sequence`.
fn picked(policy: &WeightedFairnessPolicy, sequence: u64) -> &TenantId {
    let slot = sequence % u64::from(policy.cycle_length());
    policy.tenant_for_slot(slot).unwrap()
}

/// The oracle, by walking the combined order: the old shard's sequences
/// `0..seal`, then one lap of the successor's. For each tenant of `new`:
/// its last position before the seam (`None` if absent), its first
/// position after it, and the distance between them counting the picking
/// one, from position -1 when there is no earlier pick. A joining tenant is
/// counted from the seam instead (position `seal - 1`).
fn brute_force(
    old: &WeightedFairnessPolicy,
    new: &WeightedFairnessPolicy,
    seal: u64,
) -> Vec<(Option<u64>, u64, u64)> {
    let combined: Vec<&TenantId> = (0..seal)
        .map(|sequence| picked(old, sequence))
        .chain((0..u64::from(new.cycle_length())).map(|sequence| picked(new, sequence)))
        .collect();
    new.tenants()
        .iter()
        .map(|tenant| {
            let tenant = tenant.tenant();
            let position = |index: usize| u64::try_from(index).unwrap();
            let last = combined[..usize::try_from(seal).unwrap()]
                .iter()
                .rposition(|&t| t == tenant)
                .map(position);
            let first = combined[usize::try_from(seal).unwrap()..]
                .iter()
                .position(|&t| t == tenant)
                .map(position)
                .unwrap();
            let joining = old.tenant_index(tenant).is_none();
            // Positions shifted by one, so that "before everything" is 0.
            let from = match last {
                Some(last) => last + 1,
                None if joining => seal,
                None => 0,
            };
            (last, first, seal + first + 1 - from)
        })
        .collect()
}

/// `at` against the oracle for every seal in `0..3·L_old`, and `worst`
/// against the oracle's largest gap (the smallest seal reaching it).
///
/// Why three laps cover every seal point `N >= 0`: for a tenant of both
/// policies whose first old slot is `P_0 < L_old`, a seal at `N <= P_0`
/// leaves it unpicked, and above that its last pick is at `N - 1 - d`
/// where `d` depends only on `(N - 1) mod L_old`, so the gap repeats every
/// `L_old` seals from `N = P_0 + 1` on. `0..2·L_old` thus holds every seal
/// up to `P_0` and one whole period `P_0 + 1 ..= P_0 + L_old`, and the
/// first seal reaching the largest gap; a joining tenant's gap does not
/// depend on `N`. The third lap checks the repetition once more.
fn check(old: &WeightedFairnessPolicy, new: &WeightedFairnessPolicy) {
    let seam = PolicySeam::new(old, new);
    let laps = 3 * u64::from(old.cycle_length());
    // Per tenant of `new`: (largest gap, smallest seal reaching it).
    let mut worst: Vec<Option<(u64, u64)>> = vec![None; new.tenants().len()];
    for seal in 0..laps {
        let expected = brute_force(old, new, seal);
        let bounds = seam.at(seal);
        assert_eq!(bounds.len(), expected.len());
        for (index, (bound, &(last, first, gap))) in bounds.iter().zip(&expected).enumerate() {
            let tenant = new.tenants()[index].tenant();
            assert_eq!(bound.tenant(), tenant);
            assert_eq!(bound.seal_sequence(), seal);
            assert_eq!(bound.last_pick_before_seal(), last, "{tenant} N = {seal}");
            assert_eq!(bound.first_pick_after_seal(), first, "{tenant} N = {seal}");
            assert_eq!(bound.reservations_across_seam(), gap, "{tenant} N = {seal}");
            assert_eq!(bound.joining(), old.tenant_index(tenant).is_none());
            if worst[index].is_none_or(|(largest, _)| gap > largest) {
                worst[index] = Some((gap, seal));
            }
        }
    }
    let got: Vec<Option<(u64, u64)>> = seam
        .worst()
        .iter()
        .map(|bound| Some((bound.reservations_across_seam(), bound.seal_sequence())))
        .collect();
    assert_eq!(got, worst);
    let leaving: Vec<&TenantId> = old
        .tenants()
        .iter()
        .map(TenantFairnessWeight::tenant)
        .filter(|tenant| !new.tenants().iter().any(|t| t.tenant() == *tenant))
        .collect();
    assert_eq!(seam.leaving().iter().collect::<Vec<_>>(), leaving);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn seam_bounds_equal_the_walk(
        (old_algorithm, old_weights) in small_policy(),
        (new_algorithm, new_weights) in small_policy(),
    ) {
        let old = build("primary-v1", old_algorithm, &old_weights);
        let new = build("primary-v2", new_algorithm, &new_weights);
        check(&old, &new);
    }

    #[test]
    fn seam_bounds_between_equal_tenant_sets(
        (old_algorithm, weights) in small_policy(),
        new_algorithm in 0..ALGORITHMS.len(),
        bumps in prop::collection::vec(0..=7_u32, 6),
    ) {
        // The same tenants, new weights: every tenant is on both sides.
        let new_weights: BTreeMap<usize, u32> = weights
            .iter()
            .zip(&bumps)
            .map(|((&name, &weight), &bump)| (name, 1 + (weight + bump - 1) % 8))
            .collect();
        let old = build("primary-v1", old_algorithm, &weights);
        let new = build("primary-v2", new_algorithm, &new_weights);
        check(&old, &new);
    }
}

/// The worst gap of a tenant of both policies is its old bound plus its
/// first slot in the new cycle (see `PolicySeam::worst`), checked against
/// the policies' own measurements on a few fixed cases.
#[test]
fn worst_is_old_bound_plus_first_new_slot() {
    let weights = |pairs: &[(usize, u32)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    let cases = [
        (
            weights(&[(0, 3), (1, 1)]),
            weights(&[(0, 1), (1, 1), (2, 2)]),
        ),
        (
            weights(&[(0, 5), (1, 2), (2, 1)]),
            weights(&[(0, 1), (1, 7)]),
        ),
        (
            weights(&[(0, 1), (1, 1), (2, 1), (3, 1), (4, 4), (5, 4)]),
            weights(&[(4, 8), (5, 1)]),
        ),
    ];
    for (old_weights, new_weights) in cases {
        for (old_algorithm, new_algorithm) in [(0, 0), (1, 2), (2, 1)] {
            let old = build("primary-v1", old_algorithm, &old_weights);
            let new = build("primary-v2", new_algorithm, &new_weights);
            for bound in PolicySeam::new(&old, &new).worst() {
                let q = u64::from(
                    new.cycle()
                        .iter()
                        .position(|t| t == bound.tenant())
                        .map(|slot| u32::try_from(slot).unwrap())
                        .unwrap(),
                );
                let expected = match old.starvation_bound(bound.tenant()) {
                    Some(old_bound) => {
                        u64::from(old_bound.maximum_reservations_until_selection()) + q
                    }
                    None => q + 1,
                };
                assert_eq!(
                    bound.reservations_across_seam(),
                    expected,
                    "{}",
                    bound.tenant()
                );
            }
        }
    }
}
