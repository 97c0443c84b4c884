//! [`CycleDigest`]: the SHA-256 fingerprint of a policy's compiled cycle,
//! which every replica checks against the one stored with its shard.

use core::fmt;
use core::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::algorithm::PolicyAlgorithm;
use crate::error::PolicyError;

/// The domain-separation prefix hashed before the cycle: `statek.cycle.v1`
/// followed by one NUL byte.
pub const CYCLE_DIGEST_DOMAIN: &[u8] = b"statek.cycle.v1\0";

/// The SHA-256 digest of a compiled cycle.
///
/// The hashed bytes are, in order:
///
/// 1. [`CYCLE_DIGEST_DOMAIN`] (`statek.cycle.v1` and a NUL byte, 16 bytes);
/// 2. the algorithm's [name](PolicyAlgorithm::name) in ASCII, then one NUL
///    byte;
/// 3. the cycle length `L` as a 4-byte big-endian unsigned integer;
/// 4. for each slot `0..L` in order, the tenant index of its pick (the
///    position in the policy's tenants sorted by id) as a 2-byte big-endian
///    unsigned integer.
///
/// The policy digest binds the tenants and weights; this one binds what
/// this build of the algorithm made of them. Two replicas that compile one
/// policy into different cycles (a changed algorithm, a different build)
/// get different cycle digests, and the shard's stored digest makes the
/// odd one refuse to tick. Displayed and parsed as 64 lowercase hex digits.
///
/// ```
/// use statek_policy::{CycleDigest, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};
/// let policy = WeightedFairnessPolicy::new(
///     SchedulerShardId::try_from("primary-v1")?,
///     [TenantFairnessWeight::new(TenantId::try_from("tenant-a")?, 3)?,
///      TenantFairnessWeight::new(TenantId::try_from("tenant-b")?, 1)?],
/// )?;
/// // printf 'statek.cycle.v1\0swrr-v1\0\0\0\0\4\0\0\0\0\0\1\0\0' | sha256sum
/// assert_eq!(
///     policy.cycle_digest().to_string(),
///     "a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440",
/// );
/// let parsed: CycleDigest = policy.cycle_digest().to_string().parse()?;
/// assert_eq!(parsed, policy.cycle_digest());
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CycleDigest([u8; 32]);

impl CycleDigest {
    /// The length of a digest in bytes.
    pub const LENGTH: usize = 32;

    /// Hashes the cycle `slots` (tenant index per slot) compiled by
    /// `algorithm`.
    pub(crate) fn of_cycle(algorithm: PolicyAlgorithm, slots: &[u16]) -> Self {
        let length = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        let mut hash = Sha256::new()
            .chain_update(CYCLE_DIGEST_DOMAIN)
            .chain_update(algorithm.name().as_bytes())
            .chain_update([0_u8])
            .chain_update(length.to_be_bytes());
        for slot in slots {
            hash.update(slot.to_be_bytes());
        }
        Self(hash.finalize().into())
    }

    /// Wraps 32 raw digest bytes, for example read back from a database.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw digest bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl TryFrom<&[u8]> for CycleDigest {
    type Error = PolicyError;

    /// Copies a 32-byte slice.
    ///
    /// # Errors
    ///
    /// [`PolicyError::InvalidDigestLength`] if the slice is not 32 bytes long.
    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        <[u8; 32]>::try_from(bytes)
            .map(Self)
            .map_err(|_| PolicyError::InvalidDigestLength {
                actual: bytes.len(),
            })
    }
}

impl AsRef<[u8]> for CycleDigest {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for CycleDigest {
    /// 64 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::hex::write_hex(f, &self.0)
    }
}

impl fmt::Debug for CycleDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CycleDigest({self})")
    }
}

impl FromStr for CycleDigest {
    type Err = PolicyError;

    /// Parses exactly 64 lowercase hex digits.
    ///
    /// # Errors
    ///
    /// As [`PolicyDigest`](crate::PolicyDigest)'s parser.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::hex::parse_hex(s).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    fn check(algorithm: PolicyAlgorithm, slots: &[u16], expected: &str) {
        assert_eq!(
            CycleDigest::of_cycle(algorithm, slots).to_string(),
            expected,
            "{algorithm} {slots:?}"
        );
    }

    #[test]
    fn known_digests() {
        // Computed outside this crate with printf … | sha256sum.
        // printf 'statek.cycle.v1\0swrr-v1\0\0\0\0\1\0\0' | sha256sum
        check(PolicyAlgorithm::SwrrV1, &[0], SINGLE);
        // The algorithm's name is hashed: the same slots, another digest.
        assert_ne!(
            CycleDigest::of_cycle(PolicyAlgorithm::MinGapV1, &[0]).to_string(),
            SINGLE
        );
        // Slot order is hashed.
        assert_ne!(
            CycleDigest::of_cycle(PolicyAlgorithm::SwrrV1, &[0, 1]),
            CycleDigest::of_cycle(PolicyAlgorithm::SwrrV1, &[1, 0])
        );
    }

    const SINGLE: &str = "948f2b8f80616abe2e08bb8501defba3455984e35668f299415333120926c10f";

    #[test]
    fn bytes_and_hex() {
        let digest = CycleDigest::of_cycle(PolicyAlgorithm::SwrrV1, &[0, 0, 1, 0]);
        assert_eq!(CycleDigest::try_from(digest.as_ref()), Ok(digest));
        assert_eq!(CycleDigest::from_bytes(*digest.as_bytes()), digest);
        assert_eq!(digest.to_string().parse::<CycleDigest>(), Ok(digest));
        assert_eq!(
            CycleDigest::try_from(&[0_u8; 31][..]),
            Err(PolicyError::InvalidDigestLength { actual: 31 })
        );
        assert_eq!(
            "00".parse::<CycleDigest>(),
            Err(PolicyError::InvalidDigestHexLength { actual: 2 })
        );
    }
}
