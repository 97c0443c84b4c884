//! [`WeightedFairnessPolicy`]: a shard's validated, compiled, immutable
//! policy.

use alloc::vec::Vec;
use core::fmt;

use crate::algorithm::PolicyAlgorithm;
use crate::bound::TenantStarvationBound;
use crate::canonical;
use crate::cost_bound::CostBound;
use crate::cycle::{self, CycleView};
use crate::cycle_digest::CycleDigest;
use crate::cycle_length::MAX_CYCLE_LENGTH;
use crate::digest::PolicyDigest;
use crate::discrepancy::WindowDiscrepancy;
use crate::error::PolicyError;
use crate::fairness_unit::FairnessUnit;
use crate::id::{SchedulerShardId, TenantId};
use crate::optimality::CycleOptimality;
use crate::weight::TenantFairnessWeight;

/// The largest number of tenants in one policy.
pub const MAX_TENANTS: usize = 1024;

/// The slot of the reservation with `sequence` in a cycle of
/// `cycle_length` slots: `sequence mod L`, in `0..L`. The one definition of
/// the slot: the policy ([`WeightedFairnessPolicy::pick`]), the scheduler
/// and the store (which checks stored slots against it) all use it. A
/// `cycle_length` of 0 (never valid) is taken as 1.
///
/// ```
/// assert_eq!(statek_policy::slot_of(6, 4), 2);
/// assert_eq!(statek_policy::slot_of(u64::MAX, 4096), 4095);
/// ```
#[must_use]
pub fn slot_of(sequence: u64, cycle_length: u32) -> u32 {
    let slot = sequence % u64::from(cycle_length.max(1));
    // Below L, which is a u32, so it always fits.
    u32::try_from(slot).unwrap_or(0)
}

/// What one reservation picks ([`WeightedFairnessPolicy::pick`]): its
/// sequence, its slot (`sequence mod L`), and the tenant the cycle stores
/// for the slot, with that tenant's index in
/// [`WeightedFairnessPolicy::tenants`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick<'a> {
    sequence: u64,
    slot: u32,
    tenant_index: usize,
    tenant: &'a TenantId,
}

impl<'a> Pick<'a> {
    /// The reservation's sequence.
    #[must_use]
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The slot, `sequence mod L`, in `0..L`.
    #[must_use]
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The picked tenant's index in [`WeightedFairnessPolicy::tenants`]
    /// (as stored in the cycle).
    #[must_use]
    pub fn tenant_index(&self) -> usize {
        self.tenant_index
    }

    /// The picked tenant.
    #[must_use]
    pub fn tenant(&self) -> &'a TenantId {
        self.tenant
    }
}

/// The tenants and weights of one shard plus the algorithm, compiled into a
/// cycle; immutable.
///
/// Building a policy validates it (1..=1024 unique tenants, weights summing
/// to a cycle length `L` of at most 4096 slots), sorts the tenants by id (so
/// the input order never matters), compiles the cycle once, checks that each
/// tenant appears exactly `weight` times, measures every tenant's
/// [`TenantStarvationBound`] and computes the canonical bytes and digest.
///
/// Slot `s` of the cycle (`0..L`) decides which tenant gets the reservation
/// with sequence `n` when `s = n mod L`. A tenant of weight `w` gets exactly
/// `w` of every `L` consecutive slots: a share of scheduling opportunities,
/// not of CPU time, tokens or completed runs.
///
/// ```
/// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let a = TenantId::try_from("tenant-a")?;
/// let b = TenantId::try_from("tenant-b")?;
/// // Input order does not matter: tenants are sorted by id.
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(b.clone(), 1)?, TenantFairnessWeight::new(a.clone(), 3)?],
/// )?;
/// assert_eq!(policy.cycle().iter().collect::<Vec<_>>(), [&a, &a, &b, &a]);
/// assert_eq!(policy.cycle_length(), 4);
/// assert_eq!(policy.tenant_for_slot(2), Some(&b));
/// assert_eq!(policy.entitled_share(&a), Some((3, 4)));
/// assert_eq!(
///     policy.canonical_bytes(),
///     br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#,
/// );
/// let decoded = WeightedFairnessPolicy::decode(policy.shard_id().clone(), policy.canonical_bytes())?;
/// assert_eq!(decoded, policy);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct WeightedFairnessPolicy {
    shard: SchedulerShardId,
    algorithm: PolicyAlgorithm,
    /// Sorted by tenant id, unique.
    tenants: Vec<TenantFairnessWeight>,
    /// For each slot, an index into `tenants`.
    cycle: Vec<u16>,
    /// For each tenant index, the measured largest circular gap.
    bounds: Vec<u32>,
    cycle_length: u32,
    canonical: Vec<u8>,
    digest: PolicyDigest,
    cycle_digest: CycleDigest,
    optimality: CycleOptimality,
    /// Slots (the default) or cost.
    fairness: FairnessUnit,
}

impl WeightedFairnessPolicy {
    /// Builds and compiles the policy of `shard` with the `swrr-v1`
    /// algorithm.
    ///
    /// # Errors
    ///
    /// See [`with_algorithm`](Self::with_algorithm).
    pub fn new(
        shard: SchedulerShardId,
        weights: impl IntoIterator<Item = TenantFairnessWeight>,
    ) -> Result<Self, PolicyError> {
        Self::with_algorithm(shard, PolicyAlgorithm::SwrrV1, weights)
    }

    /// Builds and compiles the policy of `shard` with `algorithm`.
    ///
    /// # Errors
    ///
    /// Checked in this order:
    /// - [`PolicyError::NoTenants`] if `weights` is empty;
    /// - [`PolicyError::TooManyTenants`] for more than [`MAX_TENANTS`] (1024);
    /// - [`PolicyError::DuplicateTenant`] if a tenant is given twice (the
    ///   smallest such id);
    /// - [`PolicyError::CycleTooLong`] if the weights sum to more than
    ///   [`MAX_CYCLE_LENGTH`] (4096) slots;
    /// - [`PolicyError::CycleInvariantViolated`] if the compiled cycle does
    ///   not pick every tenant exactly `weight` times (a bug, never expected).
    pub fn with_algorithm(
        shard: SchedulerShardId,
        algorithm: PolicyAlgorithm,
        weights: impl IntoIterator<Item = TenantFairnessWeight>,
    ) -> Result<Self, PolicyError> {
        let mut tenants = Vec::new();
        let mut beyond_limit = 0_usize;
        for weight in weights {
            if tenants.len() < MAX_TENANTS {
                tenants.push(weight);
            } else {
                beyond_limit = beyond_limit.saturating_add(1);
            }
        }
        if tenants.is_empty() {
            return Err(PolicyError::NoTenants);
        }
        if beyond_limit > 0 {
            return Err(PolicyError::TooManyTenants {
                max: MAX_TENANTS,
                actual: MAX_TENANTS.saturating_add(beyond_limit),
            });
        }
        tenants.sort_unstable_by(|a, b| a.tenant().cmp(b.tenant()));
        let duplicate = tenants.windows(2).find_map(|pair| match pair {
            [a, b] if a.tenant() == b.tenant() => Some(a.tenant().clone()),
            _ => None,
        });
        if let Some(tenant) = duplicate {
            return Err(PolicyError::DuplicateTenant { tenant });
        }
        let cycle_length = tenants
            .iter()
            .fold(0_u32, |sum, tenant| sum.saturating_add(tenant.weight()));
        if cycle_length > MAX_CYCLE_LENGTH {
            return Err(PolicyError::CycleTooLong {
                max: MAX_CYCLE_LENGTH,
                actual: cycle_length,
            });
        }
        let compiled = cycle::compile(algorithm, &tenants, cycle_length)?;
        let canonical = canonical::encode(algorithm, &tenants, FairnessUnit::Slots);
        let digest = PolicyDigest::of_canonical_bytes(&canonical);
        let cycle_digest = CycleDigest::of_cycle(algorithm, &compiled.slots);
        Ok(Self {
            shard,
            algorithm,
            tenants,
            cycle: compiled.slots,
            bounds: compiled.bounds,
            optimality: compiled.optimality,
            cycle_length,
            canonical,
            digest,
            cycle_digest,
            fairness: FairnessUnit::Slots,
        })
    }

    /// This policy with its weights sharing `unit` (slots, the default, or
    /// cost: [`FairnessUnit`]). The unit is part of the canonical bytes and
    /// the digest (a slot-mode policy's are those of every policy before
    /// cost mode); the cycle, its digest and the bounds stay the same.
    ///
    /// ```
    /// use statek_policy::{CostFairness, FairnessUnit, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
    /// let slots = WeightedFairnessPolicy::new(
    ///     SchedulerShardId::try_from("primary-v1")?,
    ///     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 1)?],
    /// )?;
    /// let cost = slots.clone().with_fairness(FairnessUnit::Cost(CostFairness::new(1, 40, 40, 80)?));
    /// assert_eq!(
    ///     cost.canonical_bytes(),
    ///     br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":1}],"cost":{"quantum":1,"max_cost":40,"default_cost":40,"balance_cap":80}}"#,
    /// );
    /// assert_ne!(cost.digest(), slots.digest());
    /// assert_eq!(cost.cycle_digest(), slots.cycle_digest());
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    #[must_use]
    pub fn with_fairness(mut self, unit: FairnessUnit) -> Self {
        self.canonical = canonical::encode(self.algorithm, &self.tenants, unit);
        self.digest = PolicyDigest::of_canonical_bytes(&self.canonical);
        self.fairness = unit;
        self
    }

    /// What the weights share: slots or cost.
    #[must_use]
    pub fn fairness(&self) -> FairnessUnit {
        self.fairness
    }

    /// Decodes canonical bytes (as returned by
    /// [`canonical_bytes`](Self::canonical_bytes)) into the policy of `shard`.
    ///
    /// Decoding is strict: the only accepted input is the exact canonical
    /// encoding of a valid policy, so re-encoding the result gives back
    /// `bytes` exactly. Never panics, whatever the input.
    ///
    /// # Errors
    ///
    /// - [`PolicyError::NonCanonicalPolicyBytes`] with the offset of the first
    ///   deviation from canonical form: whitespace, another key order,
    ///   unknown keys, escapes, leading zeros, unsorted tenants, trailing
    ///   bytes, invalid UTF-8 outside an id, …;
    /// - [`PolicyError::UnknownAlgorithm`] for a well-formed but unknown
    ///   algorithm name;
    /// - [`PolicyError::InvalidTenantId`], [`PolicyError::WeightOutOfRange`],
    ///   [`PolicyError::DuplicateTenant`], [`PolicyError::NoTenants`],
    ///   [`PolicyError::TooManyTenants`], [`PolicyError::CycleTooLong`] where
    ///   the bytes are well-formed but the policy they describe is invalid.
    pub fn decode(shard: SchedulerShardId, bytes: &[u8]) -> Result<Self, PolicyError> {
        let decoded = canonical::decode(bytes)?;
        let policy = Self::with_algorithm(shard, decoded.algorithm, decoded.tenants)?
            .with_fairness(decoded.unit);
        // The decoder accepts only canonical input; comparing the re-encoding
        // keeps that true even if the two ever drift apart.
        if let Some(offset) = canonical::first_difference(&policy.canonical, bytes) {
            return Err(PolicyError::NonCanonicalPolicyBytes {
                offset,
                expected: "the canonical encoding",
            });
        }
        Ok(policy)
    }

    /// The shard this policy schedules.
    #[must_use]
    pub fn shard_id(&self) -> &SchedulerShardId {
        &self.shard
    }

    /// The algorithm that compiled the cycle.
    #[must_use]
    pub fn algorithm(&self) -> PolicyAlgorithm {
        self.algorithm
    }

    /// The tenants and their weights, sorted by tenant id; the position of a
    /// tenant here is its tenant index.
    #[must_use]
    pub fn tenants(&self) -> &[TenantFairnessWeight] {
        &self.tenants
    }

    /// The tenant index (position in [`tenants`](Self::tenants)) of `tenant`,
    /// or `None` if it is not in the policy.
    #[must_use]
    pub fn tenant_index(&self, tenant: &TenantId) -> Option<usize> {
        self.tenants
            .binary_search_by(|candidate| candidate.tenant().cmp(tenant))
            .ok()
    }

    /// What is proven about the compiled cycle's largest ratio of bound to
    /// `ceil(L / w)`: ideal, proven optimal by `min-gap-v2`'s exhaustive
    /// search, or unproven and why (a search that ran out of steps is
    /// reported here, never hidden).
    #[must_use]
    pub fn cycle_optimality(&self) -> CycleOptimality {
        self.optimality
    }

    /// The compiled cycle: the tenant picked in each slot `0..L`.
    #[must_use]
    pub fn cycle(&self) -> CycleView<'_> {
        CycleView::new(&self.cycle, &self.tenants)
    }

    /// The cycle as tenant indexes: entry `s` is the index into
    /// [`tenants`](Self::tenants) of the tenant picked in slot `s`.
    #[must_use]
    pub fn cycle_tenant_indexes(&self) -> &[u16] {
        &self.cycle
    }

    /// The cycle length `L` in slots: the sum of the weights, in 1..=4096.
    #[must_use]
    pub fn cycle_length(&self) -> u32 {
        self.cycle_length
    }

    /// The slot a reservation with `sequence` maps to: `sequence mod L`
    /// ([`slot_of`]).
    #[must_use]
    pub fn slot_for_sequence(&self, sequence: u64) -> u32 {
        slot_of(sequence, self.cycle_length)
    }

    /// What the reservation with `sequence` picks: its slot
    /// ([`slot_of`]), and the tenant index and tenant the compiled cycle
    /// stores for that slot, read once (no lookup by tenant id). This is
    /// the one mapping from a sequence to its tenant that statek uses
    /// everywhere (scheduler, monitor); the tenant's bound is then
    /// [`starvation_bound_at`](Self::starvation_bound_at) of the index.
    ///
    /// `None` never happens for a policy built by [`new`](Self::new),
    /// [`with_algorithm`](Self::with_algorithm) or [`decode`](Self::decode)
    /// (every slot of the cycle holds a valid tenant index); it is an
    /// `Option` instead of a panic.
    ///
    /// ```
    /// use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
    /// let policy = WeightedFairnessPolicy::new(
    ///     SchedulerShardId::try_from("primary-v1")?,
    ///     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
    ///      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
    /// )?;
    /// // Cycle a a b a: sequence 6 is slot 2, tenant-b (index 1).
    /// let pick = policy.pick(6).expect("a compiled cycle");
    /// assert_eq!((pick.slot(), pick.tenant_index(), pick.tenant().as_str()), (2, 1, "tenant-b"));
    /// let bound = policy.starvation_bound_at(pick.tenant_index()).expect("an index of the policy");
    /// assert_eq!(bound.maximum_reservations_until_selection(), 4);
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    #[must_use]
    pub fn pick(&self, sequence: u64) -> Option<Pick<'_>> {
        let slot = slot_of(sequence, self.cycle_length);
        let tenant_index = usize::from(*self.cycle.get(usize::try_from(slot).ok()?)?);
        let tenant = self.tenants.get(tenant_index)?.tenant();
        Some(Pick {
            sequence,
            slot,
            tenant_index,
            tenant,
        })
    }

    /// The tenant picked in `slot`, or `None` if `slot >= L`.
    #[must_use]
    pub fn tenant_for_slot(&self, slot: u64) -> Option<&TenantId> {
        self.cycle().get(usize::try_from(slot).ok()?)
    }

    /// The measured starvation bound of `tenant`, or `None` if it is not in
    /// the policy.
    #[must_use]
    pub fn starvation_bound(&self, tenant: &TenantId) -> Option<TenantStarvationBound> {
        self.bound_at(self.tenant_index(tenant)?)
    }

    /// The measured starvation bounds of all tenants, in tenant order.
    pub fn starvation_bounds(&self) -> impl ExactSizeIterator<Item = TenantStarvationBound> + '_ {
        self.tenants
            .iter()
            .zip(&self.bounds)
            .map(|(tenant, &bound)| {
                TenantStarvationBound::new(
                    tenant.tenant().clone(),
                    tenant.weight(),
                    self.cycle_length,
                    bound,
                )
            })
    }

    /// The measured starvation bound of the tenant at `tenant_index` (its
    /// position in [`tenants`](Self::tenants), as [`Pick::tenant_index`]
    /// gives it), or `None` for an index out of range.
    #[must_use]
    pub fn starvation_bound_at(&self, tenant_index: usize) -> Option<TenantStarvationBound> {
        self.bound_at(tenant_index)
    }

    fn bound_at(&self, index: usize) -> Option<TenantStarvationBound> {
        let tenant = self.tenants.get(index)?;
        let bound = self.bounds.get(index)?;
        Some(TenantStarvationBound::new(
            tenant.tenant().clone(),
            tenant.weight(),
            self.cycle_length,
            *bound,
        ))
    }

    /// How far `tenant`'s picks in any run of consecutive slots can stray
    /// from its share of them, measured on the cycle; `None` if it is not
    /// in the policy. One pass over the cycle.
    #[must_use]
    pub fn window_discrepancy(&self, tenant: &TenantId) -> Option<WindowDiscrepancy> {
        let index = self.tenant_index(tenant)?;
        self.window_discrepancies().nth(index)
    }

    /// The window discrepancies of all tenants, in tenant order (one pass
    /// over the cycle for all of them).
    pub fn window_discrepancies(&self) -> impl ExactSizeIterator<Item = WindowDiscrepancy> + '_ {
        let weights: Vec<u32> = self
            .tenants
            .iter()
            .map(TenantFairnessWeight::weight)
            .collect();
        let scaled = crate::discrepancy::measure(&self.cycle, &weights);
        self.tenants.iter().zip(scaled).map(|(tenant, scaled)| {
            WindowDiscrepancy::new(
                tenant.tenant().clone(),
                tenant.weight(),
                self.cycle_length,
                scaled,
            )
        })
    }

    /// In cost mode, every tenant's [`CostBound`] (`B = q·Δ + D·C_max +
    /// b_cap`), in tenant order; `None` in slot mode.
    #[must_use]
    pub fn cost_bounds(&self) -> Option<impl ExactSizeIterator<Item = CostBound> + '_> {
        let cost = *self.fairness.cost()?;
        Some(
            self.window_discrepancies()
                .map(move |discrepancy| CostBound::new(discrepancy, cost)),
        )
    }

    /// The share of slots `tenant` is entitled to, as `(weight, L)`: it is
    /// picked in exactly `weight` of every `L` consecutive slots. `None` if it
    /// is not in the policy.
    #[must_use]
    pub fn entitled_share(&self, tenant: &TenantId) -> Option<(u32, u32)> {
        let weight = self.tenants.get(self.tenant_index(tenant)?)?;
        Some((weight.weight(), self.cycle_length))
    }

    /// The canonical bytes: UTF-8 JSON of the algorithm and the sorted
    /// tenants with fixed key order and no whitespace. The shard id is not
    /// included.
    #[must_use]
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }

    /// The digest: SHA-256 of `statek.policy.v1\0` followed by the canonical
    /// bytes.
    #[must_use]
    pub fn digest(&self) -> PolicyDigest {
        self.digest
    }

    /// The digest of the compiled cycle: SHA-256 over `statek.cycle.v1\0`,
    /// the algorithm's name and a NUL byte, `L` (4 bytes, big-endian) and
    /// each slot's tenant index (2 bytes, big-endian); see [`CycleDigest`].
    ///
    /// A shard stores it at registration, and every replica compares it with
    /// its own compilation before it ticks: the policy digest says which
    /// policy a shard holds, this one that every replica made the same cycle
    /// of it.
    #[must_use]
    pub fn cycle_digest(&self) -> CycleDigest {
        self.cycle_digest
    }
}

impl fmt::Debug for WeightedFairnessPolicy {
    /// Shows the inputs and the digest; the cycle and bytes follow from them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeightedFairnessPolicy")
            .field("shard", &self.shard)
            .field("algorithm", &self.algorithm)
            .field("tenants", &self.tenants)
            .field("cycle_length", &self.cycle_length)
            .field("fairness", &self.fairness)
            .field("digest", &self.digest)
            .field("cycle_digest", &self.cycle_digest)
            .finish_non_exhaustive()
    }
}
