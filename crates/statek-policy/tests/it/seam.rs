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

/// Walks a chain of three shards (`a` sealed at `n1`, `b` at `n2`, then
/// `c`): for each tenant of `c`, the distance from its last pick before
/// `c` to its first pick in `c`, counting the picking one. A tenant that
/// joins at a seam is counted from that seam; one in every shard but never
/// picked in `a` before `b` from `a`'s start (position -1).
fn chain_walk(shards: [&WeightedFairnessPolicy; 3], n1: u64, n2: u64) -> Vec<u64> {
    let [a, b, c] = shards;
    let mut combined: Vec<(&TenantId, usize)> = (0..n1).map(|s| (picked(a, s), 0)).collect();
    combined.extend((0..n2).map(|s| (picked(b, s), 1)));
    let seam = combined.len();
    combined.extend((0..u64::from(c.cycle_length())).map(|s| (picked(c, s), 2)));
    c.tenants()
        .iter()
        .map(|w| {
            let tenant = w.tenant();
            let first = seam
                + combined[seam..]
                    .iter()
                    .position(|(t, _)| *t == tenant)
                    .unwrap();
            // Where the tenant's open gap starts: its last pick before the
            // seam, else the seam it joined at, else before everything.
            let from = match combined[..seam].iter().rposition(|(t, _)| *t == tenant) {
                Some(last) => {
                    // A pick in `a` counts only if the tenant stayed in `b`.
                    if combined[last].1 == 0 && b.tenant_index(tenant).is_none() {
                        seam
                    } else {
                        last + 1
                    }
                }
                None if b.tenant_index(tenant).is_none() => seam,
                None if a.tenant_index(tenant).is_none() => usize::try_from(n1).unwrap(),
                None => 0,
            };
            u64::try_from(first + 1 - from).unwrap()
        })
        .collect()
}

/// The helper's case: `z` last picked at 9 in a (L = 10), a sealed at 19,
/// b (`z` alone) sealed at 0 before `z` was ever picked in it, `z` at slot
/// 9 in c: 19 reservations from 9 to 28, not 10.
#[test]
fn a_gap_runs_on_through_a_shard_that_never_picked_the_tenant() {
    let names = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "z"];
    let ten = |shard: &str| {
        WeightedFairnessPolicy::new(
            SchedulerShardId::try_from(shard).unwrap(),
            names
                .iter()
                .map(|n| TenantFairnessWeight::new(TenantId::try_from(*n).unwrap(), 1).unwrap()),
        )
        .unwrap()
    };
    let (a, c) = (ten("s-v1"), ten("s-v3"));
    let b = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("s-v2").unwrap(),
        [TenantFairnessWeight::new(TenantId::try_from("z").unwrap(), 1).unwrap()],
    )
    .unwrap();
    let z = TenantId::try_from("z").unwrap();
    assert_eq!(a.cycle().iter().position(|t| *t == z), Some(9));
    let into_b = PolicySeam::new(&a, &b).at(19);
    assert_eq!(into_b[0].reservations_across_seam(), 10);
    assert_eq!(into_b[0].open_gap_at_successor_start(), 10);
    let open = |t: &TenantId| {
        into_b
            .iter()
            .find(|bound| bound.tenant() == t)
            .map(statek_policy::SeamBound::open_gap_at_successor_start)
    };
    let into_c = PolicySeam::new(&b, &c).at_carrying(0, open);
    let z_bound = into_c.iter().find(|bound| *bound.tenant() == z).unwrap();
    assert_eq!(
        (
            z_bound.last_pick_before_seal(),
            z_bound.reservations_across_seam()
        ),
        (None, 19)
    );
    // Without the carry it would be counted from b's start: 10, too small.
    let uncarried = PolicySeam::new(&b, &c).at(0);
    assert_eq!(
        uncarried
            .iter()
            .find(|bound| *bound.tenant() == z)
            .unwrap()
            .reservations_across_seam(),
        10
    );
    assert_eq!(
        into_c
            .iter()
            .map(|bound| bound.reservations_across_seam())
            .collect::<Vec<_>>(),
        chain_walk([&a, &b, &c], 19, 0)
    );
}

proptest! {
    /// Two seals in a row: `at_carrying` with the first seam's open gaps
    /// equals the walk of the three shards, for every pair of seal points
    /// of two laps each (the second shard sealed early, before some
    /// tenants' first picks, is the case that needs the carry).
    #[test]
    fn seam_bounds_across_a_chain_equal_the_walk(
        a in small_policy(),
        b in small_policy(),
        c in small_policy(),
    ) {
        let (a, b, c) = (build("a", a.0, &a.1), build("b", b.0, &b.1), build("c", c.0, &c.1));
        for n1 in 0..2 * u64::from(a.cycle_length()) {
            let into_b = PolicySeam::new(&a, &b).at(n1);
            for n2 in 0..2 * u64::from(b.cycle_length()) {
                let open = |t: &TenantId| {
                    into_b
                        .iter()
                        .find(|bound| bound.tenant() == t)
                        .map(statek_policy::SeamBound::open_gap_at_successor_start)
                };
                let into_c = PolicySeam::new(&b, &c).at_carrying(n2, open);
                let got: Vec<u64> = into_c.iter().map(|bound| bound.reservations_across_seam()).collect();
                prop_assert_eq!(got, chain_walk([&a, &b, &c], n1, n2), "n1 {} n2 {}", n1, n2);
            }
        }
    }
}
