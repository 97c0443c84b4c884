//! The scheduler's one error type.

use statek_core::{CycleMismatch, SourceError, SourceErrorKind};
use statek_policy::TenantId;
#[cfg(feature = "postgres")]
use statek_store_pg::StoreError;

/// Everything that can go wrong in `statek-scheduler`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The reservation source failed (after the configured retries, for
    /// reservations): registration (a policy conflict), a reservation, a
    /// seal's successor, the durability check before a Worker starts.
    /// Its [`SourceError::kind`] says what it means; with a `PgStore` the
    /// `StoreError` is inside ([`SourceError::downcast_ref`]).
    #[error("reservation source failed ({retries} retries)")]
    Source {
        /// The source's error.
        #[source]
        source: SourceError,
        /// Retries made before giving up (0 when not retried).
        retries: u32,
    },
    /// A store operation of the PostgreSQL executor failed (claims,
    /// finishes, heartbeats; feature `postgres`).
    #[cfg(feature = "postgres")]
    #[error("store operation failed ({retries} retries)")]
    Store {
        /// The store error.
        #[source]
        source: StoreError,
        /// Retries made before giving up (0 when not retried).
        retries: u32,
    },
    /// The policy stored for the shard is not the one this scheduler runs.
    ///
    /// A check in depth, not a path a correct deployment takes: a policy
    /// whose bytes differ at registration fails there as the store's
    /// `PolicyConflict`, and the read-back decodes fail-closed. `register`
    /// returns this only if the shard row changed between registration and
    /// read-back (the database's triggers refuse that to every role; an
    /// owner who disables them could) or canonical decoding stopped
    /// round-tripping. Kept so that such a replica refuses to tick.
    #[error("shard {shard} holds another policy than this scheduler's: refusing to tick")]
    PolicyMismatch {
        /// The shard.
        shard: String,
    },
    /// The shard stores the digest of another cycle than this replica
    /// compiled from the same policy (another build of the algorithm, or
    /// tampered data): ticking would map slots to other tenants than the
    /// replicas that registered it. Nothing was reserved. The mismatch
    /// (shard, stored and local digests) is statek-core's
    /// [`CycleMismatch`], the one the CLI's `register` and `policy verify`
    /// report too.
    #[error("{0}: refusing to tick")]
    CycleMismatch(#[from] CycleMismatch),
    /// The policy shares cost (`[fairness] unit = "cost"`) and the
    /// executor keeps no cost ledger
    /// ([`TenantExecutor::enforces_cost_fairness`](statek_core::TenantExecutor::enforces_cost_fairness)
    /// is false, a custom executor's default): ticking it
    /// would share slots while the policy promises cost. Nothing was
    /// registered or reserved.
    #[error(
        "shard {shard}: cost fairness is not supported by this executor \
         (policies with [fairness] unit = \"cost\" compile, but only an executor that keeps the cost ledger \
         runs them: PgRunQueueExecutor and statek-testing's InMemoryExecutor do)"
    )]
    UnsupportedFairness {
        /// The shard.
        shard: String,
    },
    /// Shutdown was requested before a slot was reserved; nothing was
    /// reserved.
    #[error("shutting down: no slot reserved")]
    ShuttingDown,
    /// An option was out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A reserved slot does not map to a tenant of the local policy.
    #[error("slot {slot} of sequence {sequence} is outside the local cycle")]
    SlotOutOfRange {
        /// The reservation's sequence.
        sequence: u64,
        /// The reservation's slot.
        slot: u32,
    },
    /// The tenant executor failed for a reserved slot. The slot stays
    /// consumed: it is never handed to another tenant or rolled back.
    #[error("executor for tenant {tenant} at sequence {sequence} failed")]
    Executor {
        /// The sequence whose slot was consumed.
        sequence: u64,
        /// The tenant the slot belonged to.
        tenant: TenantId,
        /// Whether retrying later may help.
        retryable: bool,
        /// The executor's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl SchedulerError {
    /// True for transient conditions: a later tick may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SchedulerError::Source { source, .. } => source.is_retryable(),
            #[cfg(feature = "postgres")]
            SchedulerError::Store { source, .. } => source.is_retryable(),
            SchedulerError::Executor { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The source's reservations failed a check of the scheduler's own
    /// (they disagree with the local cycle, or a chain of seals does not
    /// end): a [`SourceErrorKind::Corrupt`] source error, after `retries`.
    pub(crate) fn corrupt(what: &'static str, detail: String, retries: u32) -> Self {
        SchedulerError::Source {
            source: SourceError::new(
                SourceErrorKind::Corrupt,
                format!("corrupt data in {what}: {detail}"),
            ),
            retries,
        }
    }
}

impl From<SourceError> for SchedulerError {
    fn from(source: SourceError) -> Self {
        SchedulerError::Source { source, retries: 0 }
    }
}

#[cfg(feature = "postgres")]
impl From<StoreError> for SchedulerError {
    fn from(source: StoreError) -> Self {
        SchedulerError::Store { source, retries: 0 }
    }
}

/// An error and all its sources, `: `-separated, for log lines.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
