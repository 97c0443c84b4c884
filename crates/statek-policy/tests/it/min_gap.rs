//! `min-gap-v1`: the lockstep shape it exists for, exact cycles and bounds,
//! and how its name separates its policies from `swrr-v1`'s.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{
    PolicyAlgorithm, PolicyError, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy,
};

fn shard() -> SchedulerShardId {
    SchedulerShardId::try_from("primary-v1").unwrap()
}

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn weights(pairs: &[(&str, u32)]) -> Vec<TenantFairnessWeight> {
    pairs
        .iter()
        .map(|(id, weight)| TenantFairnessWeight::new(tenant(id), *weight).unwrap())
        .collect()
}

fn build(
    algorithm: PolicyAlgorithm,
    tenants: &[TenantFairnessWeight],
) -> Result<WeightedFairnessPolicy, PolicyError> {
    WeightedFairnessPolicy::with_algorithm(shard(), algorithm, tenants.to_vec())
}

fn bound(policy: &WeightedFairnessPolicy, id: &str) -> u32 {
    policy
        .starvation_bound(&tenant(id))
        .unwrap()
        .maximum_reservations_until_selection()
}

/// `heavy` of weight 2 and `light-0000`… of weight 1, `L = 2 + lights`.
fn lockstep(lights: usize) -> Vec<TenantFairnessWeight> {
    let mut tenants: Vec<TenantFairnessWeight> = (0..lights)
        .map(|i| {
            TenantFairnessWeight::new(TenantId::try_from(format!("light-{i:04}")).unwrap(), 1)
                .unwrap()
        })
        .collect();
    tenants.push(TenantFairnessWeight::new(tenant("heavy"), 2).unwrap());
    tenants
}

#[test]
fn one_weight_two_tenant_among_1022_weight_one_tenants() {
    let tenants = lockstep(1022);
    let swrr = build(PolicyAlgorithm::SwrrV1, &tenants).unwrap();
    let min_gap = build(PolicyAlgorithm::MinGapV1, &tenants).unwrap();
    assert_eq!((swrr.cycle_length(), min_gap.cycle_length()), (1024, 1024));
    // swrr-v1: the 1,022 light tenants grow in lockstep and out-vote the
    // heavy one until its score is far ahead; its picks are 1,023 apart.
    assert_eq!(bound(&swrr, "heavy"), 1023);
    // min-gap-v1: 512, the ideal ceil(1024 / 2).
    assert_eq!(bound(&min_gap, "heavy"), 512);
    let heavy = min_gap.starvation_bound(&tenant("heavy")).unwrap();
    assert_eq!(heavy.ideal_reservations_until_selection(), 512);
    // The light tenants' bound is the cycle either way.
    assert_eq!(bound(&swrr, "light-0000"), 1024);
    assert_eq!(bound(&min_gap, "light-0000"), 1024);
    assert_eq!(bound(&min_gap, "light-1021"), 1024);
    assert_eq!(min_gap.algorithm(), PolicyAlgorithm::MinGapV1);
}

#[test]
fn lockstep_shapes_are_ideal() {
    for lights in [1, 2, 3, 10, 100, 1000, 1022] {
        let tenants = lockstep(lights);
        let policy = build(PolicyAlgorithm::MinGapV1, &tenants).unwrap();
        for bound in policy.starvation_bounds() {
            assert_eq!(
                bound.maximum_reservations_until_selection(),
                bound.ideal_reservations_until_selection(),
                "{lights}: {}",
                bound.tenant()
            );
        }
    }
}

/// The cycle (ids joined by spaces) and every tenant's bound under
/// `min-gap-v1`, next to the `swrr-v1` bounds.
fn check(pairs: &[(&str, u32)], cycle: &str, bounds: &[u32], swrr_bounds: &[u32]) {
    let tenants = weights(pairs);
    let policy = build(PolicyAlgorithm::MinGapV1, &tenants).unwrap();
    let ids: Vec<&str> = policy.cycle().iter().map(TenantId::as_str).collect();
    assert_eq!(ids.join(" "), cycle, "{pairs:?}");
    let measured: Vec<u32> = policy
        .starvation_bounds()
        .map(|b| b.maximum_reservations_until_selection())
        .collect();
    assert_eq!(measured, bounds, "{pairs:?}");
    let swrr = build(PolicyAlgorithm::SwrrV1, &tenants).unwrap();
    let measured: Vec<u32> = swrr
        .starvation_bounds()
        .map(|b| b.maximum_reservations_until_selection())
        .collect();
    assert_eq!(measured, swrr_bounds, "{pairs:?}");
}

#[test]
fn cycles() {
    // The known vector is already ideal, so min-gap-v1 keeps swrr-v1's cycle.
    check(
        &[("tenant-a", 3), ("tenant-b", 1)],
        "tenant-a tenant-a tenant-b tenant-a",
        &[2, 4],
        &[2, 4],
    );
    check(&[("a", 1)], "a", &[1], &[1]);
    check(&[("a", 2), ("b", 2)], "a b a b", &[2, 2], &[2, 2]);
    // swrr-v1's 3/2 (a: 3 against 2) becomes 4/3 (b: 4 against 3), which
    // no cycle beats.
    check(
        &[("a", 3), ("b", 2), ("c", 1)],
        "a b a b a c",
        &[2, 4, 6],
        &[3, 3, 6],
    );
    // Class SWRR: b (weight 2) against the class of a, c, d, e (weight 4).
    check(
        &[("a", 1), ("b", 2), ("c", 1), ("d", 1), ("e", 1)],
        "a b c d b e",
        &[6, 3, 6, 6, 6],
        &[6, 5, 6, 6, 6],
    );
    // Nothing beats swrr-v1's 3/2 here (b: 6 against 4).
    check(
        &[("a", 10), ("b", 5), ("c", 4), ("d", 1)],
        "a b c a a b a c a b d a c a b a a c b a",
        &[3, 5, 5, 20],
        &[3, 5, 5, 20],
    );
}

#[test]
fn algorithms_have_different_bytes_and_digests() {
    let tenants = weights(&[("tenant-b", 1), ("tenant-a", 3)]);
    let swrr = build(PolicyAlgorithm::SwrrV1, &tenants).unwrap();
    let min_gap = build(PolicyAlgorithm::MinGapV1, &tenants).unwrap();
    assert_eq!(
        swrr.canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    assert_eq!(
        min_gap.canonical_bytes(),
        br#"{"algorithm":"min-gap-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    // Same tenants, same weights, here even the same cycle: still two
    // different policies, which a shard bound to one refuses to swap for
    // the other.
    assert_eq!(swrr.cycle_tenant_indexes(), min_gap.cycle_tenant_indexes());
    assert_ne!(swrr.digest(), min_gap.digest());
    assert_ne!(swrr, min_gap);
    // printf 'statek.policy.v1\0{"algorithm":"min-gap-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}' | sha256sum
    assert_eq!(
        min_gap.digest().to_string(),
        "da0f9c1e849ca76e961bd117162eadc98ca5c9656ce4bc5cee3e1cd283457431"
    );

    // Both decode strictly and round-trip to their own algorithm.
    let decoded = WeightedFairnessPolicy::decode(shard(), min_gap.canonical_bytes()).unwrap();
    assert_eq!(decoded, min_gap);
    assert_eq!(decoded.algorithm(), PolicyAlgorithm::MinGapV1);
    let decoded = WeightedFairnessPolicy::decode(shard(), swrr.canonical_bytes()).unwrap();
    assert_eq!(decoded, swrr);
    assert_eq!(decoded.algorithm(), PolicyAlgorithm::SwrrV1);

    // Where the cycles differ, the bytes still differ only in the name.
    let lockstep = lockstep(1022);
    let swrr = build(PolicyAlgorithm::SwrrV1, &lockstep).unwrap();
    let min_gap = build(PolicyAlgorithm::MinGapV1, &lockstep).unwrap();
    assert_ne!(swrr.cycle_tenant_indexes(), min_gap.cycle_tenant_indexes());
    assert_ne!(swrr.digest(), min_gap.digest());
    assert_ne!(swrr, min_gap);
    let swrr_text = String::from_utf8(swrr.canonical_bytes().to_vec()).unwrap();
    let min_gap_text = String::from_utf8(min_gap.canonical_bytes().to_vec()).unwrap();
    assert_eq!(
        swrr_text.replacen("\"swrr-v1\"", "\"min-gap-v1\"", 1),
        min_gap_text
    );
}

#[test]
fn rejected_names() {
    let canonical = r#"{"algorithm":"min-gap-v1","tenants":[{"id":"a","weight":1}]}"#;
    for name in [
        "min-gap-v3",
        "MIN-GAP-V1",
        "min-gap",
        "min_gap_v1",
        "min-gap-v1 ",
    ] {
        let bytes = canonical.replacen("min-gap-v1", name, 1);
        assert_eq!(
            WeightedFairnessPolicy::decode(shard(), bytes.as_bytes()),
            Err(PolicyError::UnknownAlgorithm { name: name.into() }),
            "{name}"
        );
    }
    assert!(WeightedFairnessPolicy::decode(shard(), canonical.as_bytes()).is_ok());
}
