//! Paced earliest-deadline-first: `min-gap-v2`'s constructive candidate.
//!
//! For a target ratio every tenant gets a largest allowed gap
//! `g = floor(target · ceil(L / w))` (see `optimum::gap_for`). The schedule runs
//! slot by slot:
//!
//! - **Pacing.** Within a lap, tenant `i`'s pick number `k` (from 0) is
//!   released at slot `floor((k − lead) · L / w)` (0 while `k < lead`), so
//!   after `t + 1` slots it has had at most `ceil((t + 1) · w / L) + lead`
//!   picks, never more than `w`. Some released tenant always exists (the
//!   ceilings add up to at least `t + 1`), and every tenant ends the lap
//!   with exactly `w` picks.
//! - **Deadlines.** A released tenant is due `g` slots after its last pick
//!   (in the first lap, `g − 1`); each slot goes to the released tenant due
//!   first, on a tie the lower tenant index.
//!
//! Deadlines adapt to where the picks really fell, unlike the fixed windows
//! of `min-gap-v1`: two heavy tenants of nearly equal weight, whose ideal
//! positions drift over each other, take turns by urgency. The laps carry
//! the last picks over; the best of [`LAPS`] laps (by largest ratio, then
//! largest excess, measured on the lap as a cycle) is returned, and the caller verifies it
//! like any other candidate. `O(L · log tenants)` per lap, integer only.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::ratio::{cycle_score, CycleScore};
use crate::weight::TenantFairnessWeight;

/// Laps run; the first starts without history.
pub(crate) const LAPS: u32 = 3;

/// The release slot (within a lap) of pick `pick` of a tenant of `weight`.
fn release(pick: u32, lead: u32, weight: u32, length: u32) -> u32 {
    let paced = u64::from(pick.saturating_sub(lead)) * u64::from(length) / u64::from(weight.max(1));
    u32::try_from(paced).unwrap_or(u32::MAX)
}

/// The best lap of the paced EDF schedule of `tenants` (sorted by id,
/// summing to `length`) with allowed gaps `gaps` and `lead` picks of
/// pacing slack, with its score (largest ratio, then largest excess); `None` only if a lap could not be
/// filled (never expected).
pub(crate) fn paced_edf(
    tenants: &[TenantFairnessWeight],
    length: u32,
    gaps: &[u32],
    lead: u32,
) -> Option<(Vec<u16>, CycleScore)> {
    let count = tenants.len();
    let weights: Vec<u32> = tenants.iter().map(TenantFairnessWeight::weight).collect();
    let cycle = i64::from(length);
    // Absolute slot of each tenant's last pick, if any.
    let mut last: Vec<Option<i64>> = vec![None; count];
    let mut best: Option<(Vec<u16>, CycleScore)> = None;
    for lap in 0..i64::from(LAPS) {
        let start = lap * cycle;
        let mut picks = vec![0_u32; count];
        // (release slot within the lap, tenant) not yet released.
        let mut waiting: BinaryHeap<Reverse<(u32, u16)>> = (0_u16..)
            .zip(&weights)
            .map(|(tenant, &weight)| Reverse((release(0, lead, weight, length), tenant)))
            .collect();
        // (deadline, tenant) released.
        let mut ready: BinaryHeap<Reverse<(i64, u16)>> = BinaryHeap::new();
        let mut slots = Vec::with_capacity(usize::try_from(length).ok()?);
        for slot in 0..length {
            while let Some(&Reverse((at, tenant))) = waiting.peek() {
                if at > slot {
                    break;
                }
                waiting.pop();
                let index = usize::from(tenant);
                let gap = i64::from(*gaps.get(index)?);
                let deadline = match last.get(index)? {
                    Some(previous) => previous + gap,
                    None => start + gap - 1,
                };
                ready.push(Reverse((deadline, tenant)));
            }
            let Reverse((_, tenant)) = ready.pop()?;
            let index = usize::from(tenant);
            let now = start + i64::from(slot);
            *last.get_mut(index)? = Some(now);
            let made = picks.get_mut(index)?;
            *made += 1;
            let weight = *weights.get(index)?;
            if *made < weight {
                let at = release(*made, lead, weight, length).max(slot + 1);
                waiting.push(Reverse((at, tenant)));
            }
            slots.push(tenant);
        }
        if let Some(score) = cycle_score(tenants, &slots, length) {
            if best
                .as_ref()
                .is_none_or(|(_, kept)| score.is_better_than(*kept))
            {
                best = Some((slots, score));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::measure::measure_bounds;
    use crate::optimum::gap_for;
    use crate::ratio::{ideal_bound, BoundRatio};
    use crate::test_support::{length, letters, tenants};

    fn check(weights: &[u32], target: (u32, u32), lead: u32, cycle: &str, bounds: &[u32]) {
        let tenants = tenants(weights);
        let length = length(weights);
        let gaps: Vec<u32> = weights
            .iter()
            .map(|&w| {
                gap_for(
                    BoundRatio::new(target.0, target.1),
                    ideal_bound(length, w),
                    length,
                )
            })
            .collect();
        let (slots, _) = paced_edf(&tenants, length, &gaps, lead).unwrap();
        assert_eq!(letters(&slots), cycle, "{weights:?}");
        assert_eq!(
            measure_bounds(tenants.len(), &slots, length),
            bounds,
            "{weights:?}"
        );
    }

    #[test]
    fn releases() {
        // w = 3 of L = 8: picks released at 0, 2 (8/3) and 5 (16/3).
        let at: Vec<u32> = (0..3).map(|k| release(k, 0, 3, 8)).collect();
        assert_eq!(at, [0, 2, 5]);
        // One pick of lead: each pick one step earlier.
        let at: Vec<u32> = (0..3).map(|k| release(k, 1, 3, 8)).collect();
        assert_eq!(at, [0, 0, 2]);
    }

    #[test]
    fn cycles() {
        check(&[3, 1], (1, 1), 0, "aaab", &[2, 4]);
        check(&[1, 1, 1], (1, 1), 0, "abc", &[3, 3, 3]);
        check(&[3, 2, 1], (4, 3), 0, "ababac", &[2, 4, 6]);
    }
}
