//! The run queue's values: a run to enqueue ([`NewRun`]) and what
//! enqueue, claim, fail and the expiry pass answer (`run_queue.rs` runs
//! the statements).

use crate::RunQueueError;
use std::time::{Duration, SystemTime};

use statek_core::{MAX_ATTEMPTS_LIMIT, MAX_PAYLOAD_BYTES, MAX_PRIORITY, MIN_PRIORITY};
use statek_policy::TenantId;
use uuid::Uuid;

use crate::StoreError;

/// The longest idempotency key of a run, in bytes (migration V3's CHECK
/// keeps the same number).
pub const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 256;

/// A run to enqueue for one tenant.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub(crate) tenant: TenantId,
    pub(crate) payload: Vec<u8>,
    pub(crate) max_attempts: u32,
    pub(crate) delay: Duration,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) priority: i32,
}

impl NewRun {
    /// A run for `tenant` with an opaque payload (at most
    /// [`MAX_PAYLOAD_BYTES`]), 5 attempts at most, available at once.
    pub fn new(tenant: TenantId, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            tenant,
            payload: payload.into(),
            max_attempts: 5,
            delay: Duration::ZERO,
            idempotency_key: None,
            priority: 0,
        }
    }

    /// The run's priority inside its tenant's queue,
    /// [`MIN_PRIORITY`]..=[`MAX_PRIORITY`] (default 0): a claim takes the
    /// tenant's highest priority first, FIFO within one priority. It never
    /// crosses tenants: a slot of another tenant is never given to it.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// An idempotency key (1..=256 bytes), unique per tenant: enqueueing
    /// again with the same key and payload returns the existing run instead
    /// of adding one.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Total executions allowed before the run is `failed` (1..=1000).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Makes the run available only after `delay` (database clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Checks every limit of the run before anything is sent.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(StoreError::InvalidArgument(format!(
                "payload is {} bytes, the limit is {MAX_PAYLOAD_BYTES}",
                self.payload.len()
            )));
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&self.max_attempts) {
            return Err(StoreError::InvalidArgument(format!(
                "max_attempts must be 1..={MAX_ATTEMPTS_LIMIT}, got {}",
                self.max_attempts
            )));
        }
        if self.delay > Duration::from_secs(366 * 86_400) {
            return Err(StoreError::InvalidArgument(format!(
                "delay must be at most 366 days, got {:?}",
                self.delay
            )));
        }
        if let Some(key) = &self.idempotency_key {
            if !(1..=MAX_IDEMPOTENCY_KEY_LENGTH).contains(&key.len()) {
                return Err(StoreError::InvalidArgument(format!(
                    "idempotency key must be 1..={MAX_IDEMPOTENCY_KEY_LENGTH} bytes, got {}",
                    key.len()
                )));
            }
        }
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&self.priority) {
            return Err(StoreError::RunQueue(RunQueueError::InvalidPriority {
                priority: self.priority,
                min: MIN_PRIORITY,
                max: MAX_PRIORITY,
            }));
        }
        Ok(())
    }
}

/// A run whose lease had expired when the expiry pass read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiredRun {
    /// The run and the token it was running under.
    pub lease: RunLease,
}

/// What the expiry pass did with one expired run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescueOutcome {
    /// Put back: claimable again (its next claim raises the attempt).
    Requeued,
    /// It had used its last attempt: now `failed`.
    Failed,
    /// Nothing changed: the run finished, was heartbeated or re-claimed
    /// after it was read.
    Unchanged,
}

/// Proof of holding a run's lease: presented to heartbeat, complete and fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLease {
    pub(crate) run_id: Uuid,
    pub(crate) token: Uuid,
}

impl RunLease {
    /// The run.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// The fencing token issued by the claim.
    pub fn token(&self) -> Uuid {
        self.token
    }
}

/// A run claimed for execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRun {
    /// The tenant it belongs to.
    pub tenant: TenantId,
    /// The payload given at enqueue.
    pub payload: Vec<u8>,
    /// 1 on the first execution, raised by every claim.
    pub attempt: u32,
    /// Executions allowed in total.
    pub max_attempts: u32,
    /// Database time of the enqueue.
    pub enqueued_at: SystemTime,
    /// Database time from which the run was claimable.
    pub available_at: SystemTime,
    /// Database time of this claim.
    pub claimed_at: SystemTime,
    /// Database time at which the lease expires unless extended.
    pub lease_expires_at: SystemTime,
    /// The lease to present for heartbeat, complete and fail.
    pub lease: RunLease,
}

/// The run as its handler sees it (database times); the fencing token
/// stays with the lease, which the executor keeps.
impl From<ClaimedRun> for statek_core::Run {
    fn from(claimed: ClaimedRun) -> Self {
        statek_core::Run::new(
            claimed.lease.run_id(),
            claimed.tenant,
            claimed.payload,
            claimed.attempt,
            claimed.max_attempts,
            claimed.enqueued_at,
            claimed.available_at,
            claimed.claimed_at,
            claimed.lease_expires_at,
        )
    }
}

/// The result of [`PgStore::claim_run`](crate::PgStore::claim_run).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimOutcome {
    /// A run was claimed.
    Claimed(Box<ClaimedRun>),
    /// Claimable runs exist but all were locked by other claimers.
    Contended,
    /// The tenant has no claimable run.
    Idle,
    /// Claimable runs exist, but the tenant's concurrency cap or rate
    /// limit lets it start none now.
    Limited,
}

/// The result of [`PgStore::fail_run`](crate::PgStore::fail_run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// The run will be claimable again at this database time.
    Retrying {
        /// When it becomes available.
        available_at: SystemTime,
    },
    /// The run used its last attempt and is now `failed`.
    Failed,
}
