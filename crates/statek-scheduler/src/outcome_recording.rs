//! Slot outcome records of finished batches, grouped: every range a
//! scheduler finished while its previous record call was under way (or,
//! for a Worker, within the linger) goes in the next call
//! ([`crate::group_commit::GroupCommit`]), so a busy replica sends far
//! fewer record statements than batches.
//! Each call is retried (3 attempts, 50 ms doubling) with the same
//! records, a replay being accepted; a record refused or still failing
//! is logged and counted in
//! [`crate::metrics::SLOT_OUTCOME_RECORDS_FAILED_TOTAL`], its slots then
//! read as unrecorded. Nothing of the slots depends on it.

use std::collections::BTreeMap;
use std::time::Duration;

use statek_core::{
    ReservationSource, SlotOutcomeAnswer, SlotOutcomes, MAX_OUTCOME_RECORDS_PER_CALL,
};
use statek_policy::SchedulerShardId;

use crate::group_commit::GroupCommit;

/// One range's record: its shard, first sequence and classes.
pub(crate) type OutcomeRecord = (SchedulerShardId, u64, SlotOutcomes);

/// Records grouped per call (see the module docs).
struct OutcomeRecords(GroupCommit<OutcomeRecord, ()>);

impl std::fmt::Debug for OutcomeRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutcomeRecords")
    }
}

/// How long a [`crate::Worker`]'s batch waits for other batches' slot
/// outcome records to join its own in one call: under load about 20
/// ranges per call instead of one; a range's record is at most this much
/// later (the Worker's stop waits for it).
pub(crate) const WORKER_RECORD_LINGER: Duration = Duration::from_millis(100);

/// A scheduler's slot outcome records: a tick's, which its caller waits
/// for (no linger), and a Worker's batches', which nobody waits for
/// (lingering up to [`WORKER_RECORD_LINGER`] for more ranges to join).
#[derive(Debug)]
pub(crate) struct SchedulerOutcomeRecords {
    ticks: OutcomeRecords,
    worker: OutcomeRecords,
}

impl SchedulerOutcomeRecords {
    pub(crate) fn new() -> Self {
        Self {
            ticks: OutcomeRecords::new(Duration::ZERO),
            worker: OutcomeRecords::new(WORKER_RECORD_LINGER),
        }
    }

    /// Records `record` with the other ranges finished meanwhile, through
    /// the Worker's lingering group when `from_worker`.
    pub(crate) async fn record<R: ReservationSource>(
        &self,
        source: &R,
        record: OutcomeRecord,
        from_worker: bool,
    ) {
        let records = if from_worker {
            &self.worker
        } else {
            &self.ticks
        };
        records.record(source, record).await;
    }
}

const ATTEMPTS: u32 = 3;
const FIRST_PAUSE: Duration = Duration::from_millis(50);

impl OutcomeRecords {
    /// Calls of at most [`MAX_OUTCOME_RECORDS_PER_CALL`] records, each
    /// waiting up to `linger` for more to join.
    fn new(linger: Duration) -> Self {
        Self(GroupCommit::new(MAX_OUTCOME_RECORDS_PER_CALL, linger))
    }

    /// Records `record` in the next call to `source`, and returns once that
    /// call has ended (recorded, refused or failed for good).
    async fn record<R: ReservationSource>(&self, source: &R, record: OutcomeRecord) {
        let flush = |records: Vec<OutcomeRecord>| async move {
            let count = records.len();
            let mut by_shard: BTreeMap<SchedulerShardId, Vec<(u64, SlotOutcomes)>> =
                BTreeMap::new();
            for (shard, first, outcomes) in records {
                by_shard.entry(shard).or_default().push((first, outcomes));
            }
            for (shard, ranges) in by_shard {
                write(source, &shard, &ranges).await;
            }
            vec![(); count]
        };
        let (shard, first) = (record.0.clone(), record.1);
        if self.0.submit(record, flush).await.is_none() {
            // The call that held it was interrupted (its caller dropped
            // mid-call): written or not, nobody knows; counted as failed.
            tracing::warn!(shard = %shard, first_sequence = first,
                "slot outcome record interrupted; its slots may read as unrecorded");
            metrics::counter!(
                crate::metrics::SLOT_OUTCOME_RECORDS_FAILED_TOTAL,
                "shard" => shard.to_string()
            )
            .increment(1);
        }
    }
}

/// One call for `ranges` of `shard`, retried; failures logged and counted.
async fn write<R: ReservationSource>(
    source: &R,
    shard: &SchedulerShardId,
    ranges: &[(u64, SlotOutcomes)],
) {
    let mut pause = FIRST_PAUSE;
    let mut failed = 0u64;
    for attempt in 1..=ATTEMPTS {
        match source.record_slot_outcomes(shard, ranges).await {
            Ok(answers) => {
                for (answer, (first, outcomes)) in answers.iter().zip(ranges) {
                    if let SlotOutcomeAnswer::Refused(reason) = answer {
                        tracing::warn!(shard = %shard, first_sequence = first,
                            slots = outcomes.slot_count(), reason = %reason,
                            "slot outcome record not written; its slots read as unrecorded");
                        failed += 1;
                    }
                }
                break;
            }
            Err(e) if e.is_retryable() && attempt < ATTEMPTS => {
                tracing::warn!(shard = %shard, records = ranges.len(), error = %e, attempt,
                    "slot outcome records failed transiently; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                tracing::warn!(shard = %shard, records = ranges.len(), error = %e,
                    "slot outcome records not written; their slots read as unrecorded");
                failed = ranges.len() as u64;
                break;
            }
        }
    }
    if failed > 0 {
        metrics::counter!(
            crate::metrics::SLOT_OUTCOME_RECORDS_FAILED_TOTAL,
            "shard" => shard.to_string()
        )
        .increment(failed);
    }
}
