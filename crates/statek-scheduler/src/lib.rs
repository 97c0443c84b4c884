//! statek's durable fair scheduler.
//!
//! A [`DurableFairScheduler`] is one replica of a shard's scheduler. Each
//! [`tick`](DurableFairScheduler::tick) reserves the shard's next global
//! slot in PostgreSQL (one short transaction, idempotent by a client-made
//! UUIDv7), maps the slot to exactly one tenant through the policy's
//! compiled cycle, and lets a tenant-isolated [`TenantExecutor`] claim and
//! run at most one run from that tenant's queue. An empty or contended queue
//! still consumes its slot, so no busy tenant ever takes another's share.
//!
//! **The guarantee**: across all replicas, restarts and lost
//! acknowledgements, reservations form one gapless sequence per shard, and
//! every tenant is selected at least once in every window of
//! [`maximum_reservations_until_selection`](statek_policy::TenantStarvationBound::maximum_reservations_until_selection)
//! consecutive reservations (its starvation bound), measured on the cycle.
//! **What it is not**: a share of CPU time, tokens, money or completed runs;
//! the bound counts reservations, not seconds.
//!
//! ```no_run
//! use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
//! use statek_scheduler::{
//!     DurableFairScheduler, ExecutorOptions, PgRunQueueExecutor, Run, RunError, RunResult, Completed, RunHandler,
//!     SchedulerOptions,
//! };
//! use statek_store_pg::PgStore;
//! use tokio_util::sync::CancellationToken;
//!
//! struct Print;
//! impl RunHandler for Print {
//!     async fn handle(&self, run: &Run, _cancel: CancellationToken) -> RunResult {
//!         println!("tenant {} run {}", run.tenant, run.run_id);
//!         Ok(Completed::new())
//!     }
//! }
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::connect("postgres://statek@127.0.0.1/statek")?;
//! store.migrate().await?;
//! let policy = WeightedFairnessPolicy::new(
//!     SchedulerShardId::try_from("primary-v1")?,
//!     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
//!      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
//! )?;
//! let executor = PgRunQueueExecutor::new(store.clone(), Print, ExecutorOptions::new());
//! let scheduler =
//!     DurableFairScheduler::register(store, policy, executor, SchedulerOptions::new()).await?;
//! let shutdown = CancellationToken::new();
//! let outcome = scheduler.tick(&shutdown).await?;
//! println!(
//!     "sequence {} slot {} tenant {} -> {}",
//!     outcome.reservation().sequence(),
//!     outcome.reservation().slot(),
//!     outcome.tenant(),
//!     outcome.tenant_outcome().label()
//! );
//! # Ok(()) }
//! ```
//!
//! - [`FairnessMonitor`] measures what a shard actually did from its tick
//!   outcomes (fed in any order, from any number of replicas): per-tenant
//!   selection gaps, claim and service lag, outcome counts, and every gap
//!   above a tenant's bound while it had work.
//! - For tests of code built on statek, the crate statek-testing holds an
//!   in-process `InMemoryExecutor` (a [`TenantExecutor`] with the
//!   PostgreSQL queue's semantics: FIFO, leases, retries), an
//!   `InMemoryReservations` source, and the conformance suites both
//!   executors and both sources pass.

#![forbid(unsafe_code)]

mod error;
mod executor_options;
mod fairness_report;
#[cfg(feature = "postgres")]
mod finish_recording;
mod group_commit;
#[cfg(feature = "postgres")]
mod idle_set;
pub mod metrics;
mod monitor;
mod monitor_options;
mod options;
mod outcome_recording;
#[cfg(feature = "postgres")]
mod pg_executor;
mod reservation_retries;
mod reserved_batch;
mod scheduler;
mod selection_metrics;
mod tick_outcome;
mod worker;

pub use error::SchedulerError;
pub use executor_options::{ExecutorOptions, DEFAULT_IDLE_RECHECK};
pub use fairness_report::{
    ClaimLag, FairnessReport, GapStats, GapViolation, TenantFairnessRow, TimeLag,
};
pub use monitor::{
    FairnessMonitor, MonitorOptions, DEFAULT_MAX_PENDING, DEFAULT_MAX_TRACKED_RUNS,
    DEFAULT_MAX_VIOLATIONS,
};
pub use options::SchedulerOptions;
#[cfg(feature = "postgres")]
pub use pg_executor::PgRunQueueExecutor;
pub use scheduler::DurableFairScheduler;
#[cfg(feature = "postgres")]
pub use scheduler::PgScheduler;
/// The seam (statek-core), re-exported so an application names one crate:
/// the reservation-source and executor traits, the batch protocol,
/// reservations, registrations, slot outcomes, wake-ups, the cycle-digest
/// check, and what a run's handler sees.
pub use statek_core::{
    charged_cost, check_cycle_digest, claim_and_run, execute_each, lease, run_notifications,
    BatchSlot, Completed, CycleCheck, CycleMismatch, EnqueuedRun, ExecutedRun, Registration,
    Reservation, ReservationSource, Run, RunError, RunHandler, RunNotifications, RunPermit,
    RunPool, RunResult, RunWakeups, SlotBatch, SlotClass, SlotOutcomeAnswer, SlotOutcomes,
    SlotOutcomesRecorded, SlotRange, SlotStart, SlotTicket, SlotTickets, SourceError,
    SourceErrorKind, SourceShard, Succession, TenantExecutor, TenantTickOutcome, Unclaimed,
    BUFFERED_WAKEUPS, MAX_ATTEMPTS_LIMIT, MAX_PAYLOAD_BYTES, MAX_PRIORITY, MAX_RESERVATION_BATCH,
    MAX_RUN_COST, MIN_PRIORITY,
};
pub use tick_outcome::TickOutcome;
#[cfg(feature = "postgres")]
pub use worker::PgWorker;
pub use worker::{
    Worker, WorkerOptions, WorkerReport, DEFAULT_CONCURRENCY, DEFAULT_OUTAGE_BUDGET,
    MAX_CONCURRENCY, MAX_OUTAGE_BUDGET,
};

/// The README's library example, compiled as a doctest so it cannot rot.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
