//! A reserved batch on its way through the scheduler's runner: the
//! reservations and pool it runs with ([`ReservedBatch`]) and where its
//! results go ([`BatchHooks`]).

use statek_core::{Reservation, RunPool, TenantTickOutcome};
use statek_policy::WeightedFairnessPolicy;
use tokio_util::sync::CancellationToken;

use crate::error::SchedulerError;
use crate::tick_outcome::TickOutcome;

/// A batch reserved on `policy`'s shard, ready to run: its reservations in
/// sequence order, the reservation's retries (kept in errors), and the
/// pool whose permits its claims take.
pub(crate) struct ReservedBatch<'a> {
    pub(crate) policy: &'a WeightedFairnessPolicy,
    pub(crate) reservations: Vec<Reservation>,
    pub(crate) retries: u32,
    pub(crate) pool: &'a RunPool,
}

/// Where a running batch's results go, and what stops it: `stop` ends
/// claiming (the slots left are decided without a run), `cancel` cancels
/// the handlers; `sink` hears one result per slot, by index in the batch
/// (or `unclaimed` a count for a range decided alike without a claim),
/// and `on_decided` the number of slots decided each time it grows.
pub(crate) struct BatchHooks<'a> {
    pub(crate) stop: &'a CancellationToken,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) sink: &'a (dyn Fn(usize, Result<TickOutcome, SchedulerError>) + Send + Sync),
    /// Hears slots decided alike without a claim as one count and
    /// outcome (they still count per tenant in the metrics); `None`:
    /// `sink` hears each of them.
    pub(crate) unclaimed: Option<&'a UnclaimedSink<'a>>,
    pub(crate) on_decided: &'a (dyn Fn(usize) + Send + Sync),
}

/// Hears a count of slots decided alike without a claim, and their
/// outcome.
pub(crate) type UnclaimedSink<'a> = dyn Fn(usize, &TenantTickOutcome) + Send + Sync + 'a;
