//! Weight classes: the tenants of one weight, in id order, and class SWRR,
//! `min-gap-v1`'s second candidate.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use crate::swrr::swrr;
use crate::weight::TenantFairnessWeight;

/// Tenants of one weight, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WeightClass {
    /// The weight every member has.
    pub(crate) weight: u32,
    /// Tenant indexes (positions in the sorted tenants), ascending.
    pub(crate) members: Vec<u16>,
}

impl WeightClass {
    /// The class's weight in class SWRR: the sum of its members' weights.
    pub(crate) fn total_weight(&self) -> u32 {
        let members = u32::try_from(self.members.len()).unwrap_or(u32::MAX);
        self.weight.saturating_mul(members)
    }
}

/// The weight classes of `tenants` (sorted by id), ordered by their first
/// member, which is the order of the smallest id of each weight.
pub(crate) fn weight_classes(tenants: &[TenantFairnessWeight]) -> Vec<WeightClass> {
    let mut index_of_weight: BTreeMap<u32, usize> = BTreeMap::new();
    let mut classes: Vec<WeightClass> = Vec::new();
    for (tenant, index) in tenants.iter().zip(0_u16..) {
        let next = classes.len();
        let class = *index_of_weight.entry(tenant.weight()).or_insert(next);
        if class == next {
            classes.push(WeightClass {
                weight: tenant.weight(),
                members: Vec::new(),
            });
        }
        if let Some(class) = classes.get_mut(class) {
            class.members.push(index);
        }
    }
    classes
}

/// Class SWRR: smooth weighted round robin over the classes (each weighing
/// the sum of its members' weights, in class order), and each slot a class
/// wins goes to its next member in id order, round-robin.
///
/// A class of `m` members of weight `w` wins `m × w` slots, so each member
/// gets exactly `w`; the caller checks it anyway.
pub(crate) fn class_swrr(classes: &[WeightClass], length: u32) -> Vec<u16> {
    let class_weights: Vec<u32> = classes.iter().map(WeightClass::total_weight).collect();
    let mut turns = vec![0_usize; classes.len()];
    swrr(&class_weights, length)
        .into_iter()
        .map(|class| {
            let class = usize::from(class);
            let (Some(members), Some(turn)) = (
                classes.get(class).map(|class| &class.members),
                turns.get_mut(class),
            ) else {
                return u16::MAX;
            };
            let member = members
                .get(*turn % members.len().max(1))
                .copied()
                .unwrap_or(u16::MAX);
            *turn += 1;
            member
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::test_support::{length, letters, tenants};

    fn check_classes(weights: &[u32], expected: &[(u32, &[u16])]) {
        let classes = weight_classes(&tenants(weights));
        let actual: Vec<(u32, &[u16])> = classes
            .iter()
            .map(|class| (class.weight, class.members.as_slice()))
            .collect();
        assert_eq!(actual, expected, "{weights:?}");
    }

    #[test]
    fn classes() {
        check_classes(&[1], &[(1, &[0])]);
        check_classes(&[3, 1], &[(3, &[0]), (1, &[1])]);
        check_classes(&[1, 2, 1, 2, 5], &[(1, &[0, 2]), (2, &[1, 3]), (5, &[4])]);
        check_classes(&[4, 4, 4], &[(4, &[0, 1, 2])]);
    }

    fn check_class_swrr(weights: &[u32], expected: &str) {
        let classes = weight_classes(&tenants(weights));
        assert_eq!(
            letters(&class_swrr(&classes, length(weights))),
            expected,
            "{weights:?}"
        );
    }

    #[test]
    fn class_swrr_cycles() {
        // Distinct weights: the classes are the tenants, so it is swrr-v1.
        check_class_swrr(&[3, 1], "aaba");
        check_class_swrr(&[5, 2, 1], "abaacaba");
        // Equal weights: one class, round robin in id order.
        check_class_swrr(&[1, 1, 1], "abc");
        check_class_swrr(&[2, 2], "abab");
        // The weight-2 tenant against a class of four weight-1 tenants
        // (class weight 4): SWRR over (4, 2) is "abaaba".
        check_class_swrr(&[1, 2, 1, 1, 1], "abcdbe");
    }
}
