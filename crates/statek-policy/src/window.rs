//! The window schedule, `min-gap-v1`'s third candidate: ideal positions,
//! windows sized from a target ratio, earliest-deadline-first (EDF) over the
//! windows, and a binary search for the smallest feasible target.
//!
//! # Positions and windows
//!
//! A tenant of weight `w` has `w` picks per cycle, ideally `L / w` slots
//! apart. Equal-weight tenants are staggered: the `m` members of a weight
//! class share the class's `w × m` evenly spaced positions, member `j` (in
//! id order) taking every `m`-th one starting from the `j`-th. The classes
//! are staggered as well: class `c` (classes ordered by first member) is
//! shifted by a fraction `f(c)` of its own spacing ([`ClassOffset`]: `c / C`
//! for `C` classes, or the golden-ratio sequence). Pick `k` of member `j` is
//! ideally at
//!
//! ```text
//! center = (j + k·m + f(c)) · L / (w·m)        (slots)
//! ```
//!
//! and its anchor is the center rounded to the nearest slot. Consecutive
//! anchors of a tenant are `floor(L/w)` or `ceil(L/w)` slots apart.
//!
//! For a target ratio `r` (a multiple of 1/1024) a tenant's target gap is
//! `g = floor(r · ceil(L / w))`, at least `ceil(L / w)`. The pick at an
//! anchor `y` that follows the previous anchor by `step` slots may go
//! anywhere in `y − b ..= y + (g − step − b)`, where `b` is the larger half
//! of the slack `g − ceil(L / w)`. Any two picks in consecutive windows are
//! then at most `step + (g − step − b) + b = g` slots apart, and so are the
//! last pick of a lap and the first of the next. A weight-1 tenant's gap is
//! `L` wherever its single pick is, so its window is the whole cycle from
//! its anchor on.
//!
//! # Feasibility
//!
//! The windows repeat every `L` slots. EDF runs over the repeating windows
//! lap after lap (each slot goes to the pending pick with the earliest
//! deadline; on a tie, the lower tenant index) until a lap without a missed
//! deadline or an idle slot ends with the same pending picks, relative to
//! the lap, as it started with: from then on the schedule repeats, and that
//! lap is the cycle. No such lap within [`MAX_LAPS`] laps makes the target
//! infeasible with that offset. A target is feasible if it is feasible with
//! one of the [`ClassOffset`]s, tried in order; the cycle is then verified,
//! counts and measured gaps, before it is used.
//!
//! # Search
//!
//! Only targets strictly below the best ratio of the other candidates can
//! matter. The largest such target is tried first; if it is feasible, a
//! binary search over `1..` that target (in steps of 1/1024) looks for the
//! smallest feasible one. About a dozen targets, each at most two EDF runs
//! of at most `MAX_LAPS × L` slots, all in integer arithmetic.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::class::WeightClass;
use crate::measure::{check_counts, measure_bounds};
use crate::ratio::{ideal_bound, BoundRatio};
use crate::weight::TenantFairnessWeight;

/// Targets are ratios `target / TARGET_SCALE`.
const TARGET_SCALE: u32 = 1024;

/// How many laps EDF may run before the schedule must repeat.
const MAX_LAPS: u32 = 8;

/// Where a tenant's ideal positions come from: its weight, its weight class
/// and its place in the class.
#[derive(Debug, Clone, Copy)]
struct Placement {
    weight: i64,
    /// The number of members of the tenant's class.
    class_size: i64,
    /// The tenant's place in its class, from 0, in id order.
    rank: i64,
    /// The class's place among the classes, from 0.
    class: i64,
}

/// One pick of one tenant: the slots `release..=deadline` of the first lap
/// (`release < L`; `deadline` may run into the next lap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    release: u32,
    deadline: u32,
    tenant: u16,
}

/// The window schedule of `tenants` (sorted by id; `classes` from
/// [`weight_classes`](crate::class::weight_classes)) with a largest ratio
/// strictly below `below`, or `None` if no target below it was found
/// feasible.
pub(crate) fn window_schedule(
    tenants: &[TenantFairnessWeight],
    classes: &[WeightClass],
    length: u32,
    below: BoundRatio,
) -> Option<Vec<u16>> {
    // The largest target with target / TARGET_SCALE < bound / ideal.
    let largest = (u64::from(below.bound) * u64::from(TARGET_SCALE))
        .checked_sub(1)?
        .checked_div(u64::from(below.ideal))?;
    let largest = u32::try_from(largest).ok()?;
    if largest < TARGET_SCALE {
        return None;
    }
    let placements = placements(tenants.len(), classes)?;
    let attempt = |target: u32| schedule_for_target(tenants, &placements, length, target);
    let mut best = attempt(largest)?;
    let (mut low, mut high) = (TARGET_SCALE, largest);
    while low < high {
        let middle = low + (high - low) / 2;
        match attempt(middle) {
            Some(slots) => {
                best = slots;
                high = middle;
            }
            None => low = middle + 1,
        }
    }
    Some(best)
}

/// Each tenant's [`Placement`], by tenant index.
fn placements(tenant_count: usize, classes: &[WeightClass]) -> Option<Vec<Placement>> {
    let empty = Placement {
        weight: 0,
        class_size: 0,
        rank: 0,
        class: 0,
    };
    let mut placements = alloc::vec![empty; tenant_count];
    for (class, class_index) in classes.iter().zip(0_i64..) {
        let class_size = i64::try_from(class.members.len()).ok()?;
        for (&member, rank) in class.members.iter().zip(0_i64..) {
            *placements.get_mut(usize::from(member))? = Placement {
                weight: i64::from(class.weight),
                class_size,
                rank,
                class: class_index,
            };
        }
    }
    // Every tenant is in exactly one class, so none is left empty.
    placements
        .iter()
        .all(|placement| placement.weight > 0)
        .then_some(placements)
}

/// How far each class is shifted, as a fraction of its own spacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClassOffset {
    /// Class `c` of `C` by `c / C`: evenly spread.
    Even,
    /// Class `c` by the fractional part of `c · 0.618034…` (the golden
    /// ratio's), which keeps classes apart however many there are; in
    /// integers, `(c · 40503 mod 65536) / 65536`.
    Golden,
}

impl ClassOffset {
    /// Tried in this order for every target.
    const ALL: [ClassOffset; 2] = [ClassOffset::Even, ClassOffset::Golden];

    /// The shift of class `class` of `class_count`, in units of
    /// `1 / (2·w·m)` slots (a class's spacing of `L / (w·m)` slots is
    /// `2·L` units).
    fn shift(self, class: i64, class_count: i64, cycle: i64) -> i64 {
        match self {
            ClassOffset::Even => 2 * cycle * class / class_count.max(1),
            ClassOffset::Golden => 2 * cycle * (class * 40_503).rem_euclid(65_536) / 65_536,
        }
    }
}

/// The verified cycle for `target`, trying each [`ClassOffset`] in turn, or
/// `None` if the target is infeasible with all of them.
fn schedule_for_target(
    tenants: &[TenantFairnessWeight],
    placements: &[Placement],
    length: u32,
    target: u32,
) -> Option<Vec<u16>> {
    let class_count = placements
        .iter()
        .map(|placement| placement.class)
        .max()?
        .checked_add(1)?;
    let gaps: Vec<u32> = tenants
        .iter()
        .map(|tenant| {
            let ideal = ideal_bound(length, tenant.weight());
            let gap = u64::from(ideal) * u64::from(target) / u64::from(TARGET_SCALE);
            u32::try_from(gap).unwrap_or(u32::MAX).clamp(ideal, length)
        })
        .collect();
    ClassOffset::ALL.into_iter().find_map(|offset| {
        let mut jobs = Vec::with_capacity(usize::try_from(length).ok()?);
        for ((placement, &gap), index) in placements.iter().zip(&gaps).zip(0_u16..) {
            let shift = offset.shift(placement.class, class_count, i64::from(length));
            push_jobs(&mut jobs, *placement, shift, length, gap, index)?;
        }
        jobs.sort_unstable();
        let slots = earliest_deadline_first(&jobs, length)?;
        check_counts(tenants, &slots).ok()?;
        let bounds = measure_bounds(tenants.len(), &slots, length);
        bounds
            .iter()
            .zip(&gaps)
            .all(|(bound, gap)| bound <= gap)
            .then_some(slots)
    })
}

/// Appends the windows of one tenant's picks for target gap `gap`, its
/// class shifted by `shift` units.
fn push_jobs(
    jobs: &mut Vec<Job>,
    placement: Placement,
    shift: i64,
    length: u32,
    gap: u32,
    tenant: u16,
) -> Option<()> {
    let Placement {
        weight,
        class_size,
        rank,
        ..
    } = placement;
    let cycle = i64::from(length);
    let gap = i64::from(gap);
    // Centers are counted in units of 1 / (2·w·m) slots; the anchor is the
    // center rounded to the nearest slot (halves up).
    let unit = 2 * weight * class_size;
    let anchor = |pick: i64| {
        let center = 2 * cycle * (rank + pick * class_size) + shift;
        (center + weight * class_size).div_euclid(unit)
    };
    let ideal = i64::from(ideal_bound(length, u32::try_from(weight).ok()?));
    // The slack beyond the ideal gap; the larger half of it goes before
    // the anchor.
    let before = (gap - ideal + 1) / 2;
    let mut previous = anchor(weight - 1) - cycle;
    for pick in 0..weight {
        let current = anchor(pick);
        let (release, deadline) = if weight == 1 {
            (current, current + cycle - 1)
        } else {
            let step = current - previous;
            (current - before, current + gap - step - before)
        };
        previous = current;
        if release > deadline {
            return None;
        }
        // The same window one lap earlier or later is the same window.
        let laps = release.div_euclid(cycle) * cycle;
        jobs.push(Job {
            release: u32::try_from(release - laps).ok()?,
            deadline: u32::try_from(deadline - laps).ok()?,
            tenant,
        });
    }
    Some(())
}

/// Runs EDF over the repeating `jobs` (sorted, one lap of releases) until a
/// lap without missed deadlines or idle slots ends with the same pending
/// picks as it started with, and returns that lap; `None` if there is none
/// within [`MAX_LAPS`] laps.
///
/// The first lap starts with nothing pending, although in the repeating
/// schedule the windows of the lap before reach into it; until EDF settles,
/// a pick that misses its deadline is dropped and its lap marked unusable.
fn earliest_deadline_first(jobs: &[Job], length: u32) -> Option<Vec<u16>> {
    let lap_length = usize::try_from(length).ok()?;
    // Pending picks as (absolute deadline, tenant), earliest first.
    let mut pending: BinaryHeap<Reverse<(u32, u16)>> = BinaryHeap::new();
    let mut previous: Option<Lap> = None;
    for lap in 0..MAX_LAPS {
        let start = lap.checked_mul(length)?;
        let mut pending_at_start: Vec<(i64, u16)> = pending
            .iter()
            .map(|Reverse((deadline, tenant))| (i64::from(*deadline) - i64::from(start), *tenant))
            .collect();
        pending_at_start.sort_unstable();
        if let Some(previous) = previous.take() {
            if previous.clean && previous.pending_at_start == pending_at_start {
                return Some(previous.slots);
            }
        }
        let mut slots = Vec::with_capacity(lap_length);
        let mut clean = true;
        let mut next_job = jobs.iter().peekable();
        for slot in 0..length {
            while let Some(job) = next_job.next_if(|job| job.release == slot) {
                pending.push(Reverse((start.checked_add(job.deadline)?, job.tenant)));
            }
            let now = start.checked_add(slot)?;
            let pick = loop {
                match pending.pop() {
                    Some(Reverse((deadline, _))) if deadline < now => clean = false,
                    Some(Reverse((_, tenant))) => break Some(tenant),
                    None => break None,
                }
            };
            // An idle slot leaves the lap short of picks.
            clean &= pick.is_some();
            slots.push(pick.unwrap_or(u16::MAX));
        }
        previous = Some(Lap {
            pending_at_start,
            slots,
            clean,
        });
    }
    None
}

/// One lap of the EDF run.
struct Lap {
    /// The pending picks when the lap started, as (deadline relative to
    /// the lap's first slot, tenant), sorted.
    pending_at_start: Vec<(i64, u16)>,
    /// The tenant picked in each slot (`u16::MAX` when idle).
    slots: Vec<u16>,
    /// Whether every pick made its deadline and no slot was idle.
    clean: bool,
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::class::weight_classes;
    use crate::test_support::tenants;

    /// The cycle for `target` and its measured bounds.
    fn at_target(weights: &[u32], target: u32) -> Option<(Vec<u16>, Vec<u32>)> {
        let tenants = tenants(weights);
        let classes = weight_classes(&tenants);
        let placements = placements(tenants.len(), &classes).unwrap();
        let length = weights.iter().sum();
        let slots = schedule_for_target(&tenants, &placements, length, target)?;
        let bounds = measure_bounds(tenants.len(), &slots, length);
        Some((slots, bounds))
    }

    fn check(weights: &[u32], target: u32, expected: Option<(&[u16], &[u32])>) {
        let actual = at_target(weights, target);
        let actual = actual
            .as_ref()
            .map(|(slots, bounds)| (slots.as_slice(), bounds.as_slice()));
        assert_eq!(actual, expected, "{weights:?} at {target}/1024");
    }

    #[test]
    fn targets() {
        // Weight 2 among four weight-1 tenants (two classes, L = 6): the
        // weight-2 tenant is anchored at slots 2 and 5 (its class is
        // staggered by half its spacing) with no slack; the weight-1
        // tenants' windows are the whole cycle from slots 0, 2, 3 and 5.
        check(
            &[1, 2, 1, 1, 1],
            1024,
            Some((&[4, 0, 1, 2, 3, 1], &[6, 3, 6, 6, 6])),
        );
        // Equal weights: one class, members staggered one slot apart.
        check(&[2, 2, 2], 1024, Some((&[0, 1, 2, 0, 1, 2], &[3, 3, 3])));
        // {3, 2, 1} cannot do better than 4/3 (b's ideal is 3): infeasible
        // just below, and exactly 4/3 at the first target above.
        check(&[3, 2, 1], 1365, None);
        check(&[3, 2, 1], 1366, Some((&[0, 1, 0, 1, 0, 2], &[2, 4, 6])));
        // {10, 5, 4, 1} cannot do better than 3/2 (b: 6 against 4).
        check(&[10, 5, 4, 1], 1535, None);
        check(
            &[10, 5, 4, 1],
            1536,
            Some((
                &[1, 0, 2, 0, 1, 0, 3, 0, 2, 0, 1, 0, 1, 0, 2, 0, 1, 0, 2, 0],
                &[2, 6, 6, 20],
            )),
        );
    }

    fn check_jobs(placement: Placement, classes: i64, length: u32, gap: u32, expected: &[Job]) {
        let shift = ClassOffset::Even.shift(placement.class, classes, i64::from(length));
        let mut jobs = Vec::new();
        push_jobs(&mut jobs, placement, shift, length, gap, 7).unwrap();
        assert_eq!(jobs, expected);
    }

    #[test]
    fn class_offsets() {
        let shifts = |offset: ClassOffset| -> Vec<i64> {
            (0..5).map(|class| offset.shift(class, 5, 8)).collect()
        };
        // In units of a 16th of a class's spacing here (2·L = 16).
        assert_eq!(shifts(ClassOffset::Even), [0, 3, 6, 9, 12]);
        assert_eq!(shifts(ClassOffset::Golden), [0, 9, 3, 13, 7]);
    }

    fn job(release: u32, deadline: u32) -> Job {
        Job {
            release,
            deadline,
            tenant: 7,
        }
    }

    #[test]
    fn windows() {
        let alone = |weight| Placement {
            weight,
            class_size: 1,
            rank: 0,
            class: 0,
        };
        // L = 8, w = 2: anchors 0 and 4; g = 4 leaves no slack.
        check_jobs(alone(2), 1, 8, 4, &[job(0, 0), job(4, 4)]);
        // g = 6: two slots of slack, one before and one after the anchor
        // (the first window starts in the lap before, so one lap later).
        check_jobs(alone(2), 1, 8, 6, &[job(7, 9), job(3, 5)]);
        // L = 8, w = 3: anchors 0, 3 (2.67) and 5 (5.33), steps 3, 3, 2;
        // g = 3 (ideal): the window after the short step gets its slot.
        check_jobs(alone(3), 1, 8, 3, &[job(0, 0), job(3, 3), job(5, 6)]);
        // Weight 1: the whole cycle from the anchor on.
        check_jobs(alone(1), 1, 8, 8, &[job(0, 7)]);
        // The second of two members of a class (m = 2, w = 2, L = 8) is
        // anchored half a period later; the second of four classes is
        // shifted by a quarter of its class's spacing of 2 slots.
        let member = |rank, class| Placement {
            weight: 2,
            class_size: 2,
            rank,
            class,
        };
        check_jobs(member(1, 0), 1, 8, 4, &[job(2, 2), job(6, 6)]);
        check_jobs(member(0, 1), 4, 8, 4, &[job(1, 1), job(5, 5)]);
    }

    #[test]
    fn edf_repeats() {
        // Two tenants that both want slot 0 of every lap can never repeat.
        let pick = |release, deadline, tenant| Job {
            release,
            deadline,
            tenant,
        };
        assert_eq!(
            earliest_deadline_first(&[pick(0, 0, 0), pick(0, 0, 1)], 2),
            None
        );
        // One pick per slot: repeats after the first lap.
        assert_eq!(
            earliest_deadline_first(&[pick(0, 1, 0), pick(1, 1, 1)], 2),
            Some(alloc::vec![0, 1])
        );
        // A window reaching into the next lap: the first lap idles in
        // slot 0 (nothing from the lap before is pending), the second
        // starts with tenant 1's pick from the first.
        assert_eq!(
            earliest_deadline_first(&[pick(1, 1, 0), pick(1, 2, 1)], 2),
            Some(alloc::vec![1, 0])
        );
    }
}
