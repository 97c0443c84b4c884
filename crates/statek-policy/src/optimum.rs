//! The exact optimum: the smallest largest ratio of bound to `ceil(L / w)`
//! any cycle of a weight set can have, found by branch and bound, with a
//! cycle that reaches it. `min-gap-v2` uses it for short cycles; the bounds
//! report compares every algorithm with it.
//!
//! # Search
//!
//! A target ratio `r` gives every tenant a largest allowed gap
//! `g = floor(r · ceil(L / w))`. Whether some cycle keeps all of them is a
//! depth-first search over the slots: slot 0 holds tenant 0 (a rotation of
//! a cycle has the same gaps); in every later slot a tenant whose gap would
//! otherwise be exceeded is forced (two such tenants: backtrack), else the
//! tenants with picks left are tried earliest due first (ties by index).
//! Tenants of equal weight are interchangeable, so one may start only after
//! every lower-indexed tenant of its weight has started. A branch is cut
//! when a tenant's remaining picks cannot bridge the distance to its first
//! pick of the next lap. Feasibility only grows with `r`, so a binary search
//! over the candidate ratios (every `bound / ideal` with `bound` in
//! `ideal..=L`) finds the smallest feasible one.
//!
//! Every visited node counts as one step; the search gives up after
//! `max_steps`, never after a time, so it ends the same way everywhere.

use alloc::vec;
use alloc::vec::Vec;

use crate::ratio::{ideal_bound, BoundRatio};

/// What [`optimum`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Optimum {
    /// The smallest largest ratio any cycle can have, and the first cycle
    /// the search found with it (tenant index per slot).
    Found {
        /// The optimal largest ratio.
        ratio: BoundRatio,
        /// A cycle that reaches it.
        slots: Vec<u16>,
        /// Search steps used.
        steps: u64,
    },
    /// No cycle has a largest ratio strictly below the given limit.
    NoneBelow {
        /// Search steps used.
        steps: u64,
    },
    /// The search ran out of steps before it could decide.
    OutOfSteps,
}

/// The smallest largest ratio of bound to `ceil(L / w)` over all cycles of
/// `weights` (by tenant index, summing to `L`), considering only ratios
/// strictly below `below` if given, in at most `max_steps` search steps.
///
/// ```
/// use statek_policy::analysis::{optimum, BoundRatio, Optimum};
/// // {3, 2, 1}: 4/3 at best (the weight-2 tenant waits 4 against 3).
/// match optimum(&[3, 2, 1], None, 1_000_000) {
///     Optimum::Found { ratio, slots, .. } => {
///         assert_eq!(ratio, BoundRatio::new(4, 3));
///         assert_eq!(slots.len(), 6);
///     }
///     other => panic!("{other:?}"),
/// }
/// assert!(matches!(
///     optimum(&[3, 2, 1], Some(BoundRatio::new(4, 3)), 1_000_000),
///     Optimum::NoneBelow { .. }
/// ));
/// ```
#[must_use]
pub fn optimum(weights: &[u32], below: Option<BoundRatio>, max_steps: u64) -> Optimum {
    let length: u32 = weights.iter().sum();
    let mut candidates: Vec<BoundRatio> = Vec::new();
    for &weight in weights {
        let ideal = ideal_bound(length, weight);
        for bound in ideal..=length {
            let ratio = BoundRatio::new(bound, ideal);
            if below.is_none_or(|below| ratio.is_below(below)) {
                candidates.push(ratio);
            }
        }
    }
    candidates.sort_by(BoundRatio::cmp_value);
    candidates.dedup_by(|a, b| a.cmp_value(b).is_eq());
    let mut steps = 0_u64;
    let attempt = |ratio: BoundRatio, steps: &mut u64| -> Result<Option<Vec<u16>>, ()> {
        let gaps: Vec<u32> = weights
            .iter()
            .map(|&weight| gap_for(ratio, ideal_bound(length, weight), length))
            .collect();
        let mut search = Search::new(weights, &gaps, max_steps.saturating_sub(*steps));
        let found = search.run();
        *steps = steps.saturating_add(search.steps);
        if search.out_of_steps {
            return Err(());
        }
        Ok(found.then_some(search.slots))
    };
    let Some(&largest) = candidates.last() else {
        return Optimum::NoneBelow { steps };
    };
    let mut best = match attempt(largest, &mut steps) {
        Err(()) => return Optimum::OutOfSteps,
        Ok(None) => return Optimum::NoneBelow { steps },
        Ok(Some(slots)) => (largest, slots),
    };
    // candidates[high] is feasible; everything below `low` is not.
    let (mut low, mut high) = (0_usize, candidates.len() - 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let Some(&ratio) = candidates.get(middle) else {
            break;
        };
        match attempt(ratio, &mut steps) {
            Err(()) => return Optimum::OutOfSteps,
            Ok(Some(slots)) => {
                best = (ratio, slots);
                high = middle;
            }
            Ok(None) => low = middle + 1,
        }
    }
    Optimum::Found {
        ratio: best.0,
        slots: best.1,
        steps,
    }
}

/// The largest gap `floor(ratio · ideal)` a target ratio allows a tenant,
/// at least `ideal` and at most `length`.
pub(crate) fn gap_for(ratio: BoundRatio, ideal: u32, length: u32) -> u32 {
    let gap = u64::from(ratio.bound()) * u64::from(ideal) / u64::from(ratio.ideal());
    u32::try_from(gap).unwrap_or(u32::MAX).clamp(ideal, length)
}

/// Marks a tenant that has no pick yet.
const NONE: u32 = u32::MAX;

/// The depth-first search for one set of allowed gaps.
struct Search<'a> {
    length: u32,
    gaps: &'a [u32],
    remaining: Vec<u32>,
    first: Vec<u32>,
    last: Vec<u32>,
    /// For each tenant, the lower-indexed tenant of the same weight that
    /// must start first (or itself when there is none).
    previous_of_weight: Vec<usize>,
    slots: Vec<u16>,
    steps: u64,
    max_steps: u64,
    out_of_steps: bool,
}

impl<'a> Search<'a> {
    fn new(weights: &[u32], gaps: &'a [u32], max_steps: u64) -> Self {
        let previous_of_weight = (0..weights.len())
            .map(|i| {
                let weight = weights.get(i).copied().unwrap_or(0);
                (0..i)
                    .rev()
                    .find(|&j| weights.get(j) == Some(&weight))
                    .unwrap_or(i)
            })
            .collect();
        Self {
            length: weights.iter().sum(),
            gaps,
            remaining: weights.to_vec(),
            first: vec![NONE; weights.len()],
            last: vec![NONE; weights.len()],
            previous_of_weight,
            slots: Vec::with_capacity(usize::try_from(weights.iter().sum::<u32>()).unwrap_or(0)),
            steps: 0,
            max_steps,
            out_of_steps: false,
        }
    }

    /// Whether a cycle exists; `slots` holds it when it does.
    fn run(&mut self) -> bool {
        if self.remaining.is_empty() || self.length == 0 {
            return false;
        }
        self.place(0, 0) && self.extend(1)
    }

    /// Puts tenant `i` in `slot` if that keeps its gaps possible.
    fn place(&mut self, i: usize, slot: u32) -> bool {
        let (Some(remaining), Some(&gap)) = (self.remaining.get(i).copied(), self.gaps.get(i))
        else {
            return false;
        };
        let (first, last) = (self.first[i], self.last[i]);
        if remaining == 0 || (last != NONE && slot - last > gap) {
            return false;
        }
        let first_now = if first == NONE { slot } else { first };
        // The gap from the last pick of the lap to the first of the next.
        if remaining == 1 && first_now + self.length - slot > gap {
            return false;
        }
        self.remaining[i] = remaining - 1;
        self.first[i] = first_now;
        self.last[i] = slot;
        self.slots.push(u16::try_from(i).unwrap_or(u16::MAX));
        true
    }

    fn unplace(&mut self, i: usize, first: u32, last: u32) {
        self.remaining[i] += 1;
        self.first[i] = first;
        self.last[i] = last;
        self.slots.pop();
    }

    /// The last slot by which tenant `i` must be picked next.
    fn due(&self, i: usize) -> u32 {
        let gap = self.gaps[i];
        if self.last[i] == NONE {
            // Not started: its first pick must come early enough for the
            // wrap gap from the last pick of the lap (at most L - 1).
            gap.saturating_sub(1)
        } else {
            self.last[i] + gap
        }
    }

    fn extend(&mut self, slot: u32) -> bool {
        self.steps += 1;
        if self.steps > self.max_steps {
            self.out_of_steps = true;
            return false;
        }
        if slot == self.length {
            return self.remaining.iter().all(|&r| r == 0);
        }
        let tenants = self.remaining.len();
        let mut forced = None;
        let mut choices: Vec<(u32, usize)> = Vec::new();
        for i in 0..tenants {
            let remaining = self.remaining[i];
            if remaining == 0 {
                continue;
            }
            let due = self.due(i);
            if due < slot {
                return false;
            }
            if self.last[i] != NONE {
                // Picks needed to bridge from the last pick to the first
                // pick of the next lap, gaps of at most `gap` each.
                let distance = self.first[i] + self.length - self.last[i];
                if distance.div_ceil(self.gaps[i]) - 1 > remaining {
                    return false;
                }
            }
            if due == slot {
                if forced.is_some() {
                    return false;
                }
                forced = Some(i);
            }
            let previous = self.previous_of_weight[i];
            if self.first[i] == NONE && previous != i && self.first[previous] == NONE {
                continue;
            }
            choices.push((due, i));
        }
        if let Some(i) = forced {
            choices.clear();
            choices.push((slot, i));
        }
        choices.sort_unstable();
        for (_, i) in choices {
            let (first, last) = (self.first[i], self.last[i]);
            if !self.place(i, slot) {
                continue;
            }
            if self.extend(slot + 1) {
                return true;
            }
            self.unplace(i, first, last);
            if self.out_of_steps {
                return false;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::measure_bounds;
    use crate::ratio::largest_of;

    fn check(weights: &[u32], expected: (u32, u32)) {
        let length: u32 = weights.iter().sum();
        match optimum(weights, None, 10_000_000) {
            Optimum::Found { ratio, slots, .. } => {
                assert_eq!(
                    ratio.cmp_value(&BoundRatio::new(expected.0, expected.1)),
                    core::cmp::Ordering::Equal,
                    "{weights:?}: {ratio:?}"
                );
                // The cycle really has that ratio.
                let bounds = measure_bounds(weights.len(), &slots, length);
                let measured = largest_of(weights.iter().copied(), &bounds, length).unwrap();
                assert!(measured.cmp_value(&ratio).is_eq(), "{weights:?}");
                for (i, &w) in weights.iter().enumerate() {
                    let count = slots.iter().filter(|&&s| usize::from(s) == i).count();
                    assert_eq!(count, usize::try_from(w).unwrap());
                }
            }
            other => panic!("{weights:?}: {other:?}"),
        }
    }

    #[test]
    fn known_optima() {
        check(&[1], (1, 1));
        check(&[3, 1], (2, 2));
        check(&[1, 1, 1], (1, 1));
        check(&[3, 2, 1], (4, 3));
        check(&[10, 5, 4, 1], (6, 4));
        check(&[5, 2, 1], (2, 2));
        check(&[6, 2, 1], (2, 2));
        check(&[1, 2, 3], (4, 3));
        check(&[2, 2, 2, 1, 1], (4, 4));
    }

    #[test]
    fn limits_and_budgets() {
        assert!(matches!(
            optimum(&[3, 2, 1], Some(BoundRatio::new(4, 3)), 1_000_000),
            Optimum::NoneBelow { .. }
        ));
        assert!(matches!(
            optimum(&[3, 2, 1], Some(BoundRatio::new(3, 2)), 1_000_000),
            Optimum::Found { .. }
        ));
        assert_eq!(optimum(&[10, 5, 4, 1], None, 3), Optimum::OutOfSteps);
        // No candidate ratio below 1 exists: nothing to search.
        assert_eq!(
            optimum(&[1], Some(BoundRatio::new(1, 1)), 10),
            Optimum::NoneBelow { steps: 0 }
        );
    }
}
