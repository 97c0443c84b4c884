//! [`CycleOptimality`]: what is proven about a compiled cycle's largest
//! ratio of starvation bound to `ceil(L / w)`, reported with the policy
//! (and by `statek policy compile`) instead of being left to the reader.

use core::fmt;

/// What is proven about how good a compiled cycle is, judged by its
/// largest ratio of a tenant's starvation bound to `ceil(L / w)` (the
/// bound no cycle can beat for that tenant: `w` picks in `L` slots leave a
/// gap of at least `ceil(L / w)`).
///
/// ```
/// use statek_policy::{
///     CycleOptimality, PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId,
///     UnprovenReason, WeightedFairnessPolicy,
/// };
/// let weights = |pairs: &[(&str, u32)]| -> Vec<TenantFairnessWeight> {
///     pairs
///         .iter()
///         .map(|(id, w)| TenantFairnessWeight::new(TenantId::try_from(*id).unwrap(), *w).unwrap())
///         .collect()
/// };
/// let shard = SchedulerShardId::try_from("primary-v1")?;
/// // {3, 2, 1}: no cycle does better than 4/3, and min-gap-v2's search proves it.
/// let v2 = WeightedFairnessPolicy::with_algorithm(
///     shard.clone(),
///     PolicyAlgorithm::MinGapV2,
///     weights(&[("a", 3), ("b", 2), ("c", 1)]),
/// )?;
/// assert_eq!(v2.cycle_optimality(), CycleOptimality::ProvenOptimal);
/// // swrr-v1 does not search: its 3/2 there is reported as unproven.
/// let swrr = WeightedFairnessPolicy::new(shard.clone(), weights(&[("a", 3), ("b", 2), ("c", 1)]))?;
/// assert_eq!(
///     swrr.cycle_optimality(),
///     CycleOptimality::Unproven(UnprovenReason::NotSearched)
/// );
/// // Every bound at ceil(L / w): ideal under any algorithm.
/// let ideal = WeightedFairnessPolicy::new(shard, weights(&[("a", 3), ("b", 1)]))?;
/// assert_eq!(ideal.cycle_optimality(), CycleOptimality::Ideal);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CycleOptimality {
    /// Every tenant's bound is `ceil(L / w)`: no cycle does better for any
    /// tenant. Checked on the measured bounds, whatever the algorithm.
    Ideal,
    /// An exhaustive search over every cycle of the weights proved that
    /// none has a smaller largest ratio (`min-gap-v2`, `L <= 16`, within
    /// its step budget). Another cycle may have the same largest ratio.
    ProvenOptimal,
    /// Nothing is proven beyond the algorithm's own guarantees
    /// (docs/guarantees.md); the reason says why.
    Unproven(UnprovenReason),
}

/// Why a cycle's optimality is not proven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnprovenReason {
    /// The algorithm does not search for the optimum (`swrr-v1`,
    /// `min-gap-v1`).
    NotSearched,
    /// The cycle is longer than the exhaustive search's limit: `min-gap-v2`
    /// used its paced earliest-deadline-first construction.
    TooLongToSearch {
        /// The longest cycle searched exhaustively, in slots (16).
        max_length: u32,
    },
    /// The exhaustive search gave up after its step budget without an
    /// answer: `min-gap-v2` used its paced construction instead, the same
    /// way on every machine.
    SearchOutOfSteps {
        /// The budget, in search steps (nodes visited): 2,000,000.
        max_steps: u64,
    },
}

impl CycleOptimality {
    /// A stable, machine-readable label: `ideal`, `proven-optimal` or
    /// `unproven`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Ideal => "ideal",
            Self::ProvenOptimal => "proven-optimal",
            Self::Unproven(_) => "unproven",
        }
    }

    /// Whether no cycle of the same weights has a smaller largest ratio
    /// ([`Ideal`](Self::Ideal) or [`ProvenOptimal`](Self::ProvenOptimal)).
    #[must_use]
    pub fn is_proven_optimal(self) -> bool {
        matches!(self, Self::Ideal | Self::ProvenOptimal)
    }
}

impl fmt::Display for CycleOptimality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ideal => f.write_str("ideal: every bound is ceil(L / weight)"),
            Self::ProvenOptimal => f.write_str(
                "proven optimal: an exhaustive search found no cycle with a smaller largest bound / ideal",
            ),
            Self::Unproven(reason) => write!(f, "unproven: {reason}"),
        }
    }
}

impl fmt::Display for UnprovenReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotSearched => f.write_str("the algorithm does not search for the optimum"),
            Self::TooLongToSearch { max_length } => write!(
                f,
                "the cycle is longer than the {max_length} slots searched exhaustively"
            ),
            Self::SearchOutOfSteps { max_steps } => {
                write!(f, "the exhaustive search ran out of its {max_steps} steps")
            }
        }
    }
}
