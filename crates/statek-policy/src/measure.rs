//! Measuring a cycle: exact counts and each tenant's largest circular gap.
//! Every algorithm and the [`analysis`](crate::analysis) use these two.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::PolicyError;
use crate::weight::TenantFairnessWeight;

/// Checks that every tenant appears exactly `weight` times.
///
/// Since the weights sum to the number of slots, this also rules out slots
/// that name no tenant.
pub(crate) fn check_counts(
    tenants: &[TenantFairnessWeight],
    slots: &[u16],
) -> Result<(), PolicyError> {
    let mut counts = vec![0_u32; tenants.len()];
    for &slot in slots {
        if let Some(count) = counts.get_mut(usize::from(slot)) {
            *count = count.saturating_add(1);
        }
    }
    let expected_length: u64 = tenants.iter().map(|t| u64::from(t.weight())).sum();
    for (tenant, &count) in tenants.iter().zip(&counts) {
        if count != tenant.weight() {
            return Err(PolicyError::CycleInvariantViolated {
                tenant: tenant.tenant().clone(),
                expected: tenant.weight(),
                actual: count,
            });
        }
    }
    if u64::try_from(slots.len()).ok() != Some(expected_length) {
        // Unreachable when the per-tenant counts match; kept so a broken
        // compiler can never hand out a cycle of the wrong length.
        if let Some(tenant) = tenants.first() {
            return Err(PolicyError::CycleInvariantViolated {
                tenant: tenant.tenant().clone(),
                expected: tenant.weight(),
                actual: 0,
            });
        }
    }
    Ok(())
}

/// For each tenant index, the largest circular distance between two
/// consecutive picks, counting the picking slot (`length` for a tenant
/// picked once).
pub(crate) fn measure_bounds(tenant_count: usize, slots: &[u16], length: u32) -> Vec<u32> {
    // (first pick, last pick, largest gap so far), in slots.
    let mut seen: Vec<Option<(u32, u32, u32)>> = vec![None; tenant_count];
    for (slot, &index) in (0_u32..).zip(slots) {
        if let Some(entry) = seen.get_mut(usize::from(index)) {
            *entry = Some(match *entry {
                None => (slot, slot, 0),
                Some((first, last, gap)) => (first, slot, gap.max(slot - last)),
            });
        }
    }
    seen.into_iter()
        .map(|entry| match entry {
            // The wrap-around gap: from the last pick to the first pick of
            // the next lap.
            Some((first, last, gap)) => gap.max(length - last + first),
            None => length,
        })
        .collect()
}
