//! Helpers shared by the unit tests of the algorithms' files.

use alloc::string::String;
use alloc::vec::Vec;

use crate::id::TenantId;
use crate::weight::TenantFairnessWeight;

/// Tenants `t0000, t0001, ...` with these weights, in id order.
pub(crate) fn tenants(weights: &[u32]) -> Vec<TenantFairnessWeight> {
    weights
        .iter()
        .enumerate()
        .map(|(index, &weight)| {
            let id = alloc::format!("t{index:04}");
            TenantFairnessWeight::new(TenantId::try_from(id.as_str()).unwrap(), weight).unwrap()
        })
        .collect()
}

/// The cycle length `L` of `weights`.
pub(crate) fn length(weights: &[u32]) -> u32 {
    weights.iter().sum()
}

/// The cycle as letters `a`, `b`, … by tenant index.
pub(crate) fn letters(slots: &[u16]) -> String {
    slots
        .iter()
        .map(|&slot| char::from(b'a' + u8::try_from(slot).unwrap()))
        .collect()
}
