//! The weight families of the bounds report, from a small deterministic
//! generator (splitmix64): the same seed gives the same sets.

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use statek_policy::{MAX_CYCLE_LENGTH, MAX_TENANTS, MAX_WEIGHT};

use super::format::describe;

/// The deterministic generator: splitmix64.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator for family number `stream` under `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_add(1).wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform (up to a negligible modulo bias) in `low..=high`.
    fn between(&mut self, low: u32, high: u32) -> u32 {
        let span = u64::from(high.saturating_sub(low)) + 1;
        low + u32::try_from(self.next_u64() % span).unwrap_or(0)
    }

    /// Shuffles `items` (Fisher–Yates).
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let other = self.between(0, u32::try_from(last).unwrap_or(u32::MAX));
            items.swap(last, usize::try_from(other).unwrap_or(0));
        }
    }
}

/// A generated family of weight sets; a set's weights are in id order
/// (tenant `t0000` first).
pub struct Family {
    /// Shown in the report.
    pub name: &'static str,
    /// Draws one set, weights in id order.
    pub generate: fn(&mut SplitMix64) -> Vec<u32>,
}

pub const FAMILIES: &[Family] = &[
    Family {
        name: "random, 2-8 tenants",
        generate: |rng| random_weights(rng, 2, 8),
    },
    Family {
        name: "random, 9-64 tenants",
        generate: |rng| random_weights(rng, 9, 64),
    },
    Family {
        name: "random, 65-1024 tenants",
        generate: |rng| random_weights(rng, 65, 1024),
    },
    Family {
        name: "1024 tenants, weights 1-4",
        generate: |rng| (0..1024).map(|_| rng.between(1, 4)).collect(),
    },
    Family {
        name: "random partitions of 4096",
        generate: partition_of_4096,
    },
    Family {
        name: "powers of two",
        generate: powers_of_two,
    },
    Family {
        name: "Zipf",
        generate: zipf,
    },
    Family {
        name: "one heavy + many weight 1",
        generate: heavy_among_ones,
    },
    Family {
        name: "one weight 2 + many weight 1",
        generate: |rng| {
            let ones = rng.between(1, 1023);
            with_one(rng, ones, 2)
        },
    },
    Family {
        name: "all equal",
        generate: |rng| {
            let tenants = rng.between(1, 1024);
            let weight = rng.between(1, (MAX_CYCLE_LENGTH / tenants).min(MAX_WEIGHT));
            vec![weight; tenants as usize]
        },
    },
    // Added after the others so that their sets stay as they were.
    Family {
        name: "two near-equal heavy + small",
        generate: two_near_equal_heavy,
    },
];

/// `low..=high` tenants with weights uniform in `1..=cap`, the cap one of
/// 4, 16, 64, 256, 1024 (lowered so that `L <= 4096`).
fn random_weights(rng: &mut SplitMix64, low: u32, high: u32) -> Vec<u32> {
    let tenants = rng.between(low, high);
    let cap = [4, 16, 64, 256, 1024][rng.between(0, 4) as usize];
    let cap = cap.min(MAX_CYCLE_LENGTH / tenants).max(1);
    (0..tenants).map(|_| rng.between(1, cap)).collect()
}

/// 4096 cut at 3..=511 distinct random points; parts above 1024 are split.
fn partition_of_4096(rng: &mut SplitMix64) -> Vec<u32> {
    let parts = rng.between(4, 512) as usize;
    let mut cuts = BTreeSet::new();
    while cuts.len() + 1 < parts {
        cuts.insert(rng.between(1, MAX_CYCLE_LENGTH - 1));
    }
    let mut weights = Vec::new();
    let mut previous = 0;
    for cut in cuts.into_iter().chain([MAX_CYCLE_LENGTH]) {
        let mut part = cut - previous;
        while part > MAX_WEIGHT {
            weights.push(MAX_WEIGHT);
            part -= MAX_WEIGHT;
        }
        weights.push(part);
        previous = cut;
    }
    weights
}

/// 2..=256 tenants of weight `2^e`, `e` in 0..=10, as many as fit in 4096.
fn powers_of_two(rng: &mut SplitMix64) -> Vec<u32> {
    let tenants = rng.between(2, 256);
    let mut weights = Vec::new();
    let mut length = 0;
    for _ in 0..tenants {
        let weight = 1 << rng.between(0, 10);
        if length + weight <= MAX_CYCLE_LENGTH {
            length += weight;
            weights.push(weight);
        }
    }
    if weights.is_empty() {
        weights.push(1);
    }
    weights
}

/// 2..=1024 tenants, the `i`-th of weight `top / i^s` (at least 1) for `s`
/// in 0.5, 1, 1.5, 2 (integer square roots), halved until `L <= 4096`, in
/// random id order.
fn zipf(rng: &mut SplitMix64) -> Vec<u32> {
    let tenants = rng.between(2, 1024);
    let exponent = rng.between(0, 3);
    let top = rng.between(1, MAX_WEIGHT);
    let mut weights: Vec<u32> = (1..=tenants)
        .map(|i| {
            let divisor = match exponent {
                0 => i.isqrt(),
                1 => i,
                2 => i * i.isqrt(),
                _ => i * i,
            };
            (top / divisor).max(1)
        })
        .collect();
    while weights.iter().sum::<u32>() > MAX_CYCLE_LENGTH {
        for weight in &mut weights {
            *weight = (*weight / 2).max(1);
        }
    }
    rng.shuffle(&mut weights);
    weights
}

/// One tenant of weight 2..=1024 among 1..=1023 weight-1 tenants.
fn heavy_among_ones(rng: &mut SplitMix64) -> Vec<u32> {
    let heavy = rng.between(2, MAX_WEIGHT);
    let ones = rng.between(1, 1023);
    with_one(rng, ones, heavy)
}

/// `ones` weight-1 tenants and one tenant of `weight` at a random id.
fn with_one(rng: &mut SplitMix64, ones: u32, weight: u32) -> Vec<u32> {
    let mut weights = vec![1; ones as usize];
    weights.insert(rng.between(0, ones) as usize, weight);
    weights
}

/// Two heavy tenants whose weights differ by at most 1/8 (each's
/// `ceil(L / w)` is 2-4 slots), plus 1..=6 small tenants taking the rest,
/// in random id order: the shape on which `min-gap-v1` reaches 5/3.
fn two_near_equal_heavy(rng: &mut SplitMix64) -> Vec<u32> {
    let first = rng.between(64, MAX_WEIGHT);
    let second = rng.between(first - first / 8, first);
    // Together 50-90 % of L.
    let heavy = first + second;
    let length = (heavy * 100 / rng.between(50, 90)).min(MAX_CYCLE_LENGTH);
    let mut rest = length - heavy;
    let mut weights = vec![first, second];
    for left in (1..rng.between(1, 6).min(rest)).rev() {
        let weight = rng.between(1, rest - left).min(MAX_WEIGHT);
        weights.push(weight);
        rest -= weight;
    }
    while rest > 0 {
        let weight = rest.min(MAX_WEIGHT);
        weights.push(weight);
        rest -= weight;
    }
    rng.shuffle(&mut weights);
    weights
}

/// An error when `family` generated a set outside the policy's limits.
pub fn check_limits(family: &str, weights: &[u32]) -> Result<()> {
    let length: u32 = weights.iter().sum();
    if weights.is_empty()
        || weights.len() > MAX_TENANTS
        || length > MAX_CYCLE_LENGTH
        || weights
            .iter()
            .any(|&weight| weight == 0 || weight > MAX_WEIGHT)
    {
        bail!(
            "family {family} generated an invalid set: {}",
            describe(weights)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_known_values() {
        // The reference splitmix64 stream for state 0.
        let mut rng = SplitMix64(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut rng = SplitMix64::new(7, 3);
        for _ in 0..1000 {
            assert!((3..=5).contains(&rng.between(3, 5)));
        }
    }

    #[test]
    fn families_stay_within_the_limits() {
        for (stream, family) in (0_u64..).zip(FAMILIES) {
            let mut rng = SplitMix64::new(1, stream);
            for _ in 0..50 {
                check_limits(family.name, &(family.generate)(&mut rng)).unwrap();
            }
        }
    }
}
