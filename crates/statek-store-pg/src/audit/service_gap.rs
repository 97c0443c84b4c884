//! A tenant's service gaps (issue 26, `statek audit`): how long a run
//! waited for its claim, counted in reservations from its tenant's first
//! slot reserved after the run became runnable to the slot that claimed
//! it, and how its tenant's slots in between ended.
//!
//! A slot whose range was reserved before the run's runnable time may
//! have been decided before the run existed, so it does not count; the
//! ranges of a shard are reserved in sequence order under its cursor's
//! lock, so their reservation times do not decrease with the sequence.
//! Only first attempts still on their run rows carry their runnable time
//! (a retried run's first one is not kept), as for the service lag.
//!
//! The look back remembers, per range of the current stretch of evidence
//! (the newest [`REMEMBERED`] ranges), the tenant's first slot in it and
//! running counts of its slots, so each claim costs a binary search. A
//! gap that may have begun before what the look back sees (before the
//! stretch, which starts at the audited span's start or after a hole, or
//! before the remembered ranges) is a lower bound and says so.

use std::collections::VecDeque;
use std::time::SystemTime;

use super::report::ServiceGap;

/// Ranges remembered for the look back.
const REMEMBERED: usize = 4_096;

/// How one of the tenant's slots ended, as far as a service gap cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Passed {
    /// It claimed a run.
    Claimed,
    /// Its claim asked the database and found no claimable run.
    Idle,
    /// Anything else: idle without asking (known empty), contended,
    /// limited, unused, or no record.
    Other,
}

/// One remembered range: the tenant's first slot in it, and the
/// tenant's slots (all, and idle) walked before that slot.
#[derive(Debug, Clone, Copy)]
struct RangeEntry {
    range_start: u64,
    reserved_at: SystemTime,
    first_slot: u64,
    slots_before: u64,
    idle_before: u64,
}

/// The look back of one tenant.
#[derive(Debug, Default)]
pub(super) struct ServiceGaps {
    ranges: VecDeque<RangeEntry>,
    /// The tenant's slots walked in the stretch, and of them idle.
    slots: u64,
    idle: u64,
    /// Whether the stretch began at the shard's first sequence (nothing
    /// before it to miss).
    from_shard_start: bool,
    /// The reservation time of the newest range dropped from `ranges`.
    dropped: Option<SystemTime>,
}

impl ServiceGaps {
    /// Starts a stretch of evidence at `sequence` (the span's start, or
    /// the first sequence after a hole): gaps are measured within it.
    pub(super) fn reset(&mut self, sequence: u64) {
        *self = Self {
            from_shard_start: sequence == 0,
            ..Self::default()
        };
    }

    /// The tenant's slot `sequence`, of the range starting at
    /// `range_start` reserved at `reserved_at`, ended `passed`;
    /// `runnable` is the runnable time of the first attempt it claimed,
    /// when known. Returns that run's gap.
    pub(super) fn slot(
        &mut self,
        sequence: u64,
        range_start: u64,
        reserved_at: SystemTime,
        passed: Passed,
        runnable: Option<SystemTime>,
    ) -> Option<ServiceGap> {
        if self.ranges.back().map(|r| r.range_start) != Some(range_start) {
            if self.ranges.len() == REMEMBERED {
                self.dropped = self.ranges.pop_front().map(|r| r.reserved_at);
            }
            self.ranges.push_back(RangeEntry {
                range_start,
                reserved_at,
                first_slot: sequence,
                slots_before: self.slots,
                idle_before: self.idle,
            });
        }
        let gap = runnable.map(|runnable| {
            let first = self.ranges.partition_point(|r| r.reserved_at < runnable);
            // Every remembered range is at least as new as the run: the
            // wait may have begun before the first of them.
            let before_sight = first == 0
                && match self.dropped {
                    Some(dropped) => dropped >= runnable,
                    None => !self.from_shard_start,
                };
            let from = self.ranges.get(first).copied().unwrap_or(RangeEntry {
                range_start,
                reserved_at,
                first_slot: sequence,
                slots_before: self.slots,
                idle_before: self.idle,
            });
            ServiceGap {
                reservations: sequence - from.first_slot,
                slots_passed: self.slots - from.slots_before,
                idle: self.idle - from.idle_before,
                at: sequence,
                at_least: before_sight,
            }
        });
        self.slots += 1;
        if passed == Passed::Idle {
            self.idle += 1;
        }
        gap
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// From the shard's start: a run runnable at 15 ms; the slot of the
    /// range reserved before (3, at 10 ms) does not count; slots 7 (idle)
    /// and 11 (contended) of the range at 20 ms passed it; slot 15 claimed
    /// it: 8 reservations from slot 7, two slots passed, one idle. A run
    /// runnable after every remembered range waited none.
    #[test]
    fn a_gap_counts_from_the_first_slot_reserved_after_the_run_was_runnable() {
        let mut gaps = ServiceGaps::default();
        gaps.reset(0);
        assert_eq!(gaps.slot(3, 0, at(10), Passed::Claimed, None), None);
        assert_eq!(gaps.slot(7, 4, at(20), Passed::Idle, None), None);
        assert_eq!(gaps.slot(11, 4, at(20), Passed::Other, None), None);
        assert_eq!(
            gaps.slot(15, 12, at(30), Passed::Claimed, Some(at(15))),
            Some(ServiceGap {
                reservations: 8,
                slots_passed: 2,
                idle: 1,
                at: 15,
                at_least: false,
            })
        );
        assert_eq!(
            gaps.slot(19, 16, at(40), Passed::Claimed, Some(at(35))),
            Some(ServiceGap {
                reservations: 0,
                slots_passed: 0,
                idle: 0,
                at: 19,
                at_least: false,
            })
        );
    }

    /// A stretch that starts after the shard's start (an audited span, or
    /// evidence after a hole): a run runnable before everything the look
    /// back saw waited at least what it saw; one runnable inside it, as
    /// measured.
    #[test]
    fn a_gap_that_began_before_the_stretch_is_at_least() {
        let mut gaps = ServiceGaps::default();
        gaps.reset(100);
        gaps.slot(101, 100, at(50), Passed::Other, None);
        let early = gaps
            .slot(105, 104, at(60), Passed::Claimed, Some(at(10)))
            .unwrap();
        assert_eq!(
            (early.reservations, early.slots_passed, early.at_least),
            (4, 1, true)
        );
        let late = gaps
            .slot(109, 108, at(70), Passed::Claimed, Some(at(55)))
            .unwrap();
        assert_eq!(
            (late.reservations, late.slots_passed, late.at_least),
            (4, 1, false)
        );
        // The first slot of a stretch claiming a run runnable before it.
        gaps.reset(200);
        let first = gaps
            .slot(201, 200, at(80), Passed::Claimed, Some(at(75)))
            .unwrap();
        assert_eq!((first.reservations, first.at_least), (0, true));
    }

    /// Beyond the ranges remembered, a gap is a lower bound; long waits
    /// within them are exact whatever the number of slots (one slot per
    /// range here, 4,096 ranges).
    #[test]
    fn a_gap_longer_than_the_look_back_is_at_least() {
        let mut gaps = ServiceGaps::default();
        gaps.reset(0);
        let ranges = REMEMBERED as u64 - 1;
        for i in 0..ranges {
            gaps.slot(i * 2 + 1, i * 2, at(100 + i), Passed::Other, None);
        }
        // The claim's range is the last one remembered: exact.
        let exact = gaps
            .slot(9_000, 8_999, at(10_000), Passed::Claimed, Some(at(100)))
            .unwrap();
        assert_eq!(
            (exact.reservations, exact.slots_passed, exact.at_least),
            (9_000 - 1, ranges, false)
        );
        // One more range pushes the first out: from slot 3 on, at least.
        let cut = gaps
            .slot(9_002, 9_001, at(10_001), Passed::Claimed, Some(at(100)))
            .unwrap();
        assert_eq!(
            (cut.reservations, cut.slots_passed, cut.at_least),
            (9_002 - 3, ranges, true)
        );
    }
}
