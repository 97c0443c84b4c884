//! The outcome class of every slot of a reserved range, recorded once per
//! range as runs of equal classes (migration V14, `statek.slot_outcomes`):
//! what a slot that claimed nothing found, for an audit to count.
//!
//! A Worker records a range after its last run finished
//! ([`PgStore::record_slot_outcomes`]); the database refuses a record that
//! does not cover exactly one retained reservation range, or that calls a
//! slot with a claim on record anything but [`SlotClass::Claimed`]. A
//! range without a record (a Worker that stopped before recording it, a
//! range reserved before V14) reads as unrecorded.

use crate::RunQueueError;
use std::time::SystemTime;

use statek_core::{
    SlotClass, SlotOutcomeAnswer, SlotOutcomes, SlotOutcomesRecorded, MAX_OUTCOME_RECORDS_PER_CALL,
};
use statek_policy::SchedulerShardId;
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// The class letters of `outcomes`' runs, in order
/// (`statek.slot_outcomes.classes`).
fn class_letters(outcomes: &SlotOutcomes) -> String {
    outcomes
        .runs()
        .iter()
        .map(|(class, _)| class.letter())
        .collect()
}

/// The counts of `outcomes`' runs, as the database stores them.
fn class_counts(outcomes: &SlotOutcomes) -> Result<Vec<i32>, StoreError> {
    outcomes
        .runs()
        .iter()
        .map(|(_, n)| {
            i32::try_from(*n).map_err(|_| {
                StoreError::InvalidArgument(format!("a class run of {n} slots is too long"))
            })
        })
        .collect()
}

/// Decodes a stored record; fail-closed (what the database refuses to
/// store is corrupt data here).
pub(crate) fn decode_outcomes(letters: &str, counts: &[i32]) -> Result<SlotOutcomes, StoreError> {
    let corrupt = || {
        StoreError::corrupt(
            "slot outcome record",
            format!("classes {letters:?} with counts {counts:?}"),
        )
    };
    if letters.chars().count() != counts.len() {
        return Err(corrupt());
    }
    let mut outcomes = SlotOutcomes::new();
    for (letter, count) in letters.chars().zip(counts) {
        let class = SlotClass::from_letter(letter).ok_or_else(corrupt)?;
        let count = u32::try_from(*count)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(corrupt)?;
        if outcomes
            .runs()
            .last()
            .is_some_and(|(last, _)| *last == class)
        {
            return Err(corrupt());
        }
        outcomes.push(class, count);
    }
    Ok(outcomes)
}

/// One reserved range's record, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotOutcomeRecord {
    /// The range's first sequence.
    pub first_sequence: u64,
    /// Its slots' classes, in sequence order.
    pub outcomes: SlotOutcomes,
    /// Database time of the record.
    pub recorded_at: SystemTime,
}

/// Records read per call at most by [`PgStore::slot_outcomes`].
pub const MAX_SLOT_OUTCOME_RECORDS: u32 = 10_000;

const RECORD: &str = "
    SELECT first_sequence, status
    FROM statek.record_slot_outcomes($1, $2, $3, $4, $5)";

/// The most class runs one record holds (the database's limit).
pub const MAX_OUTCOME_RUNS: usize = 4096;

const SELECT_RECORDS: &str = "
    SELECT first_sequence, classes, counts, recorded_at
    FROM statek.slot_outcomes
    WHERE shard_id = $1 AND first_sequence >= $2
    ORDER BY first_sequence
    LIMIT $3";

impl PgStore {
    /// Records the classes of the reserved range of `shard` that starts at
    /// `first_sequence`: `outcomes` must cover exactly its slots, and call
    /// every slot whose claim is on record [`SlotClass::Claimed`]. Written
    /// once; the same record again is [`SlotOutcomesRecorded::Replayed`].
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty record, more than
    /// [`MAX_OUTCOME_RUNS`] runs or a sequence past `i64::MAX`;
    /// [`RunQueueError::ClaimRefused`](crate::RunQueueError::ClaimRefused) when the database refuses it (no
    /// retained range starts there, the lengths differ, a claimed slot
    /// named otherwise, another record for the range); connection and
    /// server errors.
    pub async fn record_slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        first_sequence: u64,
        outcomes: &SlotOutcomes,
    ) -> Result<SlotOutcomesRecorded, StoreError> {
        let answers = self
            .record_slot_outcome_ranges(shard, &[(first_sequence, outcomes.clone())])
            .await?;
        match answers.into_iter().next() {
            Some(SlotOutcomeAnswer::Accepted(recorded)) => Ok(recorded),
            Some(SlotOutcomeAnswer::Refused(message)) => {
                Err(StoreError::RunQueue(RunQueueError::ClaimRefused {
                    message,
                }))
            }
            None => Err(StoreError::corrupt(
                "slot outcome record",
                "the database answered no record",
            )),
        }
    }

    /// [`record_slot_outcomes`](Self::record_slot_outcomes) for many
    /// ranges of `shard` in one statement (1..=
    /// [`MAX_OUTCOME_RECORDS_PER_CALL`]): one answer per record, in order;
    /// a refused record is not written, the others are.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for no records or too many, an
    /// empty record or one of more than [`MAX_OUTCOME_RUNS`] runs, or a
    /// sequence past `i64::MAX`; [`StoreError::CorruptData`] for an
    /// answer that does not match the call; connection and server errors.
    pub async fn record_slot_outcome_ranges(
        &self,
        shard: &SchedulerShardId,
        records: &[(u64, SlotOutcomes)],
    ) -> Result<Vec<SlotOutcomeAnswer>, StoreError> {
        if records.is_empty() || records.len() > MAX_OUTCOME_RECORDS_PER_CALL {
            return Err(StoreError::InvalidArgument(format!(
                "a slot outcome call holds 1..={MAX_OUTCOME_RECORDS_PER_CALL} records, got {}",
                records.len()
            )));
        }
        let mut firsts = Vec::with_capacity(records.len());
        let mut letters = Vec::with_capacity(records.len());
        let mut run_counts = Vec::with_capacity(records.len());
        let mut counts = Vec::new();
        for (first, outcomes) in records {
            if outcomes.runs().is_empty() || outcomes.runs().len() > MAX_OUTCOME_RUNS {
                return Err(StoreError::InvalidArgument(format!(
                    "a slot outcome record holds 1..={MAX_OUTCOME_RUNS} class runs, got {}",
                    outcomes.runs().len()
                )));
            }
            firsts.push(sequence_arg(*first)?);
            letters.push(class_letters(outcomes));
            run_counts.push(i32::try_from(outcomes.runs().len()).unwrap_or(i32::MAX));
            counts.extend(class_counts(outcomes)?);
        }
        let shard = shard.as_str();
        let rows = self
            .with_durable_write(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        RECORD,
                        &[
                            (&shard, Type::TEXT),
                            (&firsts, Type::INT8_ARRAY),
                            (&letters, Type::TEXT_ARRAY),
                            (&run_counts, Type::INT4_ARRAY),
                            (&counts, Type::INT4_ARRAY),
                        ],
                    )
                    .await?)
            })
            .await?;
        if rows.len() != records.len() {
            return Err(StoreError::corrupt(
                "slot outcome record",
                format!("{} answers to {} records", rows.len(), records.len()),
            ));
        }
        rows.iter()
            .zip(&firsts)
            .map(|(row, first)| {
                let answered: i64 = row.try_get("first_sequence")?;
                let status: String = row.try_get("status")?;
                if answered != *first {
                    return Err(StoreError::corrupt(
                        "slot outcome record",
                        format!("answer for sequence {answered} where {first} was asked"),
                    ));
                }
                Ok(match status.as_str() {
                    "recorded" => SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Recorded),
                    "replayed" => SlotOutcomeAnswer::Accepted(SlotOutcomesRecorded::Replayed),
                    other => match other.strip_prefix("refused: ") {
                        Some(reason) => SlotOutcomeAnswer::Refused(reason.to_owned()),
                        None => {
                            return Err(StoreError::corrupt(
                                "slot outcome record",
                                format!("the database answered {other:?}"),
                            ))
                        }
                    },
                })
            })
            .collect()
    }

    /// The outcome records of `shard` whose range starts at or after
    /// `from`, in sequence order, at most `limit`
    /// (1..=[`MAX_SLOT_OUTCOME_RECORDS`]) per call: page on from the last
    /// range's end. A reserved range without a record is not recorded.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a limit out of range or a
    /// sequence past `i64::MAX`; [`StoreError::CorruptData`] for a record
    /// the database should have refused; connection and server errors.
    pub async fn slot_outcomes(
        &self,
        shard: &SchedulerShardId,
        from: u64,
        limit: u32,
    ) -> Result<Vec<SlotOutcomeRecord>, StoreError> {
        if !(1..=MAX_SLOT_OUTCOME_RECORDS).contains(&limit) {
            return Err(StoreError::InvalidArgument(format!(
                "limit must be 1..={MAX_SLOT_OUTCOME_RECORDS}, got {limit}"
            )));
        }
        let from = sequence_arg(from)?;
        let limit = i64::from(limit);
        let shard = shard.as_str();
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(
                        SELECT_RECORDS,
                        &[
                            (&shard, Type::TEXT),
                            (&from, Type::INT8),
                            (&limit, Type::INT8),
                        ],
                    )
                    .await?)
            })
            .await?;
        rows.iter()
            .map(|row| {
                let first: i64 = row.try_get("first_sequence")?;
                let letters: String = row.try_get("classes")?;
                let counts: Vec<i32> = row.try_get("counts")?;
                Ok(SlotOutcomeRecord {
                    first_sequence: u64::try_from(first).map_err(|_| {
                        StoreError::corrupt("slot outcome record", format!("sequence {first}"))
                    })?,
                    outcomes: decode_outcomes(&letters, &counts)?,
                    recorded_at: row.try_get("recorded_at")?,
                })
            })
            .collect()
    }
}

fn sequence_arg(sequence: u64) -> Result<i64, StoreError> {
    i64::try_from(sequence)
        .map_err(|_| StoreError::InvalidArgument(format!("sequence {sequence} is past i64::MAX")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_and_counts_are_what_the_database_stores() {
        let mut outcomes = SlotOutcomes::new();
        outcomes.push(SlotClass::Claimed, 2);
        outcomes.push(SlotClass::IdleKnown, 1);
        outcomes.push(SlotClass::Claimed, 5);
        outcomes.push(SlotClass::Unused, 2);
        assert_eq!(class_letters(&outcomes), "ckcx");
        assert_eq!(class_counts(&outcomes).ok(), Some(vec![2, 1, 5, 2]));
    }

    #[test]
    fn decoding_refuses_what_the_database_refuses() {
        let good = decode_outcomes("ck", &[2, 500]);
        assert_eq!(
            good.ok().map(|o| o.runs().to_vec()),
            Some(vec![(SlotClass::Claimed, 2), (SlotClass::IdleKnown, 500)])
        );
        for (letters, counts) in [
            ("cc", &[1, 1][..]),
            ("cz", &[1, 1][..]),
            ("c", &[0][..]),
            ("c", &[-1][..]),
            ("ck", &[1][..]),
        ] {
            assert!(
                matches!(
                    decode_outcomes(letters, counts),
                    Err(StoreError::CorruptData { .. })
                ),
                "{letters:?} {counts:?}"
            );
        }
    }
}
