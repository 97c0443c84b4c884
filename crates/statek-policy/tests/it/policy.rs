//! Building policies: validation, the known vector, hand-checked cycles and
//! the accessors.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{
    PolicyAlgorithm, PolicyDigest, PolicyError, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy, MAX_CYCLE_LENGTH, MAX_TENANTS, MAX_WEIGHT, MIN_WEIGHT,
};

/// `printf 'statek.policy.v1\0{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}' | sha256sum`
const KNOWN_DIGEST: &str = "6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965";

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn build(weights: &[(&str, u32)]) -> Result<WeightedFairnessPolicy, PolicyError> {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        weights
            .iter()
            .map(|(id, w)| TenantFairnessWeight::new(tenant(id), *w).unwrap()),
    )
}

/// `n` tenants `t0000…` of weight `w` each.
fn uniform(n: usize, w: u32) -> Vec<(String, u32)> {
    (0..n).map(|i| (format!("t{i:04}"), w)).collect()
}

fn build_owned(weights: &[(String, u32)]) -> Result<WeightedFairnessPolicy, PolicyError> {
    let borrowed: Vec<(&str, u32)> = weights.iter().map(|(id, w)| (id.as_str(), *w)).collect();
    build(&borrowed)
}

/// Checks the cycle (ids joined by spaces) and every tenant's bound, in id
/// order.
fn check(weights: &[(&str, u32)], cycle: &str, bounds: &[(&str, u32)]) {
    let policy = build(weights).unwrap();
    let ids: Vec<&str> = policy.cycle().iter().map(TenantId::as_str).collect();
    assert_eq!(ids.join(" "), cycle, "{weights:?}");
    let measured: Vec<(&str, u32)> = policy
        .tenants()
        .iter()
        .map(|t| {
            let bound = policy.starvation_bound(t.tenant()).unwrap();
            (
                t.tenant().as_str(),
                bound.maximum_reservations_until_selection(),
            )
        })
        .collect();
    assert_eq!(measured, bounds, "{weights:?}");
}

fn check_error(weights: &[(&str, u32)], expected: PolicyError) {
    assert_eq!(build(weights), Err(expected), "{weights:?}");
}

#[test]
fn constants() {
    assert_eq!(
        (MIN_WEIGHT, MAX_WEIGHT, MAX_TENANTS, MAX_CYCLE_LENGTH),
        (1, 1024, 1024, 4096)
    );
    assert!(!PolicyError::NoTenants.is_retryable());
}

#[test]
fn cycles() {
    check(
        &[("tenant-a", 3), ("tenant-b", 1)],
        "tenant-a tenant-a tenant-b tenant-a",
        &[("tenant-a", 2), ("tenant-b", 4)],
    );
    check(
        &[("tenant-b", 1), ("tenant-a", 3)],
        "tenant-a tenant-a tenant-b tenant-a",
        &[("tenant-a", 2), ("tenant-b", 4)],
    );
    check(&[("a", 1)], "a", &[("a", 1)]);
    check(&[("a", 1024)], &vec!["a"; 1024].join(" "), &[("a", 1)]);
    check(&[("a", 1), ("b", 1)], "a b", &[("a", 2), ("b", 2)]);
    check(&[("b", 1), ("a", 1)], "a b", &[("a", 2), ("b", 2)]);
    check(
        &[("a", 1), ("b", 1), ("c", 1)],
        "a b c",
        &[("a", 3), ("b", 3), ("c", 3)],
    );
    check(&[("a", 2), ("b", 1)], "a b a", &[("a", 2), ("b", 3)]);
    check(&[("a", 1), ("b", 2)], "b a b", &[("a", 3), ("b", 2)]);
    check(&[("a", 1), ("b", 3)], "b a b b", &[("a", 4), ("b", 2)]);
    check(&[("a", 2), ("b", 2)], "a b a b", &[("a", 2), ("b", 2)]);
    check(
        &[("a", 4), ("b", 3)],
        "a b a b a b a",
        &[("a", 2), ("b", 3)],
    );
    check(
        &[("a", 5), ("b", 1), ("c", 1)],
        "a a b a c a a",
        &[("a", 2), ("b", 7), ("c", 7)],
    );
    // b waits up to 5 slots although ceil(8 / 2) = 4.
    check(
        &[("a", 5), ("b", 2), ("c", 1)],
        "a b a a c a b a",
        &[("a", 2), ("b", 5), ("c", 8)],
    );
    // b waits up to 6 slots although ceil(9 / 2) = 5.
    check(
        &[("a", 6), ("b", 2), ("c", 1)],
        "a b a a c a a b a",
        &[("a", 2), ("b", 6), ("c", 9)],
    );
    // Ties go to the id that sorts first by raw bytes: "B" < "a".
    check(&[("a", 1), ("B", 1)], "B a", &[("B", 2), ("a", 2)]);
}

#[test]
fn validation() {
    check_error(&[], PolicyError::NoTenants);
    check_error(
        &[("a", 1), ("a", 1)],
        PolicyError::DuplicateTenant {
            tenant: tenant("a"),
        },
    );
    check_error(
        &[("b", 1), ("a", 2), ("b", 3)],
        PolicyError::DuplicateTenant {
            tenant: tenant("b"),
        },
    );
    check_error(
        &[("c", 1), ("c", 1), ("b", 1), ("b", 2)],
        PolicyError::DuplicateTenant {
            tenant: tenant("b"),
        },
    );
    check_error(
        &[("a", 1024), ("b", 1024), ("c", 1024), ("d", 1024), ("e", 1)],
        PolicyError::CycleTooLong {
            max: 4096,
            actual: 4097,
        },
    );
    check_error(
        &[
            ("a", 1024),
            ("b", 1024),
            ("c", 1024),
            ("d", 1024),
            ("e", 1024),
        ],
        PolicyError::CycleTooLong {
            max: 4096,
            actual: 5120,
        },
    );
    assert_eq!(
        build(&[("a", 1024), ("b", 1024), ("c", 1024), ("d", 1024)])
            .unwrap()
            .cycle_length(),
        4096
    );
    assert_eq!(
        build(&[("a", 1024), ("b", 1024), ("c", 1024), ("d", 1023), ("e", 1)])
            .unwrap()
            .cycle_length(),
        4096
    );
    assert_eq!(
        build_owned(&uniform(1024, 1)).unwrap().tenants().len(),
        1024
    );
    assert_eq!(build_owned(&uniform(1024, 4)).unwrap().cycle_length(), 4096);
    assert_eq!(
        build_owned(&uniform(1025, 1)),
        Err(PolicyError::TooManyTenants {
            max: 1024,
            actual: 1025
        })
    );
    assert_eq!(
        build_owned(&uniform(5000, 1)),
        Err(PolicyError::TooManyTenants {
            max: 1024,
            actual: 5000
        })
    );
    assert_eq!(
        build_owned(&uniform(1024, 5)),
        Err(PolicyError::CycleTooLong {
            max: 4096,
            actual: 5120
        })
    );
    // Too many tenants is reported before duplicates.
    let mut with_duplicate = uniform(1025, 1);
    with_duplicate[1] = with_duplicate[0].clone();
    assert_eq!(
        build_owned(&with_duplicate),
        Err(PolicyError::TooManyTenants {
            max: 1024,
            actual: 1025
        })
    );
    // Duplicates are reported before the cycle length.
    check_error(
        &[
            ("a", 1024),
            ("a", 1024),
            ("c", 1024),
            ("d", 1024),
            ("e", 1024),
        ],
        PolicyError::DuplicateTenant {
            tenant: tenant("a"),
        },
    );
}

/// `printf 'statek.cycle.v1\0swrr-v1\0\0\0\0\4\0\0\0\0\0\1\0\0' | sha256sum`: the
/// cycle `[a, a, b, a]` as tenant indexes `0, 0, 1, 0`.
const KNOWN_CYCLE_DIGEST: &str = "a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440";

#[test]
fn known_vector_accessors() {
    let policy = build(&[("tenant-b", 1), ("tenant-a", 3)]).unwrap();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    assert_eq!(policy.shard_id().as_str(), "primary-v1");
    assert_eq!(policy.algorithm(), PolicyAlgorithm::SwrrV1);
    let tenants: Vec<(&str, u32)> = policy
        .tenants()
        .iter()
        .map(|t| (t.tenant().as_str(), t.weight()))
        .collect();
    assert_eq!(tenants, [("tenant-a", 3), ("tenant-b", 1)]);
    assert_eq!(policy.tenant_index(&a), Some(0));
    assert_eq!(policy.tenant_index(&b), Some(1));
    assert_eq!(policy.tenant_index(&tenant("tenant-c")), None);
    assert_eq!(policy.cycle_tenant_indexes(), [0, 0, 1, 0]);
    assert_eq!(policy.cycle().len(), 4);
    assert_eq!(
        policy.cycle().iter().rev().collect::<Vec<_>>(),
        [&a, &b, &a, &a]
    );
    assert_eq!(policy.cycle().tenant_indexes(), [0, 0, 1, 0]);
    assert_eq!(
        (policy.cycle().get(2), policy.cycle().get(4)),
        (Some(&b), None)
    );
    assert!(!policy.cycle().is_empty());
    let mut walked = Vec::new();
    for tenant in policy.cycle() {
        walked.push(tenant.as_str());
    }
    assert_eq!(walked, ["tenant-a", "tenant-a", "tenant-b", "tenant-a"]);
    assert_eq!(policy.cycle_length(), 4);
    let slots: Vec<Option<&TenantId>> = [0, 1, 2, 3, 4, 5, u64::MAX]
        .iter()
        .map(|&s| policy.tenant_for_slot(s))
        .collect();
    assert_eq!(
        slots,
        [Some(&a), Some(&a), Some(&b), Some(&a), None, None, None]
    );
    assert_eq!(
        [0, 3, 4, 6, u64::MAX].map(|n| policy.slot_for_sequence(n)),
        [0, 3, 0, 2, 3]
    );
    let bound = policy.starvation_bound(&b).unwrap();
    assert_eq!(
        (
            bound.tenant(),
            bound.weight(),
            bound.cycle_length(),
            bound.maximum_reservations_until_selection()
        ),
        (&b, 1, 4, 4)
    );
    let bound = policy.starvation_bound(&a).unwrap();
    assert_eq!(
        (
            bound.tenant(),
            bound.weight(),
            bound.cycle_length(),
            bound.maximum_reservations_until_selection()
        ),
        (&a, 3, 4, 2)
    );
    assert_eq!(policy.starvation_bound(&tenant("tenant-c")), None);
    let all: Vec<(String, u32)> = policy
        .starvation_bounds()
        .map(|b| {
            (
                b.tenant().to_string(),
                b.maximum_reservations_until_selection(),
            )
        })
        .collect();
    assert_eq!(
        all,
        [("tenant-a".to_string(), 2), ("tenant-b".to_string(), 4)]
    );
    assert_eq!(policy.entitled_share(&a), Some((3, 4)));
    assert_eq!(policy.entitled_share(&b), Some((1, 4)));
    assert_eq!(policy.entitled_share(&tenant("tenant-c")), None);
    assert_eq!(
        policy.canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    assert_eq!(policy.digest().to_string(), KNOWN_DIGEST);
    assert_eq!(
        policy.digest(),
        KNOWN_DIGEST.parse::<PolicyDigest>().unwrap()
    );
    assert_eq!(
        format!("{policy:?}"),
        format!(
            "WeightedFairnessPolicy {{ shard: SchedulerShardId(\"primary-v1\"), algorithm: SwrrV1, tenants: [\
             TenantFairnessWeight {{ tenant: TenantId(\"tenant-a\"), weight: 3 }}, \
             TenantFairnessWeight {{ tenant: TenantId(\"tenant-b\"), weight: 1 }}], \
             cycle_length: 4, fairness: Slots, digest: PolicyDigest({KNOWN_DIGEST}), \
             cycle_digest: CycleDigest({KNOWN_CYCLE_DIGEST}), .. }}"
        )
    );
    assert_eq!(policy.cycle_digest().to_string(), KNOWN_CYCLE_DIGEST);
}

#[test]
fn equality_and_digest() {
    let policy = build(&[("tenant-a", 3), ("tenant-b", 1)]).unwrap();
    assert_eq!(policy.clone(), policy);
    let explicit = WeightedFairnessPolicy::with_algorithm(
        policy.shard_id().clone(),
        PolicyAlgorithm::SwrrV1,
        policy.tenants().to_vec(),
    )
    .unwrap();
    assert_eq!(explicit, policy);
    let reweighted = build(&[("tenant-a", 2), ("tenant-b", 1)]).unwrap();
    assert_ne!(reweighted, policy);
    assert_ne!(reweighted.digest(), policy.digest());
    assert_eq!(
        reweighted.canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":2},{"id":"tenant-b","weight":1}]}"#
    );
}

/// `pick` is the one sequence -> (slot, tenant index, tenant) mapping: it
/// agrees with `slot_of`, the cycle's stored indexes and the bound by index.
#[test]
fn pick_of_a_sequence() {
    let check = |weights: &[(&str, u32)], sequence: u64, slot: u32, index: usize, id: &str| {
        let policy = build(weights).unwrap();
        let pick = policy.pick(sequence).unwrap();
        assert_eq!(
            (
                pick.sequence(),
                pick.slot(),
                pick.tenant_index(),
                pick.tenant().as_str()
            ),
            (sequence, slot, index, id),
            "{weights:?} sequence {sequence}"
        );
        assert_eq!(
            statek_policy::slot_of(sequence, policy.cycle_length()),
            slot
        );
        assert_eq!(
            policy.starvation_bound_at(index),
            policy.starvation_bound(&tenant(id))
        );
    };
    let ab = [("tenant-a", 3), ("tenant-b", 1)];
    check(&ab, 0, 0, 0, "tenant-a");
    check(&ab, 2, 2, 1, "tenant-b");
    check(&ab, 6, 2, 1, "tenant-b");
    check(&ab, 7, 3, 0, "tenant-a");
    check(&ab, u64::MAX, 3, 0, "tenant-a");
    check(&[("x", 1)], 41, 0, 0, "x");
    check(&[("a", 1), ("b", 1), ("c", 1)], 5, 2, 2, "c");
    let policy = build(&ab).unwrap();
    assert_eq!(policy.starvation_bound_at(2), None);
    assert_eq!(statek_policy::slot_of(9, 0), 0);
}
