//! Window discrepancy against a brute force over every window.

#![allow(clippy::unwrap_used)]

use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

/// `max (L · n(window) − length · w)` and its opposite over every window
/// of one lap's starts and lengths `1..=L`: (excess, deficit), scaled by L.
fn brute(cycle: &[u16], tenant: u16, w: u32) -> (u64, u64) {
    let l = cycle.len();
    let (mut excess, mut deficit) = (0_i64, 0_i64);
    for start in 0..l {
        let mut n = 0_i64;
        for len in 1..=l {
            if cycle[(start + len - 1) % l] == tenant {
                n += 1;
            }
            let d = l as i64 * n - len as i64 * i64::from(w);
            excess = excess.max(d);
            deficit = deficit.max(-d);
        }
    }
    (excess.unsigned_abs(), deficit.unsigned_abs())
}

fn policy(weights: &[u32], algorithm: PolicyAlgorithm) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::with_algorithm(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        algorithm,
        weights.iter().enumerate().map(|(i, &w)| {
            TenantFairnessWeight::new(TenantId::try_from(format!("tenant-{i:02}")).unwrap(), w)
                .unwrap()
        }),
    )
    .unwrap()
}

#[test]
fn every_algorithm_matches_the_brute_force_over_every_window() {
    let sets: [&[u32]; 6] = [
        &[3, 1],
        &[5, 3, 2],
        &[8, 8, 8, 1, 1],
        &[7, 4, 4, 2, 1, 1, 1],
        &[1, 1, 1, 1, 1, 1, 1, 1],
        &[13, 6, 5, 3, 2, 1],
    ];
    for weights in sets {
        for algorithm in [
            PolicyAlgorithm::SwrrV1,
            PolicyAlgorithm::MinGapV1,
            PolicyAlgorithm::MinGapV2,
        ] {
            let policy = policy(weights, algorithm);
            let cycle = policy.cycle_tenant_indexes();
            for (i, d) in policy.window_discrepancies().enumerate() {
                let (excess, deficit) = brute(cycle, i as u16, d.weight());
                assert_eq!(
                    (d.scaled(), d.scaled()),
                    (excess, deficit),
                    "{weights:?} {algorithm:?} tenant {i}"
                );
                // A gap of `bound` reservations holds `bound − 1`
                // slots without a pick: a deficit of that many shares.
                let bound = policy.starvation_bound_at(i).unwrap();
                let gap = u64::from(bound.maximum_reservations_until_selection() - 1);
                assert!(d.scaled() >= gap * u64::from(d.weight()), "{weights:?}");
            }
        }
    }
}

#[test]
fn a_tenant_is_looked_up_by_id() {
    let p = policy(&[3, 1], PolicyAlgorithm::SwrrV1);
    let b = p
        .window_discrepancy(&TenantId::try_from("tenant-01").unwrap())
        .unwrap();
    assert_eq!(
        (
            b.tenant().as_str(),
            b.weight(),
            b.cycle_length(),
            b.scaled()
        ),
        ("tenant-01", 1, 4, 3)
    );
    assert_eq!(b.slots(), 0.75);
    assert_eq!(
        p.window_discrepancy(&TenantId::try_from("nobody").unwrap()),
        None
    );
}
