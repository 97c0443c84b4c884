//! Weighted fairness policies for statek: tenant and shard ids, weights, the
//! compiled cycle (`swrr-v1` by default, `min-gap-v1` or `min-gap-v2` on
//! request), measured starvation bounds, canonical bytes, the policy digest
//! and the cycle digest, and the [`analysis`] behind the bounds report.
//!
//! statek schedules tenants in one durable, global, weighted order: every
//! scheduling opportunity is a reservation with a gapless sequence number
//! `n`, and slot `n mod L` of a shard's cycle decides which tenant gets it.
//! This crate is the pure part of that: it validates a
//! [`WeightedFairnessPolicy`], compiles its cycle once, measures each tenant's
//! [`TenantStarvationBound`] on the compiled cycle, and produces the
//! canonical bytes and [`PolicyDigest`] that bind a policy to a shard in the
//! database. It does no I/O, reads no clock and uses no randomness; the same
//! input always gives the same cycle, bytes and digest.
//!
//! # Example
//!
//! Compile a policy and read a tenant's bound (the same code builds as
//! `crates/statek-examples/examples/starvation_bound.rs`):
//!
//! ```rust
//! use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tenant_a = TenantId::try_from("tenant-a")?;
//! let tenant_b = TenantId::try_from("tenant-b")?;
//!
//! let policy = WeightedFairnessPolicy::new(
//!     SchedulerShardId::try_from("primary-v1")?,
//!     [
//!         TenantFairnessWeight::new(tenant_a, 3)?,
//!         TenantFairnessWeight::new(tenant_b.clone(), 1)?,
//!     ],
//! )?;
//!
//! let bound = policy
//!     .starvation_bound(&tenant_b)
//!     .expect("tenant-b was registered in this policy");
//!
//! assert!(bound.maximum_reservations_until_selection() <= 4);
//! # Ok(()) }
//! ```
//!
//! # What the guarantee is, and what it is not
//!
//! - A tenant of weight `w` in a cycle of length `L` (the sum of all
//!   weights) is picked in exactly `w` of every `L` consecutive slots. That
//!   is a share of **scheduling opportunities (slots)**: not of CPU time,
//!   tokens, money or completed runs. A tenant with nothing to run wastes
//!   its slot; a tenant with a long run still gets only its slots.
//! - The starvation bound counts **reservations, not seconds**: from any
//!   point in the sequence a tenant is picked within
//!   [`maximum_reservations_until_selection`](TenantStarvationBound::maximum_reservations_until_selection)
//!   reservations. How long that takes depends on how fast replicas
//!   reserve.
//! - Bounds are **measured** on the compiled cycle (the largest circular gap
//!   between two picks of a tenant), never derived from a formula: with
//!   smooth weighted round robin a gap can exceed `ceil(L / w)`. For example
//!   `a:5, b:2, c:1` compiles to `a b a a c a b a`, where `b` waits up to 5
//!   slots although `ceil(8 / 2) = 4`.
//!
//! # Across a rollout
//!
//! A policy change needs a new shard; the shards that succeed each other
//! form one [`ScheduleId`]'s chain. [`PolicySeam`] gives each tenant's exact
//! gap in reservations across the seam where a sealed shard's sequences end
//! and its successor's begin, for any seal point and in the worst case.
//!
//! # Algorithms
//!
//! The [`PolicyAlgorithm`] is part of the policy, its canonical bytes and
//! its digest, so changing it means a new shard like any other policy
//! change.
//!
//! - `swrr-v1` (the default): smooth weighted round robin. A bound can
//!   approach twice `ceil(L / w)`: one weight-2 tenant among 1,022 weight-1
//!   tenants waits up to 1,023 reservations.
//! - `min-gap-v1` (opt-in, [`WeightedFairnessPolicy::with_algorithm`] or
//!   `algorithm = "min-gap-v1"` in a policy file): the best of `swrr-v1`,
//!   class SWRR and a window schedule by the largest ratio of bound to
//!   `ceil(L / w)`; never worse than `swrr-v1` by that measure, 512 in the
//!   example above.
//! - `min-gap-v2` (opt-in, likewise): `min-gap-v1`, replaced only by a
//!   verified cycle with a strictly smaller largest ratio: the exact optimum
//!   for `L <= 16` (a search limited in steps, never in time) or paced
//!   earliest-deadline-first; never worse than `min-gap-v1` by that measure.
//!
//! Each policy also has a [`CycleDigest`] of its compiled cycle: a shard
//! stores it at registration, and every replica checks its own compilation
//! against it before it ticks.
//!
//! ```rust
//! use statek_policy::{PolicyAlgorithm, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
//! # fn main() -> Result<(), statek_policy::PolicyError> {
//! let mut tenants = vec![TenantFairnessWeight::new(TenantId::try_from("heavy")?, 2)?];
//! for i in 0..1022 {
//!     tenants.push(TenantFairnessWeight::new(TenantId::try_from(format!("light-{i:04}"))?, 1)?);
//! }
//! let shard = SchedulerShardId::try_from("primary-v1")?;
//! let swrr = WeightedFairnessPolicy::new(shard.clone(), tenants.clone())?;
//! let min_gap = WeightedFairnessPolicy::with_algorithm(shard, PolicyAlgorithm::MinGapV1, tenants)?;
//! let heavy = TenantId::try_from("heavy")?;
//! let bound = |policy: &WeightedFairnessPolicy| {
//!     policy.starvation_bound(&heavy).map(|b| b.maximum_reservations_until_selection())
//! };
//! assert_eq!((bound(&swrr), bound(&min_gap)), (Some(1023), Some(512)));
//! assert_ne!(swrr.digest(), min_gap.digest());
//! # Ok(()) }
//! ```
//!
//! # Limits
//!
//! Ids are 1..=[`MAX_ID_LENGTH`] (128) bytes of ASCII `[A-Za-z0-9._:-]`, not
//! `.` or `..`. Weights are [`MIN_WEIGHT`]..=[`MAX_WEIGHT`] (1..=1024). A
//! policy has 1..=[`MAX_TENANTS`] (1024) tenants and a cycle of at most
//! [`MAX_CYCLE_LENGTH`] (4096) slots.
//!
//! # Features
//!
//! - `std` (default): implements `std::error::Error` through `thiserror/std`.
//!   Without it the crate is `#![no_std]` and needs only `alloc`
//!   (`core::error::Error` is still implemented).
//! - `toml`: the `policy_file` module, which parses operator-written TOML
//!   policy files with errors that name the file, line, column and field.
//!   Implies `std`.

#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

mod algorithm;
pub mod analysis;
mod bound;
mod canonical;
mod class;
mod cost_bound;
mod cost_ledger;
mod cycle;
mod cycle_digest;
mod cycle_length;
mod digest;
mod discrepancy;
mod echo;
mod error;
mod fairness_unit;
mod hex;
mod id;
mod id_parse;
mod measure;
mod min_gap;
mod min_gap_v2;
mod optimality;
mod optimum;
mod paced_edf;
mod policy;
#[cfg(feature = "toml")]
pub mod policy_file;
#[cfg(feature = "toml")]
mod policy_file_tree;
mod ratio;
mod seam;
mod swrr;
mod swrr_properties;
#[cfg(test)]
mod test_support;
mod weight;
mod window;

pub use algorithm::PolicyAlgorithm;
pub use bound::TenantStarvationBound;
pub use cost_bound::{CostBound, CostSeamBound};
pub use cost_ledger::{CostLedger, SlotCredit};
pub use cycle::{CycleTenants, CycleView};
pub use cycle_digest::{CycleDigest, CYCLE_DIGEST_DOMAIN};
pub use cycle_length::MAX_CYCLE_LENGTH;
pub use digest::{PolicyDigest, POLICY_DIGEST_DOMAIN};
pub use discrepancy::WindowDiscrepancy;
pub use echo::{EchoedValue, MAX_ECHOED_CHARS};
pub use error::PolicyError;
pub use fairness_unit::{CostFairness, FairnessUnit, MAX_COST_PARAMETER};
pub use id::{IdError, ScheduleId, SchedulerShardId, TenantId, MAX_ID_LENGTH};
pub use optimality::{CycleOptimality, UnprovenReason};
pub use policy::{slot_of, Pick, WeightedFairnessPolicy, MAX_TENANTS};
#[cfg(feature = "toml")]
pub use policy_file::{PolicyFile, PolicyFileError, PolicyFileLocation};
pub use seam::{PolicySeam, SeamBound};
pub use weight::{TenantFairnessWeight, MAX_WEIGHT, MIN_WEIGHT};

/// The raw SWRR kernels, for the crate's benchmarks (`cargo bench -p
/// statek-policy`). Not a stable API: use [`WeightedFairnessPolicy`].
#[doc(hidden)]
pub mod bench_kernels {
    use alloc::vec::Vec;

    /// The SWRR cycle over `weights` (summing to `length`) by the plain loop.
    #[must_use]
    pub fn swrr_reference(weights: &[u32], length: u32) -> Vec<u16> {
        crate::swrr::swrr_reference(weights, length)
    }

    /// The same cycle by the loop grouped by weight.
    #[must_use]
    pub fn swrr_grouped(weights: &[u32], length: u32) -> Vec<u16> {
        crate::swrr::swrr_grouped(weights, length)
    }

    /// The same cycle by whichever of the two is cheaper for `weights`
    /// (what policy compilation uses).
    #[must_use]
    pub fn swrr(weights: &[u32], length: u32) -> Vec<u16> {
        crate::swrr::swrr(weights, length)
    }
}
