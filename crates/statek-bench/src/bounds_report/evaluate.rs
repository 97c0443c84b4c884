//! Building one weight set under every algorithm and summing the measures
//! into a [`Row`].

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use statek_policy::analysis::{BoundRatio, SetMeasure, Tally};
use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

use super::format::{describe, ratio};
use super::swrr_facts::SwrrFacts;

/// The algorithms compared, oldest first.
pub const ALGORITHMS: [PolicyAlgorithm; 3] = [
    PolicyAlgorithm::SwrrV1,
    PolicyAlgorithm::MinGapV1,
    PolicyAlgorithm::MinGapV2,
];

/// The worst ratio `min-gap-v2` is meant to stay at or below.
pub const TARGET: BoundRatio = BoundRatio::new(3, 2);

fn build(algorithm: PolicyAlgorithm, weights: &[u32]) -> Result<WeightedFairnessPolicy> {
    let tenants = weights
        .iter()
        .enumerate()
        .map(|(index, &weight)| {
            let tenant = TenantId::try_from(format!("t{index:04}"))?;
            TenantFairnessWeight::new(tenant, weight)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shard = SchedulerShardId::try_from("bounds-report")?;
    WeightedFairnessPolicy::with_algorithm(shard, algorithm, tenants)
        .with_context(|| format!("building {algorithm} for {}", describe(weights)))
}

/// The slowest compile of each algorithm, for stderr.
#[derive(Default)]
pub struct Timing {
    pub slowest: [(Duration, String); 3],
    pub compiles: usize,
}

impl Timing {
    pub fn compile(&mut self, index: usize, weights: &[u32]) -> Result<WeightedFairnessPolicy> {
        let started = Instant::now();
        let policy = build(ALGORITHMS[index], weights)?;
        let elapsed = started.elapsed();
        self.compiles += 1;
        if elapsed > self.slowest[index].0 {
            self.slowest[index] = (elapsed, describe(weights));
        }
        Ok(policy)
    }
}

/// The three algorithms' tallies over a group of sets.
#[derive(Default)]
pub struct Row {
    pub tallies: [Tally; 3],
    /// Sets where `min-gap-v1` is strictly better than `swrr-v1`, and
    /// `min-gap-v2` strictly better than `min-gap-v1`.
    pub improved: [usize; 2],
    /// Sets where `min-gap-v2`'s largest ratio is above the target.
    pub above_target: usize,
    /// The smallest such set (by L, then tenants) and its ratio.
    pub smallest_above_target: Option<(Vec<u32>, BoundRatio)>,
}

impl Row {
    pub fn merge(&mut self, other: &Row) {
        for (mine, theirs) in self.tallies.iter_mut().zip(&other.tallies) {
            mine.merge(theirs);
        }
        self.improved[0] += other.improved[0];
        self.improved[1] += other.improved[1];
        self.above_target += other.above_target;
        if let Some((weights, ratio)) = &other.smallest_above_target {
            offer_smallest(&mut self.smallest_above_target, weights, *ratio);
        }
    }
}

pub fn offer_smallest(
    kept: &mut Option<(Vec<u32>, BoundRatio)>,
    weights: &[u32],
    ratio: BoundRatio,
) {
    let size = |weights: &[u32]| (weights.iter().sum::<u32>(), weights.len());
    if kept
        .as_ref()
        .is_none_or(|(kept, _)| size(weights) < size(kept))
    {
        *kept = Some((weights.to_vec(), ratio));
    }
}

/// Evaluates one weight set under the three algorithms, checks that each
/// is never worse than the one before it, and returns their measures.
pub fn evaluate(
    weights: &[u32],
    label: &dyn Fn() -> String,
    row: &mut Row,
    facts: &mut SwrrFacts,
    timing: &mut Timing,
) -> Result<[SetMeasure; 3]> {
    let mut measures = Vec::with_capacity(3);
    for (index, tally) in row.tallies.iter_mut().enumerate() {
        let policy = timing.compile(index, weights)?;
        if index == 0 {
            facts.check(weights, policy.cycle_tenant_indexes());
        }
        let measure = SetMeasure::of(&policy);
        tally.add(&measure, label, weights);
        measures.push(measure);
    }
    let [swrr, v1, v2] = [measures[0], measures[1], measures[2]];
    for (earlier, later, names) in [
        (swrr, v1, "min-gap-v1 is worse than swrr-v1"),
        (v1, v2, "min-gap-v2 is worse than min-gap-v1"),
    ] {
        if earlier.largest_ratio().is_below(later.largest_ratio()) {
            bail!(
                "{names} on {}: {} > {}",
                describe(weights),
                ratio(later.largest_ratio()),
                ratio(earlier.largest_ratio())
            );
        }
    }
    row.improved[0] += usize::from(v1.largest_ratio().is_below(swrr.largest_ratio()));
    row.improved[1] += usize::from(v2.largest_ratio().is_below(v1.largest_ratio()));
    if TARGET.is_below(v2.largest_ratio()) {
        row.above_target += 1;
        offer_smallest(&mut row.smallest_above_target, weights, v2.largest_ratio());
    }
    Ok([swrr, v1, v2])
}
