//! The in-process run queue behind [`crate::InMemoryExecutor`]: per-tenant,
//! highest priority first, then FIFO by (available time, insertion order), leases with fencing tokens,
//! attempts and retry times, mirroring the PostgreSQL queue's predicates.
//! All times are on tokio's clock.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use statek_policy::{CostFairness, CostLedger, SlotCredit, TenantId};
use tokio::time::Instant;
use uuid::Uuid;

use statek_core::Run;

/// The state of a run in an [`crate::InMemoryExecutor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryRunState {
    /// Waiting to be claimed (maybe not before its available time).
    Available,
    /// Claimed under a lease (maybe an expired one).
    Running,
    /// Its handler succeeded.
    Completed,
    /// Its last allowed attempt failed.
    Failed,
    /// Cancelled by [`crate::InMemoryExecutor::cancel_run`].
    Cancelled,
}

/// A snapshot of one run of an [`crate::InMemoryExecutor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryRunStatus {
    /// The tenant.
    pub tenant: TenantId,
    /// Its state.
    pub state: MemoryRunState,
    /// Claims so far (0 before the first).
    pub attempt: u32,
    /// Executions allowed in total.
    pub max_attempts: u32,
    /// The last handler error, if any.
    pub last_error: Option<String>,
    /// The cost recorded with each attempt's finish, oldest attempt
    /// first, one per claim: as reported, at most
    /// [`MAX_RUN_COST`](statek_core::MAX_RUN_COST); `None` for an attempt
    /// that reported none or was not finished by its holder (still
    /// running, its lease expired, or cancelled).
    pub attempt_costs: Vec<Option<u64>>,
}

#[derive(Debug)]
struct Entry {
    tenant: TenantId,
    payload: Vec<u8>,
    state: MemoryRunState,
    attempt: u32,
    max_attempts: u32,
    enqueued_at: Instant,
    available_at: Instant,
    queue_seq: u64,
    priority: i32,
    lease: Option<(Uuid, Instant)>,
    last_error: Option<String>,
    attempt_costs: Vec<Option<u64>>,
    /// The current attempt was claimed by a cost-mode slot and is not
    /// charged yet: its finish, its takeover after its lease expired, or
    /// its cancel charges it, once.
    uncharged: bool,
}

/// A live run's place in its tenant's queue: highest priority first
/// (negated, so that the set's order is the claim order), then available
/// time, then insertion order.
type Key = (i64, Instant, u64, Uuid);

impl Entry {
    /// The current attempt's cost, set by the finish of its holder (once:
    /// the lease is gone after it).
    fn record_cost(&mut self, cost: Option<u64>) {
        if let Some(slot) = self.attempt_costs.last_mut() {
            *slot = cost;
        }
    }

    fn key(&self, run_id: Uuid) -> Key {
        (
            -i64::from(self.priority),
            self.available_at,
            self.queue_seq,
            run_id,
        )
    }

    /// The PostgreSQL queue's predicate: available (or running under an
    /// expired lease), due, and with attempts left.
    fn claimable(&self, now: Instant) -> bool {
        let free = match (self.state, self.lease) {
            (MemoryRunState::Available, _) => true,
            (MemoryRunState::Running, Some((_, expires))) => expires <= now,
            _ => false,
        };
        free && self.available_at <= now && self.attempt < self.max_attempts
    }
}

pub(crate) enum Claim {
    Claimed(Box<Run>, Uuid),
    Idle,
    Contended,
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    next_seq: u64,
    runs: HashMap<Uuid, Entry>,
    /// Live (available or running) runs per tenant, in claim order
    /// ([`Key`]).
    live: HashMap<TenantId, BTreeSet<Key>>,
    locked: HashSet<Uuid>,
    /// Cost mode's ledger, from the first cost-mode slot on.
    ledger: Option<CostLedger>,
}

impl Queue {
    /// Credits `tenant` for one of its slots under `cost` (the ledger is
    /// made at the first call and takes new parameters when they change:
    /// [`CostLedger::reconfigure`]).
    pub(crate) fn credit(&mut self, tenant: &TenantId, cost: &CostFairness) -> SlotCredit {
        let ledger = self.ledger.get_or_insert_with(|| CostLedger::new(*cost));
        if ledger.cost() != cost {
            ledger.reconfigure(*cost);
        }
        let credit = ledger.credit(tenant);
        statek_scheduler::metrics::publish_cost_balance(tenant, credit.balance);
        credit
    }

    /// The ledger's balance of `tenant`, `None` before any cost-mode slot.
    pub(crate) fn balance(&self, tenant: &TenantId) -> Option<i128> {
        self.ledger.as_ref().map(|ledger| ledger.balance(tenant))
    }

    /// Charges the entry's current attempt if a cost-mode slot claimed it
    /// and nothing charged it yet (`reported`: its cost; `None`: the
    /// policy's default).
    fn charge(ledger: &mut Option<CostLedger>, entry: &mut Entry, reported: Option<u64>) {
        if std::mem::take(&mut entry.uncharged) {
            if let Some(ledger) = ledger.as_mut() {
                ledger.charge(&entry.tenant, reported);
                statek_scheduler::metrics::count_cost_charge(
                    &entry.tenant,
                    ledger.cost(),
                    reported,
                );
                statek_scheduler::metrics::publish_cost_balance(
                    &entry.tenant,
                    ledger.balance(&entry.tenant),
                );
            }
        }
    }

    /// Claims `tenant`'s next run; `charged`: the claim is a cost-mode
    /// slot's, and the attempt is charged to the ledger.
    pub(crate) fn claim(
        &mut self,
        tenant: &TenantId,
        lease: Duration,
        clock: &Clock,
        charged: bool,
    ) -> Claim {
        let now = Instant::now();
        let Some(live) = self.live.get(tenant) else {
            return Claim::Idle;
        };
        let mut contended = false;
        let mut chosen = None;
        for &(_, available_at, _, run_id) in live {
            // Not due yet; a lower priority may be.
            if available_at > now {
                continue;
            }
            let Some(entry) = self.runs.get(&run_id) else {
                continue;
            };
            if !entry.claimable(now) {
                continue;
            }
            if self.locked.contains(&run_id) {
                contended = true;
                continue;
            }
            chosen = Some(run_id);
            break;
        }
        let Some(run_id) = chosen else {
            return if contended {
                Claim::Contended
            } else {
                Claim::Idle
            };
        };
        let Some(entry) = self.runs.get_mut(&run_id) else {
            return Claim::Idle;
        };
        // An attempt whose lease expired, taken over: charged the default.
        Self::charge(&mut self.ledger, entry, None);
        entry.uncharged = charged;
        let token = Uuid::now_v7();
        let expires = now + lease;
        entry.state = MemoryRunState::Running;
        entry.attempt += 1;
        entry.attempt_costs.push(None);
        entry.lease = Some((token, expires));
        let run = Run::new(
            run_id,
            entry.tenant.clone(),
            entry.payload.clone(),
            entry.attempt,
            entry.max_attempts,
            clock.system(entry.enqueued_at),
            clock.system(entry.available_at),
            clock.system(now),
            clock.system(expires),
        );
        Claim::Claimed(Box::new(run), token)
    }

    /// The entry of a run whose lease `token` still holds.
    fn held(runs: &mut HashMap<Uuid, Entry>, run_id: Uuid, token: Uuid) -> Option<&mut Entry> {
        runs.get_mut(&run_id).filter(|entry| {
            entry.state == MemoryRunState::Running
                && entry.lease.is_some_and(|(held, _)| held == token)
        })
    }

    pub(crate) fn heartbeat(&mut self, run_id: Uuid, token: Uuid, lease: Duration) -> bool {
        let Some(entry) = Self::held(&mut self.runs, run_id, token) else {
            return false;
        };
        entry.lease = Some((token, Instant::now() + lease));
        true
    }

    pub(crate) fn complete(&mut self, run_id: Uuid, token: Uuid, cost: Option<u64>) -> bool {
        let Some(entry) = Self::held(&mut self.runs, run_id, token) else {
            return false;
        };
        entry.record_cost(cost);
        Self::charge(&mut self.ledger, entry, cost);
        entry.state = MemoryRunState::Completed;
        entry.lease = None;
        let (tenant, key) = (entry.tenant.clone(), entry.key(run_id));
        self.unlist(&tenant, &key);
        true
    }

    pub(crate) fn fail(
        &mut self,
        run_id: Uuid,
        token: Uuid,
        error: &str,
        retry_after: Duration,
        cost: Option<u64>,
    ) -> bool {
        let Some(entry) = Self::held(&mut self.runs, run_id, token) else {
            return false;
        };
        entry.record_cost(cost);
        Self::charge(&mut self.ledger, entry, cost);
        let old_key = entry.key(run_id);
        entry.lease = None;
        entry.last_error = Some(error.to_owned());
        let tenant = entry.tenant.clone();
        if entry.attempt < entry.max_attempts {
            entry.state = MemoryRunState::Available;
            entry.available_at = Instant::now() + retry_after;
            let new_key = entry.key(run_id);
            self.unlist(&tenant, &old_key);
            self.live.entry(tenant).or_default().insert(new_key);
        } else {
            entry.state = MemoryRunState::Failed;
            self.unlist(&tenant, &old_key);
        }
        true
    }

    /// Adds a run; returns its id.
    pub(crate) fn enqueue(
        &mut self,
        tenant: &TenantId,
        payload: Vec<u8>,
        max_attempts: u32,
        priority: i32,
        enqueued_at: Instant,
        available_at: Instant,
    ) -> Uuid {
        let run_id = Uuid::now_v7();
        let queue_seq = self.next_seq;
        self.next_seq += 1;
        let entry = Entry {
            tenant: tenant.clone(),
            payload,
            state: MemoryRunState::Available,
            attempt: 0,
            max_attempts,
            enqueued_at,
            available_at,
            queue_seq,
            priority,
            lease: None,
            last_error: None,
            attempt_costs: Vec::new(),
            uncharged: false,
        };
        self.live
            .entry(tenant.clone())
            .or_default()
            .insert(entry.key(run_id));
        self.runs.insert(run_id, entry);
        run_id
    }

    /// Cancels an available or running run; false if it had finished or
    /// does not exist.
    pub(crate) fn cancel(&mut self, run_id: Uuid) -> bool {
        let Some(entry) = self.runs.get_mut(&run_id) else {
            return false;
        };
        if !matches!(
            entry.state,
            MemoryRunState::Available | MemoryRunState::Running
        ) {
            return false;
        }
        // A running attempt cancelled reports nothing: the default.
        Self::charge(&mut self.ledger, entry, None);
        entry.state = MemoryRunState::Cancelled;
        entry.lease = None;
        let (tenant, key) = (entry.tenant.clone(), entry.key(run_id));
        self.unlist(&tenant, &key);
        true
    }

    pub(crate) fn status(&self, run_id: Uuid) -> Option<MemoryRunStatus> {
        let entry = self.runs.get(&run_id)?;
        Some(MemoryRunStatus {
            tenant: entry.tenant.clone(),
            state: entry.state,
            attempt: entry.attempt,
            max_attempts: entry.max_attempts,
            last_error: entry.last_error.clone(),
            attempt_costs: entry.attempt_costs.clone(),
        })
    }

    /// Runs available or running, over all tenants.
    pub(crate) fn live_count(&self) -> u64 {
        self.live.values().map(|live| live.len() as u64).sum()
    }

    /// Whether any run of `tenants` is claimable (locked or not).
    pub(crate) fn any_claimable(&self, tenants: &[TenantId], now: Instant) -> bool {
        tenants
            .iter()
            .filter_map(|tenant| self.live.get(tenant))
            .flatten()
            .filter_map(|(_, _, _, run_id)| self.runs.get(run_id))
            .any(|entry| entry.claimable(now))
    }

    /// Takes the simulated row lock of a run; false for an unknown or
    /// already locked run.
    pub(crate) fn lock_run(&mut self, run_id: Uuid) -> bool {
        self.runs.contains_key(&run_id) && self.locked.insert(run_id)
    }

    pub(crate) fn unlock_run(&mut self, run_id: Uuid) {
        self.locked.remove(&run_id);
    }

    fn unlist(&mut self, tenant: &TenantId, key: &Key) {
        if let Some(live) = self.live.get_mut(tenant) {
            live.remove(key);
            if live.is_empty() {
                self.live.remove(tenant);
            }
        }
    }
}

/// Maps tokio's clock to wall-clock times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    base_instant: Instant,
    base_system: SystemTime,
}

impl Clock {
    /// Pairs tokio's now with the wall clock's now.
    pub(crate) fn now() -> Self {
        Self {
            base_instant: Instant::now(),
            base_system: SystemTime::now(),
        }
    }
}

impl Clock {
    /// The wall-clock time of `at`.
    pub(crate) fn system(&self, at: Instant) -> SystemTime {
        let since = at.saturating_duration_since(self.base_instant);
        self.base_system
            .checked_add(since)
            .unwrap_or(self.base_system)
    }
}

/// Locks the queue. The lock is never held across an await, and a poisoned
/// lock (a panic elsewhere while holding it) still holds a consistent queue:
/// every mutation completes before unlocking.
pub(crate) fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}
