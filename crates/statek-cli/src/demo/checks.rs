//! The demo's checks. Each one tests something the code does not already
//! guarantee by construction, so each can fail: the reservations read
//! back against the ticks, the claim history against the policy's cycle,
//! the gaps the replicas produced against the bounds measured on the
//! cycle, every run's stored outcome, and the point of the demo (the small
//! tenants served faster than by the plain FIFO queue).

use std::collections::HashMap;

use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_scheduler::TickOutcome;
use uuid::Uuid;

use super::fair_side::FairSide;
use super::service::{percentile, SideEvidence};

/// One check: passed, and what it says.
pub type Check = (bool, String);

/// Every check of the demo; `fifo` is `None` when the FIFO side could not
/// run (its checks then fail, saying why).
pub fn all(
    policy: &WeightedFairnessPolicy,
    fair: &FairSide,
    statek: &SideEvidence,
    fifo: Result<&SideEvidence, &str>,
    small: &[TenantId],
) -> Vec<Check> {
    let mut checks = vec![
        contiguous(fair),
        ticks_in_postgres(fair),
        claims_on_their_slots(policy, fair.start_sequence..fair.end_sequence, statek),
        gaps_within_bounds(policy, fair),
        monitor(fair),
        completed_once(statek, true),
    ];
    match fifo {
        Ok(fifo) => {
            checks.push(completed_once(fifo, false));
            checks.push(small_tenants_served_faster(statek, fifo, small));
        }
        Err(why) => {
            checks.push((
                false,
                format!("every FIFO run completed exactly once: {why}"),
            ));
            checks.push((
                false,
                format!("small tenants served faster than by FIFO: {why}"),
            ));
        }
    }
    checks
}

fn contiguous(fair: &FairSide) -> Check {
    let (start, end) = (fair.start_sequence, fair.end_sequence);
    let n = end - start;
    let ok = fair.rows.len() as u64 == n
        && fair
            .rows
            .iter()
            .enumerate()
            .all(|(i, r)| r.sequence() == start + i as u64);
    (
        ok,
        format!(
            "sequences are exactly {start}..{end} ({n} reservations in PostgreSQL, none missing or repeated; the end is exclusive, as in `statek audit --sequences`)",
        ),
    )
}

fn ticks_in_postgres(fair: &FairSide) -> Check {
    let n = fair.end_sequence - fair.start_sequence;
    // A batch's reservations share its id (one range row): match by sequence.
    let by_sequence: HashMap<u64, Uuid> =
        fair.rows.iter().map(|r| (r.sequence(), r.id())).collect();
    let ok = fair
        .ticks
        .iter()
        .all(|t| by_sequence.get(&t.reservation().sequence()) == Some(&t.reservation().id()))
        && fair.ticks.len() as u64 <= n;
    (
        ok,
        format!(
            "every tick's reservation id and sequence is in PostgreSQL ({} ticks, {n} rows; \
             {} slots consumed by ticks that failed after reserving)",
            fair.ticks.len(),
            n.saturating_sub(fair.ticks.len() as u64)
        ),
    )
}

/// The claim history (written by the claim statement) against the cycle
/// (compiled here): each run was claimed by a slot of this run's shard
/// whose tenant, by the policy, is the run's tenant.
fn claims_on_their_slots(
    policy: &WeightedFairnessPolicy,
    sequences: std::ops::Range<u64>,
    statek: &SideEvidence,
) -> Check {
    let l = u64::from(policy.cycle_length());
    let mut claims = 0u64;
    let mut wrong = Vec::new();
    for record in statek.records.values() {
        for claim in &record.claims {
            claims += 1;
            let ok = claim.slot.as_ref().is_some_and(|(shard, sequence)| {
                shard == policy.shard_id()
                    && sequences.contains(sequence)
                    && policy.tenant_for_slot(sequence % l) == Some(&record.tenant)
            });
            if !ok && wrong.len() < 3 {
                wrong.push(format!(
                    "run {} of {} at {:?}",
                    record.run_id, record.tenant, claim.slot
                ));
            }
        }
    }
    (
        wrong.is_empty() && claims > 0,
        if wrong.is_empty() {
            format!(
                "every claim in the claim history ({claims}) was made by a slot of its run's tenant \
                 (sequence mod {l} in the cycle)"
            )
        } else {
            format!("claims not on their tenant's slot: {}", wrong.join(", "))
        },
    )
}

/// The tenant each replica served at each sequence (its tick outcomes),
/// against the bound measured on the compiled cycle.
fn gaps_within_bounds(policy: &WeightedFairnessPolicy, fair: &FairSide) -> Check {
    let mut served: Vec<&TickOutcome> = fair.ticks.iter().collect();
    served.sort_by_key(|t| t.reservation().sequence());
    let mut last: HashMap<&TenantId, u64> = HashMap::new();
    let mut max_gap: HashMap<&TenantId, u64> = HashMap::new();
    for tick in served {
        let sequence = tick.reservation().sequence();
        if let Some(prev) = last.insert(tick.tenant(), sequence) {
            let gap = max_gap.entry(tick.tenant()).or_default();
            *gap = (*gap).max(sequence - prev);
        }
    }
    let mut over = Vec::new();
    let mut worst = 0.0f64;
    for t in policy.tenants() {
        let bound = policy
            .starvation_bound(t.tenant())
            .map(|b| u64::from(b.maximum_reservations_until_selection()))
            .unwrap_or(0);
        let gap = max_gap.get(t.tenant()).copied().unwrap_or(0);
        if gap > bound {
            over.push(format!("{} gap {gap} > bound {bound}", t.tenant()));
        }
        if bound > 0 {
            worst = worst.max(gap as f64 / bound as f64);
        }
    }
    (
        over.is_empty() && !max_gap.is_empty(),
        if over.is_empty() {
            format!(
                "each tenant's largest gap between the slots the replicas served it is at most its \
                 starvation bound measured on the cycle (worst gap/bound {worst:.2})"
            )
        } else {
            format!("served gaps above the bound: {}", over.join(", "))
        },
    )
}

fn monitor(fair: &FairSide) -> Check {
    let m = &fair.monitor;
    (
        m.violations.is_empty() && m.violations_dropped == 0,
        format!(
            "fairness monitor: no gap above the bound while a tenant had work \
             ({} outcomes observed, {} sequences without an outcome)",
            m.observed, m.missing
        ),
    )
}

/// Every run the side enqueued is stored as completed at its first
/// attempt; under statek with exactly one claim in the claim history,
/// itself finished (the plain queue records no claims).
fn completed_once(side: &SideEvidence, claim_history: bool) -> Check {
    let mut bad = 0u64;
    let mut example = None;
    for arrival in &side.arrivals {
        let ok = side.records.get(&arrival.run_id).is_some_and(|r| {
            r.state == "completed"
                && r.attempt == 1
                && if claim_history {
                    r.claims.len() == 1 && r.claims[0].finished_at.is_some()
                } else {
                    r.claims.is_empty()
                }
        });
        if !ok {
            bad += 1;
            example.get_or_insert(arrival.run_id);
        }
    }
    let total = side.arrivals.len();
    (
        bad == 0 && total > 0,
        match example {
            None => format!(
                "every {} run ({total}) completed exactly once{}",
                side.name,
                if claim_history {
                    " (one attempt, one finished claim in the claim history)"
                } else {
                    " (one attempt)"
                }
            ),
            Some(run) => format!(
                "{bad} of {total} {} runs not completed exactly once (e.g. run {run})",
                side.name
            ),
        },
    )
}

/// The point of the demo: the small tenants' p99 service lag under statek
/// below their p99 under the plain FIFO queue.
fn small_tenants_served_faster(
    statek: &SideEvidence,
    fifo: &SideEvidence,
    small: &[TenantId],
) -> Check {
    let fair = percentile(&statek.pooled_lag_ms(small), 99.0);
    let plain = percentile(&fifo.pooled_lag_ms(small), 99.0);
    match (fair, plain) {
        (Some(fair), Some(plain)) => (
            fair < plain,
            format!(
                "the small tenants' p99 service lag under statek ({fair:.0} ms) is below their p99 \
                 under the plain FIFO queue ({plain:.0} ms)"
            ),
        ),
        _ => (
            false,
            "the small tenants' p99 service lag: no small-tenant run was claimed on both sides"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::workload::Arrival;
    use statek_policy::policy_file::PolicyFile;
    use statek_policy::SchedulerShardId;
    use statek_store_pg::{RunClaimRecord, RunRecord};
    use std::time::{Duration, SystemTime};

    fn policy() -> WeightedFairnessPolicy {
        // Cycle [a, a, b, a].
        PolicyFile::parse(
            "t.toml",
            "shard = \"primary-v1\"\n[[tenants]]\nid = \"a\"\nweight = 3\n[[tenants]]\nid = \"b\"\nweight = 1\n",
        )
        .unwrap()
        .into_policy()
    }

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// One run of `tenant`, runnable at 0, claimed after `lag_ms` (at
    /// `sequence`, under statek), `attempt` attempts, completed or not.
    fn side(runs: &[(&str, u64, Option<u64>, u32, bool)]) -> SideEvidence {
        let mut arrivals = Vec::new();
        let mut records = HashMap::new();
        for (tenant, lag_ms, sequence, attempt, completed) in runs {
            let run_id = Uuid::now_v7();
            let tenant = TenantId::try_from(*tenant).unwrap();
            arrivals.push(Arrival {
                run_id,
                tenant: tenant.clone(),
                cursor_at_enqueue: None,
            });
            let claims = sequence
                .map(|s| RunClaimRecord {
                    attempt: 1,
                    slot: Some((SchedulerShardId::try_from("primary-v1").unwrap(), s)),
                    claimed_at: at(*lag_ms),
                    finished_at: Some(at(lag_ms + 10)),
                    cost: None,
                })
                .into_iter()
                .collect();
            records.insert(
                run_id,
                RunRecord {
                    run_id,
                    tenant,
                    state: if *completed { "completed" } else { "running" }.into(),
                    attempt: *attempt,
                    available_at: at(0),
                    claimed_at: Some(at(*lag_ms)),
                    finished_at: completed.then(|| at(lag_ms + 10)),
                    claims,
                },
            );
        }
        SideEvidence {
            name: "test",
            arrivals,
            records,
            origin: at(0),
        }
    }

    #[test]
    fn a_claim_on_another_tenants_slot_fails() {
        let p = policy();
        // Sequence 6: slot 2, b's.
        assert!(claims_on_their_slots(&p, 0..8, &side(&[("b", 1, Some(6), 1, true)])).0);
        assert!(!claims_on_their_slots(&p, 0..8, &side(&[("a", 1, Some(6), 1, true)])).0);
        assert!(!claims_on_their_slots(&p, 0..6, &side(&[("b", 1, Some(6), 1, true)])).0);
        assert!(!claims_on_their_slots(&p, 0..8, &side(&[("b", 1, None, 1, true)])).0);
    }

    #[test]
    fn a_run_not_completed_exactly_once_fails() {
        assert!(completed_once(&side(&[("a", 1, Some(0), 1, true)]), true).0);
        assert!(!completed_once(&side(&[("a", 1, Some(0), 2, true)]), true).0);
        assert!(!completed_once(&side(&[("a", 1, Some(0), 1, false)]), true).0);
        assert!(!completed_once(&side(&[("a", 1, None, 1, true)]), true).0);
        assert!(completed_once(&side(&[("a", 1, None, 1, true)]), false).0);
        assert!(!completed_once(&side(&[]), false).0);
    }

    #[test]
    fn small_tenants_not_faster_than_fifo_fails() {
        let small = [TenantId::try_from("b").unwrap()];
        let fast = side(&[("b", 5, Some(2), 1, true)]);
        let slow = side(&[("b", 900, None, 1, true)]);
        assert!(small_tenants_served_faster(&fast, &slow, &small).0);
        assert!(!small_tenants_served_faster(&slow, &fast, &small).0);
        assert!(!small_tenants_served_faster(&fast, &fast, &small).0);
        assert!(!small_tenants_served_faster(&fast, &side(&[]), &small).0);
    }
}
