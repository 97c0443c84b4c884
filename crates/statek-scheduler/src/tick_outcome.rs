//! [`TickOutcome`], what one tick did, and the fail-closed mapping of a
//! reserved slot to its tenant and bound that every tick and batch uses.

use statek_core::{Reservation, TenantTickOutcome};
use statek_policy::{TenantId, TenantStarvationBound, WeightedFairnessPolicy};

use crate::error::SchedulerError;

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickOutcome {
    pub(crate) reservation: Reservation,
    pub(crate) tenant: TenantId,
    pub(crate) starvation_bound: TenantStarvationBound,
    pub(crate) retries: u32,
    pub(crate) tenant_outcome: TenantTickOutcome,
}

impl TickOutcome {
    /// The reservation (id, sequence, slot, reserved_at) this tick consumed.
    pub fn reservation(&self) -> &Reservation {
        &self.reservation
    }

    /// The tenant the slot belongs to.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The tenant's starvation bound under the shard's policy (reservations).
    pub fn starvation_bound(&self) -> &TenantStarvationBound {
        &self.starvation_bound
    }

    /// Reservation retries after transient store errors (0 when the first
    /// attempt succeeded).
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// What the tenant's executor did with the slot.
    pub fn tenant_outcome(&self) -> &TenantTickOutcome {
        &self.tenant_outcome
    }
}

/// The tenant and bound of a slot reserved on `policy`'s shard, after
/// checking, fail-closed, that the reservation agrees with the local
/// cycle: the policy's one mapping ([`WeightedFairnessPolicy::pick`])
/// gives the slot, the tenant index stored in the cycle, and the bound by
/// that index.
pub(crate) fn tenant_of(
    policy: &WeightedFairnessPolicy,
    reservation: &Reservation,
    retries: u32,
) -> Result<(TenantId, TenantStarvationBound), SchedulerError> {
    let sequence = reservation.sequence();
    let slot = reservation.slot();
    let local_length = policy.cycle_length();
    let pick = policy
        .pick(sequence)
        .ok_or(SchedulerError::SlotOutOfRange { sequence, slot })?;
    if reservation.shard() != policy.shard_id()
        || reservation.cycle_length() != local_length
        || slot != pick.slot()
    {
        // Fail closed: never run a tenant for a slot the local cycle
        // does not agree with.
        return Err(SchedulerError::corrupt(
            "reservation",
            format!(
                "sequence {sequence} slot {slot} under stored L = {} disagrees with the local cycle L = {local_length}",
                reservation.cycle_length()
            ),
            retries,
        ));
    }
    let bound = policy
        .starvation_bound_at(pick.tenant_index())
        .ok_or(SchedulerError::SlotOutOfRange { sequence, slot })?;
    Ok((pick.tenant().clone(), bound))
}
