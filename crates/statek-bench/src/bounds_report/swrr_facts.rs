//! What the `swrr-v1` cycles of one report showed, summed over the cycles
//! from [`SwrrProperties`] (computed by statek-policy).

use std::fmt::Write as _;

use anyhow::Result;
use statek_policy::analysis::SwrrProperties;

use super::format::{describe, letters};

/// A property that fails on some set: the smallest such set (by cycle
/// length, then tenants) and what happened.
struct Counterexample {
    weights: Vec<u32>,
    detail: String,
    cycle: String,
}

/// The `swrr-v1` properties over every cycle checked.
#[derive(Default)]
pub struct SwrrFacts {
    cycles: usize,
    counts_exact: usize,
    over_service_within_bound: usize,
    largest_over_service: f64,
    lag_of_a_slot: usize,
    largest_lag: f64,
    largest_lag_at: String,
    lag_example: Option<Counterexample>,
    gap_of_twice_share: usize,
    gap_example: Option<Counterexample>,
    gap_of_twice_ideal: usize,
    largest_ratio: f64,
    largest_gap_over_share: f64,
}

impl SwrrFacts {
    /// Adds the `swrr-v1` cycle `slots` of `weights`.
    pub fn check(&mut self, weights: &[u32], slots: &[u16]) {
        let facts = SwrrProperties::of(weights, slots);
        let length = f64::from(facts.length);
        self.cycles += 1;
        self.counts_exact += usize::from(facts.counts_exact);
        self.over_service_within_bound += usize::from(facts.over_service_within_bound());
        self.largest_over_service = self
            .largest_over_service
            .max(facts.largest_over_service as f64 / length);
        let lag = facts.largest_lag;
        let lag_slots = lag.behind as f64 / length;
        if lag_slots > self.largest_lag {
            self.largest_lag = lag_slots;
            self.largest_lag_at = format!("t{:04} of {}", lag.tenant, describe(weights));
        }
        if facts.lag_of_a_slot() {
            self.lag_of_a_slot += 1;
            let detail = format!(
                "t{:04} (weight {}) is {lag_slots:.3} slots behind its share after {} slots, \
                 having been picked {} times",
                lag.tenant, weights[lag.tenant], lag.slot, lag.picks_before
            );
            offer(&mut self.lag_example, weights, detail, slots);
        }
        self.largest_ratio = self.largest_ratio.max(facts.largest_ratio.to_f64());
        self.gap_of_twice_ideal += facts.tenants_at_twice_ideal;
        self.largest_gap_over_share = self
            .largest_gap_over_share
            .max(facts.largest_gap_times_weight as f64 / length);
        if let Some((tenant, gap)) = facts.gap_of_twice_share {
            self.gap_of_twice_share += 1;
            let detail = format!(
                "t{tenant:04} (weight {}) waits {gap} slots; 2·L/w = {:.3}",
                weights[tenant],
                2.0 * length / f64::from(weights[tenant]),
            );
            offer(&mut self.gap_example, weights, detail, slots);
        }
    }

    /// The cycles checked.
    pub fn cycles(&self) -> usize {
        self.cycles
    }

    /// The facts as the report's last section.
    pub fn write(&self, out: &mut String) -> Result<()> {
        writeln!(
            out,
            "\nswrr-v1 on all {} cycles above (families, short cycles, all orders):\n\n\
             - exact counts (each tenant picked `w` times per cycle): {} of {}\n\
             - over-service at most 1 − 1/k slots (k tenants): {} of {}; largest seen {:.3} slots\n\
             - largest ratio of bound to ceil(L/w): {:.3}; a gap of 2·ceil(L/w) or more: {} tenants\n\
             - largest lag behind the proportional share: {:.3} slots ({}); a whole slot or more: {} cycles\n\
             - largest gap as a multiple of L/w: {:.3}; a gap of 2·L/w or more: {} cycles",
            self.cycles,
            self.counts_exact,
            self.cycles,
            self.over_service_within_bound,
            self.cycles,
            self.largest_over_service,
            self.largest_ratio,
            self.gap_of_twice_ideal,
            self.largest_lag,
            self.largest_lag_at,
            self.lag_of_a_slot,
            self.largest_gap_over_share,
            self.gap_of_twice_share,
        )?;
        for (name, example) in [
            ("lag of a whole slot", &self.lag_example),
            ("gap of 2·L/w", &self.gap_example),
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
