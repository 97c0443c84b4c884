//! The tenants an executor knows to be empty, so that their slots are
//! decided without asking the database (issue 23, "idle tenants cost no
//! database probe").
//!
//! A tenant becomes *known empty* when a claim statement found no
//! claimable run of it (its slot was idle) and nothing that could have
//! given it work happened between sending that statement and reading its
//! answer. It stops being known empty when
//! - a run notification of the tenant arrives (`NOTIFY statek_runs`,
//!   sent when an enqueue or a put-back commits): a run notified before a
//!   slot is decided is never skipped;
//! - the recheck interval has passed since the claim that found it empty:
//!   runs that become claimable without a notification (a delayed run's
//!   `available_at` passing, a failed attempt's retry delay ending, a lease
//!   expiring on another replica) are found by the first claim after it;
//! - a claim found a run of it, or found it contended or limited.
//!
//! Nothing is known empty while no notification connection is listening
//! (polling mode, PgBouncer without a direct connection, a lost `LISTEN`
//! connection until it listens again): every slot is then asked about.
//! Each change of the listening state starts a new epoch, and a claim's
//! answer marks a tenant empty only when neither the epoch moved nor a
//! notification of the tenant arrived since the claim was sent (every
//! notification takes the next number of one counter; a claim notes the
//! counter as it is sent, so it snapshots no tenant).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use statek_policy::TenantId;

/// What a claim saw of the set when it was sent: the epoch and the
/// notification counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    epoch: u64,
    sent_at: Instant,
    notifications: u64,
}

#[derive(Debug, Default)]
struct Entry {
    /// The counter's number of the tenant's latest notification (0:
    /// none yet).
    last_notified: u64,
    /// When the claim that found it empty was sent; `None`: it may have
    /// work.
    empty_since: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    /// Notification connections listening now.
    listening: u32,
    /// Bumped on every change of `listening`.
    epoch: u64,
    /// Notifications received so far, of any tenant.
    notifications: u64,
    tenants: HashMap<TenantId, Entry>,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct IdleSet {
    recheck: Duration,
    state: Mutex<State>,
}

impl IdleSet {
    /// A set whose tenants stay known empty for at most `recheck`.
    pub(crate) fn new(recheck: Duration) -> Self {
        Self {
            recheck,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Which of `tenants` (one per slot) may have work at `now` (`false`
    /// only for a tenant known empty), and what a claim about them sent at
    /// `now` sees: one pass under one lock, nothing cloned.
    pub(crate) fn plan<'t>(
        &self,
        tenants: impl IntoIterator<Item = &'t TenantId>,
        now: Instant,
    ) -> (Vec<bool>, Observed) {
        let state = self.state();
        let may_have_work = tenants
            .into_iter()
            .map(|tenant| {
                state.listening == 0
                    || state
                        .tenants
                        .get(tenant)
                        .and_then(|entry| entry.empty_since)
                        .is_none_or(|since| now.saturating_duration_since(since) >= self.recheck)
            })
            .collect();
        let observed = Observed {
            epoch: state.epoch,
            sent_at: now,
            notifications: state.notifications,
        };
        (may_have_work, observed)
    }

    /// Which of `tenants` (one per slot) may have work at `now`: `false`
    /// only for a tenant known empty.
    #[cfg(test)]
    pub(crate) fn may_have_work<'t>(
        &self,
        tenants: impl IntoIterator<Item = &'t TenantId>,
        now: Instant,
    ) -> Vec<bool> {
        self.plan(tenants, now).0
    }

    /// What a claim about `tenants` sees as it is sent at `now`.
    #[cfg(test)]
    pub(crate) fn observe<'t>(
        &self,
        tenants: impl IntoIterator<Item = &'t TenantId>,
        now: Instant,
    ) -> Observed {
        self.plan(tenants, now).1
    }

    /// A claim sent as `observed` found no claimable run of `tenant`: it is
    /// known empty from the claim's sending on, unless a notification of
    /// it or a change of listening came in meanwhile. Returns whether it
    /// was marked.
    pub(crate) fn found_empty(&self, tenant: &TenantId, observed: &Observed) -> bool {
        let mut state = self.state();
        if state.listening == 0 || state.epoch != observed.epoch {
            return false;
        }
        match state.tenants.get_mut(tenant) {
            Some(entry) if entry.last_notified > observed.notifications => false,
            Some(entry) => {
                entry.empty_since = Some(observed.sent_at);
                true
            }
            None => {
                let entry = Entry {
                    last_notified: 0,
                    empty_since: Some(observed.sent_at),
                };
                state.tenants.insert(tenant.clone(), entry);
                true
            }
        }
    }

    /// Whether `tenant` may have got work since a claim was sent as
    /// `observed`: its notification arrived, or listening changed since
    /// (or nothing listens).
    pub(crate) fn notified_since(&self, tenant: &TenantId, observed: &Observed) -> bool {
        let state = self.state();
        state.listening == 0
            || state.epoch != observed.epoch
            || state
                .tenants
                .get(tenant)
                .is_some_and(|entry| entry.last_notified > observed.notifications)
    }

    /// Every tenant may have work (the idle probe found claimable work of
    /// some tenant of the policy): nothing is known empty any more, and
    /// claims in flight mark nothing.
    pub(crate) fn forget(&self) {
        let mut state = self.state();
        state.epoch = state.epoch.wrapping_add(1);
        for entry in state.tenants.values_mut() {
            entry.empty_since = None;
        }
    }

    /// A claim found work of `tenant` (a run, or a contended or limited
    /// slot): it may have more.
    pub(crate) fn found_work(&self, tenant: &TenantId) {
        if let Some(entry) = self.state().tenants.get_mut(tenant) {
            entry.empty_since = None;
        }
    }

    /// A run notification of `tenant` arrived.
    pub(crate) fn notified(&self, tenant: &TenantId) {
        let mut state = self.state();
        state.notifications = state.notifications.saturating_add(1);
        let number = state.notifications;
        let entry = state.tenants.entry(tenant.clone()).or_default();
        entry.last_notified = number;
        entry.empty_since = None;
    }

    /// A notification connection listens now.
    pub(crate) fn listening_started(&self) {
        let mut state = self.state();
        state.listening = state.listening.saturating_add(1);
        state.epoch = state.epoch.wrapping_add(1);
    }

    /// A notification connection stopped listening: while none listens,
    /// no tenant is known empty, and what was known is forgotten.
    pub(crate) fn listening_stopped(&self) {
        let mut state = self.state();
        state.listening = state.listening.saturating_sub(1);
        state.epoch = state.epoch.wrapping_add(1);
        if state.listening == 0 {
            for entry in state.tenants.values_mut() {
                entry.empty_since = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::try_from(id).unwrap_or_else(|e| panic!("{e}"))
    }

    const RECHECK: Duration = Duration::from_millis(500);

    #[test]
    fn nothing_is_known_empty_while_no_connection_listens() {
        let set = IdleSet::new(RECHECK);
        let (a, now) = (tenant("a"), Instant::now());
        let seen = set.observe([&a], now);
        assert!(!set.found_empty(&a, &seen));
        assert_eq!(set.may_have_work([&a], now), [true]);
        set.listening_started();
        // A claim sent before listening began says nothing.
        assert!(!set.found_empty(&a, &seen));
        let seen = set.observe([&a], now);
        assert!(set.found_empty(&a, &seen));
        assert_eq!(set.may_have_work([&a], now), [false]);
        // The connection is lost: everything is asked about again, and a
        // claim sent while it listened marks nothing.
        set.listening_stopped();
        assert_eq!(set.may_have_work([&a], now), [true]);
        assert!(!set.found_empty(&a, &seen));
        set.listening_started();
        assert_eq!(set.may_have_work([&a], now), [true]);
    }

    #[test]
    fn a_notification_after_the_claim_was_sent_keeps_the_tenant_asked_about() {
        let set = IdleSet::new(RECHECK);
        set.listening_started();
        let (a, b, now) = (tenant("a"), tenant("b"), Instant::now());
        let seen = set.observe([&a, &b], now);
        // A run of `a` committed after the claim's snapshot; its
        // notification arrives before the claim's answer.
        set.notified(&a);
        assert!(!set.found_empty(&a, &seen));
        assert!(set.found_empty(&b, &seen));
        assert_eq!(set.may_have_work([&a, &b], now), [true, false]);
        // A notification after the mark ends it at once.
        set.notified(&b);
        assert_eq!(set.may_have_work([&a, &b], now), [true, true]);
        // The claim snapshots no tenant, only the counter: it could mark
        // any tenant not notified since it was sent, so only the claim's
        // own answers call `found_empty` (`merge_claims`, per asked slot).
        let c = tenant("c");
        assert!(set.found_empty(&c, &seen));
        set.notified(&c);
        assert!(!set.found_empty(&c, &seen));
    }

    #[test]
    fn known_empty_lasts_the_recheck_interval_from_the_claims_sending() {
        let set = IdleSet::new(RECHECK);
        set.listening_started();
        let (a, sent) = (tenant("a"), Instant::now());
        let seen = set.observe([&a], sent);
        assert!(set.found_empty(&a, &seen));
        assert_eq!(
            set.may_have_work([&a], sent + RECHECK - Duration::from_millis(1)),
            [false]
        );
        assert_eq!(set.may_have_work([&a], sent + RECHECK), [true]);
        // Found work: asked about again at once.
        assert!(set.found_empty(&a, &set.observe([&a], sent)));
        set.found_work(&a);
        assert_eq!(set.may_have_work([&a], sent), [true]);
    }

    #[test]
    fn a_notification_or_a_forget_is_seen_by_a_claim_in_flight() {
        let set = IdleSet::new(RECHECK);
        set.listening_started();
        let (a, b, now) = (tenant("a"), tenant("b"), Instant::now());
        let seen = set.observe([&a, &b], now);
        assert!(!set.notified_since(&a, &seen));
        set.notified(&a);
        assert!(set.notified_since(&a, &seen));
        assert!(!set.notified_since(&b, &seen));
        // A tenant the claim did not see counts from 0.
        let c = tenant("c");
        assert!(!set.notified_since(&c, &seen));
        set.notified(&c);
        assert!(set.notified_since(&c, &seen));
        // The probe found work: everything may have work, and the claim in
        // flight marks nothing.
        let seen = set.observe([&a, &b], now);
        assert!(set.found_empty(&b, &seen));
        set.forget();
        assert_eq!(set.may_have_work([&b], now), [true]);
        assert!(set.notified_since(&b, &seen));
        assert!(!set.found_empty(&a, &seen));
    }

    #[test]
    fn two_listeners_one_lost_keeps_what_is_known() {
        let set = IdleSet::new(RECHECK);
        set.listening_started();
        set.listening_started();
        let (a, now) = (tenant("a"), Instant::now());
        assert!(set.found_empty(&a, &set.observe([&a], now)));
        set.listening_stopped();
        assert_eq!(set.may_have_work([&a], now), [false]);
        set.listening_stopped();
        assert_eq!(set.may_have_work([&a], now), [true]);
    }

    /// A plan answers per slot and notes the notification counter, not
    /// each tenant: a later notification of any tenant it saw is seen.
    #[test]
    fn a_plan_answers_per_slot_and_notes_the_counter() {
        let set = IdleSet::new(RECHECK);
        set.listening_started();
        let (a, b, now) = (tenant("a"), tenant("b"), Instant::now());
        set.notified(&a);
        set.notified(&a);
        assert!(set.found_empty(&b, &set.observe([&b], now)));
        let (may, seen) = set.plan([&a, &b, &a, &b, &a], now);
        assert_eq!(may, [true, false, true, false, true]);
        assert_eq!(seen.notifications, 2);
        assert!(!set.notified_since(&a, &seen) && !set.notified_since(&b, &seen));
        set.notified(&b);
        assert_eq!(
            (set.notified_since(&a, &seen), set.notified_since(&b, &seen)),
            (false, true)
        );
        // The claim's answer cannot mark b empty: its notification came
        // after the claim was sent; a can be.
        assert_eq!(
            (set.found_empty(&b, &seen), set.found_empty(&a, &seen)),
            (false, true)
        );
    }
}
