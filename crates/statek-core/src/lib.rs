//! statek-core: the seam between statek's scheduler and what it drives.
//!
//! The values here cross between the scheduler (statek-scheduler), its
//! reservation sources (statek-store-pg's `PgStore`, the in-memory source)
//! and its executors, once, in one crate that depends on no database or
//! store crate:
//! - [`ReservationSource`]: where the scheduler reserves its slots, with
//!   [`SourceShard`] and [`Succession`], and its error [`SourceError`] (a
//!   [`SourceErrorKind`] the scheduler acts on, the source's own error
//!   inside);
//! - [`Reservation`]: one reserved sequence of a shard, and
//!   [`Registration`]: how binding a policy to its shard ended;
//! - [`SlotClass`] and [`SlotOutcomes`]: what each slot of a reserved range
//!   ended with, and [`SlotOutcomeAnswer`]: a source's answer to a record
//!   of them;
//! - [`check_cycle_digest`]: the one check of a shard's stored cycle
//!   digest against the cycle this build compiles;
//! - [`TenantExecutor`]: what runs behind a reserved slot, and the batch
//!   protocol it follows ([`SlotBatch`] with one owned ticket per slot,
//!   [`SlotTickets`], so every slot gets exactly one outcome; [`RunPool`];
//!   [`claim_and_run`] for executors that claim many slots at once);
//!   [`TenantTickOutcome`]: what it did with one slot; [`lease`]: keeping a
//!   claimed run's lease while its handler runs;
//! - [`RunNotifications`]: wake-ups of tenants whose runs became
//!   claimable, filled by a queue's listener through [`RunWakeups`];
//! - the limits every run queue shares ([`MAX_PAYLOAD_BYTES`],
//!   [`MAX_RESERVATION_BATCH`], ...) and what an enqueue answers
//!   ([`EnqueuedRun`]);
//! - [`Metric`] and [`MetricKind`]: the shape of the metric catalogue;
//! - [`Run`], [`RunHandler`] and [`RunError`]: what user code sees. A crate
//!   of handlers depends on this crate (and statek-policy) only, so its
//!   unit tests compile no PostgreSQL client.
//!
//! statek-scheduler re-exports all of them, so an application that uses
//! the scheduler never names this crate.

#![forbid(unsafe_code)]

mod batch;
#[cfg(test)]
mod batch_tests;
mod claim_run;
mod cycle_check;
mod executor;
mod handler;
pub mod lease;
mod metric;
mod notifications;
mod outcome;
mod queue;
mod registration;
mod reservation;
mod reservation_source;
mod slot;
mod source_error;
mod tickets;

pub use batch::{BatchParts, BatchSlot, BatchState, RunPermit, RunPool, SlotBatch, SlotReport};
pub use claim_run::{claim_and_run, SlotStart};
pub use cycle_check::{check_cycle_digest, CycleCheck, CycleMismatch};
pub use executor::{execute_each, TenantExecutor};
pub use handler::{charged_cost, Completed, Run, RunError, RunHandler, RunResult, MAX_RUN_COST};
pub use metric::{Metric, MetricKind};
pub use notifications::{run_notifications, RunNotifications, RunWakeups, BUFFERED_WAKEUPS};
pub use outcome::{ExecutedRun, TenantTickOutcome, Unclaimed};
pub use queue::{
    EnqueuedRun, MAX_ATTEMPTS_LIMIT, MAX_FINISH_BATCH, MAX_OUTCOME_RECORDS_PER_CALL,
    MAX_PAYLOAD_BYTES, MAX_PRIORITY, MAX_RESERVATION_BATCH, MIN_PRIORITY,
};
pub use registration::Registration;
pub use reservation::Reservation;
pub use reservation_source::{ReservationSource, SourceShard, Succession};
pub use slot::{SlotClass, SlotOutcomeAnswer, SlotOutcomes, SlotOutcomesRecorded};
pub use source_error::{SourceError, SourceErrorKind};
pub use tickets::{SlotRange, SlotTicket, SlotTickets};
