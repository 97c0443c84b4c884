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
        SchedulerError::Store {
            source: statek_store_pg::StoreError::ReservationsLostInFailover(_),
            ..
        } => Some(Halt::Found),
        SchedulerError::Store {
            source: statek_store_pg::StoreError::ShardHalted(_),
            ..
        } => Some(Halt::Halted),
        _ => None,
    }
}
