//! The conformance suite's harness: what a user implements for their
//! executor ([`Harness`]), the handler the cases run ([`SuiteHandler`])
//! and what it records, and the suite's settings.

// Test support: its assertions panic, as in any test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statek_policy::{SchedulerShardId, TenantId};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use statek_core::{
    Completed, ReservationSource, Run, RunError, RunHandler, RunResult, TenantExecutor,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Execution {
    pub(crate) tenant: String,
    pub(crate) run_id: Uuid,
    pub(crate) attempt: u32,
    pub(crate) payload: Vec<u8>,
}

/// What the suite's handler saw and is told to do.
/// The cost the suite's handler reports for a run: the number after
/// `cost=` at the start of its payload (`cost=7 …` reports 7), none for
/// any other payload.
pub(crate) fn reported_cost(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(b"cost=")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[derive(Debug)]
pub(crate) struct Probe {
    pub(crate) log: Mutex<Vec<Execution>>,
    pub(crate) fail: AtomicBool,
    /// When set, attempt 1 of every run waits for a permit of `gate`.
    pub(crate) hold_first_attempts: AtomicBool,
    pub(crate) gate: Semaphore,
    /// One permit per execution that started.
    pub(crate) started: Semaphore,
}

impl Probe {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            log: Mutex::new(Vec::new()),
            fail: AtomicBool::new(false),
            hold_first_attempts: AtomicBool::new(false),
            gate: Semaphore::new(0),
            started: Semaphore::new(0),
        })
    }

    pub(crate) async fn execute(
        &self,
        tenant: &TenantId,
        run_id: Uuid,
        attempt: u32,
        payload: &[u8],
    ) -> RunResult {
        self.started.add_permits(1);
        if attempt == 1 && self.hold_first_attempts.load(Ordering::SeqCst) {
            self.gate.acquire().await.unwrap().forget();
        }
        self.log.lock().unwrap().push(Execution {
            tenant: tenant.as_str().to_owned(),
            run_id,
            attempt,
            payload: payload.to_vec(),
        });
        let cost = reported_cost(payload);
        if self.fail.load(Ordering::SeqCst) {
            let error = RunError::new("handler says no");
            return Err(match cost {
                Some(cost) => error.with_cost(cost),
                None => error,
            });
        }
        Ok(cost.map_or(Completed::new(), Completed::with_cost))
    }

    pub(crate) fn log(&self) -> Vec<Execution> {
        self.log.lock().unwrap().clone()
    }

    pub(crate) fn payloads_of(&self, tenant: &str) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|e| e.tenant == tenant)
            .map(|e| String::from_utf8(e.payload).unwrap())
            .collect()
    }
}

/// The handler the suite's cases run on the executor under test: it
/// records every execution, fails when a case asks, and can hold first
/// attempts in flight until the case releases them. Build the executor of
/// a [`Harness`] with it.
#[derive(Debug, Clone)]
pub struct SuiteHandler(pub(crate) Arc<Probe>);

impl RunHandler for SuiteHandler {
    async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
        self.0
            .execute(&run.tenant, run.run_id, run.attempt, &run.payload)
            .await
    }
}

/// Executor settings a case asks for: each harness maps them onto its
/// executor's options (statek's executors: [`ExecutorOptions`](statek_scheduler::ExecutorOptions)).
/// Defaults: lease 30 s, heartbeat every 10 s, retry backoff 1 s doubling
/// up to 300 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// The lease of a claimed run.
    pub lease: Duration,
    /// The heartbeat period (`None`: no heartbeats).
    pub heartbeat_every: Option<Duration>,
    /// The retry backoff after the first failed attempt.
    pub retry_initial: Duration,
    /// The largest retry backoff.
    pub retry_max: Duration,
}

/// The executor defaults (those of
/// [`ExecutorOptions`](statek_scheduler::ExecutorOptions)), read from them.
impl Default for Settings {
    fn default() -> Self {
        let defaults = statek_scheduler::ExecutorOptions::default();
        Self {
            lease: defaults.lease_length(),
            heartbeat_every: defaults.heartbeat_period(),
            retry_initial: defaults.retry_initial(),
            retry_max: defaults.retry_max(),
        }
    }
}

/// A run's state as the conformance suite compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// One of `available`, `running`, `completed`, `failed`, `cancelled`
    /// (the PostgreSQL queue's state names).
    pub state: &'static str,
    /// Claims so far (0 before the first).
    pub attempt: u32,
    /// The last handler error, if any (the handler's message as given).
    pub last_error: Option<String>,
    /// The cost recorded with each attempt, oldest first, one per claim
    /// (`None`: it reported none, or was not finished by its holder).
    pub attempt_costs: Vec<Option<u64>>,
}

/// What the suite needs from an executor under test: build it around the
/// suite's handler, enqueue runs, read a run's state, and hold a run's
/// lock as another session would.
///
/// Implement it for your own [`TenantExecutor`] (statek's implementations
/// for `PgRunQueueExecutor` (statek-scheduler, feature `postgres`) and [`crate::InMemoryExecutor`] are
/// in the crate's `tests/it/conformance.rs`), then call [`exercise`](crate::executor_conformance::exercise) or
/// each case.
pub trait Harness: Sized + Send + Sync + 'static {
    /// The executor under test.
    type Executor: TenantExecutor + 'static;
    /// A held lock on one run (as another session's `SELECT … FOR
    /// UPDATE`): while held, claims must skip the run without waiting.
    type Lock: Send;
    /// Where the suite's scheduler reserves its slots: an
    /// [`crate::InMemoryReservations`] for an executor that needs no
    /// database; the executor's own store when it claims only reserved
    /// slots (PostgreSQL's claim function refuses any other slot since
    /// migration V11, so `PgRunQueueExecutor` (statek-scheduler, feature `postgres`) reserves from its
    /// `PgStore`).
    type Source: ReservationSource + Clone + 'static;

    /// A fresh, empty queue and an executor on it whose runs `handler`
    /// executes, with `settings`.
    fn new(
        handler: SuiteHandler,
        settings: Settings,
    ) -> impl Future<Output = (Self, Self::Executor)> + Send;
    /// Enqueues a run of `tenant`, claimable now, allowed `max_attempts`
    /// executions, at priority 0; returns its id.
    fn enqueue(
        &self,
        tenant: &TenantId,
        payload: &[u8],
        max_attempts: u32,
    ) -> impl Future<Output = Uuid> + Send;
    /// Enqueues a run at `priority` (5 attempts); returns its id.
    fn enqueue_at(
        &self,
        tenant: &TenantId,
        payload: &[u8],
        priority: i32,
    ) -> impl Future<Output = Uuid> + Send;
    /// The state of run `run_id`.
    fn status(&self, run_id: Uuid) -> impl Future<Output = Status> + Send;
    /// Takes run `run_id`'s lock as another session.
    fn lock(&self, run_id: Uuid) -> impl Future<Output = Self::Lock> + Send;
    /// Releases a lock from [`lock`](Self::lock).
    fn unlock(&self, lock: Self::Lock) -> impl Future<Output = ()> + Send;
    /// The reservation source of this queue (see [`Harness::Source`]).
    fn source(&self) -> Self::Source;
    /// The source's cursor of `shard`: the next sequence it hands out.
    fn next_sequence(&self, shard: &SchedulerShardId) -> impl Future<Output = u64> + Send;
    /// How many of `ids` are in each (state, attempt).
    fn count_by_state(
        &self,
        ids: &[Uuid],
    ) -> impl Future<Output = BTreeMap<(&'static str, u32), usize>> + Send;
}

// ---------------------------------------------------------------------------
// Fixtures.
