//! Compile a policy and read a tenant's starvation bound (no database).

use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tenant_a = TenantId::try_from("tenant-a")?;
    let tenant_b = TenantId::try_from("tenant-b")?;

    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1")?,
        [
            TenantFairnessWeight::new(tenant_a, 3)?,
            TenantFairnessWeight::new(tenant_b.clone(), 1)?,
        ],
    )?;

    let bound = policy
        .starvation_bound(&tenant_b)
        .expect("tenant-b was registered in this policy");

    assert!(bound.maximum_reservations_until_selection() <= 4);
    Ok(())
}
