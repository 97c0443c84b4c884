//! The measurement code of `statek_policy::analysis` against the policies
//! it measures: the exhaustive optimum is never beaten, `min-gap-v2`
//! reaches it on short cycles, and the per-set measures agree with the
//! bounds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use statek_policy::analysis::{compositions, optimum, partitions, BoundRatio, Optimum, SetMeasure};
use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

fn build(algorithm: PolicyAlgorithm, weights: &[u32]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from("analysis-v1").unwrap(),
        algorithm,
        weights.iter().enumerate().map(|(i, &w)| {
            TenantFairnessWeight::new(TenantId::try_from(format!("t{i:04}")).unwrap(), w).unwrap()
        }),
    )
    .unwrap()
}

fn best(weights: &[u32]) -> BoundRatio {
    match optimum(weights, None, 50_000_000) {
        Optimum::Found { ratio, .. } => ratio,
        other => panic!("{weights:?}: {other:?}"),
    }
}

/// Every algorithm's largest ratio is at least the optimum; `min-gap-v2`'s
/// equals it for `L <= 16`; the measure's excess and within-one agree with
/// the bounds.
fn check(weights: &[u32]) {
    let length: u32 = weights.iter().sum();
    let optimal = best(weights);
    for &algorithm in PolicyAlgorithm::ALL {
        let policy = build(algorithm, weights);
        let measure = SetMeasure::of(&policy);
        assert!(
            !measure.largest_ratio().is_below(optimal),
            "{algorithm} beats the optimum on {weights:?}"
        );
        let excess = policy
            .starvation_bounds()
            .map(|b| {
                b.maximum_reservations_until_selection() - b.ideal_reservations_until_selection()
            })
            .max()
            .unwrap();
        assert_eq!(measure.largest_excess(), excess, "{weights:?}");
        assert_eq!(measure.within_one_slot(), excess <= 1, "{weights:?}");
        if algorithm == PolicyAlgorithm::MinGapV2 && length <= 16 {
            assert!(
                measure.largest_ratio().cmp_value(&optimal).is_eq(),
                "min-gap-v2 {:?} against the optimum {optimal:?} on {weights:?}",
                measure.largest_ratio()
            );
        }
    }
}

#[test]
fn every_id_order_up_to_l_9() {
    for length in 1..=9 {
        for weights in compositions(length) {
            check(&weights);
        }
    }
}

#[test]
fn known_optima_and_counts() {
    assert_eq!(partitions(12).len(), 77);
    assert_eq!(compositions(12).len(), 2048);
    assert!(best(&[3, 2, 1]).cmp_value(&BoundRatio::new(4, 3)).is_eq());
    assert!(best(&[10, 5, 4, 1])
        .cmp_value(&BoundRatio::new(3, 2))
        .is_eq());
    assert!(best(&[1, 2, 5, 7])
        .cmp_value(&BoundRatio::new(1, 1))
        .is_eq());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_short_cycles(weights in prop::collection::vec(1..=8_u32, 1..=6)) {
        let mut total = 0;
        let weights: Vec<u32> = weights
            .into_iter()
            .take_while(|w| {
                total += w;
                total <= 16
            })
            .collect();
        prop_assume!(!weights.is_empty());
        check(&weights);
    }
}
