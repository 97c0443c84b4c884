//! The one check of a shard's stored cycle digest against the cycle this
//! build compiles from the same policy ([`check_cycle_digest`]): every
//! replica makes it before it ticks, and `statek register` and
//! `statek policy verify` make it for an operator.

use statek_policy::{CycleDigest, SchedulerShardId, WeightedFairnessPolicy};

/// How a shard's stored cycle digest compares with this build's cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleCheck {
    /// The shard stores the digest of the cycle this build compiles.
    Matches,
    /// The shard stores no cycle digest (registered before migration V6):
    /// this build's cycle cannot be checked against it.
    NotStored,
}

/// The shard stores the digest of another cycle than this build compiles
/// from the same policy bytes (an algorithm changed between builds):
/// slots would map to other tenants than on the replicas that agree with
/// the stored digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard {shard} was registered with cycle digest {stored}, but this build compiles cycle \
     digest {local} from the same policy"
)]
pub struct CycleMismatch {
    /// The shard.
    pub shard: SchedulerShardId,
    /// The digest the shard stores.
    pub stored: CycleDigest,
    /// The digest of the cycle this build compiles.
    pub local: CycleDigest,
}

/// Checks `stored`, a shard's stored cycle digest, against the cycle this
/// build compiles from `policy` (the shard's policy).
///
/// # Errors
/// [`CycleMismatch`] when the digests differ.
pub fn check_cycle_digest(
    policy: &WeightedFairnessPolicy,
    stored: Option<CycleDigest>,
) -> Result<CycleCheck, CycleMismatch> {
    let local = policy.cycle_digest();
    match stored {
        None => Ok(CycleCheck::NotStored),
        Some(stored) if stored == local => Ok(CycleCheck::Matches),
        Some(stored) => Err(CycleMismatch {
            shard: policy.shard_id().clone(),
            stored,
            local,
        }),
    }
}

#[cfg(test)]
mod tests {
    use statek_policy::{TenantFairnessWeight, TenantId};

    use super::*;

    fn policy(weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
        let shard = SchedulerShardId::try_from("primary-v1").unwrap_or_else(|e| panic!("{e}"));
        let weights = weights.iter().map(|(tenant, weight)| {
            let tenant = TenantId::try_from(*tenant).unwrap_or_else(|e| panic!("{e}"));
            TenantFairnessWeight::new(tenant, *weight).unwrap_or_else(|e| panic!("{e}"))
        });
        WeightedFairnessPolicy::new(shard, weights).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_stored_digest_is_checked_against_this_builds_cycle() {
        let ours = policy(&[("tenant-a", 3), ("tenant-b", 1)]);
        let other = policy(&[("tenant-a", 1), ("tenant-b", 1)]);
        assert_ne!(ours.cycle_digest(), other.cycle_digest());
        assert_eq!(
            check_cycle_digest(&ours, Some(ours.cycle_digest())),
            Ok(CycleCheck::Matches)
        );
        assert_eq!(check_cycle_digest(&ours, None), Ok(CycleCheck::NotStored));
        let mismatch = check_cycle_digest(&ours, Some(other.cycle_digest()));
        assert_eq!(
            mismatch,
            Err(CycleMismatch {
                shard: ours.shard_id().clone(),
                stored: other.cycle_digest(),
                local: ours.cycle_digest(),
            })
        );
        assert_eq!(
            mismatch.map_err(|e| e.to_string()),
            Err(format!(
                "shard primary-v1 was registered with cycle digest {}, but this build compiles \
                 cycle digest {} from the same policy",
                other.cycle_digest(),
                ours.cycle_digest()
            ))
        );
    }
}
