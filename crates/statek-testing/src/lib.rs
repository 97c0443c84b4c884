//! statek-testing: test doubles and conformance suites for code built on
//! statek, with no database.
//!
//! - [`InMemoryReservations`]: a [`ReservationSource`](statek_core::ReservationSource)
//!   in one process (contiguous, idempotent by id, seals and successors),
//!   its errors [`MemoryError`]s with the kinds `PgStore` gives the same
//!   failures;
//! - [`InMemoryExecutor`]: a [`TenantExecutor`](statek_core::TenantExecutor)
//!   on an in-process queue with the PostgreSQL queue's semantics (FIFO
//!   per tenant, priorities, leases, retries with backoff, limits), for
//!   unit tests of your handlers and of code around a scheduler;
//! - [`source_conformance`]: the behaviour suite every reservation source
//!   must pass. It runs against statek-store-pg's `PgStore` (in that
//!   crate's tests) and against [`InMemoryReservations`] (in this one's),
//!   and against a source of your own;
//! - [`executor_conformance`]: the behaviour suite every executor must
//!   pass, run against statek-scheduler's `PgRunQueueExecutor` and
//!   [`InMemoryExecutor`] (in statek-scheduler's tests), and against an
//!   executor of your own.
//!
//! [`policy`] builds a test policy in one line.
//!
//! Add it as a dev-dependency. It links statek-scheduler without its
//! feature `postgres`, so a crate of run handlers that depends on
//! statek-core (for `RunHandler`) and dev-depends on this crate compiles no
//! PostgreSQL client (statek-example-handlers in statek's repository is
//! one; `cargo xtask arch-check` holds it).

#![forbid(unsafe_code)]

pub mod executor_conformance;
mod harness;
mod memory_error;
mod memory_executor;
mod memory_queue;
mod memory_reservations;
pub mod source_conformance;

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};

pub use memory_error::MemoryError;
pub use memory_executor::{
    InMemoryExecutor, InMemoryExecutorOptions, MemoryRunLock, MemoryRunState, MemoryRunStatus,
};
pub use memory_reservations::InMemoryReservations;

/// A policy of `shard` with the given tenants and integer weights, in that
/// order, for tests: `policy("primary-v1", &[("tenant-a", 3), ("tenant-b",
/// 1)])`.
///
/// # Panics
/// On an id or weight the policy refuses (a test's own typo).
#[allow(clippy::expect_used)]
pub fn policy(shard: &str, weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from(shard).expect("a valid shard id"),
        weights.iter().map(|(tenant, weight)| {
            TenantFairnessWeight::new(
                TenantId::try_from(*tenant).expect("a valid tenant id"),
                *weight,
            )
            .expect("a weight in 1..=1024")
        }),
    )
    .expect("a valid policy")
}
