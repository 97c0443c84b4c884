//! What an executor did with one slot: [`TenantTickOutcome`] and the
//! [`ExecutedRun`] it names. Below both the executor trait and the batch
//! protocol, which both speak of it.

use crate::slot::SlotClass;
use std::time::SystemTime;

use uuid::Uuid;

/// A run executed (successfully or not) for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedRun {
    /// The run.
    pub run_id: Uuid,
    /// 1 on the first execution of the run.
    pub attempt: u32,
    /// Database time from which the run was claimable.
    pub available_at: SystemTime,
    /// Database time of the claim.
    pub claimed_at: SystemTime,
}

/// What the tenant's executor did with one slot. Whatever it is, the slot is
/// consumed: an empty or contended queue never passes its slot to another
/// tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TenantTickOutcome {
    /// One run was claimed and its handler succeeded.
    Executed(ExecutedRun),
    /// One run was claimed and its handler failed (or its lease was lost);
    /// the run is retried later or marked failed by the queue.
    ExecutionFailed {
        /// The run.
        run: ExecutedRun,
        /// The handler's error, or why the outcome could not be recorded.
        error: String,
    },
    /// The tenant had no claimable run.
    Idle,
    /// The tenant had claimable runs, but other claimers held all of them.
    Contended,
    /// The tenant had claimable runs, but its concurrency cap or rate
    /// limit (PostgreSQL run queue: `statek_store_pg::TenantLimits`) let it
    /// start none for this slot. The slot is consumed like an idle one: a
    /// statek-scheduler's `Worker` backs off on it as on `Idle`.
    Limited,
    /// Cost mode: the tenant had claimable runs but was in debt after the
    /// slot's credit (docs/guarantees.md, "Cost mode: the bound"); the
    /// slot is consumed without a claim. Unlike `Idle` and `Limited`, a
    /// statek-scheduler's `Worker` does not back off on it: the tenant's
    /// next slots repay the debt.
    Debt,
    /// Shutdown was requested; no run was started, or the running one was
    /// cancelled and released.
    Cancelled,
}

impl TenantTickOutcome {
    /// Every [`label`](Self::label), one per variant, in declaration order
    /// (the `outcome` label values of the tick outcome metrics).
    pub const LABELS: &'static [&'static str] = &[
        "executed",
        "execution_failed",
        "idle",
        "contended",
        "limited",
        "debt",
        "cancelled",
    ];

    /// A short lowercase label: `executed`, `execution_failed`, `idle`,
    /// `contended`, `limited`, `debt`, `cancelled`.
    pub fn label(&self) -> &'static str {
        match self {
            TenantTickOutcome::Executed(_) => "executed",
            TenantTickOutcome::ExecutionFailed { .. } => "execution_failed",
            TenantTickOutcome::Idle => "idle",
            TenantTickOutcome::Contended => "contended",
            TenantTickOutcome::Limited => "limited",
            TenantTickOutcome::Debt => "debt",
            TenantTickOutcome::Cancelled => "cancelled",
        }
    }

    /// The class a slot with this outcome is recorded with, unless its
    /// executor said otherwise ([`crate::SlotTicket::classify`]): a claimed
    /// run (executed or failed) is [`SlotClass::Claimed`], a cancelled slot
    /// [`SlotClass::Unused`].
    pub fn slot_class(&self) -> SlotClass {
        match self {
            TenantTickOutcome::Executed(_) | TenantTickOutcome::ExecutionFailed { .. } => {
                SlotClass::Claimed
            }
            TenantTickOutcome::Idle => SlotClass::Idle,
            TenantTickOutcome::Contended => SlotClass::Contended,
            TenantTickOutcome::Limited => SlotClass::Limited,
            TenantTickOutcome::Debt => SlotClass::Debt,
            TenantTickOutcome::Cancelled => SlotClass::Unused,
        }
    }
}

/// What consecutive slots consumed without a claim found (each slot is
/// recorded with [`class`](Self::class); the scheduler sees
/// [`outcome`](Self::outcome)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unclaimed {
    /// The claim asked; the tenant had no claimable run.
    Idle,
    /// The executor knew the tenant had no claimable run and did not ask.
    IdleKnown,
    /// The tenant's claimable runs were all held by other claimers.
    Contended,
    /// The tenant's concurrency cap or rate limit let it start none.
    Limited,
    /// Cost mode: the tenant was in debt (and had a claimable run).
    Debt,
    /// The replica stopped before the slots were decided.
    Unused,
}

impl Unclaimed {
    /// The class the slots are recorded with.
    pub const fn class(self) -> SlotClass {
        match self {
            Unclaimed::Idle => SlotClass::Idle,
            Unclaimed::IdleKnown => SlotClass::IdleKnown,
            Unclaimed::Contended => SlotClass::Contended,
            Unclaimed::Limited => SlotClass::Limited,
            Unclaimed::Debt => SlotClass::Debt,
            Unclaimed::Unused => SlotClass::Unused,
        }
    }

    /// Each slot's outcome: [`TenantTickOutcome::Idle`] for both idle
    /// kinds, [`TenantTickOutcome::Cancelled`] for unused slots.
    pub fn outcome(self) -> TenantTickOutcome {
        match self {
            Unclaimed::Idle | Unclaimed::IdleKnown => TenantTickOutcome::Idle,
            Unclaimed::Contended => TenantTickOutcome::Contended,
            Unclaimed::Limited => TenantTickOutcome::Limited,
            Unclaimed::Debt => TenantTickOutcome::Debt,
            Unclaimed::Unused => TenantTickOutcome::Cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `LABELS` holds every variant's label in declaration order; the
    /// exhaustive `match` stops compiling when a variant is added.
    #[test]
    fn labels_list_every_variant_in_order() {
        let run = ExecutedRun {
            run_id: Uuid::nil(),
            attempt: 1,
            available_at: SystemTime::UNIX_EPOCH,
            claimed_at: SystemTime::UNIX_EPOCH,
        };
        let every = [
            TenantTickOutcome::Executed(run.clone()),
            TenantTickOutcome::ExecutionFailed {
                run,
                error: String::new(),
            },
            TenantTickOutcome::Idle,
            TenantTickOutcome::Contended,
            TenantTickOutcome::Limited,
            TenantTickOutcome::Debt,
            TenantTickOutcome::Cancelled,
        ];
        for (index, outcome) in every.iter().enumerate() {
            let declared = match outcome {
                TenantTickOutcome::Executed(_) => 0,
                TenantTickOutcome::ExecutionFailed { .. } => 1,
                TenantTickOutcome::Idle => 2,
                TenantTickOutcome::Contended => 3,
                TenantTickOutcome::Limited => 4,
                TenantTickOutcome::Debt => 5,
                TenantTickOutcome::Cancelled => 6,
            };
            assert_eq!(declared, index);
        }
        let labels: Vec<&str> = every.iter().map(TenantTickOutcome::label).collect();
        assert_eq!(labels, TenantTickOutcome::LABELS);
    }
}
