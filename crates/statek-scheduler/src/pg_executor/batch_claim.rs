//! A batch claim of the [`PgRunQueueExecutor`] that skips known-empty
//! tenants ([`super::ExecutorOptions::idle_recheck`]): which slots it asks
//! the database about, and the decided prefix of the batch from the
//! answers.

use std::time::Duration;

use statek_core::{BatchSlot, SlotBatch, SlotStart, Unclaimed};
use statek_policy::TenantId;
use statek_store_pg::{ClaimedRun, SlotClaim, SlotClaimRequest, StoreError};
use tokio::time::Instant;

use crate::idle_set::{IdleSet, Observed};

/// A claimed run and when its claim was sent, as a batch starts it.
pub(super) type ClaimStart = (Box<ClaimedRun>, Instant);

/// One batch claim as planned: the undecided slots it was made for (the
/// first one's sequence and their number: a batch's slots are its
/// consecutive sequences), which of them it asks the database about (the
/// others' tenants are known empty), and the request for those (`None`
/// when none is asked about).
#[derive(Debug)]
pub(super) struct PendingClaim {
    first: u64,
    pub(super) len: usize,
    pub(super) max_runs: usize,
    asked: Vec<bool>,
    pub(super) request: Option<SlotClaimRequest>,
    observed: Option<Observed>,
}

impl PendingClaim {
    /// Whether this claim was planned for `slots` with `max_runs` (a
    /// retry of it sends the same claim).
    pub(super) fn is_for(&self, slots: &[BatchSlot], max_runs: usize) -> bool {
        self.len == slots.len()
            && self.max_runs == max_runs
            && slots.first().is_none_or(|slot| slot.sequence == self.first)
    }
}

/// Plans a batch claim of `slots` (the batch's undecided ones, in
/// sequence order): asks about every slot whose tenant may have work.
pub(super) fn plan_claim(
    idle: Option<&IdleSet>,
    batch: &SlotBatch<'_, StoreError>,
    slots: &[BatchSlot],
    lease: Duration,
    max_runs: usize,
) -> Result<PendingClaim, StoreError> {
    let now = std::time::Instant::now();
    let (asked, observed) = match idle {
        Some(idle) => {
            let (asked, observed) = idle.plan(slots.iter().map(|slot| &slot.tenant), now);
            (asked, Some(observed))
        }
        None => (vec![true; slots.len()], None),
    };
    let asked_pairs: Vec<(u64, TenantId)> = slots
        .iter()
        .zip(&asked)
        .filter(|(_, asked)| **asked)
        .map(|(slot, _)| (slot.sequence, slot.tenant.clone()))
        .collect();
    let request = if asked_pairs.is_empty() {
        None
    } else {
        let request = SlotClaimRequest::new(batch.shard(), &asked_pairs, lease, max_runs)?;
        Some(if batch.cost_fairness().is_some() {
            request.in_cost_mode()
        } else {
            request
        })
    };
    Ok(PendingClaim {
        first: slots.first().map_or(0, |slot| slot.sequence),
        len: slots.len(),
        max_runs,
        asked,
        request,
        observed,
    })
}

/// The decided prefix of `claim`'s slots from the answers of the slots
/// it asked about (`claims`, their decided prefix): known-empty slots
/// are idle, up to the last answered slot (and to the end when every
/// asked slot was answered). A known-empty slot whose tenant was
/// notified while the claim was in flight ends the prefix instead
/// (it is asked about by the next claim), unless a run was claimed
/// for a later slot (a claimed run is always started). Tells the idle
/// set what each answer showed. Returns the starts (empty when the
/// first slot is such a notified one and nothing was claimed) and how
/// many slots were decided idle without being asked about.
pub(super) fn merge_claims(
    idle: Option<&IdleSet>,
    claim: &PendingClaim,
    slots: &[BatchSlot],
    claims: Vec<SlotClaim>,
    claim_sent: Instant,
) -> (Vec<SlotStart<ClaimStart>>, u64) {
    let asked_count = claim.asked.iter().filter(|asked| **asked).count();
    let all_answered = claims.len() >= asked_count;
    // The slot index of the last claimed run: the prefix reaches it.
    let mut last_claimed = None;
    let mut answered = 0;
    for (index, asked) in claim.asked.iter().enumerate() {
        if *asked {
            match claims.get(answered) {
                Some(SlotClaim::Claimed(_)) => last_claimed = Some(index),
                Some(_) => {}
                None => break,
            }
            answered += 1;
        }
    }
    let notified_meanwhile = |index: usize, tenant: &TenantId| match (idle, &claim.observed) {
        (Some(idle), Some(observed)) => {
            last_claimed.is_none_or(|last| index > last) && idle.notified_since(tenant, observed)
        }
        _ => false,
    };
    let mut answers = claims.into_iter();
    let mut starts = Vec::with_capacity(claim.len);
    let mut known_idle = 0;
    for (index, (slot, asked)) in slots.iter().zip(&claim.asked).enumerate() {
        let tenant = &slot.tenant;
        if !*asked {
            if (answers.as_slice().is_empty() && !all_answered) || notified_meanwhile(index, tenant)
            {
                break;
            }
            known_idle += 1;
            SlotStart::unclaimed(Unclaimed::IdleKnown).push_into(&mut starts);
            continue;
        }
        let Some(answer) = answers.next() else {
            break;
        };
        if let (Some(idle), Some(observed)) = (idle, &claim.observed) {
            match answer {
                SlotClaim::Idle => {
                    idle.found_empty(tenant, observed);
                }
                _ => idle.found_work(tenant),
            }
        }
        match answer {
            SlotClaim::Claimed(run) => SlotStart::Claimed((run, claim_sent)),
            SlotClaim::Idle => SlotStart::unclaimed(Unclaimed::Idle),
            SlotClaim::Limited => SlotStart::unclaimed(Unclaimed::Limited),
            SlotClaim::Debt => SlotStart::unclaimed(Unclaimed::Debt),
            // The slot claimed the run; its lease is another's now.
            SlotClaim::LeaseLost { .. } => SlotStart::LeaseLost,
            // Contended, or any other answer without a run.
            _ => SlotStart::unclaimed(Unclaimed::Contended),
        }
        .push_into(&mut starts);
    }
    (starts, known_idle)
}
