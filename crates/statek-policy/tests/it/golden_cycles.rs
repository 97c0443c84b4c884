//! Golden cycles: the cycle digest of fixed policies under every algorithm,
//! frozen. Replicas compile their cycles independently, so an algorithm's
//! output must never change: any change to it fails here, and needs a new
//! algorithm name instead (a shard stores its cycle digest and refuses a
//! replica that compiles another cycle).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

/// The fixed weight sets, tenants `t0000, t0001, …` in this order.
fn sets() -> Vec<(&'static str, Vec<u32>)> {
    let mut lockstep = vec![2];
    lockstep.extend(std::iter::repeat_n(1, 1022));
    vec![
        ("known vector 3, 1", vec![3, 1]),
        ("5, 2, 1", vec![5, 2, 1]),
        ("10, 5, 4, 1", vec![10, 5, 4, 1]),
        ("two near-equal heavy", vec![659, 618, 455, 63, 1]),
        ("lockstep 2 + 1022 x 1", lockstep),
        ("1024 tenants, 1-4", (0..1024).map(|i| i % 4 + 1).collect()),
        ("90 distinct, L = 4095", (1..=90).collect()),
    ]
}

fn policy(algorithm: PolicyAlgorithm, weights: &[u32]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from("golden-v1").unwrap(),
        algorithm,
        weights.iter().enumerate().map(|(i, &w)| {
            TenantFairnessWeight::new(TenantId::try_from(format!("t{i:04}")).unwrap(), w).unwrap()
        }),
    )
    .unwrap()
}

/// (set, algorithm, cycle digest).
const GOLDEN: &[(&str, &str, &str)] = &[
    (
        "known vector 3, 1",
        "swrr-v1",
        "a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440",
    ),
    (
        "known vector 3, 1",
        "min-gap-v1",
        "43e782592c7340bf471031c069ffa6d6804530869d99ec3be357ac7765c0fb44",
    ),
    (
        "known vector 3, 1",
        "min-gap-v2",
        "5dc00cf1599e28e350a7eb5f1151a63fc0a78d5290324424e003e01c5ca6fcbc",
    ),
    (
        "5, 2, 1",
        "swrr-v1",
        "9ea84964be0f7608c0ee2500ab3013b89216eea7d1211e83d57c1a5546436a93",
    ),
    (
        "5, 2, 1",
        "min-gap-v1",
        "4afb00a49c1897d2eaa1d2e486c093b25f035511d2707880a26fb0ce30ec110a",
    ),
    (
        "5, 2, 1",
        "min-gap-v2",
        "b77f1756cc60ddad5732be2b7b9c419878a3daa8899b1446a585f10eab6c7aa2",
    ),
    (
        "10, 5, 4, 1",
        "swrr-v1",
        "7c1a30648fca89d2e0cde661ca2d8abf8013578d0955e61249d02ed223b2f789",
    ),
    (
        "10, 5, 4, 1",
        "min-gap-v1",
        "9a801c05cf0374fdb76307be20fddfd55e8483c0e696606d2a92cff33b97335a",
    ),
    (
        "10, 5, 4, 1",
        "min-gap-v2",
        "86713736c5f02c363077cde3dd5c54648df55a2963b54f38272e3f0bbe8d5bbe",
    ),
    (
        "two near-equal heavy",
        "swrr-v1",
        "d38c71413d541dddc5dde7c7cb183572bd297c4e3ca94a5a3b5484a6f9b1c4e6",
    ),
    (
        "two near-equal heavy",
        "min-gap-v1",
        "e9dc7e5d589140ee13added1ffd148878e6b00a9fcc3b5c24efdba44a16bd130",
    ),
    (
        "two near-equal heavy",
        "min-gap-v2",
        "adc925f30aab1757201114fd4c91d6e3e0739ec6e188322df08386b7c29c4e01",
    ),
    (
        "lockstep 2 + 1022 x 1",
        "swrr-v1",
        "377e044a4a66989efd105ad45cfe10f16f3fb8a24ba38f70a7a8a46c5b054d54",
    ),
    (
        "lockstep 2 + 1022 x 1",
        "min-gap-v1",
        "96399007bf9e249d7503358e4600f3a8e6c4ce485c46667bf28d358c6f125639",
    ),
    (
        "lockstep 2 + 1022 x 1",
        "min-gap-v2",
        "0576f51bbe397cfae1c6fbe081713ecfc751389cf08af8e75c98c2e83b312bc0",
    ),
    (
        "1024 tenants, 1-4",
        "swrr-v1",
        "5c6c323e8718d58b14d86399c8a063b6be1d84b9be51c08b8052571abe4c53d5",
    ),
    (
        "1024 tenants, 1-4",
        "min-gap-v1",
        "d8280e3941c4f954aa284b02562eddc4f7cd8e6ebd30c83afcad72ae1d5ba62e",
    ),
    (
        "1024 tenants, 1-4",
        "min-gap-v2",
        "6e2c463ddd67ba07e314eb94c9cbf3ae5484d39b489b94f20c691702e684195c",
    ),
    (
        "90 distinct, L = 4095",
        "swrr-v1",
        "6445b2f0da2c88392e131d66b5b681a97c45f117cb9d91435fe512bff013e695",
    ),
    (
        "90 distinct, L = 4095",
        "min-gap-v1",
        "0f1b82a2f8a3d8c443a80f50a3dab73ed1d5bb415b24b76cd804483e5f7fc5cf",
    ),
    (
        "90 distinct, L = 4095",
        "min-gap-v2",
        "90ea192690238d2c39020de7bd065a99ad9ebdb020966b1713fc8171782a5069",
    ),
];

#[test]
fn cycle_digests_are_frozen() {
    let mut actual = Vec::new();
    for (name, weights) in sets() {
        for &algorithm in PolicyAlgorithm::ALL {
            let digest = policy(algorithm, &weights).cycle_digest().to_string();
            actual.push((name, algorithm.name(), digest));
        }
    }
    let expected: Vec<(&str, &str, String)> = GOLDEN
        .iter()
        .map(|&(name, algorithm, digest)| (name, algorithm, digest.to_owned()))
        .collect();
    let listing: String = actual
        .iter()
        .map(|(name, algorithm, digest)| format!("    ({name:?}, {algorithm:?}, {digest:?}),\n"))
        .collect();
    assert_eq!(
        actual, expected,
        "an algorithm's output changed; existing algorithms must never change \
         (add a new algorithm name instead). Now:\n{listing}"
    );
}

#[test]
fn the_known_vector_digest_is_independent_of_this_crate() {
    // printf 'statek.cycle.v1\0swrr-v1\0\0\0\0\4\0\0\0\0\0\1\0\0' | sha256sum
    assert_eq!(
        policy(PolicyAlgorithm::SwrrV1, &[3, 1])
            .cycle_digest()
            .to_string(),
        "a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440"
    );
}
