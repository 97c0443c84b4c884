//! Policy compile time on the worst shapes of issue 6: 1024 tenants of
//! weight 4; one tenant of 1024 with 1023 of weight 3; random partitions of
//! 4096 into 1024 tenants; and two near-equal heavy tenants with small ones
//! at L = 4096. Each shape is measured as the whole
//! `WeightedFairnessPolicy::with_algorithm` (cycle, checks, bounds,
//! canonical bytes, digests) for every algorithm (`policy_new` is
//! `swrr-v1`), the reference SWRR loop alone, the grouped loop alone and the
//! loop compilation picks for the shape (`swrr_chosen`).
//!
//! Run: `cargo bench -p statek-policy --bench compile`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statek_policy::bench_kernels::{swrr, swrr_grouped, swrr_reference};
use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

/// A random composition of `total` into `parts` positive weights (each at
/// most 1024), from a fixed seed so every run measures the same shapes.
fn random_partition(rng: &mut StdRng, total: u32, parts: u32) -> Vec<u32> {
    loop {
        // `parts - 1` distinct cut points in 1..total.
        let mut cuts = std::collections::BTreeSet::new();
        while cuts.len() < usize::try_from(parts - 1).unwrap() {
            cuts.insert(rng.random_range(1..total));
        }
        let mut weights = Vec::with_capacity(usize::try_from(parts).unwrap());
        let mut previous = 0;
        for cut in cuts.into_iter().chain(std::iter::once(total)) {
            weights.push(cut - previous);
            previous = cut;
        }
        if weights.iter().all(|&w| w <= 1024) {
            return weights;
        }
    }
}

fn shapes() -> Vec<(String, Vec<u32>)> {
    let mut shapes = vec![
        ("1024x4".to_owned(), vec![4; 1024]),
        (
            "1x1024+1023x3".to_owned(),
            std::iter::once(1024)
                .chain(std::iter::repeat_n(3, 1023))
                .collect(),
        ),
    ];
    // All weights distinct: grouping cannot help, the reference loop is
    // chosen (`swrr_chosen` must match `swrr_reference`).
    shapes.push(("90-distinct-1..=90".to_owned(), (1..=90).collect()));
    // Two heavy tenants of nearly equal weight (ceil(L / w) = 4) with small
    // ones, at the cycle limit: the shape where min-gap-v1 reaches 5/3.
    shapes.push((
        "two-heavy-1024+1000+small-L4096".to_owned(),
        [1024, 1000, 900, 700, 300, 100, 50, 20, 2]
            .into_iter()
            .collect(),
    ));
    let mut rng = StdRng::seed_from_u64(0x5747_4154);
    for i in 0..3 {
        shapes.push((
            format!("partition-4096-into-1024-#{i}"),
            random_partition(&mut rng, 4096, 1024),
        ));
    }
    // Fewer, heavier tenants at L = 4096: the slowest min-gap-v1 and
    // min-gap-v2 compiles of the bounds report have 80-500 tenants.
    for parts in [96, 256, 480] {
        for i in 0..2 {
            shapes.push((
                format!("partition-4096-into-{parts}-#{i}"),
                random_partition(&mut rng, 4096, parts),
            ));
        }
    }
    shapes
}

fn policy(weights: &[u32]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("bench-v1").unwrap(),
        weights.iter().enumerate().map(|(i, &w)| {
            TenantFairnessWeight::new(TenantId::try_from(format!("t{i:04}").as_str()).unwrap(), w)
                .unwrap()
        }),
    )
    .unwrap()
}

fn compile(c: &mut Criterion) {
    for (name, weights) in shapes() {
        let length: u32 = weights.iter().sum();
        assert_eq!(
            swrr_grouped(&weights, length),
            swrr_reference(&weights, length)
        );
        let tenants: Vec<TenantFairnessWeight> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                TenantFairnessWeight::new(
                    TenantId::try_from(format!("t{i:04}").as_str()).unwrap(),
                    w,
                )
                .unwrap()
            })
            .collect();
        let shard = SchedulerShardId::try_from("bench-v1").unwrap();
        drop(policy(&weights));
        let mut group = c.benchmark_group(format!("compile/{name}"));
        group.bench_function("policy_new", |b| {
            b.iter(|| {
                WeightedFairnessPolicy::new(black_box(shard.clone()), black_box(tenants.clone()))
                    .unwrap()
            });
        });
        for algorithm in [PolicyAlgorithm::MinGapV1, PolicyAlgorithm::MinGapV2] {
            group.bench_function(
                format!("policy_{}", algorithm.name().replace('-', "_")),
                |b| {
                    b.iter(|| {
                        WeightedFairnessPolicy::with_algorithm(
                            black_box(shard.clone()),
                            algorithm,
                            black_box(tenants.clone()),
                        )
                        .unwrap()
                    });
                },
            );
        }
        group.bench_function("swrr_reference", |b| {
            b.iter(|| swrr_reference(black_box(&weights), length));
        });
        group.bench_function("swrr_grouped", |b| {
            b.iter(|| swrr_grouped(black_box(&weights), length));
        });
        group.bench_function("swrr_chosen", |b| {
            b.iter(|| swrr(black_box(&weights), length));
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = compile
}
criterion_main!(benches);
