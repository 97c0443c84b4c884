//! PostgreSQL store for statek.
//!
//! statek schedules tenants in one durable, global, weighted order shared by
//! many scheduler replicas. This crate holds everything those replicas share
//! in PostgreSQL, and all of statek's SQL:
//!
//! - **migrations** of the `statek` schema, embedded from `/migrations` and
//!   applied by [`PgStore::migrate`] under an advisory lock;
//! - **policy registration**: [`PgStore::register`] binds a policy's
//!   canonical bytes to its shard forever ([`statek_core::Registration::Registered`] or
//!   [`statek_core::Registration::Idempotent`]; any difference is
//!   [`RolloutError::PolicyConflict`], nothing is overwritten);
//! - **reservations**: [`PgStore::reserve`] claims the next gapless sequence
//!   of a shard in one short transaction, idempotently by a client-made
//!   UUIDv7, so a retry after a lost commit acknowledgement gets the same
//!   sequence and slot; [`PgStore::reserve_batch`] claims `k` contiguous
//!   sequences in one statement, stored as one range row, and
//!   [`PgStore::reservations`] reads ranges back one reservation per
//!   sequence;
//! - **the run queue** behind the default tenant-isolated executor:
//!   [`PgStore::enqueue`], [`PgStore::claim_run`] (one tenant, `SKIP LOCKED`,
//!   leased with a fencing token), [`PgStore::claim_runs_for_slots`] (every
//!   slot of a reserved batch in one statement, each claim recorded with
//!   its slot in the claim history), [`PgStore::heartbeat_run`],
//!   [`PgStore::complete_run`], [`PgStore::fail_run`], and
//!   [`PgStore::finish_runs`] (up to [`MAX_FINISH_BATCH`](statek_core::MAX_FINISH_BATCH) completions and
//!   failures in one statement, each fenced, safe to retry), and
//!   [`PgStore::run_history`] (runs read back with their claim history);
//!   Runs carry a priority inside their tenant's queue
//!   ([`NewRun::priority`]); [`PgStore::enqueue_in`] and
//!   [`PgStore::enqueue_many_in`] enqueue in the caller's transaction
//!   (any `tokio_postgres::GenericClient`), [`PgStore::enqueue_many`] up
//!   to [`MAX_ENQUEUE_BATCH`](input_limits::MAX_ENQUEUE_BATCH) runs in one statement;
//! - **tenant limits**: [`PgStore::set_tenant_limits`] gives a tenant a
//!   concurrency cap and/or a rate limit ([`TenantLimits`],
//!   [`RateLimit`]), runtime settings checked inside every claim
//!   ([`SlotClaim::Limited`]);
//! - **operator view**: [`PgStore::list_runs`] (paged),
//!   [`PgStore::cancel_run`], [`PgStore::retry_run`],
//!   [`PgStore::count_runs`];
//! - **retention**: [`PgStore::prune_scheduler_fairness_reservations`]
//!   deletes the oldest reservation rows past a
//!   [`SchedulerFairnessRetentionPolicy`], in small batches by database time,
//!   per shard an unbroken prefix in sequence order (never a hole);
//!   [`PgStore::prune_finished_runs`] deletes finished runs past a
//!   [`RunRetentionPolicy`] the same way, never a live run nor claim
//!   history still inside the reservation retention window.
//!
//! - **roles**: [`PgStore::apply_role_profile`] grants a [`RoleProfile`]:
//!   an owner role for migrations, a runtime role for replicas (register,
//!   reserve, run queue; no deletes, no policy changes) and a retention role
//!   for pruning only.
//!
//! **Connections.** Every call runs on the pool under a response timeout
//! ([`StoreConfig::response_timeout`]; migrations, pruning and the role
//! profile under [`StoreConfig::maintenance_timeout`]): a silent connection
//! fails the call with the retryable [`ConnectionError::ResponseTimeout`] and is
//! discarded. Behind PgBouncer in transaction mode set
//! [`StoreConfig::transaction_pooling`]: statements are then sent unnamed,
//! no startup options are sent (the role carries `lock_timeout` and
//! `statement_timeout`, checked at [`PgStore::register`]), and `LISTEN` and
//! migrations use [`StoreConfig::direct_url`].
//! - **connections**: [`StoreConfig::from_url`] reads libpq URLs and
//!   `key=value` strings, TLS included (rustls): `sslmode` disable, prefer,
//!   require, verify-ca, verify-full ([`SslMode`]), `sslrootcert` (a file
//!   or `system`), `sslcert`/`sslkey`. Wrong settings, an untrusted or
//!   mismatched certificate ([`ConnectionError::Tls`] with a [`TlsFailure`]) and
//!   a server's refusal of the role, password or database
//!   ([`ConnectionError::Rejected`]) are
//!   [`StoreError::is_configuration`] and never retryable.
//!
//! Every read decodes fail-closed: stored policy bytes must decode strictly
//! and hash to the stored digest, cycle length, cursor and slots must agree,
//! else [`StoreError::CorruptData`]. Errors are one enum; ask
//! [`StoreError::is_retryable`] whether a retry may help.
//!
//! ```no_run
//! use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
//! use statek_store_pg::{PgStore, StoreConfig};
//! use uuid::Uuid;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::new(StoreConfig::from_url("postgres://statek@127.0.0.1/statek")?)?;
//! store.migrate().await?;
//! let policy = WeightedFairnessPolicy::new(
//!     SchedulerShardId::try_from("primary-v1")?,
//!     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
//!      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
//! )?;
//! store.register(&policy).await?;
//! let reservation = store.reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7()).await?;
//! let tenant = policy.tenant_for_slot(u64::from(reservation.slot()));
//! println!("sequence {} slot {} -> {:?}", reservation.sequence(), reservation.slot(), tenant);
//! # Ok(()) }
//! ```
//!
//! Retention: build a retention policy and prune one batch (the same code
//! builds as `crates/statek-examples/examples/prune.rs`):
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use statek_store_pg::{PgStore, SchedulerFairnessRetentionPolicy};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! # let store = PgStore::connect("postgres://statek_retention@127.0.0.1/statek")?;
//! let policy = SchedulerFairnessRetentionPolicy::new(
//!     Duration::from_secs(24 * 60 * 60),
//!     1_000,
//! )?;
//!
//! let report = store
//!     .prune_scheduler_fairness_reservations(policy)
//!     .await?;
//! # let _ = report;
//! # Ok(()) }
//! ```
//!
//! Features: `test-support` adds [`testing`], fixtures that create a fresh
//! migrated database per test on the server named by
//! `STATEK_TEST_DATABASE_URL`; `baseline` adds [`baseline`], the plain FIFO
//! `SKIP LOCKED` queue that the demo and the bench compare statek with
//! (the unfair comparison, not for production), and [`server_work`], the
//! database's work per run of each side of that comparison.

#![forbid(unsafe_code)]

mod acknowledged_log;
mod audit;
mod audit_chain;
#[cfg(feature = "baseline")]
pub mod baseline;
mod batch;
mod chain;
mod completion;
mod config;
mod conninfo;
mod cost_ledger;
mod durability;
mod durability_report;
pub mod error;
mod error_family;
mod failover;
mod halt;
mod limits;
mod lost_reservations;
mod metric;
mod migration;
mod notifications;
mod pooling;
mod reservation;
mod reservation_source;
mod retention;
mod roles;
mod rollout_preview;
mod run_history;
mod run_queue;
mod run_retention;
#[cfg(feature = "baseline")]
pub mod server_work;
mod shard;
mod shard_halt;
mod slot_outcomes;
mod statement;
mod store;
mod succession;
mod synchronous_standbys;
#[cfg(feature = "test-support")]
pub mod testing;
mod tls;

pub use audit::{
    AuditFinding, AuditOptions, AuditReport, ServiceGap, TenantAudit, TenantCostAudit,
    MAX_AUDIT_FINDINGS, MAX_AUDIT_HOLES,
};
pub use audit_chain::{RejoiningTenant, ScheduleAudit, SeamAudit, SeamTenantAudit};
pub use batch::ReservationBatch;
pub use completion::{FinishAs, FinishOutcome, FinishRun};
pub use config::{StoreConfig, DEFAULT_FAILOVER_RING};
pub use conninfo::SslMode;
pub use cost_ledger::CostBalance;
pub use durability_report::{
    DurabilityPolicy, DurabilityReport, DurabilityRisk, FailoverCondition, Standby,
    SynchronousCommit,
};
pub use error::{
    ConnectionError, DurabilityError, MigrationError, ReservationError, RolloutError,
    RunQueueError, StoreError, TlsFailure,
};
pub use limits::{RateLimit, StoredTenantLimits, TenantLimits};
pub use lost_reservations::{
    LossEvidence, LostReservation, LostReservationAction, LostReservations,
};
pub use migration::{embedded_migrations, MigrationReport};
pub use notifications::RUNS_CHANNEL;
pub use retention::{PruneReport, SchedulerFairnessRetentionPolicy};
pub use roles::RoleProfile;
pub use rollout_preview::RolloutPreview;
pub use run_history::{RunClaimRecord, RunRecord};
pub use run_queue::{
    ClaimOutcome, ClaimedRun, ExpiredRun, FailOutcome, NewRun, RescueOutcome, RunCounts, RunLease,
    RunListing, RunPage, RunState, SlotClaim, SlotClaimRequest,
};
pub use run_retention::{RunPruneReport, RunRetentionPolicy};
pub use shard::{ShardSeal, ShardStatus, StoredShard};
pub use shard_halt::{HaltCause, ReissuedRange, ShardHalt, ShardHalted, ShardResume};
pub use slot_outcomes::SlotOutcomeRecord;
pub use store::PgStore;
pub use succession::{Rollout, ShardSeam};
pub use synchronous_standbys::SynchronousStandbys;

/// The names of the metrics the store publishes (through the `metrics`
/// facade; statek-scheduler's catalogue lists them with their labels),
/// and [`STORE_METRICS`](metric_names::STORE_METRICS), their catalogue.
pub mod metric_names {
    pub use crate::durability::DURABILITY_RISK;
    pub use crate::failover::{RESERVATIONS_LOST_TOTAL, TIMELINE_CHANGES_TOTAL};
    pub use crate::halt::SHARD_HALTED;
    pub use crate::metric::STORE_METRICS;
    pub use crate::retention::{
        PRUNE_BATCH_DURATION_SECONDS, PRUNE_CUTOFF_TIMESTAMP_SECONDS, PRUNE_DELETED_TOTAL,
    };
    pub use crate::run_retention::RUNS_PRUNED_TOTAL;
}

/// The largest (and smallest) values the store accepts, each checked
/// before anything is written (a value outside is a typed error, nothing
/// changed); where the database checks the same bound, a tidy test keeps
/// the two equal. The limits every run queue shares (payload size,
/// attempts, priorities, reservation batches) are statek-core's.
pub mod input_limits {
    pub use crate::limits::{MAX_RATE_CLAIMS, MAX_RATE_WINDOW, MAX_RUNNING_LIMIT, MIN_RATE_WINDOW};
    pub use crate::retention::{MAX_PRUNE_BATCH, MAX_RETENTION, MIN_RETENTION};
    pub use crate::run_history::MAX_RUN_HISTORY_BATCH;
    pub use crate::run_queue::{
        MAX_CLAIM_SLOTS, MAX_ENQUEUE_BATCH, MAX_ENQUEUE_BATCH_BYTES, MAX_IDEMPOTENCY_KEY_LENGTH,
        MAX_LIST_LIMIT,
    };
    pub use crate::slot_outcomes::{MAX_OUTCOME_RUNS, MAX_SLOT_OUTCOME_RECORDS};
}
