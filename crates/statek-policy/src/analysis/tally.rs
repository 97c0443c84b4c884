//! [`Tally`]: one algorithm's measures over a group of weight sets.

use alloc::string::String;
use alloc::vec::Vec;

use super::set_measure::SetMeasure;
use crate::ratio::BoundRatio;

/// The worst and mean of one algorithm's [`SetMeasure`]s over a group of
/// weight sets, keeping the worst set (the first one on a tie).
///
/// ```
/// use statek_policy::analysis::{BoundRatio, Tally};
/// let mut tally = Tally::default();
/// tally.add_ratio(BoundRatio::new(3, 2), 1, || "first".into(), &[2, 1]);
/// tally.add_ratio(BoundRatio::new(6, 4), 2, || "second".into(), &[4, 3]);
/// assert_eq!(tally.sets(), 2);
/// assert_eq!(tally.worst().map(|w| w.label.as_str()), Some("first"));
/// assert_eq!((tally.worst_excess(), tally.within_one_slot()), (2, 1));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Tally {
    sets: usize,
    ratio_sum: f64,
    excess_sum: u64,
    worst_excess: u32,
    within_one_slot: usize,
    worst: Option<WorstSet>,
}

/// The worst set of a [`Tally`].
#[derive(Debug, Clone, PartialEq)]
pub struct WorstSet {
    /// Its largest ratio.
    pub ratio: BoundRatio,
    /// Its label (family and number, say).
    pub label: String,
    /// Its weights, in id order.
    pub weights: Vec<u32>,
}

impl Tally {
    /// Adds one set's measure.
    pub fn add(&mut self, measure: &SetMeasure, label: impl FnOnce() -> String, weights: &[u32]) {
        self.add_ratio(
            measure.largest_ratio(),
            measure.largest_excess(),
            label,
            weights,
        );
    }

    /// Adds one set by its largest ratio and largest excess (slots).
    pub fn add_ratio(
        &mut self,
        ratio: BoundRatio,
        excess: u32,
        label: impl FnOnce() -> String,
        weights: &[u32],
    ) {
        self.sets += 1;
        self.ratio_sum += ratio.to_f64();
        self.excess_sum += u64::from(excess);
        self.worst_excess = self.worst_excess.max(excess);
        self.within_one_slot += usize::from(excess <= 1);
        if self
            .worst
            .as_ref()
            .is_none_or(|worst| worst.ratio.is_below(ratio))
        {
            self.worst = Some(WorstSet {
                ratio,
                label: label(),
                weights: weights.to_vec(),
            });
        }
    }

    /// Adds everything `other` counted; its worst set replaces ours only if
    /// strictly worse.
    pub fn merge(&mut self, other: &Tally) {
        self.sets += other.sets;
        self.ratio_sum += other.ratio_sum;
        self.excess_sum += other.excess_sum;
        self.worst_excess = self.worst_excess.max(other.worst_excess);
        self.within_one_slot += other.within_one_slot;
        if let Some(theirs) = &other.worst {
            if self
                .worst
                .as_ref()
                .is_none_or(|worst| worst.ratio.is_below(theirs.ratio))
            {
                self.worst = Some(theirs.clone());
            }
        }
    }

    /// Sets counted.
    #[must_use]
    pub fn sets(&self) -> usize {
        self.sets
    }

    /// The worst set, if any was counted.
    #[must_use]
    pub fn worst(&self) -> Option<&WorstSet> {
        self.worst.as_ref()
    }

    /// The worst largest ratio (0 without sets).
    #[must_use]
    pub fn worst_ratio(&self) -> f64 {
        self.worst
            .as_ref()
            .map_or(0.0, |worst| worst.ratio.to_f64())
    }

    /// The mean largest ratio (0 without sets).
    #[must_use]
    pub fn mean_ratio(&self) -> f64 {
        self.ratio_sum / count(self.sets)
    }

    /// The largest additive excess of any set, in slots.
    #[must_use]
    pub fn worst_excess(&self) -> u32 {
        self.worst_excess
    }

    /// The mean of the sets' largest excess, in slots.
    #[must_use]
    pub fn mean_excess(&self) -> f64 {
        // Exact below 2^53, far above any count here.
        let sum = u32::try_from(self.excess_sum).map_or(f64::MAX, f64::from);
        sum / count(self.sets)
    }

    /// Sets where every tenant's bound is at most `ceil(L / w) + 1`.
    #[must_use]
    pub fn within_one_slot(&self) -> usize {
        self.within_one_slot
    }
}

fn count(sets: usize) -> f64 {
    u32::try_from(sets.max(1)).map_or(f64::MAX, f64::from)
}
