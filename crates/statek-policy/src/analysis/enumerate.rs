//! Every weight set of a cycle length ([`partitions`]) and every id order
//! of every weight set ([`compositions`]).

use alloc::vec::Vec;

use crate::weight::MAX_WEIGHT;

/// Every partition of `length` into weights of at most 1,024, each in
/// descending order, the partitions in descending lexicographic order.
///
/// ```
/// use statek_policy::analysis::partitions;
/// assert_eq!(partitions(4), [vec![4], vec![3, 1], vec![2, 2], vec![2, 1, 1], vec![1, 1, 1, 1]]);
/// ```
#[must_use]
pub fn partitions(length: u32) -> Vec<Vec<u32>> {
    fn extend(rest: u32, largest: u32, current: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if rest == 0 {
            out.push(current.clone());
            return;
        }
        for part in (1..=rest.min(largest)).rev() {
            current.push(part);
            extend(rest - part, part, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    extend(length, MAX_WEIGHT, &mut Vec::new(), &mut out);
    out
}

/// Every sequence of positive weights (each at most 1,024) that sums to
/// `length`, in lexicographic order: every id order of every weight set
/// (`2^(length − 1)` of them).
///
/// ```
/// use statek_policy::analysis::compositions;
/// assert_eq!(compositions(3), [vec![1, 1, 1], vec![1, 2], vec![2, 1], vec![3]]);
/// ```
#[must_use]
pub fn compositions(length: u32) -> Vec<Vec<u32>> {
    fn extend(rest: u32, current: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if rest == 0 {
            out.push(current.clone());
            return;
        }
        for part in 1..=rest.min(MAX_WEIGHT) {
            current.push(part);
            extend(rest - part, current, out);
            current.pop();
        }
    }
    let mut out = Vec::new();
    extend(length, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn counts() {
        let partition_counts: Vec<usize> = (1..=8).map(|n| partitions(n).len()).collect();
        assert_eq!(partition_counts, [1, 2, 3, 5, 7, 11, 15, 22]);
        let composition_counts: Vec<usize> = (1..=8).map(|n| compositions(n).len()).collect();
        assert_eq!(composition_counts, [1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(partitions(0), [Vec::<u32>::new()]);
    }
}
