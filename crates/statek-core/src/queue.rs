//! What every statek run queue shares, whatever holds it: the limits of a
//! run and of a reservation batch, and what an enqueue answers
//! ([`EnqueuedRun`]). statek-store-pg's PostgreSQL queue enforces them (its
//! tables' CHECK constraints and functions keep the same numbers), and the
//! in-memory queue of statek-testing does the same.

use std::time::SystemTime;

use uuid::Uuid;

/// The largest batch a [`crate::ReservationSource::reserve_batch`] takes,
/// in reservations (PostgreSQL: one range row of at most this many
/// sequences; `statek.reserve_batch` refuses more).
pub const MAX_RESERVATION_BATCH: u32 = 4096;

/// The most records one [`crate::ReservationSource::record_slot_outcomes`]
/// call carries (PostgreSQL: `PgStore::record_slot_outcome_ranges`
/// refuses more); the scheduler sends at most this many at once.
pub const MAX_OUTCOME_RECORDS_PER_CALL: usize = 1024;

/// The largest number of finished runs one completion call records
/// (PostgreSQL: one `statek.finish_runs` statement); an executor's
/// completion batch is at most this.
pub const MAX_FINISH_BATCH: usize = 1024;

/// Largest accepted payload of a run: 1 MiB.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Largest accepted `max_attempts` of a run.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;

/// Lowest run priority.
pub const MIN_PRIORITY: i32 = -100;

/// Highest run priority.
pub const MAX_PRIORITY: i32 = 100;

/// A run accepted into a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedRun {
    /// The run id (UUIDv7).
    pub run_id: Uuid,
    /// Queue time of the insert (PostgreSQL: database time).
    pub enqueued_at: SystemTime,
    /// Queue time from which the run may be claimable.
    pub available_at: SystemTime,
    /// True when the idempotency key named an existing run, which is
    /// returned instead of a new one.
    pub deduplicated: bool,
}
