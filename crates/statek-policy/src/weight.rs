//! [`TenantFairnessWeight`]: one tenant and its integer share.

use crate::error::PolicyError;
use crate::id::TenantId;

/// The smallest weight a tenant may have.
pub const MIN_WEIGHT: u32 = 1;

/// The largest weight a tenant may have.
pub const MAX_WEIGHT: u32 = 1024;

/// A tenant and its weight: its integer share of the shard's scheduling
/// slots.
///
/// A tenant of weight `w` in a policy whose weights sum to `L` is picked in
/// exactly `w` of every `L` consecutive slots. The share is a share of
/// scheduling opportunities (slots), not of CPU time, tokens, money or
/// completed runs.
///
/// ```
/// use statek_policy::{TenantFairnessWeight, TenantId};
/// let weight = TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?;
/// assert_eq!(weight.tenant().as_str(), "tenant-a");
/// assert_eq!(weight.weight(), 3);
/// assert!(TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 0).is_err());
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantFairnessWeight {
    tenant: TenantId,
    weight: u32,
}

impl TenantFairnessWeight {
    /// Pairs `tenant` with `weight`.
    ///
    /// # Errors
    ///
    /// [`PolicyError::WeightOutOfRange`] unless
    /// [`MIN_WEIGHT`]` <= weight <= `[`MAX_WEIGHT`] (1..=1024).
    pub fn new(tenant: TenantId, weight: u32) -> Result<Self, PolicyError> {
        if (MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
            Ok(Self { tenant, weight })
        } else {
            Err(PolicyError::WeightOutOfRange {
                tenant,
                weight,
                min: MIN_WEIGHT,
                max: MAX_WEIGHT,
            })
        }
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The weight, in 1..=1024: slots per cycle.
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Splits into the tenant and the weight.
    #[must_use]
    pub fn into_parts(self) -> (TenantId, u32) {
        (self.tenant, self.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(weight: u32, ok: bool) {
        let tenant = TenantId::try_from("tenant-a").unwrap();
        let result = TenantFairnessWeight::new(tenant.clone(), weight);
        if ok {
            let built = result.unwrap();
            assert_eq!((built.tenant(), built.weight()), (&tenant, weight));
            assert_eq!(built.into_parts(), (tenant, weight));
        } else {
            assert_eq!(
                result,
                Err(PolicyError::WeightOutOfRange {
                    tenant,
                    weight,
                    min: 1,
                    max: 1024
                })
            );
        }
    }

    #[test]
    fn range() {
        check(0, false);
        check(1, true);
        check(2, true);
        check(1023, true);
        check(1024, true);
        check(1025, false);
        check(u32::MAX, false);
    }
}
