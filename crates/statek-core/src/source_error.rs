//! [`SourceError`]: a reservation source's failure, as the scheduler acts
//! on it: a [`SourceErrorKind`] and the source's own error inside, as its
//! cause, so that the scheduler needs no store's error type and an
//! operator tool still reaches the typed original (walking the error's
//! causes, or [`SourceError::downcast_ref`]).

use std::error::Error;
use std::fmt;

/// What a reservation source's failure means to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceErrorKind {
    /// Transient (a lost connection, a timeout, a serialization failure, a
    /// server starting or stopping): the same call with the same id may
    /// succeed, and the scheduler retries it.
    Transient,
    /// No shard of that id is registered.
    UnknownShard,
    /// The shard is sealed (a rollout moved its schedule on): nothing was
    /// reserved; the scheduler follows the seal to the successor.
    ShardSealed,
    /// The shard is halted (reservations acknowledged before a failover
    /// were lost, or could not be checked): nothing is reserved until an
    /// owner resumes it.
    ShardHalted,
    /// This call found reservations the source had acknowledged lost (a
    /// failover to a standby that lacked them) and halted the shard:
    /// nothing is reserved until an owner resumes it, as for
    /// [`ShardHalted`](Self::ShardHalted).
    ReservationsLost,
    /// The shard holds another policy (other canonical bytes, or another
    /// digest) than the caller's.
    PolicyConflict,
    /// A reservation or batch id already used with other arguments.
    IdConflict,
    /// The shard's sequence space is used up.
    SequenceExhausted,
    /// The source refused to reserve on a server that does not keep its
    /// reservations through a crash or a failover (its durability check).
    DurabilityRefused,
    /// An argument out of range (a batch larger than the source takes).
    InvalidArgument,
    /// Stored data failed a check: the scheduler stops rather than guess.
    Corrupt,
    /// Anything else, permanent.
    Other,
}

impl SourceErrorKind {
    /// The kind in words, for messages.
    pub const fn describe(self) -> &'static str {
        match self {
            SourceErrorKind::Transient => "transient",
            SourceErrorKind::UnknownShard => "unknown shard",
            SourceErrorKind::ShardSealed => "shard sealed",
            SourceErrorKind::ShardHalted => "shard halted",
            SourceErrorKind::ReservationsLost => "acknowledged reservations lost",
            SourceErrorKind::PolicyConflict => "policy conflict",
            SourceErrorKind::IdConflict => "id conflict",
            SourceErrorKind::SequenceExhausted => "sequence exhausted",
            SourceErrorKind::DurabilityRefused => "durability refused",
            SourceErrorKind::InvalidArgument => "invalid argument",
            SourceErrorKind::Corrupt => "corrupt data",
            SourceErrorKind::Other => "other",
        }
    }
}

/// A reservation source's failure: its [`kind`](Self::kind), shown as its
/// text ("shard halted"), and the source's own error as its cause
/// ([`Error::source`]).
pub struct SourceError {
    kind: SourceErrorKind,
    error: Box<dyn Error + Send + Sync>,
}

impl SourceError {
    /// A failure of `kind`, carrying `error` (the source's own error, or a
    /// message).
    pub fn new(kind: SourceErrorKind, error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            kind,
            error: error.into(),
        }
    }

    /// What the failure means to the scheduler.
    pub fn kind(&self) -> SourceErrorKind {
        self.kind
    }

    /// Whether the same call (with the same id) may succeed:
    /// [`SourceErrorKind::Transient`].
    pub fn is_retryable(&self) -> bool {
        self.kind == SourceErrorKind::Transient
    }

    /// Whether the source holds something else under the same name: a
    /// [`SourceErrorKind::PolicyConflict`] or
    /// [`SourceErrorKind::IdConflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(
            self.kind,
            SourceErrorKind::PolicyConflict | SourceErrorKind::IdConflict
        )
    }

    /// Whether stored data failed a check: [`SourceErrorKind::Corrupt`].
    pub fn is_corrupt(&self) -> bool {
        self.kind == SourceErrorKind::Corrupt
    }

    /// The source's own error.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The source's own error, taken out.
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync> {
        self.error
    }

    /// The source's own error as `E`, if it is one (statek-cli reads
    /// statek-store-pg's `StoreError` this way to choose its exit code).
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref::<E>()
    }
}

impl fmt::Debug for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// The kind in words; the source's own error is the cause.
impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.describe())
    }
}

/// The cause is the source's own error.
impl Error for SourceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("the store said no")]
    struct StoreSaid(#[source] std::io::Error);

    #[test]
    fn the_kind_decides_and_the_sources_error_shows() {
        let error = SourceError::new(
            SourceErrorKind::Transient,
            StoreSaid(std::io::Error::other("connection reset")),
        );
        assert!(error.is_retryable());
        assert!(!error.is_conflict() && !error.is_corrupt());
        assert_eq!(error.to_string(), "transient");
        let cause = error.source().unwrap_or_else(|| panic!("no cause"));
        assert_eq!(cause.to_string(), "the store said no");
        assert!(cause.downcast_ref::<StoreSaid>().is_some());
        assert_eq!(
            cause.source().map(ToString::to_string).as_deref(),
            Some("connection reset")
        );
        assert!(error.downcast_ref::<StoreSaid>().is_some());
        assert!(error.downcast_ref::<std::io::Error>().is_none());

        let conflict =
            SourceError::new(SourceErrorKind::IdConflict, "id used with other arguments");
        assert!(conflict.is_conflict() && !conflict.is_retryable());
        assert_eq!(conflict.to_string(), "id conflict");
        assert_eq!(
            conflict.into_inner().to_string(),
            "id used with other arguments"
        );
        let corrupt = SourceError::new(SourceErrorKind::Corrupt, "bad row");
        assert!(corrupt.is_corrupt());
    }
}
