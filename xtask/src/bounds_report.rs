//! `cargo xtask bounds-report`: how far each algorithm's starvation bounds
//! are from the ideal `ceil(L / w)`, over generated weight families, and the
//! checks behind the statements about `swrr-v1` in `docs/guarantees.md`.
//!
//! For every weight set the report builds the policy under `swrr-v1` and
//! under `min-gap-v1` and takes the set's largest ratio of measured bound
//! to `ceil(L / w)` over its tenants. Per family and algorithm it prints
//! the worst and the mean of those ratios and the worst set. It then checks
//! `swrr-v1`'s properties on every cycle it built (exact counts, over-service
//! below `1 − 1/k`, and whether a tenant ever falls a whole slot behind its
//! share or waits `2·L/w` or `2·ceil(L/w)` slots), over the families and over
//! every weight set with a short cycle, and compares `min-gap-v1` with the
//! best cycle an exhaustive search finds for the shortest cycles.
//!
//! The sets come from a small deterministic generator (splitmix64), so the
//! same `--seed` and `--sets-per-family` print the same report (stdout);
//! progress and compile times, which depend on the machine, go to stderr.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use statek_policy::{
    PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
    MAX_CYCLE_LENGTH, MAX_TENANTS, MAX_WEIGHT,
};

/// Options of `cargo xtask bounds-report`.
#[derive(Debug, Clone, clap::Args)]
pub struct BoundsReportArgs {
    /// Seed of the weight-set generator; the same seed gives the same report.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Weight sets generated per family.
    #[arg(long, default_value_t = 100)]
    pub sets_per_family: usize,
}

/// Every weight set with a cycle of at most this many slots is checked, in
/// two id orders.
const EXHAUSTIVE_MAX_LENGTH: u32 = 20;

/// The best possible cycle is searched exhaustively up to this length.
const OPTIMUM_MAX_LENGTH: u32 = 12;

/// `swrr-v1` is checked on every id order of every weight set with a cycle
/// of at most this many slots (`2^14 − 1` sequences).
const ALL_ORDERS_MAX_LENGTH: u32 = 14;

/// Weight sets listed in full up to this many tenants, else summarised.
const LISTED_TENANTS: usize = 12;

/// The deterministic generator: splitmix64.
struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator for family number `stream` under `seed`.
    fn new(seed: u64, stream: u64) -> Self {
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
struct Family {
    name: &'static str,
    generate: fn(&mut SplitMix64) -> Vec<u32>,
}

const FAMILIES: &[Family] = &[
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

/// A set's largest ratio of bound to `ceil(L / w)`, as a fraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ratio {
    bound: u64,
    ideal: u64,
}

impl Ratio {
    fn is_above(self, other: Ratio) -> bool {
        self.bound * other.ideal > other.bound * self.ideal
    }

    fn value(self) -> f64 {
        self.bound as f64 / self.ideal as f64
    }
}

fn largest_ratio(policy: &WeightedFairnessPolicy) -> Ratio {
    policy
        .starvation_bounds()
        .map(|bound| Ratio {
            bound: u64::from(bound.maximum_reservations_until_selection()),
            ideal: u64::from(bound.ideal_reservations_until_selection()),
        })
        .fold(Ratio { bound: 0, ideal: 1 }, |largest, ratio| {
            if ratio.is_above(largest) {
                ratio
            } else {
                largest
            }
        })
}

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

/// The worst and mean ratio of one algorithm over a group of sets.
#[derive(Default)]
struct Tally {
    sets: usize,
    sum: f64,
    /// The worst ratio, the set's label and its weights.
    worst: Option<(Ratio, String, Vec<u32>)>,
}

impl Tally {
    fn add(&mut self, ratio: Ratio, label: impl FnOnce() -> String, weights: &[u32]) {
        self.sets += 1;
        self.sum += ratio.value();
        if self
            .worst
            .as_ref()
            .is_none_or(|(worst, _, _)| ratio.is_above(*worst))
        {
            self.worst = Some((ratio, label(), weights.to_vec()));
        }
    }

    fn worst(&self) -> f64 {
        self.worst
            .as_ref()
            .map_or(0.0, |(ratio, _, _)| ratio.value())
    }

    fn mean(&self) -> f64 {
        self.sum / self.sets.max(1) as f64
    }

    fn merge(&mut self, other: &Tally) {
        self.sets += other.sets;
        self.sum += other.sum;
        if let Some((ratio, label, weights)) = &other.worst {
            if self
                .worst
                .as_ref()
                .is_none_or(|(worst, _, _)| ratio.is_above(*worst))
            {
                self.worst = Some((*ratio, label.clone(), weights.clone()));
            }
        }
    }
}

/// A weight set, listed in id order when short, else summarised by weight.
fn describe(weights: &[u32]) -> String {
    let length: u32 = weights.iter().sum();
    if weights.len() <= LISTED_TENANTS {
        let listed: Vec<String> = weights.iter().map(u32::to_string).collect();
        return format!("{{{}}} (L = {length})", listed.join(", "));
    }
    let mut by_weight: Vec<(u32, usize)> = Vec::new();
    let mut sorted = weights.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for weight in sorted {
        match by_weight.last_mut() {
            Some((last, count)) if *last == weight => *count += 1,
            _ => by_weight.push((weight, 1)),
        }
    }
    let mut parts: Vec<String> = by_weight
        .iter()
        .take(6)
        .map(|(weight, count)| format!("{count}×{weight}"))
        .collect();
    if by_weight.len() > 6 {
        parts.push(format!("… {} more weights", by_weight.len() - 6));
    }
    format!(
        "{} tenants, L = {length}: {}",
        weights.len(),
        parts.join(", ")
    )
}

/// A `swrr-v1` property that fails on some set: the smallest such set (by
/// cycle length, then tenants) and what happened.
struct Counterexample {
    weights: Vec<u32>,
    detail: String,
    cycle: String,
}

/// What the `swrr-v1` cycles showed.
#[derive(Default)]
struct SwrrFacts {
    cycles: usize,
    counts_exact: usize,
    /// Cycles where no tenant was ever `1 − 1/k` slots or more ahead.
    over_service_within_bound: usize,
    /// The largest over-service seen, in slots.
    largest_over_service: f64,
    /// Cycles where a tenant fell a whole slot or more behind its share.
    lag_of_a_slot: usize,
    largest_lag: f64,
    /// The set with the largest lag, and which tenant.
    largest_lag_at: String,
    lag_example: Option<Counterexample>,
    /// Cycles with a gap of at least `2·L/w`.
    gap_of_twice_share: usize,
    gap_example: Option<Counterexample>,
    /// Tenants with a gap of at least `2·ceil(L/w)`.
    gap_of_twice_ideal: usize,
    /// The largest ratio of a bound to `ceil(L/w)`.
    largest_ratio: f64,
    /// The largest gap as a multiple of `L/w` (2 would be a counterexample).
    largest_gap_over_share: f64,
}

impl SwrrFacts {
    /// Checks one `swrr-v1` cycle of `weights`.
    fn check(&mut self, weights: &[u32], policy: &WeightedFairnessPolicy) {
        self.cycles += 1;
        let length = i64::from(policy.cycle_length());
        let tenants = i64::try_from(weights.len()).unwrap_or(i64::MAX);
        let slots = policy.cycle_tenant_indexes();
        let mut counts = vec![0_i64; weights.len()];
        // The largest lag (before a pick) and over-service (after it), in
        // 1/L slots: L·(share so far) − L·(picks so far), and the reverse.
        let mut lag: (i64, usize, i64) = (i64::MIN, 0, 0);
        let mut over_service = i64::MIN;
        for (slot, &tenant) in (0_i64..).zip(slots) {
            let tenant = usize::from(tenant);
            let weight = i64::from(weights[tenant]);
            let behind = slot * weight - length * counts[tenant];
            if behind > lag.0 {
                lag = (behind, tenant, slot);
            }
            counts[tenant] += 1;
            over_service = over_service.max(length * counts[tenant] - (slot + 1) * weight);
        }
        if counts
            .iter()
            .zip(weights)
            .all(|(&count, &weight)| count == i64::from(weight))
        {
            self.counts_exact += 1;
        }
        // Over-service below 1 − 1/k slots: k·over < (k − 1)·L, or at most.
        if tenants * over_service <= (tenants - 1) * length {
            self.over_service_within_bound += 1;
        }
        self.largest_over_service = self
            .largest_over_service
            .max(over_service as f64 / length as f64);
        let lag_slots = lag.0 as f64 / length as f64;
        if lag_slots > self.largest_lag {
            self.largest_lag = lag_slots;
            self.largest_lag_at = format!("t{:04} of {}", lag.1, describe(weights));
        }
        if lag.0 >= length {
            self.lag_of_a_slot += 1;
            let (_, tenant, slot) = lag;
            let detail = format!(
                "t{tenant:04} (weight {}) is {lag_slots:.3} slots behind its share \
                 after {slot} slots, having been picked {} times",
                weights[tenant],
                count_before(slots, tenant, slot),
            );
            offer(&mut self.lag_example, weights, detail, slots);
        }
        self.largest_ratio = self.largest_ratio.max(largest_ratio(policy).value());
        let mut twice_share = None;
        for (tenant, bound) in policy.starvation_bounds().enumerate() {
            let gap = i64::from(bound.maximum_reservations_until_selection());
            let ideal = i64::from(bound.ideal_reservations_until_selection());
            self.largest_gap_over_share = self
                .largest_gap_over_share
                .max((gap * i64::from(weights[tenant])) as f64 / length as f64);
            if gap * i64::from(weights[tenant]) >= 2 * length && twice_share.is_none() {
                twice_share = Some(format!(
                    "t{tenant:04} (weight {}) waits {gap} slots; 2·L/w = {:.3}",
                    weights[tenant],
                    2.0 * length as f64 / f64::from(weights[tenant]),
                ));
            }
            if gap >= 2 * ideal {
                self.gap_of_twice_ideal += 1;
            }
        }
        if let Some(detail) = twice_share {
            self.gap_of_twice_share += 1;
            offer(&mut self.gap_example, weights, detail, slots);
        }
    }
}

fn count_before(slots: &[u16], tenant: usize, slot: i64) -> usize {
    let end = usize::try_from(slot).unwrap_or(0);
    slots[..end]
        .iter()
        .filter(|&&index| usize::from(index) == tenant)
        .count()
}

/// Keeps `weights` as the counterexample if it is smaller than the one kept.
fn offer(kept: &mut Option<Counterexample>, weights: &[u32], detail: String, slots: &[u16]) {
    let size = |weights: &[u32]| (weights.iter().sum::<u32>(), weights.len());
    if kept
        .as_ref()
        .is_none_or(|kept| size(weights) < size(&kept.weights))
    {
        *kept = Some(Counterexample {
            weights: weights.to_vec(),
            detail,
            cycle: letters(slots),
        });
    }
}

/// A short cycle as letters (`a` = `t0000`), a long one as its length.
fn letters(slots: &[u16]) -> String {
    if slots.len() > 64 || slots.iter().any(|&slot| slot >= 26) {
        return format!("({} slots)", slots.len());
    }
    slots
        .iter()
        .map(|&slot| char::from(b'a' + u8::try_from(slot).unwrap_or(25)))
        .collect()
}

/// The slowest compile of each algorithm, for stderr.
#[derive(Default)]
struct Timing {
    slowest: [(Duration, String); 2],
}

impl Timing {
    fn compile(
        &mut self,
        algorithm: PolicyAlgorithm,
        weights: &[u32],
    ) -> Result<WeightedFairnessPolicy> {
        let started = Instant::now();
        let policy = build(algorithm, weights)?;
        let elapsed = started.elapsed();
        let slot = &mut self.slowest[usize::from(algorithm == PolicyAlgorithm::MinGapV1)];
        if elapsed > slot.0 {
            *slot = (elapsed, describe(weights));
        }
        Ok(policy)
    }
}

/// Both algorithms' tallies of a group of sets.
#[derive(Default)]
struct Row {
    swrr: Tally,
    min_gap: Tally,
    /// Sets where `min-gap-v1` kept `swrr-v1`'s cycle.
    kept_swrr_cycle: usize,
    /// Sets where `min-gap-v1`'s largest ratio is strictly smaller.
    improved: usize,
}

/// Evaluates one weight set under both algorithms.
fn evaluate(
    weights: &[u32],
    label: &dyn Fn() -> String,
    row: &mut Row,
    facts: &mut SwrrFacts,
    timing: &mut Timing,
) -> Result<Ratio> {
    let swrr = timing.compile(PolicyAlgorithm::SwrrV1, weights)?;
    let min_gap = timing.compile(PolicyAlgorithm::MinGapV1, weights)?;
    let (swrr_ratio, min_gap_ratio) = (largest_ratio(&swrr), largest_ratio(&min_gap));
    if min_gap_ratio.is_above(swrr_ratio) {
        bail!(
            "min-gap-v1 is worse than swrr-v1 on {}: {:.4} > {:.4}",
            describe(weights),
            min_gap_ratio.value(),
            swrr_ratio.value()
        );
    }
    row.swrr.add(swrr_ratio, label, weights);
    row.min_gap.add(min_gap_ratio, label, weights);
    row.kept_swrr_cycle +=
        usize::from(swrr.cycle_tenant_indexes() == min_gap.cycle_tenant_indexes());
    row.improved += usize::from(swrr_ratio.is_above(min_gap_ratio));
    facts.check(weights, &swrr);
    Ok(min_gap_ratio)
}

/// Runs the report and prints it.
pub fn run(args: &BoundsReportArgs) -> Result<()> {
    if args.sets_per_family == 0 {
        bail!("--sets-per-family must be at least 1");
    }
    let started = Instant::now();
    println!("{}", report(args, &mut Timing::default(), started)?);
    Ok(())
}

fn report(args: &BoundsReportArgs, timing: &mut Timing, started: Instant) -> Result<String> {
    let mut out = String::new();
    let mut facts = SwrrFacts::default();
    let mut total = Row::default();
    writeln!(
        out,
        "bounds-report --seed {} --sets-per-family {}\n\n\
         ratio = a tenant's measured bound / ceil(L / w); a set's ratio is its largest over its tenants.\n\n\
         | family | sets | swrr-v1 worst | swrr-v1 mean | min-gap-v1 worst | min-gap-v1 mean | min-gap-v1 better | kept swrr-v1 cycle |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|",
        args.seed, args.sets_per_family
    )?;
    let mut worst_sets = String::new();
    for (stream, family) in (0_u64..).zip(FAMILIES) {
        let mut rng = SplitMix64::new(args.seed, stream);
        let mut row = Row::default();
        for index in 0..args.sets_per_family {
            let weights = (family.generate)(&mut rng);
            check_limits(family.name, &weights)?;
            let label = || format!("{} #{index}", family.name);
            evaluate(&weights, &label, &mut row, &mut facts, timing)?;
        }
        eprintln!(
            "bounds-report: {} done after {:.1}s",
            family.name,
            started.elapsed().as_secs_f64()
        );
        write_row(&mut out, family.name, &row)?;
        for (algorithm, tally) in [("swrr-v1", &row.swrr), ("min-gap-v1", &row.min_gap)] {
            if let Some((ratio, label, weights)) = &tally.worst {
                writeln!(
                    worst_sets,
                    "- {label}, {algorithm} {:.3} ({}/{}): {}",
                    ratio.value(),
                    ratio.bound,
                    ratio.ideal,
                    describe(weights)
                )?;
            }
        }
        total.swrr.merge(&row.swrr);
        total.min_gap.merge(&row.min_gap);
        total.kept_swrr_cycle += row.kept_swrr_cycle;
        total.improved += row.improved;
    }
    write_row(&mut out, "**all families**", &total)?;
    writeln!(
        out,
        "\nWorst set per family and algorithm (`#n`: the family's n-th set for this seed; \
         listed weights are in id order):\n\n{worst_sets}"
    )?;

    let exhaustive = exhaustive(&mut out, &mut facts, timing)?;
    let mut orders = 0;
    for length in 1..=ALL_ORDERS_MAX_LENGTH {
        for weights in compositions(length) {
            let swrr = timing.compile(PolicyAlgorithm::SwrrV1, &weights)?;
            facts.check(&weights, &swrr);
            orders += 1;
        }
    }
    writeln!(
        out,
        "\nswrr-v1 was also built for every id order of every weight set with L <= {ALL_ORDERS_MAX_LENGTH} \
         ({orders} sequences of weights)."
    )?;
    write_facts(&mut out, &facts)?;
    eprintln!(
        "bounds-report: {} compiles in {:.1}s; slowest swrr-v1 {:.1} ms ({}), slowest min-gap-v1 {:.1} ms ({})",
        2 * (total.swrr.sets + exhaustive.swrr.sets) + orders,
        started.elapsed().as_secs_f64(),
        timing.slowest[0].0.as_secs_f64() * 1000.0,
        timing.slowest[0].1,
        timing.slowest[1].0.as_secs_f64() * 1000.0,
        timing.slowest[1].1,
    );
    Ok(out)
}

fn check_limits(family: &str, weights: &[u32]) -> Result<()> {
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

fn write_row(out: &mut String, name: &str, row: &Row) -> Result<()> {
    writeln!(
        out,
        "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
        row.swrr.sets,
        row.swrr.worst(),
        row.swrr.mean(),
        row.min_gap.worst(),
        row.min_gap.mean(),
        row.improved,
        row.kept_swrr_cycle,
    )?;
    Ok(())
}

/// Every weight set with `L <= EXHAUSTIVE_MAX_LENGTH`, ids in descending and
/// in ascending weight order; and, up to `OPTIMUM_MAX_LENGTH`, the best
/// cycle by exhaustive search.
fn exhaustive(out: &mut String, facts: &mut SwrrFacts, timing: &mut Timing) -> Result<Row> {
    let mut row = Row::default();
    let mut optimum = Tally::default();
    let mut optimal = 0;
    let mut compared = 0;
    let mut largest_excess: Option<(f64, Vec<u32>, Ratio, Ratio)> = None;
    for length in 1..=EXHAUSTIVE_MAX_LENGTH {
        for descending in partitions(length) {
            let mut ascending = descending.clone();
            ascending.reverse();
            let orders = if ascending == descending {
                vec![descending.clone()]
            } else {
                vec![descending.clone(), ascending]
            };
            let best = (length <= OPTIMUM_MAX_LENGTH).then(|| best_possible(&descending));
            if let Some(best) = best {
                optimum.add(best, || describe(&descending), &descending);
            }
            for weights in orders {
                let label = || describe(&weights);
                let ratio = evaluate(&weights, &label, &mut row, facts, timing)?;
                if let Some(best) = best {
                    compared += 1;
                    if ratio.is_above(best) {
                        let excess = ratio.value() / best.value();
                        if largest_excess.as_ref().is_none_or(|(e, ..)| excess > *e) {
                            largest_excess = Some((excess, weights.clone(), ratio, best));
                        }
                    } else {
                        optimal += 1;
                    }
                }
            }
        }
    }
    writeln!(
        out,
        "Every weight set with L <= {EXHAUSTIVE_MAX_LENGTH}, ids in descending and in ascending weight order:\n\n\
         | sets | swrr-v1 worst | swrr-v1 mean | min-gap-v1 worst | min-gap-v1 mean | min-gap-v1 better | kept swrr-v1 cycle |\n\
         |---:|---:|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |\n",
        row.swrr.sets,
        row.swrr.worst(),
        row.swrr.mean(),
        row.min_gap.worst(),
        row.min_gap.mean(),
        row.improved,
        row.kept_swrr_cycle,
    )?;
    let worst = optimum
        .worst
        .as_ref()
        .map_or_else(String::new, |(ratio, label, _)| {
            format!(
                " (worst {:.3} = {}/{}, {label})",
                ratio.value(),
                ratio.bound,
                ratio.ideal
            )
        });
    writeln!(
        out,
        "Best possible, by exhaustive search over all cycles, for the {} weight sets with L <= {OPTIMUM_MAX_LENGTH}: \
         mean {:.3}{worst}. min-gap-v1 reaches it in {optimal} of {compared} (set, id order) pairs.",
        optimum.sets,
        optimum.mean(),
    )?;
    if let Some((excess, weights, ratio, best)) = largest_excess {
        writeln!(
            out,
            "Largest shortfall: {} in {:?} id order, min-gap-v1 {}/{} against {}/{} possible ({excess:.3}×).",
            describe(&weights),
            if weights.windows(2).all(|pair| pair[0] >= pair[1]) { "descending" } else { "ascending" },
            ratio.bound,
            ratio.ideal,
            best.bound,
            best.ideal,
        )?;
    }
    Ok(row)
}

fn write_facts(out: &mut String, facts: &SwrrFacts) -> Result<()> {
    writeln!(
        out,
        "\nswrr-v1 on all {} cycles above (families, short cycles, all orders):\n\n\
         - exact counts (each tenant picked `w` times per cycle): {} of {}\n\
         - over-service at most 1 − 1/k slots (k tenants): {} of {}; largest seen {:.3} slots\n\
         - largest ratio of bound to ceil(L/w): {:.3}; a gap of 2·ceil(L/w) or more: {} tenants\n\
         - largest lag behind the proportional share: {:.3} slots ({}); a whole slot or more: {} cycles\n\
         - largest gap as a multiple of L/w: {:.3}; a gap of 2·L/w or more: {} cycles",
        facts.cycles,
        facts.counts_exact,
        facts.cycles,
        facts.over_service_within_bound,
        facts.cycles,
        facts.largest_over_service,
        facts.largest_ratio,
        facts.gap_of_twice_ideal,
        facts.largest_lag,
        facts.largest_lag_at,
        facts.lag_of_a_slot,
        facts.largest_gap_over_share,
        facts.gap_of_twice_share,
    )?;
    for (name, example) in [
        ("lag of a whole slot", &facts.lag_example),
        ("gap of 2·L/w", &facts.gap_example),
    ] {
        match example {
            Some(example) => writeln!(
                out,
                "\nSmallest counterexample found, {name}: {} in id order a, b, c, …, cycle `{}`: {}.",
                describe(&example.weights),
                example.cycle,
                example.detail
            )?,
            None => writeln!(out, "\nNo counterexample found for a {name}.")?,
        }
    }
    Ok(())
}

/// Every partition of `length` into weights of at most `MAX_WEIGHT`, each
/// in descending order.
fn partitions(length: u32) -> Vec<Vec<u32>> {
    fn extend(rest: u32, largest: u32, current: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if rest == 0 {
            out.push(current.clone());
            return;
        }
        for part in (1..=rest.min(largest)).rev() {
            current.push(part);
            extend(rest - part, part, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    extend(length, MAX_WEIGHT, &mut Vec::new(), &mut out);
    out
}

/// Every sequence of positive weights (each at most `MAX_WEIGHT`) that
/// sums to `length`: every id order of every weight set.
fn compositions(length: u32) -> Vec<Vec<u32>> {
    fn extend(rest: u32, current: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if rest == 0 {
            out.push(current.clone());
            return;
        }
        for part in 1..=rest.min(MAX_WEIGHT) {
            current.push(part);
            extend(rest - part, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    extend(length, &mut Vec::new(), &mut out);
    out
}

/// The smallest largest ratio any cycle of `weights` can have, by trying
/// every candidate ratio in increasing order with a depth-first search.
fn best_possible(weights: &[u32]) -> Ratio {
    let length: u32 = weights.iter().sum();
    let mut candidates: Vec<Ratio> = weights
        .iter()
        .flat_map(|&weight| {
            let ideal = u64::from(length.div_ceil(weight));
            (ideal..=u64::from(length)).map(move |bound| Ratio { bound, ideal })
        })
        .collect();
    candidates.sort_by(|a, b| (a.bound * b.ideal).cmp(&(b.bound * a.ideal)));
    for ratio in candidates {
        let gaps: Vec<u32> = weights
            .iter()
            .map(|&weight| {
                let ideal = u64::from(length.div_ceil(weight));
                u32::try_from(ratio.bound * ideal / ratio.ideal).unwrap_or(u32::MAX)
            })
            .collect();
        if cycle_exists(weights, &gaps) {
            return ratio;
        }
    }
    Ratio {
        bound: u64::from(length),
        ideal: 1,
    }
}

/// Whether some cycle picks tenant `i` exactly `weights[i]` times with
/// circular gaps of at most `gaps[i]`; tenant 0 is put in slot 0, since a
/// rotation of a cycle has the same gaps.
fn cycle_exists(weights: &[u32], gaps: &[u32]) -> bool {
    struct Search<'a> {
        length: u32,
        gaps: &'a [u32],
        remaining: Vec<u32>,
        first: Vec<Option<u32>>,
        last: Vec<Option<u32>>,
    }
    impl Search<'_> {
        fn from(&mut self, slot: u32) -> bool {
            let tenants = self.remaining.len();
            if slot == self.length {
                return (0..tenants).all(|i| match (self.first[i], self.last[i]) {
                    (Some(first), Some(last)) => first + self.length - last <= self.gaps[i],
                    _ => false,
                });
            }
            let mut forced = None;
            for i in 0..tenants {
                // The slot by which tenant i must be picked next.
                let due = self.last[i].map_or(self.gaps[i] - 1, |last| last + self.gaps[i]);
                if self.remaining[i] > 0 && due <= slot {
                    if due < slot || forced.is_some() {
                        return false;
                    }
                    forced = Some(i);
                }
            }
            let choices: Vec<usize> = match forced {
                Some(i) => vec![i],
                None => (0..tenants).filter(|&i| self.remaining[i] > 0).collect(),
            };
            for i in choices {
                let (first, last) = (self.first[i], self.last[i]);
                self.remaining[i] -= 1;
                self.last[i] = Some(slot);
                self.first[i] = first.or(Some(slot));
                if self.from(slot + 1) {
                    return true;
                }
                self.remaining[i] += 1;
                (self.first[i], self.last[i]) = (first, last);
            }
            false
        }
    }
    let Some(first_weight) = weights.first() else {
        return false;
    };
    let mut search = Search {
        length: weights.iter().sum(),
        gaps,
        remaining: weights.to_vec(),
        first: vec![None; weights.len()],
        last: vec![None; weights.len()],
    };
    search.remaining[0] = first_weight - 1;
    search.first[0] = Some(0);
    search.last[0] = Some(0);
    search.from(1)
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

    #[test]
    fn partition_counts() {
        let counts: Vec<usize> = (1..=8).map(|n| partitions(n).len()).collect();
        assert_eq!(counts, [1, 2, 3, 5, 7, 11, 15, 22]);
        assert_eq!(
            partitions(4),
            [
                vec![4],
                vec![3, 1],
                vec![2, 2],
                vec![2, 1, 1],
                vec![1, 1, 1, 1]
            ]
        );
    }

    #[test]
    fn composition_counts() {
        let counts: Vec<usize> = (1..=8).map(|n| compositions(n).len()).collect();
        assert_eq!(counts, [1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(
            compositions(3),
            [vec![1, 1, 1], vec![1, 2], vec![2, 1], vec![3]]
        );
    }

    #[test]
    fn best_possible_ratios() {
        // Compared as fractions: 6/4 and 3/2 are the same ratio.
        let check = |weights: &[u32], bound: u64, ideal: u64| {
            let best = best_possible(weights);
            assert_eq!(
                best.bound * ideal,
                bound * best.ideal,
                "{weights:?}: {best:?}"
            );
        };
        check(&[1], 1, 1);
        check(&[3, 1], 2, 2);
        check(&[3, 2, 1], 4, 3);
        check(&[10, 5, 4, 1], 6, 4);
        check(&[5, 2, 1], 2, 2);
        check(&[6, 2, 1], 2, 2);
    }

    #[test]
    fn descriptions() {
        assert_eq!(describe(&[3, 2, 1]), "{3, 2, 1} (L = 6)");
        let mut lockstep = vec![1; 1022];
        lockstep.push(2);
        assert_eq!(describe(&lockstep), "1023 tenants, L = 1024: 1×2, 1022×1");
    }
}
