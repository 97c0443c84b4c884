//! The failover harness's verdict on one trial (`failover.rs`), from what
//! the replicas and the Worker logged and what the servers held: pure, so
//! that every check is shown failing by a unit test on a mutated log.
//!
//! What it checks:
//! - an id acknowledged twice by a replica carries one sequence;
//! - every replay (a retry that found its reservation committed) returned
//!   the sequence the standby held for that id *before the promotion*
//!   (read on the hot standby once it had replayed all it received), not
//!   just the row the replay itself read;
//! - each replica reported exactly the reservations it lost (acknowledged
//!   on timeline 1, not held at that sequence by the promoted server),
//!   before it reserved on the new timeline;
//! - the Worker's batches (one range row each) are checked the same way:
//!   the ids recorded lost in the database's halts are exactly the
//!   replicas' and the Worker's lost ids;
//! - after an asynchronous trial every replica was either the one that
//!   reported or was refused by the halt; a synchronous one lost and
//!   reported nothing, and nothing was recorded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use anyhow::{bail, ensure, Result};
use uuid::Uuid;

/// One replica's acknowledged reservations and what it reported.
#[derive(Debug, Default, Clone)]
pub struct ReplicaLog {
    /// (id, sequence, timeline) in acknowledgement order.
    pub acknowledged: Vec<(Uuid, u64, u32)>,
    /// Replays (a retry after an error found the reservation): (id, sequence).
    pub replays: Vec<(Uuid, u64)>,
    /// The ids it reported lost, and whether it had reserved on the new
    /// timeline before reporting.
    pub reported: Option<(Vec<Uuid>, bool)>,
    /// It was refused by the shard's halt (`ShardHalted`).
    pub refused: bool,
    /// Its first acknowledgement on the new timeline.
    pub first_on_new: Option<Instant>,
}

/// What the servers held, and what the Worker acknowledged.
#[derive(Debug, Default, Clone)]
pub struct Evidence {
    /// The promoted server's rows: id (a batch's id) to first sequence.
    pub held: HashMap<Uuid, u64>,
    /// The standby's rows before the promotion: id to first sequence.
    pub before_promotion: HashMap<Uuid, u64>,
    /// The Worker's acknowledged batches: (batch id, first sequence). A
    /// batch acknowledged on the new timeline is held by the promoted
    /// server, so each is judged as if acknowledged on the old one.
    pub worker_batches: Vec<(Uuid, u64)>,
    /// The lost ids the database's halts of the shard record, with the
    /// sequence each was acknowledged at.
    pub recorded_lost: HashMap<Uuid, u64>,
}

/// What one trial's checks counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub acknowledged: usize,
    pub lost: usize,
    pub reported: usize,
    pub replays: usize,
    pub worker_lost: usize,
    pub refused: usize,
}

/// Judges one trial; the first broken promise is the error.
pub fn judge(asynchronous: bool, logs: &[ReplicaLog], evidence: &Evidence) -> Result<Verdict> {
    let mut verdict = Verdict::default();
    let mut all_lost: HashSet<Uuid> = HashSet::new();
    for (index, log) in logs.iter().enumerate() {
        verdict.acknowledged += log.acknowledged.len();
        verdict.replays += log.replays.len();
        let mut by_id: BTreeMap<Uuid, u64> = BTreeMap::new();
        for &(id, sequence, _) in &log.acknowledged {
            if let Some(previous) = by_id.insert(id, sequence) {
                ensure!(
                    previous == sequence,
                    "replica {index}: id {id} acknowledged at {previous} and {sequence}"
                );
            }
        }
        for &(id, sequence) in &log.replays {
            match evidence.before_promotion.get(&id) {
                Some(&before) => ensure!(
                    before == sequence,
                    "replica {index}: replay of {id} returned {sequence}; the standby held it at \
                     {before} before the promotion"
                ),
                None => bail!(
                    "replica {index}: replay of {id} returned {sequence}, but the standby did not \
                     hold {id} before the promotion"
                ),
            }
        }
        let lost = lost_of(
            log.acknowledged.iter().map(|&(id, s, t)| (id, s, t)),
            &evidence.held,
        );
        verdict.lost += lost.len();
        match &log.reported {
            Some((reported, reserved_first)) => {
                verdict.reported += reported.len();
                let reported: HashSet<Uuid> = reported.iter().copied().collect();
                ensure!(
                    reported == lost,
                    "replica {index} reported {} lost ids, {} were lost",
                    reported.len(),
                    lost.len()
                );
                ensure!(
                    !reserved_first,
                    "replica {index} reserved on the new primary before it reported its loss"
                );
            }
            None => ensure!(
                lost.is_empty(),
                "replica {index} lost {} acknowledged reservations and did not report it",
                lost.len()
            ),
        }
        if log.refused {
            verdict.refused += 1;
        }
        if asynchronous {
            ensure!(
                log.reported.is_some() || log.refused,
                "replica {index} neither reported a loss nor was refused by the halt"
            );
        }
        all_lost.extend(lost);
    }
    let worker_lost = lost_of(
        evidence.worker_batches.iter().map(|&(id, s)| (id, s, 1)),
        &evidence.held,
    );
    verdict.worker_lost = worker_lost.len();
    all_lost.extend(worker_lost);
    // Every loss is recorded; every record is a loss (the promoted server
    // does not hold that id at that sequence). A record of an id no log
    // names is a loss all the same when the server does not hold it: a
    // Worker batch acknowledged whose slots were never decided (the Worker
    // halted first) sends no outcome.
    let not_recorded = all_lost
        .iter()
        .filter(|id| !evidence.recorded_lost.contains_key(id))
        .count();
    let not_lost = evidence
        .recorded_lost
        .iter()
        .filter(|&(id, sequence)| evidence.held.get(id) == Some(sequence))
        .count();
    ensure!(
        not_recorded == 0 && not_lost == 0,
        "the database's halts record {} lost ids; the replicas and the Worker lost {} \
         (recorded but held by the promoted server: {not_lost}; lost but not recorded: \
         {not_recorded})",
        evidence.recorded_lost.len(),
        all_lost.len()
    );
    if asynchronous {
        ensure!(
            verdict.lost > 0,
            "the forced lag lost nothing: the asynchronous trial proves nothing"
        );
    } else {
        ensure!(
            verdict.lost == 0 && verdict.worker_lost == 0,
            "synchronous failover lost {} (Worker {})",
            verdict.lost,
            verdict.worker_lost
        );
        ensure!(
            verdict.reported == 0,
            "synchronous failover reported losses"
        );
    }
    Ok(verdict)
}

/// The ids acknowledged on timeline 1 that the promoted server does not
/// hold at their sequence.
fn lost_of(
    acknowledged: impl Iterator<Item = (Uuid, u64, u32)>,
    held: &HashMap<Uuid, u64>,
) -> HashSet<Uuid> {
    acknowledged
        .filter(|&(id, sequence, timeline)| timeline == 1 && held.get(&id) != Some(&sequence))
        .map(|(id, _, _)| id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// An asynchronous trial as it should be: replica 0 lost ids 3 and 4
    /// and reported them, replica 1 replayed id 2 and was refused, the
    /// Worker lost batch 10; the halts record 3, 4 and 10.
    fn asynchronous() -> (Vec<ReplicaLog>, Evidence) {
        let logs = vec![
            ReplicaLog {
                acknowledged: vec![(id(1), 0, 1), (id(3), 3, 1), (id(4), 4, 1)],
                reported: Some((vec![id(3), id(4)], false)),
                ..ReplicaLog::default()
            },
            ReplicaLog {
                acknowledged: vec![(id(2), 1, 1), (id(2), 1, 1)],
                replays: vec![(id(2), 1)],
                refused: true,
                ..ReplicaLog::default()
            },
        ];
        let evidence = Evidence {
            held: HashMap::from([(id(1), 0), (id(2), 1), (id(9), 3)]),
            before_promotion: HashMap::from([(id(1), 0), (id(2), 1)]),
            worker_batches: vec![(id(5), 2), (id(10), 5)],
            recorded_lost: HashMap::from([(id(3), 3), (id(4), 4), (id(10), 5)]),
        };
        (logs, evidence)
    }

    fn fails(logs: &[ReplicaLog], evidence: &Evidence, asynchronous: bool, expected: &str) {
        let error = judge(asynchronous, logs, evidence).expect_err(expected);
        assert!(
            error.to_string().contains(expected),
            "{error} does not contain {expected}"
        );
    }

    #[test]
    fn a_trial_as_it_should_be_passes_with_its_counts() {
        let (logs, evidence) = asynchronous();
        let held_worker = Evidence {
            held: HashMap::from([(id(1), 0), (id(2), 1), (id(5), 2), (id(9), 3)]),
            ..evidence
        };
        assert_eq!(
            judge(true, &logs, &held_worker).unwrap(),
            Verdict {
                acknowledged: 5,
                lost: 2,
                reported: 2,
                replays: 1,
                worker_lost: 1,
                refused: 1,
            }
        );
    }

    #[test]
    fn a_replay_that_got_a_new_sequence_fails() {
        let (mut logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        logs[1].replays = vec![(id(2), 7)];
        fails(
            &logs,
            &evidence,
            true,
            "replay of 00000000-0000-0000-0000-000000000002 returned 7; the standby held it at 1",
        );
        logs[1].replays = vec![(id(6), 7)];
        fails(&logs, &evidence, true, "the standby did not hold");
    }

    #[test]
    fn a_loss_not_reported_fails() {
        let (mut logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        logs[0].reported = Some((vec![id(3)], false));
        fails(
            &logs,
            &evidence,
            true,
            "replica 0 reported 1 lost ids, 2 were lost",
        );
        logs[0].reported = None;
        fails(
            &logs,
            &evidence,
            true,
            "replica 0 lost 2 acknowledged reservations and did not report it",
        );
        logs[0].reported = Some((vec![id(3), id(4)], true));
        fails(
            &logs,
            &evidence,
            true,
            "reserved on the new primary before it reported",
        );
    }

    #[test]
    fn a_worker_loss_not_recorded_fails() {
        let (logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        evidence.recorded_lost.remove(&id(10));
        fails(&logs, &evidence, true, "lost but not recorded: 1");
        // A Worker batch recorded lost that the promoted server holds.
        let (logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        evidence.recorded_lost.insert(id(5), 2);
        fails(
            &logs,
            &evidence,
            true,
            "recorded but held by the promoted server: 1",
        );
        // A recorded loss no log names, not held: a batch whose slots were
        // never decided. Accepted.
        let (logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        evidence.recorded_lost.insert(id(11), 9);
        assert_eq!(judge(true, &logs, &evidence).unwrap().lost, 2);
    }

    #[test]
    fn a_replica_neither_reporting_nor_refused_after_an_asynchronous_loss_fails() {
        let (mut logs, mut evidence) = asynchronous();
        evidence.held.insert(id(5), 2);
        logs[1].refused = false;
        fails(
            &logs,
            &evidence,
            true,
            "replica 1 neither reported a loss nor was refused",
        );
    }

    #[test]
    fn a_synchronous_trial_that_lost_anything_fails() {
        let logs = vec![ReplicaLog {
            acknowledged: vec![(id(1), 0, 1)],
            ..ReplicaLog::default()
        }];
        let mut evidence = Evidence {
            held: HashMap::from([(id(1), 0), (id(5), 1)]),
            worker_batches: vec![(id(5), 1)],
            ..Evidence::default()
        };
        assert_eq!(judge(false, &logs, &evidence).unwrap().lost, 0);
        evidence.held.remove(&id(5));
        fails(&logs, &evidence, false, "lost but not recorded");
        evidence.recorded_lost.insert(id(5), 1);
        fails(
            &logs,
            &evidence,
            false,
            "synchronous failover lost 0 (Worker 1)",
        );
        let (logs, evidence) = asynchronous();
        let nothing_lost = Evidence {
            held: HashMap::from([
                (id(1), 0),
                (id(2), 1),
                (id(3), 3),
                (id(4), 4),
                (id(5), 2),
                (id(10), 5),
            ]),
            recorded_lost: HashMap::new(),
            ..evidence
        };
        let mut logs = logs;
        logs[0].reported = None;
        logs[0].refused = true;
        fails(&logs, &nothing_lost, true, "the forced lag lost nothing");
    }
}
