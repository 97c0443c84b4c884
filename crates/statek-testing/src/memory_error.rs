//! [`MemoryError`]: why the in-memory reservation source refused a call,
//! each with the [`SourceErrorKind`] the scheduler acts on, as
//! statek-store-pg's `PgStore` answers the same calls.

use statek_core::{SourceError, SourceErrorKind};
use statek_policy::{PolicyDigest, SchedulerShardId};
use uuid::Uuid;

/// Why an [`crate::InMemoryReservations`] call failed. It reaches the
/// scheduler inside a [`SourceError`] (its [`kind`](Self::kind) outside,
/// this error as the cause: `error.downcast_ref::<MemoryError>()`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The shard is not registered.
    #[error("shard {shard} is not registered")]
    UnknownShard {
        /// The shard named.
        shard: SchedulerShardId,
    },
    /// The shard holds other canonical policy bytes.
    #[error("shard {shard} holds another policy (stored digest {stored}, offered {offered})")]
    PolicyConflict {
        /// The shard.
        shard: SchedulerShardId,
        /// The digest of the stored policy.
        stored: PolicyDigest,
        /// The digest of the offered policy.
        offered: PolicyDigest,
    },
    /// A reservation named another policy digest than the shard's.
    #[error("shard {shard} is bound to policy digest {stored}, the reservation named {offered}")]
    PolicyDigestMismatch {
        /// The shard.
        shard: SchedulerShardId,
        /// The digest of the stored policy.
        stored: PolicyDigest,
        /// The digest the reservation named.
        offered: PolicyDigest,
    },
    /// The shard is sealed: nothing was reserved.
    #[error(
        "shard {shard} is sealed at sequence {sealed_at_sequence}; its successor is {successor}"
    )]
    ShardSealed {
        /// The sealed shard.
        shard: SchedulerShardId,
        /// Its cursor at the seal.
        sealed_at_sequence: u64,
        /// The shard that goes on.
        successor: SchedulerShardId,
    },
    /// A reservation id already used with other arguments.
    #[error(
        "reservation id {reservation_id} was used with another shard, policy digest or as a batch"
    )]
    ReservationConflict {
        /// The id.
        reservation_id: Uuid,
    },
    /// A batch id already used with other arguments.
    #[error("batch id {batch_id} was used with {detail}")]
    BatchConflict {
        /// The id.
        batch_id: Uuid,
        /// What differed.
        detail: String,
    },
    /// The shard's sequences would pass the largest (`i64::MAX`).
    #[error("shard {shard} has no sequence left")]
    SequenceExhausted {
        /// The shard.
        shard: SchedulerShardId,
    },
    /// An argument out of range (an id that is not a UUIDv7, a batch size,
    /// a seal of a sealed shard).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl MemoryError {
    /// What the failure means to the scheduler, as `PgStore` says it for
    /// the same failure.
    pub fn kind(&self) -> SourceErrorKind {
        match self {
            MemoryError::UnknownShard { .. } => SourceErrorKind::UnknownShard,
            MemoryError::PolicyConflict { .. } | MemoryError::PolicyDigestMismatch { .. } => {
                SourceErrorKind::PolicyConflict
            }
            MemoryError::ShardSealed { .. } => SourceErrorKind::ShardSealed,
            MemoryError::ReservationConflict { .. } | MemoryError::BatchConflict { .. } => {
                SourceErrorKind::IdConflict
            }
            MemoryError::SequenceExhausted { .. } => SourceErrorKind::SequenceExhausted,
            MemoryError::InvalidArgument(_) => SourceErrorKind::InvalidArgument,
        }
    }
}

impl From<MemoryError> for SourceError {
    fn from(error: MemoryError) -> Self {
        SourceError::new(error.kind(), error)
    }
}
