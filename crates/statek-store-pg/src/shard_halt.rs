//! A shard's recorded halts as values (migration V10): [`ShardHalt`] with
//! its [`HaltCause`] and [`ShardResume`], the [`ReissuedRange`] a resume
//! states, and [`ShardHalted`], what
//! [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted) reports.
//! Below `error.rs`, which carries them, and `halt.rs`, which reads and
//! writes them.

use std::fmt;
use std::time::SystemTime;

use statek_policy::SchedulerShardId;

use crate::lost_reservations::LostReservation;

/// Why a shard was halted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HaltCause {
    /// A store re-read the reservations it had acknowledged on the old
    /// timeline and found some missing or moved on the new primary.
    Lost,
    /// A store with nothing to re-read (a new process) met a shard whose
    /// last reservation was made on another timeline: nobody can tell
    /// whether that timeline acknowledged reservations the new primary
    /// lacks.
    Unverified,
}

impl HaltCause {
    /// `lost` or `unverified`, as stored.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            HaltCause::Lost => "lost",
            HaltCause::Unverified => "unverified",
        }
    }

    /// The cause named `text` as stored, if it is one.
    pub(crate) fn from_stored(text: &str) -> Option<Self> {
        match text {
            "lost" => Some(HaltCause::Lost),
            "unverified" => Some(HaltCause::Unverified),
            _ => None,
        }
    }
}

impl fmt::Display for HaltCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sequences of a shard that were acknowledged on the old timeline and
/// are, or will be, handed out again on the new one: each was decided
/// twice (once by the replica that lost it, once on the new primary), so a
/// reader that compares replicas' logs with the stored reservations
/// accepts a duplicate inside such a range, by its halt id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReissuedRange {
    /// The halt it comes from.
    pub halt_id: i64,
    /// The first reissued sequence.
    pub first: u64,
    /// One past the last reissued sequence; `None` for an unverified halt,
    /// whose upper end nobody knows (every sequence from `first` that the
    /// old timeline acknowledged after its last replicated point).
    pub end: Option<u64>,
}

impl ReissuedRange {
    /// Whether `sequence` lies in the range.
    #[must_use]
    pub fn contains(&self, sequence: u64) -> bool {
        sequence >= self.first && self.end.is_none_or(|end| sequence < end)
    }
}

impl fmt::Display for ReissuedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end {
            Some(end) => write!(f, "sequences {}..{}", self.first, end),
            None => write!(f, "sequences from {} on (upper end unknown)", self.first),
        }
    }
}

/// How an owner resumed a halt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardResume {
    /// What it says of the reissued sequences.
    pub reissued: ReissuedRange,
    /// The owner's login role.
    pub resumed_role: String,
    /// Database time of the resume.
    pub resumed_at: SystemTime,
    /// The operator's note, if any.
    pub note: Option<String>,
}

/// One recorded halt of a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHalt {
    /// Its id (ascending in recording order).
    pub halt_id: i64,
    /// The shard.
    pub shard: SchedulerShardId,
    /// Why.
    pub cause: HaltCause,
    /// False when the detecting store was configured to continue
    /// ([`LostReservationAction::Continue`](crate::LostReservationAction::Continue)):
    /// recorded, the shard not halted.
    pub halts: bool,
    /// The timeline the lost reservations were acknowledged on (for an
    /// unverified halt: the shard's last reservation's).
    pub from_timeline: u32,
    /// The new primary's timeline.
    pub to_timeline: u32,
    /// How many acknowledged reservations the detecting store re-read (0
    /// for an unverified halt).
    pub checked: u32,
    /// The lost reservations, in sequence order (empty when unverified).
    pub lost: Vec<LostReservation>,
    /// The shard's cursor on the new primary when it was recorded.
    pub cursor_at_detection: u64,
    /// The replica as it named itself.
    pub detected_by: String,
    /// Its login role.
    pub detected_role: String,
    /// Database time of the record.
    pub detected_at: SystemTime,
    /// The resume, once an owner resumed it.
    pub resume: Option<ShardResume>,
}

impl ShardHalt {
    /// Whether the halt still holds the shard (halting and not resumed).
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.halts && self.resume.is_none()
    }
}

/// What [`DurabilityError::ShardHalted`](crate::DurabilityError::ShardHalted) reports: the shard's open halts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHalted {
    /// The shard.
    pub shard: SchedulerShardId,
    /// Its open halts, oldest first (at least one).
    pub halts: Vec<ShardHalt>,
}

impl fmt::Display for ShardHalted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "shard {} is halted and accepts no reservation until an owner runs \
             `statek shard resume {} --acknowledge-loss`:",
            self.shard, self.shard
        )?;
        for halt in &self.halts {
            write!(
                f,
                " halt {} ({}, timeline {} to {}, recorded by {}",
                halt.halt_id, halt.cause, halt.from_timeline, halt.to_timeline, halt.detected_by
            )?;
            match halt.cause {
                HaltCause::Lost => {
                    let sequences: u64 = halt.lost.iter().map(|l| u64::from(l.count)).sum();
                    write!(
                        f,
                        ", {} lost reservation(s) holding {} sequence(s) from {})",
                        halt.lost.len(),
                        sequences,
                        halt.lost
                            .iter()
                            .map(|l| l.acknowledged_sequence)
                            .min()
                            .unwrap_or(0)
                    )?;
                }
                HaltCause::Unverified => write!(
                    f,
                    ", the shard's last reservation was on timeline {}: nothing re-read)",
                    halt.from_timeline
                )?,
            }
            f.write_str(";")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(range: ReissuedRange, sequence: u64, expected: bool) {
        assert_eq!(
            range.contains(sequence),
            expected,
            "{range} contains {sequence}"
        );
    }

    #[test]
    fn reissued_ranges_hold_their_sequences() {
        let closed = ReissuedRange {
            halt_id: 1,
            first: 10,
            end: Some(13),
        };
        let open = ReissuedRange {
            halt_id: 2,
            first: 10,
            end: None,
        };
        check(closed, 9, false);
        check(closed, 10, true);
        check(closed, 12, true);
        check(closed, 13, false);
        check(open, 9, false);
        check(open, 10, true);
        check(open, u64::MAX, true);
        assert_eq!(closed.to_string(), "sequences 10..13");
        assert_eq!(open.to_string(), "sequences from 10 on (upper end unknown)");
    }
}
