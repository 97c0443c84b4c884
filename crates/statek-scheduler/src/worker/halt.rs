//! How a reservation error concerns a halted shard: a loss this store
//! found (and recorded), or a halt already in the database. A
//! [`crate::Worker`] stays up on either and re-checks.

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
        // Found now by this replica (a PostgreSQL store's re-check after a
        // failover), or recorded before (any source).
        SchedulerError::Source { source, .. }
            if source.kind() == statek_core::SourceErrorKind::ShardHalted =>
        {
            match source.downcast_ref::<statek_store_pg::StoreError>() {
                Some(statek_store_pg::StoreError::ReservationsLostInFailover(_)) => {
                    Some(Halt::Found)
                }
                _ => Some(Halt::Halted),
            }
        }
        _ => None,
    }
}
