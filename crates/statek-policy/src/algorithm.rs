//! [`PolicyAlgorithm`]: how a policy's weights become a cycle.

use alloc::string::ToString;
use core::fmt;
use core::str::FromStr;

use crate::error::PolicyError;

/// The algorithm that compiles a policy's weights into its cycle.
///
/// The name is part of the canonical bytes, so a policy's digest changes if
/// its algorithm does. New algorithms get new names; an existing algorithm's
/// output never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum PolicyAlgorithm {
    /// `swrr-v1`: smooth weighted round robin.
    ///
    /// Every tenant has a score starting at 0. For each of the `L` steps
    /// (`L` = sum of weights), every tenant's weight is added to its score,
    /// the tenant with the highest score is picked (on a tie, the tenant whose
    /// id sorts first), and `L` is subtracted from the picked tenant's score.
    ///
    /// The default. Each tenant is picked exactly `weight` times per cycle;
    /// its bound can approach twice the ideal `ceil(L / weight)`, for
    /// example 1,023 instead of 512 for one weight-2 tenant among 1,022
    /// weight-1 tenants.
    #[default]
    SwrrV1,
    /// `min-gap-v1`: the best of three deterministic constructions; opt-in.
    ///
    /// Compiles three candidate cycles, measures every tenant's bound on
    /// each, and keeps the candidate whose largest ratio of bound to
    /// `ceil(L / weight)` is smallest; on a tie the earlier candidate in this
    /// list:
    ///
    /// 1. `swrr-v1` itself, so `min-gap-v1`'s largest ratio is never above
    ///    `swrr-v1`'s;
    /// 2. class SWRR: tenants of equal weight form a class whose weight is
    ///    the sum of its members' weights; smooth weighted round robin runs
    ///    over the classes (ordered by their first member's id), and each
    ///    slot a class wins goes to its next member in id order,
    ///    round-robin;
    /// 3. a window schedule: every pick of every tenant gets an ideal
    ///    position (a tenant's picks `L / weight` apart, equal-weight
    ///    tenants and the classes staggered) and a window around it sized
    ///    from a target ratio; earliest-deadline-first over the windows
    ///    tests whether the target is feasible, a binary search finds the
    ///    smallest feasible target (in steps of 1/1024), and the result's
    ///    counts and gaps are verified before it is accepted.
    ///
    /// Everything is integer arithmetic on the tenants sorted by id, so the
    /// cycle depends only on the tenants and weights, never on input
    /// order. Compiling takes longer than `swrr-v1` (milliseconds at the
    /// limits of 1,024 tenants and 4,096 slots) and happens once per policy.
    MinGapV1,
    /// `min-gap-v2`: `min-gap-v1` and up to two more candidates; opt-in.
    ///
    /// Starts from the `min-gap-v1` cycle and keeps it unless a candidate
    /// has a strictly smaller largest ratio of bound to `ceil(L / weight)`,
    /// so `min-gap-v2` is never worse than `min-gap-v1` (and therefore
    /// `swrr-v1`) by that measure:
    ///
    /// 1. `min-gap-v1` itself;
    /// 2. for `L <= 16`, the exact optimum: a branch-and-bound search over
    ///    all cycles (tenants tried in id order, equal-weight tenants
    ///    interchangeable) for the smallest largest ratio, limited to a
    ///    fixed number of search steps (never a time);
    /// 3. paced earliest-deadline-first: for a target ratio, every
    ///    tenant's next pick is due `floor(target · ceil(L / w))` slots
    ///    after its last, and may not run more than one pick ahead of its
    ///    proportional share; each slot goes to the released tenant due
    ///    first (on a tie, by id). A binary search over targets (steps of
    ///    1/1024) keeps the best verified cycle: the smallest largest
    ///    ratio, and among equal ratios the smallest largest excess
    ///    `bound − ceil(L / weight)`.
    ///
    /// Deterministic integer arithmetic on the tenants sorted by id; no
    /// clock, no randomness. A search that runs out of steps is skipped,
    /// the same way on every machine, and the policy says so
    /// ([`WeightedFairnessPolicy::cycle_optimality`](crate::WeightedFairnessPolicy::cycle_optimality)).
    MinGapV2,
}

impl PolicyAlgorithm {
    /// Every algorithm this crate knows, oldest first.
    pub const ALL: &'static [PolicyAlgorithm] = &[
        PolicyAlgorithm::SwrrV1,
        PolicyAlgorithm::MinGapV1,
        PolicyAlgorithm::MinGapV2,
    ];

    /// The algorithm's stable name, as written in canonical bytes and policy
    /// files (`"swrr-v1"`, `"min-gap-v1"`, `"min-gap-v2"`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PolicyAlgorithm::SwrrV1 => "swrr-v1",
            PolicyAlgorithm::MinGapV1 => "min-gap-v1",
            PolicyAlgorithm::MinGapV2 => "min-gap-v2",
        }
    }
}

impl fmt::Display for PolicyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyAlgorithm {
    type Err = PolicyError;

    /// Parses an algorithm by its exact, case-sensitive name.
    ///
    /// # Errors
    ///
    /// [`PolicyError::UnknownAlgorithm`] for any other text.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyAlgorithm::ALL
            .iter()
            .copied()
            .find(|algorithm| algorithm.name() == s)
            .ok_or_else(|| PolicyError::UnknownAlgorithm {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    fn check(input: &str, expected: Option<PolicyAlgorithm>) {
        let parsed = input.parse::<PolicyAlgorithm>();
        match expected {
            Some(algorithm) => {
                assert_eq!(parsed, Ok(algorithm));
                assert_eq!(algorithm.to_string(), input);
            }
            None => assert_eq!(
                parsed,
                Err(PolicyError::UnknownAlgorithm {
                    name: input.to_string()
                })
            ),
        }
    }

    #[test]
    fn names() {
        check("swrr-v1", Some(PolicyAlgorithm::SwrrV1));
        check("min-gap-v1", Some(PolicyAlgorithm::MinGapV1));
        check("MIN-GAP-V1", None);
        check("min-gap", None);
        check("min-gap-v2", Some(PolicyAlgorithm::MinGapV2));
        check("min-gap-v3", None);
        check("MIN-GAP-V2", None);
        check("min_gap_v1", None);
        check("SWRR-V1", None);
        check("swrr-v1 ", None);
        check("swrr", None);
        check("swrr-v2", None);
        check("", None);
        assert_eq!(PolicyAlgorithm::default(), PolicyAlgorithm::SwrrV1);
        assert_eq!(PolicyAlgorithm::SwrrV1.name(), "swrr-v1");
        assert_eq!(PolicyAlgorithm::MinGapV1.name(), "min-gap-v1");
        assert_eq!(
            PolicyAlgorithm::ALL,
            [
                PolicyAlgorithm::SwrrV1,
                PolicyAlgorithm::MinGapV1,
                PolicyAlgorithm::MinGapV2
            ]
        );
        assert_eq!(PolicyAlgorithm::MinGapV2.name(), "min-gap-v2");
    }
}
