//! `statek shard halts SHARD` and `statek shard resume SHARD
//! --acknowledge-loss`: the durable halt of a shard after a reservation
//! loss (migration V10), read and resumed.

use std::fmt;
use std::time::SystemTime;

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::{EchoedValue, SchedulerShardId};
use statek_store_pg::{HaltCause, LossEvidence, ShardHalt};

use crate::db::{needs_role, DbArgs};
use crate::exit::InvalidInput;
use crate::out::{count, Report};

/// A shard id from the command line (exit 3 when it is not one).
pub(crate) fn shard_id(text: &str) -> Result<SchedulerShardId> {
    SchedulerShardId::try_from(text)
        .map_err(|e| anyhow!(InvalidInput(format!("shard {}: {e}", EchoedValue(text)))))
}

/// Text from the database as one printable line: control characters (a
/// newline, a terminal escape) are shown escaped, never sent to the
/// terminal. Any runtime credential can name its replica.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// One lost reservation of a halt, as the reports show it.
#[derive(Serialize)]
pub struct LostLine {
    reservation_id: String,
    sequence: u64,
    count: u32,
    /// `missing`, `reissued` (with `held_by`) or `moved` (with `moved_to`).
    evidence: &'static str,
    held_by: Option<String>,
    moved_to: Option<u64>,
}

/// One recorded halt, as the reports show it.
#[derive(Serialize)]
pub struct HaltLine {
    halt_id: i64,
    cause: &'static str,
    /// Whether it halted the shard (false: recorded by a replica configured
    /// to continue).
    halts: bool,
    open: bool,
    from_timeline: u32,
    to_timeline: u32,
    checked: u32,
    lost: Vec<LostLine>,
    cursor_at_detection: u64,
    detected_by: String,
    detected_role: String,
    detected_at: String,
    /// `[reissued_first, reissued_end)` once resumed (`reissued_end` null:
    /// an unverified halt, upper end unknown).
    reissued_first: Option<u64>,
    reissued_end: Option<u64>,
    resumed_role: Option<String>,
    resumed_at: Option<String>,
    note: Option<String>,
}

impl HaltLine {
    pub(crate) fn new(halt: &ShardHalt) -> Self {
        let resume = halt.resume.as_ref();
        HaltLine {
            halt_id: halt.halt_id,
            cause: halt.cause.as_str(),
            halts: halt.halts,
            open: halt.is_open(),
            from_timeline: halt.from_timeline,
            to_timeline: halt.to_timeline,
            checked: halt.checked,
            lost: halt
                .lost
                .iter()
                .map(|l| {
                    let (evidence, held_by, moved_to) = match l.evidence {
                        LossEvidence::Missing => ("missing", None, None),
                        LossEvidence::Reissued { reservation_id } => {
                            ("reissued", Some(reservation_id.to_string()), None)
                        }
                        LossEvidence::Moved { sequence } => ("moved", None, Some(sequence)),
                        _ => ("other", None, None),
                    };
                    LostLine {
                        reservation_id: l.reservation_id.to_string(),
                        sequence: l.acknowledged_sequence,
                        count: l.count,
                        evidence,
                        held_by,
                        moved_to,
                    }
                })
                .collect(),
            cursor_at_detection: halt.cursor_at_detection,
            detected_by: printable(&halt.detected_by),
            detected_role: printable(&halt.detected_role),
            detected_at: rfc3339(halt.detected_at),
            reissued_first: resume.map(|r| r.reissued.first),
            reissued_end: resume.and_then(|r| r.reissued.end),
            resumed_role: resume.map(|r| printable(&r.resumed_role)),
            resumed_at: resume.map(|r| rfc3339(r.resumed_at)),
            note: resume.and_then(|r| r.note.as_deref().map(printable)),
        }
    }

    /// One line: `halt 3 (lost, timeline 1 to 2): 2 lost reservations
    /// holding 5 sequences from 17, recorded at T by R`.
    pub(crate) fn summary(&self) -> String {
        let what = if self.cause == HaltCause::Lost.as_str() {
            let sequences: u64 = self.lost.iter().map(|l| u64::from(l.count)).sum();
            let first = self.lost.iter().map(|l| l.sequence).min().unwrap_or(0);
            format!(
                "{} holding {} from {first}",
                count(
                    self.lost.len() as u64,
                    "lost reservation",
                    "lost reservations"
                ),
                count(sequences, "sequence", "sequences")
            )
        } else {
            format!(
                "the shard's last reservation was on timeline {}; nothing could be re-read",
                self.from_timeline
            )
        };
        format!(
            "halt {} ({}, timeline {} to {}): {what}; recorded at {} by {} (role {})",
            self.halt_id,
            self.cause,
            self.from_timeline,
            self.to_timeline,
            self.detected_at,
            self.detected_by,
            self.detected_role
        )
    }

    /// What the resume says of the reissued sequences.
    fn reissued(&self) -> String {
        match (self.reissued_first, self.reissued_end) {
            (Some(first), Some(end)) => format!(
                "sequences {first}..{end} were acknowledged on timeline {} and are handed out \
                 again on timeline {}: their slots were decided twice, and readers accept them \
                 as reissued by halt {}",
                self.from_timeline, self.to_timeline, self.halt_id
            ),
            (Some(first), None) => format!(
                "sequences from {first} on may have been acknowledged on timeline {} and are \
                 handed out again on timeline {} (how many, nobody can tell): readers accept \
                 them as reissued by halt {}",
                self.from_timeline, self.to_timeline, self.halt_id
            ),
            _ => "not resumed".to_owned(),
        }
    }
}

/// What `statek shard halts SHARD` reports.
#[derive(Serialize)]
pub struct HaltsReport {
    shard: String,
    halted: bool,
    halts: Vec<HaltLine>,
}

impl Report for HaltsReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        if self.halts.is_empty() {
            return writeln!(w, "shard {}: no halt was ever recorded", self.shard);
        }
        writeln!(
            w,
            "shard {}: {}; {} recorded",
            self.shard,
            if self.halted {
                format!(
                    "halted (resume with `statek shard resume {} --acknowledge-loss`)",
                    self.shard
                )
            } else {
                "not halted".to_owned()
            },
            count(self.halts.len() as u64, "halt", "halts")
        )?;
        for halt in &self.halts {
            let state = if halt.open {
                "open"
            } else if halt.halts {
                "resumed"
            } else {
                "recorded, did not halt"
            };
            writeln!(w, "{} [{state}]", halt.summary())?;
            for lost in &halt.lost {
                let evidence = match (lost.evidence, &lost.held_by, lost.moved_to) {
                    ("reissued", Some(by), _) => format!("now held by {by}"),
                    ("moved", _, Some(to)) => format!("now at sequence {to}"),
                    (other, _, _) => other.to_owned(),
                };
                writeln!(
                    w,
                    "  lost {} at sequence {} (+{}): {evidence}",
                    lost.reservation_id,
                    lost.sequence,
                    lost.count.saturating_sub(1)
                )?;
            }
            if let (Some(at), Some(role)) = (&halt.resumed_at, &halt.resumed_role) {
                writeln!(w, "  resumed at {at} by role {role}: {}", halt.reissued())?;
                if let Some(note) = &halt.note {
                    writeln!(w, "  note: {note}")?;
                }
            }
        }
        Ok(())
    }
}

/// `statek shard halts SHARD`.
pub async fn halts(shard: &str, db: &DbArgs) -> Result<HaltsReport> {
    let shard = shard_id(shard)?;
    let store = db.store(1)?;
    // An unknown shard is an error, not "no halt".
    store.load_shard(&shard).await?;
    let halts = store.shard_halts(&shard).await?;
    Ok(HaltsReport {
        shard: shard.to_string(),
        halted: halts.iter().any(ShardHalt::is_open),
        halts: halts.iter().map(HaltLine::new).collect(),
    })
}

/// What `statek shard resume SHARD --acknowledge-loss` reports.
#[derive(Serialize)]
pub struct ResumeReport {
    shard: String,
    resumed: Vec<HaltLine>,
}

impl Report for ResumeReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        if self.resumed.is_empty() {
            return writeln!(
                w,
                "shard {} is not halted: nothing to resume, nothing written",
                self.shard
            );
        }
        writeln!(
            w,
            "resumed shard {}: {} acknowledged; it accepts reservations again",
            self.shard,
            count(self.resumed.len() as u64, "halt", "halts")
        )?;
        for halt in &self.resumed {
            writeln!(w, "{}", halt.summary())?;
            writeln!(w, "  {}", halt.reissued())?;
        }
        Ok(())
    }
}

/// `statek shard resume SHARD --acknowledge-loss [--note TEXT]` (owner role).
pub async fn resume(shard: &str, note: Option<&str>, db: &DbArgs) -> Result<ResumeReport> {
    let shard = shard_id(shard)?;
    let store = db.store(1)?;
    let resumed = store.resume_shard(&shard, note).await.map_err(|e| {
        needs_role(
            e,
            "statek shard resume needs the owner role (the runtime and retention roles may not resume a halted shard)",
        )
    })?;
    Ok(ResumeReport {
        shard: shard.to_string(),
        resumed: resumed.iter().map(HaltLine::new).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use statek_store_pg::{LostReservation, ReissuedRange, ShardResume};
    use uuid::Uuid;

    fn halt(cause: HaltCause, resumed: bool) -> ShardHalt {
        let lost = match cause {
            HaltCause::Lost => vec![
                LostReservation {
                    reservation_id: Uuid::nil(),
                    acknowledged_sequence: 17,
                    count: 4,
                    evidence: LossEvidence::Missing,
                },
                LostReservation {
                    reservation_id: Uuid::max(),
                    acknowledged_sequence: 21,
                    count: 1,
                    evidence: LossEvidence::Moved { sequence: 30 },
                },
            ],
            _ => Vec::new(),
        };
        let end = (cause == HaltCause::Lost).then_some(22);
        ShardHalt {
            halt_id: 3,
            shard: SchedulerShardId::try_from("s").unwrap(),
            cause,
            halts: true,
            from_timeline: 1,
            to_timeline: 2,
            checked: 8,
            lost,
            cursor_at_detection: 17,
            detected_by: "statek pid 9".into(),
            detected_role: "runtime".into(),
            detected_at: SystemTime::UNIX_EPOCH,
            resume: resumed.then(|| ShardResume {
                reissued: ReissuedRange {
                    halt_id: 3,
                    first: 17,
                    end,
                },
                resumed_role: "owner".into(),
                resumed_at: SystemTime::UNIX_EPOCH,
                note: None,
            }),
        }
    }

    fn text(report: &impl Report) -> String {
        let mut out = String::new();
        report.write_text(&mut out).unwrap();
        out
    }

    #[test]
    fn a_resume_says_what_happens_to_the_reissued_sequences() {
        let report = ResumeReport {
            shard: "s".into(),
            resumed: vec![HaltLine::new(&halt(HaltCause::Lost, true))],
        };
        assert_eq!(
            text(&report),
            "resumed shard s: 1 halt acknowledged; it accepts reservations again\n\
             halt 3 (lost, timeline 1 to 2): 2 lost reservations holding 5 sequences from 17; \
             recorded at 1970-01-01T00:00:00.000Z by statek pid 9 (role runtime)\n  \
             sequences 17..22 were acknowledged on timeline 1 and are handed out again on \
             timeline 2: their slots were decided twice, and readers accept them as reissued \
             by halt 3\n"
        );
        let unverified = ResumeReport {
            shard: "s".into(),
            resumed: vec![HaltLine::new(&halt(HaltCause::Unverified, true))],
        };
        assert!(text(&unverified).contains(
            "sequences from 17 on may have been acknowledged on timeline 1 and are handed out \
             again on timeline 2 (how many, nobody can tell)"
        ));
        let none = ResumeReport {
            shard: "s".into(),
            resumed: Vec::new(),
        };
        assert_eq!(
            text(&none),
            "shard s is not halted: nothing to resume, nothing written\n"
        );
    }

    #[test]
    fn text_from_the_database_is_printed_escaped() {
        assert_eq!(
            printable("evil\nhalt 7 (fake)\u{1b}[31m"),
            "evil\\nhalt 7 (fake)\\u{1b}[31m"
        );
        assert_eq!(
            printable("statek pid 9 on host-ä"),
            "statek pid 9 on host-ä"
        );
    }

    #[test]
    fn the_halts_list_shows_each_loss() {
        let report = HaltsReport {
            shard: "s".into(),
            halted: true,
            halts: vec![HaltLine::new(&halt(HaltCause::Lost, false))],
        };
        assert_eq!(
            text(&report),
            "shard s: halted (resume with `statek shard resume s --acknowledge-loss`); 1 halt recorded\n\
             halt 3 (lost, timeline 1 to 2): 2 lost reservations holding 5 sequences from 17; \
             recorded at 1970-01-01T00:00:00.000Z by statek pid 9 (role runtime) [open]\n  \
             lost 00000000-0000-0000-0000-000000000000 at sequence 17 (+3): missing\n  \
             lost ffffffff-ffff-ffff-ffff-ffffffffffff at sequence 21 (+0): now at sequence 30\n"
        );
    }
}
