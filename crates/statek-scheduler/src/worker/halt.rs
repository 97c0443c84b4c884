//! How a reservation error concerns a halted shard: a loss this store
//! found (and recorded), or a halt already in the database. A
//! [`crate::Worker`] stays up on either and re-checks.

use statek_core::SourceErrorKind;

use crate::error::SchedulerError;

/// How a reservation error concerns a halt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Halt {
    /// This store found acknowledged reservations lost (and recorded them).
    Found,
    /// The shard is halted in the database.
    Halted,
}

pub(crate) fn halt_of(e: &SchedulerError) -> Option<Halt> {
    match e {
        // Found now by this replica, or recorded before.
        SchedulerError::Source { source, .. } => match source.kind() {
            SourceErrorKind::ReservationsLost => Some(Halt::Found),
            SourceErrorKind::ShardHalted => Some(Halt::Halted),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use statek_core::SourceError;

    use super::*;

    fn source(kind: SourceErrorKind) -> SchedulerError {
        SchedulerError::Source {
            source: SourceError::new(kind, "from the source"),
            retries: 0,
        }
    }

    #[test]
    fn a_halt_is_read_from_the_source_errors_kind() {
        assert_eq!(
            halt_of(&source(SourceErrorKind::ReservationsLost)),
            Some(Halt::Found)
        );
        assert_eq!(
            halt_of(&source(SourceErrorKind::ShardHalted)),
            Some(Halt::Halted)
        );
        assert_eq!(halt_of(&source(SourceErrorKind::Transient)), None);
        assert_eq!(halt_of(&source(SourceErrorKind::ShardSealed)), None);
        assert_eq!(halt_of(&SchedulerError::ShuttingDown), None);
    }
}
