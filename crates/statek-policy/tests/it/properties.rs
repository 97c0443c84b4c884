//! Property tests, for both algorithms: counts, order independence, bound =
//! observed circular gap, round trip, `min-gap-v1` never worse than
//! `swrr-v1`, and a decoder that never panics.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use statek_policy::{
    PolicyAlgorithm, PolicyError, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy, MAX_CYCLE_LENGTH, MAX_TENANTS, MAX_WEIGHT,
};

/// Tenant ids and weights, in input order.
type Weights = Vec<(String, u32)>;

fn shard() -> SchedulerShardId {
    SchedulerShardId::try_from("primary-v1").unwrap()
}

fn build(weights: &[(String, u32)]) -> WeightedFairnessPolicy {
    build_with(PolicyAlgorithm::SwrrV1, weights)
}

fn build_with(algorithm: PolicyAlgorithm, weights: &[(String, u32)]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::with_algorithm(
        shard(),
        algorithm,
        weights.iter().map(|(id, w)| {
            TenantFairnessWeight::new(TenantId::try_from(id.as_str()).unwrap(), *w).unwrap()
        }),
    )
    .unwrap()
}

/// The largest ratio of bound to `ceil(L / w)` over the policy's tenants,
/// as `(bound, ideal)`; fractions are compared by cross-multiplication.
fn largest_ratio(policy: &WeightedFairnessPolicy) -> (u64, u64) {
    policy
        .starvation_bounds()
        .map(|bound| {
            let ideal = bound.cycle_length().div_ceil(bound.weight());
            assert_eq!(bound.ideal_reservations_until_selection(), ideal);
            (
                u64::from(bound.maximum_reservations_until_selection()),
                u64::from(ideal),
            )
        })
        .max_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)))
        .unwrap()
}

/// The oracle: the largest distance between consecutive picks of each tenant
/// observed while walking two laps of the cycle, so the wrap-around gap is
/// seen like any other.
fn observed_gaps(policy: &WeightedFairnessPolicy) -> Vec<u32> {
    let indexes = policy.cycle_tenant_indexes();
    let mut last: Vec<Option<usize>> = vec![None; policy.tenants().len()];
    let mut largest = vec![0_u32; policy.tenants().len()];
    for (position, &index) in indexes.iter().chain(indexes).enumerate() {
        let index = usize::from(index);
        if let Some(previous) = last[index] {
            largest[index] = largest[index].max(u32::try_from(position - previous).unwrap());
        }
        last[index] = Some(position);
    }
    largest
}

/// Every invariant of a valid `swrr-v1` policy built from `weights` (unique
/// ids).
fn check_policy(weights: &[(String, u32)], shuffled: &[(String, u32)]) {
    check_policy_with(PolicyAlgorithm::SwrrV1, weights, shuffled);
}

/// Every invariant of a valid `min-gap-v1` policy built from `weights`, and
/// its largest ratio never above `swrr-v1`'s.
fn check_min_gap(weights: &[(String, u32)], shuffled: &[(String, u32)]) {
    let policy = check_policy_with(PolicyAlgorithm::MinGapV1, weights, shuffled);
    let (bound, ideal) = largest_ratio(&policy);
    let (swrr_bound, swrr_ideal) = largest_ratio(&build(weights));
    assert!(
        bound * swrr_ideal <= swrr_bound * ideal,
        "min-gap-v1 {bound}/{ideal} above swrr-v1 {swrr_bound}/{swrr_ideal}"
    );
}

/// Every invariant of a valid `min-gap-v2` policy built from `weights`, and
/// its largest ratio never above `min-gap-v1`'s.
fn check_min_gap_v2(weights: &[(String, u32)], shuffled: &[(String, u32)]) {
    let policy = check_policy_with(PolicyAlgorithm::MinGapV2, weights, shuffled);
    let (bound, ideal) = largest_ratio(&policy);
    let (v1_bound, v1_ideal) = largest_ratio(&build_with(PolicyAlgorithm::MinGapV1, weights));
    assert!(
        bound * v1_ideal <= v1_bound * ideal,
        "min-gap-v2 {bound}/{ideal} above min-gap-v1 {v1_bound}/{v1_ideal}"
    );
}

/// Every invariant of a valid policy built from `weights` (unique ids) with
/// `algorithm`; returns the policy.
fn check_policy_with(
    algorithm: PolicyAlgorithm,
    weights: &[(String, u32)],
    shuffled: &[(String, u32)],
) -> WeightedFairnessPolicy {
    let policy = build_with(algorithm, weights);
    assert_eq!(policy.algorithm(), algorithm);
    let length: u32 = weights.iter().map(|(_, w)| w).sum();
    assert_eq!(policy.cycle_length(), length);
    assert_eq!(policy.cycle().len(), usize::try_from(length).unwrap());
    assert_eq!(
        policy.cycle_tenant_indexes().len(),
        usize::try_from(length).unwrap()
    );

    // Sorted, unique, and each tenant appears exactly its weight.
    assert!(policy
        .tenants()
        .windows(2)
        .all(|p| p[0].tenant() < p[1].tenant()));
    let mut counts: BTreeMap<&TenantId, u32> = BTreeMap::new();
    for tenant in policy.cycle() {
        *counts.entry(tenant).or_default() += 1;
    }
    assert_eq!(counts.len(), weights.len());
    for (id, weight) in weights {
        let tenant = TenantId::try_from(id.as_str()).unwrap();
        assert_eq!(counts.get(&tenant), Some(weight), "{tenant}");
        assert_eq!(policy.entitled_share(&tenant), Some((*weight, length)));
    }

    // The reported bound is the largest observed circular gap.
    let observed = observed_gaps(&policy);
    for (tenant, expected) in policy.tenants().iter().zip(&observed) {
        let bound = policy.starvation_bound(tenant.tenant()).unwrap();
        assert_eq!(
            bound.maximum_reservations_until_selection(),
            *expected,
            "{}",
            tenant.tenant()
        );
        assert_eq!(
            (bound.weight(), bound.cycle_length()),
            (tenant.weight(), length)
        );
        assert!((1..=length).contains(expected));
    }

    // Slot lookup agrees with the cycle.
    for (slot, tenant) in policy.cycle().iter().enumerate() {
        assert_eq!(
            policy.tenant_for_slot(u64::try_from(slot).unwrap()),
            Some(tenant)
        );
    }
    assert_eq!(policy.tenant_for_slot(u64::from(length)), None);

    // Input order never matters.
    let other = build_with(algorithm, shuffled);
    assert_eq!(other.canonical_bytes(), policy.canonical_bytes());
    assert_eq!(other.digest(), policy.digest());
    assert_eq!(other.cycle_tenant_indexes(), policy.cycle_tenant_indexes());
    assert_eq!(other.cycle_digest(), policy.cycle_digest());
    assert_eq!(other, policy);

    // Canonical bytes round-trip exactly.
    let decoded = WeightedFairnessPolicy::decode(shard(), policy.canonical_bytes()).unwrap();
    assert_eq!(decoded, policy);
    assert_eq!(decoded.canonical_bytes(), policy.canonical_bytes());
    assert_eq!(
        decoded.cycle_tenant_indexes(),
        policy.cycle_tenant_indexes()
    );
    assert_eq!(decoded.cycle_digest(), policy.cycle_digest());
    policy
}

/// Decoding must never panic, and may only accept exactly canonical bytes.
fn check_decode(bytes: &[u8]) {
    if let Ok(policy) = WeightedFairnessPolicy::decode(shard(), bytes) {
        assert_eq!(policy.canonical_bytes(), bytes);
    }
}

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:-]{1,24}".prop_filter("path-like", |s| s != "." && s != "..")
}

/// 1..=64 unique tenants with weights 1..=64 (so L <= 4096), plus a shuffle.
fn small() -> impl Strategy<Value = (Weights, Weights)> {
    prop::collection::btree_set(id(), 1..=64)
        .prop_flat_map(|ids| {
            let n = ids.len();
            (Just(ids), prop::collection::vec(1..=64_u32, n))
        })
        .prop_map(|(ids, weights): (BTreeSet<String>, Vec<u32>)| {
            ids.into_iter().zip(weights).collect::<Vec<_>>()
        })
        .prop_flat_map(|weights| (Just(weights.clone()), Just(weights).prop_shuffle()))
}

/// 1000..=1024 tenants with weights 1..=4, trimmed so L <= 4096.
fn many_tenants() -> impl Strategy<Value = (Weights, Weights)> {
    (1000..=MAX_TENANTS)
        .prop_flat_map(|n| prop::collection::vec(1..=4_u32, n))
        .prop_map(|mut weights| {
            let mut excess = weights.iter().sum::<u32>().saturating_sub(MAX_CYCLE_LENGTH);
            for weight in &mut weights {
                let cut = excess.min(*weight - 1);
                *weight -= cut;
                excess -= cut;
            }
            weights
                .into_iter()
                .enumerate()
                .map(|(i, w)| (format!("tenant-{i:04}"), w))
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|weights| (Just(weights.clone()), Just(weights).prop_shuffle()))
}

/// 4..=40 tenants whose weights (each 1..=1024) sum to 3896..=4096.
fn long_cycle() -> impl Strategy<Value = (Weights, Weights)> {
    (4..=40_u32, 3896..=MAX_CYCLE_LENGTH)
        .prop_flat_map(|(n, length)| {
            let transfers = prop::collection::vec((0..n, 0..n, 0..=MAX_WEIGHT), 0..64);
            (Just(n), Just(length), transfers)
        })
        .prop_map(|(n, length, transfers)| {
            let mut weights: Vec<u32> = (0..n)
                .map(|i| length / n + u32::from(i < length % n))
                .collect();
            for (from, to, amount) in transfers {
                let (from, to) = (from as usize, to as usize);
                let amount = amount.min(weights[from] - 1).min(MAX_WEIGHT - weights[to]);
                weights[from] -= amount;
                weights[to] += amount;
            }
            weights
                .into_iter()
                .enumerate()
                .map(|(i, w)| (format!("t{i}"), w))
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|weights| (Just(weights.clone()), Just(weights).prop_shuffle()))
}

/// One heavy tenant among 1..=1023 weight-1 tenants, or one weight-2
/// tenant among them: the lockstep shapes.
fn lockstep() -> impl Strategy<Value = (Weights, Weights)> {
    (
        1..=1023_u32,
        2..=MAX_WEIGHT,
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(lights, heavy, weight_two, at)| {
            let heavy = if weight_two {
                2
            } else {
                heavy.min(MAX_CYCLE_LENGTH - lights)
            };
            let mut weights: Vec<u32> = vec![1; lights as usize];
            weights.insert(at.index(weights.len() + 1), heavy);
            weights
                .into_iter()
                .enumerate()
                .map(|(i, w)| (format!("t{i:04}"), w))
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|weights| (Just(weights.clone()), Just(weights).prop_shuffle()))
}

/// 2..=200 tenants with weights from a few distinct values, so that weight
/// classes have many members.
fn few_weights() -> impl Strategy<Value = (Weights, Weights)> {
    (prop::collection::vec(1..=20_u32, 1..=4), 2..=200_usize)
        .prop_flat_map(|(values, n)| prop::collection::vec(prop::sample::select(values), n))
        .prop_map(|weights| {
            let mut total = 0;
            weights
                .into_iter()
                .take_while(|w| {
                    total += w;
                    total <= MAX_CYCLE_LENGTH
                })
                .enumerate()
                .map(|(i, w)| (format!("t{i:04}"), w))
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|weights| (Just(weights.clone()), Just(weights).prop_shuffle()))
}

/// A small policy's canonical bytes with a few random byte edits.
fn mutated_canonical() -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec((0..3_u8, any::<prop::sample::Index>(), any::<u8>()), 1..4);
    (small(), edits).prop_map(|((weights, _), edits)| {
        let mut bytes = build(&weights).canonical_bytes().to_vec();
        for (kind, index, byte) in edits {
            let at = index.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => bytes[at] = byte,
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.push(byte),
            }
        }
        bytes
    })
}

/// Text shaped like canonical bytes, with odd ids, weights and commas.
fn canonical_looking() -> impl Strategy<Value = String> {
    r#"\{"algorithm":"swrr-v1","tenants":\[(\{"id":"[a-c.]{0,3}","weight":[0-9]{1,5}\},?){0,4}\]\}"#
}

proptest! {
    #[test]
    fn small_policies((weights, shuffled) in small()) {
        check_policy(&weights, &shuffled);
    }

    #[test]
    fn decode_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_decode(&bytes);
    }

    #[test]
    fn decode_canonical_looking_bytes(
        bytes in canonical_looking()
    ) {
        check_decode(bytes.as_bytes());
    }

    #[test]
    fn decode_mutated_canonical_bytes(bytes in mutated_canonical()) {
        check_decode(&bytes);
    }

    #[test]
    fn ids_follow_the_grammar(text in any::<String>()) {
        let bytes = text.as_bytes();
        let valid = (1..=128).contains(&bytes.len())
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(b))
            && text != "."
            && text != "..";
        let parsed = TenantId::try_from(text.as_str());
        prop_assert_eq!(parsed.is_ok(), valid);
        if let Err(error) = parsed {
            let is_tenant_error = matches!(error, PolicyError::InvalidTenantId { .. });
            prop_assert!(is_tenant_error, "{:?}", error);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn near_the_tenant_limit((weights, shuffled) in many_tenants()) {
        check_policy(&weights, &shuffled);
    }

    #[test]
    fn near_the_cycle_limit((weights, shuffled) in long_cycle()) {
        check_policy(&weights, &shuffled);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn min_gap_small_policies((weights, shuffled) in small()) {
        check_min_gap(&weights, &shuffled);
    }

    #[test]
    fn min_gap_few_weights((weights, shuffled) in few_weights()) {
        check_min_gap(&weights, &shuffled);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn min_gap_lockstep((weights, shuffled) in lockstep()) {
        check_min_gap(&weights, &shuffled);
    }

    #[test]
    fn min_gap_near_the_tenant_limit((weights, shuffled) in many_tenants()) {
        check_min_gap(&weights, &shuffled);
    }

    #[test]
    fn min_gap_near_the_cycle_limit((weights, shuffled) in long_cycle()) {
        check_min_gap(&weights, &shuffled);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn min_gap_v2_small_policies((weights, shuffled) in small()) {
        check_min_gap_v2(&weights, &shuffled);
    }

    #[test]
    fn min_gap_v2_few_weights((weights, shuffled) in few_weights()) {
        check_min_gap_v2(&weights, &shuffled);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn min_gap_v2_lockstep((weights, shuffled) in lockstep()) {
        check_min_gap_v2(&weights, &shuffled);
    }

    #[test]
    fn min_gap_v2_near_the_tenant_limit((weights, shuffled) in many_tenants()) {
        check_min_gap_v2(&weights, &shuffled);
    }

    #[test]
    fn min_gap_v2_near_the_cycle_limit((weights, shuffled) in long_cycle()) {
        check_min_gap_v2(&weights, &shuffled);
    }
}
