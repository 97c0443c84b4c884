//! [`PolicySeam`]: each tenant's exact gap across the seam of a rollout,
//! where a sealed shard's sequences end and its successor's begin.
//!
//! A rollout seals the live shard of a schedule at its cursor `N` (the
//! number of sequences it handed out; its last is `N - 1`) and activates
//! its successor, whose sequences start at 0. In the schedule's global order
//! the old shard's sequences `0..N` come first, then the successor's, so the
//! successor's sequence `q` is position `N + q` of the combined order. A
//! tenant's gap across the seam is the distance, in that order, from its
//! last pick in the old shard to its first pick in the successor, counting
//! the picking slot as [starvation bounds](crate::TenantStarvationBound) do:
//!
//! - picked in the old shard before the seal, last at `p < N`, and first
//!   picked in the successor at `q`: `(N - p) + q` reservations;
//! - in both policies but not yet picked in the old shard (`N` is at most
//!   its first slot there): `g + N + q`, with `g` its open gap at the old
//!   shard's start, carried from the seam into it
//!   ([`PolicySeam::at_carrying`]), or 1 (`p = -1`) for a schedule's first
//!   shard ([`PolicySeam::at`]);
//! - new in the successor (joining): counted from the seam, `q + 1`.
//!
//! Tenants of the old policy that are not in the successor are leaving
//! ([`PolicySeam::leaving`]) and have no bound after the seal.
//!
//! Everything here is computed from the two compiled cycles, never from a
//! formula of the weights.

use alloc::vec;
use alloc::vec::Vec;

use crate::cost_bound::{CostBound, CostSeamBound};
use crate::id::TenantId;
use crate::policy::WeightedFairnessPolicy;

/// The seam between a sealed shard's policy and its successor's: computes
/// every tenant's exact gap across it for a seal at any sequence, and the
/// worst over all seal points.
///
/// Building it walks both cycles once and looks every new tenant up in the
/// old policy (`O(L_old + L_new + tenants · log tenants)`); then
/// [`at`](Self::at) costs `O(tenants · log L_old)` per call and
/// [`worst`](Self::worst) `O(L_old + tenants · log L_old)`. It does not check that `new` really succeeds `old`
/// in one schedule: the bound means something only if it does (two shards
/// serving one worker pool outside one schedule are independent, and no
/// bound holds across them).
///
/// ```
/// use statek_policy::{PolicySeam, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// # fn main() -> Result<(), statek_policy::PolicyError> {
/// let (a, b, c) = (TenantId::try_from("a")?, TenantId::try_from("b")?, TenantId::try_from("c")?);
/// // primary-v1 = a:3, b:1 has cycle a a b a.
/// let old = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(a.clone(), 3)?, TenantFairnessWeight::new(b.clone(), 1)?],
/// )?;
/// // primary-v2 = a:1, b:1, c:2 has cycle c a b c.
/// let new = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v2")?,
///     [
///         TenantFairnessWeight::new(a.clone(), 1)?,
///         TenantFairnessWeight::new(b.clone(), 1)?,
///         TenantFairnessWeight::new(c.clone(), 2)?,
///     ],
/// )?;
/// let seam = PolicySeam::new(&old, &new);
/// // Sealed at N = 9: primary-v1 handed out 0..=8, the last b at 6 (slot 2),
/// // and b's first pick in primary-v2 is sequence 2: (9 - 6) + 2 = 5.
/// let at_nine = seam.at(9);
/// let gaps: Vec<u64> = at_nine.iter().map(|bound| bound.reservations_across_seam()).collect();
/// assert_eq!(gaps, [2, 5, 1]);
/// assert_eq!(at_nine[1].last_pick_before_seal(), Some(6));
/// assert!(at_nine[2].joining());
/// // Over every seal point, b's worst is 6, first reached at N = 6.
/// let worst = seam.worst();
/// assert_eq!((worst[1].seal_sequence(), worst[1].reservations_across_seam()), (6, 6));
/// assert!(seam.leaving().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PolicySeam<'a> {
    old: &'a WeightedFairnessPolicy,
    new: &'a WeightedFairnessPolicy,
    /// For each tenant of `new`, in its tenant order.
    tenants: Vec<SeamTenant>,
}

/// What the seam needs to know about one tenant of the successor.
#[derive(Debug, Clone)]
struct SeamTenant {
    /// The tenant's slots in the old cycle, ascending; empty if it joins.
    old_slots: Vec<u64>,
    /// Its first slot in the new cycle: its first pick in the successor.
    first_new_slot: u64,
}

impl<'a> PolicySeam<'a> {
    /// The seam between `old`, the policy of the shard being sealed, and
    /// `new`, the policy of its successor.
    #[must_use]
    pub fn new(old: &'a WeightedFairnessPolicy, new: &'a WeightedFairnessPolicy) -> Self {
        let mut old_slots: Vec<Vec<u64>> = vec![Vec::new(); old.tenants().len()];
        for (slot, &index) in (0_u64..).zip(old.cycle_tenant_indexes()) {
            if let Some(slots) = old_slots.get_mut(usize::from(index)) {
                slots.push(slot);
            }
        }
        let mut first_new_slot: Vec<Option<u64>> = vec![None; new.tenants().len()];
        for (slot, &index) in (0_u64..).zip(new.cycle_tenant_indexes()) {
            if let Some(first @ None) = first_new_slot.get_mut(usize::from(index)) {
                *first = Some(slot);
            }
        }
        let tenants = new
            .tenants()
            .iter()
            .zip(first_new_slot)
            .map(|(tenant, first)| SeamTenant {
                old_slots: old
                    .tenant_index(tenant.tenant())
                    .and_then(|index| old_slots.get_mut(index))
                    .map(core::mem::take)
                    .unwrap_or_default(),
                // Every tenant of a built policy has a slot; 0 is never used.
                first_new_slot: first.unwrap_or(0),
            })
            .collect();
        Self { old, new, tenants }
    }

    /// The exact gap across the seam of every tenant of the successor, in
    /// its tenant order, for a seal at `seal_sequence` (`N`: the number of
    /// sequences the old shard handed out, its last being `N - 1`).
    ///
    /// Any `u64` is accepted (the store's sequences stop at `i64::MAX`)
    /// and nothing overflows: a gap is at most `L_old + L_new`
    /// reservations, whatever `N`.
    ///
    /// A tenant of both policies that the old shard never picked (`N` at
    /// most its first slot) is counted from the old shard's start, as if
    /// its last pick were just before it: right for the first shard of a
    /// schedule. When the old shard is itself a successor, use
    /// [`at_carrying`](Self::at_carrying) with the seam into it.
    #[must_use]
    pub fn at(&self, seal_sequence: u64) -> Vec<SeamBound> {
        self.at_carrying(seal_sequence, |_| None)
    }

    /// [`at`](Self::at) for an old shard that is itself the successor of
    /// an earlier seal: `open_gap(tenant)` is, for a tenant the old shard
    /// may never have picked, the reservations from its last pick before
    /// the old shard to the old shard's sequence 0 (counting that one):
    /// [`SeamBound::open_gap_at_successor_start`] of the seam into the old
    /// shard. `None` counts from the old shard's start (1). A tenant the
    /// old shard never picked then waits `open_gap + N + q` across this
    /// seam: its gap runs on through the whole old shard.
    #[must_use]
    pub fn at_carrying(
        &self,
        seal_sequence: u64,
        open_gap: impl Fn(&TenantId) -> Option<u64>,
    ) -> Vec<SeamBound> {
        self.new
            .tenants()
            .iter()
            .zip(&self.tenants)
            .map(|(tenant, seam)| {
                let carried = open_gap(tenant.tenant()).unwrap_or(1);
                seam.bound(tenant.tenant(), seal_sequence, self.old_length(), carried)
            })
            .collect()
    }

    /// For each tenant of the successor, in its tenant order, the largest
    /// gap across the seam over every seal point `N >= 0` (the old shard
    /// counted from its start, as [`at`](Self::at) does), with the
    /// smallest `N` that reaches it as its
    /// [`seal_sequence`](SeamBound::seal_sequence).
    ///
    /// Exact, from the old cycle's picks of the tenant at `P_0 < … < P_k`:
    /// below `P_0 + 1` the gap `N + 1 + q` grows with `N`; above, `N - p`
    /// is largest just before a pick, at `N = P_j` (`P_j - P_(j-1)`) or at
    /// `N = L_old + P_0` (the wrap-around gap), and repeats every `L_old`
    /// sequences. So the worst is the old starvation bound plus `q` (the
    /// wrap-around gap is never below `P_0 + 1`), except that a seal at
    /// `N = P_0` reaches it first when `P_0 + 1` equals that bound. A
    /// joining tenant's gap, `q + 1`, is the same for every `N`: its
    /// worst is at `N = 0`.
    #[must_use]
    pub fn worst(&self) -> Vec<SeamBound> {
        let length = self.old_length();
        self.new
            .tenants()
            .iter()
            .zip(&self.tenants)
            .map(|(tenant, seam)| seam.bound(tenant.tenant(), seam.worst_seal(length), length, 1))
            .collect()
    }

    /// The tenants of the old policy that are not in the successor, in
    /// the old policy's tenant order: they have no slot after the seal, so
    /// no bound.
    #[must_use]
    pub fn leaving(&self) -> Vec<TenantId> {
        self.old
            .tenants()
            .iter()
            .map(|tenant| tenant.tenant())
            .filter(|tenant| self.new.tenant_index(tenant).is_none())
            .cloned()
            .collect()
    }

    /// The cost bound across the seam ([`CostSeamBound`]) of every tenant
    /// of either policy: the successor's tenants in its tenant order, then
    /// the leaving ones in the old order. `None` unless both policies
    /// share cost (a seam into cost mode starts the ledger at the seal:
    /// the one-shard bound applies from there; attempts claimed before it
    /// are never charged).
    #[must_use]
    pub fn cost_bounds(&self) -> Option<Vec<CostSeamBound>> {
        let (old_cost, new_cost) = (*self.old.fairness().cost()?, *self.new.fairness().cost()?);
        let old_bounds: Vec<CostBound> = self.old.cost_bounds()?.collect();
        let new_bounds: Vec<CostBound> = self.new.cost_bounds()?.collect();
        let find = |bounds: &[CostBound], tenant: &TenantId| {
            bounds.iter().find(|b| b.tenant() == tenant).cloned()
        };
        let (l1, l2) = (self.old.cycle_length(), self.new.cycle_length());
        let mut out: Vec<CostSeamBound> = new_bounds
            .iter()
            .map(|new| {
                let old = find(&old_bounds, new.tenant());
                CostSeamBound::new(
                    new.tenant().clone(),
                    (old_cost, l1, old.as_ref()),
                    (new_cost, l2, Some(new)),
                )
            })
            .collect();
        out.extend(self.leaving().into_iter().map(|tenant| {
            let old = find(&old_bounds, &tenant);
            CostSeamBound::new(tenant, (old_cost, l1, old.as_ref()), (new_cost, l2, None))
        }));
        Some(out)
    }

    fn old_length(&self) -> u64 {
        u64::from(self.old.cycle_length())
    }
}

impl SeamTenant {
    /// The tenant's bound for a seal at `seal` (`N`), with `length` the old
    /// cycle length.
    /// `carried`: the tenant's open gap at the old shard's sequence 0 (1
    /// for the first shard of a schedule).
    fn bound(&self, tenant: &TenantId, seal: u64, length: u64, carried: u64) -> SeamBound {
        let first = self.first_new_slot;
        let last = self.last_pick_before(seal, length);
        let reservations_across_seam = match last {
            // (N - p) + q, where p < N.
            Some(last) => seal.saturating_sub(last).saturating_add(first),
            // A joining tenant is counted from the seam (q + 1).
            None if self.old_slots.is_empty() => first.saturating_add(1),
            // Never picked in the old shard: its gap runs on from before
            // it (carried, 1 from the shard's start: p = -1).
            None => carried.saturating_add(seal).saturating_add(first),
        };
        SeamBound {
            tenant: tenant.clone(),
            seal_sequence: seal,
            last_pick_before_seal: last,
            first_pick_after_seal: first,
            reservations_across_seam,
            joining: self.old_slots.is_empty(),
        }
    }

    /// The largest sequence `p < seal` whose slot in the old cycle is this
    /// tenant's, or `None` if there is none (joining, or `seal` at most its
    /// first slot).
    fn last_pick_before(&self, seal: u64, length: u64) -> Option<u64> {
        let (&first_slot, &last_slot) = (self.old_slots.first()?, self.old_slots.last()?);
        // The last sequence the old shard handed out.
        let latest = seal.checked_sub(1)?;
        if latest < first_slot {
            return None;
        }
        let slot = latest.checked_rem(length)?;
        let at_or_before = self.old_slots.partition_point(|&s| s <= slot);
        // How many sequences back from `latest` the tenant's last pick is.
        let back = match at_or_before.checked_sub(1) {
            Some(index) => slot.saturating_sub(*self.old_slots.get(index)?),
            // The last pick is in the previous lap; `latest >= first_slot`
            // and `slot < first_slot` mean there is one.
            None => slot.saturating_add(length).saturating_sub(last_slot),
        };
        latest.checked_sub(back)
    }

    /// The smallest seal point at which this tenant's gap is largest (see
    /// [`PolicySeam::worst`]).
    fn worst_seal(&self, length: u64) -> u64 {
        let Some((&first_slot, &last_slot)) = self.old_slots.first().zip(self.old_slots.last())
        else {
            return 0;
        };
        // Candidates in increasing N, each with its N - p (p = -1 at
        // N = P_0); the first largest wins.
        let before_first = (first_slot, first_slot.saturating_add(1));
        let between = self.old_slots.windows(2).filter_map(|pair| match *pair {
            [earlier, later] => Some((later, later.saturating_sub(earlier))),
            _ => None,
        });
        let wrap_seal = length.saturating_add(first_slot);
        let wrap = (wrap_seal, wrap_seal.saturating_sub(last_slot));
        let mut best = before_first;
        for candidate in between.chain([wrap]) {
            if candidate.1 > best.1 {
                best = candidate;
            }
        }
        best.0
    }
}

/// One tenant's exact gap across the seam of a rollout, for one seal point:
/// the number of reservations, in the schedule's global order and counting
/// the picking one, from its last pick in the sealed shard to its first pick
/// in the successor.
///
/// Units are reservations (scheduling slots), never seconds. Together with
/// the two policies' [starvation bounds](crate::TenantStarvationBound), a
/// tenant of both policies waits at most the largest of the old policy's
/// bound, this gap and the new policy's bound anywhere around a rollout:
/// before `p` it is in the old cycle, between `p` and the successor's `q`
/// it is this gap, after `q` it is in the new cycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeamBound {
    tenant: TenantId,
    seal_sequence: u64,
    last_pick_before_seal: Option<u64>,
    first_pick_after_seal: u64,
    reservations_across_seam: u64,
    joining: bool,
}

impl SeamBound {
    /// The tenant, of the successor's policy.
    #[must_use]
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The seal point `N`: the number of sequences the sealed shard handed
    /// out (its last is `N - 1`).
    #[must_use]
    pub fn seal_sequence(&self) -> u64 {
        self.seal_sequence
    }

    /// The tenant's last pick in the sealed shard, a sequence of that shard
    /// below `N`; `None` if it joins, or was not picked there before the
    /// seal.
    #[must_use]
    pub fn last_pick_before_seal(&self) -> Option<u64> {
        self.last_pick_before_seal
    }

    /// The tenant's first pick in the successor, a sequence of the
    /// successor (its first slot in the new cycle, below `L_new`).
    #[must_use]
    pub fn first_pick_after_seal(&self) -> u64 {
        self.first_pick_after_seal
    }

    /// The gap across the seam, in reservations, counting the picking one:
    /// `(N - p) + q` for a tenant last picked at `p` in the sealed shard and
    /// first at `q` in the successor; `N + 1 + q` for a tenant of both
    /// policies not picked before the seal (counted from the sealed shard's
    /// start); `q + 1` for a joining tenant (counted from the seam).
    #[must_use]
    pub fn reservations_across_seam(&self) -> u64 {
        self.reservations_across_seam
    }

    /// The tenant's open gap at the successor's sequence 0: the
    /// reservations from its last pick before the seal to the successor's
    /// first sequence, counting that one (`reservations_across_seam -
    /// first_pick_after_seal`; 1 for a joining tenant). What
    /// [`PolicySeam::at_carrying`] takes for the next seal.
    #[must_use]
    pub fn open_gap_at_successor_start(&self) -> u64 {
        self.reservations_across_seam
            .saturating_sub(self.first_pick_after_seal)
    }

    /// Whether the tenant is new in the successor (not in the sealed
    /// shard's policy).
    #[must_use]
    pub fn joining(&self) -> bool {
        self.joining
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::*;
    use crate::algorithm::PolicyAlgorithm;
    use crate::id::SchedulerShardId;
    use crate::weight::TenantFairnessWeight;

    fn policy(
        shard: &str,
        algorithm: PolicyAlgorithm,
        weights: &[(&str, u32)],
    ) -> WeightedFairnessPolicy {
        WeightedFairnessPolicy::with_algorithm(
            SchedulerShardId::try_from(shard).unwrap(),
            algorithm,
            weights.iter().map(|(id, w)| {
                TenantFairnessWeight::new(TenantId::try_from(*id).unwrap(), *w).unwrap()
            }),
        )
        .unwrap()
    }

    /// `primary-v1`: a:3, b:1 (swrr-v1), cycle `a a b a`.
    fn old() -> WeightedFairnessPolicy {
        policy("primary-v1", PolicyAlgorithm::SwrrV1, &[("a", 3), ("b", 1)])
    }

    /// `primary-v2`: a:1, b:1, c:2 (swrr-v1), cycle `c a b c`.
    fn new() -> WeightedFairnessPolicy {
        policy(
            "primary-v2",
            PolicyAlgorithm::SwrrV1,
            &[("a", 1), ("b", 1), ("c", 2)],
        )
    }

    fn letters(policy: &WeightedFairnessPolicy) -> String {
        policy.cycle().iter().map(TenantId::as_str).collect()
    }

    /// One tenant's bound, as `(tenant, N, p, q, gap, joining)`.
    type Row<'s> = (&'s str, u64, Option<u64>, u64, u64, bool);

    fn rows(bounds: &[SeamBound]) -> Vec<Row<'_>> {
        bounds
            .iter()
            .map(|b| {
                (
                    b.tenant().as_str(),
                    b.seal_sequence(),
                    b.last_pick_before_seal(),
                    b.first_pick_after_seal(),
                    b.reservations_across_seam(),
                    b.joining(),
                )
            })
            .collect()
    }

    /// The bounds of the seam `old → new` sealed at `seal`, per tenant of
    /// `new` as `(p, q, gap)`.
    fn check(seal: u64, expected: &[(Option<u64>, u64, u64)]) {
        let (old, new) = (old(), new());
        let seam = PolicySeam::new(&old, &new);
        let bounds = seam.at(seal);
        let got: Vec<(Option<u64>, u64, u64)> = rows(&bounds)
            .into_iter()
            .map(|(_, n, p, q, gap, _)| {
                assert_eq!(n, seal);
                (p, q, gap)
            })
            .collect();
        assert_eq!(got, expected, "N = {seal}");
    }

    #[test]
    fn the_cycles_the_tables_use() {
        assert_eq!(letters(&old()), "aaba");
        assert_eq!(letters(&new()), "cabc");
    }

    #[test]
    fn hand_checked_seals() {
        // Old cycle a a b a (L = 4): a in slots 0, 1, 3; b in slot 2.
        // New cycle c a b c: q = 1 for a, 2 for b, 0 for c (joining).
        // Rows are a, b, c: (last pick p, first pick q, gap).
        const I64_MAX: u64 = 9_223_372_036_854_775_807;
        // N = 0: nobody picked yet; a and b count from the start.
        check(0, &[(None, 1, 2), (None, 2, 3), (None, 0, 1)]);
        // N = 1: a picked at 0; b not yet (N < its first slot 2).
        check(1, &[(Some(0), 1, 2), (None, 2, 4), (None, 0, 1)]);
        // N = 2 = b's first slot: sequence 2 was not handed out.
        check(2, &[(Some(1), 1, 2), (None, 2, 5), (None, 0, 1)]);
        check(3, &[(Some(1), 1, 3), (Some(2), 2, 3), (None, 0, 1)]);
        // N = L_old.
        check(4, &[(Some(3), 1, 2), (Some(2), 2, 4), (None, 0, 1)]);
        check(6, &[(Some(5), 1, 2), (Some(2), 2, 6), (None, 0, 1)]);
        check(7, &[(Some(5), 1, 3), (Some(6), 2, 3), (None, 0, 1)]);
        // N = 2 L_old + 1: the last sequence, 8, is slot 0 (a).
        check(9, &[(Some(8), 1, 2), (Some(6), 2, 5), (None, 0, 1)]);
        // N = i64::MAX: the last sequence, 2^63 - 2, is slot 2 (b).
        check(
            I64_MAX,
            &[
                (Some(I64_MAX - 2), 1, 3),
                (Some(I64_MAX - 1), 2, 3),
                (None, 0, 1),
            ],
        );
        check(
            I64_MAX - 1,
            &[
                (Some(I64_MAX - 2), 1, 2),
                (Some(I64_MAX - 5), 2, 6),
                (None, 0, 1),
            ],
        );
        // Beyond what the store hands out, still exact and no overflow.
        check(
            u64::MAX,
            &[
                (Some(u64::MAX - 2), 1, 3),
                (Some(u64::MAX - 1), 2, 3),
                (None, 0, 1),
            ],
        );
    }

    #[test]
    fn hand_checked_worst() {
        let (old, new) = (old(), new());
        let seam = PolicySeam::new(&old, &new);
        // a: old bound 2 (slot 1 → 3), first reached at N = 3; 2 + q = 3.
        // b: old bound 4 (wrap 2 → 6), at N = 4 + 2 = 6; 4 + q = 6.
        // c: joining, q + 1 = 1 for every N; the smallest is 0.
        assert_eq!(
            rows(&seam.worst()),
            [
                ("a", 3, Some(1), 1, 3, false),
                ("b", 6, Some(2), 2, 6, false),
                ("c", 0, None, 0, 1, true),
            ]
        );
        assert!(seam.leaving().is_empty());
    }

    #[test]
    fn worst_at_the_first_slot() {
        // A tenant whose first slot P_0 has P_0 + 1 equal to its bound:
        // a:1, b:1 is "ab", b is in slot 1 with bound 2. A seal at N = 1
        // (b not yet picked) gives 1 + 1 + q = 2, as the wrap-around gap
        // does at N = 3: the smaller N wins.
        let old = policy("s-v1", PolicyAlgorithm::SwrrV1, &[("a", 1), ("b", 1)]);
        let new = policy("s-v2", PolicyAlgorithm::SwrrV1, &[("b", 1)]);
        assert_eq!(letters(&old), "ab");
        let seam = PolicySeam::new(&old, &new);
        assert_eq!(rows(&seam.worst()), [("b", 1, None, 0, 2, false)]);
        assert_eq!(rows(&seam.at(3)), [("b", 3, Some(1), 0, 2, false)]);
        assert_eq!(seam.leaving(), [TenantId::try_from("a").unwrap()]);
    }

    #[test]
    fn leaving_and_joining() {
        // old a:3 b:1 → new b:2 c:1 d:1: a leaves; c and d join.
        let (old, new) = (
            old(),
            policy(
                "primary-v2",
                PolicyAlgorithm::MinGapV2,
                &[("b", 2), ("c", 1), ("d", 1)],
            ),
        );
        let seam = PolicySeam::new(&old, &new);
        assert_eq!(letters(&new), "bcbd");
        assert_eq!(seam.leaving(), [TenantId::try_from("a").unwrap()]);
        assert_eq!(
            rows(&seam.at(5)),
            [
                ("b", 5, Some(2), 0, 3, false),
                ("c", 5, None, 1, 2, true),
                ("d", 5, None, 3, 4, true),
            ]
        );
    }

    #[test]
    fn the_same_policy_on_both_sides() {
        // A seal that changes nothing about the cycle: the gap is the
        // distance in the cycle shifted by N mod L, never above the bound.
        let policy = old();
        let seam = PolicySeam::new(&policy, &policy);
        let worst: Vec<u64> = seam
            .worst()
            .iter()
            .map(SeamBound::reservations_across_seam)
            .collect();
        // a: bound 2 + q 0; b: bound 4 + q 2: a seal just before b's next
        // pick restarts the cycle, and b waits for slot 2 again.
        assert_eq!(worst, [2, 6]);
    }
}
