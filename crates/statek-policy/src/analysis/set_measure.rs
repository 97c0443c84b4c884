//! [`SetMeasure`]: how far one policy's bounds are from the ideal, by ratio
//! and in slots.

use crate::policy::WeightedFairnessPolicy;
use crate::ratio::BoundRatio;

/// The largest ratio, the largest additive excess and whether every tenant
/// is within one slot of its ideal `ceil(L / w)`, over one policy's tenants.
///
/// ```
/// use statek_policy::analysis::{BoundRatio, SetMeasure};
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let tenants = [("a", 5), ("b", 2), ("c", 1)]
///     .map(|(id, w)| TenantFairnessWeight::new(TenantId::try_from(id).unwrap(), w).unwrap());
/// let policy = WeightedFairnessPolicy::new(SchedulerShardId::try_from("s")?, tenants)?;
/// // swrr-v1: a b a a c a b a; b waits 5 against ceil(8 / 2) = 4.
/// let measure = SetMeasure::of(&policy);
/// assert_eq!(measure.largest_ratio(), BoundRatio::new(5, 4));
/// assert_eq!((measure.largest_excess(), measure.within_one_slot()), (1, true));
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMeasure {
    largest_ratio: BoundRatio,
    largest_ratio_tenant: usize,
    largest_excess: u32,
}

impl SetMeasure {
    /// Measures `policy`'s compiled bounds.
    #[must_use]
    pub fn of(policy: &WeightedFairnessPolicy) -> Self {
        let mut measure = SetMeasure {
            largest_ratio: BoundRatio::new(0, 1),
            largest_ratio_tenant: 0,
            largest_excess: 0,
        };
        for (index, bound) in policy.starvation_bounds().enumerate() {
            let ratio = BoundRatio::new(
                bound.maximum_reservations_until_selection(),
                bound.ideal_reservations_until_selection(),
            );
            if measure.largest_ratio.is_below(ratio) {
                measure.largest_ratio = ratio;
                measure.largest_ratio_tenant = index;
            }
            measure.largest_excess = measure.largest_excess.max(ratio.excess());
        }
        measure
    }

    /// The largest ratio of bound to `ceil(L / w)` over the tenants (the
    /// first tenant's in index order on a tie by value).
    #[must_use]
    pub fn largest_ratio(&self) -> BoundRatio {
        self.largest_ratio
    }

    /// The tenant index with the [largest ratio](Self::largest_ratio).
    #[must_use]
    pub fn largest_ratio_tenant(&self) -> usize {
        self.largest_ratio_tenant
    }

    /// The largest `bound − ceil(L / w)` over the tenants, in slots.
    #[must_use]
    pub fn largest_excess(&self) -> u32 {
        self.largest_excess
    }

    /// Whether every tenant's bound is at most `ceil(L / w) + 1`.
    #[must_use]
    pub fn within_one_slot(&self) -> bool {
        self.largest_excess <= 1
    }
}
