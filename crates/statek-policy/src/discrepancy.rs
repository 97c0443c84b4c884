//! [`WindowDiscrepancy`]: how far a tenant's picks in any run of
//! consecutive slots can stray from its share of that run, measured
//! exactly on the compiled cycle.
//!
//! # Measure
//!
//! For a tenant of weight `w` in a cycle of length `L`, let `n(a, b)` be
//! its picks among the sequences `a..b`. Define, for every integer `t`,
//!
//! ```text
//! F(t) = L · n(0, t) − t · w        (an integer; F(0) = 0)
//! ```
//!
//! `F` has period `L` (a whole cycle adds `w` picks and `L` slots, so
//! `L · w − L · w = 0`), and for every window `a..b` (any start, any
//! length, across laps)
//!
//! ```text
//! L · n(a, b) − (b − a) · w = F(b) − F(a).
//! ```
//!
//! So over every window, the tenant's picks differ from its entitled
//! `(b − a) · w / L` by at most `Δ = (max F − min F) / L`, both ways, and
//! some window reaches `+Δ` and some `−Δ` (the windows from an argmin to
//! an argmax and back): the largest excess and the largest deficit are
//! the same number. `F` rises only at a pick and falls between picks, so
//! its maximum is right after a pick and its minimum right before one (or
//! `F(0) = 0`): one pass over the cycle, in integers.

use alloc::vec;
use alloc::vec::Vec;

use crate::id::TenantId;

/// The largest difference, over every run of consecutive slots of a
/// shard, between a tenant's picks in it and its entitled share of it
/// (`length × weight / L`): `Δ` in slots, the same both ways.
///
/// For any `W` consecutive sequences, the tenant is picked at least
/// `W·w/L − Δ` and at most `W·w/L + Δ` times. It counts picks (scheduling
/// opportunities), not runs: a slot of the tenant that claims nothing
/// still counts. Measured on the compiled cycle, exactly: `Δ · L` is an
/// integer ([`scaled`](Self::scaled)).
///
/// ```
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let a = TenantId::try_from("tenant-a")?;
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(a.clone(), 3)?,
///      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
/// )?;
/// // The cycle is a a b a: slots 3, 0 and 1 give tenant-a 3 picks where
/// // its share is 2.25; slot 2 gives it none of 0.75.
/// let d = policy.window_discrepancy(&a).expect("registered");
/// assert_eq!((d.scaled(), d.cycle_length()), (3, 4));
/// assert_eq!(d.slots(), 0.75);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowDiscrepancy {
    tenant: TenantId,
    weight: u32,
    cycle_length: u32,
    scaled: u64,
}

impl WindowDiscrepancy {
    pub(crate) fn new(tenant: TenantId, weight: u32, cycle_length: u32, scaled: u64) -> Self {
        Self {
            tenant,
            weight,
            cycle_length,
            scaled,
        }
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Its weight.
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The cycle length `L` in slots.
    #[must_use]
    pub fn cycle_length(&self) -> u32 {
        self.cycle_length
    }

    /// `Δ · L`, exact: `Δ` is this many `L`-ths of a slot.
    #[must_use]
    pub fn scaled(&self) -> u64 {
        self.scaled
    }

    /// `Δ` in slots (`scaled / L`; exact where the quotient is a binary
    /// fraction, else the nearest `f64`).
    #[must_use]
    pub fn slots(&self) -> f64 {
        self.scaled as f64 / f64::from(self.cycle_length.max(1))
    }
}

/// `Δ · L` of every tenant (by index) of `cycle` (tenant indexes, one per
/// slot) with `weights`: `max F − min F` of the module's `F`, evaluated
/// only where it can peak (right before and right after each pick, and
/// `F(0)`).
pub(crate) fn measure(cycle: &[u16], weights: &[u32]) -> Vec<u64> {
    let l = cycle.len() as i64;
    let mut picks = vec![0_i64; weights.len()];
    // (min F, max F) per tenant, F(0) = 0 included.
    let mut range = vec![(0_i64, 0_i64); weights.len()];
    for (slot, &tenant) in cycle.iter().enumerate() {
        let i = usize::from(tenant);
        let (Some(count), Some(span), Some(&w)) =
            (picks.get_mut(i), range.get_mut(i), weights.get(i))
        else {
            continue;
        };
        let t = slot as i64;
        let before = l * *count - t * i64::from(w);
        *count += 1;
        let after = l * *count - (t + 1) * i64::from(w);
        span.0 = span.0.min(before);
        span.1 = span.1.max(after);
    }
    range
        .into_iter()
        .map(|(low, high)| (high - low).unsigned_abs())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_measured_cycles() {
        // a a b a: F of a is 0, 1, 2, -1, 0; of b 0, -1, -2, 1, 0.
        assert_eq!(measure(&[0, 0, 1, 0], &[3, 1]), vec![3, 3]);
        // One tenant: every slot is its pick, F = 0 throughout.
        assert_eq!(measure(&[0, 0, 0], &[3]), vec![0]);
        // a b a b (equal weights, alternating): F of a is 0, 2, 0, 2, 0
        // (L = 4, w = 2): Δ = 2/4.
        assert_eq!(measure(&[0, 1, 0, 1], &[2, 2]), vec![2, 2]);
        // a a b b (the same weights, clumped): F of a is 0, 2, 4, 2, 0:
        // Δ = 4/4, one whole slot.
        assert_eq!(measure(&[0, 0, 1, 1], &[2, 2]), vec![4, 4]);
    }
}
