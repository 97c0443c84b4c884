//! The crate's error type, [`PolicyError`].

use alloc::string::String;

use crate::id::{IdError, TenantId};

/// Everything that can go wrong while building, compiling, decoding or
/// digesting a policy.
///
/// Every error is permanent: retrying the same call with the same input gives
/// the same error. Match on variants, never on the message text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A tenant id does not follow the id grammar.
    #[error("invalid tenant id: {reason}")]
    InvalidTenantId {
        /// The rule the id broke.
        reason: IdError,
    },
    /// A scheduler shard id does not follow the id grammar.
    #[error("invalid shard id: {reason}")]
    InvalidShardId {
        /// The rule the id broke.
        reason: IdError,
    },
    /// A schedule id does not follow the id grammar.
    #[error("invalid schedule id: {reason}")]
    InvalidScheduleId {
        /// The rule the id broke.
        reason: IdError,
    },
    /// A tenant's weight is outside `min..=max` (1..=1024).
    #[error("weight {weight} of tenant {tenant} is out of range {min}..={max}")]
    WeightOutOfRange {
        /// The tenant the weight was given for.
        tenant: TenantId,
        /// The rejected weight.
        weight: u32,
        /// The smallest allowed weight ([`MIN_WEIGHT`](crate::MIN_WEIGHT)).
        min: u32,
        /// The largest allowed weight ([`MAX_WEIGHT`](crate::MAX_WEIGHT)).
        max: u32,
    },
    /// A policy was given no tenants.
    #[error("a policy needs at least one tenant")]
    NoTenants,
    /// A policy was given more than `max` (1024) tenants.
    #[error("{actual} tenants is too many, the maximum is {max}")]
    TooManyTenants {
        /// The largest allowed number of tenants ([`MAX_TENANTS`](crate::MAX_TENANTS)).
        max: usize,
        /// The number of tenants given.
        actual: usize,
    },
    /// The same tenant was given more than once.
    #[error("tenant {tenant} is listed more than once")]
    DuplicateTenant {
        /// The repeated tenant.
        tenant: TenantId,
    },
    /// The sum of the weights, which is the cycle length in slots, is larger
    /// than `max` (4096).
    #[error("the weights sum to a cycle of {actual} slots, the maximum is {max}")]
    CycleTooLong {
        /// The largest allowed cycle length in slots
        /// ([`MAX_CYCLE_LENGTH`](crate::MAX_CYCLE_LENGTH)).
        max: u32,
        /// The sum of the given weights.
        actual: u32,
    },
    /// An algorithm name is not one this crate knows. The message quotes
    /// at most 64 characters of it ([`EchoedValue`](crate::EchoedValue)).
    #[error("unknown policy algorithm {}", crate::EchoedValue(name))]
    UnknownAlgorithm {
        /// The rejected name.
        name: String,
    },
    /// Bytes given to [`WeightedFairnessPolicy::decode`](crate::WeightedFairnessPolicy::decode)
    /// deviate from the canonical encoding.
    #[error("policy bytes are not canonical at byte offset {offset}: expected {expected}")]
    NonCanonicalPolicyBytes {
        /// The 0-based byte offset of the first deviation.
        offset: usize,
        /// What the canonical form has at that offset.
        expected: &'static str,
    },
    /// A fairness unit name is not `slots` or `cost`. The message quotes at
    /// most 64 characters of it.
    #[error(
        "unknown fairness unit {} (expected slots or cost)",
        crate::EchoedValue(name)
    )]
    UnknownFairnessUnit {
        /// The rejected name.
        name: String,
    },
    /// A cost-mode parameter is outside its range
    /// ([`CostFairness::new`](crate::CostFairness::new)).
    #[error("cost parameter {parameter} = {value} is out of range {min}..={max}")]
    CostParameterOutOfRange {
        /// `quantum`, `max_cost`, `default_cost` or `balance_cap`.
        parameter: &'static str,
        /// The rejected value.
        value: u64,
        /// The smallest allowed value.
        min: u64,
        /// The largest allowed value.
        max: u64,
    },
    /// A compiled cycle does not pick a tenant exactly `weight` times.
    ///
    /// This is an internal error: it means the compiler is broken, never
    /// that the input is wrong.
    #[error(
        "compiled cycle picks tenant {tenant} {actual} times instead of its weight {expected}"
    )]
    CycleInvariantViolated {
        /// The tenant whose count is wrong.
        tenant: TenantId,
        /// The tenant's weight.
        expected: u32,
        /// How often the compiled cycle picks it.
        actual: u32,
    },
    /// A digest was built from a byte slice that is not 32 bytes long.
    #[error("a policy digest is 32 bytes, got {actual}")]
    InvalidDigestLength {
        /// The length of the rejected slice in bytes.
        actual: usize,
    },
    /// A digest was parsed from text that is not 64 lowercase hex digits.
    #[error("a policy digest is 64 lowercase hex digits, got {actual} bytes")]
    InvalidDigestHexLength {
        /// The length of the rejected text in bytes.
        actual: usize,
    },
    /// A digest was parsed from text with a byte that is not a lowercase hex
    /// digit.
    #[error("a policy digest is lowercase hex, got byte 0x{byte:02x} at index {index}")]
    InvalidDigestHex {
        /// The 0-based index of the first bad byte.
        index: usize,
        /// The bad byte.
        byte: u8,
    },
}

impl PolicyError {
    /// Whether retrying the same operation could succeed: never, since a
    /// policy error depends only on its input.
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        false
    }
}
