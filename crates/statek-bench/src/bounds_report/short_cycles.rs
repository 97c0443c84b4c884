//! Every weight set with a short cycle, in two id orders, and the best
//! possible cycle by exhaustive search.

use std::fmt::Write as _;

use anyhow::Result;
use statek_policy::analysis::{optimum, partitions, BoundRatio, Optimum, Tally};

use super::args::{BoundsReportArgs, OPTIMUM_STEPS};
use super::evaluate::{evaluate, Row, Timing, ALGORITHMS};
use super::format::{describe, percent, ratio};
use super::swrr_facts::SwrrFacts;

/// How far an algorithm missed the best possible ratio on one (set, id
/// order) pair: factor, weights, its ratio, the best possible.
type Shortfall = (f64, Vec<u32>, BoundRatio, BoundRatio);

/// The best possible ratio against the algorithms' for one group.
#[derive(Default)]
struct OptimumComparison {
    sets: usize,
    best: Tally,
    pairs: usize,
    out_of_steps: usize,
    reached: [usize; 3],
    /// The largest shortfall per algorithm: factor, weights, ratio, best.
    shortfall: [Option<Shortfall>; 3],
}

/// Every weight set with `L <= exhaustive_max_length` in both id orders;
/// up to `optimum_max_length`, against the best cycle by exhaustive search.
pub fn exhaustive(
    out: &mut String,
    args: &BoundsReportArgs,
    facts: &mut SwrrFacts,
    timing: &mut Timing,
) -> Result<Row> {
    let mut row = Row::default();
    let mut comparison = OptimumComparison::default();
    for length in 1..=args.exhaustive_max_length {
        for descending in partitions(length) {
            let mut ascending = descending.clone();
            ascending.reverse();
            let orders = if ascending == descending {
                vec![descending.clone()]
            } else {
                vec![descending.clone(), ascending]
            };
            let best = if length <= args.optimum_max_length {
                comparison.sets += 1;
                match optimum(&descending, None, OPTIMUM_STEPS) {
                    Optimum::Found { ratio, .. } => {
                        comparison.best.add_ratio(
                            ratio,
                            ratio.excess(),
                            || describe(&descending),
                            &descending,
                        );
                        Some(ratio)
                    }
                    _ => {
                        comparison.out_of_steps += 1;
                        None
                    }
                }
            } else {
                None
            };
            for weights in orders {
                let label = || describe(&weights);
                let measures = evaluate(&weights, &label, &mut row, facts, timing)?;
                let Some(best) = best else { continue };
                comparison.pairs += 1;
                for (index, measure) in measures.iter().enumerate() {
                    let got = measure.largest_ratio();
                    if best.is_below(got) {
                        let factor = got.to_f64() / best.to_f64();
                        let kept = &mut comparison.shortfall[index];
                        if kept.as_ref().is_none_or(|(f, ..)| factor > *f) {
                            *kept = Some((factor, weights.clone(), got, best));
                        }
                    } else {
                        comparison.reached[index] += 1;
                    }
                }
            }
        }
        eprintln!("bounds-report: all sets with L = {length} done");
    }
    writeln!(
        out,
        "\nEvery weight set with L <= {}, ids in descending and in ascending weight order:\n\n\
         | pairs | swrr-v1 worst | swrr-v1 mean | min-gap-v1 worst | min-gap-v1 mean | min-gap-v2 worst | \
         min-gap-v2 mean | v2 worst excess | v2 within 1 |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        args.exhaustive_max_length
    )?;
    let [swrr, v1, v2] = &row.tallies;
    writeln!(
        out,
        "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
        swrr.sets(),
        swrr.worst_ratio(),
        swrr.mean_ratio(),
        v1.worst_ratio(),
        v1.mean_ratio(),
        v2.worst_ratio(),
        v2.mean_ratio(),
        v2.worst_excess(),
        percent(v2.within_one_slot(), v2.sets()),
    )?;
    if let Some(worst) = v2.worst() {
        writeln!(
            out,
            "\nmin-gap-v2's worst there: {}, {}.",
            describe(&worst.weights),
            ratio(worst.ratio)
        )?;
    }
    let worst = comparison.best.worst().map_or_else(String::new, |w| {
        format!(" (worst {}, {})", ratio(w.ratio), describe(&w.weights))
    });
    writeln!(
        out,
        "\nBest possible, by exhaustive search over all cycles, for the {} weight sets with L <= {}: \
         mean {:.3}{worst}; {} searches ran out of steps. Of the {} (set, id order) pairs, the best \
         possible is reached by swrr-v1 in {}, min-gap-v1 in {}, min-gap-v2 in {}.",
        comparison.sets,
        args.optimum_max_length,
        comparison.best.mean_ratio(),
        comparison.out_of_steps,
        comparison.pairs,
        comparison.reached[0],
        comparison.reached[1],
        comparison.reached[2],
    )?;
    for (algorithm, shortfall) in ALGORITHMS.iter().zip(&comparison.shortfall).skip(1) {
        match shortfall {
            Some((factor, weights, got, best)) => writeln!(
                out,
                "Largest shortfall of {algorithm}: {} in {} id order, {} against {} possible ({factor:.3}×).",
                describe(weights),
                if weights.windows(2).all(|pair| pair[0] >= pair[1]) { "descending" } else { "ascending" },
                ratio(*got),
                ratio(*best),
            )?,
            None => writeln!(out, "{algorithm} reaches the best possible in every pair.")?,
        }
    }
    Ok(row)
}
