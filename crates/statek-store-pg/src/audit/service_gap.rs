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

use std::collections::VecDeque;
use std::time::SystemTime;

/// The tenant's slots remembered for the look back (the newest ones of
/// the current stretch of evidence); a gap longer than that is reported
/// as at least what they cover.
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

/// One remembered slot of the tenant.
#[derive(Debug, Clone, Copy)]
struct OwnSlot {
    sequence: u64,
    reserved_at: SystemTime,
    passed: Passed,
}

/// One run's wait for its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServiceGap {
    /// Reservations from its tenant's first slot reserved at or after its
    /// runnable time to the slot that claimed it (0: that first slot
    /// claimed it).
    pub(super) reservations: u64,
    /// Its tenant's slots in between, which did not claim it.
    pub(super) slots_passed: u64,
    /// Of those, the ones whose claim found no claimable run.
    pub(super) idle: u64,
    /// The claiming slot.
    pub(super) at: u64,
    /// More slots passed than the look back remembers: a lower bound.
    pub(super) at_least: bool,
}

/// The look back of one tenant.
#[derive(Debug, Default)]
pub(super) struct ServiceGaps {
    recent: VecDeque<OwnSlot>,
    /// The reservation time of the newest slot dropped from `recent`.
    dropped: Option<SystemTime>,
}

impl ServiceGaps {
    /// Forgets every slot (a hole in the evidence: gaps are measured
    /// within a stretch of evidence only).
    pub(super) fn reset(&mut self) {
        self.recent.clear();
        self.dropped = None;
    }

    /// The tenant's slot `sequence`, of a range reserved at
    /// `reserved_at`, ended `passed`; `runnable` is the runnable time of
    /// the first attempt it claimed, when known. Returns that run's gap.
    pub(super) fn slot(
        &mut self,
        sequence: u64,
        reserved_at: SystemTime,
        passed: Passed,
        runnable: Option<SystemTime>,
    ) -> Option<ServiceGap> {
        let gap = runnable.map(|runnable| {
            let first = self.recent.partition_point(|s| s.reserved_at < runnable);
            let waited = self.recent.range(first..);
            let (mut slots_passed, mut idle) = (0, 0);
            for slot in waited.clone() {
                slots_passed += 1;
                if slot.passed == Passed::Idle {
                    idle += 1;
                }
            }
            ServiceGap {
                reservations: waited.clone().next().map_or(0, |s| sequence - s.sequence),
                slots_passed,
                idle,
                at: sequence,
                at_least: first == 0 && self.dropped.is_some_and(|at| at >= runnable),
            }
        });
        if self.recent.len() == REMEMBERED {
            self.dropped = self.recent.pop_front().map(|s| s.reserved_at);
        }
        self.recent.push_back(OwnSlot {
            sequence,
            reserved_at,
            passed,
        });
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

    /// A run runnable at 15 ms: the slots reserved before (3 at 10 ms) do
    /// not count; slots 7 (idle) and 11 (contended) at 20 ms passed it;
    /// slot 15 claimed it: 8 reservations from slot 7, two slots passed,
    /// one idle. A run runnable after every remembered slot waited none.
    #[test]
    fn a_gap_counts_from_the_first_slot_reserved_after_the_run_was_runnable() {
        let mut gaps = ServiceGaps::default();
        assert_eq!(gaps.slot(3, at(10), Passed::Claimed, None), None);
        assert_eq!(gaps.slot(7, at(20), Passed::Idle, None), None);
        assert_eq!(gaps.slot(11, at(20), Passed::Other, None), None);
        assert_eq!(
            gaps.slot(15, at(30), Passed::Claimed, Some(at(15))),
            Some(ServiceGap {
                reservations: 8,
                slots_passed: 2,
                idle: 1,
                at: 15,
                at_least: false,
            })
        );
        assert_eq!(
            gaps.slot(19, at(40), Passed::Claimed, Some(at(35))),
            Some(ServiceGap {
                reservations: 0,
                slots_passed: 0,
                idle: 0,
                at: 19,
                at_least: false,
            })
        );
        gaps.reset();
        assert_eq!(
            gaps.slot(23, at(50), Passed::Claimed, Some(at(0)))
                .map(|g| g.reservations),
            Some(0)
        );
    }

    /// Past what the look back remembers, a gap is a lower bound.
    #[test]
    fn a_gap_longer_than_the_look_back_is_at_least() {
        let mut gaps = ServiceGaps::default();
        for i in 0..=REMEMBERED as u64 {
            gaps.slot(i * 2, at(100 + i), Passed::Other, None);
        }
        let gap = gaps
            .slot(10_000, at(10_000), Passed::Claimed, Some(at(50)))
            .unwrap();
        assert_eq!(
            (gap.reservations, gap.slots_passed, gap.at_least),
            (10_000 - 2, REMEMBERED as u64, true)
        );
    }
}
