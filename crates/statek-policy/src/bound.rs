//! [`TenantStarvationBound`]: the measured worst case wait of one tenant.

use crate::id::TenantId;

/// The starvation bound of one tenant: the largest number of consecutive
/// reservations, counting the one that selects the tenant, it can wait for
/// its next selection.
///
/// It is measured on the compiled cycle, never derived from a formula: it is
/// the largest circular distance between two consecutive picks of the tenant
/// (for a tenant picked once, the cycle length `L`). Starting from any
/// sequence, the tenant is selected within the next
/// [`maximum_reservations_until_selection`](Self::maximum_reservations_until_selection)
/// reservations.
///
/// The bound counts reservations (scheduling slots), not seconds: how long a
/// reservation takes depends on how fast replicas tick. It is a bound on
/// being offered a slot, not on a run being claimed or finished. It is never
/// below [`ideal_reservations_until_selection`](Self::ideal_reservations_until_selection)
/// (`ceil(L / weight)`) and, with either algorithm, can be above it.
///
/// ```
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let a = TenantId::try_from("tenant-a")?;
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(a.clone(), 3)?,
///      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
/// )?;
/// let bound = policy.starvation_bound(&a).expect("registered");
/// assert_eq!(bound.maximum_reservations_until_selection(), 2);
/// assert_eq!((bound.weight(), bound.cycle_length()), (3, 4));
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantStarvationBound {
    tenant: TenantId,
    weight: u32,
    cycle_length: u32,
    maximum_reservations_until_selection: u32,
}

impl TenantStarvationBound {
    /// Built only by the policy, from a measurement of its compiled cycle.
    pub(crate) fn new(
        tenant: TenantId,
        weight: u32,
        cycle_length: u32,
        maximum_reservations_until_selection: u32,
    ) -> Self {
        Self {
            tenant,
            weight,
            cycle_length,
            maximum_reservations_until_selection,
        }
    }

    /// The tenant the bound is for.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The tenant's weight: how many slots of every cycle it is picked in.
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The cycle length `L` in slots (the sum of all weights).
    #[must_use]
    pub fn cycle_length(&self) -> u32 {
        self.cycle_length
    }

    /// The largest number of consecutive reservations, counting the selecting
    /// one, between two selections of the tenant; in `1..=L`.
    ///
    /// A unit of reservations, not of time.
    #[must_use]
    pub fn maximum_reservations_until_selection(&self) -> u32 {
        self.maximum_reservations_until_selection
    }

    /// `ceil(L / weight)`: the smallest bound any cycle could give this
    /// tenant, since `weight` picks split the `L` slots of a cycle into
    /// `weight` gaps that add up to `L`.
    ///
    /// A reference to compare the measured
    /// [`maximum_reservations_until_selection`](Self::maximum_reservations_until_selection)
    /// with (their ratio is what `min-gap-v1` minimises), not a promise.
    #[must_use]
    pub fn ideal_reservations_until_selection(&self) -> u32 {
        self.cycle_length.div_ceil(self.weight.max(1))
    }
}
